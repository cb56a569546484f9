//! Step 1 and around steps 4–5 of the request path, when `[telemetry] otlp_endpoint` is
//! set: the request's spans. The caller's W3C `traceparent`/`tracestate` is read, the
//! request's span (server) is its child, the limit step and the upstream call are the
//! request span's children, and the upstream is sent the upstream call's span id as its
//! parent: one hop, one child span id. Spans end into the process's batch processor
//! (`server/otel.rs`), which exports them off the request path.
//!
//! Tracing off (no endpoint), this module is never asked: a request's `traceparent` passes
//! through untouched (the backend's span parents on the caller's), and no request pays for
//! a span (`benches/instructions.sh`).
//!
//! Sampling is parent-based: a trusted peer's sampled flag decides; for a trace this
//! gateway starts, or one an untrusted client names, `sample_ratio` does (the trace id is
//! kept either way), so a client cannot make every request recorded.

use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{
    Span as _, SpanContext, SpanKind, Status, TraceContextExt, TraceFlags, Tracer as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SamplingDecision, SdkTracer, ShouldSample};

use crate::limit::Decision;

/// The process's tracer and how it reads and writes trace context; cheap to clone.
#[derive(Clone, Debug)]
pub struct Tracing {
    tracer: SdkTracer,
    propagator: TraceContextPropagator,
    /// Decides for the traces an untrusted client names (the SDK's sampler decides for
    /// the rest, parent-based over the same ratio).
    ratio: Sampler,
}

impl Tracing {
    pub fn new(tracer: SdkTracer, sample_ratio: f64) -> Self {
        Tracing {
            tracer,
            propagator: TraceContextPropagator::new(),
            ratio: Sampler::TraceIdRatioBased(sample_ratio),
        }
    }

    /// The request's span, started at `at`: a child of the caller's when its
    /// `traceparent` is valid, else the root of a new trace.
    pub(super) fn start(
        &self,
        headers: &HeaderMap,
        method: &http::Method,
        peer_trusted: bool,
        at: SystemTime,
    ) -> RequestTrace {
        let caller = self.propagator.extract(&Headers(headers));
        let remote = caller.span().span_context().clone();
        let parent = if remote.is_valid() && !peer_trusted {
            Context::new().with_remote_span_context(self.resampled(&remote))
        } else {
            caller
        };
        let span = self
            .tracer
            .span_builder(method.to_string())
            .with_kind(SpanKind::Server)
            .with_start_time(at)
            .start_with_context(&self.tracer, &parent);
        RequestTrace {
            cx: Context::new().with_span(span),
            method: method.clone(),
        }
    }

    /// `remote` with its sampled flag set by `sample_ratio` rather than by the client.
    fn resampled(&self, remote: &SpanContext) -> SpanContext {
        let decision =
            self.ratio
                .should_sample(None, remote.trace_id(), "", &SpanKind::Server, &[], &[]);
        let flags = match decision.decision {
            SamplingDecision::RecordAndSample => TraceFlags::SAMPLED,
            _ => TraceFlags::NOT_SAMPLED,
        };
        SpanContext::new(
            remote.trace_id(),
            remote.span_id(),
            flags,
            true,
            remote.trace_state().clone(),
        )
    }
}

/// One request's span while the request is served.
pub(super) struct RequestTrace {
    cx: Context,
    /// The span's name until the route is known, then the first half of it.
    method: http::Method,
}

impl RequestTrace {
    /// The limit step, which ran from `at` and waited `store` on the store and peers.
    pub fn limit(&self, tracing: &Tracing, at: SystemTime, decision: &Decision, store: Duration) {
        let mut span = tracing
            .tracer
            .span_builder("limit")
            .with_kind(SpanKind::Internal)
            .with_start_time(at)
            .start_with_context(&tracing.tracer, &self.cx);
        if span.is_recording() {
            span.set_attribute(KeyValue::new(
                "tollgate.decision",
                decision.outcome.as_str(),
            ));
            if let Some(policy) = &decision.policy {
                span.set_attribute(KeyValue::new("tollgate.policy", policy.to_string()));
            }
            if let Some(site) = decision.site {
                span.set_attribute(KeyValue::new("tollgate.site", site));
            }
            let us = i64::try_from(store.as_micros()).unwrap_or(i64::MAX);
            span.set_attribute(KeyValue::new("tollgate.store_time_us", us));
        }
        span.end();
    }

    /// The upstream call's span, started now; its context replaces the request's
    /// `traceparent` (and `tracestate`) so the upstream's span is its child.
    pub fn upstream(&self, tracing: &Tracing, upstream: &str, headers: &mut HeaderMap) -> Upstream {
        let span = tracing
            .tracer
            .span_builder("upstream")
            .with_kind(SpanKind::Client)
            .with_attributes([KeyValue::new("tollgate.upstream", upstream.to_owned())])
            .start_with_context(&tracing.tracer, &self.cx);
        let cx = self.cx.with_span(span);
        headers.remove(TRACESTATE);
        tracing
            .propagator
            .inject_context(&cx, &mut HeadersMut(headers));
        Upstream { cx }
    }

    /// The request's answer: its route, status and id, then the span ends.
    pub fn end(self, route: &str, path: &str, status: u16, client: &str, request_id: &str) {
        let span = self.cx.span();
        if span.is_recording() {
            span.update_name(format!("{} {route}", self.method));
            span.set_attributes([
                KeyValue::new("http.route", route.to_owned()),
                KeyValue::new("url.path", path.to_owned()),
                KeyValue::new("http.response.status_code", i64::from(status)),
                KeyValue::new("client.address", client.to_owned()),
                KeyValue::new("tollgate.request_id", request_id.to_owned()),
            ]);
            if status >= 500 {
                span.set_status(Status::error(format!("answered {status}")));
            }
        }
        span.end();
    }
}

/// The upstream call's span until its answer's head.
pub(super) struct Upstream {
    cx: Context,
}

impl Upstream {
    pub fn end(self, status: Option<u16>) {
        let span = self.cx.span();
        match status {
            Some(s) => span.set_attribute(KeyValue::new("http.response.status_code", i64::from(s))),
            None => span.set_status(Status::error("no answer from the upstream")),
        }
        span.end();
    }
}

const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

/// A request's headers as the propagator reads them.
struct Headers<'a>(&'a HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(HeaderName::as_str).collect()
    }
}

/// A request's headers as the propagator writes them.
struct HeadersMut<'a>(&'a mut HeaderMap);

impl Injector for HeadersMut<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(key.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}
