//! The lease site and the L/N split: node books, batches, calm keys, long cells, returns,
//! faults and outages with real processes, and the split when membership or a reload
//! changes N (`lease.lua` against the Rust grant rule is the limiter's own test:
//! `crates/tollgate-limit/tests/scripts/`).

#[path = "../common/mod.rs"]
mod common;

mod idle_beats;
mod lease_book;
mod lease_bounds;
mod lease_fair;
mod lease_faults;
mod lease_long;
mod lease_returns;
mod lease_returns_fleet;
mod lease_returns_retry;
mod lease_split;
mod lease_split_outage;
mod split_membership;
