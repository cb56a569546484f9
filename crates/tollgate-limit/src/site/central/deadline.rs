//! A request's one deadline on the store (README: "no request waits longer than the
//! timeout on the store"). A central request may make more than one store call in turn —
//! the debit of what its keys owe the fallback (`store/debts.rs`), then its check — and may
//! have waited on a lease refill before; each call has its own full `[store] timeout`, so
//! that the breakers see the store's own latency. The request, though, waits for them only
//! until the deadline it took when it first reached the store (`Check::store_deadline`):
//! past it, `Timeout`, and the route's `on_store_error` decides. A call still out then
//! goes on without it, and what it spent for nobody is given back by whoever answers.

use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::CentralSite;
use crate::store::StoreError;

/// Finer than this, tokio's timers do not tell two deadlines apart (their resolution).
const TICK: Duration = Duration::from_millis(1);

impl CentralSite {
    /// Whether a call sent now, with its own full store timeout, could end later than
    /// `deadline` (by more than a timer tick): the request spent part of its time on the
    /// store before (a debit, a lease refill), so it needs a timer of its own.
    pub(super) fn outlasts(&self, deadline: Instant) -> bool {
        deadline + TICK < Instant::now() + self.store.timeout()
    }

    /// A request's answer at its deadline: as if its own call had timed out.
    pub(super) fn timed_out(&self) -> StoreError {
        StoreError::Timeout(self.store.timeout())
    }

    /// The answer `rx` brings (from a driver or a task that outlives the request), or
    /// `Timeout` at `deadline`. Closed then, so an answer that comes later bounces back to
    /// its sender (`send` fails), which gives back what nobody holds; one already there is
    /// taken.
    pub(super) async fn answer_by<T>(
        &self,
        mut rx: oneshot::Receiver<Result<T, StoreError>>,
        deadline: Instant,
        what: &str,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout_at(deadline, &mut rx).await {
            Ok(Ok(answer)) => answer,
            // Never dropped unanswered; if it ever were, fail like a call.
            Ok(Err(_)) => Err(StoreError::Redis(format!("{what} dropped"))),
            Err(_) => {
                rx.close();
                rx.try_recv().unwrap_or_else(|_| Err(self.timed_out()))
            }
        }
    }
}
