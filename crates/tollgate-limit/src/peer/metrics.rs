//! Peer metrics: `tollgate_peer_calls_total{op}`, `tollgate_peer_errors_total{kind}`,
//! `tollgate_peer_latency_seconds`. Register once per registry and hand clones to the
//! [`PeerServer`](super::PeerServer) and [`PeerClient`](super::PeerClient) of a process.
//!
//! Calls and latency are the caller's view: one per `PeerClient::call` (many calls travel in
//! one message), latency from the call to its answer, queueing included. Errors count failed
//! calls on the caller's side (`timeout`, `connect`, `send`, `status`, `auth`, `decode`) and
//! refused messages on the receiver's side (`auth`: forged, stale or replayed; `decode`).

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::wire::Op;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabels {
    op: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

/// The peer transport's counters, shared by its server and client.
#[derive(Clone)]
pub struct PeerMetrics {
    calls: Family<OpLabels, Counter>,
    /// `calls` for each op, looked up once: a call costs an atomic add, not a map lookup.
    by_op: [Counter; 6],
    errors: Family<KindLabels, Counter>,
    latency: Histogram,
}

impl PeerMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let calls: Family<OpLabels, Counter> = Family::default();
        let by_op = [
            Op::Ask,
            Op::Refund,
            Op::Gossip,
            Op::Ping,
            Op::Debit,
            Op::Sync,
        ]
        .map(|op| calls.get_or_create(&OpLabels { op: op.label() }).clone());
        let m = PeerMetrics {
            calls,
            by_op,
            errors: Family::default(),
            // 50 µs … ~1.6 s
            latency: Histogram::new(exponential_buckets(0.00005, 2.0, 16)),
        };
        registry.register(
            "tollgate_peer_calls",
            "Calls to peers, by operation (several may share one message)",
            m.calls.clone(),
        );
        registry.register(
            "tollgate_peer_errors",
            "Failed peer calls and refused peer messages, by kind",
            m.errors.clone(),
        );
        registry.register(
            "tollgate_peer_latency_seconds",
            "Latency of peer calls that got an answer, queueing included",
            m.latency.clone(),
        );
        m
    }

    pub(super) fn call(&self, op: Op) {
        let i = match op {
            Op::Ask => 0,
            Op::Refund => 1,
            Op::Gossip => 2,
            Op::Ping => 3,
            Op::Debit => 4,
            Op::Sync => 5,
        };
        self.by_op[i].inc();
    }

    /// Also used by the sites above the transport (`config`: a peer runs another policy).
    pub fn error(&self, kind: &'static str) {
        self.errors.get_or_create(&KindLabels { kind }).inc();
    }

    pub(super) fn latency(&self, d: Duration) {
        self.latency.observe(d.as_secs_f64());
    }
}
