//! Coalesced central checks: the checks that arrive on one store connection while its
//! previous call is in flight go together in the next call (`check.lua`'s `batch` op), each
//! still decided all-or-nothing on its own keys, in arrival order.
//!
//! Why: Redis spends most of a check on invoking the script, not on the script's logic
//! (BENCHMARKS.md), so one invocation for k requests costs the store about 1/k. What it
//! costs a request: nothing when the connection is idle (its call goes at once, alone);
//! under load, at most the remainder of the call in flight before its own — and never more
//! than the store `timeout` in all (what remains of its one deadline, `deadline.rs`, if it
//! paid a debt or waited on a lease refill first: it then keeps a timer of its own): a
//! request that has waited that long is answered `StoreError::Timeout` like one whose own
//! call timed out (not sent at all if its call had not started), and if its check still
//! ran, its concurrency slots are released as they are then.
//!
//! The driver keeps the deadlines, one timer per call set to the earliest deadline not yet
//! answered, not a timer per request: a tokio timer armed per request woke the worker's I/O
//! driver through its eventfd about every third request (perf: 0.37 `write(2)` a request on
//! the central row, and as many extra `epoll_wait` returns). The call itself keeps the store
//! timeout from its start, so the breaker sees the store's own latency, as unbatched.
//!
//! Not used on a Redis Cluster, where a request's keys may sit in several slots and are
//! reserved slot by slot (`cluster.rs`).

use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::{ARGS, CentralItem, CentralResult, CentralSite, ScriptArg, decode};
use crate::store::{ScriptCall, StoreError};

/// Keys per call: larger queues wait for the next call.
const MAX_BATCH_KEYS: usize = 512;

type Answer = Result<Vec<CentralResult>, StoreError>;

/// One request's check, waiting for its call.
struct Waiter {
    items: Vec<CentralItem>,
    /// Taken when answered: by its results, or by `Timeout` while its call is out.
    tx: Option<oneshot::Sender<Answer>>,
    /// When the request gives up: the store `timeout` after it queued.
    deadline: Instant,
}

#[derive(Default)]
struct Queue {
    /// A call of this connection is out (its driver takes the queue when it returns).
    in_flight: bool,
    waiting: Vec<Waiter>,
}

/// Per store connection: the checks waiting for it.
pub(super) struct Batcher {
    queues: Box<[Mutex<Queue>]>,
}

impl Batcher {
    pub(super) fn new(connections: usize) -> Self {
        Batcher {
            queues: (0..connections.max(1))
                .map(|_| Mutex::new(Queue::default()))
                .collect(),
        }
    }

    fn lock(&self, conn: usize) -> MutexGuard<'_, Queue> {
        self.queues[conn % self.queues.len()]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }
}

impl CentralSite {
    /// Check `items` in the next call of this thread's store connection, answering by
    /// `deadline` (the request's, see `CentralSite::check`).
    pub(super) async fn check_batched(
        self: &Arc<Self>,
        items: &[CentralItem],
        deadline: Instant,
    ) -> Answer {
        let conn = self.store.conn_slot();
        let (tx, rx) = oneshot::channel();
        // Before the driver's deadline (queueing time plus the timeout, so they rise from
        // the front of the queue): a request that spent time on the store already keeps
        // its own timer, and is then skipped or released like a request that went away.
        let own_timer = self.outlasts(deadline);
        let queued_deadline = Instant::now() + self.store.timeout();
        let drive = {
            let mut q = self.batcher.lock(conn);
            q.waiting.push(Waiter {
                items: items.to_vec(),
                tx: Some(tx),
                deadline: queued_deadline,
            });
            !std::mem::replace(&mut q.in_flight, true)
        };
        if drive {
            // The driver is a task of its own, even for a lone check: a request's future can
            // be dropped mid-call (its client went away), and a driver inside it would leave
            // `in_flight` set and the connection's queue stuck for good.
            let site = self.clone();
            tokio::spawn(async move { site.drive(conn).await });
        }
        if own_timer {
            return self.answer_by(rx, deadline, "batched check").await;
        }
        // No timer here: the driver answers by the deadline (see `send`).
        match rx.await {
            Ok(answer) => answer,
            // The driver cannot drop a waiter unanswered; if it ever did, fail like a call.
            Err(_) => Err(StoreError::Redis("batched check dropped".into())),
        }
    }

    /// Send the queue of `conn` call after call until it is empty.
    async fn drive(self: Arc<Self>, conn: usize) {
        loop {
            let now = Instant::now();
            let (late, batch) = {
                let mut q = self.batcher.lock(conn);
                // A waiter that gave up is not sent: nobody would hold what it spends.
                q.waiting
                    .retain(|w| w.tx.as_ref().is_some_and(|tx| !tx.is_closed()));
                let late: Vec<Waiter> = q.waiting.extract_if(.., |w| w.deadline <= now).collect();
                let batch = take(&mut q.waiting);
                if batch.is_empty() && late.is_empty() {
                    q.in_flight = false;
                    return;
                }
                (late, batch)
            };
            // Out of time before its call could start: nothing of it reached the store.
            for tx in late.into_iter().filter_map(|w| w.tx) {
                let _ = tx.send(Err(self.timed_out()));
            }
            if !batch.is_empty() {
                self.send(conn, batch).await;
            }
        }
    }

    /// One call for `batch`; each waiter gets its own results (or the call's error), or
    /// `Timeout` at its deadline if the call is still out then.
    async fn send(self: &Arc<Self>, conn: usize, mut batch: Vec<Waiter>) {
        // Written before it goes: the call borrows nothing of the waiters, which are
        // answered (and taken) as their deadlines pass while it is out.
        let call = match batch.as_slice() {
            [one] => self.script_call("check", &one.items),
            _ => self.batch_call(&batch),
        };
        let answer = self.expiring(conn, self.store.run(call), &mut batch).await;
        self.deliver(answer, batch);
    }

    /// Await `call`, answering `Timeout` to each waiter whose deadline passes first: this
    /// call's (`batch`, whose senders are taken when answered) and those still queued on
    /// `conn` behind it (only when more than a call's keys queued before it started). One
    /// timer for the call, set to the earliest deadline not yet answered.
    async fn expiring<T>(
        &self,
        conn: usize,
        call: impl Future<Output = T>,
        batch: &mut [Waiter],
    ) -> T {
        tokio::pin!(call);
        loop {
            // Queued waiters' deadlines rise from the front (each is its queueing time plus
            // the same timeout).
            let queued = self.batcher.lock(conn).waiting.first().map(|w| w.deadline);
            let next = batch
                .iter()
                .filter(|w| w.tx.is_some())
                .map(|w| w.deadline)
                .chain(queued)
                .min();
            // Everyone answered: the call still ends (its spends must be given back).
            let Some(next) = next else { return call.await };
            tokio::select! {
                biased;
                answer = &mut call => return answer,
                () = tokio::time::sleep_until(next) => self.expire(conn, batch),
            }
        }
    }

    /// Answer `Timeout` to every waiter past its deadline, of the call out and of the queue.
    fn expire(&self, conn: usize, batch: &mut [Waiter]) {
        let now = Instant::now();
        for w in batch.iter_mut().filter(|w| w.deadline <= now) {
            if let Some(tx) = w.tx.take() {
                let _ = tx.send(Err(self.timed_out()));
            }
        }
        let late: Vec<Waiter> = {
            let mut q = self.batcher.lock(conn);
            let n = q.waiting.iter().take_while(|w| w.deadline <= now).count();
            q.waiting.drain(..n).collect()
        };
        for w in late.into_iter().filter_map(|w| w.tx) {
            let _ = w.send(Err(self.timed_out()));
        }
    }

    /// Each waiter still waiting gets its results (or the call's error); the slots of those
    /// that gave up or timed out while the call was out are given back.
    fn deliver(self: &Arc<Self>, reply: Result<redis::Value, StoreError>, batch: Vec<Waiter>) {
        let keys = batch.iter().map(|w| w.items.len()).sum();
        match reply.and_then(|r| decode(&r, keys)) {
            Ok(mut results) => {
                let single = batch.len() == 1;
                let mut from = 0;
                for w in batch {
                    let n = w.items.len();
                    let r: Vec<CentralResult> = match single {
                        // A lone waiter's results are the call's: no copy.
                        true => std::mem::take(&mut results),
                        false => results[from..from + n].to_vec(),
                    };
                    from += n;
                    let unheld = match w.tx {
                        Some(tx) => tx.send(Ok(r)).err().and_then(Result::ok),
                        None => Some(r),
                    };
                    if let Some(r) = unheld {
                        self.release_unheld(&w.items, &r);
                    }
                }
            }
            Err(e) => {
                let all: Vec<CentralItem> =
                    batch.iter().flat_map(|w| w.items.iter().cloned()).collect();
                self.release_after_timeout(&e, &all);
                for tx in batch.into_iter().filter_map(|w| w.tx) {
                    let _ = tx.send(Err(e.clone()));
                }
            }
        }
    }

    /// The `batch` op: request sizes first, then every request's keys and values.
    fn batch_call(&self, batch: &[Waiter]) -> ScriptCall<'_> {
        let items = || batch.iter().flat_map(|w| &w.items);
        let keys: Vec<&str> = items().map(|it| it.key.as_str()).collect();
        let count = |n: usize| ScriptArg::Number(n as f64);
        let mut args = Vec::with_capacity(1 + batch.len() + keys.len() * ARGS);
        args.push(count(batch.len()));
        args.extend(batch.iter().map(|w| count(w.items.len())));
        args.extend(items().flat_map(CentralItem::args));
        self.store.script_call(&self.script, "batch", &keys, &args)
    }

    /// Concurrency slots a check took for a request that is no longer waiting for it.
    fn release_unheld(self: &Arc<Self>, items: &[CentralItem], results: &[CentralResult]) {
        let held: Vec<CentralItem> = items
            .iter()
            .zip(results)
            .filter(|(it, r)| r.committed && it.params[0] == 5.0)
            .map(|(it, _)| it.clone())
            .collect();
        if !held.is_empty() {
            let site = self.clone();
            tokio::spawn(async move { site.release(&held).await });
        }
    }
}

/// Waiters from the front up to [`MAX_BATCH_KEYS`] keys (at least one).
fn take(waiting: &mut Vec<Waiter>) -> Vec<Waiter> {
    let mut keys = 0;
    let n = waiting
        .iter()
        .take_while(|w| {
            keys += w.items.len();
            keys <= MAX_BATCH_KEYS
        })
        .count()
        .max(1)
        .min(waiting.len());
    waiting.drain(..n).collect()
}
