//! A loopback OTLP/HTTP receiver for tests and benches (feature `testing`): it keeps every
//! body POSTed to `/v1/traces` (JSON encoding: export with `OTEL_EXPORTER_OTLP_PROTOCOL=
//! http/json`) and answers 200. Plain threads and blocking sockets: usable from any test.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use serde_json::Value;

/// The receiver; it runs until the process ends.
pub struct OtlpReceiver {
    port: u16,
    bodies: Arc<Mutex<Vec<String>>>,
}

impl OtlpReceiver {
    pub fn start() -> OtlpReceiver {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let port = listener.local_addr().expect("its address").port();
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let kept = bodies.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let kept = kept.clone();
                std::thread::spawn(move || serve_connection(conn, &kept));
            }
        });
        OtlpReceiver { port, bodies }
    }

    /// The value for `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every span received so far, each with its `resource` copied in.
    pub fn spans(&self) -> Vec<Value> {
        let bodies = self.bodies.lock().expect("not poisoned");
        let mut out = Vec::new();
        for body in bodies.iter() {
            let Ok(v) = serde_json::from_str::<Value>(body) else {
                continue;
            };
            for rs in v["resourceSpans"].as_array().into_iter().flatten() {
                for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                    for span in ss["spans"].as_array().into_iter().flatten() {
                        let mut span = span.clone();
                        span["resource"] = rs["resource"].clone();
                        out.push(span);
                    }
                }
            }
        }
        out
    }

    /// Every byte received, for greps.
    pub fn raw(&self) -> String {
        self.bodies.lock().expect("not poisoned").join("\n")
    }
}

/// An attribute's value (`{"stringValue": …}`, `{"intValue": …}`) of a span or resource.
pub fn attribute<'a>(span: &'a Value, key: &str) -> Option<&'a Value> {
    span["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)
        .map(|a| &a["value"])
}

/// Reads HTTP/1.1 requests off one (keep-alive) connection.
fn serve_connection(conn: TcpStream, kept: &Mutex<Vec<String>>) {
    let Ok(read_half) = conn.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(read_half);
    let mut writer = conn;
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        if request_line.starts_with("POST /v1/traces") {
            kept.lock()
                .expect("not poisoned")
                .push(String::from_utf8_lossy(&body).into_owned());
        }
        if writer
            .write_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}",
            )
            .is_err()
        {
            return;
        }
    }
}
