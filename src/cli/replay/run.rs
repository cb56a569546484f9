//! The replay's core: each [`Record`] walks the gateway's own steps — canonical path
//! (`tollgate::normalize`), route (`router.rs`), limit (`Limiter::check`) — on a virtual clock set
//! from the log, and the outcome is counted in the [`Tally`].
//!
//! One process decides for the whole log, so the config is first made local: every policy
//! is decided as one exact in-process state with its full limit (central, lease, split,
//! owner and gossip sites become `local`; no Redis, no peers), and `shadow` becomes
//! `enforce`, since replay answers what enforcing would have done (`off` stays off).
//!
//! A log line carries the account, not the request's other headers, query, cookies or
//! token: a policy keyed on one of those is replayed with `on_missing_key = "skip"`, since
//! the log cannot say whether the request lacked the part (as `shared` or `deny`, every
//! line would). The account's `on_missing_key` is replayed as configured.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::IpAddr;
use std::sync::Arc;

use http::{HeaderMap, HeaderValue, Method};
use prometheus_client::registry::Registry;

use super::ReplayError;
use super::parse::Record;
use super::tally::Tally;
use super::time::UnixNanos;
use crate::config::{Config, KeyPart, Mode, OnMissingKey, Site, StoreKind};
use crate::limit::clock::ManualClock;
use crate::limit::keys::KeyBuilder;
use crate::limit::permit::Permits;
use crate::limit::policy::PolicyRuntime;
use crate::limit::spec::LimiterSpec;
use crate::limit::{Answer, Counted, Limiter};
use crate::normalize::normalize_path;
use crate::router::Router;

/// `config` as one process replaying the whole fleet's log decides it (see the module doc).
pub fn local_config(config: &Config) -> Config {
    let mut c = config.clone();
    c.store.kind = StoreKind::Memory;
    c.cluster.peer_listen = None;
    c.cluster.peers.clear();
    c.expected_nodes = std::num::NonZeroU32::MIN;
    c.cluster.expected_nodes = std::num::NonZeroU32::MIN;
    // A log carries the account value (with `jwt`, the claim a verified token named), not
    // the token: hashed as it is, it gives the key production built from the claim.
    if let Some(a) = c.account.as_mut() {
        a.jwt = None;
    }
    for p in &mut c.policies {
        p.site = Site::Local;
        p.local_first = false;
        if p.key.iter().any(|k| !replayed(k)) {
            p.on_missing_key = Some(OnMissingKey::Skip);
        }
        if p.mode == Some(Mode::Shadow) {
            p.mode = Some(Mode::Enforce);
        }
    }
    for r in &mut c.routes {
        if r.mode == Mode::Shadow {
            r.mode = Mode::Enforce;
        }
    }
    c
}

/// Whether replay knows if a request had key part `k`: the log carries the client, the
/// route, the method and the account, nothing else a key reads.
fn replayed(k: &KeyPart) -> bool {
    matches!(
        k,
        KeyPart::Ip | KeyPart::Route | KeyPart::Method | KeyPart::Account
    )
}

/// Concurrency cells a replayed request holds until its logged end.
struct Held {
    end: UnixNanos,
    /// Tie-break, so equal ends compare in arrival order.
    seq: u64,
    /// Released when dropped.
    _permits: Permits,
}

impl PartialEq for Held {
    fn eq(&self, o: &Self) -> bool {
        (self.end, self.seq) == (o.end, o.seq)
    }
}
impl Eq for Held {}
impl PartialOrd for Held {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Held {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.end, self.seq).cmp(&(o.end, o.seq))
    }
}

/// The gateway's steps, on a clock the log sets.
pub struct Replayer {
    config: Config,
    router: Router,
    limiter: Limiter,
    clock: ManualClock,
    /// Builds denied requests' keys exactly as the limiter does (for the top keys).
    keys: KeyBuilder,
    policies: Vec<PolicyRuntime>,
    /// `--host`: the host requests are routed as (logs do not record `Host`).
    host: Option<String>,
    /// Reused for the account header.
    headers: HeaderMap,
    /// Permits held until their request's logged end, soonest first.
    held: BinaryHeap<Reverse<Held>>,
    seq: u64,
    /// The clock's epoch (the first record's time) and its reading.
    epoch: Option<UnixNanos>,
    now: UnixNanos,
    pub tally: Tally,
}

impl Replayer {
    /// A replayer for `config` (already made local by [`local_config`]).
    pub fn new(config: Config, host: Option<String>) -> Result<Self, ReplayError> {
        let clock = ManualClock::new();
        let spec = LimiterSpec::from(&config);
        let keys = KeyBuilder::new(&spec.ip_keys, spec.account.clone());
        let limiter = Limiter::new(spec, Arc::new(clock.clone()), &mut Registry::default())?;
        let headrooms = keys.headrooms();
        let policies = config
            .policies
            .iter()
            .enumerate()
            .map(|(i, p)| PolicyRuntime::new(i, p, &headrooms))
            .collect::<Result<Vec<_>, _>>()
            .map_err(crate::limit::LimiterError::from)?;
        let tally = Tally::new(config.routes.iter().map(|r| r.policies.len()));
        Ok(Replayer {
            router: Router::new(&config),
            limiter,
            clock,
            keys,
            policies,
            host: host.map(|h| canonical_host(h.as_bytes())),
            headers: HeaderMap::new(),
            held: BinaryHeap::new(),
            seq: 0,
            epoch: None,
            now: UnixNanos::MIN,
            tally,
            config,
        })
    }

    /// Move the clock to the record's time (never back) and release what ended by then.
    fn tick(&mut self, at: UnixNanos) -> UnixNanos {
        if at < self.now {
            self.tally.out_of_order += 1;
        }
        self.now = self.now.max(at);
        let epoch = *self.epoch.get_or_insert(self.now);
        // `abs_diff`: the log's first and latest moments may be further apart than an i64.
        self.clock.set(self.now.abs_diff(epoch));
        while self.held.peek().is_some_and(|h| h.0.end <= self.now) {
            self.held.pop();
        }
        self.now
    }

    /// Replay one request.
    pub async fn record(&mut self, r: &Record<'_>) {
        let now = self.tick(r.at);
        let policies = self.policies.len();
        self.tally.request_at(now, policies);
        let Some((method, host, path)) = self.target(r) else {
            self.tally.bad_request += 1;
            return;
        };
        // Clearing walks the map's whole table even when it is empty (most lines name no
        // account): ~60 instructions a line for nothing.
        if !self.headers.is_empty() {
            self.headers.clear();
        }
        if let (Some(account), Some(acct)) = (&self.config.account, &r.account)
            && let Ok(v) = HeaderValue::from_bytes(acct)
        {
            self.headers.insert(account.header.clone(), v);
        }
        let host = host.as_deref().or(self.host.as_deref());
        let Some(entry) = self.router.find(host, &path, &method) else {
            self.tally.no_route += 1;
            return;
        };
        let index = entry.index;
        // The keys the live gateway logged (its own JSON log): those policies are keyed so.
        let key = r.key.as_deref().and_then(|k| std::str::from_utf8(k).ok());
        let keys = r.keys.as_deref().and_then(|k| std::str::from_utf8(k).ok());
        let given: smallvec::SmallVec<[&str; 4]> = (key.into_iter())
            .chain(keys.into_iter().flat_map(|k| k.split(' ')))
            .collect();
        let admission = self
            .limiter
            .check_given(index, &entry.name, r.client, &method, &self.headers, &given)
            .await;
        let counted = self.count(index, r, &method, admission.answer, &given);
        // `count = { statuses }` policies settle on the logged status, as they would on
        // the upstream's; a line without one keeps its spends (as a request that ended
        // without a head does).
        if let Some(status) = r.status {
            counted.settle(status, &HeaderMap::new());
        }
    }

    /// Method, host and canonical path, or `None` where the gateway answers 400.
    fn target<'r>(
        &self,
        r: &'r Record<'_>,
    ) -> Option<(Method, Option<String>, std::borrow::Cow<'r, str>)> {
        let (method, target) = r.request.as_ref()?;
        let method = Method::from_bytes(method).ok()?;
        // As `proxy/canonical.rs`: CONNECT and a method not in upper case are refused.
        if method == Method::CONNECT || method.as_str().bytes().any(|b| b.is_ascii_lowercase()) {
            return None;
        }
        let (authority, path) = split_target(target);
        let path = std::str::from_utf8(path).ok()?;
        let path = normalize_path(path, self.config.server.paths).ok()?;
        Some((method, authority.map(canonical_host), path))
    }

    /// Count what the limiter decided; remember denied keys and held permits. Returns an
    /// admitted request's spends, for the logged status to settle.
    fn count(
        &mut self,
        route: usize,
        r: &Record<'_>,
        m: &Method,
        a: Answer,
        given: &[&str],
    ) -> Counted {
        let rt = &mut self.tally.routes[route];
        rt.requests += 1;
        let (denied, report, permits, counted) = match a {
            Answer::Admit(a) => (false, a.report, a.permits, a.counted),
            Answer::Deny { report } => (true, report, Permits::default(), Counted::default()),
            // The replay's store is in memory and never fails; counted as allowed, as always.
            Answer::Unavailable { .. } => {
                (false, Vec::new(), Permits::default(), Counted::default())
            }
            // The 401s and 400s the gateway answers (no account, a token that does not
            // verify, a key part stated ambiguously, an `on_missing_key = "deny"` policy's
            // missing account, claim or other part).
            Answer::Unauthenticated | Answer::MissingCredential(_) => {
                rt.unauthorized += 1;
                return Counted::default();
            }
            Answer::Ambiguous(_) | Answer::MissingKey(_) => {
                rt.bad_request += 1;
                return Counted::default();
            }
        };
        match denied {
            true => rt.denied += 1,
            false => rt.allowed += 1,
        }
        let route_policies = &self.config.routes[route].policies;
        let mut denied_by = Vec::new();
        for p in &report {
            let Some(i) = self.policies.iter().position(|q| q.name == p.name) else {
                continue;
            };
            let Some(slot) = route_policies.iter().position(|&q| q == i) else {
                continue;
            };
            match p.retry_after {
                Some(_) => {
                    rt.policies[slot].1 += 1;
                    denied_by.push(i);
                }
                None => rt.policies[slot].0 += 1,
            }
        }
        if let Some(bin) = self.tally.minutes.last_mut() {
            bin.denied_requests += u64::from(denied);
            denied_by.iter().for_each(|&i| bin.denied[i] += 1);
        }
        self.remember_keys(&denied_by, route, r.client, m, given);
        if !permits.is_empty() {
            let end = self.now.saturating_add(r.duration.unwrap_or(0) as i64);
            self.seq += 1;
            self.held.push(Reverse(Held {
                end,
                seq: self.seq,
                _permits: permits,
            }));
        }
        counted
    }

    /// Count the keys of the policies that denied, built as the limiter builds them
    /// (accounts and header values hashed with the config's key).
    fn remember_keys(
        &mut self,
        denied_by: &[usize],
        route: usize,
        client: IpAddr,
        m: &Method,
        given: &[&str],
    ) {
        if denied_by.is_empty() {
            return;
        }
        let route = &self.config.routes[route].name;
        let mut facts = self
            .keys
            .facts(client, route, m, Default::default(), &self.headers);
        facts.give(given);
        for &i in denied_by {
            if let Ok(Some(key)) = self.keys.key(&self.policies[i], &facts) {
                *self.tally.denied_keys.entry((i, key)).or_insert(0) += 1;
            }
        }
    }
}

/// The authority (absolute-form target) and the path without query or fragment.
fn split_target(t: &[u8]) -> (Option<&[u8]>, &[u8]) {
    // The common origin-form target: no scheme to look for.
    let origin = t.first() == Some(&b'/');
    let starts = |s: &[u8]| t.get(..s.len()).is_some_and(|p| p.eq_ignore_ascii_case(s));
    let scheme = match () {
        _ if origin => 0,
        _ if starts(b"http://") => 7,
        _ if starts(b"https://") => 8,
        _ => 0,
    };
    let (authority, rest) = if scheme > 0 {
        let rest = &t[scheme..];
        let end = rest
            .iter()
            .position(|&b| matches!(b, b'/' | b'?' | b'#'))
            .unwrap_or(rest.len());
        (Some(&rest[..end]), &rest[end..])
    } else {
        (None, t)
    };
    let end = rest
        .iter()
        .position(|&b| matches!(b, b'?' | b'#'))
        .unwrap_or(rest.len());
    match (&rest[..end], authority) {
        (b"", Some(_)) => (authority, b"/"),
        (path, _) => (authority, path),
    }
}

/// Lower case, without port or trailing dot, as the router compares hosts.
fn canonical_host(a: &[u8]) -> String {
    let a = String::from_utf8_lossy(a).to_ascii_lowercase();
    let host = match a.strip_prefix('[') {
        Some(rest) => {
            let literal = rest.split(']').next().unwrap_or(rest);
            // RFC 5952's form, as the gateway's (`proxy/canonical.rs`) and routes' are.
            return literal
                .parse::<std::net::Ipv6Addr>()
                .map_or_else(|_| literal.to_owned(), |addr| addr.to_string());
        }
        None => a.rsplit_once(':').map_or(a.as_str(), |(h, _)| h),
    };
    host.trim_end_matches('.').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_split_into_authority_and_path() {
        assert_eq!(split_target(b"/a/b?c=1"), (None, &b"/a/b"[..]));
        assert_eq!(
            split_target(b"HTTP://Api.Example.com:8080//x#f"),
            (Some(&b"Api.Example.com:8080"[..]), &b"//x"[..])
        );
        assert_eq!(split_target(b"https://h?q"), (Some(&b"h"[..]), &b"/"[..]));
        assert_eq!(split_target(b"*"), (None, &b"*"[..]));
        assert_eq!(canonical_host(b"Api.Example.COM.:443"), "api.example.com");
        assert_eq!(canonical_host(b"[2001:DB8::1]:80"), "2001:db8::1");
    }
}
