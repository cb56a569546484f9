//! One refill of one book: a coordinator call, and recording its outcome in the book.
//!
//! A book counts its calls out (`in_flight`) from the moment a request begins one; only
//! the outcome settles that count. So a call must be settled whether or not the request
//! that began it is still there: against Redis each call runs in its own task (a request
//! that gives up or is dropped only stops awaiting it, and the grant still lands), and a
//! guard settles the book as a failed call if even that task is dropped (its runtime
//! shutting down). Otherwise a slow key whose request was reset mid-call would stay
//! "refill out" forever: denied on this node until restart, and never evicted.

use std::sync::Arc;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::ask::RefillAsk;
use super::busy::busy_span;
use super::fair::demand_span;
use super::grant::Grant;
use super::hold::{LONG_BUSY, LONG_KEEP};
use super::params::LeaseParams;
use super::returns::RETURN_BUSY;
use super::site::{Coordinator, LeaseItem, LeaseSite};
use crate::store::{RedisStore, StoreError, slot, slot_tag};

/// The grant script; see the file for arguments and reply.
pub const LEASE_LUA: &str = include_str!("lease.lua");

impl LeaseSite {
    /// Run a begun refill without waiting for it. In-process a refill is a map lookup
    /// that never suspends: not worth a task.
    pub(super) async fn refill_behind(self: &Arc<Self>, it: &LeaseItem, ask: RefillAsk) {
        if self.is_memory() {
            let _ = self.refill(it, ask).await;
        } else {
            drop(self.spawn_refill(it, ask));
        }
    }

    /// Run a begun refill and wait for it until `deadline`; past it, the store did not
    /// answer in this request's time (the call goes on and still lands in the book).
    pub(super) async fn refill_within(
        self: &Arc<Self>,
        it: &LeaseItem,
        ask: RefillAsk,
        deadline: Instant,
    ) -> Result<(), StoreError> {
        if self.is_memory() {
            return self.refill(it, ask).await;
        }
        match tokio::time::timeout_at(deadline, self.spawn_refill(it, ask)).await {
            Ok(Ok(result)) => result,
            Ok(Err(join)) => Err(StoreError::Redis(format!("lease refill: {join}"))),
            Err(_) => Err(StoreError::Timeout(self.wait)),
        }
    }

    fn is_memory(&self) -> bool {
        matches!(self.coordinator, Coordinator::Memory(_))
    }

    fn spawn_refill(
        self: &Arc<Self>,
        it: &LeaseItem,
        ask: RefillAsk,
    ) -> JoinHandle<Result<(), StoreError>> {
        let site = self.clone();
        let it = it.clone();
        tokio::spawn(async move { site.refill(&it, ask).await })
    }

    /// One coordinator call for `ask` on `it`'s key, recorded in its book.
    async fn refill(&self, it: &LeaseItem, ask: RefillAsk) -> Result<(), StoreError> {
        let mut guard = Unsettled {
            site: self,
            it,
            ask,
            armed: true,
        };
        let reply = match &self.coordinator {
            Coordinator::Memory(c) => Ok(c.grant(&it.key, &it.params, ask, self.now())),
            Coordinator::Redis { store, script } => {
                let args = script_args(&it.params, ask);
                let key = store.key(&it.key);
                let rate = side_key(store, "~busy:", &it.key, &key);
                let hold = side_key(store, "~hold:", &it.key, &key);
                let run = side_key(store, "~ret:", &it.key, &key);
                let want = side_key(store, "~want:", &it.key, &key);
                let keys = [key, rate, hold, run, want];
                // Not before the store has counted what the fallback spent
                // (`store/debts.rs`).
                match store.settle(keys[..1].iter().map(String::as_str)).await {
                    Ok(()) => store
                        .eval_script(script, "lease", &keys, &args)
                        .await
                        .and_then(|r| decode(&r)),
                    Err(e) => Err(e),
                }
            }
        };
        guard.armed = false;
        self.record(it, ask, reply)
    }

    /// Record a call's outcome in the key's book and wake the requests waiting for it. A
    /// grant for a book evicted meanwhile starts a new one (the cells are this node's); a
    /// failure for one has nothing to settle.
    fn record(
        &self,
        it: &LeaseItem,
        ask: RefillAsk,
        reply: Result<Grant, StoreError>,
    ) -> Result<(), StoreError> {
        let now = self.now();
        let mut evicted = 0;
        {
            let mut shard = self.books.lock(&it.key);
            match &reply {
                Ok(g) => {
                    let (book, n) = shard.book(it.policy, &it.key, &it.params, it.cap(), now);
                    evicted = n;
                    book.on_grant(&it.params, ask, *g, now);
                }
                Err(_) => {
                    if let Some(book) = shard.get_mut(it.policy, &it.key) {
                        book.on_error(ask);
                    }
                }
            }
        }
        self.count_evicted(it.policy, evicted);
        self.refilled[super::books::shard_of(&it.key)].notify_waiters();
        reply.map(|_| ())
    }
}

/// `lease.lua`'s `ARGV[2..]` for `ask` on a key of `p` (its header names them), times in
/// µs: the quota, the ask, the grant-rate span, the long-cell rule, the returns and the
/// demand report.
pub fn script_args(p: &LeaseParams, ask: RefillAsk) -> [f64; 17] {
    let us = |ticks: i128| p.ns_ceil(ticks) as f64 / 1_000.0;
    [
        us(p.interval()),
        us(p.tolerance as i128),
        ask.lead.min(p.horizon) as f64 / 1_000.0,
        f64::from(ask.want),
        busy_span(p) as f64 / 1_000.0,
        f64::from(ask.long),
        p.long_life.saturating_sub(p.ttl) as f64 / 1_000.0,
        f64::from(p.burst / LONG_KEEP),
        f64::from(LONG_BUSY),
        f64::from(p.return_cells),
        p.return_window as f64 / 1_000.0,
        f64::from(RETURN_BUSY),
        f64::from(ask.returned.cells),
        // A reply's now_us, as it came (`decode` made it ns).
        (ask.returned.granted_at / 1_000) as f64,
        // 52 bits: exact.
        ask.returned.id as f64,
        f64::from(ask.demand),
        demand_span(p) as f64 / 1_000.0,
    ]
}

/// Settles a refill's book as a failed call if the refill is dropped before its reply.
struct Unsettled<'a> {
    site: &'a LeaseSite,
    it: &'a LeaseItem,
    ask: RefillAsk,
    armed: bool,
}

impl Drop for Unsettled<'_> {
    fn drop(&mut self) {
        if self.armed {
            let cancelled = Err(StoreError::Redis("lease refill cancelled".into()));
            let _ = self.site.record(self.it, self.ask, cancelled);
        }
    }
}

/// The store key of `key`'s grant-rate average (`lease.lua`'s `KEYS[2]`, `kind`
/// `~busy:`), long-cell holds (`KEYS[3]`, `~hold:`), returnable run (`KEYS[4]`,
/// `~ret:`) or demand (`KEYS[5]`, `~want:`): `~busy:key` after the store
/// prefix, or on a cluster, where a script touches one slot and `main` (the key's state)
/// decides it, `~busy:{tag}key` with a hash tag of `main`'s slot (the plain form when the
/// key prefix's own hash tag decides both).
///
/// In front, not a suffix: a key is `policy:part:value` with a value a client chooses, so
/// `main:busy` would be the state key of the client value `value:busy`, and two
/// identities could overwrite each other's state (a full bucket on every grant to the
/// other). No policy name contains `~`, so no state key starts with it.
fn side_key(store: &RedisStore, kind: &str, key: &str, main: &str) -> String {
    let plain = store.key(&format!("{kind}{key}"));
    if !store.is_cluster() {
        return plain;
    }
    let want = slot(main.as_bytes());
    if slot(plain.as_bytes()) == want {
        return plain;
    }
    slot_tag(want)
        .map(|tag| store.key(&format!("{kind}{{{tag}}}{key}")))
        .filter(|k| slot(k.as_bytes()) == want)
        .unwrap_or(plain)
}

/// `granted, frontier_us, now_us, busy, long, returnable, demand`.
fn decode(reply: &[i64]) -> Result<Grant, StoreError> {
    match reply {
        [granted, frontier, now, busy, long, returnable, demand] => Ok(Grant {
            granted: u32::try_from(*granted).unwrap_or(0),
            frontier: frontier.saturating_mul(1_000),
            busy: u32::try_from(*busy).unwrap_or(u32::MAX),
            long: *long == 1,
            returnable: *returnable == 1,
            at: u64::try_from(*now).unwrap_or(0).saturating_mul(1_000),
            demand: u32::try_from(*demand).unwrap_or(0),
        }),
        other => Err(StoreError::Reply(format!(
            "lease script: {} values",
            other.len()
        ))),
    }
}
