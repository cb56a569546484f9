//! One store call: the check script with its timeout, breaker and metrics around it.
//! `redis::Script` sends `EVALSHA` and, on `NOSCRIPT` (a restarted or flushed Redis), loads
//! the script and retries once, so a Redis restart needs nothing from us.

use std::sync::Arc;
use std::time::Instant;

use redis::Script;

use super::breaker::{Breaker, Permit};
use super::connection::Connection;
use super::metrics::StoreMetrics;
use crate::config::Store;
use crate::limit::clock::{Clock, duration_to_nanos};

/// The Lua source; see the file for the argument and reply layout.
pub const CHECK_LUA: &str = include_str!("check.lua");

/// Why a store call produced no answer. Every one of these means "decide without the store"
/// (the route's `on_store_error`), never a hung or failed request.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("store call timed out after {0:?}")]
    Timeout(std::time::Duration),
    #[error("store circuit breaker is open")]
    BreakerOpen,
    #[error("store error: {0}")]
    Redis(String),
    #[error("unexpected reply from the check script: {0}")]
    Reply(String),
}

impl StoreError {
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::Timeout(_) => "timeout",
            StoreError::BreakerOpen => "breaker_open",
            StoreError::Redis(_) => "redis",
            StoreError::Reply(_) => "reply",
        }
    }
}

/// The store as the central site uses it.
pub struct RedisStore {
    /// One multiplexed connection per worker thread: a connection's driver task runs on the
    /// runtime that first used it, so a worker using its own never wakes another thread
    /// (benches/load.sh: shared by two workers, the central row reached 0.52x the local row).
    conns: Vec<Connection>,
    script: Script,
    timeout: std::time::Duration,
    breaker: Breaker,
    clock: Arc<dyn Clock>,
    pub metrics: StoreMetrics,
}

impl RedisStore {
    pub fn new(
        store: &Store,
        clock: Arc<dyn Clock>,
        metrics: StoreMetrics,
    ) -> redis::RedisResult<Self> {
        Ok(RedisStore {
            conns: (0..std::thread::available_parallelism().map_or(1, |n| n.get()))
                .map(|_| Connection::new(store))
                .collect::<redis::RedisResult<_>>()?,
            script: Script::new(CHECK_LUA),
            timeout: store.timeout,
            breaker: Breaker::new(
                store.breaker_failures.get(),
                duration_to_nanos(store.breaker_cooldown),
            ),
            clock,
            metrics,
        })
    }

    /// Run the check script on `keys` with `args` (op first); one round trip.
    pub async fn eval(
        &self,
        op: &'static str,
        keys: &[String],
        args: &[f64],
    ) -> Result<Vec<i64>, StoreError> {
        self.eval_script(&self.script, op, keys, args).await
    }

    /// Run any of tollgate's scripts (check, lease, membership) through the same
    /// connection, timeout, breaker and metrics: `op` labels the call and is passed first.
    pub async fn eval_script<A: redis::ToRedisArgs>(
        &self,
        script: &Script,
        op: &'static str,
        keys: &[String],
        args: &[A],
    ) -> Result<Vec<i64>, StoreError> {
        if self.breaker.permit(&*self.clock) == Permit::Rejected {
            self.metrics.error(StoreError::BreakerOpen.kind());
            return Err(StoreError::BreakerOpen);
        }
        self.metrics.call(op);
        let mut invocation = script.prepare_invoke();
        for k in keys {
            invocation.key(k.as_str());
        }
        invocation.arg(op);
        for a in args {
            invocation.arg(a);
        }
        let mut conn = self.conns[worker_slot() % self.conns.len()].clone();
        let started = Instant::now();
        let result =
            tokio::time::timeout(self.timeout, invocation.invoke_async::<Vec<i64>>(&mut conn))
                .await;
        let outcome = match result {
            Ok(Ok(reply)) => {
                self.metrics.latency(started.elapsed().as_secs_f64());
                Ok(reply)
            }
            Ok(Err(e)) => Err(StoreError::Redis(e.to_string())),
            Err(_) => Err(StoreError::Timeout(self.timeout)),
        };
        match &outcome {
            Ok(_) => self.breaker.success(),
            Err(e) => {
                self.metrics.error(e.kind());
                self.breaker.failure(&*self.clock);
            }
        }
        self.metrics.breaker(self.breaker.is_open());
        outcome
    }
}

/// A small number fixed per thread: which of the store's connections this thread uses.
fn worker_slot() -> usize {
    use std::cell::Cell;
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SLOT: Cell<Option<usize>> = const { Cell::new(None) };
    }
    SLOT.with(|s| match s.get() {
        Some(slot) => slot,
        None => {
            let slot = NEXT.fetch_add(1, Ordering::Relaxed);
            s.set(Some(slot));
            slot
        }
    })
}
