//! Whether a leased key is *calm* (its grant rate well under its limit), as one node sees
//! it, and that node's demand over a TTL: `book.rs` asks generously while the key is calm.
//!
//! While the coordinator grants well under the key's rate, a cell that expires unspent
//! costs no admission, so a node can reserve a TTL of its own demand up to the horizon
//! whenever it holds nothing, however thin its traffic: about one call per TTL it is busy
//! instead of one per request or two. The signal is the grant rate the coordinator reports
//! with every grant (`Grant::busy`), not the bucket's level at the call: a small bucket
//! refills between calls even at the limit, and the tried "slack before the take" rule
//! lost 5 % of a small-burst trace at the limit on that (`simulate --matrix`, "small
//! burst"). At or above the limit the grant rate stays near 1 000 per mille.

use super::grant::Grant;
use super::params::LeaseParams;
use super::size::{CALM_AFTER_EMPTY_TTLS, CALM_BUSY, CALM_LEAVE_BUSY, CALM_TTLS, calm_span};
use crate::clock::Nanos;

/// One book's view of its key's calm, and its long demand.
#[derive(Debug, Clone, Default)]
pub(super) struct Calm {
    /// Whether the last answer found the key calm: its `busy` (per mille of the key's
    /// limit) under `CALM_BUSY`, or under `CALM_LEAVE_BUSY` while the answer before had
    /// found it calm (hysteresis); and when that answer arrived.
    verdict: bool,
    busy_at: Option<Nanos>,
    /// The last answer that found the key calm.
    calm_at: Option<Nanos>,
    /// The last empty answer (ns).
    empty_at: Option<Nanos>,
    /// This node's requests, decayed continuously over `size::calm_span` (a TTL at least):
    /// what calm batches are sized on. The book's `demand` windows span about four
    /// `lease_target`s (80 ms by default), too short for a node that sees a request every
    /// 100 ms: read just before its requests they said 2.6 per TTL where it sent 5.
    count: f64,
    at: Nanos,
}

impl Calm {
    /// A request of `cost` cells at `now`.
    pub(super) fn count(&mut self, p: &LeaseParams, cost: u32, now: Nanos) {
        let span = calm_span(p.ttl, p.target) as f64;
        let dt = now.saturating_sub(self.at) as f64;
        self.count = self.count * (-dt / span).exp() + f64::from(cost);
        self.at = now;
    }

    /// A grant arrived at `now`.
    pub(super) fn on_grant(&mut self, g: Grant, now: Nanos) {
        self.verdict = g.busy < CALM_BUSY || (self.verdict && g.busy < CALM_LEAVE_BUSY);
        self.busy_at = Some(now);
        if self.verdict {
            self.calm_at = Some(now);
        }
    }

    /// The last answer found the key calm (whatever the empty-answer rule says).
    pub(super) fn verdict(&self) -> bool {
        self.verdict
    }

    /// An empty answer of an uncalm key arrived at `now`.
    pub(super) fn on_empty(&mut self, now: Nanos) {
        self.empty_at = Some(now);
    }

    /// An answer of the last `CALM_AFTER_EMPTY_TTLS` TTLs found the key calm: what is
    /// reserved past this node's reach is then other nodes' demand, not an overload's.
    pub(super) fn lately(&self, p: &LeaseParams, now: Nanos) -> bool {
        self.calm_at
            .is_some_and(|a| now.saturating_sub(a) < CALM_AFTER_EMPTY_TTLS.saturating_mul(p.ttl))
    }

    /// Calm at `now`: the last answer, within `CALM_TTLS` TTLs, found the key calm (see
    /// `verdict`), and no empty answer of an uncalm key came in the last
    /// `CALM_AFTER_EMPTY_TTLS` TTLs.
    pub(super) fn is_calm(&self, p: &LeaseParams, now: Nanos) -> bool {
        let within = |at: Option<Nanos>, ttls: u64| {
            at.is_some_and(|a| now.saturating_sub(a) < ttls.saturating_mul(p.ttl))
        };
        within(self.busy_at, CALM_TTLS)
            && self.verdict
            && !within(self.empty_at, CALM_AFTER_EMPTY_TTLS)
    }

    /// Requests per TTL over the long span (the request just counted weighs half: read at
    /// arrivals, a decayed count is high by one half on average, low by one half before).
    pub(super) fn per_ttl(&self, p: &LeaseParams) -> f64 {
        let span = calm_span(p.ttl, p.target) as f64;
        (self.count - 0.5).max(0.0) * p.ttl as f64 / span
    }
}
