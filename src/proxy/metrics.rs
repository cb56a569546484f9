//! Request metrics: written at the end of each request's path (step 7), registered in the
//! process's one registry, which the admin listener's `/metrics` encodes.
//!
//! Metric names are a contract users alert on: add new ones, never rename these.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// `route`, `status` of a finished request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub route: Arc<str>,
    pub status: u16,
}

/// `route` alone.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    pub route: Arc<str>,
}

/// `route`, `upstream` of a forwarded request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpstreamLabels {
    pub route: Arc<str>,
    pub upstream: Arc<str>,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// The request path's metrics; one per process, shared by every worker's gateway.
pub struct RequestMetrics {
    /// `tollgate_requests_total{route,status}`: what happened to each request.
    requests: Family<RequestLabels, Counter>,
    /// `tollgate_request_duration_seconds{route}`: time from head received to response head sent.
    request_duration: HistogramFamily<RouteLabels>,
    /// `tollgate_upstream_duration_seconds{route,upstream}`: time the upstream took to answer.
    upstream_duration: HistogramFamily<UpstreamLabels>,
}

fn latency_histogram() -> Histogram {
    // 100 µs … ~6.5 s: covers a loopback upstream and a slow backend alike.
    Histogram::new(exponential_buckets(0.0001, 2.0, 17))
}

impl RequestMetrics {
    /// The request metrics, registered in `registry` (the one `/metrics` encodes).
    pub fn new(registry: &mut Registry) -> Self {
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "tollgate_requests",
            "Requests handled, by route and response status",
            requests.clone(),
        );
        let request_duration: HistogramFamily<RouteLabels> =
            Family::new_with_constructor(latency_histogram);
        registry.register(
            "tollgate_request_duration_seconds",
            "Time from request head to response head, by route",
            request_duration.clone(),
        );
        let upstream_duration: HistogramFamily<UpstreamLabels> =
            Family::new_with_constructor(latency_histogram);
        registry.register(
            "tollgate_upstream_duration_seconds",
            "Time the upstream took to send its response head",
            upstream_duration.clone(),
        );
        RequestMetrics {
            requests,
            request_duration,
            upstream_duration,
        }
    }

    /// Handles for one route's metrics, resolved once so a request does no label lookups.
    pub fn route(&self, route: &Arc<str>, upstream: Option<&Arc<str>>) -> RouteMetrics {
        RouteMetrics {
            route: route.clone(),
            requests: self.requests.clone(),
            statuses: (100..600).map(|_| OnceLock::new()).collect(),
            duration: self
                .request_duration
                .get_or_create(&RouteLabels {
                    route: route.clone(),
                })
                .clone(),
            upstream: upstream.map(|u| {
                self.upstream_duration
                    .get_or_create(&UpstreamLabels {
                        route: route.clone(),
                        upstream: u.clone(),
                    })
                    .clone()
            }),
        }
    }
}

/// One route's metric handles (see [`RequestMetrics::route`]).
pub struct RouteMetrics {
    route: Arc<str>,
    /// The family, for statuses seen the first time.
    requests: Family<RequestLabels, Counter>,
    /// Counter per status code 100..=599, created on first use.
    statuses: Box<[OnceLock<Counter>]>,
    duration: Histogram,
    /// `None` for the no-route bucket.
    upstream: Option<Histogram>,
}

impl RouteMetrics {
    pub fn record_request(&self, status: u16, took: Duration) {
        let labels = || RequestLabels {
            route: self.route.clone(),
            status,
        };
        match self.statuses.get(usize::from(status).wrapping_sub(100)) {
            Some(slot) => slot
                .get_or_init(|| self.requests.get_or_create(&labels()).clone())
                .inc(),
            None => self.requests.get_or_create(&labels()).inc(),
        };
        self.duration.observe(took.as_secs_f64());
    }

    pub fn record_upstream(&self, took: Duration) {
        if let Some(h) = &self.upstream {
            h.observe(took.as_secs_f64());
        }
    }
}
