//! The lease site as the limit step uses it: every leased key's book on this node, and the
//! coordinator that refills them (Redis through `lease.lua`, or this process with the
//! memory store).
//!
//! A request takes its cells from the books. When a book reaches its low-water mark the
//! refill runs in a background task, so in the steady state no request waits on the
//! store; only a key with nothing left (a new key, or one idle past its TTL) makes its
//! request wait for one call, and one request waits at most the store `timeout` in all
//! (its own refill and others' together). Refills run in their own tasks (`refill.rs`):
//! a request dropped mid-call (client reset, HTTP/2 `RST_STREAM`) cannot leave a book
//! with a call counted out forever.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::Script;
use tokio::sync::Notify;
use tokio::sync::futures::Notified;
use tokio::time::Instant;

use super::ask::{RefillAsk, Take, Taken};
use super::books::{SHARDS, Shelf, shard_of};
use super::grant::MemoryCoordinator;
use super::params::LeaseParams;
pub use super::refill::LEASE_LUA;
use crate::clock::{Clock, Nanos};
use crate::metrics::PolicyGauges;
use crate::store::{Debt, RedisStore, StoreError};

/// One leased key of one request.
#[derive(Debug, Clone)]
pub struct LeaseItem {
    /// The limiter key (the store's key is this with the store's prefix).
    pub key: String,
    /// Index of the policy: its books are bounded and their evictions counted apart.
    pub policy: usize,
    /// The policy's `max_keys`: how many books this node holds for it.
    pub max_keys: usize,
    /// The policy's numbers at this request's headroom.
    pub params: LeaseParams,
    pub cost: u32,
    /// Set by [`LeaseSite::take`] when admitted: when the cells taken conformed and expire.
    pub conformed: Taken,
}

impl LeaseItem {
    /// Books per shard for this item's policy (as the local site: `max_keys / SHARDS`).
    pub(super) fn cap(&self) -> usize {
        (self.max_keys / SHARDS).max(1)
    }
}

/// Who grants cells.
#[derive(Clone)]
pub(super) enum Coordinator {
    /// `[store] kind = "memory"`: this process is the only node (shared with the lease
    /// site of a reloaded config, which keeps its grants).
    Memory(Arc<MemoryCoordinator>),
    /// Redis (or a Redis Cluster): one script call per grant.
    Redis {
        store: Arc<RedisStore>,
        script: Script,
    },
}

/// Every leased key on this node.
pub struct LeaseSite {
    pub(super) books: Shelf,
    /// Per shard: woken after every refill of one of its keys, for requests that found
    /// their key empty while its refill was already out.
    pub(super) refilled: Box<[Notify]>,
    /// The longest one request waits on this site in all: the store timeout.
    pub(super) wait: Duration,
    pub(super) coordinator: Coordinator,
    /// The same clock as the rest of the limiter (tests drive it by hand).
    clock: Arc<dyn Clock>,
    /// `tollgate_limiter_evictions_total`, when exported.
    gauges: Option<Arc<PolicyGauges>>,
    /// Live books evicted so far (all policies).
    evicted: AtomicU64,
}

/// One pass of a request over its key's book, under the shard lock.
struct Step {
    taken: Take,
    conformed: Taken,
    /// A refill this pass began: it must run, whatever happens to the request.
    ask: Option<RefillAsk>,
    /// Registered for the wake-up of a refill already out.
    registered: bool,
}

impl LeaseSite {
    /// Leases from Redis through the shared store's connections, breakers and metrics.
    pub fn redis(store: Arc<RedisStore>, clock: Arc<dyn Clock>, timeout: Duration) -> Self {
        let coordinator = Coordinator::Redis {
            store,
            script: Script::new(LEASE_LUA),
        };
        Self::with(coordinator, clock, timeout)
    }

    /// Leases from this process (the memory store).
    pub fn memory(clock: Arc<dyn Clock>) -> Self {
        let coordinator = Coordinator::Memory(Arc::new(MemoryCoordinator::new()));
        Self::with(coordinator, clock, Duration::ZERO)
    }

    /// Count live books evicted at `max_keys` in `tollgate_limiter_evictions_total`.
    pub fn with_gauges(mut self, gauges: Arc<PolicyGauges>) -> Self {
        self.gauges = Some(gauges);
        self
    }

    fn with(coordinator: Coordinator, clock: Arc<dyn Clock>, wait: Duration) -> Self {
        LeaseSite {
            books: Shelf::new(),
            refilled: (0..SHARDS).map(|_| Notify::new()).collect(),
            wait,
            coordinator,
            clock,
            gauges: None,
            evicted: AtomicU64::new(0),
        }
    }

    /// The lease site of a reloaded config: the same coordinator (what it granted stays
    /// granted) with no books. Cells held in this site's books are not carried (policy
    /// indexes and numbers may have changed): they are stranded at the coordinator and
    /// expire there unspent, so a reload may under-admit a leased key briefly, never over.
    pub fn reloaded(&self) -> Self {
        Self::with(self.coordinator.clone(), self.clock.clone(), self.wait)
    }

    pub fn now(&self) -> Nanos {
        self.clock.now()
    }

    /// The longest one request waits on this site in all: the store timeout (nothing on
    /// the in-process coordinator, which never suspends).
    pub fn wait(&self) -> Duration {
        self.wait
    }

    /// Books held on this node, every policy together.
    pub fn book_count(&self) -> usize {
        self.books.len()
    }

    /// Live books evicted at `max_keys` so far.
    pub fn evictions(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }

    /// Take each item's cells. What to give back when one is denied is the caller's call
    /// (a denied shadow policy must not undo an enforcing one); on a store error the cells
    /// already taken go back here, and `Err` says a key had nothing and its refill failed
    /// or did not answer in time. Each admitted item's `conformed` is set, for a give-back.
    /// The items share `deadline`, the request's on the store (at most [`Self::wait`] away):
    /// the request waits at most the store timeout in all.
    pub async fn take(
        self: &Arc<Self>,
        items: &mut [LeaseItem],
        deadline: Instant,
    ) -> Result<Vec<Take>, StoreError> {
        let mut out = Vec::with_capacity(items.len());
        for i in 0..items.len() {
            match self.take_one(&items[i], deadline).await {
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
    /// Spend items' cells at the coordinator whether or not they conform (a response
    /// reported a higher cost). Redis: owed, as the L/N fallback's admissions are, and paid
    /// through the check script's `debit` before this node next asks for the key.
    pub fn debit(&self, items: &[LeaseItem]) {
        let now = self.now();
        for item in items {
            let p = &item.params;
            match &self.coordinator {
                Coordinator::Memory(m) => m.debit(&item.key, p, item.cost, now),
                Coordinator::Redis { store, .. } => {
                    let interval_us = p.ns_ceil(p.interval()) as f64 / 1_000.0;
                    let cost = f64::from(item.cost);
                    store.owe(Debt {
                        key: store.key(&item.key),
                        params: [1.0, 1.0, interval_us, f64::from(p.burst), cost, 0.0, 1.0],
                        slot: crate::site::central::no_slot(),
                    });
                }
            }
        }
    }

    pub fn give_back(&self, items: &[LeaseItem]) {
        for it in items {
            let mut shard = self.books.lock(&it.key);
            if let Some(book) = shard.get_mut(it.policy, &it.key) {
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
    /// mark that has not landed yet), but not past `deadline`; then it is denied, or gets
    /// the store's timeout if its own call has not answered. A refill begun once the
    /// deadline has passed runs in the background. (A hot key's waiters can outnumber one
    /// batch: they go round again.)
    async fn take_one(
        self: &Arc<Self>,
        it: &LeaseItem,
        deadline: Instant,
    ) -> Result<(Take, Taken), StoreError> {
        let notify = &self.refilled[shard_of(&it.key)];
        let mut first = true;
        loop {
            let late = !first && Instant::now() >= deadline;
            let waiting = notify.notified();
            tokio::pin!(waiting);
            let step = self.step(it, first, waiting.as_mut());
            first = false;
            let admitted = matches!(step.taken, Take::Admitted { .. });
            let done = Ok((step.taken, step.conformed));
            match step.ask {
                // Low water, or no time left to wait: refill while this request goes on.
                Some(ask) if admitted || late => {
                    self.refill_behind(it, ask).await;
                    return done;
                }
                Some(ask) => self.refill_within(it, ask, deadline).await?,
                None if admitted || late || !step.registered => return done,
                None => {
                    if tokio::time::timeout_at(deadline, waiting).await.is_err() {
                        return done;
                    }
                }
            }
        }
    }

    /// Take (or retake, for a request already counted) under the shard lock; begin a
    /// refill if the book wants one, else register for the one out if denied.
    fn step(&self, it: &LeaseItem, first: bool, waiting: Pin<&mut Notified<'_>>) -> Step {
        let now = self.now();
        let mut shard = self.books.lock(&it.key);
        let (book, evicted) = shard.book(it.policy, &it.key, &it.params, it.cap(), now);
        let taken = if first {
            book.take(&it.params, it.cost, now)
        } else {
            book.retake(&it.params, it.cost, now)
        };
        let conformed = book.last_conform();
        let ask = book.wants(&it.params, now);
        let mut registered = false;
        if let Some(ask) = ask {
            book.begin(now, ask);
        } else if matches!(taken, Take::Denied { .. }) && book.in_flight() {
            // Registered before the lock is released: the refill's wake-up cannot be
            // missed between here and the await.
            waiting.enable();
            registered = true;
        }
        drop(shard);
        self.count_evicted(it.policy, evicted);
        Step {
            taken,
            conformed,
            ask,
            registered,
        }
    }

    pub(super) fn count_evicted(&self, policy: usize, n: u64) {
        if n > 0 {
            self.evicted.fetch_add(n, Ordering::Relaxed);
            if let Some(g) = &self.gauges {
                g.evicted(policy, n);
            }
        }
    }
}
