//! Lease books leave memory once spent (`lease/books.rs`, issue 47): a node's book count
//! follows the keys in use, not every key it has seen (before, books left only at
//! `max_keys`, a million per policy by default).

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tollgate_limit::clock::ManualClock;
use tollgate_limit::lease::{LeaseItem, LeaseParams, LeaseSite, Taken};

/// Five rounds of a thousand new keys, each sent one request, ten seconds apart on the
/// site's clock (the memory coordinator): the books of a round are spent by the next, and
/// the count falls back to about one round's instead of growing to five.
#[tokio::test]
async fn spent_books_leave_as_new_keys_come() {
    let clock = Arc::new(ManualClock::new());
    clock.set(1_000_000_000);
    let site = Arc::new(LeaseSite::memory(clock.clone()));
    let nz = |n| NonZeroU32::new(n).expect("non-zero");
    let ms = Duration::from_millis;
    let p = LeaseParams::new(nz(10), ms(1000), nz(5), ms(50), ms(20), nz(50)).expect("valid");
    let mut counts = Vec::new();
    for round in 0..5 {
        for i in 0..1_000 {
            let mut items = [LeaseItem {
                key: format!("ip:r{round}:{i}"),
                policy: 0,
                max_keys: 1_000_000,
                params: p,
                cost: 1,
                conformed: Taken::default(),
            }];
            let deadline = Instant::now() + Duration::from_secs(1);
            site.take(&mut items, deadline).await.expect("in-process");
        }
        counts.push(site.book_count());
        clock.advance(Duration::from_secs(10));
    }
    assert_eq!(counts[0], 1_000, "{counts:?}");
    assert!(
        counts.iter().all(|&c| c <= 1_500),
        "books of spent keys stayed: {counts:?}"
    );
}
