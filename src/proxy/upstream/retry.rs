//! Step 5: whether a request that failed upstream is sent again, and after how long.
//!
//! Two kinds of retry, with different rules:
//! - a request that **never left** (no connection could be made) goes to the next URL at
//!   once, whatever its method, as it always has: no backend saw it, so nothing is done
//!   twice, and the retry budget is not charged;
//! - a request that **was sent** (it broke before the answer, or the answer's status is
//!   in `retry_on`) is sent again only when its method is idempotent (RFC 9110 §9.2.2),
//!   it has no body (a streamed body cannot be replayed), `retries` allows one more, the
//!   budget has room (at most `retry_budget_percent` of requests are retries, as Envoy's
//!   `retry_budget` and Finagle's), and the wait fits before the upstream timeout.
//!
//! The limit step ran once, before any of this: a retried request is charged once by every
//! policy, and `count` policies settle on the final answer's status.

use std::time::Duration;

use http::{HeaderMap, Method, header};

use crate::config::Retry;

/// Methods a retry cannot turn into a second effect (RFC 9110 §9.2.2).
pub(super) fn idempotent(m: &Method) -> bool {
    matches!(
        *m,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}

/// The wait before retry number `n` (0 for the first): the backoff doubled `n` times, at
/// most 10× the base, jittered into its upper half (so retries of a burst spread out
/// without any going at once); never sooner than the answer's `Retry-After`.
pub(super) fn wait(retry: &Retry, n: u32, answer: Option<&HeaderMap>) -> Duration {
    let base = retry.backoff;
    let cap = (base.saturating_mul(1 << n.min(16))).min(base.saturating_mul(10));
    let half = cap / 2;
    let jittered = half + half.mul_f64(fastrand::f64());
    answer
        .and_then(retry_after)
        .map_or(jittered, |after| after.max(jittered))
}

/// The longest `Retry-After` taken as it is: any wait past the upstream timeout means "no
/// retry" alike, and an upstream's `18446744073709551615` must not overflow the clock
/// arithmetic that compares the wait with the deadline.
const LONGEST_AFTER: Duration = Duration::from_secs(86_400);

/// An upstream's `Retry-After` (RFC 9110 §10.2.3): seconds, or an HTTP date; at most a day.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let v = headers.get(header::RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs).min(LONGEST_AFTER));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(
        at.duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO)
            .min(LONGEST_AFTER),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn retry(ms: u64) -> Retry {
        Retry {
            retries: 2,
            on_status: vec![503],
            budget_ratio: 0.2,
            budget_min_per_second: 0,
            backoff: Duration::from_millis(ms),
        }
    }

    #[test]
    fn idempotent_methods() {
        for m in [Method::GET, Method::HEAD, Method::PUT, Method::DELETE] {
            assert!(idempotent(&m), "{m}");
        }
        for m in [Method::POST, Method::PATCH, Method::CONNECT] {
            assert!(!idempotent(&m), "{m}");
        }
    }

    #[test]
    fn backoff_doubles_with_jitter_and_a_cap() {
        let r = retry(100);
        for _ in 0..100 {
            let first = wait(&r, 0, None);
            assert!((50..=100).contains(&first.as_millis()), "{first:?}");
            let third = wait(&r, 2, None);
            assert!((200..=400).contains(&third.as_millis()), "{third:?}");
            let far = wait(&r, 30, None);
            assert!(
                (500..=1000).contains(&far.as_millis()),
                "capped at 10×: {far:?}"
            );
        }
    }

    #[test]
    fn retry_after_is_a_floor() {
        let r = retry(10);
        let mut h = HeaderMap::new();
        h.insert(header::RETRY_AFTER, "2".parse().unwrap());
        assert_eq!(wait(&r, 0, Some(&h)), Duration::from_secs(2));
        let later = std::time::SystemTime::now() + Duration::from_secs(30);
        h.insert(
            header::RETRY_AFTER,
            httpdate::fmt_http_date(later).parse().unwrap(),
        );
        let w = wait(&r, 0, Some(&h));
        assert!((28..=30).contains(&w.as_secs()), "{w:?}");
        // An upstream's absurd value is a day: later arithmetic on it cannot overflow.
        h.insert(header::RETRY_AFTER, u64::MAX.to_string().parse().unwrap());
        assert_eq!(wait(&r, 0, Some(&h)), LONGEST_AFTER);
        let _ = tokio::time::Instant::now() + wait(&r, 0, Some(&h));
        h.insert(header::RETRY_AFTER, "soon".parse().unwrap());
        assert!(wait(&r, 0, Some(&h)) <= Duration::from_millis(10));
    }
}
