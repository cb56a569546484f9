//! What the replay counts while it runs: per route and policy, per minute, per denied key.
//! Plain counters updated once per request by `run.rs`; `report.rs` turns them into the
//! printed and JSON report at the end.

use hashbrown::HashMap;

use super::time::UnixNanos;

/// Nanoseconds in a minute: the bin of the busiest-minute figure and of the plot.
pub const MINUTE: i64 = 60_000_000_000;

/// Counters of one route.
#[derive(Debug, Clone, Default)]
pub struct RouteTally {
    /// Requests routed here.
    pub requests: u64,
    /// Admitted (forwarded).
    pub allowed: u64,
    /// Answered 429.
    pub denied: u64,
    /// Answered 400 after routing: an account value the gateway would find ambiguous.
    pub bad_request: u64,
    /// Answered 401: no account on a `require_account` route, or on a route with an
    /// account-keyed `on_missing_key = "deny"` policy.
    pub unauthorized: u64,
    /// Per policy of the route (in the route's order): (allowed, denied).
    pub policies: Vec<(u64, u64)>,
}

/// Requests and denials of one wall-clock minute.
#[derive(Debug, Clone)]
pub struct Minute {
    /// Minutes since the Unix epoch.
    pub minute: i64,
    pub requests: u64,
    /// Requests answered 429 in this minute.
    pub denied_requests: u64,
    /// Denials in this minute per policy (config order).
    pub denied: Vec<u64>,
}

/// Everything counted.
#[derive(Debug, Default)]
pub struct Tally {
    /// Requests replayed (lines that were requests).
    pub requests: u64,
    /// Refused 400 before routing (a path or request line the gateway refuses).
    pub bad_request: u64,
    /// No route: 404.
    pub no_route: u64,
    /// Lines stamped earlier than a line before them: decided at the clock's time.
    pub out_of_order: u64,
    /// Per route, config order.
    pub routes: Vec<RouteTally>,
    /// Denials per (policy index, key as production builds it).
    pub denied_keys: HashMap<(usize, String), u64>,
    /// Minutes in order (the clock never goes back), only those with requests.
    pub minutes: Vec<Minute>,
    /// First and last moment on the clock.
    pub first: Option<UnixNanos>,
    pub last: Option<UnixNanos>,
}

impl Tally {
    /// Counters for routes with these numbers of policies, in config order.
    pub fn new(routes: impl Iterator<Item = usize>) -> Self {
        Tally {
            routes: routes
                .map(|n| RouteTally {
                    policies: vec![(0, 0); n],
                    ..RouteTally::default()
                })
                .collect(),
            ..Tally::default()
        }
    }

    /// A request at `t` (the clock's time): counts it in its minute and returns that
    /// minute's bin, for its denials.
    pub fn request_at(&mut self, t: UnixNanos, policies: usize) -> &mut Minute {
        self.requests += 1;
        self.first.get_or_insert(t);
        self.last = Some(t);
        let minute = t.div_euclid(MINUTE);
        if self.minutes.last().is_none_or(|m| m.minute != minute) {
            self.minutes.push(Minute {
                minute,
                requests: 0,
                denied_requests: 0,
                denied: vec![0; policies],
            });
        }
        let bin = self.minutes.last_mut().expect("pushed above");
        bin.requests += 1;
        bin
    }

    /// The minute with the most requests (the earliest of equals).
    pub fn busiest_minute(&self) -> Option<&Minute> {
        self.minutes.iter().rev().max_by_key(|m| m.requests)
    }

    /// The `n` keys denied most often, most first (ties by policy, then key, so the
    /// output is stable).
    pub fn top_keys(&self, n: usize) -> Vec<(usize, &str, u64)> {
        let mut all: Vec<(usize, &str, u64)> = self
            .denied_keys
            .iter()
            .map(|((p, k), &c)| (*p, k.as_str(), c))
            .collect();
        all.sort_unstable_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)).then(a.1.cmp(b.1)));
        all.truncate(n);
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minutes_and_the_busiest_one() {
        let mut t = Tally::new([1].into_iter());
        for s in [0, 10, 61, 62, 63, 125, 126, 127] {
            t.request_at(s * 1_000_000_000, 1);
        }
        let counts: Vec<(i64, u64)> = t.minutes.iter().map(|m| (m.minute, m.requests)).collect();
        assert_eq!(counts, [(0, 2), (1, 3), (2, 3)]);
        assert_eq!(
            t.busiest_minute().map(|m| m.minute),
            Some(1),
            "the earliest of equals"
        );
        assert_eq!((t.first, t.last), (Some(0), Some(127_000_000_000)));
    }

    #[test]
    fn top_keys_are_sorted_and_cut() {
        let mut t = Tally::new([].into_iter());
        for (p, k, c) in [(0, "a", 3), (1, "b", 5), (0, "c", 3), (1, "d", 1)] {
            t.denied_keys.insert((p, k.to_owned()), c);
        }
        assert_eq!(t.top_keys(3), [(1, "b", 5), (0, "a", 3), (0, "c", 3)]);
    }
}
