//! Step 1 of the request path, *who is asking*: the address every later step (rate-limit
//! keys, logs, `X-Real-IP`) attributes a request to. Only a trusted proxy may speak for a
//! client, and only in the one forwarding header the operator chose
//! (`[client_ip] forwarded_header`); the other header is client-writable noise and is never
//! read. Everyone else is their TCP peer.
//!
//! Proxies append to the right, so the right end of a chain is the most trustworthy and the
//! left end is whatever the client typed. The chain is therefore read lazily from the right,
//! and the walk stops at the first hop that is not a trusted proxy: nothing to the left of
//! that hop (where an attacker's text lives) is even parsed, so it cannot change the answer.

use std::borrow::Cow;
use std::net::IpAddr;

use http::{HeaderMap, HeaderName, header};
use ipnet::IpNet;

use crate::keys::canonical;

/// `client_ip.forwarded_header`: the one forwarding header believed from trusted proxies
/// (a config key: the names are the user-facing contract).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
pub enum ForwardedHeader {
    /// `X-Forwarded-For` (what most load balancers append).
    #[default]
    #[serde(rename = "x-forwarded-for")]
    XForwardedFor,
    /// `Forwarded: for=…` (RFC 7239).
    #[serde(rename = "forwarded")]
    Forwarded,
}

/// Whether `name` is surely not in `headers`, known without hashing it: a small map's names
/// are compared one by one (a standard name compares as an enum, a custom one as bytes),
/// which costs less than a lookup's hash and probe (~115 instructions a `get_all` in
/// callgrind, seven of them a request for names most requests lack); a larger map answers
/// "maybe" and the caller looks the name up. The same answer as the lookup, only cheaper.
pub fn surely_absent(headers: &HeaderMap, name: &HeaderName) -> bool {
    headers.keys_len() <= SCANNED && !headers.keys().any(|k| k == name)
}

/// The most names [`surely_absent`] compares before it leaves the answer to a lookup.
const SCANNED: usize = 8;

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// The `trusted_proxies` list and the header they speak in, with the lookup the request path
/// needs.
#[derive(Debug, Clone, Default)]
pub struct TrustedProxies {
    /// Networks whose forwarding header we believe.
    nets: Vec<IpNet>,
    /// The one forwarding header believed; the other is ignored entirely.
    header: ForwardedHeader,
}

impl TrustedProxies {
    pub fn new(nets: Vec<IpNet>, header: ForwardedHeader) -> Self {
        TrustedProxies { nets, header }
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.nets.iter().any(|n| n.contains(&ip))
    }

    /// The client address: the peer, or — only when the peer is trusted — the right-most hop
    /// of the configured header that is not itself a trusted proxy. Field lines of the header
    /// are one list, in order. A hop that is not an address (garbage, empty, `unknown`,
    /// `_obfuscated`, a `Forwarded` element without `for`) met before any untrusted hop ends
    /// the walk at the furthest trusted hop seen (the peer if none). Never fails the request.
    pub fn client_ip(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let peer = canonical(peer);
        if !self.contains(peer) {
            return peer;
        }
        match self.header {
            ForwardedHeader::XForwardedFor => {
                if surely_absent(headers, &X_FORWARDED_FOR) {
                    return peer;
                }
                let lines = headers.get_all(&X_FORWARDED_FOR).into_iter().rev();
                let hops = lines.flat_map(|v| v.as_bytes().rsplit(|&b| b == b','));
                self.walk(peer, hops.map(|h| parse_node(h.trim_ascii())))
            }
            ForwardedHeader::Forwarded => {
                if surely_absent(headers, &header::FORWARDED) {
                    return peer;
                }
                let lines = headers.get_all(header::FORWARDED).into_iter().rev();
                let elements = lines.flat_map(|v| RevElements::new(v.as_bytes()));
                let hops = elements.map(|e| parse_node(&for_value(e.ok()?)?));
                self.walk(peer, hops)
            }
        }
    }

    /// `hops` nearest first; `None` (not an address) ends the walk.
    fn walk(&self, peer: IpAddr, hops: impl Iterator<Item = Option<IpAddr>>) -> IpAddr {
        let mut furthest = peer;
        for hop in hops {
            let Some(ip) = hop else { break };
            if !self.contains(ip) {
                return ip;
            }
            furthest = ip;
        }
        furthest
    }
}

/// One hop: `1.2.3.4`, `1.2.3.4:80`, `2001:db8::1`, `[2001:db8::1]`, `[2001:db8::1]:443`
/// (a port may be RFC 7239's obfuscated `_x`). `None` for anything else, `unknown` and
/// obfuscated nodes (`_hidden`) included: they name no address we could key.
fn parse_node(s: &[u8]) -> Option<IpAddr> {
    let s = std::str::from_utf8(s).ok()?;
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(canonical(ip));
    }
    let (ip, port) = match s.strip_prefix('[') {
        Some(rest) => match rest.split_once(']')? {
            (host, "") => return Some(canonical(IpAddr::V6(host.parse().ok()?))),
            (host, after) => (IpAddr::V6(host.parse().ok()?), after.strip_prefix(':')?),
        },
        // Only IPv4 may carry an unbracketed port: `a:b:c` would be ambiguous.
        None => {
            let (host, port) = s.rsplit_once(':')?;
            (IpAddr::V4(host.parse().ok()?), port)
        }
    };
    is_port(port).then(|| canonical(ip))
}

/// Digits up to 65535, or RFC 7239's obfuscated port (`_` and `[A-Za-z0-9._-]+`).
fn is_port(p: &str) -> bool {
    match p.strip_prefix('_') {
        Some(o) => {
            !o.is_empty()
                && o.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        }
        None => p.bytes().all(|b| b.is_ascii_digit()) && p.parse::<u16>().is_ok(),
    }
}

/// The elements of one `Forwarded` field line, last first: split on commas outside
/// quoted-strings, scanning from the right. Scanning this way means the element the proxy
/// appended is tokenised correctly whatever the client wrote to its left (a forward scan
/// would let a client's unterminated `"` swallow it). A `"` is escaped when an odd run of
/// backslashes precedes it, which is exact inside a well-formed quoted-string; an
/// unterminated one yields `Err` and ends the line.
struct RevElements<'a> {
    line: &'a [u8],
    /// End (exclusive) of the next element to yield; `None` once done.
    end: Option<usize>,
}

impl<'a> RevElements<'a> {
    fn new(line: &'a [u8]) -> Self {
        RevElements {
            line,
            end: Some(line.len()),
        }
    }
}

impl<'a> Iterator for RevElements<'a> {
    type Item = Result<&'a [u8], ()>;

    fn next(&mut self) -> Option<Self::Item> {
        let (line, end) = (self.line, self.end?);
        let mut i = end;
        while i > 0 {
            i -= 1;
            match line[i] {
                b',' => {
                    self.end = Some(i);
                    return Some(Ok(&line[i + 1..end]));
                }
                b'"' => {
                    let open = (0..i).rev().find(|&j| line[j] == b'"' && !escaped(line, j));
                    match open {
                        Some(j) => i = j,
                        None => {
                            self.end = None;
                            return Some(Err(()));
                        }
                    }
                }
                _ => {}
            }
        }
        self.end = None;
        Some(Ok(&line[..end]))
    }
}

/// Whether `line[at]` is escaped: an odd run of backslashes precedes it.
fn escaped(line: &[u8], at: usize) -> bool {
    line[..at].iter().rev().take_while(|&&b| b == b'\\').count() % 2 == 1
}

/// The `for=` value of one `Forwarded` element, unquoted: pairs `name=value` separated by
/// `;`, names case-insensitive. `None` when the element is malformed, states `for` twice
/// (RFC 7239 §4 forbids it; which one would be meant?) or has no `for`.
fn for_value(element: &[u8]) -> Option<Cow<'_, [u8]>> {
    let mut found = None;
    let mut rest = element;
    loop {
        rest = rest.trim_ascii_start();
        let Some(&first) = rest.first() else { break };
        if first == b';' {
            rest = &rest[1..];
            continue;
        }
        let name_len = rest
            .iter()
            .position(|&b| !is_tchar(b))
            .unwrap_or(rest.len());
        let (name, after) = rest.split_at(name_len);
        let after = after.strip_prefix(b"=").filter(|_| !name.is_empty())?;
        let (value, after) = pair_value(after)?;
        rest = after.trim_ascii_start();
        if rest.first().is_some_and(|&b| b != b';') {
            return None;
        }
        if name.eq_ignore_ascii_case(b"for") {
            if found.is_some() {
                return None;
            }
            found = Some(value);
        }
    }
    found
}

/// A quoted-string (unescaped; copied only when it holds a `\`) or a token — leniently, up
/// to `;`, `"` or whitespace, so the common unquoted `1.2.3.4:80` passes — and what follows.
fn pair_value(s: &[u8]) -> Option<(Cow<'_, [u8]>, &[u8])> {
    let Some(quoted) = s.strip_prefix(b"\"") else {
        let end = s
            .iter()
            .position(|&b| b == b';' || b == b'"' || !b.is_ascii_graphic())
            .unwrap_or(s.len());
        return (end > 0).then(|| (Cow::Borrowed(&s[..end]), &s[end..]));
    };
    let mut owned: Option<Vec<u8>> = None;
    let mut i = 0;
    while let Some(&b) = quoted.get(i) {
        match b {
            b'"' => {
                let value = owned.map_or(Cow::Borrowed(&quoted[..i]), Cow::Owned);
                return Some((value, &quoted[i + 1..]));
            }
            b'\\' => {
                let escaped = *quoted.get(i + 1)?;
                owned
                    .get_or_insert_with(|| quoted[..i].to_vec())
                    .push(escaped);
                i += 2;
            }
            _ => {
                if let Some(v) = &mut owned {
                    v.push(b);
                }
                i += 1;
            }
        }
    }
    None
}

/// RFC 9110 `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ForwardedHeader::{Forwarded, XForwardedFor};

    /// The client that trusted peer 10.0.0.1 (trusting 10/8 and 192.0.2/24) is speaking for.
    fn client(header: ForwardedHeader, lines: &[(&'static str, &[u8])]) -> IpAddr {
        let nets = ["10.0.0.0/8", "192.0.2.0/24"];
        let t = TrustedProxies::new(nets.iter().map(|n| n.parse().unwrap()).collect(), header);
        let mut h = HeaderMap::new();
        for (name, v) in lines {
            h.append(*name, http::HeaderValue::from_bytes(v).unwrap());
        }
        t.client_ip(ip("10.0.0.1"), &h)
    }

    /// Each case: the field lines of the configured header, and the client they resolve to.
    fn cases(header: ForwardedHeader, name: &'static str, cases: &[(&[&str], &str)]) {
        for (lines, want) in cases {
            let lines: Vec<_> = lines.iter().map(|l| (name, l.as_bytes())).collect();
            assert_eq!(client(header, &lines), ip(want), "{lines:?}");
        }
    }

    fn xff(c: &[(&[&str], &str)]) {
        cases(XForwardedFor, "x-forwarded-for", c);
    }

    fn fwd(c: &[(&[&str], &str)]) {
        cases(Forwarded, "forwarded", c);
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn untrusted_peer_is_the_client_whatever_it_claims() {
        let t = TrustedProxies::new(vec!["10.0.0.0/8".parse().unwrap()], Default::default());
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", "1.1.1.1".parse().unwrap());
        assert_eq!(t.client_ip(ip("203.0.113.9"), &h), ip("203.0.113.9"));
        assert!(t.contains(ip("::ffff:10.1.2.3")), "mapped IPv6 is IPv4");
        assert_eq!(
            TrustedProxies::default().client_ip(ip("10.0.0.1"), &h),
            ip("10.0.0.1")
        );
    }

    #[test]
    fn rightmost_untrusted_hop_wins_and_its_left_is_never_read() {
        xff(&[
            (&["6.6.6.6, 1.2.3.4, 10.0.0.7"], "1.2.3.4"),
            (&["evil, 1.2.3.4"], "1.2.3.4"),
            (&[", unknown,,1.2.3.4 "], "1.2.3.4"),
        ]);
        let lines = [("x-forwarded-for", &b"\xff\xfe, 1.2.3.4"[..])];
        assert_eq!(client(XForwardedFor, &lines), ip("1.2.3.4"));
    }

    #[test]
    fn a_non_address_before_any_untrusted_hop_stops_at_the_furthest_trusted_one() {
        xff(&[
            (&["1.2.3.4, garbage, 10.0.0.7"], "10.0.0.7"),
            (&["1.2.3.4, , 10.0.0.7"], "10.0.0.7"),
            (&["1.2.3.4, unknown, 192.0.2.3, 10.0.0.7"], "192.0.2.3"),
            (&["1.2.3.4, garbage"], "10.0.0.1"),
            (&["1.2.3.4,"], "10.0.0.1"),
            (&["10.0.0.8, 10.0.0.7"], "10.0.0.8"),
            (&[], "10.0.0.1"),
        ]);
    }

    #[test]
    fn field_lines_are_one_list_in_order() {
        xff(&[
            (&["1.2.3.4", "10.0.0.5"], "1.2.3.4"),
            (&["6.6.6.6, 10.0.0.9", "1.2.3.4, 10.0.0.5"], "1.2.3.4"),
            (&["5.5.5.5", "10.0.0.9", "10.0.0.5"], "5.5.5.5"),
            (&["1.2.3.4", "garbage", "10.0.0.5"], "10.0.0.5"),
        ]);
        fwd(&[(&["for=5.5.5.5", "for=10.0.0.9, for=10.0.0.5"], "5.5.5.5")]);
    }

    #[test]
    fn hop_forms() {
        xff(&[
            (&["1.2.3.4:80"], "1.2.3.4"),
            (&["2001:db8::1"], "2001:db8::1"),
            (&["[2001:db8::1]"], "2001:db8::1"),
            (&["[2001:db8::1]:443"], "2001:db8::1"),
            (&["::ffff:1.2.3.4"], "1.2.3.4"),
            (&["[::ffff:10.0.0.3]:1, 10.0.0.2"], "10.0.0.3"),
        ]);
        let bad = "1.2.3.4: 1.2.3.4:x 1.2.3.4:+80 1.2.3.4:70000 1.2.3.4:_ [::1]x [::1]: [::1 \
                   [1.2.3.4] ::1:80: _hidden unknown fe80::1%eth0";
        for bad in bad.split_ascii_whitespace() {
            assert_eq!(parse_node(bad.as_bytes()), None, "{bad}");
        }
        assert_eq!(parse_node(b"1.2.3.4:_p-1"), Some(ip("1.2.3.4")));
        assert_eq!(canonical(ip("::ffff:1.2.3.4")), ip("1.2.3.4"));
    }

    #[test]
    fn only_the_configured_header_is_believed() {
        let both: [(&str, &[u8]); 2] = [
            ("x-forwarded-for", b"6.6.6.6"),
            ("forwarded", b"for=1.2.3.4"),
        ];
        assert_eq!(client(Forwarded, &both), ip("1.2.3.4"));
        assert_eq!(client(XForwardedFor, &both), ip("6.6.6.6"));
        assert_eq!(client(Forwarded, &both[..1]), ip("10.0.0.1"));
        assert_eq!(client(XForwardedFor, &both[1..]), ip("10.0.0.1"));
    }

    #[test]
    fn forwarded_values_and_quoting() {
        fwd(&[
            (&["for=1.2.3.4;host=\"a,b\", for=10.0.0.2"], "1.2.3.4"),
            (
                &["for=\"[2001:db8::1]:443\";proto=https, for=10.0.0.9"],
                "2001:db8::1",
            ),
            (&["For=\"[2001:db8::1]\""], "2001:db8::1"),
            (&["for=1.2.3.4:80"], "1.2.3.4"),
            (&["proto=http; for=\"1.2.3.4\" ;by=_x;"], "1.2.3.4"),
            (&["host=\"x\\\",y\\\\\";for=1.2.3.4"], "1.2.3.4"),
            (&["for=\"\\[2001:db8::1\\]\""], "2001:db8::1"),
        ]);
    }

    #[test]
    fn forwarded_walk_ends_cleanly() {
        fwd(&[
            (&["for=1.2.3.4, for=_hidden, for=10.0.0.2"], "10.0.0.2"),
            (&["for=1.2.3.4, for=unknown"], "10.0.0.1"),
            (&["for=1.2.3.4, proto=https, for=10.0.0.2"], "10.0.0.2"),
            (&["for=1.2.3.4;for=5.6.7.8, for=10.0.0.2"], "10.0.0.2"),
            (&["for=1.2.3.4, for=\"10.0.0.3, for=10.0.0.2"], "10.0.0.2"),
            (&["for=\"1.2.3.4"], "10.0.0.1"),
            (&["for=1.2.3.4 x"], "10.0.0.1"),
            (&["for 1.2.3.4"], "10.0.0.1"),
            (&["=1.2.3.4"], "10.0.0.1"),
            (&["for="], "10.0.0.1"),
            (&["for=a\"b\""], "10.0.0.1"),
        ]);
    }

    #[test]
    fn client_text_left_of_the_proxys_element_cannot_hide_it() {
        // An unterminated quote or stray backslashes to the left: the proxy's element parses.
        fwd(&[
            (&["for=\"6.6.6.6, for=1.2.3.4"], "1.2.3.4"),
            (&["for=\\\"x, for=1.2.3.4"], "1.2.3.4"),
            (&["x\"y\"z\", for=1.2.3.4"], "1.2.3.4"),
        ]);
    }

    #[test]
    fn rev_elements_split_outside_quotes() {
        let got: Vec<_> = RevElements::new(b"a=\"1,2\\\",3\";b, c,,d=\"\\\\\"").collect();
        let want: Vec<Result<&[u8], ()>> = vec![
            Ok(b"d=\"\\\\\""),
            Ok(b""),
            Ok(b" c"),
            Ok(b"a=\"1,2\\\",3\";b"),
        ];
        assert_eq!(got, want);
        assert_eq!(
            RevElements::new(b"a, b=\"c").collect::<Vec<_>>(),
            vec![Err(())]
        );
    }

    #[test]
    fn surely_absent_is_the_lookup_answer_or_maybe() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, http::HeaderValue::from_static("a"));
        h.insert(
            "x-forwarded-for",
            http::HeaderValue::from_static("10.0.0.1"),
        );
        assert!(surely_absent(&h, &header::VIA));
        assert!(!surely_absent(&h, &header::HOST));
        assert!(!surely_absent(
            &h,
            &HeaderName::from_static("x-forwarded-for")
        ));
        // Past the names it compares, it does not know: the caller looks up.
        for i in 0..SCANNED {
            h.insert(
                HeaderName::try_from(format!("x-{i}")).unwrap(),
                http::HeaderValue::from_static("v"),
            );
        }
        assert!(!surely_absent(&h, &header::VIA));
    }
}
