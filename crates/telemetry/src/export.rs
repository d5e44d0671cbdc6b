//! The trace export, from the standard OpenTelemetry variables
//! (<https://opentelemetry.io/docs/specs/otel/configuration/sdk-environment-variables/>):
//!
//! * on when `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT` is set,
//!   off otherwise, and off whatever else is set when `OTEL_SDK_DISABLED=true` or
//!   `OTEL_TRACES_EXPORTER=none`;
//! * OTLP over HTTP, `http/protobuf` (the default) or `http/json`
//!   (`OTEL_EXPORTER_OTLP[_TRACES]_PROTOCOL`); headers, timeout and compression as the
//!   exporter reads them;
//! * `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER[_ARG]` and the
//!   batch processor's `OTEL_BSP_*` as the SDK reads them.
//!
//! A value this build cannot honour (another exporter, `grpc`) stops the process at start
//! instead of exporting nothing unnoticed.

use opentelemetry::KeyValue;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;

use crate::TelemetryError;
use crate::build;

/// A trace export the environment asks for.
#[derive(Debug)]
pub(crate) struct Export;

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

impl Export {
    pub(crate) fn from_env() -> Result<Option<Export>, TelemetryError> {
        Self::from_vars(var)
    }

    fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Option<Export>, TelemetryError> {
        if var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        match var("OTEL_TRACES_EXPORTER").as_deref().map(str::trim) {
            None | Some("otlp") => {}
            Some("none") => return Ok(None),
            Some(other) => {
                return Err(TelemetryError::Setting {
                    variable: "OTEL_TRACES_EXPORTER",
                    problem: format!("'{other}' is not available: use otlp (or none)"),
                });
            }
        }
        for variable in [
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ] {
            match var(variable).as_deref().map(str::trim) {
                None | Some("http/protobuf") | Some("http/json") => {}
                Some(other) => {
                    return Err(TelemetryError::Setting {
                        variable,
                        problem: format!(
                            "'{other}' is not available: use http/protobuf or http/json (port 4318 on a collector)"
                        ),
                    });
                }
            }
        }
        let endpoint = [
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
        ]
        .into_iter()
        .find_map(|v| var(v).map(|e| (v, e)));
        let Some((variable, endpoint)) = endpoint else {
            return Ok(None);
        };
        let e = endpoint.trim();
        if !(e.starts_with("http://") || e.starts_with("https://"))
            || e.contains(char::is_whitespace)
        {
            return Err(TelemetryError::Setting {
                variable,
                problem: "must be an http:// or https:// URL (an OTLP/HTTP receiver, such as http://localhost:4318)".into(),
            });
        }
        Ok(Some(Export))
    }

    /// The tracer provider: OTLP/HTTP behind a batch processor (its own thread), the
    /// resource naming the service and the build.
    pub(crate) fn provider(self, service: &str) -> Result<SdkTracerProvider, TelemetryError> {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .build()
            .map_err(|e| TelemetryError::Setting {
                variable: "OTEL_EXPORTER_OTLP_ENDPOINT",
                problem: e.to_string(),
            })?;
        let named = var("OTEL_SERVICE_NAME").is_some()
            || var("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|a| {
                a.split(',')
                    .any(|kv| kv.trim_start().starts_with("service.name="))
            });
        let mut resource = Resource::builder().with_attributes([
            KeyValue::new("service.version", build::VERSION),
            KeyValue::new("vcs.revision", build::REVISION),
            KeyValue::new("fetcher.built_at", build::built_at_unix()),
        ]);
        if !named {
            resource = resource.with_service_name(service.to_owned());
        }
        Ok(SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource.build())
            .build())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(vars: &[(&str, &str)]) -> Result<Option<Export>, TelemetryError> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Export::from_vars(|name| {
            vars.iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
                .filter(|v| !v.trim().is_empty())
        })
    }

    #[test]
    fn export_is_off_unless_an_endpoint_is_set() {
        assert!(from(&[]).unwrap().is_none());
        assert!(from(&[("OTEL_SERVICE_NAME", "x")]).unwrap().is_none());
        assert!(
            from(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "")])
                .unwrap()
                .is_none()
        );
        assert!(
            from(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")])
                .unwrap()
                .is_some()
        );
        assert!(
            from(&[(
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "https://otel.example/v1/traces"
            )])
            .unwrap()
            .is_some()
        );
        for off in [
            ("OTEL_SDK_DISABLED", "true"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ] {
            assert!(
                from(&[
                    off,
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
                ])
                .unwrap()
                .is_none()
            );
        }
    }

    #[test]
    fn settings_this_build_cannot_honour_stop_the_start() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318");
        for (bad, variable) in [
            (("OTEL_TRACES_EXPORTER", "zipkin"), "OTEL_TRACES_EXPORTER"),
            (
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                "OTEL_EXPORTER_OTLP_PROTOCOL",
            ),
            (
                ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/thrift"),
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            ),
        ] {
            let err = from(&[bad, endpoint]).unwrap_err();
            assert!(matches!(err, TelemetryError::Setting { variable: v, .. } if v == variable));
        }
        let err = from(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "localhost:4317")]).unwrap_err();
        assert!(err.to_string().contains("http:// or https://"), "{err}");
        assert!(
            from(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"), endpoint])
                .unwrap()
                .is_some()
        );
    }
}
