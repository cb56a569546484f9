//! The examples under `examples/` are what a newcomer copies first, so each one is held to
//! what its README says:
//! - every `examples/**/*.toml`, the config inside the Kubernetes ConfigMap and the config
//!   `compose.yaml` mounts pass `tollgate check` (with the secrets the examples name set);
//! - the Kubernetes manifests pass `kubernetes-validate --strict` and say what the README
//!   promises (non-root, read-only root, probes on the admin port, the token from a
//!   Secret, the proxy port alone in the Service); `compose.yaml` parses with its services;
//! - the promises that can run here run over real sockets: the login example locks an
//!   account after five failures with a 429 and `Retry-After`, and fails closed when
//!   Redis is gone; the JWT example's tiers, 401s and response costs; the three gateways
//!   on one real `redis-server` admit at most `burst + elapsed × rate` for both the central
//!   and the lease policy; `run.sh` starts and stops its processes; the owner fleet shares
//!   one exact limit.
//!
//! Each running test starts from the example's own file and changes only addresses (free
//! ports, the test's upstream and Redis) and, where the bound is about a store or owner that
//! answers, the store timeout: [`rewrite`] fails if the text it replaces is gone, so an edited
//! example cannot silently stop being the thing tested.

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use common::process::{GatewayProcess, spawn_serve_with_env, temp_file, tollgate};
use common::redis::RedisServer;
use common::*;
use http::{Request, Response, StatusCode};
use http_body_util::{Empty, Full};
use hyper::body::Incoming;

/// The secrets the examples name with `*_env` keys, and test values of the lengths they need.
const SECRETS: &[(&str, &str)] = &[
    (
        "TOLLGATE_ACCOUNT_HASH_KEY",
        "the examples' test account hash key",
    ),
    (
        "TOLLGATE_JWT_SECRET",
        "the examples' test HS256 secret, 32+ bytes",
    ),
    (
        "TOLLGATE_PEER_SECRET",
        "the examples' test peer secret, 32+ bytes long",
    ),
    ("TOLLGATE_ADMIN_TOKEN", "the-examples-test-admin-token"),
];

fn secret(name: &str) -> &'static str {
    SECRETS.iter().find(|(n, _)| *n == name).unwrap().1
}

fn examples() -> PathBuf {
    repo_path("examples")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `text` with each `from` replaced by its `to`; every `from` must be there.
fn rewrite(text: &str, pairs: &[(&str, &str)]) -> String {
    let mut out = text.to_string();
    for (from, to) in pairs {
        assert!(
            out.contains(from),
            "the example no longer contains {from:?}"
        );
        out = out.replace(from, to);
    }
    out
}

/// Every file under `dir` whose name ends with `ext`, sorted.
fn files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files(&path, ext));
        } else if path.to_string_lossy().ends_with(ext) {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// `tollgate check -c path` with the examples' secrets set: its exit status and output.
fn check(path: &Path) -> (bool, String) {
    let out = tollgate()
        .args(["check", "-c"])
        .arg(path)
        .envs(SECRETS.iter().copied())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn assert_checks(path: &Path) {
    let (ok, out) = check(path);
    assert!(ok, "tollgate check -c {} failed:\n{out}", path.display());
}

/// Every YAML document of `path`, as JSON, read by PyYAML (which `kubernetes-validate`
/// installs): the repository has no YAML parser of its own.
fn yaml_docs(path: &Path) -> Vec<serde_json::Value> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import json, sys, yaml\n\
             json.dump(list(yaml.safe_load_all(open(sys.argv[1]))), sys.stdout)",
        ])
        .arg(path)
        .output()
        .expect("python3 runs (scripts/test.sh installs it)");
    assert!(
        out.status.success(),
        "{} does not parse as YAML (or PyYAML is missing: pip install kubernetes-validate \
         brings it):\n{}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn yaml_doc(path: &Path) -> serde_json::Value {
    let mut docs = yaml_docs(path);
    assert_eq!(docs.len(), 1, "{}: one document", path.display());
    docs.remove(0)
}

// ---- (a), (b), (c): the files themselves --------------------------------------------------

#[test]
fn every_example_config_passes_check() {
    let tomls = files(&examples(), ".toml");
    assert!(tomls.len() >= 9, "examples/ lost its configs: {tomls:?}");
    let known: BTreeSet<&str> = SECRETS.iter().map(|(n, _)| *n).collect();
    for path in &tomls {
        // A secret this test does not set would fail `check` with a message about the
        // environment, not the example: say which variable to add to SECRETS.
        let text = read(path);
        for line in text.lines().filter(|l| !l.trim_start().starts_with('#')) {
            for part in line.split("_env = \"").skip(1) {
                let var = part.split('"').next().unwrap();
                assert!(
                    known.contains(var),
                    "{} names {var}: add it to SECRETS in tests/examples.rs",
                    path.display()
                );
            }
        }
        assert_checks(path);
    }
}

#[test]
fn the_configmap_config_and_the_compose_mount_pass_check() {
    let cm = yaml_doc(&examples().join("kubernetes/configmap.yaml"));
    assert_eq!(cm["kind"], "ConfigMap");
    let toml = cm["data"]["config.toml"]
        .as_str()
        .expect("the ConfigMap holds config.toml");
    assert_checks(&temp_file("configmap.toml", toml));

    let compose = yaml_doc(&examples().join("compose/compose.yaml"));
    let volumes = compose["services"]["tollgate"]["volumes"]
        .as_array()
        .expect("the tollgate service mounts its config");
    let mount = volumes
        .iter()
        .filter_map(|v| v.as_str())
        .find(|v| v.contains(":/app/config.toml"))
        .expect("a volume at /app/config.toml, the image's config path");
    let source = mount.split(':').next().unwrap();
    assert_checks(&examples().join("compose").join(source));
}

#[test]
fn the_kubernetes_manifests_validate_and_keep_their_promises() {
    let dir = examples().join("kubernetes");
    let manifests = files(&dir, ".yaml");
    assert_eq!(manifests.len(), 3, "{manifests:?}");
    let run = Command::new("kubernetes-validate")
        .arg("--strict")
        .args(&manifests)
        .output();
    let out = match run {
        Ok(out) => out,
        Err(e) => panic!(
            "kubernetes-validate is missing ({e}): pip install kubernetes-validate \
             (scripts/test.sh installs it)"
        ),
    };
    assert!(
        out.status.success(),
        "kubernetes-validate --strict failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // The config's own ports and variables, which the manifests must agree with.
    let cm = yaml_doc(&dir.join("configmap.yaml"));
    let cfg: toml::Table = cm["data"]["config.toml"].as_str().unwrap().parse().unwrap();
    let port = |key: &str| -> u64 {
        let addr = cfg["server"][key].as_str().unwrap();
        addr.rsplit(':').next().unwrap().parse().unwrap()
    };
    let (proxy_port, admin_port) = (port("listen"), port("admin_listen"));
    let token_env = cfg["server"]["admin_token_env"].as_str().unwrap();

    let deploy = yaml_doc(&dir.join("deployment.yaml"));
    let pod = &deploy["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let containers = pod["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1);
    let c = &containers[0];
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    for kind in ["requests", "limits"] {
        for what in ["cpu", "memory"] {
            assert!(
                c["resources"][kind][what].is_string(),
                "resources.{kind}.{what}"
            );
        }
    }
    let named_port = |name: &str| -> u64 {
        let ports = c["ports"].as_array().unwrap();
        let p = ports.iter().find(|p| p["name"] == name).unwrap();
        p["containerPort"].as_u64().unwrap()
    };
    assert_eq!(named_port("proxy"), proxy_port);
    assert_eq!(named_port("admin"), admin_port);
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        assert_eq!(c[probe]["httpGet"]["path"], path, "{probe}");
        assert_eq!(
            c[probe]["httpGet"]["port"], "admin",
            "{probe} on the admin port"
        );
    }
    let env = c["env"].as_array().unwrap();
    let token = env
        .iter()
        .find(|e| e["name"] == token_env)
        .unwrap_or_else(|| panic!("the container sets {token_env}, the config's admin_token_env"));
    assert!(
        token["valueFrom"]["secretKeyRef"]["name"].is_string(),
        "the admin token comes from a Secret"
    );
    // The config the pod runs is the ConfigMap's.
    let args: Vec<&str> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let config_path = args[args.iter().position(|a| *a == "--config").unwrap() + 1];
    let mount = c["volumeMounts"][0]["mountPath"].as_str().unwrap();
    assert_eq!(config_path, format!("{mount}/config.toml"));
    assert_eq!(
        pod["volumes"][0]["configMap"]["name"],
        cm["metadata"]["name"]
    );

    let svc = yaml_doc(&dir.join("service.yaml"));
    let ports = svc["spec"]["ports"].as_array().unwrap();
    assert_eq!(ports.len(), 1, "the Service publishes the proxy port only");
    assert_eq!(ports[0]["targetPort"], "proxy");
    assert_eq!(
        svc["spec"]["selector"],
        deploy["spec"]["template"]["metadata"]["labels"]
    );
}

#[test]
fn compose_yaml_names_its_services_and_keeps_admin_on_loopback() {
    let dir = examples().join("compose");
    let compose = yaml_doc(&dir.join("compose.yaml"));
    let services = compose["services"].as_object().expect("services");
    let names: BTreeSet<&str> = services.keys().map(|k| k.as_str()).collect();
    assert_eq!(names, BTreeSet::from(["redis", "tollgate", "whoami"]));
    assert!(
        services["whoami"]["image"]
            .as_str()
            .unwrap()
            .starts_with("traefik/whoami")
    );
    assert!(
        services["redis"]["image"]
            .as_str()
            .unwrap()
            .starts_with("redis:")
    );

    let gw = &services["tollgate"];
    let context = dir.join(gw["build"]["context"].as_str().unwrap());
    let dockerfile = context.join(gw["build"]["dockerfile"].as_str().unwrap());
    assert!(
        read(&dockerfile).contains("\"serve\", \"--config\", \"/app/config.toml\""),
        "the image runs /app/config.toml, where compose.yaml mounts the config"
    );
    let cfg: toml::Table = read(&dir.join("tollgate.toml")).parse().unwrap();
    let port = |key: &str| {
        let addr = cfg["server"][key].as_str().unwrap();
        addr.rsplit(':').next().unwrap().to_string()
    };
    let published: Vec<&str> = gw["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    let admin = published
        .iter()
        .find(|p| p.ends_with(&format!(":{}", port("admin_listen"))))
        .expect("the admin port is published");
    assert!(
        admin.starts_with("127.0.0.1:"),
        "the admin port is bound to the host's loopback only: {admin}"
    );
    assert!(
        published
            .iter()
            .any(|p| p.ends_with(&format!(":{}", port("listen")))),
        "the proxy port is published: {published:?}"
    );
    // The upstream and the store are the other two services, by name.
    let upstream = cfg["upstreams"]["whoami"]["urls"][0].as_str().unwrap();
    assert!(upstream.starts_with("http://whoami:"), "{upstream}");
    let store = cfg["store"]["urls"][0].as_str().unwrap();
    assert!(store.starts_with("redis://redis:"), "{store}");
}

// ---- (d): the READMEs' promises over real sockets -----------------------------------------

/// A stand-in backend of an example (`python3 backend.py 0`), killed by pid on drop.
struct Backend {
    child: Child,
    addr: SocketAddr,
}

impl Backend {
    fn start(script: &Path) -> Backend {
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
        Backend { child, addr }
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn header(resp: &Response<Incoming>, name: &str) -> String {
    resp.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default()
}

async fn timed<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(10), f)
        .await
        .expect("a request hung")
}

async fn login(
    addr: SocketAddr,
    header_user: &str,
    user: &str,
    password: &str,
) -> Response<Incoming> {
    let req = Request::post(format!("http://{addr}/login"))
        .header("x-login-user", header_user)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Full::new(Bytes::from(format!(
            "username={user}&password={password}"
        ))))
        .unwrap();
    timed(send_h1(addr, req)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_login_example_locks_an_account_after_five_failures_and_fails_closed() {
    let dir = examples().join("login");
    let mut redis = RedisServer::start();
    let backend = Backend::start(&dir.join("backend.py"));
    let cfg = rewrite(
        &read(&dir.join("tollgate.toml")),
        &[
            ("redis://127.0.0.1:6379", &redis.url()),
            ("http://127.0.0.1:3000", &format!("http://{}", backend.addr)),
            ("\"127.0.0.1:8080\"", "\"127.0.0.1:0\""),
            ("\"127.0.0.1:9901\"", "\"127.0.0.1:0\""),
            // The README's promise is about a Redis that answers; a 10 ms timeout on a busy
            // test machine would turn a slow answer into the fail-closed 503.
            ("timeout = \"10ms\"", "timeout = \"1s\""),
        ],
    );
    let gw = spawn_serve_with_env(&temp_file("login.toml", &cfg), SECRETS);
    let addr = gw.addr;

    // Five wrong passwords reach the backend (401); the sixth, and the right password
    // after it, do not.
    for i in 0..5 {
        let resp = login(addr, "alice", "alice", &format!("guess{i}")).await;
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "attempt {}", i + 1);
    }
    for password in ["guess5", "correct-horse"] {
        let resp = login(addr, "alice", "alice", password).await;
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        let wait: u64 = header(&resp, "retry-after").parse().unwrap();
        assert!(
            (170..=180).contains(&wait),
            "Retry-After {wait}: one cell per 180 s"
        );
        assert!(
            header(&resp, "ratelimit-policy").starts_with("\"login_per_account\";q=5;w=900;pk=:")
        );
        assert!(header(&resp, "ratelimit").starts_with("\"login_per_account\";r=0;t="));
        let body = json(resp).await;
        assert_eq!(
            body["violated-policies"],
            serde_json::json!(["login_per_account"])
        );
        assert_eq!(
            body["type"],
            "https://iana.org/assignments/http-problem-types#quota-exceeded"
        );
    }
    // A header that is not the form's user is the backend's 400 (it spends a per-IP cell).
    let resp = login(addr, "bob", "alice", "guess").await;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);

    // Redis gone: /login fails closed, every other path still passes.
    redis.stop();
    let resp = login(addr, "carol", "carol", "x").await;
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(!header(&resp, "retry-after").is_empty());
    let body = json(resp).await;
    assert_eq!(
        body["type"],
        "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
    );
    let resp = timed(send_h1(addr, get(&format!("http://{addr}/")))).await;
    assert_eq!(resp.status(), StatusCode::OK);

    // Redis back, empty (no persistence): the limits start again from full.
    redis.start_again();
    eventually("logins decided again", Duration::from_secs(10), || async {
        login(addr, "carol", "carol", "x").await.status() != StatusCode::SERVICE_UNAVAILABLE
    })
    .await;
    let started = Instant::now();

    // Per address: 10 attempts at once (carol's one spent above), then one every 6 s.
    let mut attempts = 1;
    let denied = loop {
        let user = format!("user{attempts}");
        let resp = login(addr, &user, &user, "x").await;
        if resp.status() == StatusCode::TOO_MANY_REQUESTS {
            break resp;
        }
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
        attempts += 1;
        assert!(attempts < 20, "the per-IP limit never denied");
    };
    let refilled = (started.elapsed().as_secs_f64() / 6.0).ceil() as usize;
    assert!(
        (10..=10 + refilled).contains(&attempts),
        "{attempts} attempts admitted from one address"
    );
    assert!(header(&denied, "retry-after").parse::<u64>().unwrap() >= 1);
    assert_eq!(
        json(denied).await["violated-policies"],
        serde_json::json!(["login_per_ip"])
    );
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// An HS256 token as the example's identity provider would sign it.
fn token(claims: serde_json::Value, key: &str) -> String {
    use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
    encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(key.as_bytes()),
    )
    .unwrap()
}

fn claims(sub: &str, plan: Option<&str>) -> serde_json::Value {
    let mut c = serde_json::json!({
        "sub": sub,
        "iss": "https://auth.example.com/",
        "aud": "api.example.com",
        "exp": now() + 600,
    });
    if let Some(p) = plan {
        c["plan"] = p.into();
    }
    c
}

async fn api(addr: SocketAddr, path: &str, token: Option<&str>) -> Response<Incoming> {
    let mut req = Request::get(format!("http://{addr}{path}"));
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    timed(send_h1(addr, req.body(Empty::<Bytes>::new()).unwrap())).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_jwt_example_keys_on_the_token_with_tiers_and_response_costs() {
    let dir = examples().join("api-tiers-jwt");
    let backend = Backend::start(&dir.join("backend.py"));
    let cfg = rewrite(
        &read(&dir.join("tollgate.toml")),
        &[
            ("http://127.0.0.1:3000", &format!("http://{}", backend.addr)),
            ("\"127.0.0.1:8080\"", "\"127.0.0.1:0\""),
            ("\"127.0.0.1:9901\"", "\"127.0.0.1:0\""),
        ],
    );
    let gw = spawn_serve_with_env(&temp_file("jwt.toml", &cfg), SECRETS);
    let addr = gw.addr;
    let key = secret("TOLLGATE_JWT_SECRET");

    // No token, a forged one, an expired one, another audience: 401, never the backend.
    let mut expired = claims("alice", None);
    expired["exp"] = (now() - 120).into();
    let mut elsewhere = claims("alice", None);
    elsewhere["aud"] = "another.example.com".into();
    let forged = token(claims("alice", None), "not the secret, but 32 bytes long");
    let spoiled = [
        None,
        Some(forged),
        Some(token(expired, key)),
        Some(token(elsewhere, key)),
    ];
    for t in &spoiled {
        let resp = api(addr, "/v1/items", t.as_deref()).await;
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "{t:?}");
        assert_eq!(header(&resp, "www-authenticate"), "Bearer");
    }
    // The public part needs no token.
    assert_eq!(api(addr, "/", None).await.status(), StatusCode::OK);

    // No plan: 5/s, burst 10.
    let free = token(claims("alice", None), key);
    let started = Instant::now();
    let mut ok = 0;
    let mut denial = None;
    for _ in 0..12 {
        let resp = api(addr, "/v1/items", Some(&free)).await;
        match resp.status() {
            StatusCode::OK => ok += 1,
            StatusCode::TOO_MANY_REQUESTS => denial = Some(resp),
            other => panic!("unexpected {other}"),
        }
    }
    let refilled = (started.elapsed().as_secs_f64() * 5.0).ceil() as usize;
    assert!((10..=10 + refilled).contains(&ok), "{ok} of 12 admitted");
    let denial = denial.expect("the free plan's burst is 10");
    assert!(header(&denial, "ratelimit-policy").contains("\"requests\";q=5;w=1"));
    assert_eq!(header(&denial, "retry-after"), "1");
    assert_eq!(
        json(denial).await["violated-policies"],
        serde_json::json!(["requests"])
    );

    // The pro plan's numbers, from the claim; partner-7's from its override.
    let pro = token(claims("bob", Some("pro")), key);
    for i in 0..30 {
        let resp = api(addr, "/v1/items", Some(&pro)).await;
        assert_eq!(resp.status(), StatusCode::OK, "pro request {i}");
        let policy = header(&resp, "ratelimit-policy");
        assert!(policy.contains("\"requests\";q=50;w=1"), "{policy}");
        assert!(policy.contains("\"units\";q=20000;w=60"), "{policy}");
    }
    let partner = token(claims("partner-7", None), key);
    let policy = header(
        &api(addr, "/v1/items", Some(&partner)).await,
        "ratelimit-policy",
    );
    assert!(policy.contains("\"requests\";q=500;w=1"), "{policy}");
    assert!(policy.contains("\"units\";q=200000;w=60"), "{policy}");

    // /v1/reports costs 250 units (the backend says so): four fill the free minute's 1000.
    let carol = token(claims("carol", None), key);
    let started = Instant::now();
    let mut reports = 0;
    let denial = loop {
        let resp = api(addr, "/v1/reports", Some(&carol)).await;
        if resp.status() == StatusCode::TOO_MANY_REQUESTS {
            break resp;
        }
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(header(&resp, "x-api-units"), "250");
        reports += 1;
        assert!(reports < 10, "the units policy never denied");
    };
    // 1000 units a minute refill 250 in 15 s.
    let refilled = (started.elapsed().as_secs_f64() / 15.0).ceil() as usize;
    assert!(
        (4..=4 + refilled).contains(&reports),
        "{reports} reports admitted"
    );
    assert_eq!(
        json(denial).await["violated-policies"],
        serde_json::json!(["units"])
    );

    // mint.py's token is one the gateway accepts (and its `plan` claim is read).
    let out = Command::new("python3")
        .arg(dir.join("mint.py"))
        .args(["dave", "pro"])
        .env("TOLLGATE_JWT_SECRET", key)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let minted = String::from_utf8(out.stdout).unwrap();
    let resp = api(addr, "/v1/items", Some(minted.trim())).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(header(&resp, "ratelimit-policy").contains("\"requests\";q=50;w=1"));
}

/// GET `path` with the `x-api-key` account `key`.
async fn keyed(addr: SocketAddr, path: &str, key: &str) -> StatusCode {
    let req = Request::get(format!("http://{addr}{path}"))
        .header("x-api-key", key)
        .body(Empty::<Bytes>::new())
        .unwrap();
    timed(send_h1(addr, req)).await.status()
}

/// 8 concurrent clients per gateway, 40 requests each, on one key: how many passed, and
/// how long it took. Only 200 and 429 are answers.
async fn offer(addrs: &[SocketAddr], path: &'static str, key: &'static str) -> (u64, f64) {
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for &addr in addrs {
        for _ in 0..8 {
            tasks.spawn(async move {
                let mut ok = 0u64;
                for _ in 0..40 {
                    match keyed(addr, path, key).await {
                        StatusCode::OK => ok += 1,
                        StatusCode::TOO_MANY_REQUESTS => {}
                        other => panic!("unexpected {other}"),
                    }
                }
                ok
            });
        }
    }
    let mut admitted = 0;
    while let Some(r) = tasks.join_next().await {
        admitted += r.unwrap();
    }
    let elapsed = started.elapsed().as_secs_f64();
    eprintln!(
        "{path} {key}: {admitted} of {} admitted in {elapsed:.2}s",
        addrs.len() * 320
    );
    (admitted, elapsed)
}

/// The three gateway configs of `three-gateways-redis`, on `redis`, free ports and `up`.
fn three_gateway_configs(redis: &RedisServer, up: SocketAddr) -> Vec<PathBuf> {
    let dir = examples().join("three-gateways-redis");
    (1..=3)
        .map(|i| {
            let cfg = rewrite(
                &read(&dir.join(format!("gw{i}.toml"))),
                &[
                    ("redis://127.0.0.1:6379", &redis.url()),
                    ("http://127.0.0.1:3000", &format!("http://{up}")),
                    (&format!("\"127.0.0.1:808{i}\""), "\"127.0.0.1:0\""),
                    (&format!("\"127.0.0.1:991{i}\""), "\"127.0.0.1:0\""),
                    // The bound is the store's: a 10 ms timeout on a busy test machine would
                    // send slow answers to the L/N fallback, whose bound is another one.
                    ("timeout = \"10ms\"", "timeout = \"1s\""),
                ],
            );
            temp_file(&format!("gw{i}.toml"), &cfg)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_gateways_on_one_redis_admit_one_limit_central_and_lease() {
    let redis = RedisServer::start();
    let up = echo_upstream().await;
    let nodes: Vec<GatewayProcess> = three_gateway_configs(&redis, up)
        .iter()
        .map(|c| spawn_serve_with_env(c, SECRETS))
        .collect();
    let addrs: Vec<SocketAddr> = nodes.iter().map(|n| n.addr).collect();

    // per_account (central): 600 a minute, burst 100.
    let (admitted, elapsed) = offer(&addrs, "/items", "central-key").await;
    let bound = 100 + (elapsed * 10.0).floor() as u64;
    assert!(
        admitted <= bound,
        "central: {admitted} admitted > {bound} in {elapsed:.2}s"
    );
    assert!(
        admitted >= 100,
        "central: {admitted}: the burst was not shared but starved"
    );

    // search_per_account (lease): 100/s, burst 50; never above the limit.
    let (admitted, elapsed) = offer(&addrs, "/search", "lease-key").await;
    let bound = 50 + (elapsed * 100.0).floor() as u64;
    assert!(
        admitted <= bound,
        "lease: {admitted} admitted > {bound} in {elapsed:.2}s"
    );
    assert!(
        admitted >= 25,
        "lease: {admitted} admitted in {elapsed:.2}s"
    );
    let mut lease_calls = 0.0;
    for n in &nodes {
        let m = metrics_text(n.admin.unwrap()).await;
        lease_calls += metric_sum(&m, "tollgate_store_calls_total{op=\"lease\"}");
    }
    assert!(
        lease_calls < admitted as f64,
        "{lease_calls} lease calls for {admitted} admitted: cells come in batches"
    );
}

/// `redis-cli -p port args...`, its output trimmed.
fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli runs (scripts/test.sh installs redis-tools)");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `run.sh`, killed with SIGTERM on drop (its trap stops what it started).
struct RunSh(Child);

impl Drop for RunSh {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
}

fn alive(pid: u32) -> bool {
    // A zombie still has /proc/PID; its state letter is Z.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
        Err(_) => false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_sh_starts_redis_and_three_gateways_and_stops_them_on_sigterm() {
    let up = echo_upstream().await;
    let ports = peers::free_ports(6);
    let list = |p: &[SocketAddr]| {
        p.iter()
            .map(|a| a.port().to_string())
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut child = Command::new("bash")
        .arg(examples().join("three-gateways-redis/run.sh"))
        .env("TOLLGATE", env!("CARGO_BIN_EXE_tollgate"))
        .env("UPSTREAM", format!("http://{up}"))
        .env("LISTEN_PORTS", list(&ports[..3]))
        .env("ADMIN_PORTS", list(&ports[3..]))
        .env_remove("TOLLGATE_ACCOUNT_HASH_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let run = RunSh(child);
    let (lines_tx, lines_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if lines_tx.send(line.unwrap()).is_err() {
                break;
            }
        }
    });
    let mut pids = Vec::new();
    let mut redis_port = None;
    loop {
        let line = lines_rx
            .recv_timeout(Duration::from_secs(30))
            .expect("run.sh says ready within 30 s");
        if let Some(rest) = line.split(" pid ").nth(1) {
            pids.push(rest.split(' ').next().unwrap().parse::<u32>().unwrap());
        }
        if line.starts_with("redis-server") {
            let port = line.rsplit(':').next().unwrap().parse::<u16>().unwrap();
            redis_port = Some(port);
        }
        if line.starts_with("ready") {
            break;
        }
    }
    assert_eq!(pids.len(), 4, "redis-server and three gateways");
    let redis_port = redis_port.unwrap();
    assert_eq!(redis_cli(redis_port, &["PING"]), "PONG");
    for addr in &ports[..3] {
        assert_eq!(keyed(*addr, "/items", "k").await, StatusCode::OK, "{addr}");
    }
    // The gateways share the key in that Redis.
    let keys = redis_cli(redis_port, &["KEYS", "tg:*"]);
    assert!(keys.contains("per_account"), "{keys}");

    drop(run);
    for pid in &pids {
        eventually(
            "run.sh's processes stopped",
            Duration::from_secs(10),
            || async { !alive(*pid) },
        )
        .await;
    }
    for addr in &ports[..3] {
        assert!(
            tokio::net::TcpStream::connect(addr).await.is_err(),
            "{addr} still open"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owner_fleet_shares_one_exact_limit_without_a_store() {
    let dir = examples().join("owner-fleet");
    let up = echo_upstream().await;
    // The peer ports are probed free, then bound by the nodes: another socket may take one
    // in between, and then the whole fleet starts again on new ports.
    let mut attempt = 0;
    let nodes = 'start: loop {
        attempt += 1;
        assert!(
            attempt <= 5,
            "five fleets in a row found a probed peer port taken"
        );
        let peers = peers::free_ports(3);
        let mut nodes = Vec::new();
        for i in 1..=3 {
            let mut pairs: Vec<(String, String)> = (1..=3)
                .map(|j| (format!("127.0.0.1:700{j}"), peers[j - 1].to_string()))
                .collect();
            pairs.extend([
                ("http://127.0.0.1:3000".into(), format!("http://{up}")),
                (format!("\"127.0.0.1:808{i}\""), "\"127.0.0.1:0\"".into()),
                (format!("\"127.0.0.1:991{i}\""), "\"127.0.0.1:0\"".into()),
                // An owner slower than the timeout hands its keys to the L/N fallback,
                // whose bound is another one: on a busy machine, wait longer.
                ("timeout = \"100ms\"".into(), "timeout = \"1s\"".into()),
            ]);
            let pairs: Vec<(&str, &str)> = pairs
                .iter()
                .map(|(a, b)| (a.as_str(), b.as_str()))
                .collect();
            let cfg = rewrite(&read(&dir.join(format!("node{i}.toml"))), &pairs);
            let path = temp_file(&format!("node{i}.toml"), &cfg);
            match common::process::try_spawn_serve_with_env(&path, SECRETS) {
                Ok(node) => nodes.push(node),
                Err(log) if log.contains("Address already in use") => continue 'start,
                Err(log) => panic!("node {i} did not start:\n{log}"),
            }
        }
        break nodes;
    };
    for node in &nodes {
        let admin = node.admin.unwrap();
        eventually("every peer live", Duration::from_secs(10), || async move {
            metrics_text(admin).await.contains("tollgate_peers_live 3")
        })
        .await;
    }
    let addrs: Vec<SocketAddr> = nodes.iter().map(|n| n.addr).collect();

    // per_account (owner): 60 a minute, burst 20, for the fleet.
    let (admitted, elapsed) = offer(&addrs, "/", "k1").await;
    let bound = 20 + elapsed.floor() as u64;
    assert!(
        admitted <= bound,
        "{admitted} admitted > {bound} in {elapsed:.2}s"
    );
    assert!(
        admitted >= 20,
        "{admitted}: the burst was not shared but starved"
    );
    let mut asks = 0.0;
    for n in &nodes {
        asks += metric_sum(
            &metrics_text(n.admin.unwrap()).await,
            "tollgate_peer_calls_total{op=\"ask\"}",
        );
    }
    assert!(asks > 0.0, "the non-owners asked the owner");
}
