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
//! The caller's `tracestate` goes to the upstream as it was sent (tollgate adds no member
//! of its own) when the caller's `traceparent` is valid and the state is within W3C trace
//! context's bound, 32 list-members and 512 characters ([`forwarded_state`]); past it, it is
//! cut as the recommendation says. A request without one is sent none (not an empty one).
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
            // A trace this gateway starts has no state of the caller's to carry.
            tracestate: remote
                .is_valid()
                .then(|| forwarded_state(headers))
                .flatten(),
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
    /// The caller's `tracestate` as the upstream is sent it ([`forwarded_state`]).
    tracestate: Option<HeaderValue>,
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
                decision.outcome().as_str(),
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
        // The propagator writes `traceparent`, and a `tracestate` re-serialized from what
        // the SDK could parse (an empty one when there is none): the caller's own is sent
        // instead, or none.
        headers.remove(TRACESTATE);
        tracing
            .propagator
            .inject_context(&cx, &mut HeadersMut(headers));
        headers.remove(TRACESTATE);
        if let Some(state) = &self.tracestate {
            headers.insert(TRACESTATE, state.clone());
        }
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

/// W3C trace context: a `tracestate` holds at most 32 list-members, and a vendor should
/// propagate at least 512 characters of it; a longer one may be cut, members over 128
/// characters first, then members from the right.
const MOST_MEMBERS: usize = 32;
const LONGEST_STATE: usize = 512;
const LONG_MEMBER: usize = 128;

/// The caller's `tracestate` lines as the upstream is sent them: unchanged (several lines
/// joined by `,`, as HTTP reads them) while they hold at most [`MOST_MEMBERS`] list-members
/// in at most [`LONGEST_STATE`] characters; past that, the members after the 32nd are
/// dropped, then members longer than [`LONG_MEMBER`] characters from the right, then
/// members from the right, until it fits. `None` when there is none, when nothing is left,
/// or when it is not text (anything but visible ASCII, space and tab: no list-member can
/// hold it). The members themselves are not read: they are other vendors' state.
fn forwarded_state(headers: &HeaderMap) -> Option<HeaderValue> {
    let lines: Vec<&HeaderValue> = headers.get_all(TRACESTATE).iter().collect();
    let text = |b: &u8| b.is_ascii_graphic() || *b == b' ' || *b == b'\t';
    if lines.is_empty() || !lines.iter().all(|l| l.as_bytes().iter().all(text)) {
        return None;
    }
    let joined = match lines[..] {
        [one] => std::borrow::Cow::Borrowed(one.as_bytes()),
        _ => std::borrow::Cow::Owned(
            lines
                .iter()
                .map(|l| l.as_bytes())
                .collect::<Vec<_>>()
                .join(&b','),
        ),
    };
    let members: Vec<&[u8]> = joined
        .split(|b| *b == b',')
        .map(|m| m.trim_ascii())
        .filter(|m| !m.is_empty())
        .collect();
    if members.is_empty() {
        return None;
    }
    if members.len() <= MOST_MEMBERS && joined.len() <= LONGEST_STATE {
        return HeaderValue::from_bytes(&joined).ok();
    }
    let mut kept: Vec<&[u8]> = members.into_iter().take(MOST_MEMBERS).collect();
    let length = |kept: &[&[u8]]| {
        kept.iter()
            .map(|m| m.len() + 1)
            .sum::<usize>()
            .saturating_sub(1)
    };
    while length(&kept) > LONGEST_STATE {
        match kept.iter().rposition(|m| m.len() > LONG_MEMBER) {
            Some(long) => kept.remove(long),
            None => kept.pop()?,
        };
    }
    if kept.is_empty() {
        return None;
    }
    HeaderValue::from_bytes(&kept.join(&b',')).ok()
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn state(lines: &[&str]) -> Option<String> {
        let mut h = HeaderMap::new();
        for l in lines {
            h.append(TRACESTATE, HeaderValue::from_str(l).unwrap());
        }
        forwarded_state(&h).map(|v| v.to_str().unwrap().to_owned())
    }

    #[test]
    fn within_the_bound_the_state_is_sent_as_it_came() {
        assert_eq!(state(&[]), None);
        assert_eq!(state(&[""]), None, "no empty tracestate");
        assert_eq!(state(&[" , "]), None);
        assert_eq!(state(&["a=1 , b=2"]).as_deref(), Some("a=1 , b=2"));
        assert_eq!(state(&["a=1", "b=2"]).as_deref(), Some("a=1,b=2"));
        // 32 members in exactly 512 characters.
        let members: Vec<String> = (0..32)
            .map(|i| format!("k{i:02}={}", "v".repeat(11)))
            .collect();
        let full = members.join(",") + "v";
        assert_eq!(full.len(), LONGEST_STATE);
        assert_eq!(state(&[&full]), Some(full));
    }

    #[test]
    fn past_the_bound_long_members_go_first_then_from_the_right() {
        let long = format!("long={}", "x".repeat(LONG_MEMBER));
        let mid: Vec<String> = (0..6).map(|i| format!("m{i}={}", "y".repeat(95))).collect();
        let mut sent = vec!["a=1", long.as_str(), "b=2"];
        sent.extend(mid.iter().map(String::as_str));
        // 735 characters: the long member goes (601 left), then `m5` from the right (502).
        let want = ["a=1", "b=2", &mid[0], &mid[1], &mid[2], &mid[3], &mid[4]].join(",");
        assert!(want.len() <= LONGEST_STATE && want.len() + 100 > LONGEST_STATE);
        assert_eq!(state(&[&sent.join(",")]), Some(want));
        // Members past the 32nd are dropped before anything else.
        let many: Vec<String> = (0..40).map(|i| format!("k{i}=1")).collect();
        assert_eq!(state(&[&many.join(",")]), Some(many[..32].join(",")));
        // Nothing left, or not text: none.
        assert_eq!(state(&[&"x".repeat(600)]), None);
        let mut h = HeaderMap::new();
        h.insert(TRACESTATE, HeaderValue::from_bytes(b"a=\xe9").unwrap());
        assert_eq!(forwarded_state(&h), None);
    }
}
