//! `[telemetry]`: where the gateway's spans go (`proxy/trace.rs` records them,
//! `server/otel.rs` exports them). Without `otlp_endpoint` nothing is recorded and a
//! request's `traceparent` passes through untouched.

use http::Uri;
use serde::Deserialize;

use super::validate::Validator;

/// `[telemetry]` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTelemetry {
    /// The OTLP/gRPC collector, e.g. "http://127.0.0.1:4317".
    pub otlp_endpoint: Option<String>,
    /// The share of new traces recorded, 0 to 1.
    #[serde(default = "default_ratio")]
    pub sample_ratio: f64,
    /// The spans' `service.name`.
    #[serde(default = "default_service")]
    pub service_name: String,
}

impl Default for RawTelemetry {
    /// No `[telemetry]` table: tracing off, the keys at their defaults.
    fn default() -> Self {
        RawTelemetry {
            otlp_endpoint: None,
            sample_ratio: default_ratio(),
            service_name: default_service(),
        }
    }
}

fn default_ratio() -> f64 {
    1.0
}

fn default_service() -> String {
    "tollgate".into()
}

/// Tracing, when `[telemetry] otlp_endpoint` is set.
#[derive(Debug, Clone, PartialEq)]
pub struct Telemetry {
    /// Where spans are exported (OTLP over gRPC).
    pub otlp_endpoint: Uri,
    /// The share of traces this gateway starts that are recorded; a caller's sampled flag
    /// decides for the traces it started (parent-based, as OpenTelemetry samples).
    pub sample_ratio: f64,
    pub service_name: String,
}

impl Validator {
    /// `None` when tracing is off or the table has problems (then said).
    pub(super) fn telemetry(&mut self, raw: &RawTelemetry) -> Option<Telemetry> {
        let ratio_ok = (0.0..=1.0).contains(&raw.sample_ratio);
        if !ratio_ok {
            self.fail(
                "telemetry.sample_ratio",
                format!(
                    "{} is not a share from 0 to 1 (0.1 records one trace in ten)",
                    raw.sample_ratio
                ),
            );
        }
        if raw.service_name.trim().is_empty() {
            self.fail(
                "telemetry.service_name",
                "must not be empty (it names the gateway in the trace viewer)",
            );
        }
        let endpoint = raw.otlp_endpoint.as_deref()?;
        let uri = match endpoint.parse::<Uri>() {
            Ok(u) if u.scheme_str() == Some("http") && u.authority().is_some() => u,
            _ => {
                self.fail(
                    "telemetry.otlp_endpoint",
                    format!(
                        "`{endpoint}` is not a collector URL like \"http://127.0.0.1:4317\" (OTLP over gRPC, plain http: TLS to the collector is not supported, run a local collector)"
                    ),
                );
                return None;
            }
        };
        (ratio_ok && !raw.service_name.trim().is_empty()).then(|| Telemetry {
            otlp_endpoint: uri,
            sample_ratio: raw.sample_ratio,
            service_name: raw.service_name.clone(),
        })
    }
}
