//! The central site's "empty until t" (the end of its check step, `check.rs`): a central
//! key the store just admitted, and left too empty for the next request of the same cost,
//! is denied locally until that request could conform — one store call per admission for an abusive key, never a denial the store
//! would not make (see `deny_cache`).

use crate::check::Check;
use crate::clock::Nanos;
use crate::deny_cache::refill_wait;
use crate::site::central::{CentralItem, CentralResult};

impl Check<'_> {
    /// "Empty until t": the admitted request keeps its central spends, so the keys it left
    /// too empty for the next request are denied locally until that one could conform.
    pub(crate) fn remember_empty(&self) {
        let cache = &self.sites.denied_until;
        let mut now = None;
        for ask in &self.asks {
            let Some((until, full_at, sent)) = ask.empty else {
                continue;
            };
            let now = *now.get_or_insert_with(|| self.sites.local.now());
            if until > now {
                cache.deny(&ask.key, until, full_at, now, sent);
            } else {
                cache.forget(&ask.key);
            }
        }
    }
}

/// How long after the call a key the store just admitted (and kept the spend of) stays too
/// empty for the next request of the same cost: gcra and token_bucket only, from the
/// reply's `reset_after` and the parameters the script decided with (headroom included).
pub(crate) fn empty_wait(item: &CentralItem, r: &CentralResult) -> Option<Nanos> {
    let [alg, limit, period_us, burst, cost, _, _] = item.params;
    if !(r.committed && (alg == 1.0 || alg == 2.0) && (r.remaining as f64) < cost) {
        return None;
    }
    refill_wait(limit, period_us * 1_000.0, burst, cost, r.reset_after)
}
