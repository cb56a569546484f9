//! The admin listener against a browser on the same machine, over real sockets: a `Host`
//! it does not know (DNS rebinding: a page's name rebound to 127.0.0.1) is refused with 421
//! on every endpoint but health, whatever the method; a state-changing request whose
//! `Origin` or `Sec-Fetch-Site` says another site (a cross-site form) is refused with 403;
//! its own addresses, `localhost`, `[server] admin_hosts`, same-origin requests and clients
//! that send no `Origin` (curl, `tollgate reload`) keep working.

use std::net::SocketAddr;

use crate::common::process::{spawn_serve_with_env, temp_file};
use crate::common::reload::{self, Served, file, route};
use crate::common::*;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Empty;
use serde_json::Value;
use tollgate::limit::clock::ManualClock;

/// An answer read off the socket: status, `Content-Type`, the body as JSON (or text).
struct Answer {
    status: u16,
    content_type: String,
    head: String,
    body: Value,
}

/// `method path` on a fresh HTTP/1.1 connection to `admin`, with exactly `headers` (the
/// `Host` among them, as a browser sends it).
async fn ask(admin: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> Answer {
    let mut head = format!("{method} {path} HTTP/1.1\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("Content-Length: 0\r\nConnection: close\r\n\r\n");
    let answer = raw(admin, &head).await;
    let (head, body) = answer.split_once("\r\n\r\n").expect("a head and a body");
    let content_type = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-type")
                .then(|| v.trim().to_owned())
        })
        .unwrap_or_default();
    Answer {
        status: status(head),
        content_type,
        head: head.to_owned(),
        body: serde_json::from_str(body).unwrap_or(Value::String(body.to_owned())),
    }
}

/// `tollgate_config_reloads_total{result="ok"}`: how many reloads ran.
async fn reloads(admin: SocketAddr) -> f64 {
    metric_sum(
        &metrics_text(admin).await,
        "tollgate_config_reloads_total{result=\"ok\"}",
    )
}

/// A file-served gateway (so a reload runs): policy `per_ip`, 1 an hour, on `/`, and
/// `server` keys beside the admin listener.
async fn served(server: &str) -> (Served, String) {
    let up = echo_upstream().await;
    let toml = file(
        up,
        &(reload::policy("per_ip", "gcra", 1, "") + &route("api", "/", &["per_ip"])),
    )
    .replace(
        "admin_listen = \"127.0.0.1:0\"\n",
        &format!("admin_listen = \"127.0.0.1:0\"\n{server}"),
    );
    let s = reload::serve(&toml, &ManualClock::new()).await;
    (s, toml)
}

/// Whether client `ip` is refused on `/` (its one request an hour spent).
async fn denied(s: &Served, ip: &str) -> bool {
    get_as(s.addr, "/", ip, None).await.status() == StatusCode::TOO_MANY_REQUESTS
}

fn assert_problem(a: &Answer, status: u16, detail: &str, what: &str) {
    assert_eq!(a.status, status, "{what}: {}\n{}", a.head, a.body);
    assert_eq!(a.content_type, "application/problem+json", "{what}");
    assert_eq!(a.body["status"], status, "{what}: {}", a.body);
    let got = a.body["detail"].as_str().unwrap_or_default();
    assert!(got.contains(detail), "{what}: {got}");
}

const REBOUND: &str = "the admin listener does not answer to Host `attacker.example";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_host_is_refused_on_config_reload_and_limits() {
    let (s, _) = served("").await;
    let adm = s.admin;
    let foreign_host = format!("attacker.example:{}", adm.port());
    let foreign_origin = format!("http://{foreign_host}");
    let rebound = [
        ("Host", foreign_host.as_str()),
        ("Origin", foreign_origin.as_str()),
    ];
    let before = reloads(adm).await;
    assert!(!denied(&s, "192.0.2.7").await);
    assert!(denied(&s, "192.0.2.7").await);

    let a = ask(adm, "GET", "/config", &rebound[..1]).await;
    assert_problem(&a, 421, REBOUND, "GET /config");
    assert!(
        a.body.get("server").is_none(),
        "nothing of the config: {}",
        a.body
    );
    for path in [
        "/routes",
        "/metrics",
        "/activity",
        "/status",
        "/dashboard",
        "/shadow",
    ] {
        let a = ask(adm, "GET", path, &rebound[..1]).await;
        assert_problem(&a, 421, REBOUND, path);
    }
    let a = ask(adm, "POST", "/reload", &rebound).await;
    assert_problem(&a, 421, REBOUND, "POST /reload");
    assert_eq!(reloads(adm).await, before, "no reload ran");
    let a = ask(adm, "DELETE", "/limits/per_ip?ip=192.0.2.7", &rebound).await;
    assert_problem(&a, 421, REBOUND, "DELETE /limits");
    assert!(denied(&s, "192.0.2.7").await, "the key was not reset");
    // Health stays open to any name (probes name the gateway as they like; it holds nothing).
    for path in ["/healthz", "/readyz"] {
        assert_eq!(
            ask(adm, "GET", path, &rebound[..1]).await.status,
            200,
            "{path}"
        );
    }

    // The same requests under the listener's own address go through.
    let own = adm.to_string();
    let a = ask(
        adm,
        "DELETE",
        "/limits/per_ip?ip=192.0.2.7",
        &[("Host", &own)],
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(!denied(&s, "192.0.2.7").await, "reset");
    let a = ask(adm, "POST", "/reload", &[("Host", &own)]).await;
    assert_eq!(
        (a.status, &a.body["result"]),
        (200, &"ok".into()),
        "{}",
        a.body
    );
    assert_eq!(reloads(adm).await, before + 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listeners_own_names_are_answered() {
    let (s, _) = served("").await;
    let adm = s.admin;
    let port = adm.port();
    for host in [
        adm.to_string(),
        format!("localhost:{port}"),
        format!("LocalHost:{port}"),
        format!("[::1]:{port}"),
        // A tunnel (ssh -L, kubectl port-forward) changes the port, not the name.
        "localhost:19901".to_string(),
        "127.0.0.1".to_string(),
    ] {
        let a = ask(adm, "GET", "/config", &[("Host", &host)]).await;
        assert_eq!(a.status, 200, "{host}: {}", a.body);
        assert!(a.body["server"].is_object(), "{host}: {}", a.body);
    }
    for host in [
        format!("localhost.attacker.example:{port}"),
        format!("127.0.0.1.nip.io:{port}"),
        format!("10.0.0.5:{port}"),
    ] {
        let a = ask(adm, "GET", "/config", &[("Host", &host)]).await;
        assert_problem(&a, 421, "does not answer to Host", &host);
    }
    // HTTP/2 names the host in `:authority`: held to the same rule.
    let h2 = |authority: String| {
        Request::get(format!("http://{authority}/config"))
            .body(Empty::<Bytes>::new())
            .unwrap()
    };
    let resp = send_h2(adm, h2(format!("attacker.example:{port}"))).await;
    assert_eq!(resp.status(), StatusCode::MISDIRECTED_REQUEST);
    let resp = send_h2(adm, h2(format!("localhost:{port}"))).await;
    assert_eq!(resp.status(), StatusCode::OK);
    // HTTP/1.0 without `Host` names no host: no browser sends it, and it is answered.
    let answer = raw(adm, "GET /config HTTP/1.0\r\n\r\n").await;
    assert_eq!(status(&answer), 200, "{answer}");
    // Two different hosts (the target's and a `Host` line) are no one host.
    let target = format!("http://{adm}/config");
    let a = ask(adm, "GET", &target, &[("Host", "attacker.example")]).await;
    assert_eq!(a.status, 421, "{}", a.body);
}

/// The listener bound to `::1` answers `[::1]:PORT` on an IPv6 connection. Skipped, and
/// says so, only where this machine has no `::1` to bind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ipv6_listener_answers_its_own_address() {
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        eprintln!("skipped: ::1 cannot be bound on this machine");
        return;
    }
    let up = echo_upstream().await;
    let toml = file(up, &route("api", "/", &[])).replace(
        "admin_listen = \"127.0.0.1:0\"",
        "admin_listen = \"[::1]:0\"",
    );
    let s = reload::serve(&toml, &ManualClock::new()).await;
    assert!(s.admin.is_ipv6(), "{}", s.admin);
    let own = s.admin.to_string();
    assert!(own.starts_with("[::1]:"), "{own}");
    let a = ask(s.admin, "GET", "/config", &[("Host", &own)]).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let a = ask(s.admin, "POST", "/reload", &[("Host", &own)]).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let foreign = format!("attacker.example:{}", s.admin.port());
    let a = ask(s.admin, "GET", "/config", &[("Host", &foreign)]).await;
    assert_eq!(a.status, 421, "{}", a.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cross_site_state_change_is_refused_and_same_origin_passes() {
    let (s, _) = served("").await;
    let adm = s.admin;
    let own = adm.to_string();
    let own_origin = format!("http://{own}");
    let before = reloads(adm).await;
    let host = ("Host", own.as_str());
    assert!(!denied(&s, "192.0.2.9").await);
    assert!(denied(&s, "192.0.2.9").await);
    for (what, extra) in [
        (
            "Origin of another site",
            vec![("Origin", "http://attacker.example")],
        ),
        (
            "Origin on another port",
            vec![("Origin", "http://127.0.0.1:3000")],
        ),
        ("Origin null (a sandboxed frame)", vec![("Origin", "null")]),
        (
            "Sec-Fetch-Site: cross-site",
            vec![("Sec-Fetch-Site", "cross-site")],
        ),
        (
            "Sec-Fetch-Site: same-site",
            vec![("Sec-Fetch-Site", "same-site")],
        ),
        (
            "own Origin but cross-site",
            vec![
                ("Origin", own_origin.as_str()),
                ("Sec-Fetch-Site", "cross-site"),
            ],
        ),
    ] {
        let mut headers = vec![host];
        headers.extend(extra);
        let a = ask(adm, "POST", "/reload", &headers).await;
        assert_problem(&a, 403, "is refused: the admin API takes a POST only", what);
        let a = ask(adm, "DELETE", "/limits/per_ip?ip=192.0.2.9", &headers).await;
        assert_problem(&a, 403, "takes a DELETE only from its own pages", what);
        assert!(
            denied(&s, "192.0.2.9").await,
            "{what}: the key was not reset"
        );
    }
    assert_eq!(reloads(adm).await, before, "no cross-site reload ran");

    // Reading is not a state change: a cross-site GET is answered (the browser keeps the
    // answer from the page: no CORS header grants it).
    let a = ask(
        adm,
        "GET",
        "/config",
        &[host, ("Origin", "http://attacker.example")],
    )
    .await;
    assert_eq!(a.status, 200);
    assert!(
        !a.head
            .to_ascii_lowercase()
            .contains("access-control-allow-origin"),
        "{}",
        a.head
    );

    let mut ran = before;
    for (what, extra) in [
        ("no Origin (curl)", vec![]),
        (
            "same origin",
            vec![
                ("Origin", own_origin.as_str()),
                ("Sec-Fetch-Site", "same-origin"),
            ],
        ),
        ("typed by the user", vec![("Sec-Fetch-Site", "none")]),
    ] {
        let mut headers = vec![host];
        headers.extend(extra);
        let a = ask(adm, "POST", "/reload", &headers).await;
        assert_eq!(a.status, 200, "{what}: {}", a.body);
        ran += 1.0;
        assert_eq!(reloads(adm).await, ran, "{what}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_hosts_names_are_answered() {
    let (s, toml) = served("admin_hosts = [\"Admin.Internal\", \"ops.internal:1\"]\n").await;
    assert!(toml.contains("admin_hosts"), "{toml}");
    let adm = s.admin;
    let named = format!("admin.internal:{}", adm.port());
    let a = ask(adm, "GET", "/config", &[("Host", &named)]).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(
        a.body["server"]["admin_hosts"],
        serde_json::json!(["admin.internal", "ops.internal:1"])
    );
    let origin = format!("http://{named}");
    let a = ask(
        adm,
        "POST",
        "/reload",
        &[("Host", &named), ("Origin", &origin)],
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    // An entry with a port is that port only.
    let other_port = format!("ops.internal:{}", adm.port());
    let a = ask(adm, "GET", "/config", &[("Host", &other_port)]).await;
    assert_problem(
        &a,
        421,
        "does not answer to Host `ops.internal:",
        "ops.internal",
    );
}

const ADMIN_TOKEN: &str = "admin-token-browser-Q81xmZ";

/// With `admin_token_env` the `Host` is held to the rule too: the token is no licence for a
/// rebound page (the dashboard keeps it in the page).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_a_foreign_host_is_still_refused() {
    let toml = crate::common::config::ConfigBuilder::new("admin_token_env = \"TG_BROWSER_TOKEN\"")
        .upstream(dead_port().await)
        .text("[[routes]]\nname = \"api\"\nupstream = \"app\"\n")
        .build();
    let gw = spawn_serve_with_env(
        &temp_file("browser-token.toml", &toml),
        &[("TG_BROWSER_TOKEN", ADMIN_TOKEN)],
    );
    let adm = gw.admin.expect("an admin listener");
    let bearer = format!("Bearer {ADMIN_TOKEN}");
    let foreign = format!("attacker.example:{}", adm.port());
    let own = adm.to_string();
    let auth = ("Authorization", bearer.as_str());
    let a = ask(adm, "GET", "/config", &[("Host", &foreign), auth]).await;
    assert_problem(&a, 421, REBOUND, "with the token");
    let a = ask(adm, "GET", "/config", &[("Host", &own), auth]).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let a = ask(adm, "GET", "/config", &[("Host", &own)]).await;
    assert_eq!(a.status, 401, "{}", a.body);
}
