//! The second path of `json.rs` (after `json_plain.rs`, for the lines that one leaves: an
//! escape, a non-ASCII byte, whitespace): one pass over a flat JSON object (string, number,
//! boolean and null values), the shape of tracing-subscriber's flattened lines. It also
//! holds what both scanners share: which field goes where (`slot`), the word test, numbers.
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

pub(super) fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while b.get(i).is_some_and(u8::is_ascii_whitespace) {
        i += 1;
    }
    i
}

/// Bytes of `c` in every lane of a word.
pub(super) const fn splat(c: u8) -> u64 {
    u64::from_ne_bytes([c; 8])
}

/// 0x80 in each byte of `w` that is zero, 0 elsewhere: the high bit of `(x & 0x7f) + 0x7f`
/// is set for every non-zero low seven bits and never carries into the next byte.
pub(super) fn zero_bytes(w: u64) -> u64 {
    const LOW7: u64 = splat(0x7f);
    !(((w & LOW7) + LOW7) | w | LOW7)
}

/// 0x80 in each byte of `w` that is not ASCII.
fn high_bytes(w: u64) -> u64 {
    w & splat(0x80)
}

/// The index of the first `"` or `\` at or after `j`, or of the first non-ASCII byte too
/// when `ascii` is set (the caller then checks the string's UTF-8: see [`string`]).
fn quote_or_escape(b: &[u8], mut j: usize, ascii: bool) -> Option<usize> {
    let high = if ascii { u64::MAX } else { 0 };
    while let Some(chunk) = b.get(j..j + 8) {
        let w = u64::from_le_bytes(chunk.try_into().ok()?);
        let hits =
            zero_bytes(w ^ splat(b'"')) | zero_bytes(w ^ splat(b'\\')) | (high_bytes(w) & high);
        if hits != 0 {
            // Little-endian: the lowest set bit is the first byte that matched.
            return Some(j + (hits.trailing_zeros() / 8) as usize);
        }
        j += 8;
    }
    let tail = b.get(j..)?;
    tail.iter()
        .position(|&c| c == b'"' || c == b'\\' || (ascii && !c.is_ascii()))
        .map(|n| j + n)
}

/// A string starting at the quote at `i`: its content's range, whether it has escapes, and
/// the index after its closing quote. `None` also for content that is not UTF-8: the line
/// then goes to serde_json, which decides as it did when the whole line was checked up
/// front (a `from_utf8` of the line cost ~300 instructions, more than the strings' own
/// search; bytes outside strings are all ASCII structure, checked by the scanner).
fn string(b: &[u8], i: usize) -> Option<(usize, usize, bool, usize)> {
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let (start, mut j, mut escaped, mut ascii) = (i + 1, i + 1, false, true);
    loop {
        j = quote_or_escape(b, j, ascii)?;
        match b[j] {
            b'"' => break,
            b'\\' => {
                escaped = true;
                j += 2;
            }
            _ => ascii = false,
        }
    }
    if !ascii {
        std::str::from_utf8(&b[start..j]).ok()?;
    }
    Some((start, j, escaped, j + 1))
}

/// A string value, borrowed when it has no escapes (already checked UTF-8 by [`string`]).
fn text(b: &[u8], start: usize, end: usize, escaped: bool) -> Option<Cow<'_, [u8]>> {
    if escaped {
        serde_json::from_slice::<String>(&b[start - 1..=end])
            .ok()
            .map(|s| Cow::Owned(s.into_bytes()))
    } else {
        Some(Cow::Borrowed(&b[start..end]))
    }
}

/// The fields of a flat object, or `None` to leave the line to serde_json.
pub fn scan<'a>(b: &'a [u8], account_field: &str) -> Option<Fields<'a>> {
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
        i = value(b, skip_ws(b, i + 1), &b[ks..ke], account_field, &mut f)?;
        i = skip_ws(b, i);
        match b.get(i)? {
            b',' => i = skip_ws(b, i + 1),
            b'}' => return (skip_ws(b, i + 1) == b.len()).then_some(f),
            _ => return None,
        }
    }
}

/// Where a field's value goes.
pub(super) enum Slot<'f, 'a> {
    /// A string replay reads.
    Text(&'f mut Option<Cow<'a, [u8]>>),
    /// `duration_ms`: a number (or `null`).
    Duration,
    /// `status`: read when it is a whole number (`parse::status_of`).
    Status,
    /// Any other field: skipped.
    Ignored,
}

/// The slot of field `key`, in the order serde_json's visitor in `json.rs` tries them.
#[inline(always)]
pub(super) fn slot<'f, 'a>(f: &'f mut Fields<'a>, key: &[u8], account_field: &str) -> Slot<'f, 'a> {
    match key {
        b"timestamp" => Slot::Text(&mut f.timestamp),
        b"target" => Slot::Text(&mut f.target),
        b"method" => Slot::Text(&mut f.method),
        b"path" => Slot::Text(&mut f.path),
        b"client" => Slot::Text(&mut f.client),
        b"key" => Slot::Text(&mut f.key),
        b"keys" => Slot::Text(&mut f.keys),
        b"duration_ms" => Slot::Duration,
        b"status" => Slot::Status,
        k if k == account_field.as_bytes() => Slot::Text(&mut f.account),
        _ => Slot::Ignored,
    }
}

/// Read the value at `i` of field `key` into `f` when replay needs it; the index after it.
fn value<'a>(
    b: &'a [u8],
    i: usize,
    key: &[u8],
    account_field: &str,
    f: &mut Fields<'a>,
) -> Option<usize> {
    match (b.get(i)?, slot(f, key, account_field)) {
        // A string duration: serde_json decides.
        (b'"', Slot::Duration) => None,
        (b'"', slot) => {
            let (s, e, escaped, next) = string(b, i)?;
            if let Slot::Text(slot) = slot {
                *slot = Some(text(b, s, e, escaped)?);
            }
            Some(next)
        }
        // Nesting, or a number where a string belongs: serde_json decides.
        (b'{' | b'[', _) | (_, Slot::Text(_)) => None,
        (_, Slot::Status) => {
            let end = literal(b, i, None)?;
            f.status = super::parse::status_of(&b[i..end]);
            Some(end)
        }
        (_, slot) => literal(b, i, matches!(slot, Slot::Duration).then_some(f)),
    }
}

/// Skip the number, boolean or null at `i` (reading it into `f.duration_ms` when given `f`);
/// the index after it.
fn literal(b: &[u8], i: usize, duration: Option<&mut Fields<'_>>) -> Option<usize> {
    let end = b[i..]
        .iter()
        .position(|&c| matches!(c, b',' | b'}') || c.is_ascii_whitespace())
        .map_or(b.len(), |n| i + n);
    let literal = &b[i..end];
    // Not UTF-8 (or not JSON at all): serde_json decides.
    if !literal.is_ascii() {
        return None;
    }
    if let Some(f) = duration {
        f.duration_ms = match literal {
            b"null" => None,
            n => Some(number(n)?),
        };
    }
    Some(end)
}

/// `n` (ASCII) as std's `f64` parser reads it. The common `0.89308` by hand: its digits as
/// an integer below 2^53 divided by a power of ten up to 10^15, both exact in an `f64`, is
/// the correctly rounded value (Clinger's fast path, the one std takes for it too) at a few
/// dozen instructions against ~270 through `str::parse`. Anything else goes to std.
pub(super) fn number(n: &[u8]) -> Option<f64> {
    const POW10: [f64; 16] = [
        1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
    ];
    let std = || std::str::from_utf8(n).ok()?.parse().ok();
    // Sixteen bytes hold at most sixteen digits: no overflow below.
    if n.len() > 16 {
        return std();
    }
    let (mut m, mut decimals, mut dot) = (0u64, 0, false);
    for (k, &c) in n.iter().enumerate() {
        match c {
            b'0'..=b'9' => {
                m = m * 10 + u64::from(c - b'0');
                decimals += usize::from(dot);
            }
            // One point, with digits on both sides.
            b'.' if !dot && k > 0 && k + 1 < n.len() => dot = true,
            _ => return std(),
        }
    }
    // At most 15 digits: the integer stays below 2^53.
    if n.len() - usize::from(dot) > 15 || n.is_empty() {
        return std();
    }
    Some(m as f64 / POW10[decimals])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_word_search_agrees_with_a_byte_loop() {
        // Every position of a quote or backslash, in every lane and in the tail, among
        // bytes that differ from them by one bit or carry (`#`, `!`, `]`, 0x00, 0x80, 0xff);
        // and, where non-ASCII bytes stop the search too, of those.
        let filler = [b'#', b'!', b']', b'[', 0x00, 0x80, 0xff, b'a'];
        for len in 0..40 {
            for hit in 0..=len {
                for stop in [b'"', b'\\'] {
                    let mut b: Vec<u8> = (0..len).map(|i| filler[i % filler.len()]).collect();
                    if hit < len {
                        b[hit] = stop;
                    }
                    for (from, ascii) in (0..=len).flat_map(|f| [(f, false), (f, true)]) {
                        let want = b[from..]
                            .iter()
                            .position(|&c| c == b'"' || c == b'\\' || (ascii && c >= 0x80))
                            .map(|n| from + n);
                        let got = quote_or_escape(&b, from, ascii);
                        assert_eq!(got, want, "{b:?} from {from}, {ascii}");
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
        assert_eq!(f.path.as_deref(), Some(&b"/A"[..]));
        assert_eq!(f.target.as_deref(), Some(&b"t"[..]));
        for odd in [
            &br#"{"a\"b":"x"}"#[..],
            br#"{"a":{"b":1}}"#,
            br#"{"path":7}"#,
            br#"{"a":"x" "b":"y"}"#,
            br#"{"a":"x"} tail"#,
            b"{\"a\":\"\xff\"}",
            b"{\"abcdefgh\":\"\xc3\"}",
            b"{\"\xc3\xa9\xff\":1}",
            b"{\"n\":1\xff}",
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

    #[test]
    fn utf8_strings_are_scanned() {
        let line = "{\"path\":\"/caf\u{e9}/\u{1F600}\",\"n\":\"\u{e9}t\u{e9}\"}";
        let f = scan(line.as_bytes(), "account").unwrap();
        assert_eq!(f.path.as_deref(), Some("/caf\u{e9}/\u{1F600}".as_bytes()));
    }

    #[test]
    fn numbers_are_what_std_reads() {
        for n in [
            "0.8",
            "0.89308",
            "12",
            "0",
            "007.50",
            "1.",
            ".5",
            "1e3",
            "-1.5",
            "+2",
            "null",
            "1.2.3",
            "",
            "123456789012345",
            "1234567890123456",
            "0.000000000000001",
            "0.1234567890123456",
            "99999999999999.9",
            "inf",
            "NaN",
            "1_0",
        ] {
            let want = n.parse::<f64>().ok().map(f64::to_bits);
            assert_eq!(number(n.as_bytes()).map(f64::to_bits), want, "{n}");
        }
        // Every decimal with up to 6 digits and a point somewhere.
        for m in (0..1_000_000u64).step_by(7) {
            for k in 0..6 {
                let n = format!(
                    "{}.{:0k$}",
                    m / 10u64.pow(k as u32),
                    m % 10u64.pow(k as u32)
                );
                let n = if k == 0 { format!("{m}") } else { n };
                assert_eq!(number(n.as_bytes()), n.parse().ok(), "{n}");
            }
        }
    }
}
