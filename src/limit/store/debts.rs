//! The store's debt book: what this node admitted on the `on_store_error = "local"`
//! fallback while the store could not decide (central and leased keys alike), owed to the
//! store until it can. Every site that runs a script settles first ([`RedisStore::settle`]),
//! and so does membership's heartbeat, which pays even with no traffic.
//!
//! Without this, the store never learns of the fallback's admissions: a node that comes
//! back decides centrally on a key whose budget the fleet already spent during the outage,
//! while its peers still spend their fallback shares (measured before: 1.66× the limit
//! around an outage). With it, a node's first store call after the outage pays what it
//! spent, per key, before it decides centrally again; the store then holds every admission
//! and denies until the key has drained (see `central/check.lua`, op `debit`).
//!
//! The book is bounded: past [`MAX_DEBT_KEYS`] keys, new keys' spends are dropped and
//! counted (`tollgate_store_debt_dropped_total`): a flood of distinct keys during an
//! outage cannot grow memory, and each such key can over-admit by at most its fallback
//! share.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use redis::Script;

use super::{RedisStore, StoreError, by_slot};

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

/// Per key: the debt to pay (its cost is the sum owed).
pub(super) struct Debts {
    book: Mutex<HashMap<String, Debt>>,
    /// Whether the book may hold anything: the request path reads only this flag.
    owing: AtomicBool,
    /// Held while a payment is in flight, so that a request never decides in the store
    /// between another request taking the debts and the store receiving them.
    paying: tokio::sync::Mutex<()>,
    /// The script whose `debit` op pays (see [`RedisStore::new`]).
    debit: Script,
}

impl Debts {
    pub fn new(debit: Script) -> Self {
        Debts {
            book: Mutex::default(),
            owing: AtomicBool::new(false),
            paying: tokio::sync::Mutex::new(()),
            debit,
        }
    }

    pub fn owing(&self) -> bool {
        self.owing.load(Ordering::Acquire)
    }

    /// Add `debt`'s cost to what its key owes: the keys now owed, or `None` when the book
    /// is full (dropped).
    pub fn record(&self, debt: Debt) -> Option<usize> {
        let mut book = self.book.lock().expect("debt book poisoned");
        let len = book.len();
        let recorded = match book.get_mut(&debt.key) {
            Some(owed) => {
                owed.params[4] += debt.params[4];
                true
            }
            None if len < MAX_DEBT_KEYS => {
                book.insert(debt.key.clone(), debt);
                true
            }
            None => false,
        };
        if !recorded {
            return None;
        }
        self.owing.store(true, Ordering::Release);
        Some(book.len())
    }

    /// Everything owed, leaving the book empty.
    pub fn take(&self) -> Vec<Debt> {
        let mut book = self.book.lock().expect("debt book poisoned");
        self.owing.store(false, Ordering::Release);
        book.drain().map(|(_, d)| d).collect()
    }

    /// A payment failed: these are owed again (added to what was recorded meanwhile; the
    /// bound does not apply, they were in the book already). Returns the keys owed.
    pub fn put_back(&self, debts: Vec<Debt>) -> usize {
        let mut book = self.book.lock().expect("debt book poisoned");
        for d in debts {
            match book.get_mut(&d.key) {
                Some(owed) => owed.params[4] += d.params[4],
                None => {
                    book.insert(d.key.clone(), d);
                }
            }
        }
        self.owing.store(true, Ordering::Release);
        book.len()
    }

    pub fn len(&self) -> usize {
        self.book.lock().expect("debt book poisoned").len()
    }

    #[cfg(test)]
    fn owed(&self, key: &str) -> Option<f64> {
        let book = self.book.lock().expect("debt book poisoned");
        book.get(key).map(|d| d.params[4])
    }
}

/// Keys per debit call: a long outage's book is paid in several calls, not one huge one.
const CHUNK: usize = 256;

impl RedisStore {
    /// Remember that `debt` (its key, at its policy's numbers, spending its cost) was
    /// admitted on the fallback.
    pub fn owe(&self, debt: Debt) {
        match self.debts.record(debt) {
            Some(keys) => self.metrics.debt_keys(keys),
            None => self.metrics.debt_dropped(),
        }
    }

    /// Pay what the fallback owes before deciding in the store again (every site calls
    /// this before its script). Costs one atomic load when nothing is owed. The payment
    /// runs in its own task: a request dropped while it is in flight (a client reset)
    /// cannot lose the debts it took.
    pub async fn settle(self: &Arc<Self>) -> Result<(), StoreError> {
        if !self.debts.owing() {
            return Ok(());
        }
        let store = self.clone();
        match tokio::spawn(async move { store.pay().await }).await {
            Ok(paid) => paid,
            Err(e) => Err(StoreError::Redis(format!("debit task failed: {e}"))),
        }
    }

    /// One payer at a time; the others wait for it and find nothing owed. A failed call
    /// puts back everything not yet paid. A timed-out debit may still have run: it is owed
    /// again all the same, since paying twice only under-admits and paying never would
    /// over-admit.
    async fn pay(&self) -> Result<(), StoreError> {
        let _paying = self.debts.paying.lock().await;
        let owed = self.debts.take();
        let mut groups: Vec<Vec<Debt>> = Vec::new();
        if self.is_cluster() {
            let by = by_slot(owed.iter().map(|d| d.key.as_str()));
            for idx in by.values() {
                groups.extend(
                    idx.chunks(CHUNK)
                        .map(|c| c.iter().map(|&i| owed[i].clone()).collect()),
                );
            }
        } else {
            groups.extend(owed.chunks(CHUNK).map(<[Debt]>::to_vec));
        }
        for (n, group) in groups.iter().enumerate() {
            let keys: Vec<String> = group.iter().map(|d| d.key.clone()).collect();
            let args: Vec<String> = group.iter().flat_map(Debt::args).collect();
            let paid = self
                .eval_script(&self.debts.debit, "debit", &keys, &args)
                .await;
            if let Err(e) = paid {
                let keys = self
                    .debts
                    .put_back(groups.into_iter().skip(n).flatten().collect());
                self.metrics.debt_keys(keys);
                return Err(e);
            }
        }
        self.metrics.debt_keys(self.debts.len());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(key: &str, cost: f64) -> Debt {
        Debt {
            key: key.into(),
            params: [1.0, 10.0, 1e6, 10.0, cost, 0.0, 1.0],
            slot: Arc::from("-"),
        }
    }

    #[test]
    fn spends_of_one_key_add_up_and_survive_a_failed_payment() {
        let d = Debts::new(Script::new("return 0"));
        assert!(!d.owing());
        assert_eq!(d.record(item("k", 1.0)), Some(1));
        assert_eq!(d.record(item("k", 2.0)), Some(1));
        assert!(d.owing());
        let taken = d.take();
        assert!(!d.owing());
        assert_eq!(taken.len(), 1);
        assert_eq!(taken[0].params[4], 3.0);
        d.record(item("k", 1.0));
        d.put_back(taken);
        assert_eq!(d.owed("k"), Some(4.0));
        assert!(d.owing());
    }

    #[test]
    fn the_book_is_bounded() {
        let d = Debts::new(Script::new("return 0"));
        for i in 0..MAX_DEBT_KEYS {
            assert!(d.record(item(&i.to_string(), 1.0)).is_some());
        }
        assert_eq!(d.record(item("one too many", 1.0)), None);
        // A key already owed still adds up.
        assert_eq!(d.record(item("0", 1.0)), Some(MAX_DEBT_KEYS));
        assert_eq!(d.owed("0"), Some(2.0));
    }
}
