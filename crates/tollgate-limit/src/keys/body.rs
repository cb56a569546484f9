//! Body-field key parts, `form:NAME` and `json:POINTER`: read from the request body the
//! proxy buffered for them (`proxy/key_body/`), which it then forwards unchanged.
//!
//! The rules of the other parts hold: a field given twice, a JSON object with a key twice,
//! a value that is not UTF-8 or that a backend may trim ([`unclear`]) is refused (400), as
//! whichever we read, a client could rotate the other for a fresh budget. A form body is
//! read exactly as a query string (`parts::query_param`: `+` and `%XX`, split at `&`,
//! a raw `;` refused where backends would read the field differently, names in any case
//! and in PHP's, qs' and Rack's bracket spellings). A JSON value is a
//! string, or a whole number written in its one shortest form (`100`, never `1e2` or
//! `100.0`, which other parsers read as the same number); anything else is refused.

use std::collections::HashSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::names::same_name;
use super::parts::{Ambiguous, Named, query_param};
use super::unclear::unclear;

/// What the limit step may read of a request's body.
#[derive(Debug)]
pub enum KeyBody {
    /// An `application/x-www-form-urlencoded` body, as sent.
    Urlencoded(bytes::Bytes),
    /// A `multipart/form-data` body's fields (name, value), in order, repeats kept; file
    /// parts are left out (a key is never a file).
    Multipart(Vec<(String, Vec<u8>)>),
    /// A JSON body (`application/json` or `+json`), parsed once: `Err` when it is not JSON
    /// every parser reads alike (a duplicate key, not UTF-8, not JSON at all).
    Json(Result<Value, Ambiguous>),
}

impl KeyBody {
    /// A JSON body, parsed with duplicate object keys refused.
    pub fn json(bytes: &[u8]) -> KeyBody {
        let mut de = serde_json::Deserializer::from_slice(bytes);
        let parsed = Strict
            .deserialize(&mut de)
            .and_then(|v| de.end().map(|()| v))
            .map_err(|e| {
                Ambiguous::Body(format!(
                    "the body is not JSON every parser reads alike: {e}"
                ))
            });
        KeyBody::Json(parsed)
    }

    /// The value of `form:NAME`: `None` when the body is not a form or lacks the field.
    pub(super) fn form(&self, name: &str) -> Result<Option<Vec<u8>>, Ambiguous> {
        match self {
            KeyBody::Urlencoded(bytes) => {
                let text = std::str::from_utf8(bytes)
                    .map_err(|_| Ambiguous::Unclear(Named::Form(name.to_owned())))?;
                query_param(Some(text), name).map_err(|e| match e {
                    Ambiguous::Query(n) => Ambiguous::Form(n),
                    Ambiguous::Unclear(Named::Query(n)) => Ambiguous::Unclear(Named::Form(n)),
                    Ambiguous::Semicolon(Named::Query(n)) => Ambiguous::Semicolon(Named::Form(n)),
                    other => other,
                })
            }
            KeyBody::Multipart(fields) => {
                let mut found = None;
                // Named as in a urlencoded body: `UserName` (ASP.NET), `username[]` (PHP).
                let named = fields.iter().filter(|(n, _)| same_name(n.as_bytes(), name));
                for (n, v) in named {
                    if found.is_some() {
                        return Err(Ambiguous::Form(n.clone()));
                    }
                    if unclear(v, false) {
                        return Err(Ambiguous::Unclear(Named::Form(n.clone())));
                    }
                    found = Some(v.clone());
                }
                Ok(found)
            }
            KeyBody::Json(_) => Ok(None),
        }
    }

    /// The value of `json:POINTER`: `None` when the body is not JSON, or the pointer names
    /// nothing or `null`.
    pub(super) fn json_at(&self, pointer: &str) -> Result<Option<Vec<u8>>, Ambiguous> {
        let KeyBody::Json(parsed) = self else {
            return Ok(None);
        };
        let refused = || Ambiguous::Unclear(Named::Json(pointer.to_owned()));
        let root = parsed.as_ref().map_err(Clone::clone)?;
        let value = lookup(root, pointer).ok_or_else(|| {
            Ambiguous::Body(format!(
                "the JSON body holds `{pointer}` twice (keys that differ only in case are one key to some backends)"
            ))
        })?;
        match value {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if unclear(s.as_bytes(), false) => Err(refused()),
            Some(Value::String(s)) => Ok(Some(s.as_bytes().to_vec())),
            // Whole numbers a double holds exactly: JavaScript reads `9007199254740993` as
            // `9007199254740992`, so larger ones would be many keys for one number.
            Some(Value::Number(n)) if n.as_i64().is_some_and(|n| n.unsigned_abs() <= MAX_SAFE) => {
                Ok(Some(n.to_string().into_bytes()))
            }
            Some(_) => Err(Ambiguous::Json(pointer.to_owned())),
        }
    }
}

/// JavaScript's `Number.MAX_SAFE_INTEGER`, 2^53 − 1.
const MAX_SAFE: u64 = (1 << 53) - 1;

/// The value `pointer` names (RFC 6901), object keys matched as Go's `encoding/json` and
/// ASP.NET Core match them to fields: case-insensitively, by Unicode simple folding
/// (`uſername` is `username`), the last match winning. `None` (refused) when an object on
/// the way holds two keys that fold to the token: the backend would read the last, which
/// a client could rotate; `Some(None)` when it names nothing.
fn lookup<'v>(root: &'v Value, pointer: &str) -> Option<Option<&'v Value>> {
    let Some(tokens) = pointer.strip_prefix('/') else {
        return Some(pointer.is_empty().then_some(root));
    };
    let fold = |s: &str| -> String {
        s.chars()
            .flat_map(char::to_uppercase)
            .flat_map(char::to_lowercase)
            .collect()
    };
    let mut at = root;
    for token in tokens.split('/') {
        let token = token.replace("~1", "/").replace("~0", "~");
        at = match at {
            Value::Object(map) => {
                let want = fold(&token);
                let mut found = map.iter().filter(|(k, _)| fold(k) == want);
                match (found.next(), found.next()) {
                    (Some((_, v)), None) => v,
                    (None, _) => return Some(None),
                    (Some(_), Some(_)) => return None,
                }
            }
            Value::Array(list) => {
                let index = (!token.starts_with('+') && (token == "0" || !token.starts_with('0')))
                    .then(|| token.parse::<usize>().ok())
                    .flatten();
                match index.and_then(|i| list.get(i)) {
                    Some(v) => v,
                    None => return Some(None),
                }
            }
            _ => return Some(None),
        };
    }
    Some(Some(at))
}

impl crate::spec::BodyField {
    /// `value` as keyed: lower-cased (Unicode) when the policy says so. Values reach here
    /// UTF-8 (`unclear` refuses the rest).
    pub(super) fn folded(&self, value: Option<Vec<u8>>) -> Option<Vec<u8>> {
        match (value, self.lowercase) {
            (Some(v), true) => Some(String::from_utf8_lossy(&v).to_lowercase().into_bytes()),
            (v, _) => v,
        }
    }
}

/// A JSON value whose objects hold each key once (serde_json keeps the last of two, some
/// parsers the first) and whose whole numbers are written once (`1e2` is a float here).
struct Strict;

impl<'de> DeserializeSeed<'de> for Strict {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(StrictVisitor)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JSON")
    }

    fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Bool(b))
    }

    fn visit_i64<E>(self, n: i64) -> Result<Value, E> {
        Ok(Value::from(n))
    }

    fn visit_u64<E>(self, n: u64) -> Result<Value, E> {
        Ok(Value::from(n))
    }

    fn visit_f64<E>(self, n: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(n).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, s: &str) -> Result<Value, E> {
        Ok(Value::String(s.to_owned()))
    }

    fn visit_string<E>(self, s: String) -> Result<Value, E> {
        Ok(Value::String(s))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(v) = seq.next_element_seed(Strict)? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut seen = HashSet::new();
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                return Err(de::Error::custom(format_args!(
                    "the key `{key}` appears twice"
                )));
            }
            out.insert(key, map.next_value_seed(Strict)?);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(body: &str, pointer: &str) -> Result<Option<String>, Ambiguous> {
        KeyBody::json(body.as_bytes())
            .json_at(pointer)
            .map(|v| v.map(|v| String::from_utf8(v).unwrap()))
    }

    #[test]
    fn json_values_are_strings_or_whole_numbers_read_one_way() {
        let user = r#"{"user":{"email":"a@example.com","id":42,"n":1e2,"tags":["x"]}}"#;
        assert_eq!(
            at(user, "/user/email").unwrap().as_deref(),
            Some("a@example.com")
        );
        assert_eq!(at(user, "/user/id").unwrap().as_deref(), Some("42"));
        assert_eq!(at(user, "/user/missing").unwrap(), None);
        assert!(at(user, "/user/n").is_err(), "1e2 is 100 to some readers");
        assert!(at(user, "/user/tags").is_err(), "an array is no key");
        assert_eq!(at(r#"{"u":null}"#, "/u").unwrap(), None);
        assert!(
            at(r#"{"u":" alice"}"#, "/u").is_err(),
            "a backend may trim it"
        );
    }

    #[test]
    fn a_key_twice_or_a_body_that_is_not_json_is_refused() {
        assert!(at(r#"{"u":"a","u":"b"}"#, "/u").is_err());
        assert!(
            at(r#"{"x":{"u":"a","u":"b"}}"#, "/y").is_err(),
            "anywhere in the body"
        );
        assert!(at(r#"{"u":"a"} trailing"#, "/u").is_err());
        assert!(at(r#"{"u":"\ud800"}"#, "/u").is_err(), "a lone surrogate");
        let bad_utf8 = KeyBody::json(b"{\"u\":\"\xff\"}");
        assert!(bad_utf8.json_at("/u").is_err());
    }

    #[test]
    fn form_fields_are_read_as_query_parameters() {
        let form = |s: &'static str| KeyBody::Urlencoded(bytes::Bytes::from_static(s.as_bytes()));
        let v = form("user=alice%40example.com&pw=x").form("user").unwrap();
        assert_eq!(v.as_deref(), Some(&b"alice@example.com"[..]));
        assert_eq!(
            form("user=a&user=b").form("user"),
            Err(Ambiguous::Form("user".into()))
        );
        assert!(form("user=a;user=b").form("user").is_err());
        // Werkzeug 3 reads `a;x=1`, Django 3.1 `a`, Go nothing: refused, one way or another.
        assert_eq!(
            form("user=a;x=1").form("user"),
            Err(Ambiguous::Semicolon(Named::Form("user".into())))
        );
        assert_eq!(
            form("x=1;user=a").form("user"),
            Err(Ambiguous::Semicolon(Named::Form("user".into())))
        );
        let semi = form("user=a&note=x;y").form("user").unwrap();
        assert_eq!(
            semi.as_deref(),
            Some(&b"a"[..]),
            "a `;` elsewhere is no matter"
        );
        let encoded = form("user=a%3Bx").form("user").unwrap();
        assert_eq!(
            encoded.as_deref(),
            Some(&b"a;x"[..]),
            "`%3B` is read one way"
        );
        assert!(
            form("user[]=a&user=b").form("user").is_err(),
            "PHP's bracket name"
        );
        assert_eq!(form("pw=x").form("user").unwrap(), None);
        let parts = KeyBody::Multipart(vec![
            ("user".into(), b"a".to_vec()),
            ("user".into(), b"b".to_vec()),
        ]);
        assert!(parts.form("user").is_err());
    }
}
