//! What a suggested limit means (`GET /shadow`'s `suggestion_means`, printed by the report
//! and the dashboard), a child of `top/mod.rs` read by `view.rs`: what the number counts,
//! true whether it was counted exactly or in windows aligned to the clock, then what it
//! does as each algorithm's limit.

use crate::spec::AlgorithmName;

/// `suggestion_means`: what the number counts, true in every window (exact, or a range
/// from aligned windows), then `$then`, what it does as the algorithm's limit.
macro_rules! counted {
    ($then:literal) => {
        concat!(
            "the next key's most requests in one period: exact when no more than a period was seen, else its busiest window aligned to the clock, the truth lying between it and suggested_limit_upper (a burst across a window's edge is split); ",
            $then
        )
    };
}

/// What a suggested limit means under `algorithm` (`GET /shadow`'s `suggestion_means`):
/// what the number counts (true in every window: exact, or a range from aligned windows),
/// then what it does as the algorithm's limit.
pub(super) fn means(algorithm: AlgorithmName) -> &'static str {
    match algorithm {
        AlgorithmName::Gcra | AlgorithmName::TokenBucket => {
            counted!(
                "set it as the limit and keep burst at it (the default): a key may send burst at once, then limit per period, so any one period admits at most burst + limit; a smaller burst refuses a key that sends its peak at once"
            )
        }
        AlgorithmName::SlidingWindow => {
            counted!(
                "the sliding window weighs the previous window in, so a key that sends its peak in each of two consecutive windows may be refused near their edge"
            )
        }
        AlgorithmName::LeakyBucket => {
            counted!(
                "the leaky bucket spaces requests period / limit apart, so a key sending its peak at once waits (up to max_delay) rather than passing at once"
            )
        }
        AlgorithmName::Concurrency => "no suggestion: concurrency counts requests in flight",
    }
}
