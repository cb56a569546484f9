//! Logging setup: structured `tracing` output, text for people or JSON for collectors,
//! level from `RUST_LOG` (default `info`; the access log is target `tollgate::access`).

use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Install the global subscriber; call once, first thing in `main`. `default`: the level
/// when `RUST_LOG` is unset (`info` for the gateway, `warn` for commands that print their
/// own output).
pub fn init(format: LogFormat, default: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}
