//! One leased key on one node: the cells the coordinator reserved for this node, spent on
//! their schedule, and when to ask for more. Pure and synchronous (time comes in as a
//! number), so the gateway's lease site and `tollgate simulate` run the very same code.
//!
//! - **Spending**: a request spends its cells only once each has *conformed* (see
//!   `grant.rs`), so leases never admit more than the policy.
//! - **Expiry**: a cell not spent within `lease_ttl` of conforming is dropped.
//! - **Batch size**: `k` follows this node's own demand for the key (requests seen in the
//!   last `lease_target`, scaled to the TTL), between 1 and `lease_max` (`size.rs`).
//! - **Refill**: once the node holds less than it spends in two round trips (at least: once
//!   it holds nothing) it asks again, in the background, so requests do not wait on the
//!   store in the steady state.
//! - **Returns**: while the key is in a returnable run (`returns.rs`) a thin node takes a
//!   spare cell with its waiting request's, and gives back, with its next call, the
//!   returnable cells that expired unspent.
//! - **Empty coordinator**: a short or empty grant says when more cells enter the horizon;
//!   the node does not ask again before then (no polling an empty coordinator), and after
//!   empty answers in a row it backs off further (`size::back_off`).

use smallvec::SmallVec;

use super::ask::{RefillAsk, Take, Taken};
use super::batch::Batch;
use super::calm::Calm;
use super::fair::Fair;
use super::grant::Grant;
use super::params::LeaseParams;
use super::returns::{Returned, return_id};
use super::size::{
    RESERVE_FROM, SPARE_FROM, back_off, calm_batch, calm_cap, contended_batch, long_batch,
    reserve_batch, slack_batch,
};
use crate::clock::Nanos;

/// Weight of the last closed window in the demand average.
const DECAY: f64 = 0.25;

/// Refill calls a hot key may have out at once.
pub const MAX_IN_FLIGHT: u8 = 4;

/// One key's lease on this node.
#[derive(Debug, Clone, Default)]
pub struct LeaseBook {
    /// Grants still held, oldest first (their cells conform in this order).
    batches: SmallVec<[Batch; 2]>,
    /// Do not ask the coordinator before this (ns): it said nothing more fits until then.
    blocked_until: Nanos,
    /// The last grant left over three quarters of the key's burst conforming at once.
    slack: bool,
    /// Refill calls out.
    in_flight: u8,
    /// Cells those calls asked for.
    pending: u32,
    /// When it was sent (ns).
    asked_at: Nanos,
    /// Moving average of the coordinator's round trip (ns), for the low-water mark.
    rtt: Nanos,
    /// Start of the current demand window (ns).
    window_start: Nanos,
    /// Cells asked for (admitted or not) in the current window.
    window: u32,
    /// This node's demand in cells per `lease_target`: a moving average over windows of
    /// `lease_target` (weight 1/4 per window), so one busy or quiet window does not swing
    /// the batch size.
    demand: f64,
    /// See [`LeaseBook::last_conform`].
    last_conform: Taken,
    /// The last take found too few conforming cells: a request is waiting for a refill.
    waiting: bool,
    /// Empty answers in a row, for the back-off.
    empties: u8,
    /// Cells dropped unspent (read by tests; not yet exported as a metric).
    pub expired: u64,
    /// Whether the key is calm, and this node's demand over a TTL (`calm.rs`).
    calm: Calm,
    /// The last grant was returnable: the key is in a returnable run (`returns.rs`).
    returnable: bool,
    /// Returnable cells that expired unspent since the last call: given back with it.
    returned: Returned,
    /// The requests not yet reported, and the key's demand and this node's part of it as
    /// the last grant left them: whether it reserves for its share (`fair.rs`).
    fair: Fair,
}

impl LeaseBook {
    /// Spend `cost` conforming cells at `now`, or deny.
    pub fn take(&mut self, p: &LeaseParams, cost: u32, now: Nanos) -> Take {
        self.count_demand(p, cost, now);
        self.calm.count(p, cost, now);
        self.fair.count(p, cost, now);
        self.retake(p, cost, now)
    }

    /// As [`LeaseBook::take`] for a request already counted (a retry after an inline refill).
    pub fn retake(&mut self, p: &LeaseParams, cost: u32, now: Nanos) -> Take {
        let (t, now_t) = (p.interval(), ticks(p, now));
        self.expire(p, now_t, t);
        let ready: u32 = self.batches.iter().map(|b| b.ready(now_t, t)).sum();
        self.waiting = ready < cost;
        if ready < cost {
            return Take::Denied {
                retry_after: self.retry_after(p, cost, now, now_t, t),
            };
        }
        let (mut need, ttl) = (cost, ticks(p, p.ttl));
        let mut taken: Option<Taken> = None;
        for b in self.batches.iter_mut() {
            let n = need.min(b.ready(now_t, t));
            if n > 0 {
                let (conform, expires) = (b.conform(0, t), b.first_expiry(ttl, t));
                taken = Some(taken.map_or(Taken { conform, expires }, |k| Taken {
                    conform: k.conform.min(conform),
                    expires: k.expires.min(expires),
                }));
            }
            b.spend(n, t);
            need -= n;
        }
        self.last_conform = taken.unwrap_or(Taken {
            conform: now_t,
            expires: now_t + ttl,
        });
        self.batches.retain(|b| b.left > 0);
        self.fair.spent(p, cost, now);
        Take::Admitted {
            remaining: u64::from(ready - cost),
        }
    }

    /// When the cells the last admitted take spent conformed and expire: what a give-back
    /// of that take must restore.
    pub fn last_conform(&self) -> Taken {
        self.last_conform
    }

    /// Undo a take whose request another policy denied. The cells go back to the front,
    /// all conforming at the earliest of them and expiring with the first of them to
    /// expire (the take's [`LeaseBook::last_conform`]): spendable at once, and never later
    /// than any of them could have been (an ordinary cell `lease_ttl` after it conformed,
    /// a long cell at the end of its life, `hold.rs`).
    pub fn give_back(&mut self, p: &LeaseParams, cost: u32, taken: Taken) {
        let t = p.interval();
        self.batches.insert(0, Batch::given_back(taken, cost, t));
    }

    /// Cells to ask the coordinator for now, if it is time to ask: a batch (see
    /// [`LeaseBook::batch_size`]) once the node holds less than it spends in two round trips
    /// to the coordinator (at least: once it holds nothing), so the refill lands before the
    /// book runs dry and no cells are fetched long before they are needed (a batch that
    /// waits behind cells still held is spent late, and at the limit every cell that
    /// expires is an admission lost: asking at half a batch lost 1.5 % there).
    ///
    /// The ask's `lead` is how far ahead the granted cells may conform. A node that sees
    /// enough requests per TTL (`RESERVE_FROM`) takes reservations up to the coordinator's
    /// horizon; a slower one would lose future cells to expiry, so it asks only for cells
    /// that conform now, and only with a request waiting for one. While the key's bucket
    /// has slack every node asks for cells that conform now (bigger batches: see
    /// `batch_size`), again only once it holds nothing.
    ///
    /// A hot key may have up to [`MAX_IN_FLIGHT`] calls out (cells asked for count as held),
    /// so its supply is not one batch per round trip; a slow one has at most one.
    pub fn wants(&self, p: &LeaseParams, now: Nanos) -> Option<RefillAsk> {
        if self.in_flight >= MAX_IN_FLIGHT || now < self.blocked_until {
            return None;
        }
        // A small contended key's node that got more than its demand-weighted share lately
        // leaves the next cells to those that got less (`fair.rs`), unless the key has
        // slack: then nobody else wants them.
        if self.fair.ahead(p, now) && !self.slack {
            return None;
        }
        let calm = self.calm(p, now);
        if calm && self.in_flight > 0 {
            return None;
        }
        // A contended key's node with a fair part of its demand, or (a small key) one that
        // got less than its demand-weighted share lately (far less: from a request a TTL),
        // reserves ahead from a thinner demand than usual (`fair.rs`), on the same terms
        // as the nodes that reserve anyway. Not for a single cell while the key is in a returnable run: the spare
        // below serves it in fewer calls (reserving one cell at a time, 32 equal nodes at
        // twice the limit made 0.525 calls a request in the simulator instead of 0.378).
        let per_ttl = self.per_ttl(p);
        let owed = ((self.fair.reserves(self.rate(p)) || self.fair.owed(p, now))
            && per_ttl >= SPARE_FROM
            || self.fair.deeply_owed(p, now) && per_ttl >= super::fair::DEEP_FROM)
            && (!self.returnable || contended_batch(per_ttl) >= 2);
        let reserve = (per_ttl >= RESERVE_FROM || owed) && !self.slack;
        let lead = if reserve { p.horizon } else { 0 };
        if self.in_flight > 0 && lead == 0 {
            return None;
        }
        if !calm && !reserve && !self.slack && !self.waiting {
            return None;
        }
        let in_two_trips = 2.0 * self.demand * self.rtt as f64 / p.target as f64;
        let held = self.held().saturating_add(self.pending);
        let long = long_batch(p, self.calm.per_ttl(p));
        let returned = self.returned;
        let demand = self.fair.unreported();
        (f64::from(held) < in_two_trips.max(1.0)).then(|| match calm {
            true => RefillAsk {
                want: (calm_batch(self.calm.per_ttl(p)) as u32).clamp(1, calm_cap(p)),
                lead: p.horizon,
                long,
                returned,
                demand,
            },
            false
                if !reserve && !self.slack && self.returnable && self.per_ttl(p) >= SPARE_FROM =>
            {
                // A request waits and the key is in a returnable run: the cell it needs
                // and the next, which is given back if no request comes for it in time.
                RefillAsk {
                    want: 2,
                    lead: p.ns_ceil(p.interval()).max(0) as Nanos,
                    long,
                    returned,
                    demand,
                }
            }
            false => RefillAsk {
                want: match owed {
                    true => contended_batch(self.per_ttl(p)).clamp(self.batch_size(p), p.max),
                    false => self.batch_size(p),
                },
                lead,
                long,
                returned,
                demand,
            },
        })
    }

    /// This node's requests per TTL for the key (λ). Until a first window has closed, the
    /// open window's count stands in (a lower bound of its demand), so a new key, or a long
    /// `lease_target`, does not start at nothing.
    fn per_ttl(&self, p: &LeaseParams) -> f64 {
        let demand = if self.demand > 0.0 {
            self.demand
        } else {
            f64::from(self.window.saturating_sub(1))
        };
        demand * p.ttl as f64 / p.target as f64
    }

    /// This node's demand over the key's limit: its requests per emission interval.
    fn rate(&self, p: &LeaseParams) -> f64 {
        self.per_ttl(p) * p.ns_ceil(p.interval()) as f64 / p.ttl.max(1) as f64
    }

    /// `ask` is out since `now`.
    pub fn begin(&mut self, now: Nanos, ask: RefillAsk) {
        if self.in_flight == 0 {
            self.asked_at = now;
        }
        self.in_flight += 1;
        self.pending = self.pending.saturating_add(ask.want);
        if ask.returned == self.returned {
            self.returned = Returned::default();
        }
        self.fair.reported(ask.demand);
    }

    /// The coordinator answered `g` to `ask`; `now` is when the reply arrived.
    pub fn on_grant(&mut self, p: &LeaseParams, ask: RefillAsk, g: Grant, now: Nanos) {
        let want = if g.long { g.granted } else { ask.want };
        if self.in_flight == 1 {
            // Sampled only with one call out: its start is the one recorded.
            let sample = now.saturating_sub(self.asked_at) as f64;
            self.rtt = (self.rtt as f64 * (1.0 - DECAY) + sample * DECAY) as Nanos;
        }
        self.settle(ask);
        let (t, now_t) = (p.interval(), ticks(p, now));
        // Cells still conforming at once after this grant: over three quarters of a burst is
        // slack (tuned on the simulator: at half, the overload runs lost 0.2 % more).
        let room = (-p.ticks(g.frontier)).max(0) / t;
        self.slack = room * 4 > 3 * i128::from(p.burst);
        self.calm.on_grant(g, now);
        self.fair.on_grant(p, ask.demand, &g, now);
        self.returnable = g.returnable;
        if g.granted > 0 {
            let last = now_t + p.ticks(g.frontier);
            self.batches.push(match (g.long, g.returnable) {
                (true, _) => Batch::long(now_t, g.granted, now_t + ticks(p, p.long_life), t),
                (false, true) => {
                    Batch::ordinary(last, now_t, g.granted, t).returnable(p.return_cut(), g.at)
                }
                (false, false) => Batch::ordinary(last, now_t, g.granted, t),
            });
            // Replies of overlapping calls may land out of order, and long cells outlive
            // ordinary ones: spend the cells that expire first first.
            let ttl = ticks(p, p.ttl);
            self.batches.sort_by_key(|b| b.first_expiry(ttl, t));
        }
        if g.granted < want {
            // When the cells still wanted would enter the coordinator's horizon.
            let missing = i128::from(want - g.granted);
            let lead = i64::try_from(ask.lead).unwrap_or(i64::MAX);
            let wait = p.ticks(g.frontier) + missing * t - p.ticks(lead);
            let mut wait = p.ns_ceil(wait).max(0) as u64;
            if g.granted == 0 {
                self.empties = self.empties.saturating_add(1);
                if !self.calm.verdict() {
                    self.calm.on_empty(now);
                }
                let mut away = back_off(p.ttl, self.empties);
                if g.frontier > lead && self.calm.lately(p, now) {
                    // Reserved past its reach by a calm key's nodes, not an overload's:
                    // back when that has come due (`size::CALM_LEAVE_BUSY`).
                    away = away.min(wait);
                } else if g.frontier <= lead {
                    // No cell is reserved past this node's reach: the bucket is merely
                    // empty, perhaps drained by this node alone. Back before it is full
                    // again (the next cell fits after `wait`, the last of a burst
                    // `burst − 1` cells later), so if every node is away at once no cell is
                    // lost. (Past its reach, other nodes hold the key's horizon and are
                    // spending it.)
                    let refill = p.ns_ceil(p.tolerance as i128 - p.interval()).max(0) as u64;
                    away = away.min(wait.saturating_add(refill));
                }
                wait = wait.max(away);
            }
            self.blocked_until = now.saturating_add(wait);
        }
        if g.granted > 0 {
            self.empties = 0;
        }
    }

    /// The call for `ask` failed; the store layer decides what requests get meanwhile.
    pub fn on_error(&mut self, ask: RefillAsk) {
        self.settle(ask);
        self.fair.unsent(ask.demand);
    }

    fn settle(&mut self, ask: RefillAsk) {
        self.in_flight = self.in_flight.saturating_sub(1);
        self.pending = self.pending.saturating_sub(ask.want);
    }

    /// Whether a refill call is out.
    pub fn in_flight(&self) -> bool {
        self.in_flight > 0
    }

    /// Cells held, conforming or not.
    pub fn held(&self) -> u32 {
        self.batches.iter().map(|b| b.left).sum()
    }

    /// True when dropping this lease loses nothing: no cells, no call out, not blocked.
    pub fn is_idle(&self, now: Nanos) -> bool {
        self.batches.is_empty() && self.in_flight == 0 && now >= self.blocked_until
    }

    /// Drop the cells expired by `now` (their returns, if returnable, wait for the next
    /// call), as a take would.
    pub(super) fn drop_expired(&mut self, p: &LeaseParams, now: Nanos) {
        self.expire(p, ticks(p, now), p.interval());
    }

    /// True when this book may leave memory at `now` (`books.rs`' sweep): idle, and no
    /// return owed (expired returnable cells are given back with the next call, by their
    /// grant's time and an id: a book dropped with them would lose the return). What a new
    /// book does not remember (its demand averages, its calm verdict, its share of a
    /// contended key's demand) only makes it ask less at first. The requests it counted
    /// since its last call go unreported: the key's demand is an average that the other
    /// nodes' reports keep.
    pub fn is_spent(&self, now: Nanos) -> bool {
        self.is_idle(now) && self.returned.cells == 0
    }

    /// `k`: how many cells one call asks for, within 1..=`lease_max`. While the key's
    /// bucket has slack, a TTL's demand with margin (`size::slack_batch`: cells that expire
    /// cost nothing then, and a thin node makes about one call per TTL it is busy instead of
    /// one per request). Otherwise the largest batch this node spends within the TTL of its
    /// cells conforming, at its own rate, three deviations slow (`size::reserve_batch`).
    pub fn batch_size(&self, p: &LeaseParams) -> u32 {
        let per_ttl = self.per_ttl(p);
        let k = if self.slack {
            slack_batch(per_ttl)
        } else {
            let interval = p.ns_ceil(p.interval()) as f64;
            reserve_batch(per_ttl, per_ttl * interval / p.ttl.max(1) as f64)
        };
        (k as u32).clamp(1, p.max)
    }

    /// Whether this node asks as a calm key's node at `now` (`calm.rs`): it then reserves a
    /// TTL of its demand up to the horizon whenever it holds nothing, one call at a time.
    /// Only while a TTL of its demand fits in one batch: a node busier than that would
    /// wait on that one call every batch (`benches/load.sh`'s lease row, 50 000 requests
    /// a second on one key with `lease_max` 50, fell from 0.96 to 0.82 of local), so it
    /// keeps the refills at its low-water mark, several out at once.
    pub fn calm(&self, p: &LeaseParams, now: Nanos) -> bool {
        self.calm.is_calm(p, now) && calm_batch(self.calm.per_ttl(p)) <= f64::from(p.max)
    }

    fn count_demand(&mut self, p: &LeaseParams, cost: u32, now: Nanos) {
        let elapsed = now.saturating_sub(self.window_start);
        if elapsed >= p.target {
            let windows = (elapsed / p.target).min(64) as i32;
            // The closed window weighs 1/4; every empty window since decays the average.
            self.demand = (self.demand * (1.0 - DECAY) + f64::from(self.window) * DECAY)
                * (1.0 - DECAY).powi(windows - 1);
            self.window = 0;
            self.window_start = now - elapsed % p.target;
        }
        self.window = self.window.saturating_add(cost);
    }

    /// Drop cells whose `conform + ttl` has passed (a long cell's: its life, `batch.rs`).
    fn expire(&mut self, p: &LeaseParams, now_t: i128, t: i128) {
        let ttl = ticks(p, p.ttl);
        for b in self.batches.iter_mut() {
            let n = b.expired(now_t, ttl, t);
            if n > 0 {
                b.spend(n, t);
                self.expired += u64::from(n);
                if let Some(at) = b.granted_at {
                    let r = &mut self.returned;
                    if r.cells == 0 {
                        // A new return: its own id (a retried call is not taken twice).
                        *r = Returned {
                            cells: 0,
                            granted_at: at,
                            id: return_id(),
                        };
                    }
                    r.granted_at = r.granted_at.min(at);
                    r.cells += n;
                }
            }
        }
        self.batches.retain(|b| b.left > 0);
    }

    fn retry_after(&self, p: &LeaseParams, cost: u32, now: Nanos, now_t: i128, t: i128) -> Nanos {
        let mut need = cost;
        for b in &self.batches {
            if need <= b.left {
                let at = b.conform(need - 1, t);
                return p.ns_ceil(at - now_t).max(1) as u64;
            }
            need -= b.left;
        }
        self.blocked_until
            .saturating_sub(now)
            .max(p.ns_ceil(t).max(1) as u64)
    }
}

fn ticks(p: &LeaseParams, ns: Nanos) -> i128 {
    p.ticks(i64::try_from(ns).unwrap_or(i64::MAX))
}
