//! Two master-key rotations under warm functions: the `api` and `extract` handlers are
//! built once (warm containers) with a one-second key refresh, and after each rotation
//! new work (stored credentials, signed job messages, sealed results) is under the new
//! version while everything made before stays readable (moto, or LocalStack with DynamoDB
//! on moto).

use std::sync::Arc;
use std::time::Duration;

use fetcher_aws::bootstrap::rotate_master_key;
use fetcher_aws::host::HostConfig;
use fetcher_crypto::{KeyPurpose, KeyRing, MessageSigner};
use fetcher_e2e::*;
use fetcher_host::model::JobStatus;
use serde_json::json;

const DB: &str = "fetcher_lambda_rotation";

/// What one phase made: its connection, its job, and the key versions that covered them.
struct Made {
    connection_id: String,
    job_id: String,
    credential_version: String,
    message_version: String,
    result_version: String,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_rotations_under_warm_functions_keep_everything_readable() {
    create_database(DB);
    psql(
        DB,
        "DROP TABLE IF EXISTS t; CREATE TABLE t (id bigint PRIMARY KEY, name text NOT NULL); \
         INSERT INTO t VALUES (1, 'ada'), (2, 'grace');",
    );
    // Built once: both stay warm across the rotations.
    let h = Handlers::start("fetcher-rotation", |cfg| HostConfig {
        key_refresh: Duration::from_secs(1),
        ..cfg
    })
    .await;
    let (c, r, extractor) = (&h.clients, &h.resources, h.extractor.clone());
    let current = || async {
        KeyRing::load(&extractor.key_source)
            .await
            .expect("the secret's keys")
            .current_version()
            .to_owned()
    };

    let mut made: Vec<Made> = Vec::new();
    for phase in 0..3 {
        if phase > 0 {
            rotate_master_key(c, r).await.expect("rotate");
            // Past the refresh: the warm functions load the keys afresh on next use.
            tokio::time::sleep(Duration::from_millis(1500)).await;
        }
        let version = current().await;
        let name = format!("rot{phase}");
        let (status, conn) = h.call(
            "POST",
            "/v1/management/connections",
            Some(json!({"configName": name, "type": "POSTGRESQL", "host": "127.0.0.1", "port": 5432, "databaseName": DB, "userName": "postgres", "password": "x"})),
        )
        .await;
        assert_eq!(status, 201, "{conn}");
        let (job, m) = h
            .run_job(
                json!({"dataRequest": {"mappedFields": {name.clone(): {"t": ["id", "name"]}}},
                "metadata": {"source": "lambda"}}),
            )
            .await;
        let job_id = job.id;
        assert_eq!(job.status, JobStatus::Completed, "{:?}", job.error);
        let credential = fetcher_engine::ports::ConnectionStore::credential(
            &extractor.store,
            &fetcher_engine::Context::background(),
            &fetcher_engine::TenantContext::new("default").unwrap(),
            &name,
        )
        .await
        .unwrap()
        .expect("credential")
        .key_version;
        made.push(Made {
            connection_id: conn["id"].as_str().unwrap().to_owned(),
            job_id: job_id.to_string(),
            credential_version: credential,
            message_version: signed_with(&extractor, &m).await,
            result_version: job.result.unwrap().key_version,
        });
        let last = made.last().unwrap();
        assert_eq!(
            (
                last.credential_version.as_str(),
                last.message_version.as_str(),
                last.result_version.as_str()
            ),
            (version.as_str(), version.as_str(), version.as_str()),
            "phase {phase}: new work is under the current version"
        );
    }
    let versions: Vec<&str> = made.iter().map(|m| m.result_version.as_str()).collect();
    assert!(
        versions[0] != versions[1] && versions[1] != versions[2],
        "{versions:?}"
    );

    // Everything made under every version is still readable by the warm functions.
    let ring = extractor.pipeline.keys.key_ring().await.unwrap();
    for m in &made {
        let (status, tested) = h
            .call(
                "POST",
                &format!("/v1/management/connections/{}/test", m.connection_id),
                None,
            )
            .await;
        assert_eq!(status, 200, "{tested}");
        let (_, got) = h
            .call("GET", &format!("/v1/fetcher/{}", m.job_id), None)
            .await;
        let path = got["resultPath"].as_str().unwrap();
        let object =
            c.s3.get_object()
                .bucket(&r.bucket)
                .key(path)
                .send()
                .await
                .unwrap()
                .body
                .collect()
                .await
                .unwrap()
                .into_bytes();
        let plain = fetcher_crypto::open_sealed(
            &ring,
            &object,
            Some(&m.job_id),
            got["resultHmac"].as_str(),
        )
        .expect("a result sealed before the rotations opens");
        assert!(
            String::from_utf8_lossy(&plain).contains("grace"),
            "the rows are there"
        );
    }
}

/// The key version whose internal HMAC key signed `m`.
async fn signed_with(extractor: &fetcher_fn_extract::Extractor, m: &aws_like::Message) -> String {
    let ring: Arc<KeyRing> = extractor.pipeline.keys.key_ring().await.unwrap();
    let signer = MessageSigner::from_ring(&ring, KeyPurpose::InternalHmac);
    let msg = fetcher_aws::sqs::queue_message(
        &m.body,
        m.attributes
            .iter()
            .map(|(k, v)| (k.as_str(), Some(v.as_str()))),
    );
    fetcher_host::message::authentic(&msg, &signer)
        .expect("an authentic message")
        .key_version
}
