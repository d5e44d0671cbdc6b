//! `tick`: the scheduler of syncs on AWS (docs/operations.md, "Schedules on AWS"). EventBridge
//! Scheduler invokes it every minute; it runs the schedules due then through the API's job
//! creation, under the API's role. The logic lives in the library.

use fetcher_aws::host::{HostConfig, flush_traces, init_telemetry};
use lambda_http::{Error, LambdaEvent, service_fn};
use serde_json::Value;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    init_telemetry("fetcher-tick").map_err(|e| {
        eprintln!("refusing to start: {e}");
        Error::from(e.to_string())
    })?;
    let config = HostConfig::from_env().map_err(Error::from)?;
    let stack = config.stack_name.clone();
    let sdk = fetcher_aws::sdk_config().await;
    let state = fetcher_fn_api::state_from_config(config, &sdk)
        .await
        .map_err(|e| {
            tracing::error!(error = %e, "refusing to start");
            Error::from(e)
        })?;
    lambda_http::lambda_runtime::run(service_fn(move |_: LambdaEvent<Value>| {
        let (state, stack) = (state.clone(), stack.clone());
        async move {
            let answer = fetcher_fn_api::tick(&state, &stack, fetcher_engine::Timestamp::now())
                .await
                .map_err(Error::from);
            flush_traces().await;
            answer
        }
    }))
    .await
}
