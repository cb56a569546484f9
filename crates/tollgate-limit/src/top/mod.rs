//! Who is being limited, live: per policy, a bounded summary of the keys this node denied
//! (and would have denied in shadow mode) over the last minute and fifteen minutes. The
//! limit step's last act (`check/report.rs`) records every decision here, whatever its site
//! decided it (local, split, central, lease, owner, gossip); the admin API reads it
//! (`GET /limits/{policy}/top`, `GET /shadow`).
//!
//! Per policy: a ring of sixteen per-minute Space-Saving tables of [`CAPACITY`] keys
//! (`minutes.rs`, `table.rs`) ranked by denials plus shadow denials, each with a
//! HyperLogLog of the keys denied (`hll.rs`); every decision's allowed count and key, for
//! the keys seen (`seen.rs`); for a policy a route runs in shadow mode, a second ring ranked
//! by requests, whose per-key peaks (the most requests in one period) give the suggested
//! limits (`view.rs`). A query merges the window's minutes (`merge.rs`).
//!
//! What it costs a request: every decision hashes its key once and writes two atomics
//! (`seen.rs`; one when its thread's last decision of the policy was the same key in the
//! same minute); an allowed decision of an enforcing policy then reads one more atomic and
//! returns unless the policy denied something this minute; then, and on every denial, the
//! key is looked up under the policy's lock (no allocation unless a denied key enters the
//! table). Requests of shadow policies are all counted.
//!
//! Every summary counts a key by its stored key, what the limiter counts (the same before
//! and after a reload toggling `show_values`); a policy with `show_values` also hands the
//! key as shown (`Ask::shown`: the values in clear), which the tables keep as the entry's
//! label for the views to print and `?value=` to match.

mod hll;
mod means;
mod merge;
mod minutes;
mod peaks;
mod seen;
mod table;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_suggest;
mod view;

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use hashbrown::DefaultHashBuilder;

use super::clock::{Clock, Nanos};
use super::metrics::PolicyOutcome;
use super::policy::PolicyRuntime;
use crate::spec::{AlgorithmName, Mode};
use minutes::{MINUTE, Minutes};
use seen::Seen;
use table::{Event, Slice};
pub use view::{KeyCount, ShadowPolicy, ShadowView, ShadowWindow, TopK, TopView};

/// Which keys an answer lists when the operator looks one value up (`?value=`): `None`
/// lists every key.
pub type Lookup<'a> = Option<&'a dyn Fn(&str) -> bool>;

/// A policy's key matcher for a looked-up value (`Limiter::lookup`).
pub type Matcher = Box<dyn Fn(&str) -> bool>;

/// Keys per minute table. A window's counts are each at most `total / CAPACITY` below the
/// truth (0.2 % of the window's denials), and any key above that share is listed.
pub const CAPACITY: usize = 512;

/// The windows a query may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// The current minute and the one before.
    OneMinute,
    /// The current minute and the fifteen before.
    FifteenMinutes,
}

impl Window {
    /// `1m` or `15m`.
    pub fn parse(s: &str) -> Option<Window> {
        match s {
            "1m" => Some(Window::OneMinute),
            "15m" => Some(Window::FifteenMinutes),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Window::OneMinute => "1m",
            Window::FifteenMinutes => "15m",
        }
    }

    /// Whole minutes back from the current one.
    fn back(self) -> u64 {
        match self {
            Window::OneMinute => 1,
            Window::FifteenMinutes => 15,
        }
    }
}

/// Why a summary cannot be shown.
#[derive(Debug, thiserror::Error)]
pub enum TopError {
    #[error("no policy named `{0}`")]
    NoPolicy(String),
}

/// One policy's summaries.
pub(super) struct Summary {
    rings: Mutex<Rings>,
    /// Every decision: allowed requests and keys seen (no lock).
    seen: Seen,
    /// The minute (plus one) of the policy's latest denial: an allowed decision looks its
    /// key up only during that minute, when the table may hold it.
    active: AtomicU64,
}

struct Rings {
    /// Ranked by denials and shadow denials.
    denials: Minutes,
    /// Ranked by requests: filled by shadow asks only (its tables grow when used).
    requests: Minutes,
    /// When counting began (the clock's reading): a window never spans before it.
    since: Nanos,
}

impl Summary {
    fn new(since: Nanos) -> Self {
        Summary {
            rings: Mutex::new(Rings {
                denials: Minutes::new(CAPACITY),
                requests: Minutes::new(CAPACITY),
                since,
            }),
            seen: Seen::default(),
            active: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Rings> {
        // A panic under this lock leaves counts, never a broken invariant worth refusing.
        self.rings.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What a limiter's summaries are built from: the clock, the hasher the tables' entries
/// were hashed with, and each policy's summary by name (empty at start; a reload's keeps
/// every policy's that keeps its name).
pub struct Seed {
    clock: Arc<dyn Clock>,
    hasher: DefaultHashBuilder,
    kept: Vec<(Arc<str>, Arc<Summary>)>,
}

impl Seed {
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Seed {
            clock,
            hasher: DefaultHashBuilder::default(),
            kept: Vec::new(),
        }
    }
}

/// Every policy's summary, as one limiter counts them.
pub struct TopKeys {
    clock: Arc<dyn Clock>,
    hasher: DefaultHashBuilder,
    /// Per limiter policy (tier variants too): its summary's index (a variant counts under
    /// its policy).
    slot: Vec<usize>,
    summaries: Vec<Arc<Summary>>,
    /// Per summary: the policy's name, limit and period, and whether a route runs it in
    /// shadow mode.
    policies: Vec<Described>,
}

struct Described {
    name: Arc<str>,
    limit: u64,
    period: Duration,
    /// The slices of the clock a shadow key's peak is counted in: the period, or a minute
    /// when the period is longer (or zero: concurrency).
    slice: Nanos,
    algorithm: AlgorithmName,
    /// Its keys are recorded with `show_values` parts in clear.
    shows: bool,
    shadow: bool,
}

impl TopKeys {
    /// One summary per configured policy; `shadow(i)`: a route runs policy `i` in shadow.
    pub fn new(seed: Seed, policies: &[PolicyRuntime], shadow: impl Fn(usize) -> bool) -> Self {
        let now = seed.clock.now();
        let mut described: Vec<Described> = Vec::new();
        let mut summaries = Vec::new();
        let mut slot = Vec::with_capacity(policies.len());
        for p in policies {
            if let Some(i) = described.iter().position(|d| d.name == p.label) {
                slot.push(i);
                described[i].shadow |= shadow(p.index);
                continue;
            }
            slot.push(described.len());
            let kept = seed.kept.iter().find(|(n, _)| *n == p.label);
            summaries.push(kept.map_or_else(|| Arc::new(Summary::new(now)), |k| k.1.clone()));
            let period = super::clock::duration_to_nanos(p.spec.period);
            described.push(Described {
                name: p.label.clone(),
                limit: u64::from(p.spec.limit.get()),
                period: p.spec.period,
                slice: if period == 0 {
                    MINUTE
                } else {
                    period.min(MINUTE)
                },
                algorithm: p.spec.algorithm,
                shows: !p.spec.show_values.is_empty(),
                shadow: shadow(p.index),
            });
        }
        TopKeys {
            clock: seed.clock,
            hasher: seed.hasher,
            slot,
            summaries,
            policies: described,
        }
    }

    /// What a reloaded limiter's summaries start from: these.
    pub fn seed(&self) -> Seed {
        Seed {
            clock: self.clock.clone(),
            hasher: self.hasher.clone(),
            kept: self
                .policies
                .iter()
                .zip(&self.summaries)
                .map(|(d, s)| (d.name.clone(), s.clone()))
                .collect(),
        }
    }

    /// Count one decision of limiter policy `policy` for the stored key `key`, shown as
    /// `shown` when the policy shows values (see the module), asked in `mode`.
    pub fn record(
        &self,
        policy: usize,
        key: &str,
        shown: Option<&str>,
        outcome: PolicyOutcome,
        mode: Mode,
    ) {
        let i = self.slot[policy];
        let summary = &self.summaries[i];
        let shadow = mode == Mode::Shadow;
        let event = match outcome {
            PolicyOutcome::Allow => Event::Allowed,
            PolicyOutcome::Deny => Event::Denied,
            PolicyOutcome::ShadowDeny => Event::ShadowDenied,
        };
        let now = self.clock.now();
        let minute = now / MINUTE;
        let hash = self.hasher.hash_one(key);
        summary.seen.note(minute, hash, event == Event::Allowed);
        if event == Event::Allowed && !shadow {
            let active = summary.active.load(Ordering::Relaxed);
            if active == 0 || active != minute + 1 {
                return;
            }
        }
        let mut rings = summary.lock();
        rings.denials.at(minute).count(key, shown, hash, event);
        if shadow {
            let at = slice_of(now, self.policies[i].slice);
            (rings.requests.at(minute)).count_request(key, shown, hash, at);
        }
        drop(rings);
        if event != Event::Allowed {
            summary.active.store(minute + 1, Ordering::Relaxed);
        }
    }

    fn index(&self, policy: &str) -> Result<usize, TopError> {
        self.policies
            .iter()
            .position(|d| &*d.name == policy)
            .ok_or_else(|| TopError::NoPolicy(policy.to_string()))
    }

    /// `policy`'s `n` keys most denied (enforcing and shadow denials) in `window`; with
    /// `lookup`, only the keys it matches.
    pub fn top(
        &self,
        policy: &str,
        window: Window,
        n: usize,
        lookup: Lookup<'_>,
    ) -> Result<TopView, TopError> {
        let i = self.index(policy)?;
        let now = self.clock.now();
        let summary = &self.summaries[i];
        let seen = summary.seen.window(now / MINUTE, window.back());
        let rings = summary.lock();
        let d = &self.policies[i];
        Ok(view::top(d, &rings, &seen, now, window, n, lookup))
    }

    /// Every policy a route runs in shadow mode, both windows; `lookup(policy)` says which
    /// keys of a policy to list (every one when `None`).
    pub fn shadow(&self, lookup: &dyn Fn(&str) -> Option<Matcher>) -> ShadowView {
        let now = self.clock.now();
        let policies = self
            .policies
            .iter()
            .zip(&self.summaries)
            .filter(|(d, _)| d.shadow)
            .map(|(d, s)| {
                let matcher = lookup(&d.name);
                view::shadow(d, s, now, matcher.as_deref())
            })
            .collect();
        ShadowView { policies }
    }

    /// Keys held in `policy`'s tables, both rings, every minute (tests, benches).
    pub fn keys_held(&self, policy: &str) -> Result<usize, TopError> {
        let rings = self.summaries[self.index(policy)?].lock();
        Ok(rings.denials.keys_held() + rings.requests.keys_held())
    }
}

impl super::Limiter {
    /// `GET /limits/{policy}/top`: see [`TopKeys::top`].
    pub fn top_keys(&self, policy: &str, window: Window, n: usize) -> Result<TopView, TopError> {
        self.sites().top.top(policy, window, n, None)
    }

    /// `GET /limits/{policy}/top?value=V`: the keys of `policy` one of whose sent values
    /// (a `form:`, `json:`, `query:`, `header:`, `cookie:`, `jwt:` part or the account) is
    /// `value`, found by its keyed hash — or in clear, for a part the policy shows.
    pub fn top_keys_of(
        &self,
        policy: &str,
        window: Window,
        n: usize,
        value: &str,
    ) -> Result<TopView, TopError> {
        let lookup = self.lookup(policy, value);
        self.sites().top.top(policy, window, n, Some(&*lookup))
    }

    /// `GET /shadow`: every policy in shadow mode, its would-be denials and suggestions.
    pub fn shadow_summary(&self) -> ShadowView {
        self.sites().top.shadow(&|_| None)
    }

    /// `GET /shadow?value=V`: as [`Limiter::shadow_summary`], each policy's keys only those
    /// with `value` ([`Limiter::top_keys_of`]).
    pub fn shadow_summary_of(&self, value: &str) -> ShadowView {
        self.sites()
            .top
            .shadow(&|policy| Some(self.lookup(policy, value)))
    }

    /// Whether a key of `policy` (stored, or its shown label) holds `value` in a part.
    fn lookup(&self, policy: &str, value: &str) -> Matcher {
        let spec = self.sites().policies.iter().find(|p| &*p.label == policy);
        let needles = spec.map_or_else(Vec::new, |p| self.keys().needles(&p.spec, value));
        Box::new(move |key: &str| needles.iter().any(|n| holds(key, n)))
    }

    /// Keys the top-keys tables of `policy` hold (bounded by 2 × 16 × [`CAPACITY`]).
    pub fn top_keys_held(&self, policy: &str) -> Result<usize, TopError> {
        self.sites().top.keys_held(policy)
    }
}

/// The slice of length `len` that `now` falls in, and whether it is one of its minute's
/// first two or last two (what a window straddling the minute's edge may hold).
fn slice_of(now: Nanos, len: Nanos) -> Slice {
    let slice = now / len;
    let start = now / MINUTE * MINUTE;
    Slice {
        slice,
        head: slice <= start / len + 1,
        tail: slice + 1 >= (start + MINUTE - 1) / len,
    }
}

/// Whether `key` has the part `needle` (`:TAG:VALUE`) whole: followed by `:` or its end.
pub(crate) fn holds(key: &str, needle: &str) -> bool {
    key.match_indices(needle).any(|(at, _)| {
        let rest = &key[at + needle.len()..];
        rest.is_empty() || rest.starts_with(':')
    })
}
