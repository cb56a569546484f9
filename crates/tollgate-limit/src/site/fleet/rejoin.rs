//! An owner that may have been counted out: it decides none of its keys until every peer
//! has counted it back in, then takes each key up from the count of the node that decided
//! it meanwhile (issue 47).
//!
//! Why: the peers count a node out after [`DOWN_AFTER`] failed calls and move its keys to
//! an interim owner, which starts them from full (one burst per move, documented). A node
//! that was stopped (SIGSTOP, a starved runtime) and not killed wakes up unaware, with its
//! own states refilled by its clock, and decided its backlog and new requests on them while
//! the others kept asking the interim owner until their next ping reached it: two deciders
//! at once, admitted over the bound by the rate times that overlap plus a second burst.
//!
//! - **Quarantine** begins when this node may have been counted out: at start (a restart
//!   is a new process to itself, not to its peers), after a stall of its fleet loop (seen
//!   by the loop, or by the first request that finds the loop's last tick that old, so the
//!   backlog a stop left is not decided before the loop runs), or when a peer's ping says
//!   it counts this node out ([`COUNTED_OUT`]: a node slowed, not stopped, hears it within
//!   a heartbeat). While quarantined this node owns no key (`Ring::owner` leaves it out):
//!   its own requests ask the interim owner, as its peers do, and the asks, refunds and
//!   debits a peer sends it for its keys are forwarded there (`handler.rs`). Every known
//!   peer stays live in its ring meanwhile (the calls that time out as it wakes are the
//!   stop's, not the peers'). It sends each a [`REJOIN`] ping; a peer counts it back in
//!   before it answers. When each has answered (or failed [`DOWN_AFTER`] rejoins in a row:
//!   it is gone), the quarantine ends and every peer already asks this node for its keys.
//!   A config without owner policies is never quarantined.
//! - **Hand-back**: for a window after the quarantine (twice the owner policies' longest
//!   refill from empty: a debit can leave a debt), each owner key's first decision here
//!   first hears the interim owner's count of it (`sync`, nothing spent; beside the
//!   request's other owner asks, or within half a call timeout for a peer's ask) and spends
//!   here what this node lacks of it. After the window every count the interim held has
//!   refilled and nothing is asked.
//!
//! So a key has one decider at a time, and a move back costs no burst. What stays: the
//! move to the interim owner (one burst), a node slowed but running decides beside the
//! interim owner until a ping tells it it was counted out (at most a heartbeat), and a
//! quarantine that was not needed (a stall too short for the peers to notice) lends its
//! keys for a round trip to an interim owner that may hold them full.
//!
//! The request path pays for this an atomic read or two per request with owner keys
//! ([`Rejoin::stalled`], [`Rejoin::handing_back`]); the locks here are taken only while a
//! quarantine or a hand-back window is open.

use std::collections::HashSet;
use std::hash::BuildHasher;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use futures_util::future::join_all;
use prometheus_client::metrics::counter::Counter;
use tokio::sync::Notify;
use tracing::info;

use super::FleetSite;
use super::codec::{KeyItem, OwnerReply};
use super::ring::{DOWN_AFTER, Ring};
use super::sync::snapshot_of;
use crate::algorithm::Snapshot;
use crate::clock::Nanos;
use crate::peer::{Op, PeerClient};

/// A ping's data from a peer that counts the recipient out (an older node sends none).
pub const COUNTED_OUT: &[u8] = b"\x01";
/// A ping's data from a node ending a quarantine: count me in before you answer.
pub const REJOIN: &[u8] = b"\x02";

/// Keys remembered as handed back per window; past it a key asks on each decision.
pub const MAX_SYNCED: usize = 100_000;

pub struct Rejoin {
    /// The peers yet to count this node back in, and their failed rejoins in a row.
    pending: Mutex<Vec<(SocketAddr, u32)>>,
    /// When each peer last answered a rejoin: a [`COUNTED_OUT`] ping it sent before that
    /// can arrive after it, and must not start another quarantine.
    acked: Mutex<Vec<(SocketAddr, Nanos)>>,
    /// The peer call timeout: a ping sent before a rejoin's answer arrives within it.
    timeout: Nanos,
    /// Wakes the rejoin rounds when a quarantine begins.
    wake: Notify,
    /// The fleet loop's last tick, on the limiter's clock; 0 until it first runs.
    last_tick: AtomicU64,
    /// A gap between ticks past this is a stall.
    stall: Nanos,
    /// The hand-back window: from `epoch` (the last quarantine's end) to `until`.
    epoch: AtomicU64,
    until: AtomicU64,
    window: AtomicU64,
    /// The keys handed back since `.0` (an epoch), by hash.
    synced: Mutex<(Nanos, HashSet<u64>)>,
    hasher: hashbrown::DefaultHashBuilder,
    /// `tollgate_peer_rejoins_total`.
    pub rejoins: Counter,
}

impl Rejoin {
    pub fn new(stall: Nanos, timeout: Nanos) -> Self {
        Rejoin {
            pending: Mutex::new(Vec::new()),
            acked: Mutex::new(Vec::new()),
            timeout,
            wake: Notify::new(),
            last_tick: AtomicU64::new(0),
            stall,
            epoch: AtomicU64::new(0),
            until: AtomicU64::new(0),
            window: AtomicU64::new(0),
            synced: Mutex::new((0, HashSet::new())),
            hasher: Default::default(),
            rejoins: Counter::default(),
        }
    }

    fn lock_pending(&self) -> std::sync::MutexGuard<'_, Vec<(SocketAddr, u32)>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// This node may have been counted out (`why`): quarantine it until every live peer has
    /// counted it back in. A quarantine already running starts over with every peer. A
    /// config without owner policies has nothing to quarantine (gossip catches up by
    /// itself: `fresh.rs`).
    pub fn begin(&self, ring: &Ring, why: &'static str) {
        if !ring.owner_site() {
            return;
        }
        let mut pending = self.lock_pending();
        // Every known peer: one counted out before may be back and deciding our keys.
        *pending = ring.others().into_iter().map(|a| (a, 0)).collect();
        if ring.set_quarantined(true) {
            info!(
                reason = why,
                peers = pending.len(),
                "this node may have been counted out by its peers: its owner keys are decided by the next owner until every peer has counted it back in"
            );
        }
        drop(pending);
        self.wake.notify_one();
    }

    /// `peer` says it counts this node out (its ping, at `now`): a quarantine, unless it
    /// answered a rejoin of ours less than a call timeout ago (that ping was sent before).
    pub fn told_out(&self, ring: &Ring, peer: SocketAddr, now: Nanos) {
        let acked = self.acked.lock().unwrap_or_else(|e| e.into_inner());
        let recent = acked
            .iter()
            .any(|&(p, at)| p == peer && now.saturating_sub(at) < self.timeout);
        drop(acked);
        if !recent {
            self.begin(ring, "a peer counts this node out");
        }
    }

    /// The peers a rejoin round still has to reach.
    fn pending(&self) -> Vec<SocketAddr> {
        self.lock_pending().iter().map(|p| p.0).collect()
    }

    /// A rejoin to `peer` was answered (it counts this node in) or failed.
    fn heard(&self, ring: &Ring, peer: SocketAddr, answered: bool, now: Nanos) {
        if answered {
            let mut acked = self.acked.lock().unwrap_or_else(|e| e.into_inner());
            acked.retain(|a| a.0 != peer);
            acked.push((peer, now));
        }
        let mut pending = self.lock_pending();
        if let Some(i) = pending.iter().position(|p| p.0 == peer) {
            pending[i].1 += u32::from(!answered);
            if answered || pending[i].1 >= DOWN_AFTER {
                pending.swap_remove(i);
                if !answered {
                    ring.release(peer);
                }
            }
        }
    }

    /// End the quarantine if no peer is left to hear, opening the hand-back window at
    /// `now`; whether it ended (or none ran).
    fn try_end(&self, ring: &Ring, now: Nanos) -> bool {
        let pending = self.lock_pending();
        if !pending.is_empty() {
            return false;
        }
        if ring.set_quarantined(false) {
            self.epoch.store(now.max(1), Ordering::Release);
            let window = self.window.load(Ordering::Relaxed);
            self.until
                .store(now.saturating_add(window), Ordering::Release);
            self.rejoins.inc();
            info!(
                "every peer counts this node in again: it decides its owner keys, each from the count of the node that decided it meanwhile"
            );
        }
        true
    }

    /// The fleet loop ran at `now`: whether it had stalled.
    pub fn tick(&self, now: Nanos) -> bool {
        let last = self.last_tick.swap(now.max(1), Ordering::AcqRel);
        last != 0 && now.saturating_sub(last) > self.stall
    }

    /// A request at `now` finds the fleet loop stalled (true once per stall: it stands in
    /// for the loop's tick).
    #[inline]
    pub fn stalled(&self, now: Nanos) -> bool {
        let last = self.last_tick.load(Ordering::Acquire);
        last != 0
            && now.saturating_sub(last) > self.stall
            && self
                .last_tick
                .compare_exchange(last, now.max(1), Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
    }

    /// The hand-back window's epoch if `now` is inside it.
    #[inline]
    pub fn handing_back(&self, now: Nanos) -> Option<Nanos> {
        (now < self.until.load(Ordering::Acquire)).then(|| self.epoch.load(Ordering::Acquire))
    }

    /// How long a hand-back window lasts.
    pub fn window(&self) -> Nanos {
        self.window.load(Ordering::Relaxed)
    }

    /// Set how long a hand-back window lasts.
    pub fn set_window(&self, window: Nanos) {
        self.window.store(window, Ordering::Relaxed);
    }

    fn hash(&self, policy: &str, headroom: u32, key: &str) -> u64 {
        self.hasher.hash_one((policy, headroom, key))
    }

    /// Whether `key` (of `policy` at `headroom`) was handed back since `epoch`; nothing is
    /// built to ask.
    pub fn synced(&self, epoch: Nanos, policy: &str, headroom: u32, key: &str) -> bool {
        let h = self.hash(policy, headroom, key);
        let synced = self.synced.lock().unwrap_or_else(|e| e.into_inner());
        synced.0 == epoch && synced.1.contains(&h)
    }

    /// `item`'s key was handed back since `epoch` (a later epoch forgets the earlier's).
    pub fn caught_up(&self, epoch: Nanos, item: &KeyItem) {
        let h = self.hash(&item.policy, item.headroom, &item.key);
        let mut synced = self.synced.lock().unwrap_or_else(|e| e.into_inner());
        if synced.0 < epoch {
            *synced = (epoch, HashSet::new());
        }
        if synced.0 == epoch && synced.1.len() < MAX_SYNCED {
            synced.1.insert(h);
        }
    }
}

/// What the interim owner said of one key: `None` when it did not answer (ask again on the
/// next decision), `Some(None)` when there is no count to take (no other live peer, or its
/// config runs no such owner policy).
pub type Interim = Option<Option<Snapshot>>;

/// Ask each item's interim owner (the owner were this node out) for its count of it, one
/// message per interim owner, all at once; `items` carry a cost of 0.
pub async fn interim_counts(client: &PeerClient, ring: &Ring, items: &[KeyItem]) -> Vec<Interim> {
    let mut by_peer: Vec<(SocketAddr, Vec<usize>)> = Vec::new();
    let mut heard: Vec<Interim> = vec![Some(None); items.len()];
    for (i, item) in items.iter().enumerate() {
        let Some(peer) = ring.interim(&item.key) else {
            continue;
        };
        match by_peer.iter_mut().find(|(p, _)| *p == peer) {
            Some((_, idx)) => idx.push(i),
            None => by_peer.push((peer, vec![i])),
        }
    }
    let calls = by_peer.iter().map(|(peer, idx)| {
        let data: Vec<Bytes> = idx.iter().map(|&i| items[i].encode()).collect();
        client.call(*peer, Op::Sync, data)
    });
    for ((_, idx), reply) in by_peer.iter().zip(join_all(calls).await) {
        let answers = reply.ok().filter(|r| r.len() == idx.len());
        for (n, &i) in idx.iter().enumerate() {
            heard[i] = answers
                .as_ref()
                .map(|r| OwnerReply::decode(r[n].clone()).and_then(snapshot_of));
        }
    }
    heard
}

impl FleetSite {
    /// The owner step's look before it picks owners at `now` (the limiter's clock): a stall
    /// found here quarantines this node at once; the hand-back window's epoch if open.
    #[inline]
    pub fn owner_view(&self, now: Nanos) -> Option<Nanos> {
        if self.rejoin.stalled(now) {
            self.rejoin.begin(&self.ring, "the fleet loop stalled");
        }
        self.rejoin.handing_back(now)
    }

    /// Whether `key` (of `policy` at `headroom`) was handed back since `epoch`.
    pub fn handed_back(&self, epoch: Nanos, policy: &str, headroom: u32, key: &str) -> bool {
        self.rejoin.synced(epoch, policy, headroom, key)
    }

    /// The interim owners' counts of `items` (see [`interim_counts`]); an item answered is
    /// remembered as handed back since `epoch`.
    pub async fn hand_back(&self, epoch: Nanos, items: &[KeyItem]) -> Vec<Interim> {
        let heard = interim_counts(&self.client, &self.ring, items).await;
        for (item, h) in items.iter().zip(&heard) {
            if h.is_some() {
                self.rejoin.caught_up(epoch, item);
            }
        }
        heard
    }

    /// Ping the peers a quarantine waits for with [`REJOIN`] until each has answered or is
    /// gone, whenever a quarantine begins; never returns.
    pub(super) async fn rejoin_rounds(&self) {
        loop {
            self.rejoin.wake.notified().await;
            while self.ring.quarantined() {
                if self.rejoin.try_end(&self.ring, self.handler.now()) {
                    break;
                }
                let pending = self.rejoin.pending();
                let calls = pending.iter().map(|&peer| {
                    self.client
                        .call(peer, Op::Ping, vec![Bytes::from_static(REJOIN)])
                });
                let mut failed = false;
                for (peer, answer) in pending.iter().zip(join_all(calls).await) {
                    failed |= answer.is_err();
                    let now = self.handler.now();
                    self.rejoin.heard(&self.ring, *peer, answer.is_ok(), now);
                }
                if failed {
                    tokio::time::sleep(self.timeout).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::gauge::Gauge;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    /// A stall is seen once (by a request or the loop, whichever comes first); a quarantine
    /// ends when every peer answered or failed twice, and opens the hand-back window.
    #[test]
    fn a_stall_quarantines_once_and_the_rejoin_opens_a_window() {
        let ring = Ring::new(addr(7001), &[addr(7002), addr(7003)], Gauge::default());
        let r = Rejoin::new(50, 10);
        r.begin(&ring, "test");
        assert!(
            !ring.quarantined(),
            "no owner policy: nothing to quarantine"
        );
        ring.set_sites(super::super::ring::OWNER);
        r.set_window(1_000);
        assert!(!r.stalled(10_000), "before the loop runs: no stall");
        assert!(!r.tick(100));
        assert!(!r.stalled(140));
        assert!(r.stalled(200), "a request finds the loop 100 ns behind");
        assert!(!r.stalled(201), "once per stall");
        assert!(!r.tick(210), "the loop does not see it again");
        r.begin(&ring, "test");
        assert!(ring.quarantined());
        assert!(!r.try_end(&ring, 300));
        r.heard(&ring, addr(7002), true, 300);
        r.heard(&ring, addr(7003), false, 300);
        assert!(!r.try_end(&ring, 300), "one failed rejoin is not gone");
        r.heard(&ring, addr(7003), false, 310);
        assert_eq!(r.handing_back(310), None);
        assert!(r.try_end(&ring, 320));
        assert!(!ring.quarantined());
        assert_eq!(r.rejoins.get(), 1);
        let epoch = r.handing_back(321).expect("the hand-back window is open");
        assert_eq!(r.handing_back(1_320), None, "past the window");
        let item = KeyItem {
            policy: "p".into(),
            spec: 1,
            headroom: 1,
            cost: 0,
            key: "k".into(),
        };
        assert!(!r.synced(epoch, "p", 1, "k"));
        r.caught_up(epoch, &item);
        assert!(r.synced(epoch, "p", 1, "k"));
        assert!(
            !r.synced(epoch, "p", 2, "k"),
            "another headroom is another key"
        );
        // A peer's word right after it answered our rejoin was sent before it: ignored.
        r.told_out(&ring, addr(7002), 305);
        assert!(!ring.quarantined());
        r.told_out(&ring, addr(7002), 400);
        assert!(ring.quarantined(), "later, it counts us out again");
    }
}
