//! Configs as they are checked and reloaded: `check` refusing attack configs, reload over
//! `POST /reload` and `SIGHUP` (refusals, each policy's state across a reload), and the
//! book's promises (`docs/src/`: links, anchors and ```toml blocks that load), and the rate
//! limit service's envoyproxy/ratelimit YAML fixtures (`rls_fixtures.rs`).

#[path = "../common/mod.rs"]
mod common;

mod check_attacks;
mod docs;
mod docs_problem_types;
mod reload;
mod reload_refusals;
mod reload_state;
mod rls_fixtures;
