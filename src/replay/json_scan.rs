//! The fast path of `json.rs`: one pass over a flat JSON object (string, number, boolean
//! and null values), the shape of tracing-subscriber's flattened lines.
//!
//! Hand-written because serde_json's general parser, even with a borrowing map visitor,
//! cost ~680 ns a line (`cargo bench --bench replay`, `json/parse`), over half the budget
//! of 1 M lines/s. This scanner gives up (`None`) on anything it does not expect — a
//! nested object or array (spans), an escaped key, a malformed line — and the caller then
//! parses the line with serde_json, which is also what decides whether it is malformed.
//! Strings with escapes are decoded by serde_json too, so no escape rule is re-implemented.

use std::borrow::Cow;

use super::json::Fields;

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while b.get(i).is_some_and(u8::is_ascii_whitespace) {
        i += 1;
    }
    i
}

/// A string starting at the quote at `i`: its content's range, whether it has escapes, and
/// the index after its closing quote.
fn string(b: &[u8], i: usize) -> Option<(usize, usize, bool, usize)> {
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let (start, mut j, mut escaped) = (i + 1, i + 1, false);
    loop {
        j += memchr::memchr2(b'"', b'\\', b.get(j..)?)?;
        match b[j] {
            b'"' => return Some((start, j, escaped, j + 1)),
            _ => {
                escaped = true;
                j += 2;
            }
        }
    }
}

/// A string value, borrowed when it has no escapes. `line` is already valid UTF-8 and
/// `start`/`end` sit next to quotes (ASCII), so slicing it cannot split a character.
fn text(line: &str, start: usize, end: usize, escaped: bool) -> Option<Cow<'_, str>> {
    if escaped {
        serde_json::from_str::<String>(&line[start - 1..=end])
            .ok()
            .map(Cow::Owned)
    } else {
        Some(Cow::Borrowed(&line[start..end]))
    }
}

/// The fields of a flat object, or `None` to leave the line to serde_json.
pub fn scan<'a>(line: &'a [u8], account_field: &str) -> Option<Fields<'a>> {
    // One UTF-8 check for the whole line instead of one per field.
    let line = std::str::from_utf8(line).ok()?;
    let b = line.as_bytes();
    let mut i = skip_ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    let mut f = Fields::default();
    i = skip_ws(b, i + 1);
    if b.get(i) == Some(&b'}') {
        return (skip_ws(b, i + 1) == b.len()).then_some(f);
    }
    loop {
        let (ks, ke, key_escaped, next) = string(b, i)?;
        i = skip_ws(b, next);
        if key_escaped || b.get(i) != Some(&b':') {
            return None;
        }
        i = value(line, skip_ws(b, i + 1), &b[ks..ke], account_field, &mut f)?;
        i = skip_ws(b, i);
        match b.get(i)? {
            b',' => i = skip_ws(b, i + 1),
            b'}' => return (skip_ws(b, i + 1) == b.len()).then_some(f),
            _ => return None,
        }
    }
}

/// Read the value at `i` of field `key` into `f` when replay needs it; the index after it.
fn value<'a>(
    line: &'a str,
    i: usize,
    key: &[u8],
    account_field: &str,
    f: &mut Fields<'a>,
) -> Option<usize> {
    let b = line.as_bytes();
    let slot = match key {
        b"timestamp" => Some(&mut f.timestamp),
        b"target" => Some(&mut f.target),
        b"method" => Some(&mut f.method),
        b"path" => Some(&mut f.path),
        b"client" => Some(&mut f.client),
        k if k == account_field.as_bytes() => Some(&mut f.account),
        _ => None,
    };
    match (b.get(i)?, slot) {
        (b'{' | b'[', _) => None,
        (b'"', slot) if key != b"duration_ms" => {
            let (s, e, escaped, next) = string(b, i)?;
            if let Some(slot) = slot {
                *slot = Some(text(line, s, e, escaped)?);
            }
            Some(next)
        }
        // A string duration, or a number where a string belongs: serde_json decides.
        (b'"', _) | (_, Some(_)) => None,
        (_, None) => {
            let end = b[i..]
                .iter()
                .position(|&c| matches!(c, b',' | b'}') || c.is_ascii_whitespace())
                .map_or(b.len(), |n| i + n);
            if key == b"duration_ms" {
                f.duration_ms = match &line[i..end] {
                    "null" => None,
                    n => Some(n.parse().ok()?),
                };
            }
            Some(end)
        }
    }
}
