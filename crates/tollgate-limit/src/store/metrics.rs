//! Store metrics: `tollgate_store_calls_total{op}`, `tollgate_store_errors_total{kind}`,
//! `tollgate_store_latency_seconds`, `tollgate_store_breaker_open`, and what the
//! `on_store_error = "local"` fallback owes the store: `tollgate_store_debt_keys`,
//! `tollgate_store_debt_dropped_total`. Store calls per request is
//! `tollgate_store_calls_total` over `tollgate_requests_total`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabels {
    op: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

/// Handles cached per label so the hot path does no map lookups.
#[derive(Clone)]
pub struct StoreMetrics {
    calls: Family<OpLabels, Counter>,
    errors: Family<KindLabels, Counter>,
    latency: Histogram,
    breaker_open: Gauge,
    debt_keys: Gauge,
    debt_dropped: Counter,
}

impl StoreMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let m = StoreMetrics {
            calls: Family::default(),
            errors: Family::default(),
            // 50 µs … ~1.6 s
            latency: Histogram::new(exponential_buckets(0.00005, 2.0, 16)),
            breaker_open: Gauge::default(),
            debt_keys: Gauge::default(),
            debt_dropped: Counter::default(),
        };
        registry.register(
            "tollgate_store_calls",
            "Calls to the store, by operation",
            m.calls.clone(),
        );
        registry.register(
            "tollgate_store_errors",
            "Failed store calls, by kind",
            m.errors.clone(),
        );
        registry.register(
            "tollgate_store_latency_seconds",
            "Latency of store calls that got an answer",
            m.latency.clone(),
        );
        registry.register(
            "tollgate_store_breaker_open",
            "1 while the store circuit breaker (any node's, on a cluster) is open or probing",
            m.breaker_open.clone(),
        );
        registry.register(
            "tollgate_store_debt_keys",
            "Keys whose fallback admissions this node has not yet debited to the store",
            m.debt_keys.clone(),
        );
        registry.register(
            "tollgate_store_debt_dropped",
            "Fallback admissions not remembered for the store (the debt book was full)",
            m.debt_dropped.clone(),
        );
        m
    }

    pub fn call(&self, op: &'static str) {
        self.calls.get_or_create(&OpLabels { op }).inc();
    }

    pub fn error(&self, kind: &'static str) {
        self.errors.get_or_create(&KindLabels { kind }).inc();
    }

    pub fn latency(&self, seconds: f64) {
        self.latency.observe(seconds);
    }

    pub fn breaker(&self, open: bool) {
        self.breaker_open.set(i64::from(open));
    }

    pub fn debt_keys(&self, keys: usize) {
        self.debt_keys.set(i64::try_from(keys).unwrap_or(i64::MAX));
    }

    pub fn debt_dropped(&self) {
        self.debt_dropped.inc();
    }
}
