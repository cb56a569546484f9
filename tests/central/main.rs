//! The central site on a real Redis (single and Cluster): coalesced checks, deny caching,
//! refunds, Cluster slots and debts, and the keys every script touches (`check.lua` against
//! the Rust algorithms is the limiter's own test: `crates/tollgate-limit/tests/scripts/`).

#[path = "../common/mod.rs"]
mod common;

mod central;
mod central_batch;
mod central_fleet;
mod central_wrong_answers;
mod check_edges;
mod cluster_debts;
mod cluster_refund;
mod cluster_reservation;
mod deny_cache;
mod refund_once;
