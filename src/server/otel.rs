//! The span exporter, started with the server when `[telemetry] otlp_endpoint` is set:
//! OpenTelemetry's batch processor gathers ended spans on a thread of its own and sends
//! them over OTLP/gRPC, so a request only hands its spans over (a bounded queue: when the
//! collector is slow or gone, spans are dropped, never the request held). Stopped last at
//! shutdown, which exports what is left.

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};

use crate::config::Telemetry;
use crate::proxy::trace::Tracing;

/// The longest one batch's export may take: a collector that accepts and never answers
/// costs a batch, and at shutdown holds the process at most this long.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(3);

/// The running exporter; [`Otel::stop`] flushes it.
pub(crate) struct Otel {
    provider: SdkTracerProvider,
}

/// Why the exporter did not start.
#[derive(Debug, thiserror::Error)]
#[error("telemetry.otlp_endpoint: cannot start the OTLP exporter for {endpoint}: {reason}")]
pub struct OtelError {
    endpoint: String,
    reason: String,
}

impl Otel {
    /// Start exporting to `t.otlp_endpoint`; called on the runtime (the gRPC client's
    /// connection task runs there). The collector need not be up yet: the client connects
    /// lazily and a batch that cannot be sent is dropped and logged.
    pub(crate) fn start(t: &Telemetry) -> Result<(Otel, Tracing), OtelError> {
        let endpoint = t.otlp_endpoint.to_string();
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint.trim_end_matches('/'))
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| OtelError {
                endpoint: endpoint.clone(),
                reason: e.to_string(),
            })?;
        let provider = SdkTracerProvider::builder()
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                t.sample_ratio,
            ))))
            .with_resource(
                Resource::builder()
                    .with_service_name(t.service_name.clone())
                    .build(),
            )
            .with_batch_exporter(exporter)
            .build();
        let tracer = provider.tracer("tollgate");
        Ok((Otel { provider }, Tracing::new(tracer, t.sample_ratio)))
    }

    /// Export what is queued and stop (blocks on the exporter's thread: call off the
    /// runtime's workers).
    pub(crate) fn stop(self) {
        if let Err(e) = self.provider.shutdown_with_timeout(2 * EXPORT_TIMEOUT) {
            tracing::warn!(error = %e, "the span exporter did not stop cleanly");
        }
    }
}
