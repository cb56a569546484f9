//! Step 4's first question for a body a key reads: which media type it is, read from its
//! one `Content-Type` so that no backend parses a form or JSON where tollgate sees another
//! type, or splits a multipart body on another boundary. Also the `; name=value`
//! parameter grammar that a multipart part's `Content-Disposition` shares
//! (`multipart.rs`).
//!
//! Readers differ on everything outside the strict grammar, so a route that reads a key
//! body refuses (400) what they would read apart rather than pick one reading:
//! - a byte outside visible ASCII, space and tab: Werkzeug decodes the header as latin-1
//!   and `str.strip()`s it, which removes `\xa0` and `\x85` (`application/json\xa0` is
//!   JSON to Flask), Go's `mime.ParseMediaType` refuses it, a servlet container's `trim()`
//!   removes every control;
//! - a type read as a form or JSON by one backend and not by the strict reading: PHP ends
//!   the type at the first `;`, `,` or space (`application/x-www-form-urlencoded,x` is a
//!   form to it), Laravel reads JSON from any type holding `/json` or `+json`;
//! - on a type keys read, a parameter that is not `token=token` or `token="text"` (with
//!   no space around `=`, no `\` escape): Werkzeug reads `boundary=XB/` as `XB` and skips
//!   `boundary =XB`, Django and Go read both; one given twice (parsers keep the first or
//!   the last); an RFC 2231 `name*=` or `name*0=` (Werkzeug and Go decode
//!   `boundary*=utf-8''YB` over `boundary=XB`, busboy and multer do not); a boundary PHP
//!   finds elsewhere (it takes the first `boundary` substring, even inside another
//!   parameter's value: `x="a; boundary=YB"; boundary=XB` is `YB` to it); a `charset`
//!   other than UTF-8 (Django decodes a form in it, Express's JSON parser any `utf-*`:
//!   under UTF-7 `+AGE-lice` is `alice`).

use http::{HeaderMap, header};

use crate::respond::GatewayError;

/// The media types keys read a body of; a multipart body with its boundary.
#[derive(Debug, Clone)]
pub(super) enum Media {
    Urlencoded,
    Multipart { boundary: String },
    Json,
}

/// The body's media type, when keys read it (module docs for what is refused).
pub(super) fn media(headers: &HeaderMap) -> Result<Option<Media>, GatewayError> {
    let bad = |why: &str| Err(GatewayError::BadRequest(format!("the Content-Type {why}")));
    let mut lines = headers.get_all(header::CONTENT_TYPE).iter();
    let (Some(value), None) = (lines.next(), lines.next()) else {
        return match headers.contains_key(header::CONTENT_TYPE) {
            true => bad("header must appear once"),
            false => Ok(None),
        };
    };
    let bytes = value.as_bytes();
    if !bytes
        .iter()
        .all(|&b| b == b'\t' || (b' '..=b'~').contains(&b))
    {
        return bad(
            "of a body a key reads must be visible ASCII (backends read other bytes apart)",
        );
    }
    // Visible ASCII: `to_str` holds.
    let text = value.to_str().unwrap_or_default().to_ascii_lowercase();
    let (essence, params) = text.split_once(';').unwrap_or((&text, ""));
    let kind = kind(essence.trim_matches([' ', '\t']));
    // PHP's reading of the type, and Laravel's test for JSON.
    let php = text.split([';', ',', ' ']).next().unwrap_or_default();
    let lenient = kind_of_php(php) || text.contains("/json") || text.contains("+json");
    let Some(kind) = kind else {
        return match lenient {
            true => bad("is read as a form or JSON by some backends and not by others"),
            false => Ok(None),
        };
    };
    // The original case for the boundary (a boundary is compared byte for byte).
    let original = value.to_str().unwrap_or_default();
    let params = parameters(&original[original.len() - params.len()..])
        .map_err(|why| GatewayError::BadRequest(format!("the Content-Type {why}")))?;
    for (name, value) in &params {
        if name == "charset" && !value.eq_ignore_ascii_case("utf-8") {
            return bad("charset of a body a key reads must be UTF-8");
        }
    }
    Ok(Some(match kind {
        Kind::Urlencoded => Media::Urlencoded,
        Kind::Json => Media::Json,
        Kind::Multipart => {
            let boundary = params.into_iter().find(|(n, _)| n == "boundary");
            match boundary {
                Some((_, b)) if php_boundary(original) != Some(&b) => {
                    return bad("names `boundary` where PHP reads another one");
                }
                Some((_, b)) if boundary_chars(&b) => Media::Multipart { boundary: b },
                Some(_) => return bad("boundary must be 1 to 70 of RFC 2046's characters"),
                None => return bad("of a multipart body needs a boundary"),
            }
        }
    }))
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Urlencoded,
    Multipart,
    Json,
}

/// A lower-cased essence (`type/subtype`) keys read.
fn kind(essence: &str) -> Option<Kind> {
    match essence {
        "application/x-www-form-urlencoded" => Some(Kind::Urlencoded),
        "multipart/form-data" => Some(Kind::Multipart),
        "application/json" => Some(Kind::Json),
        e if e.starts_with("application/") && e.ends_with("+json") && token_type(e) => {
            Some(Kind::Json)
        }
        _ => None,
    }
}

/// The boundary as PHP's `rfc1867.c` finds it: after the first `boundary` substring (in
/// any case when none is lower-case), even inside another parameter, and its `=`; quoted,
/// or up to a `,` or `;`.
fn php_boundary(text: &str) -> Option<&str> {
    let lower = text.to_ascii_lowercase();
    let at = text.find("boundary").or_else(|| lower.find("boundary"))?;
    let after = &text[at + "boundary".len()..];
    let value = &after[after.find('=')? + 1..];
    Some(match value.strip_prefix('"') {
        Some(quoted) => &quoted[..quoted.find('"')?],
        None => &value[..value.find([',', ';']).unwrap_or(value.len())],
    })
}

/// PHP parses a form body itself (`$_POST`), never JSON.
fn kind_of_php(essence: &str) -> bool {
    matches!(
        essence,
        "application/x-www-form-urlencoded" | "multipart/form-data"
    )
}

/// `type/subtype`, each a token.
fn token_type(essence: &str) -> bool {
    essence
        .split_once('/')
        .is_some_and(|(t, s)| is_token(t) && is_token(s))
}

/// RFC 9110's `tchar`, less `*` (RFC 2231 marks extended parameter names with it).
pub(super) fn token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'+-.^_`|~".contains(c)
}

fn is_token(s: &str) -> bool {
    !s.is_empty() && s.chars().all(token_char)
}

/// RFC 2046's boundary: 1 to 70 of its characters, not ending in a space. Others (a `%`
/// Werkzeug reads as `"` in `"%22"`, a byte no parser agrees on) are refused.
fn boundary_chars(b: &str) -> bool {
    let bchar = |c: char| c.is_ascii_alphanumeric() || "'()+_,-./:=? ".contains(c);
    (1..=70).contains(&b.len()) && b.chars().all(bchar) && !b.ends_with(' ')
}

/// The `; name=value` parameters after a media type or a disposition type, in order, names
/// lower-cased, values unquoted: each `name` a token (no `*`) given once, `=` with no space
/// around it, the value a token or a quoted string without `\` escapes and right before the
/// next `;` (PHP ends an unquoted boundary at `;` only, spaces kept), spaces and tabs only
/// after a `;` (a trailing `;` is allowed, as Go and Werkzeug allow it). Anything else
/// is refused: readers skip it (Werkzeug), stop at it or read it whole (Django), so no one
/// reading of it is every backend's.
pub(super) fn parameters(mut rest: &str) -> Result<Vec<(String, String)>, &'static str> {
    let unclear = "parameters are not `; name=value` read one way";
    let ows = [' ', '\t'];
    let mut params: Vec<(String, String)> = Vec::new();
    let mut first = true;
    loop {
        if first {
            rest = rest.trim_start_matches(ows);
        }
        if rest.is_empty() {
            return Ok(params);
        }
        if !first {
            rest = rest.strip_prefix(';').ok_or(unclear)?;
            rest = rest.trim_start_matches(ows);
            if rest.is_empty() {
                return Ok(params);
            }
        }
        first = false;
        let end = rest.find(|c| !token_char(c)).unwrap_or(rest.len());
        let name = rest[..end].to_ascii_lowercase();
        rest = rest[end..].strip_prefix('=').ok_or(unclear)?;
        if name.is_empty() || params.iter().any(|(n, _)| *n == name) {
            return Err(unclear);
        }
        let value = match rest.strip_prefix('"') {
            Some(quoted) => {
                let end = quoted.find('"').ok_or(unclear)?;
                rest = &quoted[end + 1..];
                &quoted[..end]
            }
            None => {
                let end = rest.find(|c| !token_char(c)).unwrap_or(rest.len());
                let token = &rest[..end];
                rest = &rest[end..];
                if token.is_empty() {
                    return Err(unclear);
                }
                token
            }
        };
        if value.contains('\\') || !value.chars().all(|c| c == '\t' || !c.is_control()) {
            return Err(unclear);
        }
        params.push((name, value.to_owned()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(ct: &[u8]) -> Result<Option<String>, String> {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONTENT_TYPE,
            http::HeaderValue::from_bytes(ct).unwrap(),
        );
        media(&h)
            .map(|m| m.map(|m| format!("{m:?}")))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_type_is_read_one_way_or_refused() {
        assert_eq!(
            read(b"Multipart/Form-Data; Boundary=\"Xy Z\"").unwrap(),
            Some("Multipart { boundary: \"Xy Z\" }".into())
        );
        assert!(read(b"application/json;charset=UTF-8;").unwrap().is_some());
        let browser = b"multipart/form-data; boundary=----WebKitFormBoundary7MA4YWxkTrZu0gW";
        assert!(read(browser).unwrap().is_some(), "`Boundary` in the value");
        assert!(read(b"text/plain; charset=latin1").unwrap().is_none());
        for refused in [
            &b"application/x-www-form-urlencoded; x=\xe9"[..],
            b"application/x-www-form-urlencoded\xa0",
            b"application/json\x85",
            b"text/plain\xa0",
            b"application/x-www-form-urlencoded,text/plain",
            b"application/x-www-form-urlencoded x",
            b"text/plain; x=/json",
            b"multipart/form-data; boundary=XB; boundary*=utf-8''YB",
            b"multipart/form-data; boundary=XB/",
            b"multipart/form-data; boundary =XB",
            b"multipart/form-data; boundary= XB",
            b"multipart/form-data; boundary=\"a\\\"b\"",
            b"multipart/form-data; boundary=\"a%22b\"",
            b"multipart/form-data; boundary*0=XB",
            b"multipart/form-data; x=\"a; boundary=YB\"; boundary=XB",
            b"multipart/form-data; xboundary=YB; boundary=XB",
            b"multipart/form-data; x=\"Boundary=YB\"; Boundary=XB",
            b"multipart/form-data; boundary=XB ; x=1",
            b"multipart/form-data",
            b"multipart/form-data; boundary=XB;; x=1",
        ] {
            assert!(read(refused).is_err(), "{}", refused.escape_ascii());
        }
    }
}
