//! Reading key parts out of a request: a header's one value, a query parameter, a cookie,
//! the method and the path, each in the one form every spelling of it shares.
//!
//! The rule throughout: where backends may read a request differently, the part is read so
//! that no reading gives a client a fresh budget. Two values for one name are refused
//! ([`Ambiguous`]) rather than one picked, because the other could be rotated while the
//! backend reads the first; where backends split at a `;` or not, the part is read each
//! way and refused unless they agree; where backends split or fold more than the standard
//! says (`,` between cookies, names in any case, `/Login` and
//! `/login/`), the key splits and folds too: two readings then share one budget, which
//! costs a legitimate client at most a shared budget and an attacker every free one.

use std::borrow::Cow;

use http::{HeaderMap, HeaderName, Method, header};

use super::names::same_name;
use super::unclear::unclear;

/// A part a key needs that backends may read as another value than the gateway: stated more
/// than once (a header on several field lines or as a comma list, a query parameter or
/// cookie given twice: whichever we picked, a client could rotate the other for a fresh
/// budget, and the backend might read a different one), not UTF-8 or padded with characters a
/// backend may trim (`unclear.rs`), or a token outside the bearer grammar. The request is refused
/// (400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Ambiguous {
    #[error("the `{0}` header must appear once, with one value")]
    Header(HeaderName),
    #[error("the `{0}` query parameter must appear once")]
    Query(String),
    #[error("the `{0}` cookie must appear once")]
    Cookie(String),
    #[error("the {0} must be UTF-8 without whitespace or an invisible character at either end")]
    Unclear(Named),
    #[error("the `{0}` header must be `Bearer`, one space and a token (RFC 6750)")]
    Token(HeaderName),
    #[error("the {0} holds a `;` that some backends split at and others do not")]
    Semicolon(Named),
    #[error("the `{0}` form field must appear once")]
    Form(String),
    #[error("the JSON body's `{0}` must be a string or a whole number")]
    Json(String),
    /// The body a key reads is not what its media type says (its reason).
    #[error("{0}")]
    Body(String),
}

/// Where an unclear value was read, for the client-facing reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Named {
    Header(HeaderName),
    Query(String),
    Cookie(String),
    Form(String),
    Json(String),
}

impl std::fmt::Display for Named {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Named::Header(n) => write!(f, "`{n}` header"),
            Named::Query(n) => write!(f, "`{n}` query parameter"),
            Named::Cookie(n) => write!(f, "`{n}` cookie"),
            Named::Form(n) => write!(f, "`{n}` form field"),
            Named::Json(n) => write!(f, "JSON body's `{n}`"),
        }
    }
}

impl Ambiguous {
    /// The client-facing reason (names come from the config, never from the request).
    pub fn reason(&self) -> String {
        self.to_string()
    }
}

/// The one value of header `name`: `None` when absent, `Err` when on several field lines,
/// holding a comma, or unclear (`unclear.rs`).
pub(super) fn single<'h>(
    headers: &'h HeaderMap,
    name: &HeaderName,
) -> Result<Option<&'h [u8]>, Ambiguous> {
    let Some(value) = one_line(headers, name)? else {
        return Ok(None);
    };
    if unclear(value, true) {
        return Err(Ambiguous::Unclear(Named::Header(name.clone())));
    }
    Ok(Some(value))
}

/// The one field line of header `name`, unread: `Err` when on several lines or holding a
/// comma.
fn one_line<'h>(headers: &'h HeaderMap, name: &HeaderName) -> Result<Option<&'h [u8]>, Ambiguous> {
    let mut lines = headers.get_all(name).into_iter();
    let Some(first) = lines.next() else {
        return Ok(None);
    };
    if lines.next().is_some() || first.as_bytes().contains(&b',') {
        return Err(Ambiguous::Header(name.clone()));
    }
    Ok(Some(first.as_bytes()))
}

/// The decoded value of query parameter `name` (`None` when absent; `?k` and `?k=` are the
/// empty value). Names and values are decoded as HTML forms encode them (`%XX`, and `+` is
/// a space, as every common framework reads a query), names compared ASCII-case-
/// insensitively (ASP.NET reads them so).
///
/// A raw `;` is read three ways: Werkzeug 3, Django (since 3.2), PHP, Express's `qs`,
/// Rack 3 and servlet containers split on `&` only (`k=a;x=1` is `a;x=1`), Django before
/// 3.2, Python's `parse_qsl` before 3.9.2 and Rack 2 (a query) on `;` too (`a`), and Go
/// since 1.17 drops a pair holding one (no `k` at all). So the parameter is read all three ways and kept only when they agree:
/// `k=a;k=b` is still two `k` (refused), `k=a;x=1` is refused ([`Ambiguous::Semicolon`]),
/// and `k=a&note=x;y` keys `a`. A `;` sent as `%3B` is one reading everywhere.
pub(super) fn query_param(query: Option<&str>, name: &str) -> Result<Option<Vec<u8>>, Ambiguous> {
    let query = query.unwrap_or("");
    let split_too = read_param(query, name, Semicolons::Split)?;
    if !query.contains(';') {
        return Ok(split_too);
    }
    let kept = read_param(query, name, Semicolons::Kept)?;
    let dropped = read_param(query, name, Semicolons::PairDropped)?;
    match split_too == kept && kept == dropped {
        true => Ok(kept),
        false => Err(Ambiguous::Semicolon(Named::Query(name.to_owned()))),
    }
}

/// How a reader treats a raw `;` in a query or form ([`query_param`]).
#[derive(Clone, Copy, PartialEq)]
enum Semicolons {
    /// A separator like `&` (Django before 3.2, Python before 3.9.2, Rack 2's queries).
    Split,
    /// Part of the name or value (Werkzeug 3, Django, PHP, qs).
    Kept,
    /// The pair holding it is dropped (Go's `url.ParseQuery`).
    PairDropped,
}

/// Parameter `name` as one reader of `;` reads it: refused when given twice or unclear.
fn read_param(query: &str, name: &str, semi: Semicolons) -> Result<Option<Vec<u8>>, Ambiguous> {
    let mut found = None;
    let split = |b: &u8| *b == b'&' || (semi == Semicolons::Split && *b == b';');
    for pair in query.as_bytes().split(split) {
        if pair.is_empty() || (semi == Semicolons::PairDropped && pair.contains(&b';')) {
            continue;
        }
        let (n, v) = split_once(pair, b'=');
        if !same_name(&decode(n, true), name) {
            continue;
        }
        if found.is_some() {
            return Err(Ambiguous::Query(name.to_owned()));
        }
        // `%uXXXX` is a character to classic ASP.NET and four to everyone else.
        let percent_u = v.windows(2).any(|w| w.eq_ignore_ascii_case(b"%u"));
        let v = decode(v, true);
        if unclear(&v, false) || percent_u {
            return Err(Ambiguous::Unclear(Named::Query(name.to_owned())));
        }
        found = Some(v.into_owned());
    }
    Ok(found)
}

/// The value of cookie `name` across every `Cookie` line (HTTP/2 sends one per cookie):
/// trimmed, unquoted and `%XX`-decoded (frameworks that decode would otherwise see one
/// session under many keys), `+` read as a space (Rack reads cookies so); a value holding
/// a `\\` or starting with `j:` is refused (read otherwise by Python's and Express's parsers). Hand-parsed rather than with the `cookie`
/// crate: it must see every occurrence of the name to refuse a second one, split on `,` as
/// well as `;` (RFC 2965 parsers do, so `a=1, sid=x; sid=y` holds two `sid`), and treat
/// a pair without `=` as a name (some parsers do) — the crate's lenient parse would pick
/// one value silently.
pub(super) fn cookie(headers: &HeaderMap, name: &str) -> Result<Option<Vec<u8>>, Ambiguous> {
    let mut found = None;
    for line in headers.get_all(header::COOKIE) {
        for pair in line.as_bytes().split(|&b| b == b';' || b == b',') {
            let (n, v) = split_once(pair, b'=');
            // `+` read as a space in a name too (PHP before 8.1.11 decoded names so).
            if !same_name(&decode(n, true), name) {
                continue;
            }
            if found.is_some() {
                return Err(Ambiguous::Cookie(name.to_owned()));
            }
            let v = v.trim_ascii();
            let v = v
                .strip_prefix(b"\"")
                .and_then(|v| v.strip_suffix(b"\""))
                .unwrap_or(v);
            // Read otherwise by some backend: a `\` (Python's `http.cookies`, so Werkzeug and
            // Django, undoes `\x` and `\ooo` escapes; Go drops the cookie) and a `j:` value
            // (Express's cookie-parser parses it as JSON: `j:"victim"` is `victim`).
            let v = decode(v, true);
            if unclear(&v, false) || v.contains(&b'\\') || v.starts_with(b"j:") {
                return Err(Ambiguous::Unclear(Named::Cookie(name.to_owned())));
            }
            found = Some(v.into_owned());
        }
    }
    Ok(found)
}

/// Longest `path` part a key holds: longer paths share a key with their first 256 bytes
/// (a bound on key size in memory and the store; sharing never gives a fresh budget).
const MAX_PATH: usize = 256;

/// The `path` part: the canonical path with the spellings one endpoint may still have
/// folded — ASCII case (a case-insensitive backend serves `/Login` as `/login`), `;params`
/// of each segment (servlet containers strip them) and a trailing `/` (many frameworks
/// route `/login/` as `/login`) — and `:` written `%3a`, so a path cannot pose as a later
/// part of the key.
pub(super) fn path_part(key: &mut String, path: &str) {
    let start = key.len();
    // Segments without their `;params`, empty ones dropped: `/a/;x/` and `/a//` are `/a`,
    // so neither parameters nor slashes mint a fresh key.
    let segments = path
        .split('/')
        .map(|seg| seg.split(';').next().unwrap_or(""))
        .filter(|seg| !seg.is_empty());
    let mut any = false;
    for seg in segments {
        any = true;
        key.push('/');
        for c in seg.chars() {
            if key.len() - start >= MAX_PATH {
                return;
            }
            match c {
                ':' => key.push_str("%3a"),
                c => key.push(c.to_ascii_lowercase()),
            }
        }
    }
    if !any {
        key.push('/');
    }
}

/// `pair` split at the first `sep` (all of it is the name when there is none).
fn split_once(pair: &[u8], sep: u8) -> (&[u8], &[u8]) {
    match pair.iter().position(|&b| b == sep) {
        Some(i) => (&pair[..i], &pair[i + 1..]),
        None => (pair, &[]),
    }
}

/// `%XX` decoded (a `%` not followed by two hex digits stays as it is), and `+` a space
/// when `plus` (form encoding). Borrowed when there is nothing to decode.
fn decode(s: &[u8], plus: bool) -> Cow<'_, [u8]> {
    if !s.iter().any(|&b| b == b'%' || (plus && b == b'+')) {
        return Cow::Borrowed(s);
    }
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let escaped = (s[i] == b'%')
            .then(|| Some(hex(*s.get(i + 1)?)? << 4 | hex(*s.get(i + 2)?)?))
            .flatten();
        match (escaped, s[i]) {
            (Some(b), _) => {
                out.push(b);
                i += 3;
                continue;
            }
            (None, b'+') if plus => out.push(b' '),
            (None, b) => out.push(b),
        }
        i += 1;
    }
    Cow::Owned(out)
}

/// What the token header holds, read by one strict grammar (RFC 6750 §2.1: `Bearer`, one
/// space, a `b64token`; or a bare `b64token`), since backends read every other spelling
/// their own way: PyJWT-style code splits on whitespace and strips, so `Bearer\t<tok>`,
/// `Bearer <tok>\u{a0}` or `<tok>\x85` is the token to them.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Credential<'h> {
    /// No header (or an empty one).
    None,
    /// A bearer token, to verify.
    Bearer(&'h str),
    /// Credentials of another scheme (`Basic …`): present, but no token to verify.
    Other,
}

/// The credential of header `name` (see [`Credential`]); `Err` for a value outside the
/// grammar, on several lines or holding a comma.
pub(super) fn credential<'h>(
    headers: &'h HeaderMap,
    name: &HeaderName,
) -> Result<Credential<'h>, Ambiguous> {
    let value = match one_line(headers, name)? {
        None | Some(b"") => return Ok(Credential::None),
        Some(v) => v,
    };
    let refused = || Ambiguous::Token(name.clone());
    let (scheme, token) = match value.iter().position(|&b| b == b' ') {
        Some(i) => (Some(&value[..i]), &value[i + 1..]),
        None => (None, value),
    };
    let scheme_ok = scheme.is_none_or(|s| !s.is_empty() && s.iter().all(|&b| tchar(b)));
    if !scheme_ok || !b64token(token) {
        return Err(refused());
    }
    let token = std::str::from_utf8(token).map_err(|_| refused())?;
    Ok(match scheme {
        Some(s) if !s.eq_ignore_ascii_case(b"bearer") => Credential::Other,
        _ => Credential::Bearer(token),
    })
}

/// RFC 6750's `b64token`: `1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="`.
fn b64token(t: &[u8]) -> bool {
    let body = t.iter().rposition(|&b| b != b'=').map_or(0, |i| i + 1);
    body > 0
        && t[..body].iter().all(|&b| {
            b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'+' | b'/')
        })
}

/// RFC 9110's `tchar`, of which an auth scheme is made.
fn tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// The nine standard methods (RFC 9110, RFC 5789) key as themselves; any other is `other`,
/// so made-up methods cannot mint fresh budgets.
pub(super) fn method_part(method: &Method) -> &str {
    match method.as_str() {
        m @ ("GET" | "HEAD" | "POST" | "PUT" | "DELETE" | "CONNECT" | "OPTIONS" | "TRACE"
        | "PATCH") => m,
        _ => "other",
    }
}
