//! `api`: the API Lambda behind an API Gateway HTTP API. The logic lives in the library.

use fetcher_aws::host::{HostConfig, flush_traces, init_telemetry};
use lambda_http::{Error, Request, service_fn};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    init_telemetry("fetcher-api").map_err(|e| {
        eprintln!("refusing to start: {e}");
        Error::from(e.to_string())
    })?;
    let config = HostConfig::from_env().map_err(Error::from)?;
    let sdk = fetcher_aws::sdk_config().await;
    let router = fetcher_fn_api::router_from_config(config, &sdk)
        .await
        .map_err(|e| {
            tracing::error!(error = %e, "refusing to start");
            Error::from(e)
        })?;
    lambda_http::run(service_fn(move |req: Request| {
        let router = router.clone();
        async move {
            let answer = fetcher_fn_api::handle(router, req).await;
            flush_traces().await;
            answer
        }
    }))
    .await
}
