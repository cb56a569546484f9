//! One owed key of the debt book (`debts.rs`) and, under `[store] fallback_repay =
//! "half_rate"`, its repayment schedule: what the `on_store_error = "local"` fallback
//! admitted is paid to the store in installments instead of all at once.
//!
//! Paid at once, a debt D on a key of rate r leaves it refused for about D / r once the
//! store is back (a blackout as long as the outage for a key the fleet kept at its rate).
//! In installments of at most r/2 since the key's repayment began, the store still grants
//! the other half of the rate meanwhile: clients see about r/2 for about 2D / r instead of
//! nothing for D / r, and the store counts the same spends over that window (the debt, then
//! its algorithm's own bound), so the fleet admits the same total over it.
//!
//! A fleet repays together: each of N nodes owes what it admitted on its L/N share (N as
//! that share was cut when it spent), so each repays at most r / (2N), and the fleet's
//! installments together stay at most r/2 when every node owes (at r/2 each, three nodes
//! would pay 1.5 r and refuse the key as long as paying at once does).
//!
//! A key's repayment begins at the first payment attempt that finds it owed (a request
//! about to be decided in the store, or the heartbeat's background payment, which runs
//! only while the store answers). It starts over when the key spends on the fallback again
//! or a payment of it fails: the store is failing it, and time without the store must not
//! add up to one large installment on its return.

use crate::clock::Nanos;

use super::debts::Debt;

/// Float slack on a whole number of cells (sums of fractional rates).
const EPS: f64 = 1e-9;

/// One key's debt in the book, with where its repayment stands.
#[derive(Debug, Clone)]
pub(super) struct Owed {
    /// Its cost (`params[4]`) is what is still owed.
    pub debt: Debt,
    /// When the repayment began (clock nanos); `None`: not begun, or started over.
    began: Option<Nanos>,
    /// Paid since `began` (cells).
    repaid: f64,
    /// N of the L/N share the fallback spent on: this node repays 1/N of half the rate.
    nodes: u32,
}

impl Owed {
    /// `debt`, spent on a fallback share of one in `nodes`.
    pub fn new(debt: Debt, nodes: u32) -> Self {
        Owed {
            debt,
            began: None,
            repaid: 0.0,
            nodes: nodes.max(1),
        }
    }

    /// More spent on the fallback, on a share of one in `nodes`: owed, and (the store is
    /// failing this key) its repayment begins again once the store is back. The smallest
    /// share it spent on sets its pace (a debit that failed owes on a share of one: it
    /// must not speed up the repayment of a fallback share).
    pub fn add(&mut self, cost: f64, nodes: u32) {
        self.debt.params[4] += cost;
        self.nodes = self.nodes.max(nodes);
        self.restart();
    }

    /// What is still owed (cells).
    pub fn cost(&self) -> f64 {
        self.debt.params[4]
    }

    /// The store failed this key (a new fallback spend, a failed payment): its repayment
    /// begins again at the next attempt.
    pub fn restart(&mut self) {
        self.began = None;
        self.repaid = 0.0;
    }

    /// The installment due at `now` (beginning the repayment if it has not begun), as a
    /// debt to pay; `None` while nothing is due yet.
    pub fn installment(&mut self, now: Nanos) -> Option<Debt> {
        let began = *self.began.get_or_insert(now);
        let elapsed = now.saturating_sub(began);
        let due = (allowed(&self.debt.params, self.nodes, elapsed) - self.repaid).min(self.cost());
        (due > 0.0).then(|| {
            let mut debt = self.debt.clone();
            debt.params[4] = due;
            debt
        })
    }

    /// `cost` reached the store: off what is owed, onto what was repaid. True when the key
    /// owes nothing more.
    pub fn paid(&mut self, cost: f64) -> bool {
        self.debt.params[4] -= cost;
        if self.began.is_some() {
            self.repaid += cost;
        }
        self.cost() <= 0.0
    }
}

/// Whole cells one of `nodes` nodes owing a key of `params` (the central script's numbers:
/// `params[1]` cells per `params[2]` µs, headroom included; a leased key's are one cell per
/// lease interval) may have repaid `elapsed` nanoseconds after its repayment began: half
/// the key's rate, shared by the nodes, times the time. A key without a rate (none is owed
/// so) pays everything at once.
pub(super) fn allowed(params: &[f64; 7], nodes: u32, elapsed: Nanos) -> f64 {
    let (limit, period_us) = (params[1], params[2]);
    if !(limit > 0.0 && period_us > 0.0) {
        return f64::INFINITY;
    }
    let share_per_ns = limit / (period_us * 1_000.0) / 2.0 / f64::from(nodes.max(1));
    (share_per_ns * elapsed as f64 + EPS).floor()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use redis::Script;

    use super::*;
    use crate::spec::FallbackRepay;
    use crate::store::debts::tests::item;
    use crate::store::debts::{Claim, Debts};

    const MS: Nanos = 1_000_000;

    /// 10 cells a second (gcra), owing `cost`.
    fn owed(cost: f64) -> Owed {
        Owed::new(
            Debt {
                key: "k".into(),
                params: [1.0, 10.0, 1e6, 10.0, cost, 0.0, 1.0],
                slot: Arc::from("-"),
            },
            1,
        )
    }

    #[test]
    fn half_the_rate_in_whole_cells() {
        let p = owed(0.0).debt.params;
        // 10/s, half of it: 5 cells a second, one every 200 ms.
        assert_eq!(allowed(&p, 1, 0), 0.0);
        assert_eq!(allowed(&p, 1, 199 * MS), 0.0);
        assert_eq!(allowed(&p, 1, 200 * MS), 1.0);
        assert_eq!(allowed(&p, 1, 1_000 * MS), 5.0);
        assert_eq!(allowed(&p, 1, 3_100 * MS), 15.0);
        // Five nodes owe it: each repays a fifth of that, one cell a second.
        assert_eq!(allowed(&p, 5, 999 * MS), 0.0);
        assert_eq!(allowed(&p, 5, 3_000 * MS), 3.0);
        // Headroom and leases are in the params: 300 cells per 60 s is 2.5 a second.
        let mut q = p;
        (q[1], q[2]) = (300.0, 60e6);
        assert_eq!(allowed(&q, 1, 1_000 * MS), 2.0);
        assert_eq!(allowed(&q, 1, 4_000 * MS), 10.0);
        // A lease's debt: one cell per interval (20 ms), so 25 cells a second.
        (q[1], q[2]) = (1.0, 20_000.0);
        assert_eq!(allowed(&q, 1, 1_000 * MS), 25.0);
    }

    #[test]
    fn installments_follow_the_clock_and_stop_at_the_debt() {
        let mut o = owed(12.0);
        let t0 = 5_000 * MS;
        // The first attempt begins the repayment: nothing due yet.
        assert!(o.installment(t0).is_none());
        assert!(o.installment(t0 + 150 * MS).is_none());
        let first = o.installment(t0 + 450 * MS).expect("two cells due");
        assert_eq!(first.params[4], 2.0);
        assert!(!o.paid(2.0));
        assert_eq!(o.cost(), 10.0);
        // Paid what was due: nothing more until the next cell.
        assert!(o.installment(t0 + 450 * MS).is_none());
        assert!(o.installment(t0 + 599 * MS).is_none());
        assert_eq!(o.installment(t0 + 600 * MS).unwrap().params[4], 1.0);
        // Not paid (say, in flight): the same installment is due again, plus what accrued.
        assert_eq!(o.installment(t0 + 1_000 * MS).unwrap().params[4], 3.0);
        assert!(!o.paid(3.0));
        // Long after: never more than what is owed.
        let last = o.installment(t0 + 60_000 * MS).unwrap();
        assert_eq!(last.params[4], 7.0);
        assert!(o.paid(7.0));
    }

    #[test]
    fn a_restart_begins_the_schedule_again() {
        let mut o = owed(20.0);
        assert!(o.installment(0).is_none());
        let due = o.installment(1_000 * MS).unwrap().params[4];
        assert!(!o.paid(due));
        assert_eq!(o.cost(), 15.0);
        // The store failed the key for 10 s: no lump of 50 cells on its return.
        o.restart();
        assert!(o.installment(11_000 * MS).is_none());
        assert_eq!(o.installment(11_400 * MS).unwrap().params[4], 2.0);
        // Spent again on a share of one in two: owed, and begun again at half the pace.
        o.add(1.0, 2);
        assert_eq!(o.cost(), 16.0);
        assert!(o.installment(20_000 * MS).is_none());
        assert!(o.installment(20_399 * MS).is_none());
        assert_eq!(o.installment(20_400 * MS).unwrap().params[4], 1.0);
        // A spend on a share of one (a debit that failed) keeps the smaller share's pace.
        o.add(1.0, 1);
        assert!(o.installment(30_000 * MS).is_none());
        assert!(o.installment(30_399 * MS).is_none());
        assert_eq!(o.installment(30_400 * MS).unwrap().params[4], 1.0);
    }

    #[test]
    fn half_rate_pays_installments_and_holds_nothing_up() {
        let d = Debts::new(Script::new("return 0"), FallbackRepay::HalfRate);
        // 10/s: 5 cells a second repaid, one every 200 ms.
        d.record(item("k", 8.0), 1);
        d.record(item("j", 1.0), 1);
        // Repayment begins: nothing due, so nothing holds the key up.
        assert!(matches!(d.claim(["k"].into_iter(), 0), Claim::Nothing));
        assert!(matches!(
            d.claim(["k"].into_iter(), 100 * MS),
            Claim::Nothing
        ));
        let Claim::Take(first) = d.claim(["k", "k"].into_iter(), 400 * MS) else {
            panic!("two cells due");
        };
        // One installment, though the key was named twice.
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].params[4], 2.0);
        // Carried by that payment: another request is not held up (nor pays it twice).
        assert!(matches!(
            d.claim(["k"].into_iter(), 400 * MS),
            Claim::Nothing
        ));
        assert_eq!(d.paid(&first), 2);
        assert_eq!(d.owed("k"), Some(6.0));
        // The background payment takes what is due of every key: j's schedule began now.
        let due = d.claim_all(800 * MS);
        assert_eq!(due.len(), 1);
        assert_eq!((due[0].key.as_str(), due[0].params[4]), ("k", 2.0));
        // That payment failed: k's repayment begins again, no lump for the time lost.
        d.unclaim(&due);
        let j = d.claim_all(5_000 * MS);
        assert!(j.iter().all(|x| x.key == "j"));
        d.unclaim(&j);
        // A new fallback spend starts k over too.
        d.record(item("k", 1.0), 1);
        assert!(matches!(
            d.claim(["k"].into_iter(), 9_000 * MS),
            Claim::Nothing
        ));
        assert_eq!(d.owed("k"), Some(7.0));
        // Then it drains at half the rate: 7 cells take 1.4 s.
        let mut at = 9_000 * MS;
        while d.owed("k").is_some() {
            at += 100 * MS;
            assert!(at <= 10_400 * MS, "paid faster than half the rate allows");
            d.paid(&d.claim_all(at));
        }
        assert_eq!(at, 10_400 * MS);
        assert!(!d.owing());
    }
}
