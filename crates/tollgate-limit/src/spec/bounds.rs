//! Bounds on a policy's durations: validation refuses a period outside them, and the
//! algorithms rely on it (no timestamp sum near `u64` overflow).

use std::time::Duration;

/// The shortest accepted period.
pub const MIN_PERIOD: Duration = Duration::from_millis(1);

/// The longest accepted period or delay: keeps every timestamp sum far from
/// `u64` overflow while covering any real quota. Ten years as the config's durations
/// spell them: humantime's year is 365.25 days, so `"10y"` (315 576 000 s) is the bound
/// itself, and `"3650d"` is within it.
pub const MAX_PERIOD: Duration = Duration::from_secs(10 * 31_557_600);
