//! Log lines to [`Record`]s: format detection and the combined-format parser (tollgate's
//! JSON lines are in `json.rs`). The first step of the replay, once per line.
//!
//! The combined parser is a hand-written byte scanner rather than a regex or a general
//! log-format crate: it runs once per line at ≥ 1 M lines/s, touches each byte once,
//! allocates nothing for the common line (fields borrow from the line) and only decodes a
//! request line that carries escapes.

use std::borrow::Cow;
use std::net::IpAddr;

use super::ip::parse_ip;
use super::json;
use super::time::{UnixNanos, parse_clf};

/// One request as a log line tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<'a> {
    /// When it was logged.
    pub at: UnixNanos,
    /// The client address (`$remote_addr`, or the JSON `client`).
    pub client: IpAddr,
    /// `METHOD` and request target, or `None` when the log holds no request line (a
    /// client that sent garbage): the gateway refuses those with a 400.
    pub request: Option<(&'a [u8], Cow<'a, [u8]>)>,
    /// The account value, when the line names one.
    pub account: Option<Cow<'a, [u8]>>,
    /// How long the request took, when logged (JSON `duration_ms`), in nanoseconds.
    pub duration: Option<u64>,
    /// The logged response status (`$status`, JSON `status`) when it is one (100 to 599):
    /// what `count = { statuses }` policies settle on.
    pub status: Option<u16>,
    /// tollgate's own JSON log: the deciding policy's `key` and the other policies' `keys`
    /// (space-separated), as the live gateway keyed them: replay keys those policies so.
    pub key: Option<Cow<'a, [u8]>>,
    pub keys: Option<Cow<'a, [u8]>>,
}

/// A logged status as `count` reads it: three digits, 100 to 599; anything else is none.
pub(super) fn status_of(digits: &[u8]) -> Option<u16> {
    match digits {
        [a @ b'1'..=b'5', b @ b'0'..=b'9', c @ b'0'..=b'9'] => {
            Some(u16::from(a - b'0') * 100 + u16::from(b - b'0') * 10 + u16::from(c - b'0'))
        }
        _ => None,
    }
}

/// Which parser a file's lines take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// nginx/Apache combined (or common) log format.
    Combined,
    /// tracing-subscriber JSON lines; target `tollgate::access` lines are requests.
    Json,
}

impl Format {
    /// A file's format from its first non-blank line: a JSON object, or combined.
    pub fn detect(line: &[u8]) -> Format {
        match line.trim_ascii_start().first() {
            Some(b'{') => Format::Json,
            _ => Format::Combined,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Format::Combined => "combined",
            Format::Json => "json",
        }
    }
}

/// Why a line is not a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

/// Parse one line (without its newline) in `format`. `Ok(None)`: a line that is no request
/// (blank, or a JSON line of another target). `account_field`: the JSON field naming the
/// account.
pub fn parse_line<'a>(
    format: Format,
    line: &'a [u8],
    account_field: &str,
) -> Result<Option<Record<'a>>, Malformed> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.trim_ascii().is_empty() {
        return Ok(None);
    }
    match format {
        Format::Combined => combined(line).map(Some),
        Format::Json => json::parse(line, account_field),
    }
}

/// The bytes of `s` up to the first space, and what follows that space.
fn token(s: &[u8]) -> Option<(&[u8], &[u8])> {
    let i = memchr::memchr(b' ', s)?;
    Some((&s[..i], &s[i + 1..]))
}

/// `$remote_addr - $remote_user [$time_local] "$request" $status …` (the rest — bytes,
/// referer, user agent — is not needed).
pub fn combined(line: &[u8]) -> Result<Record<'_>, Malformed> {
    let (addr, rest) = token(line).ok_or(Malformed("no client address"))?;
    let client = parse_ip(addr).ok_or(Malformed("the client address is not an IP address"))?;
    let (_ident, rest) = token(rest).ok_or(Malformed("no ident field"))?;
    let (user, rest) = token(rest).ok_or(Malformed("no user field"))?;
    let rest = rest
        .strip_prefix(b"[")
        .ok_or(Malformed("no [time] field"))?;
    let close = rest
        .iter()
        .position(|&b| b == b']')
        .ok_or(Malformed("no ] after the time"))?;
    let at =
        parse_clf(&rest[..close]).ok_or(Malformed("the time is not dd/Mon/yyyy:hh:mm:ss +zone"))?;
    let rest = rest[close + 1..]
        .strip_prefix(b" \"")
        .ok_or(Malformed("no quoted request field"))?;
    let (request, rest) =
        quoted(rest).ok_or(Malformed("the request field has no closing quote"))?;
    let status = rest.strip_prefix(b" ").and_then(|r| r.get(..3));
    if !status.is_some_and(|s| s.iter().all(u8::is_ascii_digit)) {
        return Err(Malformed("no status code after the request"));
    }
    Ok(Record {
        at,
        client,
        request: request_line(request),
        account: (user != b"-" && !user.is_empty()).then(|| unescape(user)),
        duration: None,
        status: status.and_then(status_of),
        key: None,
        keys: None,
    })
}

/// The content of a quoted field (after its opening quote) up to its closing quote, and
/// what follows. `\"` and `\\` (Apache) do not close it; nginx writes `"` as `\x22`.
fn quoted(s: &[u8]) -> Option<(&[u8], &[u8])> {
    let mut i = 0;
    loop {
        i += memchr::memchr2(b'"', b'\\', s.get(i..)?)?;
        match s[i] {
            b'"' => return Some((&s[..i], &s[i + 1..])),
            _ => i += 2,
        }
    }
}

/// `METHOD TARGET` or `METHOD TARGET HTTP/x`; anything else is no request line.
fn request_line(raw: &[u8]) -> Option<(&[u8], Cow<'_, [u8]>)> {
    let (method, rest) = token(raw)?;
    let target = match token(rest) {
        Some((target, proto)) if proto.starts_with(b"HTTP/") && !proto.contains(&b' ') => target,
        Some(_) => return None,
        None => rest,
    };
    if method.is_empty() || target.is_empty() {
        return None;
    }
    Some((method, unescape(target)))
}

/// Undo the log's escapes: `\xHH` (nginx, Apache), `\"`, `\\`, `\n`, `\r`, `\t` (Apache).
/// Borrowed when there is none, the common case.
pub fn unescape(s: &[u8]) -> Cow<'_, [u8]> {
    if !s.contains(&b'\\') {
        return Cow::Borrowed(s);
    }
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let (byte, used) = match (s[i], s.get(i + 1).copied()) {
            (b'\\', Some(b'x')) => match (
                s.get(i + 2).and_then(|&b| hex(b)),
                s.get(i + 3).and_then(|&b| hex(b)),
            ) {
                (Some(h), Some(l)) => (h << 4 | l, 4),
                _ => (b'\\', 1),
            },
            (b'\\', Some(b'n')) => (b'\n', 2),
            (b'\\', Some(b'r')) => (b'\r', 2),
            (b'\\', Some(b't')) => (b'\t', 2),
            (b'\\', Some(c @ (b'"' | b'\\'))) => (c, 2),
            (b, _) => (b, 1),
        };
        out.push(byte);
        i += used;
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &[u8] = b"203.0.113.7 - alice [10/Oct/2000:13:55:36 -0700] \"GET /api/x?y=1 HTTP/1.1\" 200 2326 \"http://r/\" \"curl/8\"";

    #[test]
    fn a_combined_line() {
        let r = combined(LINE).unwrap();
        assert_eq!(r.client, "203.0.113.7".parse::<IpAddr>().unwrap());
        assert_eq!(r.at, 971_211_336_000_000_000);
        let (m, t) = r.request.unwrap();
        assert_eq!((m, &*t), (&b"GET"[..], &b"/api/x?y=1"[..]));
        assert_eq!(r.account.as_deref(), Some(&b"alice"[..]));
    }

    #[test]
    fn common_format_and_no_user() {
        let r =
            combined(b"10.0.0.1 - - [10/Oct/2000:13:55:36 -0700] \"POST /login HTTP/1.0\" 429 0")
                .unwrap();
        assert_eq!(r.account, None);
        assert_eq!(r.request.unwrap().0, b"POST");
    }

    #[test]
    fn ipv6_addresses() {
        for addr in ["2001:db8::1", "[2001:db8::1]", "::ffff:192.0.2.1"] {
            let line = format!("{addr} - - [10/Oct/2000:13:55:36 +0000] \"GET / HTTP/1.1\" 200 1");
            let r = combined(line.as_bytes()).unwrap_or_else(|e| panic!("{addr}: {e:?}"));
            assert!(r.client.is_ipv6(), "{addr}");
        }
    }

    #[test]
    fn quoted_fields_with_escapes() {
        // Apache's \" inside the request does not end it; nginx's \x22 is a quote.
        let apache = br#"10.0.0.1 - - [10/Oct/2000:13:55:36 -0700] "GET /a\"b HTTP/1.1" 200 1 "-" "ua \"x\"""#;
        let (_, t) = combined(apache).unwrap().request.unwrap();
        assert_eq!(&*t, b"/a\"b");
        let nginx =
            br#"10.0.0.1 - - [10/Oct/2000:13:55:36 -0700] "GET /a\x22b\x5C HTTP/1.1" 200 1"#;
        let (_, t) = combined(nginx).unwrap().request.unwrap();
        assert_eq!(&*t, b"/a\"b\\");
        assert_eq!(&*unescape(br"a\\b\tc\xZZ"), b"a\\b\tc\\xZZ");
    }

    #[test]
    fn garbage_requests_are_records_without_a_request() {
        let line = br#"10.0.0.1 - - [10/Oct/2000:13:55:36 -0700] "\x16\x03\x01\x00" 400 150"#;
        assert_eq!(combined(line).unwrap().request, None);
        let dash = br#"10.0.0.1 - - [10/Oct/2000:13:55:36 -0700] "-" 400 0"#;
        assert_eq!(combined(dash).unwrap().request, None);
    }

    #[test]
    fn malformed_lines_say_why() {
        let cases: [(&[u8], &str); 5] = [
            (b"10.0.0.1", "no client address"),
            (
                b"nonsense - - [10/Oct/2000:13:55:36 -0700] \"GET / HTTP/1.1\" 200 1",
                "the client address is not an IP address",
            ),
            (
                b"10.0.0.1 - - [10/Oct/2000:13:55 -0700] \"GET / HTTP/1.1\" 200 1",
                "the time is not dd/Mon/yyyy:hh:mm:ss +zone",
            ),
            (
                b"10.0.0.1 - - [10/Oct/2000:13:55:36 -0700] \"GET / HTTP/1.1 200 1",
                "the request field has no closing quote",
            ),
            (
                b"10.0.0.1 - - [10/Oct/2000:13:55:36 -0700] \"GET / HTTP/1.1\" ok",
                "no status code after the request",
            ),
        ];
        for (line, why) in cases {
            assert_eq!(
                combined(line).unwrap_err().0,
                why,
                "{}",
                String::from_utf8_lossy(line)
            );
        }
    }

    #[test]
    fn detection_and_blank_lines() {
        assert_eq!(Format::detect(b"  {\"a\":1}"), Format::Json);
        assert_eq!(Format::detect(LINE), Format::Combined);
        assert_eq!(parse_line(Format::Combined, b"  \r", "account"), Ok(None));
    }
}
