//! tollgate's own JSON access log (tracing-subscriber JSON, flattened: see `access_log` in
//! `proxy/mod.rs`) to [`Record`]s:
//!
//! `{"timestamp":"2026-11-30T23:28:41.206599Z","level":"INFO","route":"all","method":"GET",
//! "path":"/a/b","status":502,"duration_ms":0.89,"client":"127.0.0.1","target":"tollgate::access"}`
//!
//! Only lines whose `target` is `tollgate::access` are requests; every other JSON line (start-up,
//! warnings) is skipped. The line is read by serde_json through a map visitor that keeps
//! just the fields it needs, borrowed when they have no escapes, and skips the rest
//! unparsed, so no `Value` tree is built per line; the common flat line takes the faster
//! scanners first: `json_plain.rs` (compact, ASCII, no escapes), then `json_scan.rs`.

use std::borrow::Cow;
use std::fmt;
use std::net::IpAddr;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};

use super::ip::parse_ip;
use super::json_plain;
use super::json_scan::scan;
use super::parse::{Malformed, Record};
use super::time::parse_rfc3339;

/// The target of access-log lines.
const ACCESS_TARGET: &str = "tollgate::access";

/// The fields of one line that replay reads: strings as (valid UTF-8) bytes, since every
/// reader of them wants bytes, and the scanner then need not turn each into a `str`.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Fields<'a> {
    pub timestamp: Option<Cow<'a, [u8]>>,
    pub target: Option<Cow<'a, [u8]>>,
    pub method: Option<Cow<'a, [u8]>>,
    pub path: Option<Cow<'a, [u8]>>,
    pub client: Option<Cow<'a, [u8]>>,
    pub duration_ms: Option<f64>,
    pub account: Option<Cow<'a, [u8]>>,
    /// `status` when it is a whole number 100 to 599 (`parse::status_of`); anything else,
    /// of any JSON type, is none (never a malformed line).
    pub status: Option<u16>,
    /// The live gateway's keys (`proxy::access_log`).
    pub key: Option<Cow<'a, [u8]>>,
    pub keys: Option<Cow<'a, [u8]>>,
}

/// Reads a line's map, knowing which key is the account.
struct LineSeed<'s> {
    account_field: &'s str,
}

impl<'de> DeserializeSeed<'de> for LineSeed<'_> {
    type Value = Fields<'de>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for LineSeed<'_> {
    type Value = Fields<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut f = Fields::default();
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            let slot = match &*key {
                "timestamp" => &mut f.timestamp,
                "target" => &mut f.target,
                "method" => &mut f.method,
                "path" => &mut f.path,
                "client" => &mut f.client,
                "key" => &mut f.key,
                "keys" => &mut f.keys,
                "duration_ms" => {
                    f.duration_ms = map.next_value::<Option<f64>>()?;
                    continue;
                }
                "status" => {
                    f.status = map.next_value::<StatusField>()?.0;
                    continue;
                }
                k if k == self.account_field => &mut f.account,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            *slot = map
                .next_value::<Option<BorrowedStr<'de>>>()?
                .map(|s| bytes(s.0));
        }
        Ok(f)
    }
}

/// A `status` value of any JSON type: a whole number 100 to 599 is the status, anything
/// else none (as the scanners read it).
struct StatusField(Option<u16>);

impl<'de> serde::Deserialize<'de> for StatusField {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = StatusField;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_u64<E>(self, n: u64) -> Result<StatusField, E> {
                let n = u16::try_from(n).ok().filter(|n| (100..=599).contains(n));
                Ok(StatusField(n))
            }
            fn visit_i64<E>(self, _: i64) -> Result<StatusField, E> {
                Ok(StatusField(None))
            }
            fn visit_f64<E>(self, _: f64) -> Result<StatusField, E> {
                Ok(StatusField(None))
            }
            fn visit_bool<E>(self, _: bool) -> Result<StatusField, E> {
                Ok(StatusField(None))
            }
            fn visit_str<E>(self, _: &str) -> Result<StatusField, E> {
                Ok(StatusField(None))
            }
            fn visit_unit<E>(self) -> Result<StatusField, E> {
                Ok(StatusField(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<StatusField, A::Error> {
                while m.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(StatusField(None))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut s: A,
            ) -> Result<StatusField, A::Error> {
                while s.next_element::<IgnoredAny>()?.is_some() {}
                Ok(StatusField(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// A string field, borrowed from the line when it has no escapes.
struct BorrowedStr<'a>(Cow<'a, str>);

impl<'de> serde::Deserialize<'de> for BorrowedStr<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = BorrowedStr<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(BorrowedStr(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(BorrowedStr(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(V)
    }
}

/// The general parser: serde_json, for every line the fast scanner leaves to it.
fn general<'a>(line: &'a [u8], account_field: &str) -> Result<Fields<'a>, Malformed> {
    let mut de = serde_json::Deserializer::from_slice(line);
    LineSeed { account_field }
        .deserialize(&mut de)
        .and_then(|f| de.end().map(|()| f))
        .map_err(|_| Malformed("not a JSON object with string fields"))
}

/// One JSON line; `Ok(None)` for a line of another target.
pub fn parse<'a>(line: &'a [u8], account_field: &str) -> Result<Option<Record<'a>>, Malformed> {
    // Filled in place: moving `Fields` out of each scanner cost two copies of it a line.
    let mut f = Fields::default();
    if json_plain::scan(line, account_field, &mut f).is_none() {
        f = match scan(line, account_field) {
            Some(f) => f,
            None => general(line, account_field)?,
        };
    }
    if f.target.as_deref() != Some(ACCESS_TARGET.as_bytes()) {
        return Ok(None);
    }
    let at = f
        .timestamp
        .as_deref()
        .and_then(parse_rfc3339)
        .ok_or(Malformed("no RFC 3339 `timestamp`"))?;
    let client: IpAddr = f
        .client
        .as_deref()
        .and_then(parse_ip)
        .ok_or(Malformed("no IP address in `client`"))?;
    let (Some(method), Some(path)) = (f.method, f.path) else {
        return Err(Malformed("no `method` or `path`"));
    };
    let duration = f
        .duration_ms
        .filter(|d| d.is_finite() && *d >= 0.0)
        .map(|d| (d * 1e6) as u64);
    Ok(Some(Record {
        at,
        client,
        request: Some((method_bytes(method), path)),
        account: f.account.filter(|a| !a.is_empty()),
        duration,
        status: f.status,
        key: f.key,
        keys: f.keys,
    }))
}

fn bytes(s: Cow<'_, str>) -> Cow<'_, [u8]> {
    match s {
        Cow::Borrowed(s) => Cow::Borrowed(s.as_bytes()),
        Cow::Owned(s) => Cow::Owned(s.into_bytes()),
    }
}

/// Methods never carry escapes in practice; an escaped one is interned as a known method
/// or leaks nothing: it is not a token, so the replay answers it 400 as the gateway would.
fn method_bytes(m: Cow<'_, [u8]>) -> &[u8] {
    match m {
        Cow::Borrowed(m) => m,
        Cow::Owned(_) => b"\\",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = r#"{"timestamp":"2026-11-30T23:28:41.206599Z","level":"INFO","route":"all","method":"GET","path":"/a/b","status":502,"duration_ms":0.89308,"client":"127.0.0.1","target":"tollgate::access"}"#;

    #[test]
    fn an_access_line() {
        let r = parse(LINE.as_bytes(), "account").unwrap().unwrap();
        assert_eq!(r.at, parse_rfc3339(b"2026-11-30T23:28:41.206599Z").unwrap());
        assert_eq!(r.client, "127.0.0.1".parse::<IpAddr>().unwrap());
        let (m, p) = r.request.unwrap();
        assert_eq!((m, &*p), (&b"GET"[..], &b"/a/b"[..]));
        assert_eq!(r.duration, Some(893_080));
        assert_eq!(r.account, None);
    }

    #[test]
    fn account_field_ipv6_and_escapes() {
        let line = r#"{"target":"tollgate::access","timestamp":"2026-11-30T23:28:41+01:00","method":"POST","path":"/a\"b\u0041","client":"2001:db8::7","user":"k\u00e9y","account":"ignored"}"#;
        let r = parse(line.as_bytes(), "user").unwrap().unwrap();
        assert_eq!(&*r.request.as_ref().unwrap().1, b"/a\"bA");
        assert_eq!(r.account.as_deref(), Some("kéy".as_bytes()));
        assert!(r.client.is_ipv6());
        assert_eq!(
            r.at,
            parse_rfc3339(b"2026-11-30T22:28:41Z").unwrap(),
            "the offset is applied"
        );
    }

    #[test]
    fn the_scanner_and_serde_json_agree() {
        let lines = [
            LINE,
            r#" { "target" : "tollgate::access" , "duration_ms" : null, "x": [1, {"y": 2}], "path": "/a\"b", "n": -1.5e3, "ok": true } "#,
            r#"{"target":"tollgate::access","span":{"name":"req"},"method":"GET"}"#,
            r#"{"target":"tollgate::access","account":7}"#,
            r#"{"duration_ms":"7"}"#,
            r#"{}"#,
            r#"{"a":1} trailing"#,
        ];
        for line in lines {
            agree(line);
        }
        assert!(
            scan(LINE.as_bytes(), "account").is_some(),
            "the common line is scanned"
        );
        let mut plain = Fields::default();
        assert!(json_plain::scan(LINE.as_bytes(), "account", &mut plain).is_some());
        let nested = general(lines[1].as_bytes(), "account").unwrap();
        assert_eq!(nested.path.as_deref(), Some(&b"/a\"b"[..]));
        assert_eq!(nested.duration_ms, None);
    }

    /// Both fast scanners give serde_json's fields wherever they give any.
    fn agree(line: &str) {
        let general = general(line.as_bytes(), "account").ok();
        if let Some(fast) = scan(line.as_bytes(), "account") {
            assert_eq!(Some(fast), general, "{line}");
        }
        let mut plain = Fields::default();
        if json_plain::scan(line.as_bytes(), "account", &mut plain).is_some() {
            assert_eq!(Some(plain), general, "{line}");
        }
    }

    #[test]
    fn the_scanners_and_serde_json_agree_on_generated_lines() {
        // Valid JSON values only: on some invalid ones (`1.`, a raw tab in a string) the
        // scanners have always been laxer than serde_json.
        let keys = [
            "timestamp",
            "target",
            "method",
            "path",
            "client",
            "account",
            "duration_ms",
            "level",
            "a\\\"b",
            "caf\u{e9}",
        ];
        let values = [
            "\"v\"",
            "\"tollgate::access\"",
            "\"2026-11-30T23:28:41Z\"",
            "\"/a\\\"b\"",
            "\"caf\u{e9}\"",
            "\"\"",
            "7",
            "0.89308",
            "null",
            "true",
            "[1]",
            "{\"y\":2}",
            "\"7\"",
            "-1.5e3",
            "\"a\\u0041\"",
            "\"0123456789abcdef\"",
        ];
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut pick = |n: usize| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n as u64) as usize
        };
        for _ in 0..20_000 {
            let ws = [" ", "", "", ""];
            let fields: Vec<String> = (0..pick(5))
                .map(|_| {
                    let (k, v) = (keys[pick(keys.len())], values[pick(values.len())]);
                    let (a, b) = (ws[pick(ws.len())], ws[pick(ws.len())]);
                    format!("{a}\"{k}\"{b}:{a}{v}{b}")
                })
                .collect();
            agree(&format!("{{{}}}", fields.join(",")));
        }
    }

    #[test]
    fn other_targets_are_skipped_and_broken_lines_are_malformed() {
        let other = r#"{"timestamp":"2026-11-30T23:28:39.700772Z","level":"INFO","message":"tollgate listening","target":"tollgate::server"}"#;
        assert_eq!(parse(other.as_bytes(), "account"), Ok(None));
        for bad in [
            &LINE[..LINE.len() - 1],
            r#"{"target":"tollgate::access","timestamp":"yesterday","method":"GET","path":"/","client":"1.2.3.4"}"#,
            r#"{"target":"tollgate::access","timestamp":"2026-11-30T23:28:41Z","method":"GET","path":"/","client":"me"}"#,
            r#"{"target":"tollgate::access","timestamp":"2026-11-30T23:28:41Z","path":"/","client":"1.2.3.4"}"#,
            r#"{"target":"tollgate::access","path":7}"#,
        ] {
            assert!(parse(bad.as_bytes(), "account").is_err(), "{bad}");
        }
    }
}
