//! The store every shared decision goes through (Redis, or a Redis Cluster): its
//! connections, circuit breakers and metrics, used by the central site, the lease site and
//! membership alike. Each of them brings its own script and runs it through
//! [`RedisStore::eval_script`].
//!
//! - `call.rs`: one script call, written into its command before it is sent;
//! - `connection.rs`: one multiplexed, auto-reconnecting connection (one per worker);
//! - `breaker.rs`: the circuit breaker, one per store node;
//! - `slot.rs`: Redis Cluster slots (which keys one script call may touch);
//! - `debts.rs`: what the `on_store_error = "local"` fallback owes the store, paid before
//!   any site decides in it again (`installments.rs`: paid in installments, with
//!   `fallback_repay = "half_rate"`);
//! - `metrics.rs`: `tollgate_store_*`.
//!
//! One store call is a script with its timeout, breaker and metrics around it (`call.rs`
//! writes it): `EVALSHA`, and on `NOSCRIPT` (a restarted or flushed Redis) the script is
//! loaded and the call sent once more, so a Redis restart needs nothing from us.
//!
//! Recovery does not wait for traffic: while the breaker is open, each worker that saw it
//! open pings the store on its own connection (every [`PING_EVERY`], with the store
//! timeout). The ping makes the connection reconnect in the background, and its first
//! answer closes the breaker, so decisions resume within a ping period or two of the
//! store's return instead of after a cooldown and a probe that lands on a dead socket.
//!
//! Only a store that did not answer counts against a breaker: an error reply about one call
//! (a script error on a bad value) is `Reply`, and a call that found its connection dropped
//! waits for the reconnect and tries once more within the same timeout. On a Redis Cluster
//! each master has its own breaker (see `Breakers`).

mod breaker;
mod call;
mod connection;
mod debts;
mod installments;
pub(crate) mod metrics;
mod repeat;
mod sentinel;
mod slot;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use redis::Script;
use tokio::time::timeout_at;

pub use debts::Debt;
pub use slot::slot;
pub(crate) use slot::{by_slot, slot_tag};

use breaker::{Breaker, Breakers};
pub use call::ScriptCall;
use call::{answered, reconnecting};
pub use connection::bind_worker;
use connection::{Connection, conn_of_thread};
use debts::Debts;
use metrics::StoreMetrics;

use crate::clock::{Clock, duration_to_nanos};
use crate::spec::{Store, StoreKind};

/// How often a worker pings the store while the breaker is open: well inside the 1 s the
/// README promises for resuming decisions.
const PING_EVERY: Duration = Duration::from_millis(100);
/// The deadline of calls no request waits on (undos), when `[store] timeout` is shorter; also the connections' own response timeout, so that a call queued behind a
/// stalled one is still written (an undo must follow the call it undoes). Requests are held
/// to `[store] timeout` by `invoke`, whatever the connection waits.
pub(super) const BACKGROUND_TIMEOUT: Duration = Duration::from_secs(2);

/// The least time a connect may take (a store timeout of 10 ms is too short for a TLS
/// handshake): reconnects, and the warm-up before the first request.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_millis(250);

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
    /// The store answered, but not with a decision (a script error on a bad value, a reply
    /// of the wrong shape): this request falls back, the breaker is not touched.
    #[error("unexpected reply from the check script: {0}")]
    Reply(String),
    /// A key still owes what the `on_store_error = "local"` fallback admitted (a payment
    /// is under way): it is not decided in the store until the store has counted that.
    #[error("fallback admissions not yet debited to the store")]
    Unsettled,
}

impl StoreError {
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::Timeout(_) => "timeout",
            StoreError::BreakerOpen => "breaker_open",
            StoreError::Redis(_) => "redis",
            StoreError::Reply(_) => "reply",
            StoreError::Unsettled => "unsettled",
        }
    }
}

/// What the background pings need; shared with them through a `Weak`, so a dropped store
/// stops its pings.
struct Shared {
    /// One multiplexed connection per worker thread: a connection's driver task runs on the
    /// runtime that first used it, so a worker using its own never wakes another thread
    /// (benches/load.sh: shared by two workers, the central row reached 0.52x the local row),
    /// and one more for every thread that is not a worker (`connection::conn_of_thread`).
    conns: Vec<Connection>,
    timeout: Duration,
    /// One per store node (see `Breakers`).
    breakers: Breakers,
    /// A Redis Cluster: breakers per master, once its slot map is learned.
    cluster: bool,
    /// A `CLUSTER SLOTS` read is under way.
    learning: AtomicBool,
    metrics: StoreMetrics,
}

/// The store as the sites use it.
pub struct RedisStore {
    shared: Arc<Shared>,
    clock: Arc<dyn Clock>,
    /// Prepended to every key.
    prefix: String,
    /// What the fallback admitted, owed to the store (see `debts.rs`).
    debts: Debts,
    pub metrics: StoreMetrics,
}

impl RedisStore {
    /// The store of `[store]`; nothing is dialled yet. `debit` is the script whose `debit`
    /// op pays the fallback's debts (the central site's check script, which keeps every
    /// key's algorithm state).
    pub fn new(
        store: &Store,
        clock: Arc<dyn Clock>,
        metrics: StoreMetrics,
        debit: Script,
    ) -> redis::RedisResult<Self> {
        // One per worker thread, and one more for every other thread (see `conn_of_thread`).
        let conns: Vec<Connection> = (0..=std::thread::available_parallelism()
            .map_or(1, |n| n.get()))
            .map(|_| Connection::new(store))
            .collect::<redis::RedisResult<_>>()?;
        let shared = Shared {
            breakers: Breakers::new(
                store.breaker_failures.get(),
                duration_to_nanos(store.breaker_cooldown),
                conns.len(),
            ),
            conns,
            timeout: store.timeout,
            cluster: store.kind == StoreKind::RedisCluster,
            learning: AtomicBool::new(false),
            metrics: metrics.clone(),
        };
        Ok(RedisStore {
            shared: Arc::new(shared),
            clock,
            prefix: store.key_prefix.clone(),
            debts: Debts::new(debit, store.fallback_repay),
            metrics,
        })
    }

    /// The store's key for `key`: with the `[store] key_prefix`.
    pub fn key(&self, key: &str) -> String {
        // One allocation of the right size: `format!` grew its string and went through the
        // formatter, ~800 instructions a central request.
        let mut full = String::with_capacity(self.prefix.len() + key.len());
        full.push_str(&self.prefix);
        full.push_str(key);
        full
    }

    /// Whether this is a Redis Cluster (a script call may only touch one slot).
    pub fn is_cluster(&self) -> bool {
        self.shared.cluster
    }

    /// Which connection this thread's calls use (the central site batches per connection).
    pub fn conn_slot(&self) -> usize {
        conn_of_thread(self.shared.conns.len())
    }

    /// Connections to the store.
    pub fn conn_count(&self) -> usize {
        self.shared.conns.len()
    }

    /// `[store] timeout`: the longest a request waits on the store.
    pub fn timeout(&self) -> std::time::Duration {
        self.shared.timeout
    }

    /// `[store] key_prefix`: in front of every key.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// How long after a call first ran it may still run again: a refund's marker lives this
    /// long (`central/refund.rs`); `repeat.rs` says why this long.
    pub fn repeat_window(&self) -> Duration {
        repeat::repeat_window(self.shared.timeout)
    }

    /// Run any of tollgate's scripts (check, lease, membership) through the same
    /// connection, timeout, breaker and metrics: `op` labels the call and is passed first.
    /// On a cluster, every key of one call is in one slot (the caller groups them).
    /// Cancel-safe: dropping the future mid-call leaves the breaker consistent.
    pub async fn eval_script<K: AsRef<str>, A: redis::ToRedisArgs>(
        &self,
        script: &Script,
        op: &'static str,
        keys: &[K],
        args: &[A],
    ) -> Result<Vec<i64>, StoreError> {
        self.run(self.script_call(script, op, keys, args)).await
    }

    /// [`Self::eval_script`] for a reply that is not only integers (membership's peer
    /// addresses), through the same timeout, breaker and metrics. The reply is left raw: a
    /// reply the caller cannot read is its `StoreError::Reply`, where a typed read that
    /// fails is a parse error, which the breaker counts as the store failing.
    pub async fn eval_script_value<K: AsRef<str>, A: redis::ToRedisArgs>(
        &self,
        script: &Script,
        op: &'static str,
        keys: &[K],
        args: &[A],
    ) -> Result<redis::Value, StoreError> {
        self.run(self.script_call(script, op, keys, args)).await
    }

    /// `script` on `keys` with `op` and `args`, written into its command now: the call then
    /// borrows nothing of them (`central/batch.rs` answers its waiters while it is out).
    pub fn script_call<'s, K: AsRef<str>, A: redis::ToRedisArgs>(
        &self,
        script: &'s Script,
        op: &'static str,
        keys: &[K],
        args: &[A],
    ) -> ScriptCall<'s> {
        ScriptCall::new(self.shared.cluster, script, op, keys, args)
    }

    /// Dial this thread's connection and give the store `scripts`, within `within`, before
    /// traffic: connections are made on first use, and a first request that waited for
    /// the dial (and a `NOSCRIPT` round) within the store timeout was refused (503) on a
    /// healthy store. Outside the breaker and the metrics: a store that is down at start
    /// is one warning here and, for requests, the usual store errors.
    pub async fn warm(&self, scripts: &[Script], within: Duration) -> Result<(), StoreError> {
        let s = &*self.shared;
        let mut conn = s.conns[conn_of_thread(s.conns.len())].clone();
        let key = self.key("warm");
        let work = async {
            conn.ping(&key).await?;
            for script in scripts {
                script.prepare_invoke().load_async(&mut conn).await?;
            }
            Ok::<(), redis::RedisError>(())
        };
        match tokio::time::timeout(within, work).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(StoreError::Redis(e.to_string())),
            Err(_) => Err(StoreError::Timeout(within)),
        }
    }

    /// Send `call` through this thread's connection, its breaker, timeout and metrics, and
    /// read its reply as `T` (see [`Self::eval_script`]).
    pub async fn run<T: redis::FromRedisValue>(
        &self,
        call: ScriptCall<'_>,
    ) -> Result<T, StoreError> {
        let s = &*self.shared;
        let conn = conn_of_thread(s.conns.len());
        let (key, op) = (call.route_key.as_str(), call.op);
        let breaker = s.breakers.for_slot(call.slot);
        let Some(ticket) = breaker.permit(&*self.clock) else {
            self.metrics.error(StoreError::BreakerOpen.kind());
            self.ping_until_answered(&breaker, conn, key);
            if s.cluster && !s.breakers.learned() {
                // Without the slot map one master down stops them all: keep asking.
                self.learn_nodes(conn);
            }
            return Err(StoreError::BreakerOpen);
        };
        self.metrics.call(op);
        // Undos run in their own tasks, no request waits on them: give them time. (A
        // debit may be on a request's path: it keeps the store timeout, and one that timed
        // out counts as paid, see `debts.rs`.)
        let timeout = match op {
            "refund" | "release" | "refund_if" => s.timeout.max(BACKGROUND_TIMEOUT),
            _ => s.timeout,
        };
        // A refund is never sent again by this store: its marker makes a second run give
        // nothing only while the marker lives, and nothing bounds when a resend reaches
        // Redis (a segment retransmitted late, a paused Redis); a lost refund only
        // under-admits. (A Redis Cluster client resends on its own: `central/refund.rs`.)
        // Nor is a reset (the admin API's): a late second run would erase what was spent
        // between the two.
        let may_repeat = !matches!(op, "refund" | "reset");
        let outcome = self.invoke(&call, conn, may_repeat, timeout).await;
        if let Err(e) = &outcome {
            self.metrics.error(e.kind());
        }
        match &outcome {
            Ok(_) | Err(StoreError::Reply(_)) => ticket.success(),
            Err(_) => {
                if ticket.failure(&*self.clock) {
                    self.learn_nodes(conn);
                }
            }
        }
        if breaker.is_open() {
            self.ping_until_answered(&breaker, conn, key);
        } else if s.cluster && outcome.is_ok() && !s.breakers.learned() {
            self.learn_nodes(conn);
        }
        self.metrics.breaker(s.breakers.any_open());
        outcome
    }

    /// One call with the store timeout; a script error reply is `Reply`. A call that meets
    /// a dropped connection is sent again if `may_repeat`, though the first may have run:
    /// a release removes slots it names, a receipt's undo deletes the receipt, a lease
    /// call's returns carry an id taken once (`lease/returns.rs`), a concurrency check
    /// counts its own slot as its own (`check.lua`); anything else run twice only spends
    /// twice, which can under-admit, never over-admit.
    async fn invoke<T: redis::FromRedisValue>(
        &self,
        call: &ScriptCall<'_>,
        conn: usize,
        may_repeat: bool,
        timeout: Duration,
    ) -> Result<T, StoreError> {
        let s = &*self.shared;
        let mut conn = s.conns[conn].clone();
        let started = Instant::now();
        let deadline = tokio::time::Instant::from_std(started + timeout);
        let mut result = timeout_at(deadline, call.send(&mut conn)).await;
        if let Ok(Err(e)) = &result
            && may_repeat
            && reconnecting(e)
        {
            // The call met a dropped connection and set off its reconnect: that says
            // nothing about the store yet, so wait for the new connection and try again.
            result = timeout_at(deadline, call.send(&mut conn)).await;
        }
        match result {
            Ok(Ok(reply)) => {
                self.metrics.latency(started.elapsed().as_secs_f64());
                Ok(reply)
            }
            Ok(Err(e)) if answered(&e) => Err(StoreError::Reply(e.to_string())),
            Ok(Err(e)) => Err(StoreError::Redis(e.to_string())),
            Err(_) => Err(StoreError::Timeout(timeout)),
        }
    }

    /// Start pinging, on connection `conn` and this worker's runtime, the node behind
    /// `breaker` (through `key`, which it owns), unless that ping already runs.
    fn ping_until_answered(&self, breaker: &Arc<Breaker>, conn: usize, key: &str) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if breaker.pinging[conn].swap(true, Ordering::AcqRel) {
            return;
        }
        let (shared, breaker) = (Arc::downgrade(&self.shared), breaker.clone());
        runtime.spawn(ping_loop(shared, breaker, conn, key.to_string()));
    }

    /// On a cluster, (re-)read which master owns which slots: at the first answer, and
    /// whenever a breaker opens (a failover moves slots).
    fn learn_nodes(&self, conn: usize) {
        let s = &self.shared;
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if !s.cluster || s.learning.swap(true, Ordering::AcqRel) {
            return;
        }
        let shared = self.shared.clone();
        runtime.spawn(async move {
            let mut c = shared.conns[conn].clone();
            if let Ok(Ok(ranges)) = tokio::time::timeout(shared.timeout, c.cluster_slots()).await
                && !ranges.is_empty()
            {
                shared.breakers.learn(&ranges);
            }
            shared.learning.store(false, Ordering::Release);
        });
    }
}

/// Ping until the node answers on connection `conn`, then close `breaker`. It runs until
/// its own connection answers (not just until the breaker closes), so that every worker
/// that was serving during the outage has a live connection again when traffic returns.
async fn ping_loop(shared: Weak<Shared>, breaker: Arc<Breaker>, conn: usize, key: String) {
    loop {
        tokio::time::sleep(PING_EVERY).await;
        let Some(s) = shared.upgrade() else { return };
        let mut c = s.conns[conn].clone();
        if let Ok(Ok(())) = tokio::time::timeout(s.timeout, c.ping(&key)).await {
            breaker.success();
            s.metrics.breaker(s.breakers.any_open());
            breaker.pinging[conn].store(false, Ordering::Release);
            return;
        }
    }
}
