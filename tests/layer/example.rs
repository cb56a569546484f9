//! `examples/axum-layer`: its config passes `tollgate check`, and its very router (the
//! example's `app.rs`, included here) serves as its README says, alone and as two copies
//! sharing the login budget in Redis once the file's `[store]` is uncommented. And `check`
//! refuses a `[layers.*]` table it cannot honour, naming the key.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use http_body_util::Empty;
use tollgate::layer::Limits;

use crate::common::{repo_path, send_h1, text};
use crate::{get_with, sample, serve};

#[path = "../../examples/axum-layer/app.rs"]
mod app;

/// The example's router behind the layers of `limits` (`[layers.api]`, `[layers.login]`),
/// its metrics at `/metrics`.
fn router(limits: &Limits) -> axum::Router {
    let metrics = limits.clone();
    app::router(
        limits.layer("api").unwrap(),
        limits.layer("login").unwrap(),
        move || metrics.metrics_text(),
    )
}

const EXAMPLE_CONFIG: &str = "examples/axum-layer/tollgate.toml";

fn check(path: &Path) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["check", "-c"])
        .arg(path)
        .output()
        .unwrap();
    let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), s(&out.stdout), s(&out.stderr))
}

#[test]
fn the_example_config_passes_check() {
    let path = repo_path(EXAMPLE_CONFIG);
    let (ok, stdout, stderr) = check(&path);
    assert!(ok, "{stderr}");
    assert!(stdout.ends_with(": ok\n"), "{stdout}");
}

#[tokio::test]
async fn the_example_serves_and_limits_its_login() {
    let limits = Limits::from_file(repo_path(EXAMPLE_CONFIG)).unwrap();
    let addr = serve(router(&limits)).await;

    let hello = get_with(addr, "/api/hello", &[]).await;
    assert_eq!(hello.status(), 200);
    assert_eq!(
        hello.headers()["ratelimit-policy"],
        "\"api_per_ip\";q=10;w=1"
    );
    assert_eq!(text(hello).await, "hello\n");

    let mut logins = Vec::new();
    for _ in 0..4 {
        let req = Request::post(format!("http://{addr}/login"))
            .body(Empty::<Bytes>::new())
            .unwrap();
        let resp = send_h1(addr, req).await;
        logins.push((
            resp.status().as_u16(),
            resp.headers().contains_key("retry-after"),
        ));
    }
    assert_eq!(
        logins,
        [(200, false), (200, false), (200, false), (429, true)]
    );

    let metrics = text(get_with(addr, "/metrics", &[]).await).await;
    let denied =
        "tollgate_decisions_total{route=\"login\",policy=\"login_per_ip\",outcome=\"deny\"}";
    assert_eq!(sample(&metrics, denied), 1.0, "{metrics}");
}

/// The README: "uncomment `[store]` in the file and start Redis: every copy spends one
/// budget". Two copies of the app, each with its own `Limits` from the file with those
/// lines uncommented (a real `redis-server` on a free port), share `login_per_ip`'s three.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_copies_on_redis_share_the_login_budget() {
    let redis = crate::common::redis::RedisServer::start();
    let text = std::fs::read_to_string(repo_path(EXAMPLE_CONFIG)).unwrap();
    let commented = "# [store]\n# kind = \"redis\"\n# urls = [\"redis://127.0.0.1:6379\"]";
    assert!(
        text.contains(commented),
        "the example's [store] lines changed"
    );
    let shared = text.replace(
        commented,
        // A generous timeout: the copies' first calls dial Redis, and a loaded machine must
        // not turn one into the fallback's pass (this test is about the shared budget).
        &format!(
            "[store]\nkind = \"redis\"\nurls = [\"{}\"]\ntimeout = \"2s\"",
            redis.url()
        ),
    );
    let path = crate::common::process::temp_file("axum-layer.toml", &shared);
    let copies = [
        serve(router(&Limits::from_file(&path).unwrap())).await,
        serve(router(&Limits::from_file(&path).unwrap())).await,
    ];
    let mut statuses = Vec::new();
    for addr in [copies[0], copies[1], copies[0], copies[1]] {
        let req = Request::post(format!("http://{addr}/login"))
            .body(Empty::<Bytes>::new())
            .unwrap();
        statuses.push(send_h1(addr, req).await.status().as_u16());
    }
    assert_eq!(
        statuses,
        [200, 200, 200, 429],
        "one budget of three for both copies"
    );
}

/// Write `toml` to a temp file and `tollgate check` it: the first line of stderr.
fn check_text(name: &str, toml: &str) -> String {
    let dir = std::env::temp_dir().join(format!("tollgate-layer-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tollgate.toml");
    std::fs::write(&path, toml).unwrap();
    let (ok, _, stderr) = check(&path);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(!ok, "check passed:\n{toml}");
    stderr
}

const POLICY: &str = r#"
[policies.p]
key = ["ip"]
algorithm = "gcra"
limit = 1
period = "1s"
"#;

#[test]
fn check_refuses_bad_layer_tables_naming_the_key() {
    let unknown = check_text(
        "unknown",
        &format!("{POLICY}\n[layers.api]\npolicy = [\"p\"]\n"),
    );
    assert!(
        unknown.contains("layers.api.policy: unknown field `policy`, expected one of `policies`, `mode`, `on_store_error`, `require_account`"),
        "{unknown}"
    );
    let undefined = check_text(
        "undefined",
        &format!("{POLICY}\n[layers.api]\npolicies = [\"q\"]\n"),
    );
    assert!(
        undefined.contains("layers.api.policies[0]: no policy named `q` (define [policies.q])"),
        "{undefined}"
    );
    let owner = POLICY.replace("period = \"1s\"", "period = \"1s\"\nsite = \"owner\"");
    let owner = check_text(
        "owner",
        &format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n\n[cluster]\npeer_listen = \"127.0.0.1:0\"\npeer_secret_env = \"HOME\"\n{owner}\n[layers.api]\npolicies = [\"p\"]\n"
        ),
    );
    assert!(
        owner.contains("layers.api.policies[0]: policy `p` is decided at site `owner`"),
        "{owner}"
    );
    let no_server = check_text("no-server", POLICY);
    assert!(
        no_server.contains("server: missing table [server]"),
        "{no_server}"
    );
}

#[test]
fn limits_name_the_file_and_key_they_refuse() {
    let err = Limits::from_toml(&format!(
        "{POLICY}\n[layers.api]\npolicies = [\"p\"]\nmode = \"dry\"\n"
    ))
    .err()
    .unwrap()
    .to_string();
    assert!(
        err.starts_with("tollgate.toml: layers.api.mode: unknown variant `dry`"),
        "{err}"
    );
    let limits =
        Limits::from_toml(&format!("{POLICY}\n[layers.api]\npolicies = [\"p\"]\n")).unwrap();
    let err = limits.layer("web").err().unwrap().to_string();
    assert_eq!(
        err,
        "tollgate.toml: layers.web: no such table (define [layers.web]; the file has `api`)"
    );
}

/// A file of layers alone passes `check` but is no gateway: `serve` refuses it at once
/// (within 10 s; a `serve` that started anyway is killed and the test fails).
#[test]
fn serve_refuses_a_file_of_layers_alone() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["serve", "-c"])
        .arg(repo_path(EXAMPLE_CONFIG))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("`serve` of a file without [server] is still running after 10 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "server: missing table [server] with its `listen`: this file configures tower layers only"
        ),
        "{stderr}"
    );
}
