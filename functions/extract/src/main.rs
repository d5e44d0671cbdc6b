//! `extract`: the extraction Lambda (SQS event source with ReportBatchItemFailures, and a
//! schedule for the event repair pass). The logic lives in the library.

// The runtime's future nests the whole handler (batch → record → pipeline → engine): its
// layout needs more than the default 128 levels of query depth to compute.
#![recursion_limit = "256"]

use std::sync::Arc;

use fetcher_aws::host::{HostConfig, flush_traces, init_telemetry};
use lambda_runtime::{Error, LambdaEvent, service_fn};
use serde_json::Value;

// Each SQS message is isolated with catch_unwind; under `panic = "abort"` one panicking
// message would take the whole batch down with it. (`cargo lambda build --release`
// defaults to abort unless the profile says otherwise; the workspace profile does.)
#[cfg(panic = "abort")]
compile_error!("the extract function must be built with panic = \"unwind\"");

// A worker thread per vCPU: reading, encoding and sealing a result run as separate tasks,
// and a partitioned read (FETCHER_READ_PARTITIONS) decodes on several connections, so a
// function with more memory (and so more vCPUs) overlaps them instead of taking turns.
fn main() -> Result<(), Error> {
    fetcher_fn_extract::one_malloc_arena();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(run())
}

async fn run() -> Result<(), Error> {
    init_telemetry("fetcher-extract").map_err(|e| {
        eprintln!("refusing to start: {e}");
        Error::from(e.to_string())
    })?;
    let config = HostConfig::from_env().map_err(Error::from)?;
    let sdk = fetcher_aws::sdk_config().await;
    let extractor = fetcher_fn_extract::from_config(config, &sdk).map_err(|e| {
        tracing::error!(error = %e, "refusing to start");
        Error::from(e)
    })?;
    extractor.verify_master_key().await.map_err(|e| {
        tracing::error!(error = %e, "refusing to start");
        Error::from(e)
    })?;
    let extractor = Arc::new(extractor);
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| {
        let extractor = extractor.clone();
        let deadline = fetcher_fn_extract::run_deadline(event.context.deadline);
        async move {
            let answer = extractor.invoke(event.payload, deadline).await;
            flush_traces().await;
            Ok::<Value, Error>(answer)
        }
    }))
    .await
}
