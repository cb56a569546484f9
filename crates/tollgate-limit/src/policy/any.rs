//! Any of the five algorithms behind one enum, and its per-key state: what the local
//! site's tables hold and every site decides with. A child of `policy.rs`.
//!
//! One enum rather than trait objects so every policy's per-key state fits the same map
//! value type: that lets one sharded store hold all policies and lock a request's keys
//! together (see `local.rs`).

use std::num::NonZeroU32;

use crate::algorithm::{
    Algorithm, Concurrency, ConcurrencyState, Gcra, GcraState, KeyDecision, LeakyBucket,
    LeakyBucketState, QuotaError, QuotaInfo, SlidingWindow, SlidingWindowState, Snapshot,
    TokenBucket, TokenBucketState, Verdict,
};
use crate::clock::Nanos;
use crate::spec::{AlgorithmName, Policy};

/// Any of the five algorithms (small and `Copy`: the L/N split swaps whole sets of them
/// when membership changes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnyAlgorithm {
    Gcra(Gcra),
    TokenBucket(TokenBucket),
    SlidingWindow(SlidingWindow),
    LeakyBucket(LeakyBucket),
    Concurrency(Concurrency),
}

/// The per-key state of any algorithm; a key's variant always matches its policy's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AnyState {
    Gcra(GcraState),
    TokenBucket(TokenBucketState),
    SlidingWindow(SlidingWindowState),
    LeakyBucket(LeakyBucketState),
    Concurrency(ConcurrencyState),
}

macro_rules! dispatch {
    ($self:ident, $state:ident, |$alg:ident, $s:ident| $body:expr, |$alg2:ident| $fresh:expr) => {
        match ($self, $state) {
            (AnyAlgorithm::Gcra($alg), Some(AnyState::Gcra($s))) => $body,
            (AnyAlgorithm::TokenBucket($alg), Some(AnyState::TokenBucket($s))) => $body,
            (AnyAlgorithm::SlidingWindow($alg), Some(AnyState::SlidingWindow($s))) => $body,
            (AnyAlgorithm::LeakyBucket($alg), Some(AnyState::LeakyBucket($s))) => $body,
            (AnyAlgorithm::Concurrency($alg), Some(AnyState::Concurrency($s))) => $body,
            // Absent key (or, impossibly, a state of another algorithm): a fresh key.
            (AnyAlgorithm::Gcra($alg2), _) => $fresh,
            (AnyAlgorithm::TokenBucket($alg2), _) => $fresh,
            (AnyAlgorithm::SlidingWindow($alg2), _) => $fresh,
            (AnyAlgorithm::LeakyBucket($alg2), _) => $fresh,
            (AnyAlgorithm::Concurrency($alg2), _) => $fresh,
        }
    };
}

/// Wrap a typed decision's state into [`AnyState`].
fn wrap<S>(d: KeyDecision<S>, f: impl FnOnce(S) -> AnyState) -> KeyDecision<AnyState> {
    KeyDecision {
        verdict: d.verdict,
        state: f(d.state),
        remaining: d.remaining,
        reset_after: d.reset_after,
        next_after: d.next_after,
    }
}

trait IntoAny: Copy {
    fn any(self) -> AnyState;
}
impl IntoAny for GcraState {
    fn any(self) -> AnyState {
        AnyState::Gcra(self)
    }
}
impl IntoAny for TokenBucketState {
    fn any(self) -> AnyState {
        AnyState::TokenBucket(self)
    }
}
impl IntoAny for SlidingWindowState {
    fn any(self) -> AnyState {
        AnyState::SlidingWindow(self)
    }
}
impl IntoAny for LeakyBucketState {
    fn any(self) -> AnyState {
        AnyState::LeakyBucket(self)
    }
}
impl IntoAny for ConcurrencyState {
    fn any(self) -> AnyState {
        AnyState::Concurrency(self)
    }
}

impl AnyAlgorithm {
    /// Build the algorithm of `p`, with limit and burst multiplied by `headroom`.
    pub fn new(p: &Policy, headroom: NonZeroU32) -> Result<Self, QuotaError> {
        let limit = p.limit.saturating_mul(headroom);
        let burst = p.burst.saturating_mul(headroom);
        Ok(match p.algorithm {
            AlgorithmName::Gcra => AnyAlgorithm::Gcra(Gcra::new(limit, p.period, burst)?),
            AlgorithmName::TokenBucket => {
                AnyAlgorithm::TokenBucket(TokenBucket::new(limit, p.period, burst)?)
            }
            AlgorithmName::SlidingWindow => {
                AnyAlgorithm::SlidingWindow(SlidingWindow::new(limit, p.period)?)
            }
            AlgorithmName::LeakyBucket => {
                AnyAlgorithm::LeakyBucket(LeakyBucket::new(limit, p.period, p.max_delay)?)
            }
            AlgorithmName::Concurrency => AnyAlgorithm::Concurrency(Concurrency::new(limit)),
        })
    }

    pub fn decide(&self, state: Option<AnyState>, cost: u32, now: Nanos) -> KeyDecision<AnyState> {
        dispatch!(
            self,
            state,
            |a, s| wrap(a.decide(Some(s), cost, now), IntoAny::any),
            |a| wrap(a.decide(None, cost, now), IntoAny::any)
        )
    }

    /// The verdict and state of [`AnyAlgorithm::decide`] without the header figures (see
    /// [`Algorithm::admit`]).
    #[inline]
    pub fn admit(&self, state: Option<AnyState>, cost: u32, now: Nanos) -> (Verdict, AnyState) {
        dispatch!(
            self,
            state,
            |a, s| {
                let (v, s) = a.admit(Some(s), cost, now);
                (v, s.any())
            },
            |a| {
                let (v, s) = a.admit(None, cost, now);
                (v, s.any())
            }
        )
    }

    #[inline]
    pub fn peek(&self, state: Option<AnyState>, now: Nanos) -> Snapshot {
        dispatch!(self, state, |a, s| a.peek(Some(s), now), |a| a
            .peek(None, now))
    }

    /// True when the state may be dropped without changing any decision.
    #[inline]
    pub fn is_idle(&self, state: &AnyState, now: Nanos) -> bool {
        let state = Some(*state);
        dispatch!(self, state, |a, s| a.is_idle(&s, now), |_a| true)
    }

    /// Spend `cost` cells spent elsewhere, conforming or not (see `Algorithm::debit`).
    pub fn debit(&self, state: Option<AnyState>, cost: u32, now: Nanos) -> AnyState {
        dispatch!(self, state, |a, s| a.debit(Some(s), cost, now).any(), |a| a
            .debit(None, cost, now)
            .any())
    }

    /// Give back `cost` cells spent earlier (see `Algorithm::refund`); an absent key is full.
    pub fn refund(&self, state: Option<AnyState>, cost: u32, now: Nanos) -> Option<AnyState> {
        state.map(|st| {
            let state = Some(st);
            dispatch!(self, state, |a, s| a.refund(s, cost, now).any(), |_a| st)
        })
    }

    /// Concurrency: give back `cost` cells; other algorithms return the state unchanged.
    pub fn release(&self, state: AnyState, cost: u32) -> AnyState {
        match (self, state) {
            (AnyAlgorithm::Concurrency(a), AnyState::Concurrency(s)) => a.release(s, cost).any(),
            _ => state,
        }
    }

    pub fn quota(&self) -> QuotaInfo {
        match self {
            AnyAlgorithm::Gcra(a) => a.quota(),
            AnyAlgorithm::TokenBucket(a) => a.quota(),
            AnyAlgorithm::SlidingWindow(a) => a.quota(),
            AnyAlgorithm::LeakyBucket(a) => a.quota(),
            AnyAlgorithm::Concurrency(a) => a.quota(),
        }
    }

    pub fn is_concurrency(&self) -> bool {
        matches!(self, AnyAlgorithm::Concurrency(_))
    }

    pub fn is_sliding_window(&self) -> bool {
        matches!(self, AnyAlgorithm::SlidingWindow(_))
    }
}
