//! The interim owner's side of a hand-back (`rejoin.rs`): the owner keys whose count their
//! owner, back from a quarantine, has read here. An ask, refund or debit of such a key that
//! still arrives here is passed on to that owner instead of being decided here.
//!
//! Why: every peer counts the owner back in before its quarantine ends, so new asks go to
//! the owner; but an ask a third node sent here before it counted the owner in can arrive
//! after the owner read this node's count. Decided here, its cells are missing from the
//! count the owner took up: a few cells over the bound each hand-back (issue 47). Passed on,
//! the owner decides it on the count it holds. What stays: an ask decided here in the
//! microseconds between its fence look-up and the owner's read of the count.
//!
//! A fence names its owner and lasts the hand-back window (every count an interim held has
//! refilled by then). It is kept only while the ring still names that owner for the key, so
//! an owner that is counted out again gets its key decided here again; and an item the owner
//! itself sends here (it forwards while quarantined) clears the fence, so a key never bounces
//! between the two.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::net::SocketAddr;
use std::sync::Mutex;

use crate::clock::Nanos;

/// Fences kept at most; past it a key's late asks are decided here, as before fences.
pub const MAX_FENCES: usize = 100_000;

/// The keys handed back from this node, by hash: to whom, and until when.
#[derive(Default)]
pub struct Fences {
    by_key: Mutex<HashMap<u64, (SocketAddr, Nanos)>>,
    hasher: hashbrown::DefaultHashBuilder,
}

impl Fences {
    fn hash(&self, policy: &str, headroom: u32, key: &str) -> u64 {
        self.hasher.hash_one((policy, headroom, key))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, (SocketAddr, Nanos)>> {
        self.by_key.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `owner` read this node's count of `key` at `now`: its late items go to `owner` until
    /// `until`. Expired fences leave when the map is full (amortized: a full sweep at most
    /// once per `MAX_FENCES` inserts).
    pub fn set(
        &self,
        policy: &str,
        headroom: u32,
        key: &str,
        owner: SocketAddr,
        now: Nanos,
        until: Nanos,
    ) {
        let h = self.hash(policy, headroom, key);
        let mut fences = self.lock();
        if fences.len() >= MAX_FENCES && !fences.contains_key(&h) {
            fences.retain(|_, f| f.1 > now);
            if fences.len() >= MAX_FENCES {
                return;
            }
        }
        fences.insert(h, (owner, until));
    }

    /// The owner an item of `key` sent by `from` at `now` goes to, if fenced: the owner
    /// itself sending it clears the fence (it is quarantined again and forwards to us).
    pub fn owner(
        &self,
        policy: &str,
        headroom: u32,
        key: &str,
        from: SocketAddr,
        now: Nanos,
    ) -> Option<SocketAddr> {
        let h = self.hash(policy, headroom, key);
        let mut fences = self.lock();
        let &(owner, until) = fences.get(&h)?;
        if until <= now || owner == from {
            fences.remove(&h);
            return None;
        }
        Some(owner)
    }

    /// Fences kept now (for tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[test]
    fn a_fence_sends_late_items_to_the_owner_until_it_expires_or_the_owner_sends_one() {
        let f = Fences::default();
        let (owner, other) = (addr(7001), addr(7003));
        assert_eq!(f.owner("p", 1, "k", other, 10), None, "no fence");
        f.set("p", 1, "k", owner, 10, 100);
        assert_eq!(f.owner("p", 1, "k", other, 50), Some(owner));
        assert_eq!(f.owner("p", 2, "k", other, 50), None, "another headroom");
        assert_eq!(f.owner("p", 1, "k", other, 100), None, "expired");
        assert_eq!(f.len(), 0, "an expired fence leaves on its look-up");
        f.set("p", 1, "k", owner, 110, 200);
        assert_eq!(
            f.owner("p", 1, "k", owner, 120),
            None,
            "the owner forwards: cleared"
        );
        assert_eq!(f.owner("p", 1, "k", other, 120), None);
    }

    #[test]
    fn a_full_map_makes_room_from_expired_fences_only() {
        let f = Fences::default();
        for i in 0..MAX_FENCES {
            f.set("p", 1, &i.to_string(), addr(7001), 0, 10);
        }
        f.set("p", 1, "late", addr(7001), 5, 20);
        assert_eq!(
            f.owner("p", 1, "late", addr(7003), 5),
            None,
            "full: not kept"
        );
        f.set("p", 1, "late", addr(7001), 10, 20);
        assert_eq!(f.len(), 1, "the expired left");
        assert_eq!(f.owner("p", 1, "late", addr(7003), 10), Some(addr(7001)));
    }
}
