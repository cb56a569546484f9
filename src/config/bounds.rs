//! Bounds on configured durations, read by validation here and by the algorithms of the
//! limit step (which may import `config`; `config` imports nothing of `limit`).

use std::time::Duration;

/// The shortest accepted period.
pub const MIN_PERIOD: Duration = Duration::from_millis(1);

/// The longest accepted period or delay: keeps every timestamp sum far from
/// `u64` overflow while covering any real quota.
pub const MAX_PERIOD: Duration = Duration::from_secs(10 * 365 * 24 * 60 * 60);
