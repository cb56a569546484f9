//! Step 2 of the request path, *canonical*: one canonical request. The request the gateway routes, keys
//! and limits is exactly the request the upstream receives — one path, one authority — so
//! anything ambiguous is made canonical here, in place, or refused with a 400.
//!
//! - **Path**: [`crate::normalize::normalize_path`]; the canonical path replaces the
//!   request's and is what is forwarded. The target becomes origin-form.
//! - **Authority** (RFC 9112 §3.2.2, RFC 9113 §8.3.1): an absolute-form target's authority
//!   wins over `Host`; an HTTP/2 `:authority` and a `host` that differ are refused; two
//!   `Host` lines, or none at all, are refused. The host is lower-cased and loses a
//!   trailing dot, and the forwarded `Host` is that canonical authority. CONNECT and HTTP/2
//!   header values padded with whitespace (which an HTTP/1.1 upstream would trim) are
//!   refused.
//! - **Method**: upper case only (backends that fold case would serve `post` as `POST`).
//! - **Loops**: a `Via` that already names this fleet's pseudonym is answered 508.

use http::header::{self, HeaderMap, HeaderValue};
use http::uri::{Authority, PathAndQuery, Uri};
use http::{Method, Request, Version};

use crate::config::PathRules;
use crate::normalize::normalize_path;
use crate::respond::GatewayError;

/// Make `req` canonical in place, or say why it cannot be.
pub(super) fn canonicalize<B>(
    req: &mut Request<B>,
    rules: PathRules,
    pseudonym: &str,
) -> Result<(), GatewayError> {
    if req.method() == Method::CONNECT {
        // A tunnel to an authority of the client's choosing is no reverse proxy's job, and
        // its target has no path to route on.
        return Err(bad("CONNECT is not supported".into()));
    }
    if req
        .method()
        .as_str()
        .bytes()
        .any(|b| b.is_ascii_lowercase())
    {
        // Methods are case-sensitive (RFC 9110 §9.1), but Django, Flask and others upper-case
        // them: `post /login` would miss a `methods = ["POST"]` route and its limit, then be
        // served as the login POST. Routes name methods in upper case only.
        return Err(bad("the method must be upper case".into()));
    }
    if req.version() == Version::HTTP_2 && padded_value(req.headers()) {
        // RFC 9113 §8.2.1: malformed. An HTTP/1.1 upstream trims the padding, so keying on
        // the padded bytes would give `victim ` a budget of its own.
        return Err(bad("a header value starts or ends with whitespace".into()));
    }
    if req.version() == Version::HTTP_2 && !lengths_are_numbers(req.headers()) {
        // hyper's HTTP/1.1 parser refuses these itself; over HTTP/2 an empty or odd
        // `content-length` reached the upstream, where each server reads it its own way.
        return Err(bad("content-length must be a number".into()));
    }
    if has_looped(req.headers(), pseudonym) {
        return Err(GatewayError::LoopDetected {
            pseudonym: pseudonym.to_owned(),
        });
    }
    canonical_authority(req)?;
    canonical_target(req.uri_mut(), rules)
}

/// The host part of the canonical `Host` (no port), for routing.
pub(super) fn host_of(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(header::HOST)?.to_str().ok()?;
    Some(match v.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(rest),
        None => v.rsplit_once(':').map_or(v, |(h, _)| h),
    })
}

/// Replace the target with its canonical origin form (`/path?query`).
fn canonical_target(uri: &mut Uri, rules: PathRules) -> Result<(), GatewayError> {
    let path = normalize_path(uri.path(), rules).map_err(|e| bad(e.to_string()))?;
    let origin_form = uri.scheme().is_none() && uri.authority().is_none();
    let changed = path != uri.path();
    if origin_form && !changed {
        return Ok(()); // the common HTTP/1.1 case: nothing to do, nothing allocated
    }
    let pq = if changed {
        let text = match uri.query() {
            Some(q) => format!("{path}?{q}"),
            None => path.into_owned(),
        };
        PathAndQuery::try_from(text).map_err(|e| bad(e.to_string()))?
    } else {
        uri.path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"))
    };
    *uri = Uri::from(pq);
    Ok(())
}

/// Settle the one authority of the request and write it as its only `Host`.
fn canonical_authority<B>(req: &mut Request<B>) -> Result<(), GatewayError> {
    let mut hosts = req.headers().get_all(header::HOST).iter();
    let host = hosts.next();
    if hosts.next().is_some() {
        return Err(bad("the request has more than one Host header".into()));
    }
    let from_target = req.uri().authority();
    let chosen = match (from_target, host) {
        (Some(target), host) => {
            if req.version() == Version::HTTP_2
                && let Some(h) = host
                && !canonical_host(h.as_bytes())?
                    .eq_ignore_ascii_case(canonical_host(target.as_str().as_bytes())?.as_str())
            {
                return Err(bad(":authority and host name different hosts".into()));
            }
            // RFC 9112 §3.2.2: with an absolute-form target, Host is ignored.
            canonical_host(target.as_str().as_bytes())?
        }
        (None, Some(h)) if plainly_canonical(h.as_bytes()) => return Ok(()),
        (None, Some(h)) => {
            let canonical = canonical_host(h.as_bytes())?;
            if canonical.as_bytes() == h.as_bytes() {
                return Ok(()); // already canonical: the common case allocates nothing
            }
            canonical
        }
        // Without one, the upstream would be sent an authority nobody routed on.
        (None, None) => return Err(bad("the request names no host".into())),
    };
    let value = HeaderValue::from_str(&chosen).map_err(|_| bad("invalid host".into()))?;
    req.headers_mut().insert(header::HOST, value);
    Ok(())
}

/// The common `Host` that needs no work, checked without parsing or allocating: a
/// lower-case name or IPv4 address (letters, digits, `-`, `.`, not ending in `.`) and an
/// optional port of 1 to 5 digits. Everything else takes [`canonical_host`].
fn plainly_canonical(h: &[u8]) -> bool {
    let (host, port) = match h.iter().rposition(|&b| b == b':') {
        Some(i) => (&h[..i], Some(&h[i + 1..])),
        None => (h, None),
    };
    let name_ok = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'.');
    !host.is_empty()
        && !host.ends_with(b".")
        && host.iter().all(name_ok)
        && port.is_none_or(|p| (1..=5).contains(&p.len()) && p.iter().all(u8::is_ascii_digit))
}

/// `host[:port]` lower-cased, a trailing dot removed from a name, an IPv6 literal in RFC
/// 5952's form, userinfo refused.
fn canonical_host(raw: &[u8]) -> Result<String, GatewayError> {
    let invalid = || bad("the host is not a valid authority".into());
    let authority = Authority::try_from(raw).map_err(|_| invalid())?;
    if authority.as_str().contains('@') {
        return Err(bad("the authority must not carry userinfo".into()));
    }
    let host = authority.host();
    if host.is_empty() {
        return Err(invalid());
    }
    let mut out = if let Some(literal) = host.strip_prefix('[') {
        let inner = literal.strip_suffix(']').ok_or_else(invalid)?;
        let addr: std::net::Ipv6Addr = inner.parse().map_err(|_| invalid())?;
        // RFC 5952's one spelling, as routes write it (`[0:0::1]` is `[::1]`).
        format!("[{addr}]")
    } else {
        let name = host.strip_suffix('.').unwrap_or(host);
        if name.is_empty() || name.ends_with('.') {
            return Err(invalid());
        }
        name.to_ascii_lowercase()
    };
    if let Some(port) = authority.port() {
        out.push(':');
        out.push_str(port.as_str());
    }
    Ok(out)
}

/// Whether any header value starts or ends with a space or tab.
fn padded_value(headers: &HeaderMap) -> bool {
    headers.values().any(|v| {
        let b = v.as_bytes();
        matches!(b.first(), Some(b' ' | b'\t')) || matches!(b.last(), Some(b' ' | b'\t'))
    })
}

/// Whether every `content-length` line is a plain decimal number.
fn lengths_are_numbers(headers: &HeaderMap) -> bool {
    if super::headers::surely_absent(headers, &header::CONTENT_LENGTH) {
        return true;
    }
    (headers.get_all(header::CONTENT_LENGTH).iter())
        .all(|v| !v.is_empty() && v.as_bytes().iter().all(u8::is_ascii_digit))
}

/// Whether any `Via` entry (`1.1 name`, `HTTP/1.1 name (comment)`) names `pseudonym`.
fn has_looped(headers: &HeaderMap, pseudonym: &str) -> bool {
    if super::headers::surely_absent(headers, &header::VIA) {
        return false;
    }
    headers
        .get_all(header::VIA)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|entry| entry.split_whitespace().nth(1))
        .any(|name| name.eq_ignore_ascii_case(pseudonym))
}

fn bad(reason: String) -> GatewayError {
    GatewayError::BadRequest(reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(version: Version, uri: &str, hosts: &[&str]) -> Request<()> {
        let mut b = Request::builder().version(version).uri(uri);
        for h in hosts {
            b = b.header(header::HOST, *h);
        }
        b.body(()).unwrap()
    }

    fn canon(mut r: Request<()>) -> Result<(String, Option<String>), String> {
        canonicalize(&mut r, PathRules::default(), "tg-self").map_err(|e| e.to_string())?;
        let host = r
            .headers()
            .get(header::HOST)
            .map(|h| h.to_str().unwrap().to_owned());
        Ok((r.uri().to_string(), host))
    }

    #[test]
    fn absolute_form_authority_wins_and_is_forwarded() {
        let r = req(
            Version::HTTP_11,
            "http://X.example.//api/login?a=1",
            &["evil"],
        );
        assert_eq!(
            canon(r).unwrap(),
            ("/api/login?a=1".into(), Some("x.example".into()))
        );
    }

    #[test]
    fn http2_authority_and_host_must_agree() {
        let r = req(Version::HTTP_2, "http://a.example/", &["b.example"]);
        assert!(canon(r).unwrap_err().contains(":authority"));
        let r = req(
            Version::HTTP_2,
            "http://a.example:8080/",
            &["A.Example.:8080"],
        );
        assert_eq!(canon(r).unwrap().1.as_deref(), Some("a.example:8080"));
    }

    #[test]
    fn host_count_rules() {
        assert!(canon(req(Version::HTTP_11, "/", &["a", "b"])).is_err());
        assert!(canon(req(Version::HTTP_11, "/", &[])).is_err());
        assert!(canon(req(Version::HTTP_10, "/", &[])).is_err());
        assert!(canon(req(Version::HTTP_11, "/", &["[admin.example]"])).is_err());
    }

    #[test]
    fn trailing_dot_case_and_userinfo() {
        let r = req(Version::HTTP_11, "/", &["API.example.com.:81"]);
        assert_eq!(canon(r).unwrap().1.as_deref(), Some("api.example.com:81"));
        assert!(canon(req(Version::HTTP_11, "/", &["a..", "x"])).is_err());
        assert!(canon(req(Version::HTTP_11, "/", &["u@a"])).is_err());
        let r = req(Version::HTTP_11, "/", &["[::1]:80"]);
        assert_eq!(canon(r).unwrap().1.as_deref(), Some("[::1]:80"));
    }

    #[test]
    fn connect_and_padded_http2_values_are_refused() {
        let mut r = req(Version::HTTP_11, "/", &["a"]);
        *r.method_mut() = Method::CONNECT;
        assert!(canon(r).unwrap_err().contains("CONNECT"));
        let mut r = req(Version::HTTP_2, "http://a/", &[]);
        r.headers_mut()
            .insert("x-api-key", "victim ".parse().unwrap());
        assert!(canon(r).unwrap_err().contains("whitespace"));
        let mut r = req(Version::HTTP_2, "http://a/", &[]);
        r.headers_mut()
            .insert("x-api-key", "vic tim".parse().unwrap());
        assert!(canon(r).is_ok());
        for length in ["", "1x", "-1"] {
            let mut r = req(Version::HTTP_2, "http://a/", &[]);
            r.headers_mut()
                .insert(header::CONTENT_LENGTH, length.parse().unwrap());
            assert!(
                canon(r).unwrap_err().contains("content-length"),
                "{length:?}"
            );
        }
    }

    #[test]
    fn the_plain_fast_path_agrees_with_the_parser() {
        for h in [
            "a",
            "api.example.com",
            "127.0.0.1:8080",
            "x-1.y:1",
            "a:123456",
            "a:",
            "A",
            "a.",
            ":80",
            "a:b",
        ] {
            if plainly_canonical(h.as_bytes()) {
                assert_eq!(canonical_host(h.as_bytes()).ok().as_deref(), Some(h), "{h}");
            }
        }
        assert!(plainly_canonical(b"127.0.0.1:8080") && !plainly_canonical(b"A.example"));
    }

    #[test]
    fn via_naming_us_is_a_loop() {
        let mut r = req(Version::HTTP_11, "/", &["a"]);
        r.headers_mut().insert(
            header::VIA,
            "1.0 fred, 1.1 TG-self (tollgate)".parse().unwrap(),
        );
        assert!(canon(r).unwrap_err().contains("already passed"));
        let mut r = req(Version::HTTP_11, "/", &["a"]);
        r.headers_mut()
            .insert(header::VIA, "1.1 tg-selfish, 1.1 other".parse().unwrap());
        assert!(canon(r).is_ok());
    }
}
