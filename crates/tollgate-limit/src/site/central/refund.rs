//! Refunds that give back once, however often the store runs them.
//!
//! A refund moves keys back by a spend the request did not keep (another of its policies
//! denied it, or another slot group of a cluster request). Run twice it gives back twice:
//! an over-admission of one request's cost. And a call can run twice: the store sends a call
//! again after its connection dropped (`store/mod.rs`), which may have been after the script
//! ran, and a Redis Cluster client resends a command after a dropped connection on its own
//! (`retries(1)` in `store/connection.rs`; 0 would also stop it following `MOVED` and `ASK`
//! redirects).
//!
//! So each refund call names a **marker** of its own ([`marker_key`]): `check.lua` creates
//! it (`SET NX`, living the store's [`RedisStore::repeat_window`]) and refunds only if it
//! was not there, so the same call run again gives back nothing. A script may touch only the
//! keys it is passed, all in one slot on a cluster, so the marker is passed in `KEYS` and is
//! named in its call's slot, one per slot group. It starts with `~` after the key prefix, as
//! the lease's side keys do (`lease/refill.rs`): a key is `policy:part:value` with a value a
//! client chooses, and no policy name contains `~`, so no client can name a marker.
//!
//! Why not the receipts of `cluster.rs`: only a multi-slot cluster reservation writes one
//! (one `SET` more on its path); a refund after a plain check, the common one, has no
//! receipt to claim, and writing one for every check would cost every request a `SET` to
//! save one on the few that are refunded.
//!
//! Releases need no marker: a release removes the concurrency members named by its
//! acquisition's slot id, which no other acquisition uses, so a second run removes nothing.
//! Nor does `refund_if`: it deletes the receipt it refunds.
//!
//! [`RedisStore::repeat_window`]: crate::store::RedisStore::repeat_window

use futures_util::future::join_all;

use super::cluster::by_slot;
use super::{CentralItem, CentralSite, ScriptArg, slot_id};
use crate::store::{slot, slot_tag};

/// After the key prefix, in front of a marker's name (see the module doc).
const MARKER: &str = "~refund:";

impl CentralSite {
    /// Give back spends, once (see the module doc); best effort: a failed refund only
    /// under-admits until the keys refill or expire.
    pub async fn refund(&self, items: &[CentralItem]) {
        if items.is_empty() {
            return;
        }
        let prefix = self.store().prefix();
        if !self.cluster {
            if let Some(marker) = marker_key(prefix, None, &slot_id()) {
                self.refund_once(items, marker).await;
            }
            return;
        }
        let groups = by_slot(items);
        join_all(groups.iter().filter_map(|(&slot, idx)| {
            // None: the key prefix's own braces keep a marker out of this slot. The spend
            // is then kept (under-admission) rather than refunded without a marker.
            let marker = marker_key(prefix, Some(slot), &slot_id())?;
            let group: Vec<CentralItem> = idx.iter().map(|&i| items[i].clone()).collect();
            Some(async move { self.refund_once(&group, marker).await })
        }))
        .await;
    }

    /// One refund call: the items' keys and `marker` last; the marker's life, then the
    /// items' values.
    async fn refund_once(&self, items: &[CentralItem], marker: String) {
        let mut keys: Vec<&str> = items.iter().map(|it| it.key.as_str()).collect();
        keys.push(&marker);
        let life = self.store().repeat_window().as_millis().max(1) as f64;
        let args: Vec<ScriptArg> = std::iter::once(ScriptArg::Number(life))
            .chain(items.iter().flat_map(CentralItem::args))
            .collect();
        let _ = self
            .store()
            .eval_script(&self.script, "refund", &keys, &args)
            .await;
    }
}

/// The marker key `id` names, after `prefix`: in `slot` on a cluster (`None` if it cannot
/// be: a prefix whose own braces decide the slot elsewhere), plain on a single server.
fn marker_key(prefix: &str, slot: Option<u16>, id: &str) -> Option<String> {
    let Some(want) = slot else {
        return Some(format!("{prefix}{MARKER}{id}"));
    };
    let key = format!("{prefix}{MARKER}{{{}}}{id}", slot_tag(want)?);
    (self::slot(key.as_bytes()) == want).then_some(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_is_in_its_slot_and_starts_with_a_tilde() {
        for want in (0..16384).step_by(97) {
            let key = marker_key("tg:", Some(want), "1f.2").expect("a tag for every slot");
            assert_eq!(slot(key.as_bytes()), want, "{key}");
            assert!(key.starts_with("tg:~refund:{"), "{key}");
        }
        assert_eq!(
            marker_key("tg:", None, "a.1").as_deref(),
            Some("tg:~refund:a.1")
        );
        // A prefix with its own hash tag puts every key in its slot, the marker too.
        let tagged = slot(b"{tg}:p:ip:1.2.3.4");
        let key = marker_key("{tg}:", Some(tagged), "a.1").expect("the prefix's slot");
        assert_eq!(slot(key.as_bytes()), tagged);
        // Unmatched braces in the prefix decide the slot, so most slots cannot be named.
        let named = (0..64).filter(|&s| marker_key("a{b", Some(s), "x").is_some());
        assert!(named.count() < 4);
    }
}
