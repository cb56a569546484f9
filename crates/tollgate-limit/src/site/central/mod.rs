//! The `central` decision site: every gateway decides in one shared store (Redis), exactly,
//! with one script call per request carrying all of the request's central keys — or, for
//! requests that queue behind a call in flight, one call for all of them (`batch.rs`).
//!
//! On a Redis Cluster the keys of one request may live in different slots, and a script can
//! only touch one slot. Keys are then grouped by slot and each group is **reserved** by its
//! own script call (all in parallel); if the request turns out denied anywhere, every group
//! that spent is **refunded**. While a reservation stands, other requests may see a little
//! less budget (never more), so the protocol can only under-admit, briefly; a request denied
//! anywhere ends with every key as it was (up to the refund's exactness: GCRA and leaky
//! bucket move the arrival time back by the spent cells, token bucket adds the tokens back,
//! sliding window subtracts from the window it counted in, concurrency removes its slot).
//! A refund gives back once however often the store runs it (`refund.rs`).
//!
//! The calls go through the shared store (`limit/store/`: connections, breakers, metrics,
//! and the fallback's debts, paid before every check), the debit and the check within the
//! request's one deadline on the store (`deadline.rs`).

mod batch;
pub(crate) mod check;
mod cluster;
mod deadline;
mod empty;
mod refund;
mod wire;

use std::sync::Arc;

use futures_util::future::join_all;
use tokio::time::Instant;

pub(crate) use check::CentralStep;
use cluster::by_slot;
use wire::{ARGS, ScriptArg, decode};

use crate::clock::Nanos;
use crate::spec::{AlgorithmName, Mode, Policy};
use crate::store::metrics::StoreMetrics;
use crate::store::{Debt, RedisStore, ScriptCall, StoreError};

/// The Lua source; see the file for the argument and reply layout.
pub const CHECK_LUA: &str = include_str!("check.lua");

/// How long a central concurrency slot is held when its gateway never releases it (a crash).
pub const CONCURRENCY_HOLD: std::time::Duration = std::time::Duration::from_secs(300);

/// One central key of one request, ready for the script.
#[derive(Debug, Clone)]
pub struct CentralItem {
    /// Full Redis key (prefixed; concurrency keys end in [`SLOTS_SUFFIX`]).
    pub key: String,
    /// The script's 7 numbers: algorithm, limit, period_us (concurrency: the hold),
    /// burst, cost, max_delay_us, mode.
    pub params: [f64; 7],
    /// Concurrency: this acquisition's id, unique across the fleet, so that its release
    /// removes exactly its own slot; "-" for the other algorithms.
    pub slot: Arc<str>,
}

/// Appended to a concurrency key: its value is a sorted set, which an older gateway's
/// script (or another algorithm's) must never `GET` after a policy changes algorithm.
pub const SLOTS_SUFFIX: &str = ":slots";

impl CentralItem {
    /// `policy`'s parameters at `headroom`, spending `cost`, in `mode`. The headroom of
    /// shared addresses applies only to ip-keyed policies, as on the local site: an account
    /// behind a CGNAT address is still one account.
    pub fn new(key: String, policy: &Policy, headroom: u32, cost: u32, mode: Mode) -> Self {
        let alg = match policy.algorithm {
            AlgorithmName::Gcra => 1.0,
            AlgorithmName::TokenBucket => 2.0,
            AlgorithmName::SlidingWindow => 3.0,
            AlgorithmName::LeakyBucket => 4.0,
            AlgorithmName::Concurrency => 5.0,
        };
        let h = if crate::policy::gets_headroom(policy) {
            f64::from(headroom)
        } else {
            1.0
        };
        let concurrency = policy.algorithm == AlgorithmName::Concurrency;
        let period = if concurrency {
            CONCURRENCY_HOLD
        } else {
            policy.period
        };
        CentralItem {
            key: if concurrency { key + SLOTS_SUFFIX } else { key },
            params: [
                alg,
                f64::from(policy.limit.get()) * h,
                period.as_micros() as f64,
                f64::from(policy.burst.get()) * h,
                f64::from(cost),
                policy.max_delay.as_micros() as f64,
                if mode == Mode::Enforce { 1.0 } else { 2.0 },
            ],
            slot: if concurrency { slot_id() } else { no_slot() },
        }
    }

    fn enforcing(&self) -> bool {
        self.params[6] == 1.0
    }

    /// The script's [`ARGS`] arguments for this item.
    fn args(&self) -> impl Iterator<Item = ScriptArg<'_>> {
        self.params
            .iter()
            .map(|&v| ScriptArg::Number(v))
            .chain(std::iter::once(ScriptArg::Text(&self.slot)))
    }
}

/// The slot of an item that takes none ("-"): one string a thread, not one a request (and
/// not one for the process, whose count every worker would bump on a shared cache line).
pub(crate) fn no_slot() -> Arc<str> {
    thread_local! {
        static NONE: Arc<str> = Arc::from("-");
    }
    NONE.with(Arc::clone)
}

/// A fresh slot id: a random per-process prefix (64 bits from the std hasher's random
/// keys) and a counter, so two gateways never pick the same id.
fn slot_id() -> Arc<str> {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::LazyLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    static PROCESS: LazyLock<u64> = LazyLock::new(|| {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        h.finish()
    });
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    Arc::from(format!("{:016x}.{n:x}", *PROCESS))
}

/// What the store decided for one item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CentralResult {
    pub admitted: bool,
    /// Spent (and not refunded).
    pub committed: bool,
    pub remaining: u64,
    pub reset_after: Nanos,
    /// Retry-after when denied; the leaky-bucket delay when admitted.
    pub wait: Nanos,
    /// Until `remaining` grows by one (0 when full): the RateLimit `t`.
    pub next_after: Nanos,
}

impl From<CentralItem> for Debt {
    fn from(it: CentralItem) -> Self {
        Debt {
            key: it.key,
            params: it.params,
            slot: it.slot,
        }
    }
}

/// The central site.
pub struct CentralSite {
    /// Shared with the lease site and membership (same connections, breakers and debts).
    store: Arc<RedisStore>,
    /// check.lua, run through the store's connections, timeout and breaker.
    script: redis::Script,
    /// Group keys by slot (Redis Cluster) or send them all in one call.
    cluster: bool,
    /// Checks waiting for their connection's next call (`batch.rs`; not on a cluster).
    batcher: batch::Batcher,
}

impl CentralSite {
    pub fn new(store: Arc<RedisStore>) -> Self {
        CentralSite {
            script: redis::Script::new(CHECK_LUA),
            cluster: store.is_cluster(),
            batcher: batch::Batcher::new(store.conn_count()),
            store,
        }
    }

    /// The store's key for `key` (with the key prefix).
    pub fn key(&self, key: &str) -> String {
        self.store.key(key)
    }

    /// The store this site decides in.
    pub fn store(&self) -> &Arc<RedisStore> {
        &self.store
    }

    /// Remember that `item` (its key, at its policy's numbers, spending its cost) was
    /// admitted on the fallback: the store is debited before it decides again.
    pub fn owe(&self, item: CentralItem) {
        self.store.owe(item.into());
    }

    pub fn metrics(&self) -> &StoreMetrics {
        &self.store.metrics
    }

    /// Decide and spend all-or-nothing (see the module doc for clusters), for a request
    /// that reaches the store now: [`Self::check_by`] one store timeout from now.
    pub async fn check(
        self: &Arc<Self>,
        items: &[CentralItem],
    ) -> Result<Vec<CentralResult>, StoreError> {
        let deadline = Instant::now() + self.store.timeout();
        self.check_by(items, deadline).await
    }

    /// [`Self::check`] answering by `deadline`: the request's one deadline on the store
    /// (`deadline.rs`), which the debit of what its keys owe and the check share. With
    /// nothing of it left, `Timeout`: the route's `on_store_error` decides, as for a call
    /// that timed out.
    pub async fn check_by(
        self: &Arc<Self>,
        items: &[CentralItem],
        deadline: Instant,
    ) -> Result<Vec<CentralResult>, StoreError> {
        // What the fallback spent first: the store must count it before deciding again.
        let keys = items.iter().map(|it| it.key.as_str());
        self.store.settle_by(keys, deadline).await?;
        if Instant::now() >= deadline {
            return Err(self.timed_out());
        }
        match (self.cluster, self.outlasts(deadline)) {
            (false, _) => self.check_batched(items, deadline).await,
            (true, false) => self.check_cluster(items).await,
            (true, true) => self.check_cluster_by(items, deadline).await,
        }
    }

    /// A check that timed out may still run in Redis after we gave up on it, and take
    /// concurrency slots no request holds. Release them: the release follows the check on
    /// the same connection, so it runs after the check if the check runs at all (removing
    /// a slot never taken does nothing). Without this the slots would stay 5 minutes.
    fn release_after_timeout(self: &Arc<Self>, err: &StoreError, items: &[CentralItem]) {
        let held: Vec<CentralItem> = items
            .iter()
            .filter(|it| it.params[0] == 5.0)
            .cloned()
            .collect();
        if matches!(err, StoreError::Timeout(_)) && !held.is_empty() {
            let site = self.clone();
            tokio::spawn(async move { site.release(&held).await });
        }
    }

    /// One key as the store holds it, nothing spent (the item's cost is 0): the admin API.
    pub async fn peek(&self, item: &CentralItem) -> Result<CentralResult, StoreError> {
        let results = self.call("check", std::slice::from_ref(item)).await?;
        results
            .into_iter()
            .next()
            .ok_or_else(|| StoreError::Reply("no result".into()))
    }

    /// Forget one key: absent is full (the admin API's reset).
    pub async fn reset(&self, item: &CentralItem) -> Result<(), StoreError> {
        self.call_raw("reset", std::slice::from_ref(item))
            .await
            .map(drop)
    }

    /// Spend `items`' cells whether or not they conform (a response reported a higher
    /// cost). One call per key, so a cluster never sees keys of two slots; a call that
    /// fails is owed, and paid before this node decides the key again.
    pub async fn debit(&self, items: &[CentralItem]) {
        for item in items {
            if self
                .call_raw("debit", std::slice::from_ref(item))
                .await
                .is_err()
            {
                self.owe(item.clone());
            }
        }
    }

    /// Concurrency: the request ended. Safe to run twice, unlike a refund (`refund.rs`).
    pub async fn release(&self, items: &[CentralItem]) {
        if items.is_empty() {
            return;
        }
        if !self.cluster {
            let _ = self.call_raw("release", items).await;
            return;
        }
        let groups = by_slot(items);
        join_all(groups.values().map(|idx| {
            let group: Vec<CentralItem> = idx.iter().map(|&i| items[i].clone()).collect();
            async move {
                let _ = self.call_raw("release", &group).await;
            }
        }))
        .await;
    }

    async fn call_raw(
        &self,
        op: &'static str,
        items: &[CentralItem],
    ) -> Result<Vec<i64>, StoreError> {
        self.store.run(self.script_call(op, items)).await
    }

    async fn call(
        &self,
        op: &'static str,
        items: &[CentralItem],
    ) -> Result<Vec<CentralResult>, StoreError> {
        let reply = self.store.run(self.script_call(op, items)).await?;
        decode(&reply, items.len())
    }

    /// `op` on `items`: their keys, then each item's [`ARGS`] arguments.
    fn script_call(&self, op: &'static str, items: &[CentralItem]) -> ScriptCall<'_> {
        self.script_call_with(op, items, None)
    }

    /// [`Self::script_call`] with one more key after the items' (a reservation's receipt).
    fn script_call_with(
        &self,
        op: &'static str,
        items: &[CentralItem],
        receipt: Option<&str>,
    ) -> ScriptCall<'_> {
        let mut keys: Vec<&str> = Vec::with_capacity(items.len() + 1);
        keys.extend(items.iter().map(|it| it.key.as_str()));
        keys.extend(receipt);
        let mut args = Vec::with_capacity(items.len() * ARGS);
        args.extend(items.iter().flat_map(CentralItem::args));
        self.store.script_call(&self.script, op, &keys, &args)
    }
}
