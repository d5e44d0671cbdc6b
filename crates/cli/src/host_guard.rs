//! `serve`'s guard against DNS rebinding (docs/operations.md, "`fetcher serve`
//! settings"): a web page can make a browser send requests to a name its attacker
//! points at 127.0.0.1, and the browser then treats the answers as that name's. Such a
//! request carries the attacker's name in `Host`, so `serve` answers only requests whose
//! `Host` is an IP address, `localhost`, or a name the operator configured
//! (`--allowed-hosts`); any other is 421 Misdirected Request, before routing.

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The `Host` values `serve` answers.
#[derive(Debug, Clone, Default)]
pub struct AllowedHosts {
    names: Vec<String>,
}

impl AllowedHosts {
    /// IP addresses and `localhost`, plus `names` (host names, without a port).
    pub fn new(names: &[String]) -> anyhow::Result<AllowedHosts> {
        let mut out = Vec::new();
        for n in names.iter().map(|n| n.trim().to_ascii_lowercase()) {
            let valid = !n.is_empty()
                && n.split('.').all(|label| {
                    !label.is_empty()
                        && label.len() <= 63
                        && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                });
            if !valid {
                anyhow::bail!(
                    "--allowed-hosts: {n:?} is not a host name (no scheme, port or path)"
                );
            }
            out.push(n);
        }
        Ok(AllowedHosts { names: out })
    }

    /// Whether a request with this `Host` (`name[:port]`, `[v6]:port`) is answered.
    pub fn admits(&self, host: &str) -> bool {
        let host = host.trim();
        let name = if let Some(rest) = host.strip_prefix('[') {
            rest.split(']').next().unwrap_or_default()
        } else {
            match host.rsplit_once(':') {
                Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) => name,
                _ => host,
            }
        };
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        name.parse::<std::net::IpAddr>().is_ok()
            || name == "localhost"
            || self.names.contains(&name)
    }
}

/// The middleware: 421 for a `Host` [`AllowedHosts`] does not admit. A request without
/// one (no browser sends such) passes.
pub async fn check_host(State(allowed): State<AllowedHosts>, req: Request, next: Next) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .or_else(|| req.uri().authority().map(|a| a.to_string()));
    match host {
        Some(h) if !allowed.admits(&h) => fetcher_http::error::ApiError::framework(
            StatusCode::MISDIRECTED_REQUEST,
            "this server does not answer for that Host (see --allowed-hosts)",
        )
        .into_response(),
        _ => next.run(req).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_literals_localhost_and_configured_names_only() {
        let a = AllowedHosts::new(&["fetcher.internal".into()]).unwrap();
        for ok in [
            "127.0.0.1:8080",
            "127.0.0.1",
            "10.1.2.3:80",
            "[::1]:8080",
            "localhost:8080",
            "LOCALHOST",
            "fetcher.internal:8080",
            "Fetcher.Internal.",
        ] {
            assert!(a.admits(ok), "{ok}");
        }
        for bad in [
            "evil.example:8080",
            "127.0.0.1.evil.example",
            "localhost.evil.example",
            "fetcher.internal.evil.example",
            "",
        ] {
            assert!(!a.admits(bad), "{bad}");
        }
        for bad in ["http://x.example", "x.example:80", "a/b", " "] {
            assert!(AllowedHosts::new(&[bad.into()]).is_err(), "{bad}");
        }
    }
}
