//! What the returns tests share (`lease_returns.rs`, `lease_returns_fleet.rs`): the quota,
//! and the window bound every schedule must keep.
#![allow(dead_code)]

use std::num::NonZeroU32;
use std::time::Duration;

use tollgate::limit::lease::LeaseParams;

pub const MS: u64 = 1_000_000;

pub fn params(per_second: u32, burst: u32, ttl_ms: u64) -> LeaseParams {
    let nz = |n| NonZeroU32::new(n).expect("non-zero");
    LeaseParams::new(
        nz(per_second),
        Duration::from_secs(1),
        nz(burst),
        Duration::from_millis(ttl_ms),
        Duration::from_millis(20),
        nz(1_000),
    )
    .expect("valid")
}

/// `(per_second, burst, ttl_ms)`.
pub type Quota = (u32, u32, u64);

/// Every window `[a, b]` of spends holds at most `burst + (b − a + ttl) · rate`.
pub fn within_the_bound(spent: &[u64], q: Quota) -> Result<(), String> {
    let (per_second, burst, ttl_ms) = q;
    let t_ns = 1_000_000_000 / u64::from(per_second);
    for (i, &a) in spent.iter().enumerate() {
        for (j, &b) in spent.iter().enumerate().skip(i) {
            let bound = u64::from(burst) + (b - a + ttl_ms * MS) / t_ns;
            if (j - i + 1) as u64 > bound {
                return Err(format!("{} spent in [{a}, {b}], bound {bound}", j - i + 1));
            }
        }
    }
    Ok(())
}

/// Rates whose `T` is a whole number of nanoseconds, so the model's conform times are the
/// coordinator's exactly.
pub const RATES: [u32; 6] = [100, 200, 250, 500, 1_000, 2_000];
