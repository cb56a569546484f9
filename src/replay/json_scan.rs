//! The fast path of `json.rs`: one pass over a flat JSON object (string, number, boolean
//! and null values), the shape of tracing-subscriber's flattened lines.
//!
//! Hand-written because serde_json's general parser, even with a borrowing map visitor,
//! cost ~680 ns a line (`cargo bench --bench replay`, `json/parse`), over half the budget
//! of 1 M lines/s. This scanner gives up (`None`) on anything it does not expect — a
//! nested object or array (spans), an escaped key, a malformed line — and the caller then
//! parses the line with serde_json, which is also what decides whether it is malformed.
//! Strings with escapes are decoded by serde_json too, so no escape rule is re-implemented.
//!
//! A string's end is found eight bytes at a time in a `u64` (SWAR) rather than with
//! `memchr`: an access line's strings are 3 to 30 bytes long, and memchr's per-call set-up
//! (dispatch, unaligned head, tail) cost ~100 instructions a string, 16 strings a line —
//! over a third of the line's parse under callgrind. The word test is exact per byte
//! (no carry crosses a byte), so it needs no scalar re-check.

use std::borrow::Cow;

use super::json::Fields;

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while b.get(i).is_some_and(u8::is_ascii_whitespace) {
        i += 1;
    }
    i
}

/// Bytes of `c` in every lane of a word.
const fn splat(c: u8) -> u64 {
    u64::from_ne_bytes([c; 8])
}

/// 0x80 in each byte of `w` that is zero, 0 elsewhere: the high bit of `(x & 0x7f) + 0x7f`
/// is set for every non-zero low seven bits and never carries into the next byte.
fn zero_bytes(w: u64) -> u64 {
    const LOW7: u64 = splat(0x7f);
    !(((w & LOW7) + LOW7) | w | LOW7)
}

/// The index of the first `"` or `\` at or after `j`.
fn quote_or_escape(b: &[u8], mut j: usize) -> Option<usize> {
    while let Some(chunk) = b.get(j..j + 8) {
        let w = u64::from_le_bytes(chunk.try_into().ok()?);
        let hits = zero_bytes(w ^ splat(b'"')) | zero_bytes(w ^ splat(b'\\'));
        if hits != 0 {
            // Little-endian: the lowest set bit is the first byte that matched.
            return Some(j + (hits.trailing_zeros() / 8) as usize);
        }
        j += 8;
    }
    let tail = b.get(j..)?;
    tail.iter()
        .position(|&c| c == b'"' || c == b'\\')
        .map(|n| j + n)
}

/// A string starting at the quote at `i`: its content's range, whether it has escapes, and
/// the index after its closing quote.
fn string(b: &[u8], i: usize) -> Option<(usize, usize, bool, usize)> {
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let (start, mut j, mut escaped) = (i + 1, i + 1, false);
    loop {
        j = quote_or_escape(b, j)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_word_search_agrees_with_a_byte_loop() {
        // Every position of a quote or backslash, in every lane and in the tail, among
        // bytes that differ from them by one bit or carry (`#`, `!`, `]`, 0x00, 0x80, 0xff).
        let filler = [b'#', b'!', b']', b'[', 0x00, 0x80, 0xff, b'a'];
        for len in 0..40 {
            for hit in 0..=len {
                for stop in [b'"', b'\\'] {
                    let mut b: Vec<u8> = (0..len).map(|i| filler[i % filler.len()]).collect();
                    if hit < len {
                        b[hit] = stop;
                    }
                    for from in 0..=len {
                        let want = b[from..]
                            .iter()
                            .position(|&c| c == b'"' || c == b'\\')
                            .map(|n| from + n);
                        assert_eq!(quote_or_escape(&b, from), want, "{b:?} from {from}");
                    }
                }
            }
        }
    }

    #[test]
    fn strings_with_escapes_at_word_edges() {
        let b = br#""abcdef\"gh\\" "#;
        assert_eq!(string(b, 0), Some((1, 13, true, 14)));
        assert_eq!(
            string(br#""0123456789abcdef""#, 0),
            Some((1, 17, false, 18))
        );
        assert_eq!(string(br#""""#, 0), Some((1, 1, false, 2)));
        for open in [&br#""abc"#[..], br#""abcdefgh\"#, br#""a\""#, b"x"] {
            assert_eq!(string(open, 0), None, "{}", String::from_utf8_lossy(open));
        }
    }

    #[test]
    fn flat_lines_are_scanned_and_odd_ones_left_to_serde_json() {
        let f = scan(br#"{"target":"t","path":"/\u0041","n":1}"#, "account").unwrap();
        assert_eq!(f.path.as_deref(), Some("/A"));
        assert_eq!(f.target.as_deref(), Some("t"));
        for odd in [
            &br#"{"a\"b":"x"}"#[..],
            br#"{"a":{"b":1}}"#,
            br#"{"path":7}"#,
            br#"{"a":"x" "b":"y"}"#,
            br#"{"a":"x"} tail"#,
            b"{\"a\":\"\xff\"}",
            br#"{"a":"x""#,
        ] {
            assert_eq!(
                scan(odd, "account"),
                None,
                "{}",
                String::from_utf8_lossy(odd)
            );
        }
    }
}
