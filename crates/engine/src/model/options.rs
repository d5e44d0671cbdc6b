//! Options a datasource type takes from a connection's `metadata` (the reference's keys),
//! typed once: the API checks them when a connection is created or changed (a bad one
//! is a 400 naming the key), and the connector reads them through the same type. Other
//! metadata keys are the caller's: stored and echoed, never read.

use serde_json::{Map, Value};

/// An option of the wrong shape: which metadata key, and what it must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionError {
    pub key: &'static str,
    pub expected: &'static str,
}

impl std::fmt::Display for OptionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "metadata.{} must be {}", self.key, self.expected)
    }
}

/// A `MONGODB` connection's options.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MongoOptions {
    /// `authSource`: the database the user is defined in; `None` means `admin`.
    pub auth_source: Option<String>,
    /// `directConnection`: the reference connects to the one named server only when it
    /// is the string `"true"`. Fetcher always does (it never follows the members a
    /// replica set names, so every address dialled is one host safety checked): the
    /// option is accepted and checked, and changes nothing.
    pub direct_connection: bool,
}

const AUTH_SOURCE: &str =
    "a database name: a non-empty string without /, \\, ., space, \", $ or NUL";
const DIRECT: &str = "\"true\" or \"false\"";

impl MongoOptions {
    /// The options in `metadata` (absent, `null` or blank: the default).
    pub fn from_metadata(metadata: Option<&Map<String, Value>>) -> Result<Self, OptionError> {
        let get = |k: &str| metadata.and_then(|m| m.get(k)).filter(|v| !v.is_null());
        let auth_source = match get("authSource") {
            None => None,
            Some(Value::String(s)) if s.trim().is_empty() => None,
            Some(Value::String(s)) => {
                let s = s.trim();
                if s.chars().any(|c| "/\\. \"$\0".contains(c)) {
                    return Err(OptionError {
                        key: "authSource",
                        expected: AUTH_SOURCE,
                    });
                }
                Some(s.to_owned())
            }
            Some(_) => {
                return Err(OptionError {
                    key: "authSource",
                    expected: AUTH_SOURCE,
                });
            }
        };
        let direct_connection = match get("directConnection") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(Value::String(s)) if s == "true" => true,
            Some(Value::String(s)) if s == "false" || s.is_empty() => false,
            Some(_) => {
                return Err(OptionError {
                    key: "directConnection",
                    expected: DIRECT,
                });
            }
        };
        Ok(MongoOptions {
            auth_source,
            direct_connection,
        })
    }

    /// The options of a connection as the host describes it: its `metadata` attribute
    /// over its other attributes (an internal datasource's options are attributes).
    pub fn of(d: &crate::ConnectionDescriptor) -> Result<Self, OptionError> {
        let mut all: Map<String, Value> = d
            .host_attributes
            .iter()
            .filter(|(k, _)| k.as_str() != "metadata")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if let Some(Value::Object(m)) = d.host_attributes.get("metadata") {
            all.extend(m.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        Self::from_metadata(Some(&all))
    }

    /// The authentication database.
    pub fn auth_source(&self) -> &str {
        self.auth_source.as_deref().unwrap_or("admin")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<MongoOptions, OptionError> {
        MongoOptions::from_metadata(v.as_object())
    }

    #[test]
    fn options_are_typed_and_checked() {
        assert_eq!(parse(json!({})).unwrap(), MongoOptions::default());
        assert_eq!(MongoOptions::default().auth_source(), "admin");
        let o =
            parse(json!({"authSource": " users ", "directConnection": "true", "x": 1})).unwrap();
        assert_eq!(o.auth_source(), "users");
        assert!(o.direct_connection);
        assert_eq!(parse(json!({"authSource": ""})).unwrap().auth_source, None);
        assert!(
            parse(json!({"directConnection": true}))
                .unwrap()
                .direct_connection
        );
        assert!(
            !parse(json!({"directConnection": "false"}))
                .unwrap()
                .direct_connection
        );
        for (bad, key) in [
            (json!({"authSource": 1}), "authSource"),
            (json!({"authSource": "a/b"}), "authSource"),
            (json!({"authSource": "a.b"}), "authSource"),
            (json!({"directConnection": "yes"}), "directConnection"),
            (json!({"directConnection": 1}), "directConnection"),
        ] {
            let e = parse(bad.clone()).expect_err(&bad.to_string());
            assert_eq!(e.key, key);
            assert!(
                e.to_string()
                    .starts_with(&format!("metadata.{key} must be")),
                "{e}"
            );
        }
    }
}
