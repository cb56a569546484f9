//! What keying a login on its body costs the limit step, beside keying it on a header: one
//! local GCRA check of a username brought in an `x-username` header (`header`), in an
//! urlencoded form (`form`), in a JSON body (`json`, parse included: the proxy parses a
//! body once per request) and in a `multipart/form-data` body's already-parsed fields
//! (`multipart`; multer's parse is the proxy's, not measured here). The body read itself
//! (one copy into a buffer) is the proxy's and is not here either.
//!
//! Run: `cargo bench --bench key_body` (under a minute). Under `cargo test --all-targets`
//! criterion runs each function once. Report the ratios to `header`: the same run, the
//! same machine.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use http::{HeaderMap, HeaderValue, Method};
use prometheus_client::registry::Registry;
use tollgate::limit::clock::SystemClock;
use tollgate::limit::keys::{KeyBody, Target};
use tollgate::limit::{At, Checked, Limiter};

/// Four routes, each one policy keyed on the username where its route finds it; limits
/// no bench run reaches, so every check admits (the common case of a login).
const CONFIG: &str = r#"
[server]
listen = "127.0.0.1:0"
[upstreams.app]
urls = ["http://127.0.0.1:9"]
[policies.header]
key = ["header:x-username"]
algorithm = "gcra"
limit = 1000000000
period = "1s"
[policies.form]
key = ["form:username"]
algorithm = "gcra"
limit = 1000000000
period = "1s"
[policies.json]
key = ["json:/user/email"]
algorithm = "gcra"
limit = 1000000000
period = "1s"
[[routes]]
name = "header"
upstream = "app"
policies = ["header"]
[[routes]]
name = "form"
upstream = "app"
policies = ["form"]
[[routes]]
name = "json"
upstream = "app"
policies = ["json"]
[[routes]]
name = "multipart"
upstream = "app"
policies = ["form"]
"#;

const FORM: &str = "username=alice%40example.com&password=correct+horse+battery&remember=1";
const JSON: &str =
    r#"{"user":{"email":"alice@example.com","password":"correct horse battery"},"remember":true}"#;

fn limiter() -> Limiter {
    let origin = Path::new("benches/key_body.rs");
    let raw = tollgate::config::parse_str(CONFIG, origin).expect("bench config parses");
    let cfg = tollgate::config::validate(raw, origin).expect("bench config is valid");
    Limiter::new(&cfg, Arc::new(SystemClock::new()), &mut Registry::default())
        .expect("bench limiter")
}

fn benches(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let limiter = limiter();
    let client = IpAddr::V4(Ipv4Addr::new(203, 0, 113, 9));
    let names: Vec<Arc<str>> = ["header", "form", "json", "multipart"]
        .into_iter()
        .map(Arc::from)
        .collect();
    let mut headers = HeaderMap::new();
    headers.insert("x-username", HeaderValue::from_static("alice@example.com"));
    let none = HeaderMap::new();
    let form = Bytes::from_static(FORM.as_bytes());
    let fields = vec![
        ("username".to_owned(), b"alice@example.com".to_vec()),
        ("password".to_owned(), b"correct horse battery".to_vec()),
    ];
    let check = |route: usize, headers: &HeaderMap, body: Option<&KeyBody>| {
        let at = At {
            route,
            route_name: &names[route],
            client,
            method: &Method::POST,
        };
        let target = Target {
            body,
            ..Target::default()
        };
        // As the gateway asks: these routes' policies are local, decided without a future.
        let admission = match limiter.check_now(at, target, headers) {
            Checked::Now(admission) => admission,
            Checked::Later(check) => rt.block_on(check),
        };
        assert!(admission.decision.key.is_some(), "the policy applied");
        black_box(admission)
    };
    let mut g = c.benchmark_group("login_key");
    g.bench_function("header", |b| b.iter(|| check(0, &headers, None)));
    g.bench_function("form", |b| {
        b.iter(|| check(1, &none, Some(&KeyBody::Urlencoded(form.clone()))))
    });
    g.bench_function("json", |b| {
        b.iter(|| check(2, &none, Some(&KeyBody::json(JSON.as_bytes()))))
    });
    g.bench_function("multipart", |b| {
        b.iter(|| check(3, &none, Some(&KeyBody::Multipart(fields.clone()))))
    });
    g.finish();
}

criterion_group!(key_body, benches);
criterion_main!(key_body);
