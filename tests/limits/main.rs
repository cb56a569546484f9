//! The limit step on one gateway: 429s and the RateLimit fields, key parts (and requests
//! lacking one), modes, exempt clients, tiers, what a request spends, the local site under
//! pressure and on a stale clock reading, upgrades holding concurrency, and the property
//! tests of the per-key algorithms.

#[path = "../common/mod.rs"]
mod common;

mod body_attacks;
mod body_keys;
mod exempt;
mod key_parts;
mod limit_keys;
mod limit_modes;
mod limits;
mod local_site;
mod local_stale_now;
mod missing_key;
mod prop_algorithms;
mod prop_decide_peek;
mod prop_next_after;
mod prop_stale_now;
mod ratelimit_fields;
mod spend;
mod tiers;
mod upgrade_limits;
