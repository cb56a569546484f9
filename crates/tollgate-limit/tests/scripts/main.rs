//! The limiter's Lua on a real `redis-server` (free loopback port, `common/redis.rs`), as
//! the library calls it, with nothing of the gateway: `check.lua` against the Rust
//! algorithms (`check/`), `lease.lua` against the Rust grant rule (`lease/`), and
//! `membership.lua`'s count (`membership.rs`). `cargo test -p tollgate-limit --features
//! test-util --test scripts` (the scripts are exported with `test-util` alone).

mod common;

mod check;
mod lease;
mod membership;
