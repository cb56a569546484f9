//! The command line's tools, which are not on the request path: `tollgate demo` (`demo/`),
//! `tollgate replay` (`replay/`) and `tollgate simulate` (`simulate/`). They live in the
//! library, as `tollgate::cli::…`, because tests and benches drive them directly
//! (`benches/replay.rs` times `replay::run`, `tests/cli/simulate_fleet.rs` runs the
//! simulator's designs on traces of its own); `main.rs` only dispatches to them.
//!
//! `simulate_args.rs` in this folder is the binary's, not the library's: `tollgate
//! simulate`'s options and their checks, with the command line's `anyhow` errors
//! (`main.rs` declares it). Nothing of the request path imports this module.

pub mod demo;
pub mod replay;
pub mod simulate;
