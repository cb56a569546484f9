//! Logging setup: structured `tracing` output, text for people or JSON for collectors,
//! level from `RUST_LOG` (default `info`; the access log is target `tollgate::access`).
//!
//! The access log is buffered: its lines gather in memory and reach stderr in one write
//! when the buffer fills or its flush interval passes (and when the process stops), like
//! Envoy's file access log or nginx's `access_log … buffer= flush=`. Why: unbuffered, each
//! request cost one `write(2)` on its worker — about a tenth of a proxied request's CPU
//! (perf on `benches/central_cost.sh`, 27.4 against 24.6 µs a request without the log).
//! Every other line (start-up, warnings, errors) is written at once, to stderr. The
//! access log may have a file of its own instead (`serve --access-log`), reopened on
//! SIGUSR1 for log rotation: the sink is `telemetry/access.rs`.
//!
//! Written by hand rather than with `tracing-appender`'s non-blocking writer: that one
//! hands each line to a writer thread over a channel and wakes the thread for it, a
//! cross-thread wake per request where this costs a copy under an uncontended lock.

mod access;

use std::io::{self, IsTerminal, Write};
use std::sync::atomic::Ordering;
use std::time::Duration;

pub use access::{AccessFile, AccessFileError, reopen as reopen_access_log};

use tracing::Metadata;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

/// The target of the access log's events (`proxy::access_log`).
const ACCESS_TARGET: &str = "tollgate::access";

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// How the access log is buffered (`serve` only; every other command writes at once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccessBuffer {
    /// Bytes gathered before a write; 0 writes every line at once.
    pub bytes: usize,
    /// The longest a line waits in the buffer.
    pub flush: Duration,
}

/// Where the access log goes and how it is buffered (`serve` only).
#[derive(Debug)]
pub struct AccessLog {
    pub buffer: AccessBuffer,
    /// The access log's own file; `None` writes it to stderr with the other lines.
    pub file: Option<AccessFile>,
}

/// Writes what the access buffer holds when dropped: keep it alive until the process ends.
#[must_use = "dropping the guard flushes the access log: hold it until exit"]
pub struct LogGuard(());

impl Drop for LogGuard {
    fn drop(&mut self) {
        access::flush();
    }
}

/// Install the global subscriber; call once, first thing in `main`. `default`: the level
/// when `RUST_LOG` is unset (`info` for the gateway, `warn` for commands that print their
/// own output). `access`: buffer the access log, or give it a file (`None`: write it line
/// by line to stderr).
pub fn init(format: LogFormat, default: &str, access: Option<AccessLog>) -> LogGuard {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let mut ansi = io::stderr().is_terminal();
    if let Some(a) = access.filter(|a| a.buffer.bytes > 0 || a.file.is_some()) {
        // One formatter writes every line: a file must not get a terminal's escape codes.
        ansi &= a.file.is_none();
        access::install(a.buffer.bytes, a.file);
        if a.buffer.bytes > 0 {
            spawn_flusher(a.buffer.flush);
        }
    }
    // Colours only for a person at a terminal: in a file or a collector the escape codes
    // are noise (and were a twentieth of a proxied request's CPU, perf).
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(Writers);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
    LogGuard(())
}

/// A thread of its own so that lines of a quiet gateway still leave within `flush` (no
/// worker may be awake to do it). If it cannot start, write line by line.
fn spawn_flusher(flush: Duration) {
    let started = std::thread::Builder::new()
        .name("tollgate-log".into())
        .spawn(move || {
            loop {
                std::thread::sleep(flush);
                access::flush();
            }
        });
    if started.is_err() {
        access::unbuffer();
    }
}

/// Reopen the access log's file at each `reopens` (`tollgate serve` feeds it SIGUSR1),
/// until the channel closes. Without a file, a SIGUSR1 does nothing.
pub async fn reopen_access_log_on(mut reopens: tokio::sync::mpsc::Receiver<()>) {
    while reopens.recv().await.is_some() {
        // Blocking file work, and the access lock is held across it: off the workers.
        match tokio::task::spawn_blocking(reopen_access_log).await {
            Ok(Ok(Some(path))) => {
                tracing::info!(path = %path.display(), "SIGUSR1: access log reopened");
            }
            Ok(Ok(None)) => tracing::debug!("SIGUSR1: the access log has no file to reopen"),
            Ok(Err(e)) => {
                tracing::error!(error = %e, "SIGUSR1: access log not reopened; the old file is still written");
            }
            Err(e) => tracing::error!(error = %e, "SIGUSR1: reopening the access log failed"),
        }
    }
}

/// Picks each event's writer: access lines to their sink, the rest straight to stderr.
struct Writers;

impl<'a> MakeWriter<'a> for Writers {
    type Writer = Line;

    fn make_writer(&'a self) -> Line {
        Line::Direct
    }

    fn make_writer_for(&'a self, meta: &Metadata<'_>) -> Line {
        if meta.target() == ACCESS_TARGET && access::ON.load(Ordering::Acquire) {
            Line::Access
        } else {
            Line::Direct
        }
    }
}

/// Where one event's line goes.
enum Line {
    Direct,
    Access,
}

impl Write for Line {
    fn write(&mut self, line: &[u8]) -> io::Result<usize> {
        match self {
            Line::Direct => io::stderr().write(line),
            Line::Access => {
                access::push(line);
                Ok(line.len())
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Line::Direct => io::stderr().flush(),
            Line::Access => Ok(()),
        }
    }
}
