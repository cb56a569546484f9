//! Real upstream processes for the backend tests (`backend.py`: a Python HTTP server that
//! answers as its mode says — healthy, slow, failing — and counts what it answered):
//! started on a free loopback port, killed by pid on drop; and an example's own `backend.py`
//! (`ExampleBackend`).
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};

use bytes::Bytes;
use http::Request;
use http_body_util::Full;

/// One running backend process.
pub struct Backend {
    child: Child,
    pub addr: SocketAddr,
}

impl Backend {
    /// A backend named `name` (its 200 body) in `mode` (see `backend.py`).
    pub fn start(name: &str, mode: &str) -> Backend {
        let mut child = Command::new("python3")
            .arg(super::repo_path("tests/common/backend.py"))
            .args(["--name", name, "--mode", mode])
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs (scripts/test.sh installs it)");
        let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = out.next().and_then(Result::ok).unwrap_or_default();
        let port: u16 = first
            .strip_prefix("PORT ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("the backend did not start: {first:?}"));
        Backend {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Requests it has answered (its own `/__` ones aside).
    pub async fn count(&self) -> usize {
        let resp = super::send_h1(self.addr, super::get(&format!("{}/__count", self.url()))).await;
        super::text(resp).await.parse().expect("a count")
    }

    /// Answer from now on as `mode` says.
    pub async fn set_mode(&self, mode: &str) {
        let req = Request::put(format!("{}/__mode", self.url()))
            .body(Full::new(Bytes::from(mode.to_owned())))
            .unwrap();
        assert_eq!(super::send_h1(self.addr, req).await.status(), 204);
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A stand-in backend of an example (`python3 backend.py 0`), killed by pid on drop: what
/// the examples' running tests and the docs' shown answers (`tests/config/docs/shown/`) start.
pub struct ExampleBackend {
    child: Child,
    pub addr: SocketAddr,
}

impl ExampleBackend {
    pub fn start(script: &std::path::Path) -> ExampleBackend {
        let mut child = Command::new("python3")
            .arg(script)
            .arg("0")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 runs (scripts/test.sh installs it)");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        // "... on http://127.0.0.1:PORT"
        let addr = line
            .trim()
            .rsplit("http://")
            .next()
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("{} printed {line:?}", script.display()));
        ExampleBackend { child, addr }
    }
}

impl Drop for ExampleBackend {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
