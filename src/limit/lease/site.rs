//! The lease site as the limit step uses it: every leased key's book on this node, and the
//! coordinator that refills them (Redis through `lease.lua`, or this process with the
//! memory store).
//!
//! A request takes its cells from the books. When a book reaches its low-water mark the
//! refill runs in a background task, so in the steady state no request waits on the
//! store; only a key with nothing left (a new key, or one idle past its TTL) makes its
//! request wait for one call.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use redis::Script;
use tokio::sync::Notify;
use tokio::sync::futures::Notified;

use super::book::{Ask, Lease, Take};
use super::grant::{Grant, MemoryCoordinator};
use super::params::LeaseParams;
use crate::limit::central::{CentralSite, StoreError};
use crate::limit::clock::{Clock, Nanos, duration_to_nanos};

/// The grant script; see the file for arguments and reply.
pub const LEASE_LUA: &str = include_str!("lease.lua");

/// Lock shards of the books.
const SHARDS: usize = 64;
/// Books per shard before idle ones are dropped.
const SHARD_KEYS: usize = 16_384;

/// One leased key of one request.
#[derive(Debug, Clone)]
pub struct LeaseItem {
    /// The limiter key (the store's key is this with the store's prefix).
    pub key: String,
    /// The policy's numbers at this request's headroom.
    pub params: LeaseParams,
    pub cost: u32,
    /// Set by [`LeaseSite::take`] when admitted: when the cells taken conformed (ticks).
    pub conformed: i128,
}

/// One shard's books, by store key.
/// (hashbrown's default hasher: these keys are already keyed hashes or addresses, and the
/// std SipHash cost more than the rest of a take on a hot key.)
type Books = hashbrown::HashMap<Box<str>, Lease>;

/// Who grants cells.
enum Coordinator {
    /// `[store] kind = "memory"`: this process is the only node.
    Memory(MemoryCoordinator),
    /// Redis (or a Redis Cluster): one script call per grant.
    Redis {
        site: Arc<CentralSite>,
        script: Script,
    },
}

/// Every leased key on this node.
pub struct LeaseSite {
    shards: Box<[Mutex<Books>]>,
    /// Per shard: woken after every refill of one of its keys, for requests that found
    /// their key empty while its refill was already out.
    refilled: Box<[Notify]>,
    /// The longest such a request waits: the store timeout.
    wait: Duration,
    coordinator: Coordinator,
    /// The same clock as the rest of the limiter (tests drive it by hand).
    clock: Arc<dyn Clock>,
}

impl LeaseSite {
    /// Leases from Redis through the central site's connection, breaker and metrics.
    pub fn redis(site: Arc<CentralSite>, clock: Arc<dyn Clock>, timeout: Duration) -> Self {
        Self::with(
            Coordinator::Redis {
                site,
                script: Script::new(LEASE_LUA),
            },
            clock,
            timeout,
        )
    }

    /// Leases from this process (the memory store).
    pub fn memory(clock: Arc<dyn Clock>) -> Self {
        Self::with(
            Coordinator::Memory(MemoryCoordinator::new()),
            clock,
            Duration::ZERO,
        )
    }

    fn with(coordinator: Coordinator, clock: Arc<dyn Clock>, wait: Duration) -> Self {
        LeaseSite {
            shards: (0..SHARDS).map(|_| Mutex::new(Books::default())).collect(),
            refilled: (0..SHARDS).map(|_| Notify::new()).collect(),
            wait,
            coordinator,
            clock,
        }
    }

    pub fn now(&self) -> Nanos {
        self.clock.now()
    }

    /// Take each item's cells. What to give back when one is denied is the caller's call
    /// (a denied shadow policy must not undo an enforcing one); on a store error the cells
    /// already taken go back here, and `Err` says a key had nothing and its refill failed.
    /// Each admitted item's `conformed` is set, for a later give-back.
    pub async fn take(self: &Arc<Self>, items: &mut [LeaseItem]) -> Result<Vec<Take>, StoreError> {
        let mut out = Vec::with_capacity(items.len());
        for i in 0..items.len() {
            match self.take_one(&items[i]).await {
                Ok((t, conformed)) => {
                    items[i].conformed = conformed;
                    out.push(t);
                }
                Err(e) => {
                    self.give_back_taken(&items[..i], &out);
                    return Err(e);
                }
            }
        }
        Ok(out)
    }

    /// Undo admitted takes of a request another policy denied.
    pub fn give_back(&self, items: &[LeaseItem]) {
        for it in items {
            let mut shard = self.shard(&it.key);
            if let Some(book) = shard.get_mut(it.key.as_str()) {
                book.give_back(&it.params, it.cost, it.conformed);
            }
        }
    }

    fn give_back_taken(&self, items: &[LeaseItem], taken: &[Take]) {
        let admitted: Vec<LeaseItem> = items
            .iter()
            .zip(taken)
            .filter(|(_, t)| matches!(t, Take::Admitted { .. }))
            .map(|(it, _)| it.clone())
            .collect();
        self.give_back(&admitted);
    }

    /// Take one item's cells. A key with nothing to spend makes the request wait: for its
    /// own refill call, or for the one already out (a background refill at the low-water
    /// mark that has not landed yet), but not past the store timeout in all; then it is
    /// denied. (A hot key's waiters can outnumber one batch: they go round again.)
    async fn take_one(self: &Arc<Self>, it: &LeaseItem) -> Result<(Take, i128), StoreError> {
        let notify = &self.refilled[shard_of(&it.key)];
        let deadline = self.now().saturating_add(duration_to_nanos(self.wait));
        let mut round = 0;
        let mut conformed;
        loop {
            round += 1;
            let waiting = notify.notified();
            tokio::pin!(waiting);
            let now = self.now();
            let (taken, want, registered) = {
                let mut shard = self.shard(&it.key);
                let book = book(&mut shard, &it.key, now);
                let taken = if round == 1 {
                    book.take(&it.params, it.cost, now)
                } else {
                    book.retake(&it.params, it.cost, now)
                };
                conformed = book.last_conform();
                let want = book.wants(&it.params, now);
                let mut registered = false;
                if let Some(ask) = want {
                    book.begin(now, ask);
                } else if matches!(taken, Take::Denied { .. }) && book.in_flight() {
                    // Registered before the lock is released: the refill's wake-up cannot
                    // be missed between here and the await below.
                    waiting.as_mut().enable();
                    registered = true;
                }
                (taken, want, registered)
            };
            let admitted = matches!(taken, Take::Admitted { .. });
            match want {
                Some(ask) if admitted && !self.is_memory() => {
                    // Low water: refill while this request goes on.
                    let site = self.clone();
                    let it = it.clone();
                    tokio::spawn(async move {
                        let _ = site.refill(&it, ask).await;
                    });
                    return Ok((taken, conformed));
                }
                // In-process, a refill is a map lookup: never worth a task.
                Some(ask) if admitted => {
                    self.refill(it, ask).await?;
                    return Ok((taken, conformed));
                }
                _ if admitted || (round > 1 && now >= deadline) => return Ok((taken, conformed)),
                Some(ask) => self.refill(it, ask).await?,
                None if registered && self.wait_for_refill(waiting).await => {}
                None => return Ok((taken, conformed)),
            }
        }
    }

    fn is_memory(&self) -> bool {
        matches!(self.coordinator, Coordinator::Memory(_))
    }

    /// One coordinator call for `ask` on `it`'s key, recorded in its book.
    async fn refill(&self, it: &LeaseItem, ask: Ask) -> Result<(), StoreError> {
        let reply = match &self.coordinator {
            Coordinator::Memory(c) => Ok(c.grant(&it.key, &it.params, ask, self.now())),
            Coordinator::Redis { site, script } => {
                let p = &it.params;
                let us = |ticks: i128| p.ns_ceil(ticks) as f64 / 1_000.0;
                let args = [
                    us(p.interval()),
                    us(p.tolerance as i128),
                    ask.lead.min(p.horizon) as f64 / 1_000.0,
                    f64::from(ask.want),
                ];
                let keys = [site.key(&it.key)];
                site.store()
                    .eval_script(script, "lease", &keys, &args)
                    .await
                    .and_then(|r| decode(&r))
            }
        };
        let now = self.now();
        let result = {
            let mut shard = self.shard(&it.key);
            let book = book(&mut shard, &it.key, now);
            match reply {
                Ok(g) => {
                    book.on_grant(&it.params, ask, g, now);
                    Ok(())
                }
                Err(e) => {
                    book.on_error(ask);
                    Err(e)
                }
            }
        };
        self.refilled[shard_of(&it.key)].notify_waiters();
        result
    }

    /// Wait (at most the store timeout) for a refill this request registered for; false
    /// when it was not registered or did not come in time.
    async fn wait_for_refill(&self, waiting: std::pin::Pin<&mut Notified<'_>>) -> bool {
        !self.wait.is_zero() && tokio::time::timeout(self.wait, waiting).await.is_ok()
    }

    fn shard(&self, key: &str) -> MutexGuard<'_, Books> {
        // Books are plain values updated in one step: a poisoned lock is still consistent.
        self.shards[shard_of(key)]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }
}

fn shard_of(key: &str) -> usize {
    use std::hash::BuildHasher;
    static HASHER: std::sync::LazyLock<hashbrown::DefaultHashBuilder> =
        std::sync::LazyLock::new(hashbrown::DefaultHashBuilder::default);
    // The high bits pick the shard; the map inside uses its own hasher's low bits.
    (HASHER.hash_one(key) >> 32) as usize % SHARDS
}

/// The key's book, created empty; a full shard first drops its idle books.
fn book<'a>(shard: &'a mut Books, key: &str, now: Nanos) -> &'a mut Lease {
    if !shard.contains_key(key) {
        if shard.len() >= SHARD_KEYS {
            shard.retain(|_, b| !b.is_idle(now));
        }
        shard.insert(key.into(), Lease::default());
    }
    shard.get_mut(key).expect("inserted above")
}

/// `granted, frontier_us, now_us`.
fn decode(reply: &[i64]) -> Result<Grant, StoreError> {
    match reply {
        [granted, frontier, _now] => Ok(Grant {
            granted: u32::try_from(*granted).unwrap_or(0),
            frontier: frontier.saturating_mul(1_000),
        }),
        other => Err(StoreError::Reply(format!(
            "lease script: {} values",
            other.len()
        ))),
    }
}
