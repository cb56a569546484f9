//! The access log's sink (`telemetry`'s writer hands it every `tollgate::access` line):
//! lines gather in a buffer and leave in one write, to stderr or to the access-log file
//! (`serve --access-log`, `[server] access_log`), which [`reopen`] swaps for a fresh one at
//! the same path on SIGUSR1, as nginx does for logrotate.
//!
//! One lock holds the buffer and the file, and is held across each write and across a
//! reopen: a line logged while the file is being reopened waits for the new file, so a
//! rotation (`mv access.log access.log.1; kill -USR1`) loses no line and splits none.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

/// An access-log file that cannot be opened (at start, or at a reopen).
#[derive(Debug, thiserror::Error)]
#[error("cannot open `{}`: {source}", path.display())]
pub struct AccessFileError {
    pub path: PathBuf,
    #[source]
    pub source: io::Error,
}

/// The access log's file, opened for appending, and the path it is reopened by.
#[derive(Debug)]
pub struct AccessFile {
    path: PathBuf,
    file: File,
}

impl AccessFile {
    /// Open (or create, readable by the owner's group only: access lines name clients)
    /// `path` for appending. Appending keeps lines whole when logrotate's `copytruncate`
    /// or a second writer shares the file.
    pub fn open(path: &Path) -> Result<AccessFile, AccessFileError> {
        let mut options = std::fs::OpenOptions::new();
        options.append(true).create(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o640);
        let file = options.open(path).map_err(|source| AccessFileError {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(AccessFile {
            path: path.to_path_buf(),
            file,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Access lines go through this sink (it buffers, or writes to a file); false: each line
/// is written to stderr like any other.
pub(super) static ON: AtomicBool = AtomicBool::new(false);

/// Bytes gathered before a write; 0 writes each line at once.
static LIMIT: AtomicUsize = AtomicUsize::new(0);

/// The lines not yet written (whole lines only: the formatter hands each event over in one
/// `write_all`) and where they go.
struct Sink {
    buf: Vec<u8>,
    /// `None`: stderr.
    file: Option<AccessFile>,
}

static SINK: Mutex<Sink> = Mutex::new(Sink {
    buf: Vec::new(),
    file: None,
});

fn sink() -> MutexGuard<'static, Sink> {
    SINK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Route access lines through the sink: buffered by `bytes` (0: at once), into `file`
/// (`None`: stderr).
pub(super) fn install(bytes: usize, file: Option<AccessFile>) {
    LIMIT.store(bytes, Ordering::Relaxed);
    sink().file = file;
    ON.store(true, Ordering::Release);
}

/// Stop buffering (the flush thread could not start): lines are written at once.
pub(super) fn unbuffer() {
    LIMIT.store(0, Ordering::Relaxed);
}

/// Take one access line; written at once when the buffer is full (or unbuffered).
pub(super) fn push(line: &[u8]) {
    let mut sink = sink();
    sink.buf.extend_from_slice(line);
    if sink.buf.len() >= LIMIT.load(Ordering::Relaxed) {
        sink.write_out();
    }
}

/// Write what the buffer holds. The lock is held across the write so that lines reach
/// their file in the order they were logged.
pub(super) fn flush() {
    sink().write_out();
}

/// Flush the buffer to the file, then open the file anew by its path (logrotate has moved
/// the old one): `Ok(None)` when the access log has no file. A file that cannot be opened
/// leaves the old one in use, so no line is lost to a broken rotation.
pub fn reopen() -> Result<Option<PathBuf>, AccessFileError> {
    let mut sink = sink();
    sink.write_out();
    let Some(old) = &sink.file else {
        return Ok(None);
    };
    let new = AccessFile::open(&old.path)?;
    let path = new.path.clone();
    sink.file = Some(new);
    Ok(Some(path))
}

impl Sink {
    /// Write the buffer out and empty it (keeping its capacity).
    fn write_out(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        // Nowhere to report a failed log write; the lines are dropped, as stderr would.
        let _ = match &mut self.file {
            Some(f) => f.file.write_all(&self.buf),
            None => io::stderr().write_all(&self.buf),
        };
        self.buf.clear();
    }
}
