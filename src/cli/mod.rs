//! The binary's subcommands whose arguments need more than a dispatch: kept out of
//! `main.rs` so it reads as the list of commands, and out of the library (their errors are
//! `anyhow`, the command line's).

pub mod simulate;
