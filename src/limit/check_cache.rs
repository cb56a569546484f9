//! The limit step's "empty until t": a central key the store just admitted, and left too
//! empty for the next request of the same cost, is denied locally until that request could
//! conform — one store call per admission for an abusive key, never a denial the store
//! would not make (see `deny_cache`).

use super::central::{CentralItem, CentralResult};
use super::clock::Nanos;
use super::decided::Pending;
use super::deny_cache::refill_wait;
use super::limiter::Limiter;

impl Limiter {
    /// "Empty until t": the admitted request keeps its central spends, so the keys it left
    /// too empty for the next request are denied locally until that one could conform.
    pub(super) fn remember_empty(&self, pending: &[Pending], empty: &[(usize, Nanos, Nanos)]) {
        if empty.is_empty() {
            return;
        }
        let now = self.local.now();
        for &(i, until, full_at) in empty {
            if until > now {
                self.denied_until.deny(&pending[i].key, until, full_at, now);
            } else {
                self.denied_until.forget(&pending[i].key);
            }
        }
    }
}

/// How long after the call a key the store just admitted (and kept the spend of) stays too
/// empty for the next request of the same cost: gcra and token_bucket only, from the
/// reply's `reset_after` and the parameters the script decided with (headroom included).
pub(super) fn empty_wait(item: &CentralItem, r: &CentralResult) -> Option<Nanos> {
    let [alg, limit, period_us, burst, cost, _, _] = item.params;
    if !(r.committed && (alg == 1.0 || alg == 2.0) && (r.remaining as f64) < cost) {
        return None;
    }
    refill_wait(limit, period_us * 1_000.0, burst, cost, r.reset_after)
}
