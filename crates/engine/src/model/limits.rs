//! Resource limits and per-request overrides (docs/engine.md, "Limits").
//!
//! JSON representation (the reference leaves it undefined): camelCase names matching the
//! override field paths, `timeout` in **milliseconds**.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{EngineError, Result, msg};

/// Default datasources per request.
pub const DEFAULT_MAX_DATASOURCES: i64 = 10;
/// Default tables per datasource.
pub const DEFAULT_MAX_TABLES_PER_DATASOURCE: i64 = 20;
/// Default selected (and filter) fields per table.
pub const DEFAULT_MAX_FIELDS_PER_TABLE: i64 = 50;
/// Default parallel datasource steps.
pub const DEFAULT_MAX_CONCURRENCY: i64 = 4;
/// Default bound on one extraction.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// Default serialized result size (256 MiB).
pub const DEFAULT_MAX_RESULT_BYTES: i64 = 268_435_456;

/// Limits on one extraction. A zero or negative numeric field means unbounded wherever
/// the engine enforces it; for concurrency it means 1.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Limits {
    pub max_datasources: i64,
    pub max_tables_per_datasource: i64,
    pub max_fields_per_table: i64,
    pub max_concurrency: i64,
    #[serde(with = "millis")]
    pub timeout: Duration,
    pub max_result_bytes: i64,
    /// Connector-specific ceilings carried for host adapters; never read by the engine.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub connector_hard_limits: BTreeMap<String, i64>,
}

impl Limits {
    /// The pinned defaults: 10 / 20 / 50 / 4 / 5 min / 256 MiB, no hard limits.
    pub fn defaults() -> Self {
        Limits {
            max_datasources: DEFAULT_MAX_DATASOURCES,
            max_tables_per_datasource: DEFAULT_MAX_TABLES_PER_DATASOURCE,
            max_fields_per_table: DEFAULT_MAX_FIELDS_PER_TABLE,
            max_concurrency: DEFAULT_MAX_CONCURRENCY,
            timeout: DEFAULT_TIMEOUT,
            max_result_bytes: DEFAULT_MAX_RESULT_BYTES,
            connector_hard_limits: BTreeMap::new(),
        }
    }

    /// True only when every numeric field is zero and there are no hard limits.
    pub fn is_zero(&self) -> bool {
        self.max_datasources == 0
            && self.max_tables_per_datasource == 0
            && self.max_fields_per_table == 0
            && self.max_concurrency == 0
            && self.timeout.is_zero()
            && self.max_result_bytes == 0
            && self.connector_hard_limits.is_empty()
    }

    /// The number of steps that may run at once (≥ 1).
    pub fn concurrency(&self) -> usize {
        if self.max_concurrency > 0 {
            usize::try_from(self.max_concurrency).unwrap_or(usize::MAX)
        } else {
            1
        }
    }

    /// The limits for one request: `overrides` may tighten any numeric field, never raise
    /// one above a positive ceiling; ≤ 0 inherits. Hard limits always come from `self`.
    pub fn effective(&self, overrides: Option<&Limits>) -> Result<Limits> {
        let Some(o) = overrides else {
            return Ok(self.clone());
        };
        fn pick(ceiling: i64, wanted: i64, path: &'static str) -> Result<i64> {
            if wanted <= 0 {
                Ok(ceiling)
            } else if ceiling > 0 && wanted > ceiling {
                Err(EngineError::new(
                    crate::Category::Validation,
                    format!("{}{path}", msg::OVERRIDE_PREFIX),
                ))
            } else {
                Ok(wanted)
            }
        }
        let max_datasources = pick(
            self.max_datasources,
            o.max_datasources,
            "limits.maxDatasources",
        )?;
        let max_tables_per_datasource = pick(
            self.max_tables_per_datasource,
            o.max_tables_per_datasource,
            "limits.maxTablesPerDatasource",
        )?;
        let max_fields_per_table = pick(
            self.max_fields_per_table,
            o.max_fields_per_table,
            "limits.maxFieldsPerTable",
        )?;
        let max_concurrency = pick(
            self.max_concurrency,
            o.max_concurrency,
            "limits.maxConcurrency",
        )?;
        let timeout = if o.timeout.is_zero() {
            self.timeout
        } else if !self.timeout.is_zero() && o.timeout > self.timeout {
            return Err(EngineError::new(
                crate::Category::Validation,
                format!("{}limits.timeout", msg::OVERRIDE_PREFIX),
            ));
        } else {
            o.timeout
        };
        let max_result_bytes = pick(
            self.max_result_bytes,
            o.max_result_bytes,
            "limits.maxResultBytes",
        )?;
        Ok(Limits {
            max_datasources,
            max_tables_per_datasource,
            max_fields_per_table,
            max_concurrency,
            timeout,
            max_result_bytes,
            connector_hard_limits: self.connector_hard_limits.clone(),
        })
    }
}

mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        // Negative values mean "inherit", like zero.
        let v = i64::deserialize(d)?;
        Ok(Duration::from_millis(v.max(0) as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_pinned() {
        let d = Limits::defaults();
        assert_eq!(
            (
                d.max_datasources,
                d.max_tables_per_datasource,
                d.max_fields_per_table
            ),
            (10, 20, 50)
        );
        assert_eq!(d.max_concurrency, 4);
        assert_eq!(d.timeout, Duration::from_secs(300));
        assert_eq!(d.max_result_bytes, 268_435_456);
        assert!(d.connector_hard_limits.is_empty());
        assert!(!d.is_zero());
        assert!(Limits::default().is_zero());
        let hard_only = Limits {
            connector_hard_limits: [("rows".to_string(), 5)].into(),
            ..Limits::default()
        };
        assert!(!hard_only.is_zero());
        assert_eq!(hard_only.concurrency(), 1);
    }

    #[test]
    fn overrides_only_tighten_and_report_the_first_violation() {
        let d = Limits::defaults();
        assert_eq!(d.effective(None).unwrap(), d);
        let tighter = Limits {
            max_datasources: 2,
            timeout: Duration::from_secs(1),
            max_result_bytes: -5,
            connector_hard_limits: [("x".to_string(), 1)].into(),
            ..Limits::default()
        };
        let e = d.effective(Some(&tighter)).unwrap();
        assert_eq!(e.max_datasources, 2);
        assert_eq!(e.max_tables_per_datasource, 20);
        assert_eq!(e.timeout, Duration::from_secs(1));
        assert_eq!(e.max_result_bytes, d.max_result_bytes, "negative inherits");
        assert!(
            e.connector_hard_limits.is_empty(),
            "hard limits not overridable"
        );
        // Equal to the ceiling is allowed.
        let equal = Limits {
            max_concurrency: 4,
            ..Limits::default()
        };
        assert_eq!(d.effective(Some(&equal)).unwrap().max_concurrency, 4);

        let cases: [(Limits, &str); 6] = [
            (
                Limits {
                    max_datasources: 11,
                    ..Limits::default()
                },
                "limits.maxDatasources",
            ),
            (
                Limits {
                    max_tables_per_datasource: 21,
                    ..Limits::default()
                },
                "limits.maxTablesPerDatasource",
            ),
            (
                Limits {
                    max_fields_per_table: 51,
                    ..Limits::default()
                },
                "limits.maxFieldsPerTable",
            ),
            (
                Limits {
                    max_concurrency: 5,
                    ..Limits::default()
                },
                "limits.maxConcurrency",
            ),
            (
                Limits {
                    timeout: Duration::from_secs(301),
                    ..Limits::default()
                },
                "limits.timeout",
            ),
            (
                Limits {
                    max_result_bytes: 268_435_457,
                    ..Limits::default()
                },
                "limits.maxResultBytes",
            ),
        ];
        for (o, path) in cases {
            let err = d.effective(Some(&o)).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!(
                    "engine: [validation] limit override exceeds the configured maximum: {path}"
                )
            );
        }
        // Several violations: the first in field order is reported; the value is never echoed.
        let many = Limits {
            max_result_bytes: 999_999_999_999,
            max_datasources: 99,
            ..Limits::default()
        };
        let err = d.effective(Some(&many)).unwrap_err().to_string();
        assert!(err.ends_with("limits.maxDatasources"));
        assert!(!err.contains("99"));
        // Unbounded ceiling accepts any positive override.
        let unbounded = Limits {
            max_concurrency: 1,
            ..Limits::default()
        };
        assert_eq!(
            unbounded
                .effective(Some(&Limits {
                    max_datasources: 500,
                    ..Limits::default()
                }))
                .unwrap()
                .max_datasources,
            500
        );
    }

    #[test]
    fn json_uses_camel_case_and_milliseconds() {
        let json = serde_json::to_value(Limits::defaults()).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"maxDatasources":10,"maxTablesPerDatasource":20,"maxFieldsPerTable":50,
                "maxConcurrency":4,"timeout":300000,"maxResultBytes":268435456})
        );
        let back: Limits = serde_json::from_value(serde_json::json!({"timeout": 1500})).unwrap();
        assert_eq!(back.timeout, Duration::from_millis(1500));
        assert_eq!(back.max_datasources, 0);
    }
}
