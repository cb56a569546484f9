//! What the response head decides about an admitted request's spends: `count = { statuses }`
//! (only some statuses keep them), `response_cost_header` (the upstream reports what the
//! call really cost: LLM tokens, rows) and `cost = "request_bytes"` for a streamed body (the
//! bytes it has sent by then).
//!
//! The limit step spends as usual (so the check before forwarding denies a key that is
//! already over, and requests in flight hold their cells: a burst of concurrent failed
//! logins cannot all get through before the first fails). When the head arrives,
//! [`Counted::settle`] moves each spend to its final size at the site that holds it: back to
//! nothing for a status its policy does not count; to the reported cost otherwise — the rest
//! given back, or the excess debited, which may take the key below empty (the next
//! requests then wait). A request that never gets a head (the client went away) keeps its
//! spends as they were.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use http::{HeaderMap, HeaderName};

use super::ask::{Spent, keeps};
use super::check::Check;
use super::deny_cache::DenyCache;
use super::site::central::{CentralItem, CentralSite};
use super::site::fleet::{FleetSite, KeyItem};
use super::site::lease::{LeaseItem, LeaseSite};
use super::site::local::{CheckItem, LocalStore};
use crate::spec::Site;

/// One spend, at the site that holds it.
#[derive(Debug)]
pub(super) enum Spend {
    /// This node's state (local, split, a store policy's L/N fallback); gossip policies
    /// also name themselves, so a debit reaches the peers.
    Local(CheckItem, Option<Arc<str>>),
    /// The limiter's key (the deny cache's) and the store's item.
    Central(String, CentralItem),
    Lease(LeaseItem),
    /// Reserved at another node.
    Owner(SocketAddr, KeyItem),
}

impl Spend {
    fn cost(&self) -> u32 {
        match self {
            Spend::Local(i, _) => i.cost,
            Spend::Central(_, i) => i.params[4] as u32,
            Spend::Lease(i) => i.cost,
            Spend::Owner(_, i) => i.cost,
        }
    }

    /// The same spend of `cost` cells.
    fn resized(mut self, cost: u32) -> Self {
        match &mut self {
            Spend::Local(i, _) => i.cost = cost,
            Spend::Central(_, i) => i.params[4] = f64::from(cost),
            Spend::Lease(i) => i.cost = cost,
            Spend::Owner(_, i) => i.cost = cost,
        }
        self
    }
}

/// What settles one spend: its policy's counted statuses (sorted) and reported-cost header.
#[derive(Debug, Clone)]
pub(super) struct Rule {
    pub statuses: Option<Arc<[u16]>>,
    pub response_cost: Option<HeaderName>,
    /// `request_bytes` of a streamed body: the spend becomes the bytes sent.
    pub body_bytes: bool,
}

/// Where the spends are settled.
#[derive(Clone)]
pub(super) struct Sites {
    pub local: Arc<LocalStore>,
    pub central: Option<Arc<CentralSite>>,
    pub lease: Arc<LeaseSite>,
    pub fleet: Option<Arc<FleetSite>>,
    pub denied_until: Arc<DenyCache>,
}

/// The settled spends of one admitted request (boxed: most requests have none, and the
/// admission travels by value). Dropped unsettled — the request ended without a head (the
/// client went away) — it still charges a streamed body the bytes it sent.
#[derive(Default)]
pub struct Counted(Option<Box<Inner>>);

struct Inner {
    sites: Sites,
    spends: Spends,
    /// A streamed body's bytes so far, when a `request_bytes` spend waits for them.
    sent: Option<Arc<AtomicU64>>,
}

/// The counter the forwarder adds a streamed request body's bytes to (carried to it in the
/// request's extensions).
#[derive(Clone)]
pub struct SentBytes(pub Arc<AtomicU64>);

/// Each spend with what settles it.
type Spends = Vec<(Rule, Spend)>;

/// Refunds and debits, by site, of one settlement.
#[derive(Default)]
struct Moves {
    refund: Vec<Spend>,
    debit: Vec<Spend>,
}

impl Counted {
    pub(super) fn new(sites: Sites, spends: Spends) -> Self {
        if spends.is_empty() {
            return Counted::default();
        }
        let counts_body = spends.iter().any(|(r, _)| r.body_bytes);
        let sent = counts_body.then(|| Arc::new(AtomicU64::new(0)));
        Counted(Some(Box::new(Inner {
            sites,
            spends,
            sent,
        })))
    }

    /// Where the forwarder counts a streamed body's bytes, when a spend waits for them.
    pub fn sent_bytes(&self) -> Option<SentBytes> {
        let sent = self.0.as_ref()?.sent.as_ref()?;
        Some(SentBytes(sent.clone()))
    }

    /// The response head has `status` and `headers`: size each spend to what its policy
    /// keeps. Store and owner calls run in the background, as the limit step's own do.
    pub fn settle(mut self, status: u16, headers: &HeaderMap) {
        if let Some(inner) = self.0.take() {
            inner.finish(Some((status, headers)));
        }
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        if let Some(inner) = self.0.take() {
            inner.finish(None);
        }
    }
}

impl Inner {
    /// Size each spend: by the head when there is one; without one, only a streamed body's
    /// bytes are known (counted statuses and reported costs keep the spend as it is).
    fn finish(self, head: Option<(u16, &HeaderMap)>) {
        let sent = self.sent.map_or(0, |s| s.load(Ordering::Relaxed));
        let body = u32::try_from(sent.max(1)).unwrap_or(u32::MAX);
        let mut moves = Moves::default();
        for (rule, spend) in self.spends {
            let spent = spend.cost();
            let keep = match head {
                _ if rule.body_bytes => body,
                None => spent,
                Some((status, headers)) => match (&rule.response_cost, &rule.statuses) {
                    (_, Some(s)) if s.binary_search(&grpc_as_http(headers, status)).is_err() => 0,
                    (Some(h), _) => reported(headers, h).unwrap_or(spent),
                    (None, _) => spent,
                },
            };
            if keep < spent {
                moves.refund.push(spend.resized(spent - keep));
            } else if keep > spent {
                moves.debit.push(spend.resized(keep - spent));
            }
        }
        self.sites.apply(moves);
    }
}

/// The status `count` reads: a gRPC error answered in the head (Trailers-Only, as servers
/// answer a call that fails before any message) as the HTTP status it maps to
/// (UNAUTHENTICATED 401, PERMISSION_DENIED 403, …: the mapping of Google's API design
/// guide), since such an answer is HTTP 200; any other response its own status.
fn grpc_as_http(headers: &HeaderMap, status: u16) -> u16 {
    let Some(code) = headers.get("grpc-status").and_then(|v| v.to_str().ok()) else {
        return status;
    };
    match code.trim() {
        "0" => 200,
        "1" => 499,
        "3" | "9" | "11" => 400,
        "4" => 504,
        "5" => 404,
        "6" | "10" => 409,
        "7" => 403,
        "8" => 429,
        "12" => 501,
        "14" => 503,
        "16" => 401,
        _ => 500,
    }
}

/// The cost a response reports: one whole number; anything else leaves the estimate.
fn reported(headers: &HeaderMap, name: &HeaderName) -> Option<u32> {
    let mut all = headers.get_all(name).into_iter();
    let v = all.next()?;
    if all.next().is_some() {
        return None;
    }
    v.to_str().ok()?.trim().parse().ok()
}

impl Sites {
    fn apply(self, moves: Moves) {
        let (mut central, mut central_debit, mut lease, mut owner) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut lease_debit, mut owner_debit) = (Vec::new(), Vec::new());
        for spend in moves.refund {
            match spend {
                Spend::Local(item, _) => self.local.refund(&item),
                Spend::Central(key, item) => central.push((key, item)),
                Spend::Lease(item) => lease.push(item),
                Spend::Owner(at, item) => owner.push((at, item)),
            }
        }
        for spend in moves.debit {
            match spend {
                Spend::Local(item, gossip) => {
                    self.local.debit(&item);
                    if let (Some(name), Some(fleet)) = (gossip, &self.fleet) {
                        fleet.record(&name, item.headroom.get(), &item.key, item.cost);
                    }
                }
                Spend::Central(_, item) => central_debit.push(item),
                Spend::Lease(item) => lease_debit.push(item),
                Spend::Owner(at, item) => owner_debit.push((at, item)),
            }
        }
        self.lease.give_back(&lease);
        self.lease.debit(&lease_debit);
        // Outside a runtime (process exit) peer and store calls are skipped: the keys keep
        // their spends until they refill.
        let rt = tokio::runtime::Handle::try_current().ok();
        if let Some(fleet) = self.fleet.as_ref().filter(|_| rt.is_some()) {
            // The keys move: what this node remembered of them is stale.
            owner
                .iter()
                .chain(&owner_debit)
                .for_each(|(_, i)| self.denied_until.forget(&i.key));
            if !owner.is_empty() {
                fleet.refund(owner);
            }
            if !owner_debit.is_empty() {
                fleet.debit(owner_debit);
            }
        }
        let (Some(site), Some(rt)) = (self.central.clone(), rt) else {
            return;
        };
        if !central_debit.is_empty() {
            let site = site.clone();
            rt.spawn(async move { site.debit(&central_debit).await });
        }
        if !central.is_empty() {
            // The key moves back: what this node remembered of it is stale.
            let (cache, local) = (self.denied_until, self.local);
            let now = local.now();
            let (keys, central): (Vec<String>, Vec<CentralItem>) = central.into_iter().unzip();
            keys.iter().for_each(|k| cache.refunding(k, now));
            rt.spawn(async move {
                site.refund(&central).await;
                let now = local.now();
                keys.iter().for_each(|k| cache.refunding(k, now));
            });
        }
    }
}

impl Check<'_> {
    /// The kept spends of policies with `count` or `response_cost_header` (before `end`
    /// takes the store spends apart).
    pub(super) fn counted(&self, enforce_ok: bool, all_ok: bool) -> Counted {
        if !enforce_ok {
            return Counted::default();
        }
        let mut spends = Vec::new();
        for ask in &self.asks {
            let policy = &self.sites.policies[ask.entry.policy];
            let rules = &policy.spec.spend;
            let body_bytes = rules.request_bytes && ask.streamed;
            if rules.count_statuses.is_none() && rules.response_cost.is_none() && !body_bytes {
                continue;
            }
            let kept = keeps(ask.entry.mode, enforce_ok, all_ok);
            if !(kept && ask.decided.is_some_and(|d| d.committed)) {
                continue;
            }
            let spend = match &ask.spent {
                Spent::Central(item) => Spend::Central(ask.key.clone(), item.clone()),
                Spent::Lease(item) => Spend::Lease(item.clone()),
                Spent::Owner(at, item) => Spend::Owner(*at, item.clone()),
                // Decided here: this node's own state, or its L/N share.
                Spent::Nothing => {
                    let split = ask.entry.site == Site::Split || ask.fallback;
                    let gossip = (ask.entry.site == Site::Gossip).then(|| policy.name.clone());
                    Spend::Local(self.check_item(ask, split), gossip)
                }
            };
            let rule = Rule {
                statuses: rules.count_statuses.as_deref().map(Arc::from),
                response_cost: rules.response_cost.clone(),
                body_bytes,
            };
            spends.push((rule, spend));
        }
        if spends.is_empty() {
            return Counted::default();
        }
        let s = self.sites;
        let sites = Sites {
            local: s.local.clone(),
            central: s.central.clone(),
            lease: s.lease.clone(),
            fleet: s.fleet.clone(),
            denied_until: s.denied_until.clone(),
        };
        Counted::new(sites, spends)
    }
}

impl std::fmt::Debug for Counted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Counted({})",
            self.0.as_ref().map_or(0, |b| b.spends.len())
        )
    }
}
