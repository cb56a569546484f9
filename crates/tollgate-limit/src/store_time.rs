//! How long one limit check waited on the store and on peers: the limit step's span
//! reports it (`store_time_us`), so a trace shows whether a slow request waited on Redis.
//!
//! A task-local rather than a field threaded through every site: the limit step's waits
//! on a remote answer (a lease take, a central check, whether its own call or a batch it
//! rides in, an owner's answer, a gossip pull) are `timed`, only a traced request
//! measures (`measured`), and a wait outside a measured check (an untraced request, a
//! lease refill in the background) reads no clock.

use std::cell::Cell;
use std::future::Future;
use std::time::{Duration, Instant};

tokio::task_local! {
    /// Nanoseconds spent in store and peer calls by the check being measured.
    static SPENT: Cell<u64>;
}

/// Run a check and say how long it waited on the store and on peers.
pub async fn measured<F: Future>(check: F) -> (F::Output, Duration) {
    SPENT
        .scope(Cell::new(0), async move {
            let out = check.await;
            (out, Duration::from_nanos(SPENT.with(Cell::get)))
        })
        .await
}

/// Await `wait` (an answer from the store or a peer), counting its time to the check
/// being measured, if any.
pub(crate) async fn timed<F: Future>(wait: F) -> F::Output {
    if SPENT.try_with(|_| ()).is_err() {
        return wait.await;
    }
    let started = Instant::now();
    let out = wait.await;
    add(started.elapsed());
    out
}

fn add(took: Duration) {
    let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
    let _ = SPENT.try_with(|c| c.set(c.get().saturating_add(nanos)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn counts_only_inside_a_measured_check() {
        add(Duration::from_millis(5)); // outside: lost, no panic
        assert_eq!(timed(async { 7 }).await, 7);
        let ((), spent) = measured(async {
            add(Duration::from_micros(30));
            add(Duration::from_micros(12));
        })
        .await;
        assert_eq!(spent, Duration::from_micros(42));
        let (n, waited) = measured(timed(async {
            tokio::task::yield_now().await;
            3
        }))
        .await;
        assert!(n == 3 && waited > Duration::ZERO, "{waited:?}");
        let ((), none) = measured(async {}).await;
        assert_eq!(none, Duration::ZERO);
    }
}
