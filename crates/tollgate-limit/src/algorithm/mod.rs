//! Per-key admission algorithms: the innermost decision of the limit step.
//!
//! Each algorithm is a pure function of (state, cost, now). The store layer
//! owns the per-key state, the locking and the eviction; it calls
//! [`Algorithm::decide`] for every policy of a request and commits the returned
//! states only when all of them admit, so a request denied by one policy never
//! spends another policy's budget.
//!
//! Shared conventions:
//! - a cost of 0 is always admitted and spends nothing, so callers can ask for
//!   headers without special-casing;
//! - a request that can never be admitted (cost above the burst or limit) is
//!   denied with `retry_after == NEVER`, because any finite hint would make a
//!   well-behaved client retry forever;
//! - a `now` earlier than the one a state was last updated at (two threads
//!   reading the clock, then locking in the other order) is treated as the
//!   state's own time, which can only under-admit.

use std::time::Duration;

pub use crate::clock::Nanos;

mod concurrency;
mod gcra;
mod leaky_bucket;
mod rate;
mod sliding_window;
mod token_bucket;

pub use concurrency::{CONCURRENCY_RETRY_HINT, Concurrency, ConcurrencyState};
pub use gcra::{Gcra, GcraState};
pub use leaky_bucket::{LeakyBucket, LeakyBucketState};
pub use rate::Rate;
pub use sliding_window::{SlidingWindow, SlidingWindowState};
pub use token_bucket::{TokenBucket, TokenBucketState};

/// `retry_after` of a request that no amount of waiting will admit.
///
/// Callers that add it to a timestamp must saturate; the response layer should
/// omit `Retry-After` (or answer with something other than 429) for it.
pub const NEVER: Nanos = Nanos::MAX;

/// The contract every rate-limiting algorithm fulfils.
///
/// `Send + Sync + Debug + 'static` so policies can live in a shared, reloadable
/// configuration and show up in diagnostics.
pub trait Algorithm: Send + Sync + std::fmt::Debug + 'static {
    /// Per-key state; small and Copy. An absent key means a "full" (fresh) state.
    type State: Copy + Send + Sync + std::fmt::Debug + PartialEq + 'static;

    /// Decide one request of `cost` cells at `now` against `state` (None = fresh key).
    /// Pure: the caller commits `KeyDecision::state` only if every policy of the request allows.
    fn decide(&self, state: Option<Self::State>, cost: u32, now: Nanos)
    -> KeyDecision<Self::State>;

    /// [`Algorithm::decide`]'s verdict and state alone. A decision's header figures are
    /// `peek(Some(state), now)` (`tests/limits/prop_decide_peek.rs`), so the local site decides
    /// with this under its shard lock and computes them after releasing it; an algorithm
    /// overrides it where the figures cost more than the decision (GCRA's division).
    fn admit(&self, state: Option<Self::State>, cost: u32, now: Nanos) -> (Verdict, Self::State) {
        let d = self.decide(state, cost, now);
        (d.verdict, d.state)
    }

    /// Remaining / reset without spending (for response headers on requests that skip a policy etc.).
    fn peek(&self, state: Option<Self::State>, now: Nanos) -> Snapshot;

    /// True when `state` at `now` is equivalent to an absent key (bucket full again),
    /// so the store may drop it without changing any future decision.
    fn is_idle(&self, state: &Self::State, now: Nanos) -> bool;

    /// Concurrency only: give back `cost` cells when the request ends. Others return `state` unchanged.
    fn release(&self, state: Self::State, cost: u32) -> Self::State {
        let _ = cost;
        state
    }

    /// Spend `cost` cells at `now` whether or not they conform: cells another node already
    /// admitted (gossip). The state may go past empty; it then denies until it has drained.
    /// Only the rate algorithms (gcra, token bucket, sliding window) carry a debt; `check`
    /// refuses the peer sites for the others, whose default spends only what conforms.
    fn debit(&self, state: Option<Self::State>, cost: u32, now: Nanos) -> Self::State {
        self.decide(state, cost, now).state
    }

    /// Give back `cost` cells spent earlier (an owner's reservation whose request ended
    /// denied); never fuller than full. The default (concurrency) releases.
    fn refund(&self, state: Self::State, cost: u32, now: Nanos) -> Self::State {
        let _ = now;
        self.release(state, cost)
    }

    /// The policy's advertised limit `q` and window `w` (for RateLimit-Policy).
    fn quota(&self) -> QuotaInfo;
}

/// What [`Algorithm::decide`] says of one key: its verdict and the state to keep. One key's,
/// where the request's (every policy's keys together) is the access log's [`crate::Decision`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyDecision<S> {
    /// Whether (and how) the request may proceed.
    pub verdict: Verdict,
    /// The state to store if the whole request is admitted. On a deny it is
    /// the input state brought up to `now` (equivalent to the input), so
    /// storing it anyway is harmless.
    pub state: S,
    /// How many more cost-1 requests would be admitted right now after this
    /// decision (the `r` of the RateLimit header).
    pub remaining: u64,
    /// Nanoseconds until the state is back to full; 0 when it already is.
    pub reset_after: Nanos,
    /// Nanoseconds until `remaining` grows by one (the `t` of the RateLimit header on an
    /// allowed response: the draft's "until additional quota is made available"); 0 when
    /// the state is full or nothing refills with time (concurrency).
    pub next_after: Nanos,
}

/// Whether a request may proceed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Forward now.
    Allow,
    /// Leaky bucket only: admitted (its slot is reserved), but hold the request
    /// this many nanoseconds before forwarding so the upstream sees a smooth rate.
    Delay(Nanos),
    /// Reject (429).
    Deny {
        /// Nanoseconds from `now` until this same request would be admitted if
        /// nothing else is spent meanwhile; always > 0, [`NEVER`] if impossible.
        retry_after: Nanos,
    },
}

impl Verdict {
    /// True for `Allow` and `Delay`: the request's cells were spent.
    pub fn admits(&self) -> bool {
        !matches!(self, Verdict::Deny { .. })
    }
}

/// A read-only view of a key, for headers on requests that did not spend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    /// As [`KeyDecision::remaining`].
    pub remaining: u64,
    /// As [`KeyDecision::reset_after`].
    pub reset_after: Nanos,
    /// As [`KeyDecision::next_after`].
    pub next_after: Nanos,
}

/// What a policy advertises in `RateLimit-Policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaInfo {
    /// The quota `q`: cells per period.
    pub limit: u64,
    /// The window `w`; zero for concurrency limits, which have no window.
    pub period: Duration,
}

/// Why an algorithm could not be built from a quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum QuotaError {
    /// Below [`crate::spec::MIN_PERIOD`] the rate is meaningless next to request latency
    /// and clock resolution, and is almost certainly a unit mistake.
    #[error("period {0:?} is shorter than the minimum of 1ms")]
    PeriodTooShort(Duration),
    /// Above [`crate::spec::MAX_PERIOD`] timestamps could approach `u64` overflow.
    #[error("period {0:?} is longer than the maximum of 10 years")]
    PeriodTooLong(Duration),
    /// Same reason as `PeriodTooLong`, for the leaky bucket's queue delay.
    #[error("max delay {0:?} is longer than the maximum of 10 years")]
    DelayTooLong(Duration),
}
