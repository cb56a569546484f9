//! The cells of one grant a node still holds (`book.rs` keeps a list of them, soonest to
//! expire first): when each conforms, and when it expires.

/// Cells of one grant still held.
#[derive(Debug, Clone, Copy)]
pub(super) struct Batch {
    /// Conform time (ticks, this node's clock) of the first cell held, before `floor`.
    origin: i128,
    /// No cell conforms before this (ticks): the moment the grant arrived. A full key's
    /// first cells conformed "in the past"; their validity still starts here.
    floor: i128,
    /// Cells held; cell `i` conforms at `max(origin + i·T, floor)`.
    pub(super) left: u32,
    /// Long cells (`hold.rs`): all expire at this tick, whenever they conformed. Ordinary
    /// cells (`None`) expire `lease_ttl` after each conforms.
    until: Option<i128>,
    /// Ticks by which an ordinary cell lives less than `lease_ttl` (returnable cells,
    /// `returns.rs`), and the coordinator's time of their grant, which names them when
    /// they are given back (`None`: not returnable).
    cut: i128,
    pub(super) granted_at: Option<u64>,
}

impl Batch {
    /// `left` ordinary cells, the last conforming at `last`, none before `floor`.
    pub(super) fn ordinary(last: i128, floor: i128, left: u32, t: i128) -> Self {
        Batch {
            origin: last - i128::from(left.saturating_sub(1)) * t,
            floor,
            left,
            until: None,
            cut: 0,
            granted_at: None,
        }
    }

    /// These cells are returnable: they live `cut` ticks less, and were granted at the
    /// coordinator's `at` (ns).
    pub(super) fn returnable(self, cut: i128, at: u64) -> Self {
        Batch {
            cut,
            granted_at: Some(at),
            ..self
        }
    }

    /// `left` long cells, all conforming at `now_t`, valid until `until`.
    pub(super) fn long(now_t: i128, left: u32, until: i128, t: i128) -> Self {
        Batch {
            until: Some(until),
            ..Batch::ordinary(now_t, now_t, left, t)
        }
    }

    /// Cells given back (`LeaseBook::give_back`): all conforming at `taken.conform`, all
    /// expiring at `taken.expires`.
    pub(super) fn given_back(taken: super::ask::Taken, left: u32, t: i128) -> Self {
        Batch {
            until: Some(taken.expires),
            ..Batch::ordinary(taken.conform, taken.conform, left, t)
        }
    }

    /// When the first cell held expires (ticks).
    pub(super) fn first_expiry(&self, ttl: i128, t: i128) -> i128 {
        self.until.unwrap_or(self.conform(0, t) + ttl - self.cut)
    }

    /// Conform time (ticks) of cell `i`.
    pub(super) fn conform(&self, i: u32, t: i128) -> i128 {
        (self.origin + i128::from(i) * t).max(self.floor)
    }

    /// Cells of this batch conforming at `now_t`.
    pub(super) fn ready(&self, now_t: i128, t: i128) -> u32 {
        if self.left == 0 || self.conform(0, t) > now_t {
            return 0;
        }
        let n = (now_t - self.origin).div_euclid(t) + 1;
        u32::try_from(n.clamp(0, i128::from(self.left))).unwrap_or(self.left)
    }

    /// Spend `n ≤ left` cells from the front.
    pub(super) fn spend(&mut self, n: u32, t: i128) {
        self.origin += i128::from(n) * t;
        self.left -= n;
    }

    /// Cells that have expired at `now_t` (dropped by the caller with [`Batch::spend`]). A
    /// cell never conforms before the batch's `floor`, so while the floor is fresh nothing
    /// has expired; after that, cell `i` has expired iff `origin + i·T + ttl < now`, which
    /// counts by one division.
    pub(super) fn expired(&self, now_t: i128, ttl: i128, t: i128) -> u32 {
        if let Some(until) = self.until {
            return if until < now_t { self.left } else { 0 };
        }
        let ttl = ttl - self.cut;
        if self.floor + ttl >= now_t {
            return 0;
        }
        let x = now_t - ttl - self.origin;
        let due = if x > 0 { (x - 1).div_euclid(t) + 1 } else { 0 };
        u32::try_from(due.clamp(0, i128::from(self.left))).unwrap_or(self.left)
    }
}
