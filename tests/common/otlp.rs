//! A real OTLP/gRPC receiver (`otlp_receiver.py`: opentelemetry-proto's generated service
//! on grpcio) for the tracing tests: started on a free loopback port, killed by pid.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;

/// A running receiver; [`Receiver::spans`] stops it and returns what it was sent.
pub struct Receiver {
    child: Child,
    pub port: u16,
    lines: Option<JoinHandle<Vec<serde_json::Value>>>,
}

impl Receiver {
    pub fn start() -> Receiver {
        let mut child = Command::new("python3")
            .arg(super::repo_path("tests/common/otlp_receiver.py"))
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs (scripts/test.sh installs grpcio and opentelemetry-proto)");
        let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = out.next().and_then(Result::ok).unwrap_or_default();
        let port = first
            .strip_prefix("PORT ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("the OTLP receiver did not start: {first:?} (is `opentelemetry-proto` installed?)"));
        let lines = std::thread::spawn(move || {
            out.map_while(Result::ok)
                .map(|l| serde_json::from_str(&l).expect("a span as JSON"))
                .collect()
        });
        Receiver {
            child,
            port,
            lines: Some(lines),
        }
    }

    /// `[telemetry]` exporting to this receiver, with `extra` keys.
    pub fn table(&self, extra: &str) -> String {
        format!(
            "[telemetry]\notlp_endpoint = \"http://127.0.0.1:{}\"\n{extra}\n",
            self.port
        )
    }

    /// Every span received. Call after the gateway has stopped: its exporter flushed on the
    /// way out, and the receiver prints a span before it answers the export.
    pub fn spans(mut self) -> Vec<serde_json::Value> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.lines.take().unwrap().join().unwrap()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
