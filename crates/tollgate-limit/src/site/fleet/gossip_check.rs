//! The gossip site's check step, its catch-up (step 4 of the walk in `check/mod.rs`), before
//! the local step decides gossip keys: while this node's gossip view is stale (it stalled, its peers fell
//! silent, a peer rejoined: `fleet/fresh.rs`), a gossip key not yet caught up since then
//! first hears the peers' counts of it (`fleet/sync.rs`) and this node spends what it
//! lacks of the most spent of them. Then the local step decides on that view. A fresh view
//! (nearly always) costs one atomic read or two and nothing else.

use std::ops::ControlFlow;

use crate::ask::Ask;
use crate::check::{Check, Stop};
use crate::site::fleet::KeyItem;
use crate::site::{DecisionSite, Sites};
use crate::spec::Site;

/// The gossip site's catch-up step (its state: `Sites::fleet`); the local step decides and
/// spends its keys (`site/local/check.rs`).
#[derive(Default)]
pub struct GossipStep;

impl DecisionSite for GossipStep {
    /// A stale view waits on the peers' counts (known only in the walk).
    fn waits(&self, _: &Sites, ask: &Ask) -> bool {
        ask.entry.site == Site::Gossip
    }

    /// Catch up the request's gossip keys if the view is stale; never denies by itself.
    async fn decide(&self, check: &mut Check<'_>) -> ControlFlow<Stop> {
        if !check.asks.iter().any(|a| a.entry.site == Site::Gossip) {
            return ControlFlow::Continue(());
        }
        let Some(fleet) = check.sites.fleet.clone() else {
            return ControlFlow::Continue(());
        };
        let Some(epoch) = fleet.catching_up() else {
            return ControlFlow::Continue(());
        };
        let (idx, items): (Vec<usize>, Vec<KeyItem>) = (0..check.asks.len())
            .filter(|&i| check.asks[i].entry.site == Site::Gossip)
            .map(|i| {
                let ask = &check.asks[i];
                let spec = check.sites.specs[ask.entry.policy];
                let mut item = check.gossip_item(i, spec);
                item.cost = 0;
                (i, item)
            })
            .filter(|(_, item)| !fleet.synced(epoch, item))
            .unzip();
        if items.is_empty() {
            return ControlFlow::Continue(());
        }
        let heard = crate::store_time::timed(fleet.pull_shared(&items)).await;
        for ((i, item), h) in idx.into_iter().zip(&items).zip(heard) {
            if let Some(target) = h.most_spent {
                let local = check.check_item(&check.asks[i], false);
                check.sites.local.catch_up(&local, target);
            }
            if h.everyone {
                fleet.caught_up(epoch, item);
            }
        }
        ControlFlow::Continue(())
    }
}

impl Check<'_> {
    fn gossip_item(&self, i: usize, spec: u64) -> KeyItem {
        let ask = &self.asks[i];
        KeyItem {
            policy: self.sites.policies[ask.entry.policy].name.clone(),
            spec,
            headroom: ask.headroom.get(),
            cost: ask.cost,
            key: ask.key.clone(),
        }
    }
}
