//! What an extraction produces: the direct document or the stored reference, their
//! integrity and protection, and a multi-object run's parts (docs/engine.md, "Execution").

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::ExecutionState;
use crate::model::incremental::Watermark;
use crate::time::Timestamp;

/// Who applied a result's protection (`appliedBy`): a closed set, so a value outside it
/// cannot be built, and one read from JSON is refused when it is parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AppliedBy {
    Engine,
    Adapter,
    Host,
}

impl AppliedBy {
    /// The wire string: `engine`, `adapter`, `host`.
    pub const fn as_str(self) -> &'static str {
        match self {
            AppliedBy::Engine => "engine",
            AppliedBy::Adapter => "adapter",
            AppliedBy::Host => "host",
        }
    }
}

/// How a result object is encoded (`format` of a direct result, a stored reference and a
/// manifest): a closed set, spelled in lower case on the wire.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoredFormat {
    /// One indented JSON document (a direct result, the v1 payload).
    #[default]
    Json,
    /// Newline-delimited JSON: one compact object per row.
    Ndjson,
    /// Apache Parquet files, one per table, listed by a manifest.
    Parquet,
}

impl StoredFormat {
    /// The wire spelling, also the extension of a part's file: `json`, `ndjson`, `parquet`.
    pub const fn as_str(self) -> &'static str {
        match self {
            StoredFormat::Json => "json",
            StoredFormat::Ndjson => "ndjson",
            StoredFormat::Parquet => "parquet",
        }
    }
}

impl std::fmt::Display for StoredFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResultIntegrity {
    /// e.g. `SHA-256` or `HMAC-SHA-256`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub algorithm: String,
    /// Lowercase hex of an unkeyed hash.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub digest: String,
    /// Lowercase hex of a keyed MAC.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub signature: String,
}

impl ResultIntegrity {
    pub fn sha256(digest_hex: String) -> Self {
        ResultIntegrity {
            algorithm: "SHA-256".into(),
            digest: digest_hex,
            signature: String::new(),
        }
    }

    pub fn is_present(&self) -> bool {
        !self.digest.is_empty() || !self.signature.is_empty()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResultProtection {
    pub encrypted: bool,
    /// Result-key version label; unrelated to credential key versions.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub key_version: String,
    /// e.g. `AES-256-GCM`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mode: String,
    pub applied_by: AppliedBy,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DirectResult {
    /// Indented, sorted JSON (Base64 in JSON renderings).
    #[serde(with = "base64_bytes")]
    pub data: Vec<u8>,
    pub format: StoredFormat,
    pub row_count: i64,
    pub plaintext_size: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub integrity: Option<ResultIntegrity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protection: Option<ResultProtection>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Timestamp>,
}

/// Where a stored result lives; never carries payload bytes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResultReference {
    pub path: String,
    pub format: StoredFormat,
    pub row_count: i64,
    pub size_bytes: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub integrity: Option<ResultIntegrity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protection: Option<ResultProtection>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Timestamp>,
    /// Bytes the stored object occupies (sealed), when the sink knows; `size_bytes` is
    /// the plaintext. Beyond the reference.
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub stored_bytes: i64,
    /// Adapter-defined facts about the stored object; never secret. Beyond the
    /// reference.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<String, serde_json::Value>,
    /// A multi-object result (Parquet): one object per `(config, table)`, listed by the
    /// manifest at `path`. Empty for single-stream results. Beyond the reference.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<ResultPart>,
}

/// One object of a multi-object result: a table's file (docs/results.md, "Parquet
/// results").
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResultPart {
    pub config: String,
    pub table: String,
    pub path: String,
    pub row_count: i64,
    /// Plaintext bytes (the file as opened).
    pub size_bytes: i64,
    /// Stored (sealed) bytes, when the sink knows.
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub stored_bytes: i64,
    /// The sink's keyed signature of the plaintext (HMAC-SHA256 for sealed sinks).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hmac: String,
    /// SHA-256 of the plaintext, computed by the engine as it wrote.
    pub sha256: String,
}

fn is_zero_i64(v: &i64) -> bool {
    *v == 0
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExtractionResult {
    pub state: ExecutionState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direct: Option<DirectResult>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<ResultReference>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub row_counts: BTreeMap<String, i64>,
    /// `configName → (table → the highest (cursor, key) read)` of the incremental tables
    /// that yielded rows; a table that yielded none keeps the watermark it was read after.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub watermarks: BTreeMap<String, BTreeMap<String, Watermark>>,
    /// A segmented run that stopped before the end: where the next resumes and the parts
    /// this one sealed (`reference` and `direct` are then `None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<crate::model::segment::Stopped>,
}

mod base64_bytes {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(b: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&crate::json::base64(b))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s = String::deserialize(d)?;
        decode(&s).ok_or_else(|| serde::de::Error::custom("invalid base64"))
    }

    fn decode(s: &str) -> Option<Vec<u8>> {
        let val = |c: u8| -> Option<u32> {
            Some(match c {
                b'A'..=b'Z' => c - b'A',
                b'a'..=b'z' => c - b'a' + 26,
                b'0'..=b'9' => c - b'0' + 52,
                b'+' => 62,
                b'/' => 63,
                _ => return None,
            } as u32)
        };
        let b = s.trim_end_matches('=').as_bytes();
        let mut out = Vec::with_capacity(b.len() * 3 / 4);
        for chunk in b.chunks(4) {
            let mut n = 0u32;
            for (i, &c) in chunk.iter().enumerate() {
                n |= val(c)? << (18 - 6 * i);
            }
            let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
            match chunk.len() {
                4 => out.extend_from_slice(&bytes),
                3 => out.extend_from_slice(&bytes[..2]),
                2 => out.push(bytes[0]),
                _ => return None,
            }
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_result_json_omits_the_unused_arm() {
        let r = ExtractionResult {
            direct: Some(DirectResult {
                data: b"{}".to_vec(),
                format: StoredFormat::Json,
                ..Default::default()
            }),
            ..Default::default()
        };
        let json = serde_json::to_string(&r).unwrap();
        assert!(json.contains("\"direct\"") && !json.contains("\"reference\""));
        assert!(json.contains("\"data\":\"e30=\""));
        let back: ExtractionResult = serde_json::from_str(&json).unwrap();
        assert_eq!(back.direct.unwrap().data, b"{}");
    }
}
