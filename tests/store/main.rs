//! The Redis store itself: deadlines, faults (down, blackholed, slow, resetting), recovery,
//! Sentinel, TLS and ACL users, the `local` fallback's debt, and the test harness's own
//! real `redis-server` processes and fault proxy.

#[path = "../common/mod.rs"]
mod common;

mod fallback_debt;
mod fallback_repay;
mod harness;
mod store_deadline;
mod store_faults;
mod store_recovery;
mod store_sentinel;
mod store_tls;
mod store_warm;
