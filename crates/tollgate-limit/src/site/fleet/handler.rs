//! What this node answers on its peer listener: the owner's decisions for the keys it owns
//! (`ask`, `refund`), the other nodes' gossiped spends (`gossip`), its count of a gossip key
//! for a peer catching up (`sync`), and `ping`.
//!
//! Everything lands in this node's own local state (`local.rs`), in the same tables its
//! own requests use: an owner's key is decided in one place whoever asks, and a gossiped
//! spend weighs on the next local decision. The transport has already authenticated the
//! message; an item that names an unknown policy, one of another site, or one whose numbers
//! differ here (its fingerprint) is refused (`OwnerReply::Unknown`, or [`REFUSED`] for gossip),
//! never guessed at.
//!
//! An owner in quarantine (`rejoin.rs`: its peers may have counted it out) forwards the
//! asks, refunds and debits for its keys to the node that decided them meanwhile; in the
//! hand-back window after it, a key's first ask here takes that node's count first.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::Arc;

use arc_swap::ArcSwap;
use bytes::Bytes;

use super::codec::{KeyItem, OwnerReply, fingerprint};
use super::fence::Fences;
use super::fresh::Freshness;
use super::rejoin::{self, Rejoin};
use super::report::Report;
use super::ring::Ring;

/// A gossip report's answer when this node refuses it (no such gossip policy here, or other
/// numbers).
pub const REFUSED: &[u8] = b"?";
use crate::algorithm::Verdict;
use crate::clock::Nanos;
use crate::peer::{Op, PeerClient, PeerHandler, Request, Response};
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
    /// Whether this node is quarantined, and the owner keys handed back since.
    rejoin: Arc<Rejoin>,
    /// Forwards a quarantined owner's items and asks for an interim owner's counts.
    client: PeerClient,
    /// How long a hand-back may hold an ask: half the call timeout, so the asker, which
    /// waits one, still hears the answer.
    hand_back_wait: std::time::Duration,
    /// As an interim owner: the keys an owner back from a quarantine took up from here,
    /// whose late asks go to it (`fence.rs`).
    fences: Fences,
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
        rejoin: Arc<Rejoin>,
        client: PeerClient,
    ) -> Self {
        FleetHandler {
            view: ArcSwap::from_pointee(View::new(local, policies)),
            me: Bytes::from(me.to_string()),
            fresh,
            ring,
            rejoin,
            hand_back_wait: client.timeout() / 2,
            client,
            fences: Fences::default(),
        }
    }

    /// The limiter's clock (the one requests decide by).
    pub fn now(&self) -> Nanos {
        self.view.load().local.now()
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
    /// An owner key's count is asked by the owner it moves back to (`rejoin.rs`): from then
    /// on, its late asks here go to that owner (`fence.rs`).
    fn sync(&self, view: &View, data: Bytes, from: SocketAddr) -> OwnerReply {
        let item = match self.item(view, data.clone(), Site::Gossip) {
            Some(item) => item,
            None => {
                let Some(item) = self.item(view, data, Site::Owner) else {
                    return OwnerReply::Unknown;
                };
                if self.ring.owner(&item.key) == from && from != self.ring.me() {
                    let now = view.local.now();
                    let until = now.saturating_add(self.rejoin.window());
                    let policy = &view.policies[item.policy].name;
                    let headroom = item.headroom.get();
                    self.fences
                        .set(policy, headroom, &item.key, from, now, until);
                }
                item
            }
        };
        let s = view
            .local
            .peek(item.policy, &item.key, item.headroom, false);
        OwnerReply::Admitted {
            remaining: s.remaining,
            reset_after: s.reset_after,
            wait: 0,
            next_after: s.next_after,
        }
    }

    /// The node to forward an owner item to: while quarantined, the interim owner of a key
    /// this node owns once counted in again. Checked before decoding only while quarantined.
    fn forward_to(&self, view: &View, data: &Bytes) -> Option<(SocketAddr, CheckItem)> {
        if !self.ring.quarantined() {
            return None;
        }
        let item = self.item(view, data.clone(), Site::Owner)?;
        if self.ring.owner_among_live(&item.key) != self.ring.me() {
            return None;
        }
        Some((self.ring.interim(&item.key)?, item))
    }

    /// The owner an owner item that `from` sent goes to instead of being decided here: the
    /// owner that took the key back from this node (`fence.rs`), while the ring names it.
    fn fenced(&self, view: &View, item: &CheckItem, from: SocketAddr) -> Option<SocketAddr> {
        let policy = &view.policies[item.policy].name;
        let now = view.local.now();
        let owner = self
            .fences
            .owner(policy, item.headroom.get(), &item.key, from, now)?;
        (self.ring.owner(&item.key) == owner).then_some(owner)
    }

    /// A refund or debit of an owner key: here, or at the interim owner while quarantined,
    /// or at the owner that took it back from here.
    fn give(&self, view: &View, op: Op, data: Bytes, from: SocketAddr) {
        if let Some((interim, _)) = self.forward_to(view, &data) {
            self.client.send(interim, op, vec![data], |_| {});
            return;
        }
        if let Some(it) = self.item(view, data.clone(), Site::Owner) {
            if let Some(owner) = self.fenced(view, &it, from) {
                self.client.send(owner, op, vec![data], |_| {});
                return;
            }
            match op {
                Op::Refund => view.local.refund(&it),
                _ => view.local.debit(&it),
            }
        }
    }

    /// Decide one asked key as its owner (spend if it conforms), or have its interim owner
    /// decide it while this node is quarantined, or the owner that took it back from here
    /// (`fence.rs`); an empty answer (a failure to the asker) when that node does not answer.
    async fn ask(&self, view: &View, data: Bytes, from: SocketAddr) -> Bytes {
        // Asks that waited at a stopped node are read as it wakes, maybe before its loop or a
        // request has seen the stall: seen here too.
        let now = view.local.now();
        if self.rejoin.stalled(now) {
            self.rejoin.begin(&self.ring, "the fleet loop stalled");
        }
        if let Some((interim, _)) = self.forward_to(view, &data) {
            return self.pass_on(interim, data).await;
        }
        let Some(item) = self.item(view, data.clone(), Site::Owner) else {
            return OwnerReply::Unknown.encode();
        };
        if let Some(owner) = self.fenced(view, &item, from) {
            return self.pass_on(owner, data).await;
        }
        if let Some(epoch) = self.rejoin.handing_back(now) {
            self.hand_back(view, epoch, &item).await;
        }
        self.decide(view, item).encode()
    }

    /// An ask decided at `node` instead of here: its answer, or an empty one (a failure to
    /// the asker) when `node` does not answer.
    async fn pass_on(&self, node: SocketAddr, data: Bytes) -> Bytes {
        match self.client.call(node, Op::Ask, vec![data]).await {
            Ok(mut replies) if replies.len() == 1 => replies.pop().unwrap_or_default(),
            _ => Bytes::new(),
        }
    }

    /// In a hand-back window, an owner key this node owns takes the interim owner's count
    /// before its first decision here.
    async fn hand_back(&self, view: &View, epoch: Nanos, item: &CheckItem) {
        if self.ring.owner(&item.key) != self.ring.me() {
            return;
        }
        let policy = &view.policies[item.policy];
        if self
            .rejoin
            .synced(epoch, &policy.name, item.headroom.get(), &item.key)
        {
            return;
        }
        let key = KeyItem {
            policy: policy.name.clone(),
            spec: view.specs[item.policy],
            headroom: item.headroom.get(),
            cost: 0,
            key: item.key.clone(),
        };
        let heard = rejoin::interim_counts(&self.client, &self.ring, std::slice::from_ref(&key));
        let heard = tokio::time::timeout(self.hand_back_wait, heard).await;
        // Not heard: decided on this node's own count, and asked again next time.
        if let Some(count) = heard.ok().and_then(|h| h.into_iter().next()).flatten() {
            if let Some(target) = count {
                view.local.catch_up(item, target);
            }
            self.rejoin.caught_up(epoch, &key);
        }
    }

    fn decide(&self, view: &View, item: CheckItem) -> OwnerReply {
        let results = view.local.check(std::slice::from_ref(&item), |ds| {
            ds.iter().map(|v| v.admits()).collect::<Spends>()
        });
        let r = &results[0];
        let (remaining, reset_after) = (r.snapshot.remaining, r.snapshot.reset_after);
        let next_after = r.snapshot.next_after;
        match r.decision.verdict {
            Verdict::Allow => OwnerReply::Admitted {
                remaining,
                reset_after,
                wait: 0,
                next_after,
            },
            Verdict::Delay(wait) => OwnerReply::Admitted {
                remaining,
                reset_after,
                wait,
                next_after,
            },
            Verdict::Deny { retry_after } => OwnerReply::Denied {
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
        let rejoining = |i: &crate::peer::Item| {
            i.op == Op::Sync || (i.op == Op::Ping && i.data.as_ref() == rejoin::REJOIN)
        };
        // A peer rejoining is counted in before it hears our answer (`rejoin.rs`).
        if request.items.iter().any(rejoining) && self.ring.answered(from) {
            // It was counted out: it may have missed our pushes, and we its.
            self.fresh.mark();
        }
        // A peer counts us out: quarantined before our answer counts us in again.
        if request
            .items
            .iter()
            .any(|i| i.op == Op::Ping && i.data.as_ref() == rejoin::COUNTED_OUT)
        {
            self.rejoin.told_out(&self.ring, from, self.now());
        }
        let view = self.view.load();
        let mut items = Vec::with_capacity(request.items.len());
        for item in request.items {
            items.push(match item.op {
                Op::Ask => self.ask(&view, item.data, from).await,
                op @ (Op::Refund | Op::Debit) => {
                    self.give(&view, op, item.data, from);
                    Bytes::new()
                }
                Op::Sync => self.sync(&view, item.data, from).encode(),
                Op::Gossip if self.gossip(&view, item.data) => Bytes::new(),
                Op::Gossip => Bytes::from_static(REFUSED),
                Op::Ping => self.me.clone(),
            });
        }
        Response { items }
    }
}
