//! Step 1, beside the client address: *which request is this*. Every request leaves the
//! gateway with one id in `[server] request_id_header` (`x-request-id`): forwarded to the
//! upstream, returned to the client, in the access-log line and in problem bodies, so one
//! request can be followed through the logs of every hop.
//!
//! The id a client sends is a claim like its `X-Forwarded-For`: it is kept only from a
//! trusted proxy (the same `trusted_proxies` rule), whose balancer minted it for this
//! request. From anyone else it is replaced, so a client cannot make its requests look like
//! someone else's in the logs, or inject text into them.

use http::{HeaderMap, HeaderName, HeaderValue};

/// Longest id kept from a trusted proxy; longer ones are replaced (Envoy's ids are 36
/// bytes, AWS's trace ids 40; 128 leaves room without letting a header flood the log).
const LONGEST_ID: usize = 128;

/// The request-id rule of one gateway.
#[derive(Debug, Clone)]
pub struct RequestIds {
    /// Where the id travels (`server.request_id_header`).
    header: HeaderName,
}

impl RequestIds {
    pub fn new(header: HeaderName) -> Self {
        RequestIds { header }
    }

    /// The header the id travels in.
    pub fn header(&self) -> &HeaderName {
        &self.header
    }

    /// The request's id: the one a trusted peer sent (exactly one value, 1 to 128 visible
    /// ASCII characters), else a fresh UUID v4. The request's headers are left holding
    /// that id alone, so the upstream sees what the log and the client see.
    pub fn settle(&self, headers: &mut HeaderMap, peer_trusted: bool) -> HeaderValue {
        if peer_trusted && let Some(kept) = single(headers, &self.header).filter(|v| acceptable(v))
        {
            return kept.clone();
        }
        let id = mint();
        headers.insert(self.header.clone(), id.clone());
        id
    }
}

/// The header's value when it has exactly one.
fn single<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<&'a HeaderValue> {
    if super::headers::surely_absent(headers, name) {
        return None;
    }
    let mut values = headers.get_all(name).iter();
    let first = values.next()?;
    values.next().is_none().then_some(first)
}

/// Visible ASCII only: no spaces, quotes-safe in a text log line, nothing to decode.
fn acceptable(v: &HeaderValue) -> bool {
    let b = v.as_bytes();
    (1..=LONGEST_ID).contains(&b.len()) && b.iter().all(u8::is_ascii_graphic)
}

/// A random (v4) UUID, hyphenated: unique without coordination between gateways. Its
/// bytes are owned by one shared allocation, so the clones the request's headers, the
/// response and the log take are counts, not copies: from a `&str` the value was a `Vec`,
/// whose first clone allocated `Bytes`' shared header (2 allocations a request,
/// `benches/allocations.rs`).
fn mint() -> HeaderValue {
    let mut buf = [0u8; uuid::fmt::Hyphenated::LENGTH];
    uuid::Uuid::new_v4().hyphenated().encode_lower(&mut buf);
    HeaderValue::from_maybe_shared(bytes::Bytes::from_owner(buf))
        .expect("a hyphenated UUID is a valid header value")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> RequestIds {
        RequestIds::new(HeaderName::from_static("x-request-id"))
    }

    #[test]
    fn a_trusted_peers_id_is_kept_and_anyone_elses_replaced() {
        let mut h = HeaderMap::new();
        h.insert("x-request-id", HeaderValue::from_static("lb-123"));
        assert_eq!(ids().settle(&mut h.clone(), true), "lb-123");
        let minted = ids().settle(&mut h, false);
        assert_ne!(minted, "lb-123");
        assert_eq!(
            h["x-request-id"], minted,
            "the request carries the minted id"
        );
    }

    #[test]
    fn a_minted_id_is_a_uuid_and_fresh_each_time() {
        let a = ids().settle(&mut HeaderMap::new(), true);
        let b = ids().settle(&mut HeaderMap::new(), true);
        assert_ne!(a, b);
        let parsed = uuid::Uuid::parse_str(a.to_str().unwrap()).unwrap();
        assert_eq!(parsed.get_version_num(), 4);
    }

    #[test]
    fn unusable_ids_are_replaced_even_from_a_trusted_peer() {
        let long = "a".repeat(LONGEST_ID + 1);
        for bad in ["", "two words", long.as_str(), "caf\u{e9}"] {
            let mut h = HeaderMap::new();
            h.insert(
                "x-request-id",
                HeaderValue::from_bytes(bad.as_bytes()).unwrap(),
            );
            let id = ids().settle(&mut h, true);
            assert!(
                uuid::Uuid::parse_str(id.to_str().unwrap()).is_ok(),
                "{bad:?}"
            );
        }
        let mut h = HeaderMap::new();
        h.append("x-request-id", HeaderValue::from_static("a"));
        h.append("x-request-id", HeaderValue::from_static("b"));
        let id = ids().settle(&mut h, true);
        assert_eq!(h.get_all("x-request-id").iter().count(), 1, "one id left");
        assert_eq!(h["x-request-id"], id);
    }
}
