//! One minute of one policy's heavy hitters: a Space-Saving table (Metwally, Agrawal and El
//! Abbadi, 2005) of fixed capacity, a child of `top/mod.rs`.
//!
//! Hand-written rather than a crate's: the published top-k crates keep one count per key,
//! and this table keeps three (denied, shadow denied, allowed) under one ranking weight,
//! bumps tracked keys without inserting (allowed requests), and exposes each entry's
//! inherited error so that merged minutes can state their bound.
//!
//! Space-Saving: a key already tracked gains its weight; an untracked key takes an empty
//! entry, or replaces the entry of least weight `m` and starts at `m + 1` with error `m`.
//! Each key's true weight lies in `[weight - error, weight]`, every `error` is at most
//! `total / capacity`, and any key whose true weight exceeds `total / capacity` is tracked.
//! The entries sit in a min-heap by weight, so finding the least is `O(1)` and a bump or a
//! replacement `O(log capacity)`; nothing is allocated once the table is full but the new
//! key's text (and its label, the first time a `show_values` policy records it).

use hashbrown::HashTable;

/// What happened to a key, as one table counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Event {
    /// An enforcing policy denied it: weight 1, inserts.
    Denied,
    /// A shadow policy would have denied it: weight 1, inserts.
    ShadowDenied,
    /// Allowed: counted on a tracked key only (weight 0, never inserts).
    Allowed,
    /// A request of any outcome (the requests table of a shadow policy): weight 1, inserts.
    Request,
}

impl Event {
    fn weight(self) -> u64 {
        u64::from(self != Event::Allowed)
    }
}

/// Where a request of the requests table fell: its slice of the clock, and whether that
/// is one of the minute's first two slices (`head`) or last two (`tail`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Slice {
    pub slice: u64,
    pub head: bool,
    pub tail: bool,
}

/// One tracked key.
#[derive(Debug)]
pub(super) struct Entry {
    /// The stored key (what the limiter counts): the entry's identity.
    pub key: Box<str>,
    /// The key as shown (`show_values` parts in clear) when a request of the key was
    /// recorded with it: a display label only, so toggling `show_values` never splits a
    /// key in two.
    pub label: Option<Box<str>>,
    hash: u64,
    /// What the key is ranked and evicted by; an upper bound of its true weight.
    pub weight: u64,
    /// Weight inherited from the entry this key replaced: its true weight is at least
    /// `weight - error`, the counts below being what was seen since it was inserted.
    pub error: u64,
    pub denied: u64,
    pub shadow_denied: u64,
    pub allowed: u64,
    /// Requests table only: the slice of the clock (see `Table::count_request`) the key's
    /// latest request fell in, plus one, and its requests in that slice so far.
    slice: u64,
    in_slice: u64,
    /// Requests table only: the most requests the key made in one slice since it was
    /// inserted (a lower bound of its most in one period).
    pub peak: u64,
    /// Requests table only: its requests in the slice before `slice` (0 unless the key
    /// made some in that very slice), and the most in two adjacent slices: any window as
    /// long as a slice lies within two, so this bounds its most in one period from above.
    prev_in_slice: u64,
    pub peak_pair: u64,
    /// Requests table only: its requests in the first two and the last two slices of the
    /// minute (`Edges`), which bound what a window straddling the minute's edge holds.
    pub head: u64,
    pub tail: u64,
    /// Position in the heap.
    slot: u32,
}

/// A Space-Saving table of at most `capacity` keys.
#[derive(Debug)]
pub(super) struct Table {
    capacity: usize,
    entries: Vec<Entry>,
    /// Entry indices by the key's hash.
    index: HashTable<u32>,
    /// Entry indices, a min-heap by weight.
    heap: Vec<u32>,
    /// Weight added since the last reset (exact): the `N` of the error bound.
    pub total: u64,
    /// An entry was replaced since the last reset: counts may be inexact.
    pub evicted: bool,
}

impl Table {
    pub fn new(capacity: usize) -> Self {
        Table {
            capacity: capacity.max(1),
            entries: Vec::with_capacity(capacity),
            index: HashTable::with_capacity(capacity),
            heap: Vec::with_capacity(capacity),
            total: 0,
            evicted: false,
        }
    }

    /// Forget everything, keeping the memory (a new minute).
    pub fn clear(&mut self) {
        self.entries.clear();
        self.index.clear();
        self.heap.clear();
        self.total = 0;
        self.evicted = false;
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// Bound on the weight of a key this table does not hold: the least weight when the
    /// table has replaced entries (an untracked key may have been one of them), else 0.
    pub fn untracked_bound(&self) -> u64 {
        match (self.evicted, self.heap.first()) {
            (true, Some(&i)) => self.entries[i as usize].weight,
            _ => 0,
        }
    }

    /// Count `event` for the stored key `key` (whose hash is `hash`), shown as `label`
    /// when the policy shows values.
    pub fn count(&mut self, key: &str, label: Option<&str>, hash: u64, event: Event) {
        self.count_at(key, label, hash, event);
    }

    /// Count one request of `key` that fell in slice `slice` of the clock (a stretch of
    /// the policy's period, or a minute when the period is longer): the entry's peak is
    /// the most requests it made in one slice.
    pub fn count_request(&mut self, key: &str, label: Option<&str>, hash: u64, at: Slice) {
        let Some(i) = self.count_at(key, label, hash, Event::Request) else {
            return;
        };
        let e = &mut self.entries[i];
        let slice = at.slice;
        if e.slice != slice + 1 {
            // `e.slice` is the latest slice plus one: equal to `slice` when it was the one
            // just before.
            e.prev_in_slice = if e.slice == slice { e.in_slice } else { 0 };
            (e.slice, e.in_slice) = (slice + 1, 0);
        }
        e.in_slice += 1;
        e.peak = e.peak.max(e.in_slice);
        e.peak_pair = e.peak_pair.max(e.in_slice + e.prev_in_slice);
        e.head += u64::from(at.head);
        e.tail += u64::from(at.tail);
    }

    /// [`Table::count`], and the entry's index when the key is (now) held.
    fn count_at(
        &mut self,
        key: &str,
        label: Option<&str>,
        hash: u64,
        event: Event,
    ) -> Option<usize> {
        let w = event.weight();
        self.total += w;
        let found = self
            .index
            .find(hash, |&i| *self.entries[i as usize].key == *key)
            .copied();
        let i = match found {
            Some(i) => i as usize,
            None if w == 0 => return None,
            None if self.entries.len() < self.capacity => self.push(key, hash),
            None => self.replace_least(key, hash),
        };
        let e = &mut self.entries[i];
        // The label is copied once per entry (or when the shown form changed): nothing
        // is allocated for a key already labelled, nor without `show_values`.
        if let Some(l) = label
            && e.label.as_deref() != Some(l)
        {
            e.label = Some(l.into());
        }
        e.weight += w;
        match event {
            Event::Denied => e.denied += 1,
            Event::ShadowDenied => e.shadow_denied += 1,
            Event::Allowed => e.allowed += 1,
            Event::Request => {}
        }
        if w > 0 {
            self.sift_down(self.entries[i].slot as usize);
        }
        Some(i)
    }

    /// A new entry at weight 0 (the caller adds the event's weight).
    fn push(&mut self, key: &str, hash: u64) -> usize {
        let i = self.entries.len();
        let slot = self.heap.len();
        self.entries.push(Entry {
            key: key.into(),
            label: None,
            hash,
            weight: 0,
            error: 0,
            denied: 0,
            shadow_denied: 0,
            allowed: 0,
            slice: 0,
            in_slice: 0,
            peak: 0,
            prev_in_slice: 0,
            peak_pair: 0,
            head: 0,
            tail: 0,
            slot: slot as u32,
        });
        self.heap.push(i as u32);
        self.index
            .insert_unique(hash, i as u32, |&j| self.entries[j as usize].hash);
        // Weight 0 is the least: the new entry is the heap's root.
        self.sift_up(slot);
        i
    }

    /// The least entry becomes `key`'s, inheriting its weight as error.
    fn replace_least(&mut self, key: &str, hash: u64) -> usize {
        let i = self.heap[0] as usize;
        let old_hash = self.entries[i].hash;
        if let Ok(found) = self.index.find_entry(old_hash, |&j| j as usize == i) {
            found.remove();
        }
        let e = &mut self.entries[i];
        e.key = key.into();
        e.label = None;
        e.hash = hash;
        e.error = e.weight;
        (e.denied, e.shadow_denied, e.allowed) = (0, 0, 0);
        (e.slice, e.in_slice, e.peak) = (0, 0, 0);
        (e.prev_in_slice, e.peak_pair, e.head, e.tail) = (0, 0, 0, 0);
        self.evicted = true;
        let entries = &self.entries;
        self.index
            .insert_unique(hash, i as u32, |&j| entries[j as usize].hash);
        i
    }

    fn weight_at(&self, slot: usize) -> u64 {
        self.entries[self.heap[slot] as usize].weight
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.entries[self.heap[a] as usize].slot = a as u32;
        self.entries[self.heap[b] as usize].slot = b as u32;
    }

    fn sift_up(&mut self, mut slot: usize) {
        while slot > 0 {
            let parent = (slot - 1) / 2;
            if self.weight_at(parent) <= self.weight_at(slot) {
                break;
            }
            self.swap(parent, slot);
            slot = parent;
        }
    }

    fn sift_down(&mut self, mut slot: usize) {
        let n = self.heap.len();
        loop {
            let (l, r) = (2 * slot + 1, 2 * slot + 2);
            let mut least = slot;
            if l < n && self.weight_at(l) < self.weight_at(least) {
                least = l;
            }
            if r < n && self.weight_at(r) < self.weight_at(least) {
                least = r;
            }
            if least == slot {
                return;
            }
            self.swap(least, slot);
            slot = least;
        }
    }
}
