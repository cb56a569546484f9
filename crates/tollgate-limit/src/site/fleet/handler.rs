//! What this node answers on its peer listener: the owner's decisions for the keys it owns
//! (`ask`, `refund`), the other nodes' gossiped spends (`gossip`), its count of a gossip key
//! for a peer catching up (`sync`), and `ping`.
//!
//! Everything lands in this node's own local state (`local.rs`), in the same tables its
//! own requests use: an owner's key is decided in one place whoever asks, and a gossiped
//! spend weighs on the next local decision. The transport has already authenticated the
//! message; an item that names an unknown policy, one of another site, or one whose numbers
//! differ here (its fingerprint) is refused (`Answer::Unknown`, or [`REFUSED`] for gossip),
//! never guessed at.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::Arc;

use arc_swap::ArcSwap;
use bytes::Bytes;

use super::codec::{Answer, KeyItem, fingerprint};
use super::fresh::Freshness;
use super::report::Report;
use super::ring::Ring;

/// A gossip report's answer when this node refuses it (no such gossip policy here, or other
/// numbers).
pub const REFUSED: &[u8] = b"?";
use crate::algorithm::Verdict;
use crate::peer::{Op, PeerHandler, Request, Response};
use crate::policy::PolicyRuntime;
use crate::site::local::{CheckItem, LocalStore, Spends};
use crate::spec::Site;

/// Serves peer messages from this node's local state.
pub struct FleetHandler {
    /// The running config's policies and state; a reload swaps it (`rebind`).
    view: ArcSwap<View>,
    /// This node's `peer_listen`, the answer to a ping: a pinger that dialled another
    /// address learns that the fleet names this node two ways.
    me: Bytes,
    /// Hears every message (silence makes the gossip view stale).
    fresh: Arc<Freshness>,
    /// A peer that asks to sync is alive and reaching us: it goes back into the live set,
    /// so our next push reaches it (what it missed before, the sync's answer carries).
    ring: Arc<Ring>,
}

/// What the handler decides with, for one config.
struct View {
    local: Arc<LocalStore>,
    policies: Arc<[PolicyRuntime]>,
    /// Policy index by name.
    by_name: HashMap<Arc<str>, usize>,
    /// Each policy's fingerprint, as askers must send it.
    specs: Vec<u64>,
}

impl View {
    fn new(local: Arc<LocalStore>, policies: Arc<[PolicyRuntime]>) -> Self {
        let by_name = policies.iter().map(|p| (p.name.clone(), p.index)).collect();
        let specs = policies.iter().map(|p| fingerprint(&p.spec)).collect();
        View {
            local,
            policies,
            by_name,
            specs,
        }
    }

    /// The index and fingerprint of policy `name` if this node runs it at `site`.
    fn policy(&self, name: &str, site: Site) -> Option<(usize, u64)> {
        let &i = self.by_name.get(name)?;
        (self.policies[i].spec.site == site).then(|| (i, self.specs[i]))
    }
}

impl FleetHandler {
    pub fn new(
        local: Arc<LocalStore>,
        policies: Arc<[PolicyRuntime]>,
        me: SocketAddr,
        fresh: Arc<Freshness>,
        ring: Arc<Ring>,
    ) -> Self {
        FleetHandler {
            view: ArcSwap::from_pointee(View::new(local, policies)),
            me: Bytes::from(me.to_string()),
            fresh,
            ring,
        }
    }

    /// Answer from a reloaded config's policies and state from now on.
    pub fn rebind(&self, local: Arc<LocalStore>, policies: Arc<[PolicyRuntime]>) {
        self.view.store(Arc::new(View::new(local, policies)));
    }

    /// The fingerprint of gossip policy `name` as this node runs it now; `None` when it
    /// runs no such gossip policy (its pending spends are then not pushed).
    pub fn gossip_spec(&self, name: &str) -> Option<u64> {
        self.view
            .load()
            .policy(name, Site::Gossip)
            .map(|(_, spec)| spec)
    }

    /// The local item for a peer's key item, if its policy exists here at `site`.
    fn item(&self, view: &View, data: Bytes, site: Site) -> Option<CheckItem> {
        let k = KeyItem::decode(data)?;
        let (policy, spec) = view.policy(&k.policy, site)?;
        if k.spec != spec {
            return None;
        }
        Some(CheckItem {
            policy,
            // An unknown headroom decides at headroom 1 (`PolicyRuntime::algorithm`).
            headroom: NonZeroU32::new(k.headroom).unwrap_or(NonZeroU32::MIN),
            key: k.key,
            cost: k.cost,
            fallback: false,
        })
    }

    /// Weigh a peer's gossip report on this node's state; `false` (refused) when the
    /// policy is unknown here, not a gossip policy, or runs other numbers. A malformed
    /// entry ends the report (the entries before it were spends all the same).
    fn gossip(&self, view: &View, data: Bytes) -> bool {
        let Some(report) = Report::decode(data) else {
            return false;
        };
        let Some((policy, spec)) = std::str::from_utf8(&report.policy)
            .ok()
            .and_then(|name| view.policy(name, Site::Gossip))
        else {
            return false;
        };
        if report.spec != spec {
            return false;
        }
        // One item for the whole report: each entry rewrites its key in place, so a fold
        // allocates no key (the local store copies one only for a key new to it).
        let mut item = CheckItem {
            policy,
            headroom: NonZeroU32::MIN,
            key: String::new(),
            cost: 0,
            fallback: false,
        };
        let mut entries = report.entries();
        while let Some(Ok(spent)) = entries.next_entry() {
            item.headroom = NonZeroU32::new(spent.headroom).unwrap_or(NonZeroU32::MIN);
            item.cost = spent.cells;
            item.key.clear();
            item.key.push_str(spent.key);
            view.local.debit(&item);
        }
        true
    }

    /// This node's count of a peer's gossip key, spending nothing: an `Admitted` answer
    /// carrying its remaining and reset.
    fn sync(&self, view: &View, data: Bytes) -> Answer {
        let Some(item) = self.item(view, data, Site::Gossip) else {
            return Answer::Unknown;
        };
        let s = view
            .local
            .peek(item.policy, &item.key, item.headroom, false);
        Answer::Admitted {
            remaining: s.remaining,
            reset_after: s.reset_after,
            wait: 0,
            next_after: s.next_after,
        }
    }

    /// Decide one asked key as its owner: spend if it conforms.
    fn ask(&self, view: &View, data: Bytes) -> Answer {
        let Some(item) = self.item(view, data, Site::Owner) else {
            return Answer::Unknown;
        };
        let results = view.local.check(std::slice::from_ref(&item), |ds| {
            ds.iter().map(|v| v.admits()).collect::<Spends>()
        });
        let r = &results[0];
        let (remaining, reset_after) = (r.snapshot.remaining, r.snapshot.reset_after);
        let next_after = r.snapshot.next_after;
        match r.decision.verdict {
            Verdict::Allow => Answer::Admitted {
                remaining,
                reset_after,
                wait: 0,
                next_after,
            },
            Verdict::Delay(wait) => Answer::Admitted {
                remaining,
                reset_after,
                wait,
                next_after,
            },
            Verdict::Deny { retry_after } => Answer::Denied {
                remaining,
                reset_after,
                retry_after,
            },
        }
    }
}

impl PeerHandler for FleetHandler {
    async fn handle(&self, from: SocketAddr, request: Request) -> Response {
        self.fresh.heard();
        if request.items.iter().any(|i| i.op == Op::Sync) && self.ring.answered(from) {
            // It was counted out: it may have missed our pushes, and we its.
            self.fresh.mark();
        }
        let view = self.view.load();
        let items = request
            .items
            .into_iter()
            .map(|item| match item.op {
                Op::Ask => self.ask(&view, item.data).encode(),
                Op::Refund => {
                    if let Some(it) = self.item(&view, item.data, Site::Owner) {
                        view.local.refund(&it);
                    }
                    Bytes::new()
                }
                Op::Debit => {
                    if let Some(it) = self.item(&view, item.data, Site::Owner) {
                        view.local.debit(&it);
                    }
                    Bytes::new()
                }
                Op::Sync => self.sync(&view, item.data).encode(),
                Op::Gossip if self.gossip(&view, item.data) => Bytes::new(),
                Op::Gossip => Bytes::from_static(REFUSED),
                Op::Ping => self.me.clone(),
            })
            .collect();
        Response { items }
    }
}
