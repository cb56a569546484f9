//! The validation pass for the keys an operator runs the gateway by rather than limits
//! with: the request-id header, the access log's file, and the drain delay after SIGTERM.

use std::path::{Path, PathBuf};
use std::time::Duration;

use http::HeaderName;

use super::Validator;
use crate::config::load::relative_to;
use crate::config::raw::RawServer;

/// The longest `drain_delay`: a balancer notices a failing readiness probe within seconds,
/// and a delay past the orchestrator's kill deadline would only lose the drain itself.
const LONGEST_DRAIN_DELAY: Duration = Duration::from_secs(5 * 60);

/// Headers that already mean something to HTTP or to the gateway's forwarding: an id
/// written into one of them would change the request, not label it.
const TAKEN: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "te",
    "trailer",
    "upgrade",
    "keep-alive",
    "proxy-connection",
    "forwarded",
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-real-ip",
    "via",
    "traceparent",
    "tracestate",
];

/// The server's operations values, before they join `Server`.
pub(super) struct ServerOperations {
    pub request_id_header: HeaderName,
    pub access_log: Option<PathBuf>,
    pub drain_delay: Duration,
}

impl Validator {
    pub(super) fn server_operations(
        &mut self,
        s: &RawServer,
        origin: &Path,
    ) -> Option<ServerOperations> {
        let request_id_header = self.request_id_header(&s.request_id_header);
        let access_log = s
            .access_log
            .as_deref()
            .map(|f| self.log_file("server.access_log", origin, f));
        let drain_delay = self.drain_delay(&s.drain_delay);
        Some(ServerOperations {
            request_id_header: request_id_header?,
            access_log: access_log.map_or(Some(None), |f| f.map(Some))?,
            drain_delay: drain_delay?,
        })
    }

    fn request_id_header(&mut self, name: &str) -> Option<HeaderName> {
        const KEY: &str = "server.request_id_header";
        let Ok(header) = HeaderName::from_bytes(name.as_bytes()) else {
            self.fail(KEY, format!("`{name}` is not a header name"));
            return None;
        };
        if TAKEN.contains(&header.as_str()) {
            self.fail(
                KEY,
                format!("`{name}` already means something to HTTP or to forwarding: pick a header of its own, like \"x-request-id\""),
            );
            return None;
        }
        Some(header)
    }
}

impl Validator {
    /// A file the gateway will append to: its folder must exist (the file need not).
    /// `check` does not open it (that would create it); `serve` does, and says so if it
    /// cannot.
    fn log_file(&mut self, key: &str, origin: &Path, file: &str) -> Option<PathBuf> {
        if file.is_empty() {
            self.fail(key, "must name a file (leave it out to log to stderr)");
            return None;
        }
        let path = relative_to(origin, file);
        let folder = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if path.is_dir() {
            self.fail(key, format!("`{}` is a folder, not a file", path.display()));
            return None;
        }
        if !folder.is_dir() {
            self.fail(
                key,
                format!("the folder of `{}` does not exist", path.display()),
            );
            return None;
        }
        Some(path)
    }

    /// Zero is allowed (and the default): the listeners close at once, as before the key.
    fn drain_delay(&mut self, s: &str) -> Option<Duration> {
        const KEY: &str = "server.drain_delay";
        if matches!(humantime::parse_duration(s), Ok(d) if d.is_zero()) {
            return Some(Duration::ZERO);
        }
        let d = self.duration(KEY, s)?;
        if d > LONGEST_DRAIN_DELAY {
            self.fail(KEY, "must be at most 5 minutes (\"5m\")");
            return None;
        }
        Some(d)
    }
}
