//! Reading key parts out of a request: a header's one value, a query parameter, a cookie,
//! the method and the path, each in the one form every spelling of it shares.
//!
//! The rule throughout: where backends may read a request differently, the part is read so
//! that no reading gives a client a fresh budget. Two values for one name are refused
//! ([`Ambiguous`]) rather than one picked, because the other could be rotated while the
//! backend reads the first; where backends split or fold more than the standard says
//! (`;` between query parameters, `,` between cookies, names in any case, `/Login` and
//! `/login/`), the key splits and folds too: two readings then share one budget, which
//! costs a legitimate client at most a shared budget and an attacker every free one.

use std::borrow::Cow;

use http::{HeaderMap, HeaderName, Method, header};

/// A part a key needs, stated more than once (a header on several field lines or as a
/// comma list, a query parameter or cookie given twice): which value would be the client?
/// Whichever we picked, a client could rotate the other for a fresh budget, and the
/// backend might read a different one. The request is refused (400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Ambiguous {
    #[error("the `{0}` header must appear once, with one value")]
    Header(HeaderName),
    #[error("the `{0}` query parameter must appear once")]
    Query(String),
    #[error("the `{0}` cookie must appear once")]
    Cookie(String),
}

impl Ambiguous {
    /// The client-facing reason (names come from the config, never from the request).
    pub fn reason(&self) -> String {
        self.to_string()
    }
}

/// The one value of header `name`: `None` when absent, `Err` when on several field lines
/// or holding a comma.
pub(super) fn single<'h>(
    headers: &'h HeaderMap,
    name: &HeaderName,
) -> Result<Option<&'h [u8]>, Ambiguous> {
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
/// insensitively (ASP.NET reads them so). Parameters are split on `&` and on `;` (which
/// some frameworks also split on), so `?k=a;k=b` is a second `k` and not a fresh value.
pub(super) fn query_param(query: Option<&str>, name: &str) -> Result<Option<Vec<u8>>, Ambiguous> {
    let mut found = None;
    for pair in query
        .unwrap_or("")
        .as_bytes()
        .split(|&b| b == b'&' || b == b';')
    {
        if pair.is_empty() {
            continue;
        }
        let (n, v) = split_once(pair, b'=');
        if !same_name(&decode(n, true), name) {
            continue;
        }
        if found.is_some() {
            return Err(Ambiguous::Query(name.to_owned()));
        }
        found = Some(decode(v, true).into_owned());
    }
    Ok(found)
}

/// The value of cookie `name` across every `Cookie` line (HTTP/2 sends one per cookie):
/// trimmed, unquoted and `%XX`-decoded (frameworks that decode would otherwise see one
/// session under many keys); `+` stays a `+`. Hand-parsed rather than with the `cookie`
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
            found = Some(decode(v, false).into_owned());
        }
    }
    Ok(found)
}

/// Whether a query parameter's or cookie's name, as sent (decoded), is the configured
/// `name` as some backend reads it, ASCII case aside (ASP.NET): as PHP reads it ([`php`]),
/// as Rack 2 and Express's `qs` do ([`rack`]), or as Spring's binder reads a `!` default;
/// a NUL ends it (PHP reads names as C strings), `%uXXXX` is decoded (classic ASP.NET) and
/// Unicode whitespace around it is dropped ([`trim_space`]: Werkzeug, Django, JS `trim`).
/// Otherwise renaming a parameter would walk around its key; and both spellings given at
/// once are the name twice (400). A configured name with brackets (`user[email]`, a nested
/// parameter) is compared whole.
fn same_name(sent: &[u8], name: &str) -> bool {
    let sent = sent.split(|&b| b == 0).next().unwrap_or(sent);
    let sent = percent_u(sent);
    let sent = trim_space(&sent);
    // ` `, `.` and `[` read as `_` (PHP's `$_GET` and `$_COOKIE`: `api.key` is `api_key`).
    let fold = |b: &u8| match b {
        b' ' | b'.' | b'[' => b'_',
        b => b.to_ascii_lowercase(),
    };
    let is = |read: &[u8]| {
        read.len() == name.len() && read.iter().map(fold).eq(name.bytes().map(|b| fold(&b)))
    };
    if name.contains(['[', ']']) {
        return sent.eq_ignore_ascii_case(name.as_bytes());
    }
    let spring = sent.strip_prefix(b"!").unwrap_or(sent);
    is(php(sent)) || is(rack(sent)) || is(spring)
}

/// `%uXXXX` decoded to UTF-8 (classic ASP.NET's `HttpUtility.UrlDecode` reads it in names:
/// `api_k%u0065y` is `api_key`). Borrowed when there is none.
fn percent_u(s: &[u8]) -> Cow<'_, [u8]> {
    if !s.windows(2).any(|w| w == b"%u" || w == b"%U") {
        return Cow::Borrowed(s);
    }
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let code = s
            .get(i + 2..i + 6)
            .filter(|_| matches!(&s[i..i + 2], b"%u" | b"%U"))
            .and_then(|h| u32::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok())
            .and_then(char::from_u32);
        match code {
            Some(c) => {
                out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
                i += 6;
            }
            None => {
                out.push(s[i]);
                i += 1;
            }
        }
    }
    Cow::Owned(out)
}

/// Whitespace around a name dropped as Python's `str.strip()` and JS's `trim()` drop it,
/// read as latin-1 (Werkzeug: `0x85`, `0xA0`) or as UTF-8 (Django: U+0085, U+00A0, U+1680,
/// U+2000–U+200A, U+2028, U+2029, U+202F, U+205F, U+3000, and U+FEFF for JS).
fn trim_space(mut s: &[u8]) -> &[u8] {
    const UTF8: [&[u8]; 20] = [
        b"\xC2\x85",
        b"\xC2\xA0",
        b"\xE1\x9A\x80",
        b"\xE2\x80\x80",
        b"\xE2\x80\x81",
        b"\xE2\x80\x82",
        b"\xE2\x80\x83",
        b"\xE2\x80\x84",
        b"\xE2\x80\x85",
        b"\xE2\x80\x86",
        b"\xE2\x80\x87",
        b"\xE2\x80\x88",
        b"\xE2\x80\x89",
        b"\xE2\x80\x8A",
        b"\xE2\x80\xA8",
        b"\xE2\x80\xA9",
        b"\xE2\x80\xAF",
        b"\xE2\x81\x9F",
        b"\xE3\x80\x80",
        b"\xEF\xBB\xBF",
    ];
    let single = |b: u8| b.is_ascii_whitespace() || matches!(b, 0x0B | 0x85 | 0xA0);
    loop {
        let before = s.len();
        if let Some(sp) = UTF8.iter().find(|sp| s.starts_with(sp)) {
            s = &s[sp.len()..];
        } else if let Some((_, rest)) = s.split_first().filter(|(b, _)| single(**b)) {
            s = rest;
        }
        if let Some(sp) = UTF8.iter().find(|sp| s.ends_with(sp)) {
            s = &s[..s.len() - sp.len()];
        } else if let Some((_, rest)) = s.split_last().filter(|(b, _)| single(**b)) {
            s = rest;
        }
        if s.len() == before {
            return s;
        }
    }
}

/// PHP's name: leading spaces dropped, and an array form (`api_key[]`, `api_key[0]`: a `[`
/// with a `]` after it) is the name before it; an unclosed `[` stays, read as `_`.
fn php(sent: &[u8]) -> &[u8] {
    let sent = sent.trim_ascii_start();
    match sent.iter().position(|&b| b == b'[') {
        Some(i) if sent[i..].contains(&b']') => &sent[..i],
        _ => sent,
    }
}

/// Rack 2's name (`\A[\[\]]*([^\[\]]+)\]*`), which Express's `qs` shares for a leading
/// `[name]`: brackets in front dropped, then the run up to the next bracket (`[api_key]`,
/// `]api_key`, `api_key]` and `api_key[x]` are all `api_key`).
fn rack(sent: &[u8]) -> &[u8] {
    let bracket = |b: &u8| matches!(b, b'[' | b']');
    let start = sent.iter().position(|b| !bracket(b)).unwrap_or(sent.len());
    let rest = &sent[start..];
    &rest[..rest.iter().position(bracket).unwrap_or(rest.len())]
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

/// The token of an `Authorization: Bearer <token>` value (or a bare token).
pub(super) fn bearer(value: &[u8]) -> Option<&str> {
    let v = std::str::from_utf8(value).ok()?.trim();
    let token = match v.split_once(' ') {
        Some((scheme, t)) if scheme.eq_ignore_ascii_case("bearer") => t.trim(),
        _ => v,
    };
    (!token.is_empty()).then_some(token)
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
