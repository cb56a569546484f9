//! The `tollgate` binary's other commands as users run them: `check` on every fixture,
//! `serve` under SIGTERM, `demo`, `replay` (logs, counts, its own access log) and
//! `simulate` (designs, matrix, peers, the fleet bench's shape).

#[path = "../common/mod.rs"]
mod common;

mod check_messages;
mod check_missing_key;
mod cli;
mod drain;
mod replay;
mod replay_count;
mod replay_own_log;
mod simulate;
mod simulate_cli;
mod simulate_fleet;
mod simulate_matrix;
mod simulate_peer;
