//! Upstream pools: which backend address a forwarded request goes to.
//!
//! Round robin over the configured URLs; a URL whose connection failed is skipped for
//! [`DEAD_FOR`] (passive health checking, like nginx's `max_fails`/`fail_timeout`), unless
//! every URL is dead, in which case they are all tried rather than failing without trying.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use http::Uri;
use http::uri::{Authority, PathAndQuery, Scheme};

use tokio::sync::Semaphore;

use crate::config::Upstream;

/// How long a URL that refused a connection is left out of the rotation.
pub const DEAD_FOR: Duration = Duration::from_secs(2);

/// One backend address.
#[derive(Debug)]
struct Target {
    scheme: Scheme,
    authority: Authority,
    /// The URL's own path without trailing `/`, prefixed to every forwarded path.
    base_path: String,
    /// Milliseconds since the pool's epoch until which this target is skipped; 0 = alive.
    dead_until_ms: AtomicU64,
}

/// Every upstream's connection slots (`max_connections`) and its URLs' health, made once
/// per process and shared by the workers' pools.
#[derive(Debug, Clone)]
pub struct UpstreamSlots {
    pub(super) slots: Vec<Arc<Semaphore>>,
    /// Per upstream, per URL: false while its active health check says it is down
    /// (`health.rs`); always true without a check.
    pub(super) healthy: Vec<Arc<[AtomicBool]>>,
}

fn all_healthy(up: &Upstream) -> Arc<[AtomicBool]> {
    up.urls.iter().map(|_| AtomicBool::new(true)).collect()
}

impl UpstreamSlots {
    pub fn new(upstreams: &[Upstream]) -> Self {
        UpstreamSlots {
            slots: upstreams
                .iter()
                .map(|u| Arc::new(Semaphore::new(u.max_connections.get())))
                .collect(),
            healthy: upstreams.iter().map(all_healthy).collect(),
        }
    }

    /// The slots of a reloaded config's `new` upstreams: an upstream of the same name and
    /// `max_connections` as in `old` keeps its slots, so the requests still in flight on
    /// the old config count against the same bound as the new ones; one with the same name
    /// and URLs keeps its health marks.
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
    /// Round-robin cursor.
    next: AtomicUsize,
    /// Time origin for `dead_until_ms`, so the mark fits in an atomic.
    epoch: Instant,
    /// One permit per request in flight to this upstream (`max_connections`), shared by
    /// every worker's pool, so one HTTP/2 client's hundreds of streams cannot open
    /// hundreds of upstream connections.
    pub slots: Arc<Semaphore>,
    /// Per target: what the active health check says (shared by every worker's pool).
    healthy: Arc<[AtomicBool]>,
}

impl Pool {
    /// Upstream `index` of the config; `slots` and `healthy` are shared by every worker's
    /// copy of it.
    pub fn new(
        index: usize,
        up: &Upstream,
        slots: Arc<Semaphore>,
        healthy: Arc<[AtomicBool]>,
    ) -> Self {
        let targets = up
            .urls
            .iter()
            .map(|u| Target {
                scheme: u.scheme().cloned().unwrap_or(Scheme::HTTP),
                authority: u.authority().cloned().expect("validated URLs have a host"),
                base_path: u.path().trim_end_matches('/').to_string(),
                dead_until_ms: AtomicU64::new(0),
            })
            .collect();
        Pool {
            name: Arc::from(up.name.as_str()),
            index,
            protocol: up.protocol,
            targets,
            next: AtomicUsize::new(0),
            epoch: Instant::now(),
            slots,
            healthy,
        }
    }

    pub fn len(&self) -> usize {
        self.targets.len()
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// The next live and healthy target (round robin), else the next live one, else the
    /// next one at all: a health check that is wrong about every URL must not turn the
    /// upstream off.
    pub fn pick(&self) -> usize {
        let n = self.targets.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        if n == 1 {
            return 0;
        }
        let now = self.now_ms();
        let live = |i: &usize| self.targets[*i].dead_until_ms.load(Ordering::Relaxed) <= now;
        let healthy = |i: &usize| self.healthy[*i].load(Ordering::Relaxed);
        let order = || (0..n).map(|k| (start + k) % n);
        order()
            .find(|i| live(i) && healthy(i))
            .or_else(|| order().find(live))
            .unwrap_or(start % n)
    }

    /// Leave target `i` out of the rotation for [`DEAD_FOR`].
    pub fn mark_dead(&self, i: usize) {
        let until = self.now_ms() + DEAD_FOR.as_millis() as u64;
        self.targets[i]
            .dead_until_ms
            .store(until, Ordering::Relaxed);
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

    fn pool(urls: &[&str]) -> Pool {
        let up = Upstream {
            name: "app".into(),
            urls: urls.iter().map(|u| u.parse().unwrap()).collect(),
            max_connections: std::num::NonZeroUsize::MIN,
            tls: None,
            health: None,
            protocol: Default::default(),
        };
        Pool::new(0, &up, Arc::new(Semaphore::new(1)), all_healthy(&up))
    }

    #[test]
    fn round_robin_skips_dead() {
        let p = pool(&["http://a:1", "http://b:2", "http://c:3"]);
        let picks: Vec<_> = (0..3).map(|_| p.pick()).collect();
        assert_eq!(picks, vec![0, 1, 2]);
        p.mark_dead(1);
        let picks: Vec<_> = (0..4).map(|_| p.pick()).collect();
        assert!(!picks.contains(&1), "{picks:?}");
    }

    #[test]
    fn all_dead_still_picks_something() {
        let p = pool(&["http://a:1", "http://b:2"]);
        p.mark_dead(0);
        p.mark_dead(1);
        // Every URL dead: the rotation goes on over all of them rather than sticking to one
        // (or failing without trying).
        let picks: Vec<_> = (0..4).map(|_| p.pick()).collect();
        assert_eq!(picks, vec![0, 1, 0, 1]);
        // One comes back to life (its mark expired): only it is picked.
        p.targets[1].dead_until_ms.store(0, Ordering::Relaxed);
        let picks: Vec<_> = (0..3).map(|_| p.pick()).collect();
        assert_eq!(picks, vec![1, 1, 1]);
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
