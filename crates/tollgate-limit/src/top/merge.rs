//! A window's minutes merged into one summary, a child of `top/mod.rs`: per key the counts
//! of every minute that tracked it, and the bound of what the others may have missed.
//!
//! Merging Space-Saving tables (Agarwal et al., "Mergeable summaries", 2012): a key's
//! counts are the sum over the minutes that hold it of what each saw since it was inserted
//! there (lower bounds), and its `max_error` the sum of each such minute's inherited error
//! plus, for each minute that does not hold it but replaced entries, that minute's least
//! weight. Each minute's share is at most its total over its capacity, so a window's
//! `max_error` is at most the window's total over the capacity.

use hashbrown::HashMap;

use super::Described;
use super::hll::Hll;
use super::minutes::{Minute, Minutes};

/// One key over a window.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Counts {
    pub denied: u64,
    pub shadow_denied: u64,
    pub allowed: u64,
    /// Requests (the requests ring only).
    pub requests: u64,
    /// Sum of the errors of the minutes that hold the key.
    error: u64,
    /// Sum of the untracked bounds of the minutes that hold it (subtracted from the
    /// window's, it leaves the bound of the minutes that do not).
    held_bound: u64,
}

/// A window's merged minutes.
pub(super) struct Merged<'a> {
    /// By stored key.
    pub keys: HashMap<&'a str, Counts>,
    /// A stored key's label (as shown) when any minute holds one: a key recorded before
    /// `show_values` was turned on is labelled by its later minutes.
    pub labels: HashMap<&'a str, &'a str>,
    pub denied: u64,
    pub shadow_denied: u64,
    /// Weight added in the window (every minute's table total).
    pub total: u64,
    /// Distinct keys denied: the union of the minutes' keys while none replaced an entry
    /// (exact), else the merged HyperLogLog's estimate.
    pub distinct: u64,
    pub distinct_exact: bool,
    /// Sum of the minutes' untracked bounds.
    untracked: u64,
}

impl<'a> Merged<'a> {
    /// What a view prints for the stored key `key`: its label when known.
    pub fn shown(&self, key: &'a str) -> &'a str {
        self.labels.get(key).copied().unwrap_or(key)
    }

    /// Bound on how far `c`'s counts are below the truth.
    pub fn max_error(&self, c: &Counts) -> u64 {
        c.error + (self.untracked - c.held_bound)
    }

    /// Bound on any key's counts in the window: what a key missing from it may have had,
    /// and at most `total / capacity`.
    pub fn bound(&self) -> u64 {
        self.untracked
    }
}

/// `minutes`' window `[now - back, now]` merged.
pub(super) fn merge(minutes: &Minutes, now: u64, back: u64) -> Merged<'_> {
    let mut merged = Merged {
        keys: HashMap::new(),
        labels: HashMap::new(),
        denied: 0,
        shadow_denied: 0,
        total: 0,
        distinct: 0,
        distinct_exact: true,
        untracked: 0,
    };
    let mut distinct = Hll::default();
    for minute in minutes.window(now, back) {
        add(&mut merged, minute);
        distinct.merge(&minute.distinct);
    }
    if merged.distinct_exact {
        merged.distinct = merged
            .keys
            .values()
            .filter(|c| c.denied + c.shadow_denied > 0)
            .count() as u64;
    } else {
        merged.distinct = distinct.estimate();
    }
    merged
}

fn add<'a>(merged: &mut Merged<'a>, minute: &'a Minute) {
    let t = &minute.table;
    let bound = t.untracked_bound();
    merged.denied += minute.denied;
    merged.shadow_denied += minute.shadow_denied;
    merged.total += t.total;
    merged.untracked += bound;
    merged.distinct_exact &= !t.evicted;
    for e in t.entries() {
        let c = merged.keys.entry(&*e.key).or_default();
        c.denied += e.denied;
        c.shadow_denied += e.shadow_denied;
        c.allowed += e.allowed;
        c.requests += e.weight - e.error;
        c.error += e.error;
        c.held_bound += bound;
        if let Some(label) = &e.label {
            merged.labels.insert(&*e.key, &**label);
        }
    }
}

/// `merged` with its labels only while the policy shows values: turned off by a reload,
/// the labels its minutes still hold are neither printed nor matched.
pub(super) fn labelled<'a>(policy: &Described, mut merged: Merged<'a>) -> Merged<'a> {
    if !policy.shows {
        merged.labels.clear();
    }
    merged
}

/// Whether the looked-up value is in the stored key `key` or in its label (as shown) in
/// any of `merged`.
pub(super) fn matches(lookup: &dyn Fn(&str) -> bool, key: &str, merged: &[&Merged<'_>]) -> bool {
    lookup(key)
        || merged
            .iter()
            .any(|m| m.labels.get(key).is_some_and(|l| lookup(l)))
}

/// The label of the stored key `key` in `denials` or `requests`, else the key.
pub(super) fn shown<'a>(denials: &Merged<'a>, requests: &Merged<'a>, key: &'a str) -> &'a str {
    (denials.labels.get(key))
        .or_else(|| requests.labels.get(key))
        .copied()
        .unwrap_or(key)
}
