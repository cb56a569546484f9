//! The item bytes the fleet sites put in peer messages (the transport, `peer/wire.rs`,
//! carries them opaque and authenticated).
//!
//! ```text
//! key item (ask, refund, gossip):  name_len u16, policy name, spec u64, headroom u32,
//!                                  cost u32, key…
//! ask answer:                      status u8, remaining u64, reset_after u64, wait u64,
//!                                  next_after u64
//! refund, ping answers:            empty
//! gossip report (one policy):      see `report.rs`
//! gossip answer:                   empty, or `?` when refused (the policy differs here)
//! ```
//!
//! Policies travel by name, not index: two nodes' configs may list them in another order;
//! `spec` is the [`fingerprint`] of the policy's numbers as the sender runs it, so a node
//! whose config differs (a rolling deploy, a copy-paste slip) refuses the item instead of
//! deciding it by other numbers.
//! Big-endian integers; the key runs to the end of the item.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::spec::Policy;

/// What two nodes must agree on to decide one policy's keys together: its algorithm and
/// numbers (not its name, key recipe or mode, which are each node's own business). FNV-1a
/// over a fixed rendering: the same on every node and version that renders it alike.
pub fn fingerprint(p: &Policy) -> u64 {
    let numbers = format!(
        "{:?}|{}|{}|{}|{}|{}",
        p.algorithm,
        p.limit,
        p.period.as_nanos(),
        p.burst,
        p.cost,
        p.max_delay.as_nanos()
    );
    super::ring::node_hash(&numbers)
}

/// One key of one policy, with the cells to ask for, give back or report spent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyItem {
    pub policy: std::sync::Arc<str>,
    /// The sender's [`fingerprint`] of the policy.
    pub spec: u64,
    pub headroom: u32,
    pub cost: u32,
    pub key: String,
}

impl KeyItem {
    pub fn encode(&self) -> Bytes {
        let name = self.policy.as_bytes();
        let name = &name[..name.len().min(usize::from(u16::MAX))];
        let mut b = BytesMut::with_capacity(2 + name.len() + 8 + self.key.len());
        b.put_u16(name.len() as u16);
        b.put_slice(name);
        b.put_u64(self.spec);
        b.put_u32(self.headroom);
        b.put_u32(self.cost);
        b.put_slice(self.key.as_bytes());
        b.freeze()
    }

    /// `None` when not shaped as a key item.
    pub fn decode(mut b: Bytes) -> Option<KeyItem> {
        if b.remaining() < 2 {
            return None;
        }
        let n = usize::from(b.get_u16());
        if b.remaining() < n + 16 {
            return None;
        }
        let policy = std::str::from_utf8(&b.split_to(n)).ok()?.into();
        let spec = b.get_u64();
        let headroom = b.get_u32();
        let cost = b.get_u32();
        let key = String::from_utf8(b.to_vec()).ok()?;
        Some(KeyItem {
            policy,
            spec,
            headroom,
            cost,
            key,
        })
    }
}

/// The owner's decision on one asked key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnerReply {
    /// Admitted and spent (a reservation, given back if the request ends denied); `wait`
    /// is a delay before forwarding (0 for the rate algorithms).
    Admitted {
        remaining: u64,
        reset_after: u64,
        wait: u64,
        /// Until `remaining` grows by one (the RateLimit `t`).
        next_after: u64,
    },
    /// Denied, nothing spent.
    Denied {
        remaining: u64,
        reset_after: u64,
        retry_after: u64,
    },
    /// The owner cannot decide it: no such policy there, or not an owner policy (the two
    /// nodes run different configs).
    Unknown,
}

const ADMITTED: u8 = 1;
const DENIED: u8 = 2;
const UNKNOWN: u8 = 3;

impl OwnerReply {
    pub fn encode(self) -> Bytes {
        let (status, a, b, c, d) = match self {
            OwnerReply::Admitted {
                remaining,
                reset_after,
                wait,
                next_after,
            } => (ADMITTED, remaining, reset_after, wait, next_after),
            OwnerReply::Denied {
                remaining,
                reset_after,
                retry_after,
            } => (DENIED, remaining, reset_after, retry_after, 0),
            OwnerReply::Unknown => (UNKNOWN, 0, 0, 0, 0),
        };
        let mut out = BytesMut::with_capacity(33);
        out.put_u8(status);
        for v in [a, b, c, d] {
            out.put_u64(v);
        }
        out.freeze()
    }

    /// `None` when not shaped as an answer.
    pub fn decode(mut b: Bytes) -> Option<OwnerReply> {
        if b.remaining() != 33 {
            return None;
        }
        let status = b.get_u8();
        let (x, y, z, n) = (b.get_u64(), b.get_u64(), b.get_u64(), b.get_u64());
        match status {
            ADMITTED => Some(OwnerReply::Admitted {
                remaining: x,
                reset_after: y,
                wait: z,
                next_after: n,
            }),
            DENIED => Some(OwnerReply::Denied {
                remaining: x,
                reset_after: y,
                retry_after: z,
            }),
            UNKNOWN => Some(OwnerReply::Unknown),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_and_answers_round_trip() {
        let item = KeyItem {
            policy: "per-account".into(),
            spec: 0xfeed,
            headroom: 4,
            cost: 3,
            key: "per-account\u{1f}a:b\u{1f}ü".into(),
        };
        assert_eq!(KeyItem::decode(item.encode()), Some(item.clone()));
        let cut = item.encode().slice(..5);
        assert_eq!(KeyItem::decode(cut), None);
        for a in [
            OwnerReply::Admitted {
                remaining: 1,
                reset_after: 2,
                wait: 3,
                next_after: 4,
            },
            OwnerReply::Denied {
                remaining: 0,
                reset_after: 5,
                retry_after: u64::MAX,
            },
            OwnerReply::Unknown,
        ] {
            assert_eq!(OwnerReply::decode(a.encode()), Some(a));
        }
        assert_eq!(OwnerReply::decode(Bytes::from_static(b"\x09")), None);
    }
}
