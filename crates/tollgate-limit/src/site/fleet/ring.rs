//! Who is in the fleet and who owns a key: the peers (from `[cluster] peers`, or from
//! membership), which of them answer, and rendezvous hashing over the ones that do.
//!
//! Rendezvous (highest random weight) rather than a ring of virtual nodes: every node
//! computes the same owner from the same live set with no table to build or agree on, and a
//! peer leaving moves only the keys it owned (each to the peer that scored next for it).
//! The hash is FNV-1a mixed by splitmix64: fixed across processes and versions, which the
//! std hasher (randomly keyed per process) is not.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use prometheus_client::metrics::gauge::Gauge;
use tracing::{info, warn};

/// A peer is taken out of the live set after this many failures in a row (a call or a
/// ping), and back in after one answer: one lost message does not move its keys.
pub const DOWN_AFTER: u32 = 2;

/// The fleet as this node sees it.
pub struct Ring {
    me: SocketAddr,
    /// Every known peer (this node included) and its failures in a row.
    peers: Mutex<Vec<Peer>>,
    /// The live peers and their hashes (this node always among them).
    live: ArcSwap<Vec<(SocketAddr, u64)>>,
    /// The nodes that own keys, read by every owner lookup without a lock: `live`, less
    /// this node while it is quarantined (`rejoin.rs`) and has a live peer to defer to.
    owners: ArcSwap<Vec<(SocketAddr, u64)>>,
    /// This node may have been counted out by its peers and has not heard each of them
    /// count it back in: it owns no key (`rejoin.rs`).
    quarantined: AtomicBool,
    /// `tollgate_peers_live`: the live peers' count, this node included.
    gauge: Gauge,
    /// `tollgate_peer_quarantined`: 1 while quarantined.
    quarantine_gauge: Gauge,
    /// Which fleet sites the running policies use ([`OWNER`], [`GOSSIP`] bits): what a
    /// peer leaving or coming back means, as the log says it.
    sites: AtomicU8,
}

/// [`Ring::set_sites`]: some policy decides at its key's owner.
pub const OWNER: u8 = 1;
/// [`Ring::set_sites`]: some policy shares counts by gossip.
pub const GOSSIP: u8 = 2;

#[derive(Debug, Clone, Copy)]
struct Peer {
    addr: SocketAddr,
    failures: u32,
    /// Kept live by a quarantine until it answers a rejoin or is found gone.
    held: bool,
}

impl Ring {
    /// `peers` may or may not include `me`; this node is always a member.
    pub fn new(me: SocketAddr, peers: &[SocketAddr], gauge: Gauge) -> Self {
        let ring = Ring {
            me,
            peers: Mutex::new(Vec::new()),
            live: ArcSwap::from_pointee(Vec::new()),
            owners: ArcSwap::from_pointee(Vec::new()),
            quarantined: AtomicBool::new(false),
            gauge,
            quarantine_gauge: Gauge::default(),
            sites: AtomicU8::new(0),
        };
        ring.set_peers(peers);
        ring
    }

    pub fn me(&self) -> SocketAddr {
        self.me
    }

    /// The fleet sites the running config uses (`OWNER | GOSSIP`), set at start and at
    /// each reload.
    pub fn set_sites(&self, sites: u8) {
        self.sites.store(sites, Ordering::Relaxed);
    }

    /// Whether some running policy decides at its key's owner.
    pub fn owner_site(&self) -> bool {
        self.sites.load(Ordering::Relaxed) & OWNER != 0
    }

    /// What a peer leaving (`gone`) or coming back means to this config's policies.
    fn consequence(&self, gone: bool) -> &'static str {
        let sites = self.sites.load(Ordering::Relaxed);
        match (sites & OWNER != 0, sites & GOSSIP != 0, gone) {
            (true, true, true) => {
                "its owner keys move to the next owner; gossip counts are no longer sent to it"
            }
            (true, false, true) => "its owner keys move to the next owner",
            (false, true, true) => "gossip counts are no longer sent to it",
            (true, true, false) => "its owner keys move back to it; gossip counts go to it again",
            (true, false, false) => "its owner keys move back to it",
            (false, true, false) => "gossip counts go to it again",
            (false, false, _) => "no policy of this config decides among peers",
        }
    }

    /// Replace the known peers (membership changed); failures of the ones that stay are kept.
    pub fn set_peers(&self, peers: &[SocketAddr]) {
        let mut known = self.lock();
        let old = std::mem::take(&mut *known);
        let mut addrs: Vec<SocketAddr> = peers.to_vec();
        addrs.push(self.me);
        addrs.sort_unstable();
        addrs.dedup();
        *known = addrs
            .into_iter()
            .map(|addr| {
                let old = old.iter().find(|p| p.addr == addr);
                Peer {
                    addr,
                    failures: old.map_or(0, |p| p.failures),
                    held: old.is_some_and(|p| p.held),
                }
            })
            .collect();
        self.publish(&known);
    }

    /// The owner of `key` among the live peers, this node left out while it is
    /// quarantined: the node that decides it now.
    pub fn owner(&self, key: &str) -> SocketAddr {
        let owners = self.owners.load();
        pick(key, owners.iter().map(|&(a, h)| (a, h))).unwrap_or(self.me)
    }

    /// The owner of `key` among the live peers, this node included even while quarantined:
    /// whose key it is once every node agrees.
    pub fn owner_among_live(&self, key: &str) -> SocketAddr {
        let live = self.live.load();
        pick(key, live.iter().map(|&(a, h)| (a, h))).unwrap_or(self.me)
    }

    /// The owner of `key` among the live peers other than this node: the node that took it
    /// over (or would) while this one was counted out. `None` when no other peer is live.
    pub fn interim(&self, key: &str) -> Option<SocketAddr> {
        let live = self.live.load();
        let me = self.me;
        pick(key, live.iter().filter(|p| p.0 != me).map(|&(a, h)| (a, h)))
    }

    /// Start (`true`) or end a quarantine; returns whether it changed. A quarantine holds
    /// every known peer live (a failure counted meanwhile may be the stop's own timeouts)
    /// until it answers a rejoin or [`Ring::release`] finds it gone.
    pub fn set_quarantined(&self, on: bool) -> bool {
        let mut known = self.lock();
        for p in known.iter_mut() {
            p.held = on && p.addr != self.me;
        }
        if self.quarantined.swap(on, Ordering::AcqRel) == on {
            self.publish(&known);
            return false;
        }
        self.quarantine_gauge.set(i64::from(on));
        if !on {
            // The failures counted meanwhile take effect now.
            let live = self.live.load();
            for p in known.iter().filter(|p| p.failures >= DOWN_AFTER) {
                if live.iter().any(|l| l.0 == p.addr) {
                    warn!(peer = %p.addr, meaning = self.consequence(true), "peer not answering: treated as gone");
                }
            }
        }
        self.publish(&known);
        true
    }

    /// A quarantine no longer holds `addr` live (it failed its rejoins).
    pub fn release(&self, addr: SocketAddr) {
        let mut known = self.lock();
        if let Some(p) = known.iter_mut().find(|p| p.addr == addr) {
            p.held = false;
        }
        self.publish(&known);
    }

    /// `tollgate_peer_quarantined`, to register.
    pub fn quarantine_gauge(&self) -> Gauge {
        self.quarantine_gauge.clone()
    }

    pub fn quarantined(&self) -> bool {
        self.quarantined.load(Ordering::Acquire)
    }

    /// Every known peer other than this node, and whether this node counts it out (a ping
    /// tells it so: `rejoin.rs`).
    pub fn others_counted_out(&self) -> Vec<(SocketAddr, bool)> {
        self.lock()
            .iter()
            .filter(|p| p.addr != self.me)
            .map(|p| (p.addr, p.failures >= DOWN_AFTER))
            .collect()
    }

    /// Live peers other than this node (gossip goes to them).
    pub fn live_others(&self) -> Vec<SocketAddr> {
        let me = self.me;
        self.live
            .load()
            .iter()
            .map(|&(a, _)| a)
            .filter(|&a| a != me)
            .collect()
    }

    /// Every known peer other than this node, live or not (pinged).
    pub fn others(&self) -> Vec<SocketAddr> {
        self.lock()
            .iter()
            .map(|p| p.addr)
            .filter(|&a| a != self.me)
            .collect()
    }

    /// Live peers, this node included.
    pub fn live_count(&self) -> usize {
        self.live.load().len()
    }

    /// A call or ping to `addr` failed; returns whether the live set changed.
    pub fn failed(&self, addr: SocketAddr) -> bool {
        let mut known = self.lock();
        let Some(p) = known.iter_mut().find(|p| p.addr == addr) else {
            return false;
        };
        p.failures = p.failures.saturating_add(1);
        // A peer a quarantine holds stays live: the calls that time out as a stopped node
        // wakes are the stop's, not the peer's (`rejoin.rs`); one really gone fails its
        // rejoins too and is released.
        if p.failures != DOWN_AFTER || p.held {
            return false;
        }
        warn!(peer = %addr, meaning = self.consequence(true), "peer not answering: treated as gone");
        self.publish(&known);
        true
    }

    /// `addr` answered; returns whether the live set changed.
    pub fn answered(&self, addr: SocketAddr) -> bool {
        let mut known = self.lock();
        let Some(p) = known.iter_mut().find(|p| p.addr == addr) else {
            return false;
        };
        let was_down = !self.live.load().iter().any(|l| l.0 == addr);
        p.failures = 0;
        p.held = false;
        if was_down {
            info!(peer = %addr, meaning = self.consequence(false), "peer answering again");
            self.publish(&known);
        }
        was_down
    }

    fn publish(&self, known: &[Peer]) {
        let live: Vec<(SocketAddr, u64)> = known
            .iter()
            .filter(|p| p.failures < DOWN_AFTER || p.addr == self.me || p.held)
            .map(|p| (p.addr, node_hash(&p.addr.to_string())))
            .collect();
        self.gauge.set(live.len() as i64);
        let owners = match self.quarantined.load(Ordering::Acquire) && live.len() > 1 {
            true => live.iter().copied().filter(|p| p.0 != self.me).collect(),
            false => live.clone(),
        };
        self.owners.store(Arc::new(owners));
        self.live.store(Arc::new(live));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Peer>> {
        self.peers.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The node with the highest score for `key` (ties: the first listed); `None` when there
/// is no node. `nodes` gives each node with its [`node_hash`].
pub fn pick<T>(key: &str, nodes: impl Iterator<Item = (T, u64)>) -> Option<T> {
    let k = fnv1a(key.as_bytes());
    nodes
        .map(|(n, h)| (splitmix64(k ^ splitmix64(h)), n))
        .fold(None, |best: Option<(u64, T)>, (score, n)| match best {
            Some((s, b)) if s >= score => Some((s, b)),
            _ => Some((score, n)),
        })
        .map(|(_, n)| n)
}

/// A node's identity as [`pick`] mixes it.
pub fn node_hash(name: &str) -> u64 {
    fnv1a(name.as_bytes())
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A gossip-only fleet never hears of owners moving keys (issue 47), nor an owner-only
    /// one of gossip; a fleet with both hears both.
    #[test]
    fn a_peer_leaving_is_told_in_the_terms_of_the_sites_in_use() {
        let ring = Ring::new(addr(7001), &[addr(7002)], Gauge::default());
        ring.set_sites(GOSSIP);
        assert!(!ring.consequence(true).contains("owner"));
        assert!(ring.consequence(true).contains("gossip"));
        ring.set_sites(OWNER);
        assert!(!ring.consequence(false).contains("gossip"));
        assert!(ring.consequence(false).contains("owner keys move back"));
        ring.set_sites(OWNER | GOSSIP);
        let both = ring.consequence(true);
        assert!(both.contains("owner") && both.contains("gossip"), "{both}");
    }

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    /// A quarantined node owns no key (each goes to the peer that scored next, as its
    /// peers count it out), holds every peer live through its own wake-up timeouts, and
    /// owns its keys again when the quarantine ends (issue 47).
    #[test]
    fn a_quarantined_node_owns_nothing_and_holds_its_peers() {
        let peers = [addr(7001), addr(7002), addr(7003)];
        let ring = Ring::new(addr(7001), &peers, Gauge::default());
        let keys: Vec<String> = (0..300).map(|i| format!("p\u{1f}acct:{i}")).collect();
        let mine: Vec<&String> = keys
            .iter()
            .filter(|k| ring.owner(k) == addr(7001))
            .collect();
        assert!(!mine.is_empty());
        assert!(ring.set_quarantined(true));
        assert_eq!(ring.quarantine_gauge.get(), 1);
        for k in &mine {
            assert_eq!(
                ring.owner_among_live(k),
                addr(7001),
                "still its key once back"
            );
            assert_eq!(
                Some(ring.owner(k)),
                ring.interim(k),
                "{k} goes to the next owner"
            );
            assert_ne!(ring.owner(k), addr(7001));
        }
        // The stop's own timeouts do not count a held peer out...
        ring.failed(addr(7002));
        ring.failed(addr(7002));
        assert_eq!(ring.live_count(), 3);
        // ...until the rejoin finds it gone: its failures then count.
        ring.release(addr(7002));
        assert_eq!(ring.live_count(), 2);
        assert!(ring.set_quarantined(false));
        assert_eq!(ring.quarantine_gauge.get(), 0);
        for k in &mine {
            assert_eq!(ring.owner(k), addr(7001));
        }
        // Alone, a quarantined node decides its keys itself: there is no one to defer to.
        let alone = Ring::new(addr(7001), &[], Gauge::default());
        alone.set_quarantined(true);
        assert_eq!(alone.owner("k"), addr(7001));
        assert_eq!(alone.interim("k"), None);
    }

    #[test]
    fn a_lost_peer_moves_only_its_keys_and_comes_back() {
        let peers = [addr(7001), addr(7002), addr(7003)];
        let ring = Ring::new(addr(7001), &peers, Gauge::default());
        let keys: Vec<String> = (0..300).map(|i| format!("p\u{1f}acct:{i}")).collect();
        let before: Vec<SocketAddr> = keys.iter().map(|k| ring.owner(k)).collect();
        for p in peers {
            assert!(before.contains(&p), "300 keys reach every peer");
        }
        assert!(!ring.failed(addr(7003)), "one failure is not enough");
        assert!(ring.failed(addr(7003)));
        assert_eq!(ring.live_count(), 2);
        for (k, b) in keys.iter().zip(&before) {
            let now = ring.owner(k);
            assert_ne!(now, addr(7003));
            if *b != addr(7003) {
                assert_eq!(now, *b, "{k} did not belong to the lost peer");
            }
        }
        assert!(ring.answered(addr(7003)));
        let after: Vec<SocketAddr> = keys.iter().map(|k| ring.owner(k)).collect();
        assert_eq!(after, before);
        // This node never leaves its own ring.
        ring.failed(addr(7001));
        ring.failed(addr(7001));
        assert_eq!(ring.live_count(), 3);
    }
}
