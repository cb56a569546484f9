//! Bounds on a policy's durations: validation refuses a period outside them, and the
//! algorithms rely on it (no timestamp sum near `u64` overflow).

use std::time::Duration;

/// The shortest accepted period.
pub const MIN_PERIOD: Duration = Duration::from_millis(1);

/// The longest accepted period or delay: keeps every timestamp sum far from
/// `u64` overflow while covering any real quota.
pub const MAX_PERIOD: Duration = Duration::from_secs(10 * 365 * 24 * 60 * 60);
