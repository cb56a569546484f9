//! The store's debt book: what this node admitted on the `on_store_error = "local"`
//! fallback while the store could not decide (central and leased keys alike), owed to the
//! store until it can.
//!
//! Without this, the store never learns of the fallback's admissions: a node that comes
//! back decides centrally on a key whose budget the fleet already spent during the outage,
//! while its peers still spend their fallback shares (measured before: 1.66× the limit
//! around an outage). With it, each owed key is debited (`central/check.lua`, op `debit`)
//! before this node decides that key in the store again: a site calls
//! [`RedisStore::settle`] (a request: [`RedisStore::settle_by`], within its one deadline on
//! the store) with its keys first, which pays what those keys owe in one call
//! (a key another payment carries is a store failure for the moment: the route's
//! `on_store_error` decides it). Keys that owe nothing are never held up: on a Redis
//! Cluster a debt on a dead master stops only that master's keys, and a fail-closed route
//! sharing a key with a `local` one answers as soon as the store does.
//!
//! With `[store] fallback_repay = "half_rate"` a key pays in installments instead
//! (`installments.rs`): at most half its rate since its repayment began, and what is not
//! due yet does not hold it up; a key whose installment another payment carries is decided
//! in the store meanwhile (the installment only spreads what is owed anyway).
//!
//! Membership's heartbeat also pays everything owed in the background (at most every
//! [`PAY_EVERY`]), so debts are paid with no traffic too. Payments go by slot group in calls
//! of [`CHUNK`] keys; a call that fails leaves its keys owed, and a call that timed out
//! counts as paid (it was sent and almost surely ran: paying it again would multiply the
//! debt, while the rare debit that never ran under-counts by at most that key's share).
//!
//! The book is bounded: past [`MAX_DEBT_KEYS`] keys, new keys' spends are dropped and
//! counted (`tollgate_store_debt_dropped_total`): a flood of distinct keys during an
//! outage cannot grow memory, and each such key can over-admit by at most its fallback
//! share.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use redis::Script;

use super::installments::Owed;
use super::{RedisStore, StoreError, by_slot};
use crate::clock::Nanos;
use crate::spec::FallbackRepay;

/// Keys remembered as owed at once.
pub(super) const MAX_DEBT_KEYS: usize = 100_000;

/// One key's debt, as the debit script takes it: the central check script's 7 numbers
/// (`central::CentralItem::params`; `params[4]` is the cost, which adds up per key) and
/// the slot id argument.
#[derive(Debug, Clone)]
pub struct Debt {
    /// Full store key (prefixed).
    pub key: String,
    pub params: [f64; 7],
    pub slot: Arc<str>,
}

impl Debt {
    /// The script's 8 arguments for this key.
    fn args(&self) -> impl Iterator<Item = String> + '_ {
        self.params
            .iter()
            .map(|v| v.to_string())
            .chain(std::iter::once(self.slot.to_string()))
    }
}

/// Per key: the debt to pay (its cost is the sum owed), and which keys a payment is
/// carrying now (no second payment may take them; under `at_once` nobody decides them
/// meanwhile).
#[derive(Default)]
struct Book {
    owed: HashMap<String, Owed>,
    paying: HashSet<String>,
}

/// What a request's keys owe, as [`Debts::claim`] finds it.
pub(super) enum Claim {
    Nothing,
    /// Another payment carries one of them: wait for it (decide without the store).
    Busy,
    /// These are now this caller's to pay.
    Take(Vec<Debt>),
}

pub(super) struct Debts {
    book: Mutex<Book>,
    /// Whether the book may hold anything: the request path reads only this flag.
    owing: AtomicBool,
    /// A background payment task runs.
    paying: AtomicBool,
    /// When the last background payment started (clock nanos), to space attempts out.
    last_try: AtomicU64,
    /// The script whose `debit` op pays (see [`RedisStore::new`]).
    debit: Script,
    /// `[store] fallback_repay`.
    repay: FallbackRepay,
}

impl Debts {
    pub fn new(debit: Script, repay: FallbackRepay) -> Self {
        Debts {
            book: Mutex::default(),
            owing: AtomicBool::new(false),
            paying: AtomicBool::new(false),
            last_try: AtomicU64::new(0),
            debit,
            repay,
        }
    }

    pub fn owing(&self) -> bool {
        self.owing.load(Ordering::Acquire)
    }

    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Add `debt`'s cost, spent on a fallback share of one in `nodes`, to what its key
    /// owes: the keys now owed, or `None` when the book is full (dropped).
    pub fn record(&self, debt: Debt, nodes: u32) -> Option<usize> {
        let mut book = self.book();
        let len = book.owed.len();
        match book.owed.get_mut(&debt.key) {
            Some(owed) => owed.add(debt.params[4], nodes),
            None if len < MAX_DEBT_KEYS => {
                book.owed.insert(debt.key.clone(), Owed::new(debt, nodes));
            }
            None => return None,
        }
        self.owing.store(true, Ordering::Release);
        Some(book.owed.len())
    }

    /// What `keys` owe at `now`, claimed for the caller to pay: all of it (`at_once`), or
    /// the installments due (`half_rate`, where a key another payment carries is skipped).
    pub fn claim<'k>(&self, keys: impl Iterator<Item = &'k str>, now: Nanos) -> Claim {
        let mut guard = self.book();
        let book = &mut *guard;
        let mut take = Vec::new();
        for k in keys {
            let busy = book.paying.contains(k);
            match (self.repay, book.owed.get_mut(k)) {
                (FallbackRepay::AtOnce, _) if busy => return Claim::Busy,
                (FallbackRepay::AtOnce, Some(o)) => take.push(o.debt.clone()),
                (FallbackRepay::HalfRate, Some(o)) if !busy => {
                    // Carried from here on: a key named twice pays one installment.
                    if let Some(d) = o.installment(now) {
                        book.paying.insert(d.key.clone());
                        take.push(d);
                    }
                }
                _ => {}
            }
        }
        if take.is_empty() {
            return Claim::Nothing;
        }
        book.paying.extend(take.iter().map(|d| d.key.clone()));
        Claim::Take(take)
    }

    /// Everything owed (`half_rate`: every installment due at `now`) that no payment
    /// carries yet, claimed.
    pub(super) fn claim_all(&self, now: Nanos) -> Vec<Debt> {
        let mut guard = self.book();
        let book = &mut *guard;
        let free = book
            .owed
            .values_mut()
            .filter(|o| !book.paying.contains(&o.debt.key));
        let take: Vec<Debt> = match self.repay {
            FallbackRepay::AtOnce => free.map(|o| o.debt.clone()).collect(),
            FallbackRepay::HalfRate => free.filter_map(|o| o.installment(now)).collect(),
        };
        book.paying.extend(take.iter().map(|d| d.key.clone()));
        take
    }

    /// These debts reached the store: take their costs off (a key may have owed more
    /// since the claim). Returns the keys still owed.
    pub(super) fn paid(&self, debts: &[Debt]) -> usize {
        let mut book = self.book();
        for d in debts {
            book.paying.remove(&d.key);
            if let Some(owed) = book.owed.get_mut(&d.key)
                && owed.paid(d.params[4])
            {
                book.owed.remove(&d.key);
            }
        }
        self.owing.store(!book.owed.is_empty(), Ordering::Release);
        book.owed.len()
    }

    /// A payment of these failed: still owed, free to be claimed again (an installment
    /// schedule begins again: the store is failing them).
    pub(super) fn unclaim(&self, debts: &[Debt]) {
        let mut guard = self.book();
        let book = &mut *guard;
        for d in debts {
            book.paying.remove(&d.key);
            if let Some(owed) = book.owed.get_mut(&d.key) {
                owed.restart();
            }
        }
    }

    #[cfg(test)]
    pub(super) fn owed(&self, key: &str) -> Option<f64> {
        self.book().owed.get(key).map(Owed::cost)
    }
}

/// Keys per debit call: a long outage's book is paid in several calls, not one huge one.
const CHUNK: usize = 256;
/// Payment attempts are at least this far apart (nanoseconds): a store that stays down
/// costs one failed attempt per interval, not one per request.
pub const PAY_EVERY: u64 = 100_000_000;

impl RedisStore {
    /// Remember that `debt` (its key, at its policy's numbers, spending its cost) was
    /// admitted on the fallback.
    pub fn owe(&self, debt: Debt) {
        self.owe_share(debt, 1);
    }

    /// [`Self::owe`] for a spend on a fallback share of one in `nodes` (the L/N split):
    /// with `fallback_repay = "half_rate"` this node repays that share of half the rate,
    /// as each of the nodes that spent does (`installments.rs`).
    pub fn owe_share(&self, debt: Debt, nodes: u32) {
        match self.debts.record(debt, nodes) {
            Some(keys) => self.metrics.debt_keys(keys),
            None => self.metrics.debt_dropped(),
        }
    }

    /// Pay what `keys` (full store keys) owe for the fallback's admissions before the
    /// caller decides them in the store: one debit call for this request's own keys
    /// (nothing, one atomic load, when nothing is owed). `Unsettled` while another payment
    /// carries one of them; the store's error when the debit fails. The call runs in its
    /// own task: a request dropped meanwhile cannot leave its keys claimed forever.
    pub async fn settle<'k>(
        self: &Arc<Self>,
        keys: impl Iterator<Item = &'k str>,
    ) -> Result<(), StoreError> {
        if !self.debts.owing() {
            return Ok(());
        }
        let debts = match self.debts.claim(keys, self.clock.now()) {
            Claim::Nothing => return Ok(()),
            Claim::Busy => return Err(StoreError::Unsettled),
            Claim::Take(debts) => debts,
        };
        let store = self.clone();
        match tokio::spawn(async move { store.pay(debts).await }).await {
            Ok(paid) => paid,
            Err(e) => Err(StoreError::Redis(format!("debit task failed: {e}"))),
        }
    }

    /// [`Self::settle`] for a request that waits on the store until `deadline` only: past
    /// it, `Timeout` (the payment goes on in its own task, its keys claimed until it lands).
    pub async fn settle_by<'k>(
        self: &Arc<Self>,
        keys: impl Iterator<Item = &'k str>,
        deadline: tokio::time::Instant,
    ) -> Result<(), StoreError> {
        if !self.debts.owing() {
            return Ok(());
        }
        match tokio::time::timeout_at(deadline, self.settle(keys)).await {
            Ok(settled) => settled,
            Err(_) => Err(StoreError::Timeout(self.timeout())),
        }
    }

    /// Start paying everything owed in the background (membership's heartbeat: debts are
    /// paid even with no traffic), unless a payment runs or one started within
    /// [`PAY_EVERY`].
    pub fn start_paying(self: &Arc<Self>) {
        let d = &self.debts;
        let now = self.clock.now();
        let last = d.last_try.load(Ordering::Relaxed);
        if !d.owing()
            || now.saturating_sub(last) < PAY_EVERY
            || d.last_try
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
            || d.paying.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            d.paying.store(false, Ordering::Release);
            return;
        };
        let store = self.clone();
        runtime.spawn(async move {
            let _ = store.pay(store.debts.claim_all(now)).await;
            store.debts.paying.store(false, Ordering::Release);
        });
    }

    /// Debit `owed` (claimed), slot group by slot group. A group whose call failed stays
    /// owed (unclaimed, the first error returned); one that timed out counts as paid.
    async fn pay(&self, owed: Vec<Debt>) -> Result<(), StoreError> {
        let mut groups: Vec<Vec<Debt>> = Vec::new();
        if self.is_cluster() {
            for idx in by_slot(owed.iter().map(|d| d.key.as_str())).values() {
                groups.extend(
                    idx.chunks(CHUNK)
                        .map(|c| c.iter().map(|&i| owed[i].clone()).collect()),
                );
            }
        } else {
            groups.extend(owed.chunks(CHUNK).map(<[Debt]>::to_vec));
        }
        let mut failure = Ok(());
        for group in groups {
            let keys: Vec<String> = group.iter().map(|d| d.key.clone()).collect();
            let args: Vec<String> = group.iter().flat_map(Debt::args).collect();
            match self
                .eval_script(&self.debts.debit, "debit", &keys, &args)
                .await
            {
                Ok(_) | Err(StoreError::Timeout(_)) => {
                    let left = self.debts.paid(&group);
                    self.metrics.debt_keys(left);
                }
                // Still owed; other slot groups may still be paid.
                Err(e) => {
                    self.debts.unclaim(&group);
                    failure = failure.and(Err(e));
                }
            }
        }
        failure
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(in crate::store) fn item(key: &str, cost: f64) -> Debt {
        Debt {
            key: key.into(),
            params: [1.0, 10.0, 1e6, 10.0, cost, 0.0, 1.0],
            slot: Arc::from("-"),
        }
    }

    #[test]
    fn spends_of_one_key_add_up_until_paid() {
        let d = Debts::new(Script::new("return 0"), FallbackRepay::AtOnce);
        assert!(!d.owing());
        assert_eq!(d.record(item("k", 1.0), 1), Some(1));
        assert_eq!(d.record(item("k", 2.0), 1), Some(1));
        assert!(d.owing());
        assert!(matches!(d.claim(["x"].into_iter(), 0), Claim::Nothing));
        let Claim::Take(taken) = d.claim(["x", "k"].into_iter(), 0) else {
            panic!("k owes");
        };
        assert_eq!(taken[0].params[4], 3.0);
        // Carried by that payment: nobody else may take it or decide it meanwhile.
        assert!(matches!(d.claim(["k"].into_iter(), 0), Claim::Busy));
        assert!(d.claim_all(0).is_empty());
        // Spent again while the payment was in flight: that much is still owed.
        d.record(item("k", 1.0), 1);
        assert_eq!(d.paid(&taken), 1);
        assert_eq!(d.owed("k"), Some(1.0));
        // A failed payment leaves it owed and free to claim again.
        let again = d.claim_all(0);
        d.unclaim(&again);
        assert_eq!(d.owed("k"), Some(1.0));
        let again = d.claim_all(0);
        assert_eq!(d.paid(&again), 0);
        assert!(!d.owing());
        assert!(matches!(d.claim(["k"].into_iter(), 0), Claim::Nothing));
    }

    #[test]
    fn the_book_is_bounded() {
        let d = Debts::new(Script::new("return 0"), FallbackRepay::AtOnce);
        for i in 0..MAX_DEBT_KEYS {
            assert!(d.record(item(&i.to_string(), 1.0), 1).is_some());
        }
        assert_eq!(d.record(item("one too many", 1.0), 1), None);
        // A key already owed still adds up.
        assert_eq!(d.record(item("0", 1.0), 1), Some(MAX_DEBT_KEYS));
        assert_eq!(d.owed("0"), Some(2.0));
    }
}
