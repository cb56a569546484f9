//! `[store] kind = "redis-sentinel"`: the master is found through Redis Sentinel
//! (`sentinels`, `master_name`) and found again after a failover (`limit/store/sentinel.rs`).

use super::raw::{RawStore, StoreKind};
use super::validate::Validator;

impl Validator {
    /// `sentinels` and `master_name`: required with the sentinel kind, refused otherwise.
    pub(super) fn sentinels(&mut self, raw: &RawStore) -> (Vec<String>, Option<String>) {
        if raw.kind != StoreKind::RedisSentinel {
            if !raw.sentinels.is_empty() {
                self.fail(
                    "store.sentinels",
                    "only kind = \"redis-sentinel\" uses sentinels",
                );
            }
            if raw.master_name.is_some() {
                self.fail(
                    "store.master_name",
                    "only kind = \"redis-sentinel\" names a master",
                );
            }
            return (Vec::new(), None);
        }
        if raw.sentinels.is_empty() {
            self.fail(
                "store.sentinels",
                "needs at least one redis:// address of a sentinel",
            );
        }
        for (i, u) in raw.sentinels.iter().enumerate() {
            self.redis_url(&format!("store.sentinels[{i}]"), u);
        }
        let master = raw.master_name.clone().filter(|m| !m.is_empty());
        if master.is_none() {
            self.fail(
                "store.master_name",
                "required with kind = \"redis-sentinel\" (the name the sentinels monitor)",
            );
        }
        (raw.sentinels.clone(), master)
    }
}
