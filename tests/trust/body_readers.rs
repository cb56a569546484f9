//! Issue 46's differential test for body keys: each spelling of a login body that a Flask
//! (Werkzeug 3) backend reads as `username = victim` while an earlier gateway keyed another
//! value (a decoy part, another boundary, no key at all) is a fixture below. Real readers say
//! what the body holds (`common/readers.py`: Werkzeug, the `multipart` package, Python's
//! `email`), and a real gateway (`form:username` or `json:/username`, 3 per hour,
//! `on_missing_key` `"deny"` and then `"skip"`) takes five attempts of it, each with a new
//! decoy. The rule: an attempt is refused (400) or keyed as Werkzeug reads it — so five
//! attempts never get five past a limit of three, and whatever got past spent the victim's
//! own budget (a plain body for the victim gets exactly what is left). Bodies every reader
//! reads alike keep working: three pass, the victim is then spent.

use std::net::SocketAddr;

use crate::common::config::{limited, policy, route};
use crate::common::readers::{py_values, python_bodies};
use crate::common::*;
use bytes::Bytes;
use http::{HeaderValue, Request, StatusCode};
use http_body_util::Full;

const LIMIT: usize = 3;
const ATTEMPTS: usize = 5;
const MP: &[u8] = b"multipart/form-data; boundary=XB";
const FORM: &[u8] = b"application/x-www-form-urlencoded";

/// Where a fixture is posted: the route keyed on `form:username` or on `json:/username`.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Key {
    Form,
    Json,
}

/// A body: `VICTIM` and `DECOY` stand for the attempt's values; `plain` when every reader
/// reads it alike (it must keep working), else one of the issue's spellings.
struct Fixture {
    name: &'static str,
    key: Key,
    content_type: &'static [u8],
    body: &'static [u8],
    plain: bool,
}

const fn attack(name: &'static str, content_type: &'static [u8], body: &'static [u8]) -> Fixture {
    Fixture {
        name,
        key: Key::Form,
        content_type,
        body,
        plain: false,
    }
}

const fn plain(name: &'static str, content_type: &'static [u8], body: &'static [u8]) -> Fixture {
    Fixture {
        name,
        key: Key::Form,
        content_type,
        body,
        plain: true,
    }
}

const fn json(name: &'static str, content_type: &'static [u8]) -> Fixture {
    Fixture {
        name,
        key: Key::Json,
        content_type,
        body: br#"{"username": "VICTIM", "password": "DECOY"}"#,
        plain: false,
    }
}

/// A hidden `username` part, then the decoy `username` part a gateway may read instead.
macro_rules! hidden {
    ($disposition:literal) => {
        concat!(
            "--XB\r\nContent-Disposition: form-data; ",
            $disposition,
            "\r\n\r\nVICTIM\r\n--XB\r\nContent-Disposition: form-data; name=\"username\"\r\n\r\nDECOY\r\n--XB--\r\n"
        )
        .as_bytes()
    };
}

fn fixtures() -> Vec<Fixture> {
    vec![
        // A part name that ends at the first non-token character to Werkzeug.
        attack("name=username/", MP, hidden!("name=username/")),
        attack("name=username\"", MP, hidden!("name=username\"")),
        attack("name=username@", MP, hidden!("name=username@")),
        attack("name=username,", MP, hidden!("name=username,")),
        attack("name=username:", MP, hidden!("name=username:")),
        attack("name=username(", MP, hidden!("name=username(")),
        attack("name=username=x", MP, hidden!("name=username=x")),
        attack("name=username?", MP, hidden!("name=username?")),
        attack("name=username{", MP, hidden!("name=username{")),
        // A `filename` Werkzeug skips (a field) and others read (a file).
        attack("filename =\"x\"", MP, hidden!("name=\"username\"; filename =\"x\"")),
        attack("filename= \"x\"", MP, hidden!("name=\"username\"; filename= \"x\"")),
        // A delimiter line after a bare LF or CR: a new part to Werkzeug.
        attack(
            "LF-only delimiter",
            MP,
            b"--XB\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\nx\n--XB\r\nContent-Disposition: form-data; name=\"username\"\r\n\r\nVICTIM\r\n--XB\r\nContent-Disposition: form-data; name=\"username\"\r\n\r\nDECOY\r\n--XB--\r\n",
        ),
        attack(
            "CR-only delimiter",
            MP,
            b"--XB\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\nx\r--XB\r\nContent-Disposition: form-data; name=\"username\"\r\n\r\nVICTIM\r\n--XB\r\nContent-Disposition: form-data; name=\"username\"\r\n\r\nDECOY\r\n--XB--\r\n",
        ),
        // Werkzeug splits on `boundary*`, an earlier gateway on `boundary`.
        attack(
            "boundary=XB; boundary*=utf-8''YB",
            b"multipart/form-data; boundary=XB; boundary*=utf-8''YB",
            b"--XB\r\nContent-Disposition: form-data; name=\"username\"\r\n\r\nDECOY\r\n--YB\r\nContent-Disposition: form-data; name=\"username\"\r\n\r\nVICTIM\r\n--YB--\r\n--XB--\r\n",
        ),
        // Beyond the issue's four: an empty value right before the next delimiter (multer
        // reads the next part as its value), two Content-Disposition lines (multer keeps
        // the last), a part's headers ended by `\n\n` (Werkzeug), a folded header line.
        attack(
            "empty value without its CRLF",
            MP,
            b"--XB\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\n--XB\r\nContent-Disposition: form-data; name=\"username\"\r\n\r\nVICTIM\r\n--XB\r\nContent-Disposition: form-data; name=\"username\"\r\n\r\nDECOY\r\n--XB--\r\n",
        ),
        attack(
            "Content-Disposition twice",
            MP,
            b"--XB\r\nContent-Disposition: form-data; name=\"username\"\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\nVICTIM\r\n--XB\r\nContent-Disposition: form-data; name=\"username\"\r\n\r\nDECOY\r\n--XB--\r\n",
        ),
        attack(
            "part headers ended by LF LF",
            MP,
            b"--XB\r\nContent-Disposition: form-data; name=\"username\"\n\nVICTIM\r\n--XB\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\nDECOY\r\n--XB--\r\n",
        ),
        attack(
            "folded Content-Disposition",
            MP,
            b"--XB\r\nContent-Disposition: form-data;\r\n name=\"username\"\r\n\r\nVICTIM\r\n--XB\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\nDECOY\r\n--XB--\r\n",
        ),
        // A Content-Type byte outside ASCII: Werkzeug decodes latin-1 and strips.
        attack(
            "form type; x=\\xe9",
            b"application/x-www-form-urlencoded; x=\xe9",
            b"username=VICTIM&password=DECOY",
        ),
        attack(
            "form type\\xa0",
            b"application/x-www-form-urlencoded\xa0",
            b"username=VICTIM&password=DECOY",
        ),
        attack(
            "form type\\x85",
            b"application/x-www-form-urlencoded\x85",
            b"username=VICTIM&password=DECOY",
        ),
        attack(
            "multipart type\\xa0",
            b"multipart/form-data\xa0; boundary=XB",
            b"--XB\r\nContent-Disposition: form-data; name=\"username\"\r\n\r\nVICTIM\r\n--XB\r\nContent-Disposition: form-data; name=\"password\"\r\n\r\nDECOY\r\n--XB--\r\n",
        ),
        json("json type\\xa0", b"application/json\xa0"),
        json("json type\\x85", b"application/json\x85"),
        json("json type; x=\\xe9", b"application/json; x=\xe9"),
        // A raw `;` in a form: Werkzeug 3 reads `VICTIM;x=1`, an earlier gateway `VICTIM`.
        attack(
            "username=VICTIM;x=1",
            FORM,
            b"username=VICTIM;x=1&password=DECOY",
        ),
        // Read alike by every reader: these keep working.
        plain(
            "a browser's multipart form with a file",
            b"multipart/form-data; boundary=----WebKitFormBoundary7MA4YWxkTrZu0gW",
            b"------WebKitFormBoundary7MA4YWxkTrZu0gW\r\nContent-Disposition: form-data; name=\"username\"\r\n\r\nVICTIM\r\n------WebKitFormBoundary7MA4YWxkTrZu0gW\r\nContent-Disposition: form-data; name=\"avatar\"; filename=\"a.png\"\r\nContent-Type: image/png\r\n\r\n\x89PNG\n\x1a\n\r\n------WebKitFormBoundary7MA4YWxkTrZu0gW\r\nContent-Disposition: form-data; name=\"password\"\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nDECOY\r\n------WebKitFormBoundary7MA4YWxkTrZu0gW--\r\n",
        ),
        plain(
            "quoted boundary, preamble, token name, epilogue",
            b"multipart/form-data; boundary=\"X B\"",
            b"preamble\r\n--X B\r\nCONTENT-DISPOSITION: form-data; NAME=username\r\n\r\nVICTIM\r\n--X B\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\nline\none\rtwo\r\n\r\n--X B\r\nContent-Disposition: form-data; name=\"password\"\r\n\r\nDECOY\r\n--X B--\r\nepilogue",
        ),
        plain(
            "a `;` in another field",
            b"application/x-www-form-urlencoded; charset=UTF-8",
            b"username=VICTIM&note=a;b&password=DECOY",
        ),
        Fixture {
            plain: true,
            ..json("plain JSON", b"application/json; charset=utf-8")
        },
    ]
}

/// `body` with the placeholders filled in.
fn fill(body: &[u8], victim: &str, decoy: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len());
    let mut rest = body;
    while let Some((&b, tail)) = rest.split_first() {
        if let Some(after) = rest.strip_prefix(b"VICTIM") {
            out.extend_from_slice(victim.as_bytes());
            rest = after;
        } else if let Some(after) = rest.strip_prefix(b"DECOY") {
            out.extend_from_slice(decoy.as_bytes());
            rest = after;
        } else {
            out.push(b);
            rest = tail;
        }
    }
    out
}

/// A gateway with `/form` keyed on `form:username` and `/json` on `json:/username`, 3 per
/// hour each, with `missing` as `on_missing_key`.
async fn gateway(missing: &str) -> Gateway {
    let extra = format!("on_missing_key = \"{missing}\"");
    let text = limited(echo_upstream().await, "")
        .text(&policy("form", &["form:username"], "gcra", 3, "1h", &extra))
        .text(&policy(
            "json",
            &["json:/username"],
            "gcra",
            3,
            "1h",
            &extra,
        ))
        .text(&route("form", &["form"], "closed"))
        .text(&route("json", &["json"], "closed"))
        .build();
    Gateway::start(&text).await
}

async fn post(addr: SocketAddr, key: Key, content_type: &[u8], body: Vec<u8>) -> StatusCode {
    let path = match key {
        Key::Form => "form",
        Key::Json => "json",
    };
    let req = Request::post(format!("http://{addr}/{path}"))
        .header("x-forwarded-for", "203.0.113.9")
        .header(
            "content-type",
            HeaderValue::from_bytes(content_type).unwrap(),
        )
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    send_h1(addr, req).await.status()
}

/// A plain body for `value`, as a browser or `fetch` sends it.
fn plain_body(key: Key, value: &[u8]) -> (&'static [u8], Vec<u8>) {
    match key {
        Key::Form => {
            let encoded: String = value.iter().map(|b| format!("%{b:02X}")).collect();
            (FORM, format!("username={encoded}").into_bytes())
        }
        Key::Json => {
            let text = String::from_utf8(value.to_vec()).unwrap();
            let body = serde_json::json!({ "username": text }).to_string();
            (b"application/json", body.into_bytes())
        }
    }
}

/// Every fixture through a gateway with `on_missing_key = missing`: the rows that break the
/// rule (module docs), with what each reader read.
async fn run(missing: &str) -> Vec<String> {
    let fixtures = fixtures();
    let victim = |i: usize| format!("victim{i}");
    let decoy = |i: usize, n: usize| format!("decoy{i}n{n}");
    let bodies: Vec<_> = fixtures
        .iter()
        .enumerate()
        .map(|(i, f)| {
            (
                f.content_type.to_vec(),
                fill(f.body, &victim(i), &decoy(i, 0)),
            )
        })
        .collect();
    let readings = python_bodies(&bodies, "username");
    let gw = gateway(missing).await;
    let addr = gw.addrs.listen;
    let mut broken = Vec::new();
    for (i, f) in fixtures.iter().enumerate() {
        let read = &readings[i];
        let werkzeug = py_values(&read["werkzeug"]).unwrap_or_default();
        // Flask's `request.form["username"]` is the first value.
        let Some(flask) = werkzeug.first() else {
            panic!("{}: Werkzeug reads no username: {read}", f.name);
        };
        assert!(
            flask.starts_with(victim(i).as_bytes()),
            "{}: the fixture must carry the victim for Werkzeug: {read}",
            f.name
        );
        let mut statuses = Vec::new();
        for n in 0..ATTEMPTS {
            let body = fill(f.body, &victim(i), &decoy(i, n));
            statuses.push(post(addr, f.key, f.content_type, body).await);
        }
        let passed = statuses.iter().filter(|s| s.is_success()).count();
        let (plain_type, plain) = plain_body(f.key, flask);
        let mut left = 0;
        for _ in 0..LIMIT {
            left += usize::from(
                post(addr, f.key, plain_type, plain.clone())
                    .await
                    .is_success(),
            );
        }
        let odd = statuses.iter().any(|s| {
            ![
                StatusCode::OK,
                StatusCode::BAD_REQUEST,
                StatusCode::TOO_MANY_REQUESTS,
            ]
            .contains(s)
        });
        let kept = passed + left == LIMIT;
        let works = !f.plain || passed == LIMIT;
        if odd || !kept || !works {
            broken.push(format!(
                "{:<40} attempts {:?}, then {left} of {LIMIT} for Werkzeug's `{}`; readers: {read}",
                f.name,
                statuses.iter().map(|s| s.as_u16()).collect::<Vec<_>>(),
                flask.escape_ascii()
            ));
        }
    }
    broken
}

/// With `on_missing_key = "deny"`: no spelling hides the username behind a decoy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_spellings_are_refused_or_keyed_as_werkzeug_reads_them() {
    let broken = run("deny").await;
    assert!(broken.is_empty(), "\n{}", broken.join("\n"));
}

/// With the default `on_missing_key = "skip"`: no spelling makes the body keyless to the
/// gateway while Werkzeug reads a username from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_spellings_are_never_keyless_where_werkzeug_reads_a_username() {
    let broken = run("skip").await;
    assert!(broken.is_empty(), "\n{}", broken.join("\n"));
}
