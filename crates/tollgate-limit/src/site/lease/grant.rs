//! The coordinator's side of a lease: the global GCRA state of a key, granting cells as
//! *reservations*. `lease.lua` runs the same rule in Redis; [`MemoryCoordinator`] runs it
//! in this process (the `memory` store, and the simulator, which counts its calls).
//!
//! # The grant rule
//!
//! With the key's theoretical arrival time `tat`, `T = period / limit`, `τ = burst · T` and
//! `base = max(tat, now)`, the j-th cell granted (j = 1, 2, …) is the cell whose GCRA
//! arrival would be `base + j·T`; it *conforms* (a lone GCRA would admit it) from
//! `base + j·T − τ`. A call asking for `want` cells gets every cell that conforms within
//! `horizon` of now, up to `want`, and `tat` advances by the cells granted. The reply is
//! the count and the *frontier*: `tat − τ − now` after the grant, the conform time of the
//! last cell granted (relative to the coordinator's now); the next cell would conform one
//! `T` later.
//!
//! A node spends a cell only once its own clock has passed that cell's conform time
//! (mapped from the moment the reply arrived, which is never earlier than the moment the
//! coordinator decided). So the cells spent by all nodes together are a subset of what a
//! single GCRA at the coordinator would have admitted at those times: **leases never admit
//! more than the policy**, over any interval that starts from a full key. The only error is
//! timing: a cell may be spent up to `lease_ttl` after it conforms, so a window of length
//! `D` holds at most `burst + (D + lease_ttl) · rate` cells. Long cells (`hold.rs`) and
//! returns (`returns.rs`, whose `grant_returning` wraps [`grant`]) keep the same bound.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use super::ask::RefillAsk;
use super::busy::{GrantRate, busy, busy_span, cautious};
use super::fair::{Demand, demand_span};
use super::hold::{Holds, LONG_BUSY, LONG_KEEP};
use super::params::LeaseParams;
use super::returns::{Returns, grant_returning};
use crate::clock::Nanos;

/// Grants between sweeps of keys that are full again.
const SWEEP_EVERY: u64 = 65_536;

/// One coordinator answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Grant {
    /// Cells reserved for the asking node (0 when none conforms within the horizon).
    pub granted: u32,
    /// Nanoseconds from the coordinator's now to the conform time of the last cell granted
    /// (with none granted: of the last cell anyone was granted). Negative when it conformed
    /// already: a full key's first `burst` cells all conform at once. Rounded up.
    pub frontier: i64,
    /// The key's grant rate: cells granted to all nodes over the last few TTLs (this grant
    /// included, decayed over [`busy_span`]), per mille of what its limit allows in that
    /// time (`busy.rs`). Wasted cells count: it is what the coordinator gave, not what was
    /// spent.
    pub busy: u32,
    /// The cells are long cells (`hold.rs`): all conform now, valid `long_life` from now.
    pub long: bool,
    /// The cells are returnable (`returns.rs`): each lives `lease_ttl` less
    /// `return_cells · T`, and the node gives back those that expire unspent.
    pub returnable: bool,
    /// The coordinator's now at the grant (ns): what a return names its cells by.
    pub at: Nanos,
    /// The key's demand: the requests all nodes reported (`RefillAsk::demand`, this call's
    /// included), decayed over `fair::demand_span`, per mille of what its limit allows in
    /// that time. From `fair::CONTENDED` a node with a fair part of it reserves ahead
    /// (`fair.rs`).
    pub demand: u32,
}

/// The grant rule on one key's `tat` (ticks) and long-cell holds, for `want` cells
/// conforming within `lead` ns (at most the policy's horizon), or `long` long cells when the
/// key has room for them (`long_fits`); returns the new `tat`.
pub fn grant(
    p: &LeaseParams,
    tat: Option<u128>,
    holds: &mut Holds,
    ask: RefillAsk,
    now: Nanos,
) -> (u128, Grant) {
    let want = ask.want;
    let now_t = p.rate.ticks(now);
    // The state is the key's tat less its held cells (`hold.rs`): ended holds settled
    // into it, it is a plain GCRA tat, and the held cells come off the level.
    let base = holds.settle(p, tat, now).max(now_t);
    let held = p.rate.cells(u64::from(holds.held()));
    let level = (now_t + p.tolerance).saturating_sub(base + held) / p.rate.cells(1);
    if long_fits(p, level, ask.long) {
        // Held, not yet taken: the state moves when the hold ends.
        holds.hold(p, ask.long, now);
        let held = p.rate.cells(u64::from(holds.held()));
        let frontier = (base + held) as i128 - p.tolerance as i128 - now_t as i128;
        let g = Grant {
            granted: ask.long,
            frontier: p.ns_ceil(frontier),
            busy: 0,
            long: true,
            ..Grant::default()
        };
        return (base, g);
    }
    let reach = now_t + p.rate.ticks(ask.lead.min(p.horizon)) + p.tolerance;
    let fits = reach.saturating_sub(base + held) / p.rate.cells(1);
    let granted = u32::try_from(fits.min(u128::from(want))).unwrap_or(want);
    let tat = base + p.rate.cells(u64::from(granted));
    let frontier = (tat + held) as i128 - p.tolerance as i128 - now_t as i128;
    (
        tat,
        Grant {
            granted,
            frontier: p.ns_ceil(frontier),
            busy: 0,
            long: false,
            ..Grant::default()
        },
    )
}

/// Whether `long` long cells fit a key with `level` cells conforming now (the holds
/// included: `level ≤ burst − held`): an eighth of the burst ([`LONG_KEEP`]), at least one
/// cell, must still conform after the grant, for the next ordinary request.
fn long_fits(p: &LeaseParams, level: u128, long: u32) -> bool {
    long > 0 && p.burst >= LONG_KEEP && level >= u128::from(long) + u128::from(p.burst / LONG_KEEP)
}

/// The coordinator in this process: the lease site's store when `[store] kind = "memory"`
/// (one node, so leasing costs a map lookup, not a round trip), and the simulator's.
pub struct MemoryCoordinator {
    /// Key → `tat` in ticks of that key's policy, and the same in nanoseconds: a key
    /// whose `tat` has passed is full again and is swept (absent means full).
    /// Also the key's grant-rate average (`busy`: count, at) and when it is forgotten.
    tats: Mutex<HashMap<Box<str>, Entry>>,
    /// Calls answered, for the simulator's calls-per-request column.
    calls: AtomicU64,
}

impl Default for MemoryCoordinator {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryCoordinator {
    pub fn new() -> Self {
        MemoryCoordinator {
            tats: Mutex::new(HashMap::new()),
            calls: AtomicU64::new(0),
        }
    }

    /// Grant up to `want` cells of `key` at `now` (see the module doc).
    pub fn grant(&self, key: &str, p: &LeaseParams, ask: RefillAsk, now: Nanos) -> Grant {
        let calls = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        let mut tats = self.tats.lock().unwrap_or_else(|e| e.into_inner());
        if calls.is_multiple_of(SWEEP_EVERY) {
            drop_full(&mut tats, now);
        }
        let (old, mut holds, mut returns, demand) = match tats.get_mut(key) {
            Some(e) => (
                Some((e.tat, e.rate, e.forget_at)),
                std::mem::take(&mut e.holds),
                std::mem::take(&mut e.returns),
                e.demand.filter(|_| e.demand_until > now),
            ),
            None => (None, Holds::default(), Returns::default(), None),
        };
        let rate = old.and_then(|e| e.1.filter(|_| e.2 > now));
        // Long cells and returns go by the cautious reading (`busy.rs`).
        let before = cautious(p, rate, now);
        let ask = match before < LONG_BUSY {
            true => ask,
            false => RefillAsk { long: 0, ..ask },
        };
        let tat = old.map(|e| e.0);
        let (tat, mut g) = grant_returning(p, tat, &mut holds, &mut returns, ask, before, now);
        let (rate, busy) = busy(p, rate, g.granted, now);
        g.busy = busy;
        // As lease.lua: stored only with a report, forgotten four spans after the last.
        let (demand, demand_until) = match (demand, ask.demand) {
            (d, 0) => (d, d.map_or(0, |_| old_until(&tats, key))),
            (d, n) => (
                Some(d.unwrap_or_default().add(p, n, now)),
                now.saturating_add(4 * demand_span(p)),
            ),
        };
        g.demand = demand.map_or(0, |d| d.per_mille(p, now));
        // As lease.lua: the average is stored only with a grant (decay needs no write).
        let (rate, forget_at) = match g.granted {
            0 => (old.and_then(|e| e.1), old.map_or(0, |e| e.2)),
            _ => (Some(rate), now.saturating_add(4 * busy_span(p))),
        };
        let entry = Entry {
            tat,
            full_at: p.rate.ns_ceil(tat),
            rate,
            forget_at,
            holds,
            returns,
            demand,
            demand_until,
        };
        match tats.get_mut(key) {
            Some(slot) => *slot = entry,
            None => {
                tats.insert(key.into(), entry);
            }
        }
        g
    }

    /// Spend `cost` cells of `key` whether or not they conform (a response reported a
    /// higher cost): the key's arrival time moves on, past now if it must.
    pub fn debit(&self, key: &str, p: &LeaseParams, cost: u32, now: Nanos) {
        let mut tats = self.tats.lock().unwrap_or_else(|e| e.into_inner());
        let now_t = p.rate.ticks(now);
        match tats.get_mut(key) {
            Some(e) => {
                // On the tat less the held cells (`hold.rs`), as check.lua's debit does on
                // a leased key in Redis: the held cells stay off the level.
                let tat = e.holds.settle(p, Some(e.tat), now).max(now_t);
                e.tat = tat + p.rate.cells(u64::from(cost));
                e.returns.written_elsewhere();
                e.full_at = p.rate.ns_ceil(e.tat);
            }
            None => {
                let tat = now_t + p.rate.cells(u64::from(cost));
                let entry = Entry {
                    tat,
                    full_at: p.rate.ns_ceil(tat),
                    rate: None,
                    forget_at: 0,
                    holds: Holds::default(),
                    returns: Returns::default(),
                    demand: None,
                    demand_until: 0,
                };
                tats.insert(key.into(), entry);
            }
        }
    }

    /// Calls answered so far.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// The sweep `grant` runs every `SWEEP_EVERY` calls, on demand, and the keys left.
    #[cfg(test)]
    fn sweep(&self, now: Nanos) -> usize {
        let mut tats = self.tats.lock().unwrap_or_else(|e| e.into_inner());
        drop_full(&mut tats, now);
        tats.len()
    }
}

/// One key at the in-process coordinator: as `lease.lua`'s three Redis keys.
#[derive(Debug, Clone)]
struct Entry {
    /// In ticks of the key's policy.
    tat: u128,
    /// When `tat` has passed (ns): the key is full again.
    full_at: Nanos,
    /// The grant-rate average (`busy`), forgotten at `forget_at` (ns).
    rate: Option<GrantRate>,
    forget_at: Nanos,
    /// Long cells held (`hold.rs`).
    holds: Holds,
    /// The returnable run and the returns taken (`returns.rs`). A swept key loses it:
    /// its next call finds no key, which breaks the run and starts a new one.
    returns: Returns,
    /// The key's demand (`fair.rs`), forgotten at `demand_until` (ns).
    demand: Option<Demand>,
    demand_until: Nanos,
}

/// When `key`'s demand is forgotten (0: absent).
fn old_until(tats: &HashMap<Box<str>, Entry>, key: &str) -> Nanos {
    tats.get(key).map_or(0, |e| e.demand_until)
}

/// Drop keys that are full again at `now` and whose grant rate is forgotten (absent
/// means full, with a new average, read cautiously at the full rate: nothing is lost), once
/// their holds can no longer bind and their run is over (as Redis keeps `~ret:`).
fn drop_full(tats: &mut HashMap<Box<str>, Entry>, now: Nanos) {
    tats.retain(|_, e| {
        e.full_at > now
            || e.forget_at > now
            || e.demand_until > now
            || e.holds.binds(now)
            || e.returns.kept(now)
    });
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;
    use std::time::Duration;

    use super::*;

    const MS: Nanos = 1_000_000;

    fn params(limit: u32, burst: u32, ttl_ms: u64) -> LeaseParams {
        let nz = |n| NonZeroU32::new(n).expect("non-zero");
        LeaseParams::new(
            nz(limit),
            Duration::from_secs(1),
            nz(burst),
            Duration::from_millis(ttl_ms),
            Duration::from_millis(20),
            nz(50),
        )
        .expect("valid")
    }

    #[test]
    fn full_key_grants_burst_now_and_the_horizon_later() {
        // 1000/s, burst 10, horizon 50 ms: 10 cells conform now, then one per ms up to 50 ms.
        let p = params(1000, 10, 50);
        let ask = |want| RefillAsk {
            want,
            lead: 50 * MS,
            long: 0,
            ..RefillAsk::default()
        };
        let (tat, g) = grant(&p, None, &mut Holds::default(), ask(100), 1_000 * MS);
        assert_eq!(g.granted, 60);
        assert_eq!(g.frontier, 50 * MS as i64);
        let (_, g2) = grant(&p, Some(tat), &mut Holds::default(), ask(5), 1_000 * MS);
        assert_eq!(
            g2,
            Grant {
                granted: 0,
                frontier: 50 * MS as i64,
                busy: 0,
                long: false,
                ..Grant::default()
            }
        );
        let (_, g3) = grant(&p, Some(tat), &mut Holds::default(), ask(5), 1_003 * MS);
        assert_eq!(
            g3,
            Grant {
                granted: 3,
                frontier: 50 * MS as i64,
                busy: 0,
                long: false,
                ..Grant::default()
            }
        );
    }

    #[test]
    fn lead_zero_is_plain_gcra() {
        // With no lead a grant of one cell is exactly the GCRA admission rule.
        let p = params(1000, 3, 50);
        let mut tat = None;
        let admitted: Vec<u32> = [0u64, 0, 0, 0, 1, 1, 2]
            .iter()
            .map(|&ms| {
                let (t, g) = grant(
                    &p,
                    tat,
                    &mut Holds::default(),
                    RefillAsk {
                        want: 1,
                        lead: 0,
                        long: 0,
                        ..RefillAsk::default()
                    },
                    ms * MS,
                );
                tat = Some(t);
                g.granted
            })
            .collect();
        assert_eq!(admitted, [1, 1, 1, 0, 1, 0, 1]);
    }

    /// The sweep keeps a key while its holds can still raise its state, not only while they
    /// last (found by review: a key swept after its hold ended forgot a cap still ahead).
    #[test]
    fn the_sweep_keeps_a_key_whose_holds_still_bind() {
        let c = MemoryCoordinator::new();
        // 1000/s, burst 1000, TTL 50 ms: a hold lasts 150 ms.
        let p = params(1000, 1000, 50);
        let ask = |long| RefillAsk {
            want: 1,
            lead: 0,
            long,
            ..RefillAsk::default()
        };
        c.grant("k", &p, ask(0), 0);
        // Quiet at 600 ms (the grant rate decayed): 700 long cells.
        assert!(c.grant("k", &p, ask(700), 600 * MS).long);
        // The hold ends at 754.607 ms (750 ms rounded up to 150 ms / 32 in whole µs); its
        // cells, taken at its end, raise the state until 700 ms later, past the key's own
        // tat (1 301 ms) and its grant rate's forgetting (1 400 ms).
        assert_eq!(c.sweep(1_420 * MS), 1, "kept while the cap binds");
        assert_eq!(c.sweep(1_455 * MS), 0, "then swept");
    }

    #[test]
    fn the_coordinator_counts_calls() {
        let c = MemoryCoordinator::new();
        let p = params(10, 1, 50);
        let one = RefillAsk {
            want: 1,
            lead: 0,
            long: 0,
            ..RefillAsk::default()
        };
        c.grant("k", &p, one, 0);
        c.grant("k", &p, one, 0);
        assert_eq!(c.calls(), 2);
        assert_eq!(c.sweep(10 * 1_000 * MS), 0);
    }
}
