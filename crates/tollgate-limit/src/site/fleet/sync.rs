//! Catching up a stale gossip view (`fresh.rs` says when it is stale): a gossip key's first
//! request after the epoch asks every other known peer for its count of the key (`sync`,
//! nothing spent there) and spends here what this node's state lacks of the most spent of
//! them, then decides as usual.
//!
//! Every known peer, not only the live ones: a node that was stopped wakes up with calls
//! that timed out while it slept and may count its peers out for a moment; they are the
//! very nodes it must hear. A peer that cannot answer within the `timeout` of every peer
//! call is left out of this request's catch-up (the key stays to catch up on its next
//! request), so a request waits at most one `timeout` and then decides on what it heard —
//! with no peer at all (a fleet of one, or every peer down) it decides on its own view at
//! once, as gossip always did.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_util::FutureExt;
use futures_util::future::{BoxFuture, Shared, join_all};

use super::FleetSite;
use super::codec::{KeyItem, OwnerReply};
use crate::algorithm::Snapshot;
use crate::clock::Nanos;
use crate::peer::Op;
use crate::policy::PolicyRuntime;
use crate::spec::Site;

/// What the peers said of one key: the most spent of their counts, and whether every peer
/// asked answered.
#[derive(Clone, Copy)]
pub struct Heard {
    pub most_spent: Option<Snapshot>,
    pub everyone: bool,
}

/// One key's pull, awaited by every request of that key that needs it meanwhile.
type SharedPull = Shared<BoxFuture<'static, Heard>>;

/// The pulls in flight, by key (`Freshness`'s hash of policy, headroom and key): the
/// requests queued at a node that resumes from a stop all need their key's counts at once
/// (issue 47: 74 of them, each pulling on its own, waited up to 18.8 ms with a 10 ms peer
/// timeout, the worker busy with their calls); the first pulls, the others wait for its
/// answer, so each waits at most the one call's timeout.
#[derive(Default)]
pub(super) struct Pulls {
    map: Mutex<HashMap<u64, SharedPull>>,
}

impl Pulls {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, SharedPull>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl FleetSite {
    /// [`Self::pull`] with each key's pull shared by every request that asks for that key
    /// while it is out ([`Pulls`]).
    pub async fn pull_shared(self: &Arc<Self>, items: &[KeyItem]) -> Vec<Heard> {
        let pulls: Vec<SharedPull> = items
            .iter()
            .map(|item| {
                let h = self.fresh.hash(&item.policy, item.headroom, &item.key);
                let mut map = self.pulls.lock();
                if let Some(pull) = map.get(&h) {
                    return pull.clone();
                }
                let (site, item) = (Arc::downgrade(self), item.clone());
                let pull = async move {
                    let Some(site) = site.upgrade() else {
                        return Heard {
                            most_spent: None,
                            everyone: false,
                        };
                    };
                    let heard = site.pull(std::slice::from_ref(&item)).await[0];
                    site.pulls.lock().remove(&h);
                    heard
                }
                .boxed()
                .shared();
                map.insert(h, pull.clone());
                pull
            })
            .collect();
        join_all(pulls).await
    }

    /// The epoch a gossip decision must catch up from, if the view is stale.
    pub fn catching_up(&self) -> Option<Nanos> {
        self.fresh.catching_up(!self.ring.others().is_empty())
    }

    /// Whether `item`'s key has caught up since `epoch`.
    pub fn synced(&self, epoch: Nanos, item: &KeyItem) -> bool {
        self.fresh
            .synced(epoch, &item.policy, item.headroom, &item.key)
    }

    /// `item`'s key has caught up since `epoch`.
    pub fn caught_up(&self, epoch: Nanos, item: &KeyItem) {
        self.fresh
            .caught_up(epoch, &item.policy, item.headroom, &item.key);
    }

    /// Ask every other known peer for its count of each of `items` (costs ignored), all at
    /// once; per item, the most spent count heard.
    pub async fn pull(&self, items: &[KeyItem]) -> Vec<Heard> {
        let data: Vec<Bytes> = items.iter().map(KeyItem::encode).collect();
        let peers = self.ring.others();
        let calls = peers
            .iter()
            .map(|&peer| self.client.call(peer, Op::Sync, data.clone()));
        let replies = join_all(calls).await;
        let mut heard: Vec<Heard> = items
            .iter()
            .map(|_| Heard {
                most_spent: None,
                everyone: true,
            })
            .collect();
        for reply in replies {
            let answers = reply.ok().filter(|r| r.len() == items.len());
            for (i, h) in heard.iter_mut().enumerate() {
                let snapshot = answers
                    .as_ref()
                    .and_then(|r| OwnerReply::decode(r[i].clone()))
                    .and_then(snapshot_of);
                match snapshot {
                    Some(s) => h.most_spent = Some(more_spent(h.most_spent, s)),
                    None => h.everyone = false,
                }
            }
        }
        heard
    }

    /// The catch-up window for these policies: `N` times the longest time a gossip key
    /// takes to refill from empty (N the known peers, this node included). A key the peers
    /// spent during a stall is full again by then; N refills, not one, because the fleet
    /// may have driven it past empty by up to `U`, about N − 1 bursts.
    ///
    /// The owner hand-back window (`rejoin.rs`): twice the owner policies' longest refill
    /// (one node decided each key exactly, but a debit can leave it a debt).
    pub(super) fn set_window(&self, policies: &[PolicyRuntime]) {
        let n = self.ring.others().len() as u64 + 1;
        self.fresh
            .set_window(longest_refill(policies, Site::Gossip).saturating_mul(n));
        self.rejoin
            .set_window(longest_refill(policies, Site::Owner).saturating_mul(2));
    }
}

/// The longest time a key of a `site` policy takes to refill from empty.
fn longest_refill(policies: &[PolicyRuntime], site: Site) -> crate::clock::Nanos {
    policies
        .iter()
        .filter(|p| p.spec.site == site)
        .flat_map(|p| p.algorithms.iter().map(|(_, a)| a))
        .map(|a| {
            let full = u32::try_from(a.peek(None, 0).remaining).unwrap_or(u32::MAX);
            a.peek(Some(a.debit(None, full, 0)), 0).reset_after
        })
        .max()
        .unwrap_or(0)
}

/// The count a `sync` answer carries.
pub(super) fn snapshot_of(a: OwnerReply) -> Option<Snapshot> {
    match a {
        OwnerReply::Admitted {
            remaining,
            reset_after,
            next_after,
            ..
        } => Some(Snapshot {
            remaining,
            reset_after,
            next_after,
        }),
        _ => None,
    }
}

/// The more spent of two counts: fewer cells left, then longer until full (a debt).
fn more_spent(a: Option<Snapshot>, b: Snapshot) -> Snapshot {
    match a {
        Some(a)
            if (a.remaining, std::cmp::Reverse(a.reset_after))
                <= (b.remaining, std::cmp::Reverse(b.reset_after)) =>
        {
            a
        }
        _ => b,
    }
}
