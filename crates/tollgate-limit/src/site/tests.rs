//! A decision site written as a newcomer would write one: a step that implements
//! [`DecisionSite`], walked in front of the limiter's own sites (`site::WALK`). It denies
//! every other request it sees, so the tests can tell that the walk asks it, in its place in
//! the list, and that the sites after it spend nothing for a request it denied.

use std::net::{IpAddr, Ipv4Addr};
use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::registry::Registry;

use crate::ask::{Ask, Decided};
use crate::check::{Check, Stop};
use crate::clock::ManualClock;
use crate::handle::tests::spec::{policy, spec};
use crate::limiter::Limiter;
use crate::site::{DecisionSite, Sites, WALK};
use crate::spec::Site;

/// Denies every second request it sees (its own state: a count), whatever its policies.
#[derive(Default)]
struct EveryOther {
    seen: AtomicU64,
}

impl DecisionSite for EveryOther {
    /// It decides in the walk, so a request with any ask takes the walk.
    fn waits(&self, _: &Sites, _: &Ask) -> bool {
        true
    }

    async fn decide(&self, check: &mut Check<'_>) -> ControlFlow<Stop> {
        if self.seen.fetch_add(1, Ordering::Relaxed) % 2 == 1 {
            for ask in &mut check.asks {
                ask.decided = Some(Decided::denied(1_000_000_000, 0, 0));
            }
        }
        check.go_on()
    }
}

/// A limiter on the memory store whose route 0 asks one local policy of `limit` a minute.
fn limiter(limit: u32) -> Limiter {
    let clock = ManualClock::new();
    clock.set(1_000_000_000);
    let policies = vec![policy("per_ip", limit, Site::Local)];
    let spec = spec(policies, None, std::time::Duration::from_secs(1));
    Limiter::new(spec, Arc::new(clock), &mut Registry::default()).expect("a valid spec")
}

/// Which of `n` requests from one client `sites` admits.
async fn admitted<S: DecisionSite>(l: &Limiter, sites: &S, n: usize) -> Vec<bool> {
    let client = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(l.check_through(0, client, sites).await.admitted());
    }
    out
}

/// The test site in front of the limiter's own: it denies every other request, and a
/// request it denies spends nothing at the local site (its denial stops the walk) — the
/// local policy's 4 cells last 8 requests, then the local step denies too.
#[tokio::test(flavor = "current_thread")]
async fn a_site_of_its_own_decides_in_its_place_in_the_walk() {
    let sites = (EveryOther::default(), WALK);
    let got = admitted(&limiter(4), &sites, 10).await;
    let (t, f) = (true, false);
    assert_eq!(got, [t, f, t, f, t, f, t, f, f, f]);
}

/// Without it, the same limiter admits the local policy's 4 cells in a row: what the test
/// above sees is the test site's doing.
#[tokio::test(flavor = "current_thread")]
async fn without_it_the_walk_is_the_limiters_own() {
    let got = admitted(&limiter(4), &WALK, 6).await;
    let (t, f) = (true, false);
    assert_eq!(got, [t, t, t, t, f, f]);
}
