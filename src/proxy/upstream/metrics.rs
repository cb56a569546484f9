//! Step 5's metrics per upstream URL: what each URL was sent, how it failed, what is in
//! flight to it and whether it is ejected; and per upstream, its retries and the calls
//! the client's own request body ended (never counted as the URL's failures). Handles are made
//! once per URL (`UrlMetrics`), so a request does no label lookup: each is one atomic.
//!
//! Metric names are a contract users alert on: add new ones, never rename these.

use http::Uri;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::watchdog::BodyFault;

/// `upstream`, `url` of one backend URL.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct UrlLabels {
    pub upstream: String,
    pub url: String,
}

/// `upstream`, `url`, `kind` of a failed attempt.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FailureLabels {
    upstream: String,
    url: String,
    kind: &'static str,
}

/// `upstream`, `reason` of a retry (or of one the budget refused).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RetryLabels {
    upstream: String,
    reason: &'static str,
}

/// `upstream`, `kind` of an upstream call the client's request body ended.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClientBodyLabels {
    upstream: String,
    kind: &'static str,
}

/// The URL as a label: scheme, host, port and base path, never the user-info.
pub(super) fn url_label(url: &Uri) -> String {
    let scheme = url.scheme_str().unwrap_or("http");
    let host = url.authority().map_or("", |a| a.as_str());
    let host = host.rsplit('@').next().unwrap_or(host);
    let base = url.path().trim_end_matches('/');
    format!("{scheme}://{host}{base}")
}

/// The families, registered once per process (reloads keep the series).
#[derive(Clone, Debug)]
pub struct UpstreamMetrics {
    requests: Family<UrlLabels, Counter>,
    failures: Family<FailureLabels, Counter>,
    in_flight: Family<UrlLabels, Gauge>,
    ejected: Family<UrlLabels, Gauge>,
    ejections: Family<UrlLabels, Counter>,
    retries: Family<RetryLabels, Counter>,
    budget_refused: Family<RetryLabels, Counter>,
    client_body: Family<ClientBodyLabels, Counter>,
}

impl UpstreamMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let m = UpstreamMetrics {
            requests: Family::default(),
            failures: Family::default(),
            in_flight: Family::default(),
            ejected: Family::default(),
            ejections: Family::default(),
            retries: Family::default(),
            budget_refused: Family::default(),
            client_body: Family::default(),
        };
        registry.register(
            "tollgate_upstream_requests",
            "Attempts sent to an upstream URL (a retried request counts each attempt)",
            m.requests.clone(),
        );
        registry.register(
            "tollgate_upstream_failures",
            "Failed attempts per upstream URL, by kind: connect (no connection), broken (the connection failed before the answer), 5xx (the URL answered 500 to 599)",
            m.failures.clone(),
        );
        registry.register(
            "tollgate_upstream_in_flight",
            "Requests in flight to an upstream URL (what least_request compares)",
            m.in_flight.clone(),
        );
        registry.register(
            "tollgate_upstream_ejected",
            "1 while an upstream URL is ejected by outlier detection, else 0",
            m.ejected.clone(),
        );
        registry.register(
            "tollgate_upstream_ejections",
            "Times an upstream URL was ejected by outlier detection",
            m.ejections.clone(),
        );
        registry.register(
            "tollgate_upstream_retries",
            "Requests sent again, by reason: connect (never sent: the next URL), broken, status (a retry_on status)",
            m.retries.clone(),
        );
        registry.register(
            "tollgate_upstream_retries_refused",
            "Retries not made, by reason: the retry budget was spent (broken, status), or the wait (backoff or Retry-After) would pass upstream_timeout (deadline)",
            m.budget_refused.clone(),
        );
        registry.register(
            "tollgate_client_body_errors",
            "Upstream calls ended by the client's own request body, by kind: malformed (broken chunked framing), gone (the client left or reset mid-body), timeout (silent for body_timeout: 408), too_large (past max_body_bytes: 413); never counted in tollgate_upstream_failures nor toward ejection",
            m.client_body.clone(),
        );
        m
    }

    /// Handles for URL `url` of upstream `upstream`.
    pub(super) fn url(&self, upstream: &str, url: &Uri) -> UrlMetrics {
        let labels = UrlLabels {
            upstream: upstream.to_owned(),
            url: url_label(url),
        };
        let failure = |kind| {
            (self.failures)
                .get_or_create(&FailureLabels {
                    upstream: labels.upstream.clone(),
                    url: labels.url.clone(),
                    kind,
                })
                .clone()
        };
        UrlMetrics {
            requests: self.requests.get_or_create(&labels).clone(),
            connect: failure("connect"),
            broken: failure("broken"),
            status_5xx: failure("5xx"),
            in_flight: self.in_flight.get_or_create(&labels).clone(),
            ejected: self.ejected.get_or_create(&labels).clone(),
            ejections: self.ejections.get_or_create(&labels).clone(),
        }
    }

    /// Handles for the retries of upstream `upstream`.
    pub(super) fn retries(&self, upstream: &str) -> RetryMetrics {
        let of = |family: &Family<RetryLabels, Counter>, reason| {
            family
                .get_or_create(&RetryLabels {
                    upstream: upstream.to_owned(),
                    reason,
                })
                .clone()
        };
        RetryMetrics {
            connect: of(&self.retries, "connect"),
            broken: of(&self.retries, "broken"),
            status: of(&self.retries, "status"),
            refused_broken: of(&self.budget_refused, "broken"),
            refused_status: of(&self.budget_refused, "status"),
            refused_deadline: of(&self.budget_refused, "deadline"),
        }
    }

    /// Handles for the calls of upstream `upstream` that the client's body ended.
    pub(super) fn client_body(&self, upstream: &str) -> ClientBodyMetrics {
        let of = |kind| {
            (self.client_body)
                .get_or_create(&ClientBodyLabels {
                    upstream: upstream.to_owned(),
                    kind,
                })
                .clone()
        };
        ClientBodyMetrics {
            malformed: of(BodyFault::Malformed.kind()),
            gone: of(BodyFault::Gone.kind()),
            timeout: of(BodyFault::Stalled(std::time::Duration::ZERO).kind()),
            too_large: of(BodyFault::TooLarge(0).kind()),
        }
    }
}

/// One upstream's handles for calls its clients' bodies ended.
#[derive(Debug)]
pub(super) struct ClientBodyMetrics {
    malformed: Counter,
    gone: Counter,
    timeout: Counter,
    too_large: Counter,
}

impl ClientBodyMetrics {
    pub fn count(&self, fault: BodyFault) {
        match fault {
            BodyFault::Malformed => &self.malformed,
            BodyFault::Gone => &self.gone,
            BodyFault::Stalled(_) => &self.timeout,
            BodyFault::TooLarge(_) => &self.too_large,
        }
        .inc();
    }
}

/// One URL's handles.
#[derive(Debug)]
pub(super) struct UrlMetrics {
    pub requests: Counter,
    pub connect: Counter,
    pub broken: Counter,
    pub status_5xx: Counter,
    /// Also the count least-request reads: one atomic serves both.
    pub in_flight: Gauge,
    pub ejected: Gauge,
    pub ejections: Counter,
}

/// One upstream's retry handles.
#[derive(Debug)]
pub(super) struct RetryMetrics {
    pub connect: Counter,
    pub broken: Counter,
    pub status: Counter,
    pub refused_broken: Counter,
    pub refused_status: Counter,
    pub refused_deadline: Counter,
}
