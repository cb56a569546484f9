//! Step 5's memory of each upstream URL, shared by every worker: requests in flight (what
//! least-request compares), failures in a row, and outlier ejection.
//!
//! A URL that answers `consecutive_5xx` 5xx in a row, or fails `consecutive_connect_failures`
//! connections in a row, is ejected: left out of the choice for `base_ejection` × the number
//! of times it was ejected in a row (at most `max_ejection`), as Envoy's outlier detection
//! does. Each `base_ejection` a URL stays in without being ejected again takes one off that
//! number. At most `max_ejected_percent` of the URLs (at least one) are out at once, so a
//! fault that hits every URL (the network, a shared database) cannot empty the upstream.
//!
//! Only what a URL did counts: an attempt that failed because the client's request body
//! failed first (`send.rs` asks the body's watch) is no outcome of the URL's, and is told
//! to [`Backends::client_body_error`] instead, which counts it and touches no failure
//! count.
//!
//! Time is milliseconds since the state's epoch, passed in (`*_at`), so tests set it.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tower::retry::budget::{Budget, TpsBudget};

use super::metrics::{ClientBodyMetrics, RetryMetrics, UpstreamMetrics, UrlMetrics, url_label};
use super::watchdog::BodyFault;
use crate::config::{Outlier, Upstream};

/// What became of one attempt on a URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    /// The URL answered with this status.
    Answered(u16),
    /// No connection could be made: nothing was sent.
    Unreachable,
    /// The connection failed after the request left, before the answer's head.
    Broken,
}

/// One URL's state.
#[derive(Debug)]
struct UrlState {
    /// 5xx answers in a row.
    fails_5xx: AtomicU32,
    /// Failed or broken connections in a row.
    fails_connect: AtomicU32,
    /// Milliseconds since the epoch until which the URL is out; 0 = never ejected. Shared
    /// with the task that clears the `ejected` gauge when the ejection ends.
    ejected_until_ms: Arc<AtomicU64>,
    /// Ejections in a row (decayed when it is next ejected, see [`Backends::eject_at`]).
    ejections: AtomicU32,
    metrics: UrlMetrics,
    /// The URL as its metrics' `url` label shows it (never its user-info), for the log.
    label: Arc<str>,
}

/// One upstream's shared state: made once per process (and kept by a reload that does not
/// change the upstream), read and written by every worker's [`super::pool::Pool`].
#[derive(Debug)]
pub struct Backends {
    urls: Box<[UrlState]>,
    epoch: Instant,
    outlier: Outlier,
    /// Serialises ejection decisions, so two workers cannot both eject "the last URL the
    /// share allows". Taken only when a URL reaches its threshold.
    ejecting: Mutex<()>,
    /// The retry budget (`None` without `retries`): every request that may be retried
    /// deposits, every retry of a request that was sent withdraws.
    budget: Option<TpsBudget>,
    pub(super) retry_metrics: RetryMetrics,
    /// Attempts ended by the client's request body, by fault.
    client_body: ClientBodyMetrics,
    name: String,
}

/// How long a deposit counts in the retry budget (Finagle's and linkerd's default).
const BUDGET_WINDOW: Duration = Duration::from_secs(10);

impl Backends {
    pub fn new(up: &Upstream, metrics: &UpstreamMetrics) -> Self {
        let urls = (up.urls.iter())
            .map(|u| UrlState {
                fails_5xx: AtomicU32::new(0),
                fails_connect: AtomicU32::new(0),
                ejected_until_ms: Arc::new(AtomicU64::new(0)),
                ejections: AtomicU32::new(0),
                metrics: metrics.url(&up.name, u),
                label: Arc::from(url_label(u)),
            })
            .collect();
        let r = &up.retry;
        Backends {
            urls,
            epoch: Instant::now(),
            outlier: up.outlier.clone(),
            ejecting: Mutex::new(()),
            budget: (r.retries > 0)
                .then(|| TpsBudget::new(BUDGET_WINDOW, r.budget_min_per_second, r.budget_ratio)),
            retry_metrics: metrics.retries(&up.name),
            client_body: metrics.client_body(&up.name),
            name: up.name.clone(),
        }
    }

    pub(super) fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Whether URL `i` is in (not ejected) at `now`.
    pub(super) fn is_in(&self, i: usize, now: u64) -> bool {
        self.urls[i].ejected_until_ms.load(Ordering::Relaxed) <= now
    }

    /// Requests in flight to URL `i`.
    pub(super) fn in_flight(&self, i: usize) -> i64 {
        self.urls[i].metrics.in_flight.get()
    }

    /// An attempt on URL `i` starts: counted, and in flight until the guard is dropped.
    pub(super) fn start(&self, i: usize) -> InFlight {
        let m = &self.urls[i].metrics;
        m.requests.inc();
        m.in_flight.inc();
        InFlight(m.in_flight.clone())
    }

    /// Record what became of an attempt on URL `i`.
    pub(super) fn record(&self, i: usize, outcome: Outcome) {
        self.record_at(i, outcome, self.now_ms());
    }

    /// An attempt ended by the client's request body (`fault`): counted for the upstream,
    /// and nothing else — the URL's failures in a row, its `failures` counters and its
    /// ejection stay as they were, so no client can eject a URL for everyone.
    pub(super) fn client_body_error(&self, fault: BodyFault) {
        self.client_body.count(fault);
    }

    pub(super) fn record_at(&self, i: usize, outcome: Outcome, now: u64) {
        let u = &self.urls[i];
        // A success writes only counters that are not already 0: the usual request
        // leaves the shared cache lines alone.
        let reset = |c: &AtomicU32| {
            if c.load(Ordering::Relaxed) != 0 {
                c.store(0, Ordering::Relaxed);
            }
        };
        let (counter, threshold) = match outcome {
            Outcome::Answered(s) if (500..=599).contains(&s) => {
                u.metrics.status_5xx.inc();
                reset(&u.fails_connect);
                (&u.fails_5xx, self.outlier.consecutive_5xx)
            }
            Outcome::Answered(_) => {
                reset(&u.fails_5xx);
                reset(&u.fails_connect);
                return;
            }
            Outcome::Unreachable | Outcome::Broken => {
                let m = &u.metrics;
                (if outcome == Outcome::Broken {
                    &m.broken
                } else {
                    &m.connect
                })
                .inc();
                reset(&u.fails_5xx);
                (&u.fails_connect, self.outlier.consecutive_connect_failures)
            }
        };
        let in_a_row = counter.fetch_add(1, Ordering::Relaxed) + 1;
        if threshold > 0 && in_a_row >= threshold && self.eject_at(i, now) {
            counter.store(0, Ordering::Relaxed);
        }
    }

    /// Eject URL `i` at `now` unless the share of URLs out is already at its maximum (or
    /// it is out already); whether it was.
    fn eject_at(&self, i: usize, now: u64) -> bool {
        let o = &self.outlier;
        if o.max_ejected_percent == 0 {
            return false;
        }
        let _one_at_a_time = self.ejecting.lock().unwrap_or_else(|e| e.into_inner());
        let u = &self.urls[i];
        let until = u.ejected_until_ms.load(Ordering::Relaxed);
        if until > now {
            return false;
        }
        let out = (0..self.urls.len())
            .filter(|&j| !self.is_in(j, now))
            .count();
        let allowed = (self.urls.len() * o.max_ejected_percent as usize / 100).max(1);
        if out >= allowed {
            tracing::warn!(upstream = %self.name, url = %u.label, out, allowed, "upstream URL failing, not ejected: max_ejected_percent are out already");
            return false;
        }
        let base = o.base_ejection.as_millis() as u64;
        // Each base interval served since the last ejection ended forgives one.
        let forgiven = if until == 0 {
            0
        } else {
            (now - until) / base.max(1)
        };
        let times = u64::from(u.ejections.load(Ordering::Relaxed)).saturating_sub(forgiven) + 1;
        let length = (base.saturating_mul(times)).min(o.max_ejection.as_millis() as u64);
        u.ejections.store(times as u32, Ordering::Relaxed);
        u.ejected_until_ms.store(now + length, Ordering::Relaxed);
        u.metrics.ejections.inc();
        u.metrics.ejected.set(1);
        tracing::warn!(upstream = %self.name, url = %u.label, for_ms = length, times, "upstream URL ejected");
        self.clear_gauge_after(i, now + length, Duration::from_millis(length));
        true
    }

    /// `tollgate_upstream_ejected` back to 0 when the ejection ends (ejection itself ends
    /// by the clock alone: [`Self::is_in`]); off a runtime (unit tests) the gauge stays.
    fn clear_gauge_after(&self, i: usize, until: u64, after: Duration) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let u = &self.urls[i];
        let (gauge, mark) = (u.metrics.ejected.clone(), u.ejected_until_ms.clone());
        let (upstream, url) = (self.name.clone(), u.label.clone());
        rt.spawn(async move {
            tokio::time::sleep(after).await;
            // A later ejection of the same URL (its mark moved) clears its own gauge.
            if mark.load(Ordering::Relaxed) == until {
                gauge.set(0);
                tracing::info!(%upstream, %url, "upstream URL back from ejection");
            }
        });
    }

    /// A request that may be retried passes this way once.
    pub(super) fn deposit(&self) {
        if let Some(b) = &self.budget {
            b.deposit();
        }
    }

    /// Whether the budget allows one more retry of a request that was sent.
    pub(super) fn withdraw(&self) -> bool {
        self.budget.as_ref().is_some_and(|b| b.withdraw())
    }
}

/// One attempt in flight to a URL; held with the response until its body is done.
#[derive(Debug)]
pub struct InFlight(prometheus_client::metrics::gauge::Gauge);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[cfg(test)]
mod tests;
