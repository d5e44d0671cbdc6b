//! The HTTP side of the client commands: one call to the API, with the token and the
//! product header, answered as JSON or as an [`ApiFailure`] that says what the API said.

use anyhow::{Context, Result};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request, StatusCode};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

/// A refusal by the API: its status and, when the body is the API's error shape, its
/// code and message.
#[derive(Debug)]
pub struct ApiFailure {
    pub status: StatusCode,
    pub code: Option<String>,
    pub message: String,
}

impl std::fmt::Display for ApiFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.code {
            Some(code) => write!(f, "HTTP {} {code}: {}", self.status.as_u16(), self.message),
            None => write!(f, "HTTP {}: {}", self.status.as_u16(), self.message),
        }
    }
}

impl std::error::Error for ApiFailure {}

/// Where the API is and who calls it.
pub struct Api {
    base: String,
    token: Option<String>,
    product: Option<String>,
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
}

impl Api {
    /// `base` is the API's root URL (`http://127.0.0.1:8080`, an API Gateway stage's URL).
    pub fn new(base: &str, token: Option<String>, product: Option<String>) -> Result<Api> {
        let base = base.trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            anyhow::bail!("--url must start with http:// or https://, got {base:?}");
        }
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_native_roots(rustls::crypto::ring::default_provider())
            .context("reading the system's TLS roots")?
            .https_or_http()
            .enable_http1()
            .build();
        Ok(Api {
            base,
            token: token.filter(|t| !t.is_empty()),
            product: product.filter(|p| !p.is_empty()),
            client: Client::builder(TokioExecutor::new()).build(https),
        })
    }

    pub async fn get(&self, path: &str) -> Result<Value> {
        self.call(Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: Option<&Value>) -> Result<Value> {
        self.call(Method::POST, path, body).await
    }

    /// One call; a 2xx answer's JSON body (`null` when empty), else an [`ApiFailure`].
    pub async fn call(&self, method: Method, path: &str, body: Option<&Value>) -> Result<Value> {
        let url = format!("{}{path}", self.base);
        let mut req = Request::builder().method(method.clone()).uri(&url);
        if let Some(t) = &self.token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        if let Some(p) = &self.product {
            req = req.header("x-product-name", p);
        }
        let payload = match body {
            Some(b) => {
                req = req.header("content-type", "application/json");
                Bytes::from(serde_json::to_vec(b)?)
            }
            None => Bytes::new(),
        };
        let req = req
            .body(Full::new(payload))
            .with_context(|| format!("{url} is not a valid URL"))?;
        let res =
            tokio::time::timeout(std::time::Duration::from_secs(60), self.client.request(req))
                .await
                .with_context(|| format!("{method} {url}: no answer within 60 s"))?
                .with_context(|| format!("{method} {url}: could not reach the API"))?;
        let status = res.status();
        let bytes = res.into_body().collect().await?.to_bytes();
        let json: Option<Value> = serde_json::from_slice(&bytes).ok();
        if status.is_success() {
            return Ok(json.unwrap_or(Value::Null));
        }
        let text = |k: &str| {
            json.as_ref()
                .and_then(|j| j.get(k))
                .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
        };
        Err(ApiFailure {
            status,
            code: text("code"),
            message: text("message")
                .unwrap_or_else(|| String::from_utf8_lossy(&bytes).trim().to_owned()),
        }
        .into())
    }
}
