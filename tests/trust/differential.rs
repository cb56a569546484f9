//! Issue 30's differential test: for each identity value of a corpus (`victim` padded with
//! every whitespace, control and invisible character and every obs-text byte, at either
//! end, plus values nobody reads otherwise), how Python (real: Werkzeug's latin-1 headers,
//! a UTF-8 reader, `parse_qs`), Go, .NET, Java, Node and PHP would read it
//! (`common/readers.rs`), and what the gateway does. The rule: the gateway either keys a
//! value as every reader reads it, or refuses it (400). Shown as a spent key: once each
//! reading's one request per hour is spent, the value itself is refused or denied — never
//! a fresh budget. Over HTTP/1.1 and HTTP/2, for an `account` header and a `query:` part.

use std::net::SocketAddr;

use crate::common::config::{limited, policy};
use crate::common::readers::{self, dotnet, go, java, node, pads, php, py_bytes, shown};
use crate::common::*;
use bytes::Bytes;
use http::{HeaderValue, Request, StatusCode};
use http_body_util::Empty;

/// The values: `victim` with each pad after it and before it, and values whose every
/// reading is their bytes (which must be keyed, not refused).
fn corpus() -> (Vec<Vec<u8>>, usize) {
    let mut values = Vec::new();
    for pad in pads() {
        values.push([b"victim".as_slice(), &pad].concat());
        values.push([pad.as_slice(), b"victim"].concat());
    }
    let plain = [
        "vic\u{a0}tim",
        "vic tim",
        "victimé",
        "ǅvictim",
        "victim\u{4e00}",
        "v",
    ];
    values.extend(plain.iter().map(|p| p.as_bytes().to_vec()));
    (values, plain.len())
}

/// A gateway with 1 per hour per account (`x-api-key`) and per `query:k`, on one route.
async fn gateway() -> Gateway {
    let up = echo_upstream().await;
    let text = limited(up, "")
        .text(&policy("per_account", &["account"], "gcra", 1, "1h", ""))
        .text(&policy("per_k", &["query:k"], "gcra", 1, "1h", ""))
        .app_route("api", "policies = [\"per_account\", \"per_k\"]")
        .build();
    Gateway::start(&text).await
}

/// How a request carries a value: the account header, or `?k=` percent-encoded.
#[derive(Clone, Copy, PartialEq)]
enum Carrier {
    Header,
    Query,
}

/// The status of one GET carrying `value`; `None` when no client can send those bytes
/// (a control in a header value).
async fn send(addr: SocketAddr, carrier: Carrier, value: &[u8], h2: bool) -> Option<StatusCode> {
    let mut req = Request::builder().header("x-forwarded-for", "203.0.113.9");
    req = match carrier {
        Carrier::Header => {
            let v = HeaderValue::from_bytes(value).ok()?;
            req.uri(format!("http://{addr}/api")).header("x-api-key", v)
        }
        Carrier::Query => {
            let q: String = value.iter().map(|b| format!("%{b:02X}")).collect();
            req.uri(format!("http://{addr}/api?k={q}"))
        }
    };
    let req = req.body(Empty::<Bytes>::new()).unwrap();
    let resp = match h2 {
        true => send_h2(addr, req).await,
        false => send_h1(addr, req).await,
    };
    Some(resp.status())
}

/// Every reader's reading of `value` carried by `carrier`, named.
fn readings(
    carrier: Carrier,
    value: &[u8],
    python: &serde_json::Value,
) -> Vec<(&'static str, Vec<u8>)> {
    let mut all = vec![("go", go(value)), (".net", dotnet(value))];
    match carrier {
        Carrier::Header => {
            all.push(("java", java(value)));
            all.push(("node", node(value)));
            all.extend(py_bytes(&python["wsgi"]).map(|r| ("python-wsgi", r)));
            all.extend(py_bytes(&python["asgi_utf8"]).map(|r| ("python-utf8", r)));
        }
        Carrier::Query => {
            all.push(("php", php(value)));
            all.extend(py_bytes(&python["parse_qs"]).map(|r| ("python-qs", r)));
        }
    }
    all
}

/// Run the corpus through `carrier` on both protocols; the rows where a reader differs.
async fn differential(carrier: Carrier) -> Vec<String> {
    let (values, plain) = corpus();
    let python = match carrier {
        Carrier::Header => readers::python(&values, &[], &[], "")["headers"].clone(),
        Carrier::Query => readers::python(&[], &values, &[], "")["queries"].clone(),
    };
    let gw = gateway().await;
    let addr = gw.addrs.listen;
    let (mut table, mut broken) = (Vec::new(), Vec::new());
    for (i, v) in values.iter().enumerate() {
        let other: Vec<_> = readings(carrier, v, &python[i])
            .into_iter()
            .filter(|(_, r)| r != v)
            .collect();
        let mut got = Vec::new();
        for h2 in [false, true] {
            for (_, r) in &other {
                send(addr, carrier, r, h2).await; // that reading's budget: spent
            }
            let Some(status) = send(addr, carrier, v, h2).await else {
                continue;
            };
            got.push(status.as_u16());
            let refused = matches!(status.as_u16(), 400 | 429);
            let plain_value = i >= values.len() - plain;
            if (!other.is_empty() && !refused) || (plain_value && status.as_u16() == 400) {
                broken.push(format!(
                    "{} over {}: {status}",
                    shown(v),
                    ["h1", "h2"][h2 as usize]
                ));
            }
        }
        if !other.is_empty() {
            let read: Vec<String> = other
                .iter()
                .map(|(n, r)| format!("{n}={}", shown(r)))
                .collect();
            table.push(format!("{} | {} | {got:?}", shown(v), read.join(" ")));
        }
    }
    assert!(
        broken.is_empty(),
        "fresh budgets (or plain values refused): {broken:#?}"
    );
    table
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_header_value_is_keyed_as_readers_read_it_or_refused() {
    let table = differential(Carrier::Header).await;
    eprintln!(
        "value | readings that differ | gateway (h1, h2)\n{}",
        table.join("\n")
    );
    // The readers work: Flask's latin-1 reading trims a lone 0xA0; the table is the corpus.
    assert!(
        table
            .iter()
            .any(|r| r.starts_with("victim\\xa0 |") && r.contains("python-wsgi=victim"))
    );
    assert!(table.len() > 300, "{}", table.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_query_value_is_keyed_as_readers_read_it_or_refused() {
    let table = differential(Carrier::Query).await;
    eprintln!(
        "value | readings that differ | gateway (h1, h2)\n{}",
        table.join("\n")
    );
    assert!(
        table
            .iter()
            .any(|r| r.starts_with("\\xe3\\x80\\x80victim |") && r.contains("python-qs=victim"))
    );
    assert!(table.len() > 300, "{}", table.len());
}
