//! Header rewriting between client and upstream (RFC 9110 §7.6): hop-by-hop headers stay on
//! their hop, forwarding headers record the hop we add.

use std::net::IpAddr;

use http::Version;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};

/// Headers that describe one connection, never forwarded (RFC 9110 §7.6.1 plus the
/// de-facto `Keep-Alive` and `Proxy-Connection`).
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
];

/// The protocol a client asks to switch to (`Connection: upgrade` + `Upgrade: x`), if any.
pub fn upgrade_request(headers: &HeaderMap) -> Option<HeaderValue> {
    let wants = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case("upgrade"));
    if wants {
        headers.get(header::UPGRADE).cloned()
    } else {
        None
    }
}

/// Drop hop-by-hop headers, including any named in `Connection`. When `upgrade` is set the
/// `Connection: upgrade` / `Upgrade` pair is kept, since the tunnel needs the next hop to see it.
pub fn remove_hop_by_hop(headers: &mut HeaderMap, upgrade: Option<&HeaderValue>) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
        .collect();
    for name in named.iter().chain(HOP_BY_HOP.iter()) {
        headers.remove(name);
    }
    headers.remove(header::UPGRADE);
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

/// Append `X-Forwarded-For`, `Forwarded` and `Via`; set `X-Forwarded-Proto`.
pub fn add_forwarding(headers: &mut HeaderMap, hop: &Hop, values: &HopValues) {
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
    append_value(
        headers,
        header::VIA,
        &HeaderValue::from_static(via(hop.version)),
    );
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

/// Append to a list header; the common case (no such header yet) is a cheap clone.
fn append_value(headers: &mut HeaderMap, name: HeaderName, value: &HeaderValue) {
    if headers.contains_key(&name) {
        if let Ok(v) = value.to_str() {
            append_list(headers, name, v);
        }
    } else {
        headers.insert(name, value.clone());
    }
}

/// The `Via` entry for a response we pass back.
pub fn add_via(headers: &mut HeaderMap, version: Version) {
    append_list(headers, header::VIA, via(version));
}

fn via(version: Version) -> &'static str {
    match version {
        Version::HTTP_09 => "0.9 tollgate",
        Version::HTTP_10 => "1.0 tollgate",
        Version::HTTP_2 => "2 tollgate",
        Version::HTTP_3 => "3 tollgate",
        _ => "1.1 tollgate",
    }
}

/// Append `value` to a comma-separated list header, merging repeated fields into one.
fn append_list(headers: &mut HeaderMap, name: HeaderName, value: &str) {
    let mut joined = String::new();
    for v in headers.get_all(&name) {
        if let Ok(s) = v.to_str() {
            joined.push_str(s);
            joined.push_str(", ");
        }
    }
    joined.push_str(value);
    if let Ok(v) = HeaderValue::from_str(&joined) {
        headers.insert(name, v);
    }
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
        h.insert("x-keep", "1".parse().unwrap());
        remove_hop_by_hop(&mut h, None);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key("x-keep"));
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
        add_forwarding(&mut h, &hop, &HopValues::new(hop.peer, hop.tls));
        assert_eq!(h["x-forwarded-for"], "1.2.3.4, 2001:db8::2");
        assert_eq!(h["x-forwarded-proto"], "http");
        assert_eq!(h["forwarded"], "for=\"[2001:db8::2]\";proto=http");
        assert_eq!(h["via"], "2 tollgate");
    }
}
