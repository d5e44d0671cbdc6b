//! Request pieces: JSON bodies, `{id}`, `X-Product-Name`, `X-Request-Id` (docs/api.md, "Calling it").

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderMap, StatusCode, header};
use serde::de::DeserializeOwned;

use super::AppState;
use super::error::ApiError;

/// The raw body, read within the configured limit (413 shape D beyond it). Parsing is a
/// separate step ([`parse_json`]) so handlers can check `{id}` and headers first.
pub struct RawBody(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for RawBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Bytes::from_request(req, state).await {
            Ok(b) => Ok(RawBody(b)),
            Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                Err(ApiError::body_too_large())
            }
            Err(_) => Err(ApiError::invalid_payload()),
        }
    }
}

/// Parses a JSON body: the media type must end with `json` (parameters ignored,
/// case-insensitive); anything unparseable or of the wrong shape is 400 `FET-0001`, whose
/// message says where and why (docs/api.md, "Errors"): a missing `Content-Type`, an empty
/// body, malformed JSON with its line and column, or the JSON path of a value of the
/// wrong kind, what was expected and what kind came (never the value itself: it may be a
/// password). Unknown keys are ignored.
pub fn parse_json<T: DeserializeOwned>(headers: &HeaderMap, body: &[u8]) -> Result<T, ApiError> {
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
                .ends_with("json")
        })
        .unwrap_or(false);
    if !is_json {
        return Err(ApiError::invalid_payload_because(
            "Content-Type must be application/json",
        ));
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::invalid_payload_because(
            "the body is empty: send a JSON object",
        ));
    }
    parse_body(body)
}

/// A JSON body parsed into `T`, or a 400 that says where and why (no header checks: a
/// body that did not come with the request, such as a schedule's stored job request).
pub fn parse_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let parsed: Result<T, _> = serde_path_to_error::deserialize(&mut de);
    match parsed.map_err(|e| describe(e.path().to_string(), e.into_inner())) {
        Ok(v) => de.end().map(|()| v).map_err(|e| describe(".".into(), e)),
        Err(why) => Err(why),
    }
    .map_err(|why: String| ApiError::invalid_payload_because(why))
}

/// What is wrong with a body, in our words: where (the JSON path, or the line and column
/// of malformed JSON) and why, without echoing a value.
fn describe(path: String, e: serde_json::Error) -> String {
    use serde_json::error::Category;
    // serde's own text, without its position (given our way below).
    let text = e.to_string();
    let reason = match text.rfind(" at line ") {
        Some(at) => text[..at].to_owned(),
        None => text,
    };
    match e.classify() {
        Category::Syntax | Category::Eof => format!(
            "malformed JSON at line {}, column {}: {reason}",
            e.line(),
            e.column()
        ),
        Category::Io => "the body could not be read".to_owned(),
        Category::Data => {
            let what = data_reason(&reason);
            if path == "." || path.is_empty() {
                what
            } else {
                format!("{path}: {what}")
            }
        }
    }
}

/// serde's data error as `expected …, got …` with the kind of value that came, never the
/// value (`invalid type: string "hunter2", expected i64` → `expected a whole number, got
/// a string`).
fn data_reason(reason: &str) -> String {
    fn kind(unexpected: &str) -> &'static str {
        match unexpected.split([' ', '`', '"']).next().unwrap_or("") {
            "string" | "char" => "a string",
            "integer" => "a whole number",
            "floating" => "a number with a fraction",
            "boolean" => "true or false",
            "map" => "an object",
            "sequence" => "an array",
            "null" | "unit" => "null",
            _ => "another kind of value",
        }
    }
    fn expected(exp: &str) -> String {
        match exp.trim() {
            "i8" | "i16" | "i32" | "i64" | "u8" | "u16" | "u32" | "u64" | "usize" => {
                "a whole number".to_owned()
            }
            "f32" | "f64" => "a number".to_owned(),
            "a sequence" => "an array".to_owned(),
            "a map" => "an object".to_owned(),
            "a boolean" => "true or false".to_owned(),
            e if e.starts_with("struct ") => "an object".to_owned(),
            e => e.to_owned(),
        }
    }
    // A struct given as an array (serde reads structs from sequences too).
    if reason.starts_with("invalid length ") && reason.contains(", expected struct ") {
        return "expected an object, got an array".to_owned();
    }
    for prefix in ["invalid type: ", "invalid value: "] {
        if let Some(rest) = reason.strip_prefix(prefix)
            && let Some((unexpected, exp)) = rest.rsplit_once(", expected ")
        {
            return format!("expected {}, got {}", expected(exp), kind(unexpected));
        }
    }
    reason.replace('`', "'")
}

/// Refuses a key that is a misspelling of a known one (the same letters but for case,
/// `_` and `-`), naming the right one, instead of ignoring it (docs/api.md, "Errors").
/// Other unknown keys are still ignored, as the reference ignores them.
pub fn known_keys(body: &serde_json::Value, known: &[&str]) -> Result<(), ApiError> {
    let fold = |k: &str| -> String {
        k.chars()
            .filter(|c| *c != '_' && *c != '-')
            .flat_map(char::to_lowercase)
            .collect()
    };
    let Some(object) = body.as_object() else {
        return Ok(());
    };
    for key in object.keys() {
        if known.contains(&key.as_str()) {
            continue;
        }
        if let Some(right) = known.iter().find(|k| fold(k) == fold(key)) {
            return Err(ApiError::invalid_payload_because(format!(
                "unknown key '{key}': did you mean '{right}'?"
            )));
        }
    }
    Ok(())
}

/// A `{id}` path parameter: any UUID form the `uuid` crate accepts (hyphenated, simple,
/// braced, `urn:uuid:`), rendered canonical lower-case.
pub fn parse_id(raw: &str, message: &'static str) -> Result<String, ApiError> {
    uuid::Uuid::parse_str(raw.trim())
        .map(|u| u.hyphenated().to_string())
        .map_err(|_| ApiError::invalid_path(message))
}

const PRODUCT_HEADER: &str = "x-product-name";

/// `X-Product-Name` normalisation (docs/api.md, "Calling it"): trim, lower-case, ≤ 100, `[a-z0-9_-]+`.
/// `required`: missing/blank is an error; otherwise a missing or empty header is `None`
/// and a whitespace-only one is an error.
pub fn product_name(headers: &HeaderMap, required: bool) -> Result<Option<String>, ApiError> {
    let raw = headers
        .get(PRODUCT_HEADER)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let raw = match raw {
        None => None,
        Some(v) if v.is_empty() && !required => None,
        Some(v) => Some(v),
    };
    let Some(raw) = raw else {
        return if required {
            Err(product_required())
        } else {
            Ok(None)
        };
    };
    let v = raw.trim().to_ascii_lowercase();
    if v.is_empty() {
        return Err(ApiError::invalid_header(if required {
            "X-Product-Name header is required and must not be empty"
        } else {
            "X-Product-Name header must not be empty or whitespace-only"
        }));
    }
    if v.len() > 100 {
        return Err(ApiError::invalid_header(
            "X-Product-Name must not exceed 100 characters",
        ));
    }
    if !v
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
    {
        return Err(ApiError::invalid_header(
            "X-Product-Name can only contain alphanumeric characters, underscores, and hyphens",
        ));
    }
    Ok(Some(v))
}

/// The product a caller names on a route where the reference made `X-Product-Name`
/// optional (docs/api.md, "Products"): `None` when it names none, which a deployment with
/// `require_product` refuses (400 `FET-0403`) instead.
pub fn caller_product(st: &AppState, headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    product_name(headers, st.config().require_product)
}

/// 400 `FET-0403`: a route that needs `X-Product-Name` got none.
pub fn product_required() -> ApiError {
    ApiError::invalid_header("X-Product-Name header is required and must not be empty")
}

/// The request id of a request (extension set by the request pipeline).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestId(pub String);

/// Reuses a client's non-blank `X-Request-Id` (trimmed; printable ASCII only, ≤ 128
/// characters), else a new UUID v4.
pub fn request_id(headers: &HeaderMap) -> String {
    headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.trim()
                .chars()
                .filter(|c| c.is_ascii_graphic())
                .take(128)
                .collect::<String>()
        })
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.insert(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        m
    }

    #[test]
    fn ids_in_every_uuid_form() {
        let want = "0193a1b2-7c3d-7e4f-8a9b-0c1d2e3f4a5b";
        for raw in [
            want,
            "0193A1B27C3D7E4F8A9B0C1D2E3F4A5B",
            "{0193a1b2-7c3d-7e4f-8a9b-0c1d2e3f4a5b}",
            "urn:uuid:0193a1b2-7c3d-7e4f-8a9b-0c1d2e3f4a5b",
        ] {
            assert_eq!(parse_id(raw, "invalid connection id").unwrap(), want);
        }
        let e = parse_id("nope", "invalid job id").unwrap_err();
        assert_eq!(e.body["message"], "invalid job id");
        assert_eq!(e.body["code"], "FET-0404");
    }

    #[test]
    fn product_header_rules() {
        assert_eq!(
            product_name(&h(&[("x-product-name", " Reporter ")]), true)
                .unwrap()
                .as_deref(),
            Some("reporter")
        );
        assert_eq!(product_name(&h(&[]), false).unwrap(), None);
        assert_eq!(
            product_name(&h(&[("x-product-name", "")]), false).unwrap(),
            None
        );
        let msg = |r: Result<Option<String>, ApiError>| {
            r.unwrap_err().body["message"].as_str().unwrap().to_owned()
        };
        assert_eq!(
            msg(product_name(&h(&[]), true)),
            "X-Product-Name header is required and must not be empty"
        );
        assert_eq!(
            msg(product_name(&h(&[("x-product-name", "   ")]), false)),
            "X-Product-Name header must not be empty or whitespace-only"
        );
        assert_eq!(
            msg(product_name(&h(&[("x-product-name", "   ")]), true)),
            "X-Product-Name header is required and must not be empty"
        );
        assert!(
            msg(product_name(
                &h(&[("x-product-name", &"a".repeat(101))]),
                true
            ))
            .contains("exceed 100")
        );
        assert!(product_name(&h(&[("x-product-name", &"a".repeat(100))]), true).is_ok());
        assert!(
            msg(product_name(
                &h(&[("x-product-name", "product@name!")]),
                true
            ))
            .contains("alphanumeric")
        );
    }

    #[test]
    fn content_types() {
        #[derive(serde::Deserialize)]
        struct T {
            #[allow(dead_code)]
            a: Option<u16>,
        }
        assert!(
            parse_json::<T>(
                &h(&[("content-type", "application/json; charset=utf-8")]),
                br#"{"a":1,"x":2}"#
            )
            .is_ok()
        );
        assert!(
            parse_json::<T>(&h(&[("content-type", "application/vnd.x+JSON")]), br#"{}"#).is_ok()
        );
        assert!(parse_json::<T>(&h(&[("content-type", "text/plain")]), br#"{}"#).is_err());
        assert!(parse_json::<T>(&h(&[]), br#"{}"#).is_err());
        for bad in [&b""[..], b"[]", br#"{"a":"1"}"#, br#"{"a":1.0}"#, b"{"] {
            assert!(parse_json::<T>(&h(&[("content-type", "application/json")]), bad).is_err());
        }
    }
}
