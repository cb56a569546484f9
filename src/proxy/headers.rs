//! Header rewriting between client and upstream (RFC 9110 §7.6): hop-by-hop headers stay on
//! their hop, forwarding headers record the hop we add, and protected names (`names`: in
//! every `_`/`-` spelling) reach the upstream only from peers allowed to send them.

use std::net::IpAddr;

use http::Version;
use http::header::{self, Entry, HeaderMap, HeaderName, HeaderValue};
use smallvec::SmallVec;

pub mod names;

/// Whether `name` describes one connection and is never forwarded (RFC 9110 §7.6.1, the
/// de-facto `Keep-Alive` and `Proxy-Connection`, and `Upgrade`, which only an allowed
/// upgrade puts back). A `match`, not a list of `HeaderName`s to compare one by one.
fn is_hop_by_hop(name: &str) -> bool {
    matches!(
        name,
        "connection"
            | "keep-alive"
            | "proxy-connection"
            // httpoxy: CGI hands `Proxy:` to the backend as `HTTP_PROXY`, which many HTTP
            // clients take as their outbound proxy. No request has a reason to carry it.
            | "proxy"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
    )
}

/// The protocols a client asks to switch to (`Connection: upgrade` + `Upgrade: a, b/1`)
/// that the route allows, as the `Upgrade` value to forward; `None` when it asks for none of
/// them (every other protocol, and `h2c` always, is dropped with the hop-by-hop headers).
pub fn upgrade_request(headers: &HeaderMap, allowed: &[String]) -> Option<HeaderValue> {
    if surely_absent(headers, &header::CONNECTION) {
        return None;
    }
    let wants = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case("upgrade"));
    if !wants || allowed.is_empty() {
        return None;
    }
    let kept: Vec<&str> = headers
        .get_all(header::UPGRADE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|p| upgrade_allowed(p, allowed))
        .collect();
    if kept.is_empty() {
        return None;
    }
    HeaderValue::from_str(&kept.join(", ")).ok()
}

/// Whether `name` is surely not in `headers`, without hashing it (the limiter's layer
/// reads forwarding headers with it too).
pub use crate::limit::layer::client_ip::surely_absent;

/// Whether `protocol` (`name` or `name/version`) is one of `allowed` (lower-case names).
pub fn upgrade_allowed(protocol: &str, allowed: &[String]) -> bool {
    let name = protocol.split('/').next().unwrap_or("").trim();
    !name.eq_ignore_ascii_case("h2c") && allowed.iter().any(|a| name.eq_ignore_ascii_case(a))
}

/// Drop hop-by-hop headers, including any named in `Connection` — except `protected` ones,
/// which carry identity a client must not strip from the request that was limited. When
/// `upgrade` is set the `Connection: upgrade` / `Upgrade` pair is kept, since the tunnel
/// needs the next hop to see it.
/// One pass over the names present, then a removal only for those found (nine blind
/// `remove`s, each hashing a name, cost ~1 900 instructions a message, twice a request).
pub fn remove_hop_by_hop(
    headers: &mut HeaderMap,
    upgrade: Option<&HeaderValue>,
    protected: &[HeaderName],
) {
    let mut doomed: SmallVec<[HeaderName; 4]> = SmallVec::new();
    let mut connection = false;
    for k in headers.keys() {
        if is_hop_by_hop(k.as_str()) {
            connection |= *k == header::CONNECTION;
            doomed.push(k.clone());
        }
    }
    // A token names a header when it equals its (lower-case) name ignoring ASCII case, as
    // `HeaderName::from_bytes` would have lower-cased it; a token that is no valid name
    // matches no key. Plain loops: adapters and collects cost ~1 300 instructions here.
    let values = connection.then(|| headers.get_all(header::CONNECTION));
    let lines = values
        .iter()
        .flat_map(|v| v.iter())
        .filter_map(|v| v.to_str().ok());
    for token in lines.flat_map(|v| v.split(',')).map(str::trim) {
        for k in headers.keys() {
            let named = k.as_str().eq_ignore_ascii_case(token);
            if named && !protected.contains(k) && !doomed.contains(k) {
                doomed.push(k.clone());
            }
        }
    }
    for name in doomed {
        headers.remove(name);
    }
    if let Some(proto) = upgrade {
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(header::UPGRADE, proto.clone());
    }
}

/// What the forwarding headers need to know about the hop we add.
pub struct Hop {
    /// The TCP peer (not the resolved client: each proxy records its own hop).
    pub peer: IpAddr,
    /// Whether the client reached us over TLS.
    pub tls: bool,
    /// The client's HTTP version, for `Via`.
    pub version: Version,
    /// Whether `peer` is a trusted proxy, whose `X-Forwarded-Proto` we keep.
    pub peer_trusted: bool,
}

/// Forwarding values that depend only on the connection: made once per connection, so a
/// request whose client sent no forwarding headers of its own costs no formatting.
#[derive(Debug)]
pub struct HopValues {
    /// The peer address, as `X-Forwarded-For` and `X-Real-IP` write it.
    peer: HeaderValue,
    /// This hop's `Forwarded` element, `for=…;proto=…`.
    forwarded: HeaderValue,
}

impl HopValues {
    pub fn new(peer: IpAddr, tls: bool) -> Self {
        let proto = if tls { "https" } else { "http" };
        let node = match peer {
            IpAddr::V4(v4) => v4.to_string(),
            IpAddr::V6(v6) => format!("\"[{v6}]\""),
        };
        let value = |s: String| {
            HeaderValue::from_str(&s).expect("an address formats as a valid header value")
        };
        HopValues {
            peer: value(peer.to_string()),
            forwarded: value(format!("for={node};proto={proto}")),
        }
    }
}

/// This hop's `Via` entries (`1.1 pseudonym`), one per HTTP version, made once.
#[derive(Debug)]
pub struct ViaValues {
    h10: HeaderValue,
    h11: HeaderValue,
    h2: HeaderValue,
}

impl ViaValues {
    /// `pseudonym` is a validated HTTP token, so every value is a valid header value.
    pub fn new(pseudonym: &str) -> Self {
        let value = |v: &str| {
            HeaderValue::from_str(&format!("{v} {pseudonym}"))
                .unwrap_or_else(|_| HeaderValue::from_static("1.1 tollgate"))
        };
        ViaValues {
            h10: value("1.0"),
            h11: value("1.1"),
            h2: value("2"),
        }
    }

    fn get(&self, version: Version) -> &HeaderValue {
        match version {
            Version::HTTP_09 | Version::HTTP_10 => &self.h10,
            Version::HTTP_2 => &self.h2,
            _ => &self.h11,
        }
    }
}

/// Append `X-Forwarded-For`, `Forwarded` and `Via`; set `X-Forwarded-Proto`.
pub fn add_forwarding(headers: &mut HeaderMap, hop: &Hop, values: &HopValues, via: &ViaValues) {
    let proto = if hop.tls { "https" } else { "http" };
    append_value(
        headers,
        HeaderName::from_static("x-forwarded-for"),
        &values.peer,
    );
    let xfp = HeaderName::from_static("x-forwarded-proto");
    if !(hop.peer_trusted && headers.contains_key(&xfp)) {
        headers.insert(xfp, HeaderValue::from_static(proto));
    }
    append_value(headers, header::FORWARDED, &values.forwarded);
    append_value(headers, header::VIA, via.get(hop.version));
}

/// `X-Real-IP`: the client as tollgate resolved it (trusted-proxy rules applied), so the
/// backend need not repeat that logic. Always overwritten: a client must not set it.
pub fn set_real_ip(headers: &mut HeaderMap, client: IpAddr, peer: IpAddr, values: &HopValues) {
    let name = HeaderName::from_static("x-real-ip");
    if client == peer {
        headers.insert(name, values.peer.clone());
    } else if let Ok(v) = HeaderValue::from_str(&client.to_string()) {
        headers.insert(name, v);
    }
}

/// Append to a list header; the common case (no such header yet) is a cheap clone. One
/// lookup (`entry`), not a `contains_key` and then an `insert`.
fn append_value(headers: &mut HeaderMap, name: HeaderName, value: &HeaderValue) {
    match headers.entry(name) {
        Entry::Vacant(e) => {
            e.insert(value.clone());
        }
        Entry::Occupied(mut e) => {
            if let Some(v) = joined(e.iter(), value.as_bytes()) {
                e.insert(v);
            }
        }
    }
}

/// The `Via` entry for a response we pass back.
pub fn add_via(headers: &mut HeaderMap, version: Version, via: &ViaValues) {
    append_value(headers, header::VIA, via.get(version));
}

/// `value` appended to a comma-separated list header's lines, merged into one (the caller
/// replaces them all with it). Works on bytes: a line that is not UTF-8 must be kept, not
/// silently dropped (dropping it would let a client erase itself from the chain a backend
/// reads).
fn joined<'a>(lines: impl Iterator<Item = &'a HeaderValue>, value: &[u8]) -> Option<HeaderValue> {
    let mut joined = Vec::new();
    for v in lines {
        joined.extend_from_slice(v.as_bytes());
        joined.extend_from_slice(b", ");
    }
    joined.extend_from_slice(value);
    HeaderValue::from_bytes(&joined).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_and_connection_named_are_removed() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, "keep-alive, x-secret".parse().unwrap());
        h.insert("x-secret", "1".parse().unwrap());
        h.insert("keep-alive", "timeout=5".parse().unwrap());
        h.insert(header::TRANSFER_ENCODING, "chunked".parse().unwrap());
        h.insert("proxy", "http://evil.example:8080".parse().unwrap()); // httpoxy
        h.insert("x-keep", "1".parse().unwrap());
        remove_hop_by_hop(&mut h, None, &[]);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key("x-keep"));
    }

    #[test]
    fn connection_tokens_in_any_case_name_headers_once() {
        let mut h = HeaderMap::new();
        h.append(header::CONNECTION, "Keep-Alive, X-Secret".parse().unwrap());
        h.append(header::CONNECTION, "close, x-secret".parse().unwrap());
        h.insert("x-secret", "1".parse().unwrap());
        h.append("keep-alive", "timeout=5".parse().unwrap());
        h.append("keep-alive", "max=9".parse().unwrap());
        h.insert("close", "a header named as the token".parse().unwrap());
        h.insert("x-keep", "1".parse().unwrap());
        remove_hop_by_hop(&mut h, None, &[]);
        let left: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        assert_eq!(left, ["x-keep"]);
    }

    #[test]
    fn a_line_that_is_not_utf8_stays_in_the_chain() {
        let mut h = HeaderMap::new();
        h.insert(
            "x-forwarded-for",
            HeaderValue::from_bytes(b"\xff, 7.7.7.7").unwrap(),
        );
        append_value(
            &mut h,
            HeaderName::from_static("x-forwarded-for"),
            &"10.0.0.1".parse().unwrap(),
        );
        assert_eq!(h["x-forwarded-for"].as_bytes(), b"\xff, 7.7.7.7, 10.0.0.1");
    }

    #[test]
    fn protected_headers_survive_being_named() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            "host, x-api-key, x-other".parse().unwrap(),
        );
        h.insert(header::HOST, "a".parse().unwrap());
        h.insert("x-api-key", "k".parse().unwrap());
        h.insert("x-other", "o".parse().unwrap());
        remove_hop_by_hop(
            &mut h,
            None,
            &[header::HOST, HeaderName::from_static("x-api-key")],
        );
        assert!(h.contains_key(header::HOST) && h.contains_key("x-api-key"));
        assert!(!h.contains_key("x-other"));
    }

    #[test]
    fn only_allowed_upgrades_are_forwarded() {
        let allowed = vec!["websocket".to_string()];
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            "Upgrade, HTTP2-Settings".parse().unwrap(),
        );
        h.insert(header::UPGRADE, "h2c, WebSocket, foo/2".parse().unwrap());
        assert_eq!(upgrade_request(&h, &allowed).unwrap(), "WebSocket");
        h.insert(header::UPGRADE, "h2c".parse().unwrap());
        assert_eq!(upgrade_request(&h, &allowed), None);
        assert!(!upgrade_allowed("h2c", &["h2c".to_string()]));
        assert_eq!(upgrade_request(&h, &[]), None);
    }

    #[test]
    fn forwarding_headers_append() {
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", "1.2.3.4".parse().unwrap());
        h.insert("x-forwarded-proto", "https".parse().unwrap());
        let hop = Hop {
            peer: "2001:db8::2".parse().unwrap(),
            tls: false,
            version: Version::HTTP_2,
            peer_trusted: false,
        };
        let via = ViaValues::new("tollgate");
        add_forwarding(&mut h, &hop, &HopValues::new(hop.peer, hop.tls), &via);
        assert_eq!(h["x-forwarded-for"], "1.2.3.4, 2001:db8::2");
        assert_eq!(h["x-forwarded-proto"], "http");
        assert_eq!(h["forwarded"], "for=\"[2001:db8::2]\";proto=http");
        assert_eq!(h["via"], "2 tollgate");
    }
}
