//! Creates the resources `template.yaml` declares, for moto / LocalStack runs and tests:
//! the table, the bucket, the job queue and its DLQ, a KMS key, the secret holding the
//! KMS-encrypted master key, the event bus, and a rule delivering every Fetcher event to
//! a subscriber queue, with the rule's retry policy, its DLQ, and the queue policy that
//! lets EventBridge (and only this rule) send to both queues. Idempotent: existing
//! resources are reused.

use std::collections::HashMap;

use aws_sdk_eventbridge::types::{DeadLetterConfig, RetryPolicy, Target};
use aws_sdk_kms::types::DataKeySpec;
use aws_sdk_sqs::types::QueueAttributeName;
use base64::Engine;
use fetcher_host::error::{Result, ServiceError};
use serde::{Deserialize, Serialize};

use crate::{Clients, DynamoStore};

/// Names and addresses of the created resources.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Resources {
    pub table: String,
    pub bucket: String,
    pub queue_url: String,
    pub dlq_url: String,
    pub kms_key_id: String,
    pub secret_id: String,
    pub bus_name: String,
    pub event_source: String,
    pub subscriber_queue_url: String,
    /// The rule delivering job events to the subscriber queue.
    pub rule_name: String,
    /// Where EventBridge puts events it could not deliver to the subscriber.
    pub events_dlq_url: String,
}

/// Options of [`bootstrap`].
#[derive(Debug, Clone)]
pub struct Options {
    /// Prefix of every resource name (lowercase, digits, `-`).
    pub prefix: String,
    /// The event `Source` the rule matches.
    pub event_source: String,
    /// Job-queue visibility timeout (≥ 6 × the extract function's timeout in AWS).
    pub visibility_timeout_secs: u32,
    /// Receives before a message moves to the DLQ.
    pub max_receive_count: u32,
}

impl Options {
    pub fn new(prefix: impl Into<String>) -> Options {
        Options {
            prefix: prefix.into(),
            event_source: crate::events::DEFAULT_SOURCE.to_owned(),
            visibility_timeout_secs: 30,
            max_receive_count: 5,
        }
    }
}

fn fail<E>(what: &'static str) -> impl FnOnce(E) -> ServiceError
where
    E: std::error::Error + Send + Sync + 'static,
{
    move |e| ServiceError::unavailable(what).with_cause(e)
}

async fn queue(
    c: &Clients,
    name: &str,
    attrs: HashMap<QueueAttributeName, String>,
) -> Result<(String, String)> {
    // Attributes are set after creation: CreateQueue with attributes that differ from an
    // existing queue's fails, and bootstrap must stay idempotent.
    let url = c
        .sqs
        .create_queue()
        .queue_name(name)
        .send()
        .await
        .map_err(fail("create queue"))?
        .queue_url
        .unwrap_or_default();
    if !attrs.is_empty() {
        c.sqs
            .set_queue_attributes()
            .queue_url(&url)
            .set_attributes(Some(attrs))
            .send()
            .await
            .map_err(fail("queue attributes"))?;
    }
    let arn = c
        .sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .map_err(fail("queue attributes"))?
        .attributes
        .and_then(|mut a| a.remove(&QueueAttributeName::QueueArn))
        .unwrap_or_default();
    Ok((url, arn))
}

/// Creates (or finds) every resource.
pub async fn bootstrap(c: &Clients, o: &Options) -> Result<Resources> {
    let p = &o.prefix;
    let table = format!("{p}-store");
    DynamoStore::new(c.dynamodb.clone(), &table)
        .create_table()
        .await?;

    let bucket = format!("{p}-results");
    if let Err(e) = c.s3.create_bucket().bucket(&bucket).send().await {
        let owned = e
            .as_service_error()
            .is_some_and(|e| e.is_bucket_already_owned_by_you() || e.is_bucket_already_exists());
        if !owned {
            return Err(fail("create bucket")(e));
        }
    }

    let (dlq_url, dlq_arn) = queue(c, &format!("{p}-jobs-dlq"), retention()).await?;
    let redrive = serde_json::json!({
        "deadLetterTargetArn": dlq_arn,
        "maxReceiveCount": o.max_receive_count.to_string(),
    });
    let (queue_url, _) = queue(
        c,
        &format!("{p}-jobs"),
        HashMap::from([
            (QueueAttributeName::RedrivePolicy, redrive.to_string()),
            (
                QueueAttributeName::VisibilityTimeout,
                o.visibility_timeout_secs.to_string(),
            ),
            // As the template: the queue keeps a message as long as it can be trusted
            // (the functions' default maximum message age).
            (
                QueueAttributeName::MessageRetentionPeriod,
                (6 * 3600).to_string(),
            ),
        ]),
    )
    .await?;

    // The KMS key (found by alias) and the secret holding the encrypted master key.
    let alias = format!("alias/{p}-master");
    let kms_key_id = match c.kms.describe_key().key_id(&alias).send().await {
        Ok(out) => out.key_metadata.map(|m| m.key_id).unwrap_or_default(),
        Err(_) => {
            let id = c
                .kms
                .create_key()
                .description("Fetcher master key encryption")
                .send()
                .await
                .map_err(fail("create KMS key"))?
                .key_metadata
                .map(|m| m.key_id)
                .unwrap_or_default();
            c.kms
                .create_alias()
                .alias_name(&alias)
                .target_key_id(&id)
                .send()
                .await
                .map_err(fail("create KMS alias"))?;
            id
        }
    };
    let secret_id = format!("{p}/master-key");
    if c.secrets
        .describe_secret()
        .secret_id(&secret_id)
        .send()
        .await
        .is_err()
    {
        let blob = new_encrypted_master_key(c, &kms_key_id).await?;
        let created = c
            .secrets
            .create_secret()
            .name(&secret_id)
            .kms_key_id(&kms_key_id)
            .secret_string(blob)
            .send()
            .await
            .map_err(fail("create secret"))?;
        if let Some(version) = created.version_id() {
            keep_version(c, &secret_id, version).await?;
        }
    }

    // The bus, and a rule delivering Fetcher's events to a subscriber queue.
    let bus_name = format!("{p}-events");
    if c.events
        .describe_event_bus()
        .name(&bus_name)
        .send()
        .await
        .is_err()
    {
        c.events
            .create_event_bus()
            .name(&bus_name)
            .send()
            .await
            .map_err(fail("create event bus"))?;
    }
    let (subscriber_queue_url, subscriber_arn) =
        queue(c, &format!("{p}-subscriber"), HashMap::new()).await?;
    let (events_dlq_url, events_dlq_arn) =
        queue(c, &format!("{p}-events-dlq"), retention()).await?;
    let rule = format!("{p}-job-events");
    let rule_arn = c
        .events
        .put_rule()
        .name(&rule)
        .event_bus_name(&bus_name)
        .event_pattern(
            serde_json::json!({
                "source": [o.event_source],
                "detail-type": ["job.completed", "job.failed"],
            })
            .to_string(),
        )
        .send()
        .await
        .map_err(fail("put rule"))?
        .rule_arn
        .ok_or_else(|| ServiceError::unavailable("PutRule returned no rule ARN"))?;
    // As the template's ExampleSubscriberQueuePolicy: EventBridge may send to the
    // subscriber and to the DLQ, on behalf of this rule only.
    for (url, arn) in [
        (&subscriber_queue_url, &subscriber_arn),
        (&events_dlq_url, &events_dlq_arn),
    ] {
        let policy = serde_json::json!({
            "Version": "2012-10-17",
            "Statement": [{
                "Effect": "Allow",
                "Principal": {"Service": "events.amazonaws.com"},
                "Action": "sqs:SendMessage",
                "Resource": arn,
                "Condition": {"ArnEquals": {"aws:SourceArn": rule_arn}},
            }],
        });
        c.sqs
            .set_queue_attributes()
            .queue_url(url)
            .attributes(QueueAttributeName::Policy, policy.to_string())
            .send()
            .await
            .map_err(fail("queue policy"))?;
    }
    c.events
        .put_targets()
        .rule(&rule)
        .event_bus_name(&bus_name)
        .targets(
            Target::builder()
                .id("subscriber")
                .arn(subscriber_arn)
                .dead_letter_config(DeadLetterConfig::builder().arn(events_dlq_arn).build())
                .retry_policy(
                    RetryPolicy::builder()
                        .maximum_retry_attempts(185)
                        .maximum_event_age_in_seconds(86_400)
                        .build(),
                )
                .build()
                .map_err(fail("rule target"))?,
        )
        .send()
        .await
        .map_err(fail("put targets"))?;

    Ok(Resources {
        table,
        bucket,
        queue_url,
        dlq_url,
        kms_key_id,
        secret_id,
        bus_name,
        event_source: o.event_source.clone(),
        subscriber_queue_url,
        rule_name: rule,
        events_dlq_url,
    })
}

/// Fourteen days, as the template's dead-letter queues.
fn retention() -> HashMap<QueueAttributeName, String> {
    HashMap::from([(
        QueueAttributeName::MessageRetentionPeriod,
        "1209600".to_owned(),
    )])
}

/// A new 32-byte master key from KMS (`GenerateDataKey`), returned as the Base64 of its
/// `CiphertextBlob`: the secret's value. The plaintext never leaves KMS here.
pub async fn new_encrypted_master_key(c: &Clients, kms_key_id: &str) -> Result<String> {
    let out = c
        .kms
        .generate_data_key()
        .key_id(kms_key_id)
        .key_spec(DataKeySpec::Aes256)
        .encryption_context(
            crate::keys::ENCRYPTION_CONTEXT.0,
            crate::keys::ENCRYPTION_CONTEXT.1,
        )
        .send()
        .await
        .map_err(fail("generate master key"))?;
    let blob = out
        .ciphertext_blob
        .ok_or_else(|| ServiceError::unavailable("KMS returned no ciphertext"))?;
    Ok(base64::engine::general_purpose::STANDARD.encode(blob.as_ref()))
}

/// Rotates the master key: a new secret version (it becomes `AWSCURRENT`, the old one
/// `AWSPREVIOUS`). Returns the new version id.
pub async fn rotate_master_key(c: &Clients, r: &Resources) -> Result<String> {
    // The current version's id from the stage map: no need to fetch the key itself.
    let stages = c
        .secrets
        .describe_secret()
        .secret_id(&r.secret_id)
        .send()
        .await
        .map_err(fail("read the current master key version"))?;
    let previous = stages
        .version_ids_to_stages()
        .and_then(|m| {
            m.iter()
                .find(|(_, s)| s.iter().any(|s| s == "AWSCURRENT"))
                .map(|(id, _)| id.clone())
        })
        .unwrap_or_default();
    let blob = new_encrypted_master_key(c, &r.kms_key_id).await?;
    let out = c
        .secrets
        .put_secret_value()
        .secret_id(&r.secret_id)
        .secret_string(blob)
        .send()
        .await
        .map_err(fail("rotate secret"))?;
    let version = out.version_id.unwrap_or_default();
    // The new version, and the previous one again: moto drops the old current version's
    // other labels when it moves AWSCURRENT (real Secrets Manager keeps them).
    keep_version(c, &r.secret_id, &version).await?;
    if !previous.is_empty() {
        keep_version(c, &r.secret_id, &previous).await?;
    }
    Ok(version)
}

/// Labels a master key version `fetcher-key-<version>`: Secrets Manager may delete
/// versions without a staging label (every version but AWSCURRENT and AWSPREVIOUS), and
/// data sealed under it would become unreadable. The README's rotation procedure does
/// the same with the CLI.
pub async fn keep_version(c: &Clients, secret_id: &str, version: &str) -> Result<()> {
    c.secrets
        .update_secret_version_stage()
        .secret_id(secret_id)
        .version_stage(format!("fetcher-key-{version}"))
        .move_to_version_id(version)
        .send()
        .await
        .map_err(fail("label the master key version"))?;
    Ok(())
}
