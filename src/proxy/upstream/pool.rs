//! Upstream pools (step 5): which backend address a forwarded request goes to.
//!
//! The choice is the upstream's `balance` (`balance.rs`) among the URLs that are in (not
//! ejected by outlier detection, `outlier.rs`), healthy (active checks, `health.rs`) and
//! not yet tried by this request; when none is, the rules are dropped one by one, so an
//! upstream whose every URL looks bad is still tried rather than failing without trying.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use http::Uri;
use http::uri::{Authority, PathAndQuery, Scheme};

use tokio::sync::Semaphore;

use super::balance::Picker;
use super::metrics::UpstreamMetrics;
use super::outlier::Backends;
use crate::config::{Retry, Upstream};

/// One backend address.
#[derive(Debug)]
struct Target {
    scheme: Scheme,
    authority: Authority,
    /// The URL's own path without trailing `/`, prefixed to every forwarded path.
    base_path: String,
}

/// The URLs one request has tried (bit `i` for URL `i`; URLs past the 64th are not
/// remembered, so such a URL may be tried twice).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Tried(u64);

impl Tried {
    pub fn add(&mut self, i: usize) {
        if i < 64 {
            self.0 |= 1 << i;
        }
    }

    pub fn has(self, i: usize) -> bool {
        i < 64 && self.0 & (1 << i) != 0
    }

    /// Whether this is the request's first attempt.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether every one of `n` URLs was tried.
    pub fn all(self, n: usize) -> bool {
        (0..n.min(64)).all(|i| self.has(i))
    }
}

/// Every upstream's connection slots (`max_connections`) and its URLs' health, made once
/// per process and shared by the workers' pools.
#[derive(Debug, Clone)]
pub struct UpstreamSlots {
    pub(super) slots: Vec<Arc<Semaphore>>,
    /// Per upstream, per URL: false while its active health check says it is down
    /// (`health.rs`); always true without a check.
    pub(super) healthy: Vec<Arc<[AtomicBool]>>,
    /// Per upstream: its URLs' in-flight counts, failures and ejections, its retry budget.
    pub(super) backends: Vec<Arc<Backends>>,
    /// Where a reload's new upstreams get their metric handles.
    metrics: UpstreamMetrics,
}

fn all_healthy(up: &Upstream) -> Arc<[AtomicBool]> {
    up.urls.iter().map(|_| AtomicBool::new(true)).collect()
}

impl UpstreamSlots {
    pub fn new(upstreams: &[Upstream], metrics: UpstreamMetrics) -> Self {
        UpstreamSlots {
            slots: upstreams
                .iter()
                .map(|u| Arc::new(Semaphore::new(u.max_connections.get())))
                .collect(),
            healthy: upstreams.iter().map(all_healthy).collect(),
            backends: (upstreams.iter())
                .map(|u| Arc::new(Backends::new(u, &metrics)))
                .collect(),
            metrics,
        }
    }

    /// The slots of a reloaded config's `new` upstreams: an upstream of the same name and
    /// `max_connections` as in `old` keeps its slots, so the requests still in flight on
    /// the old config count against the same bound as the new ones; one with the same name
    /// and URLs keeps its health marks, and with the same retry and outlier settings too,
    /// its failures, ejections, in-flight counts and retry budget.
    pub fn reloaded(&self, old: &[Upstream], new: &[Upstream]) -> Self {
        let same = |u: &Upstream| old.iter().position(|o| o.name == u.name);
        UpstreamSlots {
            slots: new
                .iter()
                .map(|u| match same(u) {
                    Some(i) if old[i].max_connections == u.max_connections => self.slots[i].clone(),
                    _ => Arc::new(Semaphore::new(u.max_connections.get())),
                })
                .collect(),
            healthy: new
                .iter()
                .map(|u| match same(u) {
                    Some(i) if old[i].urls == u.urls => self.healthy[i].clone(),
                    _ => all_healthy(u),
                })
                .collect(),
            backends: (new.iter())
                .map(|u| match same(u) {
                    Some(i)
                        if old[i].urls == u.urls
                            && old[i].retry == u.retry
                            && old[i].outlier == u.outlier =>
                    {
                        self.backends[i].clone()
                    }
                    _ => Arc::new(Backends::new(u, &self.metrics)),
                })
                .collect(),
            metrics: self.metrics.clone(),
        }
    }

    /// The health marks of upstream `index` (what its checks write).
    pub fn health_of(&self, index: usize) -> Arc<[AtomicBool]> {
        self.healthy[index].clone()
    }
}

/// The URLs of one `[upstreams.NAME]`.
#[derive(Debug)]
pub struct Pool {
    /// Name as a label for metrics and errors.
    pub name: Arc<str>,
    /// Position in the config's upstreams: which of the forwarder's clients it uses.
    pub index: usize,
    /// HTTP/1.1 or HTTP/2 to it.
    pub protocol: crate::config::UpstreamProtocol,
    targets: Vec<Target>,
    /// This worker's chooser (`balance` and the weights).
    picker: Picker,
    /// The URLs' shared state: in flight, failures, ejections; the retry budget.
    pub backends: Arc<Backends>,
    /// When a request is sent again.
    pub retry: Retry,
    /// One permit per request in flight to this upstream (`max_connections`), shared by
    /// every worker's pool, so one HTTP/2 client's hundreds of streams cannot open
    /// hundreds of upstream connections.
    pub slots: Arc<Semaphore>,
    /// Per target: what the active health check says (shared by every worker's pool).
    healthy: Arc<[AtomicBool]>,
}

impl Pool {
    /// Upstream `index` of the config, with the process's shared state of it.
    pub fn new(index: usize, up: &Upstream, shared: &UpstreamSlots) -> Self {
        let targets = up
            .urls
            .iter()
            .map(|u| Target {
                scheme: u.scheme().cloned().unwrap_or(Scheme::HTTP),
                authority: u.authority().cloned().expect("validated URLs have a host"),
                base_path: u.path().trim_end_matches('/').to_string(),
            })
            .collect();
        Pool {
            name: Arc::from(up.name.as_str()),
            index,
            protocol: up.protocol,
            targets,
            picker: Picker::new(up.balance, &up.weights),
            backends: shared.backends[index].clone(),
            retry: up.retry.clone(),
            slots: shared.slots[index].clone(),
            healthy: shared.healthy[index].clone(),
        }
    }

    pub fn len(&self) -> usize {
        self.targets.len()
    }

    /// The URL for a request that has tried `tried`: by the balance among the URLs in,
    /// healthy and untried; else among those in and untried; else any untried; else any
    /// (a health check or an ejection that is wrong about every URL must not turn the
    /// upstream off).
    pub(super) fn pick(&self, tried: Tried) -> usize {
        if self.targets.len() == 1 {
            return 0;
        }
        let now = self.backends.now_ms();
        let b = &*self.backends;
        let load = |i: usize| b.in_flight(i);
        let fresh = |i: usize| !tried.has(i);
        let healthy = |i: usize| self.healthy[i].load(Ordering::Relaxed);
        let pick = |ok: &dyn Fn(usize) -> bool| match tried.is_empty() {
            true => self.picker.pick(ok, load),
            false => self.picker.pick_again(ok, load),
        };
        pick(&|i| fresh(i) && b.is_in(i, now) && healthy(i))
            .or_else(|| pick(&|i| fresh(i) && b.is_in(i, now)))
            .or_else(|| pick(&fresh))
            .or_else(|| pick(&|_| true))
            .unwrap_or(0)
    }

    /// The URI for `path_and_query` on target `i`.
    pub fn uri(&self, i: usize, path_and_query: &PathAndQuery) -> Result<Uri, http::Error> {
        let t = &self.targets[i];
        let mut parts = http::uri::Parts::default();
        parts.scheme = Some(t.scheme.clone());
        parts.authority = Some(t.authority.clone());
        parts.path_and_query = Some(self.path(i, path_and_query)?);
        Ok(Uri::from_parts(parts)?)
    }

    /// The origin-form URI (path and query only) for `path_and_query` on target `i`: what
    /// an HTTP/1.1 request line to an origin server carries.
    pub fn origin(&self, i: usize, path_and_query: &PathAndQuery) -> Result<Uri, http::Error> {
        let mut parts = http::uri::Parts::default();
        parts.path_and_query = Some(self.path(i, path_and_query)?);
        Ok(Uri::from_parts(parts)?)
    }

    /// Target `i`'s authority when its URL is plain `http://`.
    pub fn plain_authority(&self, i: usize) -> Option<&Authority> {
        let t = &self.targets[i];
        (t.scheme == Scheme::HTTP).then_some(&t.authority)
    }

    /// `path_and_query` under target `i`'s base path (a shared clone when it has none).
    fn path(&self, i: usize, path_and_query: &PathAndQuery) -> Result<PathAndQuery, http::Error> {
        let base = &self.targets[i].base_path;
        if base.is_empty() {
            return Ok(path_and_query.clone());
        }
        Ok(PathAndQuery::try_from(format!("{base}{path_and_query}"))?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::upstream::outlier::Outcome;

    fn pool(urls: &[&str]) -> Pool {
        let text = "[server]\nlisten = \"127.0.0.1:0\"\n[upstreams.app]\nurls = [\"http://a:1\"]\n[[routes]]\nname = \"r\"\nupstream = \"app\"\n";
        let at = std::path::Path::new("t.toml");
        let raw = crate::config::parse_str(text, at).unwrap();
        let mut up = crate::config::validate(raw, at)
            .unwrap()
            .upstreams
            .remove(0);
        up.urls = urls.iter().map(|u| u.parse().unwrap()).collect();
        up.weights = vec![1; urls.len()];
        up.outlier.max_ejected_percent = 100;
        let mut registry = prometheus_client::registry::Registry::default();
        let shared = UpstreamSlots::new(
            std::slice::from_ref(&up),
            UpstreamMetrics::register(&mut registry),
        );
        Pool::new(0, &up, &shared)
    }

    #[test]
    fn round_robin_skips_ejected_and_tried() {
        let p = pool(&["http://a:1", "http://b:2", "http://c:3"]);
        let picks: Vec<_> = (0..3).map(|_| p.pick(Tried::default())).collect();
        assert_eq!(picks, vec![0, 1, 2]);
        p.backends.record(1, Outcome::Unreachable);
        let picks: Vec<_> = (0..4).map(|_| p.pick(Tried::default())).collect();
        assert!(!picks.contains(&1), "{picks:?}");
        let mut tried = Tried::default();
        tried.add(0);
        tried.add(2);
        assert_eq!(p.pick(tried), 1, "ejected, but the only one not tried");
    }

    #[test]
    fn all_ejected_still_picks_something() {
        let p = pool(&["http://a:1", "http://b:2"]);
        p.backends.record(0, Outcome::Unreachable);
        p.backends.record(1, Outcome::Unreachable);
        // Every URL out: the rotation goes on over all of them rather than sticking to one
        // (or failing without trying).
        let picks: Vec<_> = (0..4).map(|_| p.pick(Tried::default())).collect();
        assert_eq!(picks, vec![0, 1, 0, 1]);
    }

    #[test]
    fn base_path_is_prefixed() {
        let p = pool(&["http://a:1/base/"]);
        assert_eq!(
            p.uri(0, &PathAndQuery::from_static("/x?y=1"))
                .unwrap()
                .to_string(),
            "http://a:1/base/x?y=1"
        );
    }

    #[test]
    fn origin_form_and_plain_authority() {
        let p = pool(&["http://a:1/base/", "https://b:2"]);
        let pq = PathAndQuery::from_static("/x?y=1");
        assert_eq!(p.origin(0, &pq).unwrap().to_string(), "/base/x?y=1");
        assert_eq!(p.origin(1, &pq).unwrap().to_string(), "/x?y=1");
        assert_eq!(p.plain_authority(0).map(|a| a.as_str()), Some("a:1"));
        assert_eq!(p.plain_authority(1), None);
    }
}
