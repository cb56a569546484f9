//! Envoy's rate limit service under test: a tollgate serving a config file (a reload
//! re-reads it and its YAML) and the Python client of `rls_client.py` (grpcio and Envoy's
//! own protos, `xds.rs`), driven one JSON line per call.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command};

use serde_json::{Value, json};
use tollgate::limit::clock::Clock;

use super::temp::TempDir;

/// A tollgate serving a config file with `[rls]`, on `clock`.
pub struct RlsServed {
    pub rls: SocketAddr,
    /// `[rls] json_listen`, when the config sets it.
    pub json: Option<SocketAddr>,
    pub admin: Option<SocketAddr>,
    pub dir: TempDir,
    pub config: PathBuf,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl RlsServed {
    /// `toml` (where `RLS_YAML` stands for the YAML's path) and `yaml`, written to a fresh
    /// folder and served.
    pub async fn start(toml: &str, yaml: &str, clock: Arc<dyn Clock>) -> RlsServed {
        let dir = TempDir::new("rls");
        let yaml_path = dir.file("ratelimit.yaml", yaml.as_bytes());
        let toml = toml.replace("RLS_YAML", &yaml_path.display().to_string());
        let config = dir.file("tollgate.toml", toml.as_bytes());
        let cfg = tollgate::config::load_file(&config).expect("valid test config");
        let server = tollgate::server::Server::bind_with_clock(cfg, clock)
            .await
            .expect("binds")
            .workers(1);
        let addrs = server.addrs();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(server.run(async {
            let _ = stopped.await;
        }));
        RlsServed {
            rls: addrs.rls_listen.expect("[rls] listen is bound"),
            json: addrs.rls_json_listen,
            admin: addrs.admin_listen,
            config,
            dir,
            _stop: stop,
        }
    }

    /// The YAML rewritten (a reload reads it).
    pub fn write_yaml(&self, yaml: &str) {
        self.dir.file("ratelimit.yaml", yaml.as_bytes());
    }

    pub async fn client(&self) -> RlsClient {
        RlsClient::start(self.rls).await
    }
}

/// `rls_client.py` calling one service (blocking pipes, read in `block_in_place`: the
/// tests run on the multi-threaded runtime, the server on the other threads).
pub struct RlsClient {
    child: Child,
    stdin: ChildStdin,
    lines: BufReader<ChildStdout>,
}

impl Drop for RlsClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl RlsClient {
    pub async fn start(addr: SocketAddr) -> RlsClient {
        Self::spawn(addr, None)
    }

    /// A client over TLS that trusts the certificate in `ca` for `localhost`.
    pub async fn start_tls(addr: SocketAddr, ca: &std::path::Path) -> RlsClient {
        Self::spawn(addr, Some(ca))
    }

    fn spawn(addr: SocketAddr, ca: Option<&std::path::Path>) -> RlsClient {
        let mut child = Command::new(super::xds::python())
            .arg(super::repo_path("tests/common/rls_client.py"))
            .arg(addr.to_string())
            .args(ca)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the xds-protos Python starts");
        let stdin = child.stdin.take().expect("piped stdin");
        let lines = BufReader::new(child.stdout.take().expect("piped stdout"));
        RlsClient {
            child,
            stdin,
            lines,
        }
    }

    async fn call(&mut self, command: Value) -> Value {
        let mut line = command.to_string();
        line.push('\n');
        tokio::task::block_in_place(|| {
            self.stdin.write_all(line.as_bytes()).expect("client alive");
            self.stdin.flush().expect("client alive");
            let mut answer = String::new();
            let n = self.lines.read_line(&mut answer).expect("client answers");
            assert!(n > 0, "rls_client.py ended: {command}");
            serde_json::from_str(&answer).expect("one JSON line")
        })
    }

    /// `ShouldRateLimit(request)`: `{"response": …}` or `{"error": {"code", "details"}}`.
    pub async fn should_rate_limit(&mut self, request: Value) -> Value {
        self.call(json!({"call": "should_rate_limit", "request": request}))
            .await
    }

    /// The response of a call that must succeed.
    pub async fn answer(&mut self, request: Value) -> Value {
        let got = self.should_rate_limit(request.clone()).await;
        match got.get("response") {
            Some(r) => r.clone(),
            None => panic!("{request} failed: {got}"),
        }
    }

    /// `grpc.health.v1.Health/Check` of `service` ("" for the whole server).
    pub async fn health(&mut self, service: &str) -> String {
        let got = self
            .call(json!({"call": "health", "service": service}))
            .await;
        got["status"].as_str().unwrap_or_default().to_owned()
    }
}

/// A request of `domain` whose descriptors are lists of `(key, value)` pairs.
pub fn request(domain: &str, descriptors: &[&[(&str, &str)]]) -> Value {
    let descriptors: Vec<Value> = descriptors
        .iter()
        .map(|entries| {
            let entries: Vec<Value> = entries
                .iter()
                .map(|(k, v)| json!({"key": k, "value": v}))
                .collect();
            json!({ "entries": entries })
        })
        .collect();
    json!({"domain": domain, "descriptors": descriptors})
}

/// Each descriptor's `(code, limit_remaining)` (a field the proto JSON leaves out at its
/// default is 0 / UNKNOWN).
pub fn codes(response: &Value) -> Vec<(String, u64)> {
    response["statuses"]
        .as_array()
        .map(|all| {
            all.iter()
                .map(|s| {
                    let code = s["code"].as_str().unwrap_or("UNKNOWN").to_owned();
                    (code, s["limit_remaining"].as_u64().unwrap_or(0))
                })
                .collect()
        })
        .unwrap_or_default()
}
