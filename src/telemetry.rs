//! Logging setup: structured `tracing` output, text for people or JSON for collectors,
//! level from `RUST_LOG` (default `info`; the access log is target `tollgate::access`).
//!
//! The access log is buffered: its lines gather in memory and reach stderr in one write
//! when the buffer fills or its flush interval passes (and when the process stops), like
//! Envoy's file access log or nginx's `access_log … buffer= flush=`. Why: unbuffered, each
//! request cost one `write(2)` on its worker — about a tenth of a proxied request's CPU
//! (perf on `benches/central_cost.sh`, 27.4 against 24.6 µs a request without the log).
//! Every other line (start-up, warnings, errors) is written at once.
//!
//! Written by hand rather than with `tracing-appender`'s non-blocking writer: that one
//! hands each line to a writer thread over a channel and wakes the thread for it, a
//! cross-thread wake per request where this costs a copy under an uncontended lock.

use std::io::{self, IsTerminal, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

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

/// Writes what the access buffer holds when dropped: keep it alive until the process ends.
#[must_use = "dropping the guard flushes the access log: hold it until exit"]
pub struct LogGuard(());

impl Drop for LogGuard {
    fn drop(&mut self) {
        flush_access();
    }
}

/// Install the global subscriber; call once, first thing in `main`. `default`: the level
/// when `RUST_LOG` is unset (`info` for the gateway, `warn` for commands that print their
/// own output). `access`: buffer the access log (`None`: write it line by line).
pub fn init(format: LogFormat, default: &str, access: Option<AccessBuffer>) -> LogGuard {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    if let Some(a) = access.filter(|a| a.bytes > 0) {
        ACCESS_LIMIT.store(a.bytes, Ordering::Relaxed);
        let flush = a.flush;
        // A thread of its own so that lines of a quiet gateway still leave within `flush`
        // (no worker may be awake to do it). If it cannot start, write line by line.
        let started = std::thread::Builder::new()
            .name("tollgate-log".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(flush);
                    flush_access();
                }
            });
        if started.is_err() {
            ACCESS_LIMIT.store(0, Ordering::Relaxed);
        }
    }
    // Colours only for a person at a terminal: in a file or a collector the escape codes
    // are noise (and were a twentieth of a proxied request's CPU, perf).
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(io::stderr().is_terminal())
        .with_writer(Writers);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
    LogGuard(())
}

/// Bytes of access log gathered before a write; 0 until `init` buffers it.
static ACCESS_LIMIT: AtomicUsize = AtomicUsize::new(0);

/// The access lines not yet written, whole lines only (the formatter hands each event over
/// in one `write_all`).
static ACCESS: Mutex<Vec<u8>> = Mutex::new(Vec::new());

fn access() -> MutexGuard<'static, Vec<u8>> {
    ACCESS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Write what the access buffer holds. The lock is held across the write so that lines
/// reach stderr in the order they were logged.
fn flush_access() {
    write_out(&mut access());
}

/// Write `buf` to stderr and empty it (keeping its capacity), under the caller's lock.
fn write_out(buf: &mut Vec<u8>) {
    if !buf.is_empty() {
        // Nowhere to report a failed log write; the lines are dropped, as stderr would.
        let _ = io::stderr().write_all(buf);
        buf.clear();
    }
}

/// Picks each event's writer: access lines to the buffer, the rest straight to stderr.
struct Writers;

impl<'a> MakeWriter<'a> for Writers {
    type Writer = Line;

    fn make_writer(&'a self) -> Line {
        Line::Direct
    }

    fn make_writer_for(&'a self, meta: &Metadata<'_>) -> Line {
        if meta.target() == ACCESS_TARGET && ACCESS_LIMIT.load(Ordering::Relaxed) > 0 {
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
                let mut buf = access();
                buf.extend_from_slice(line);
                if buf.len() >= ACCESS_LIMIT.load(Ordering::Relaxed) {
                    write_out(&mut buf);
                }
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
