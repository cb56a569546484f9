//! The limiter's Lua on a real `redis-server` (free loopback port, `common/redis.rs`), as
//! the library calls it, with nothing of the gateway: `check.lua` against the Rust
//! algorithms (`check/`), `lease.lua` against the Rust grant rule (`lease/`), its rate
//! (`lease_rate.rs`), returns (`lease_returns.rs`) and long cells (`lease_long.rs`),
//! `membership.lua`'s count (`membership.rs`), and every script's keys declared
//! (`keys.rs`). `cargo test -p tollgate-limit --features
//! test-util --test scripts` (the scripts are exported with `test-util` alone).

mod common;

mod check;
mod keys;
mod lease;
mod lease_long;
mod lease_rate;
mod lease_returns;
mod membership;
