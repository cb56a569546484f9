//! Who the client is: the address every later step (logs, rate-limit keys) attributes a
//! request to. Only trusted proxies may speak for a client; everyone else is their TCP peer.

use std::net::IpAddr;
use std::str::FromStr;

use http::HeaderMap;
use ipnet::IpNet;

use crate::config::ForwardedHeader;

/// The `trusted_proxies` list, with the lookup the request path needs.
#[derive(Debug, Clone, Default)]
pub struct TrustedProxies {
    /// Networks whose forwarding headers we believe.
    nets: Vec<IpNet>,
}

impl TrustedProxies {
    pub fn new(nets: Vec<IpNet>, _header: ForwardedHeader) -> Self {
        TrustedProxies { nets }
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.nets.iter().any(|n| n.contains(&ip))
    }

    /// The client address: the peer, or — only when the peer is trusted — the right-most
    /// address in `X-Forwarded-For` (else `Forwarded`) that is not itself a trusted proxy.
    /// A malformed header never errors the request: it falls back to the peer.
    pub fn client_ip(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let peer = canonical(peer);
        if self.nets.is_empty() || !self.contains(peer) {
            return peer;
        }
        let chain = forwarded_for_chain(headers);
        let Some(chain) = chain else { return peer };
        // Walk from the nearest hop outwards; the first untrusted hop is the client.
        // If every hop is trusted, the furthest one is the best we know.
        let mut furthest = peer;
        for ip in chain.iter().rev() {
            if !self.contains(*ip) {
                return *ip;
            }
            furthest = *ip;
        }
        furthest
    }
}

/// IPv4-mapped IPv6 (`::ffff:a.b.c.d`) is the IPv4 client it wraps.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// All `X-Forwarded-For` hops in order, or the `for=` hops of `Forwarded`. `None` when
/// absent or when any hop fails to parse: a half-parsed chain could pick a spoofed hop.
fn forwarded_for_chain(headers: &HeaderMap) -> Option<Vec<IpAddr>> {
    let xff: Vec<_> = headers.get_all("x-forwarded-for").iter().collect();
    if !xff.is_empty() {
        let mut out = Vec::new();
        for v in xff {
            for part in v.to_str().ok()?.split(',') {
                out.push(parse_hop(part.trim())?);
            }
        }
        return Some(out);
    }
    let mut out = Vec::new();
    for v in headers.get_all(http::header::FORWARDED) {
        for element in v.to_str().ok()?.split(',') {
            for pair in element.split(';') {
                let (k, val) = pair.trim().split_once('=')?;
                if k.eq_ignore_ascii_case("for") {
                    out.push(parse_hop(val.trim().trim_matches('"'))?);
                }
            }
        }
    }
    (!out.is_empty()).then_some(out)
}

/// One hop: `1.2.3.4`, `1.2.3.4:5678`, `2001:db8::1`, `[2001:db8::1]:443`.
fn parse_hop(s: &str) -> Option<IpAddr> {
    if let Ok(ip) = IpAddr::from_str(s) {
        return Some(canonical(ip));
    }
    if let Some(rest) = s.strip_prefix('[') {
        let inner = rest.split(']').next()?;
        return IpAddr::from_str(inner).ok().map(canonical);
    }
    let (host, _port) = s.rsplit_once(':')?;
    IpAddr::from_str(host).ok().map(canonical)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trusted(nets: &[&str]) -> TrustedProxies {
        TrustedProxies::new(
            nets.iter().map(|n| n.parse().unwrap()).collect(),
            ForwardedHeader::XForwardedFor,
        )
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn untrusted_peer_is_the_client_whatever_it_claims() {
        let t = trusted(&["10.0.0.0/8"]);
        let h = headers(&[("x-forwarded-for", "1.1.1.1")]);
        assert_eq!(t.client_ip(ip("203.0.113.9"), &h), ip("203.0.113.9"));
    }

    #[test]
    fn rightmost_untrusted_hop_wins() {
        let t = trusted(&["10.0.0.0/8"]);
        let h = headers(&[("x-forwarded-for", "6.6.6.6, 1.2.3.4, 10.0.0.7")]);
        assert_eq!(t.client_ip(ip("10.0.0.1"), &h), ip("1.2.3.4"));
    }

    #[test]
    fn malformed_header_falls_back_to_peer() {
        let t = trusted(&["10.0.0.0/8"]);
        let h = headers(&[("x-forwarded-for", "1.2.3.4, not-an-ip")]);
        assert_eq!(t.client_ip(ip("10.0.0.1"), &h), ip("10.0.0.1"));
    }

    #[test]
    fn forwarded_header_is_read_when_no_xff() {
        let t = trusted(&["10.0.0.0/8"]);
        let h = headers(&[(
            "forwarded",
            "for=\"[2001:db8::1]:443\";proto=https, for=10.0.0.9",
        )]);
        assert_eq!(t.client_ip(ip("10.0.0.1"), &h), ip("2001:db8::1"));
    }

    #[test]
    fn mapped_ipv6_is_ipv4() {
        let t = trusted(&["127.0.0.1/32"]);
        assert!(t.contains(ip("::ffff:127.0.0.1")));
        assert_eq!(canonical(ip("::ffff:1.2.3.4")), ip("1.2.3.4"));
    }
}
