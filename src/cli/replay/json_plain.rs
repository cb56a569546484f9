//! The fastest path of `json.rs`, for the common line: a compact flat object whose bytes
//! are all ASCII and hold no `\`, so every `"` opens or closes a string and no string needs
//! a UTF-8 check or decoding.
//!
//! Why a second scanner before `json_scan.rs`'s: that one must find escapes and non-ASCII
//! bytes in every string as it goes (a word test more per word, a check per string end),
//! ~2 000 instructions a line under callgrind. Here one pass over the whole line settles
//! both (a loop the compiler vectorizes), and each string's end is a bare word-at-a-time
//! search for `"`, all inlined into one loop: ~1 000. A line it does not expect — an
//! escape, a non-ASCII byte, whitespace between tokens, nesting — it leaves (`None`) to
//! `json_scan.rs`, whose result it otherwise gives too (the tests compare them).

use std::borrow::Cow;

use super::json::Fields;
use super::json_scan::{Slot, number, slot, splat, zero_bytes};

/// The `target` of access lines, with its closing quote.
const ACCESS: &[u8] = b"tollgate::access\"";

/// Whether `b` holds a `\` or a byte that is not ASCII. Written as a fold without an early
/// exit so that it compiles to 16-byte vector compares (~140 instructions for a 200-byte
/// line, against ~190 for the same test in each word of the string search).
fn escapes_or_non_ascii(b: &[u8]) -> bool {
    b.iter()
        .fold(0u8, |acc, &c| acc | u8::from(c == b'\\') | (c & 0x80))
        != 0
}

/// The index of the first `"` at or after `j`, eight bytes at a time.
#[inline(always)]
fn quote(b: &[u8], mut j: usize) -> Option<usize> {
    while let Some(w) = b.get(j..).and_then(<[u8]>::first_chunk::<8>) {
        let hits = zero_bytes(u64::from_le_bytes(*w) ^ splat(b'"'));
        if hits != 0 {
            // Little-endian: the lowest set bit is the first quote.
            return Some(j + (hits.trailing_zeros() / 8) as usize);
        }
        j += 8;
    }
    b.get(j..)?.iter().position(|&c| c == b'"').map(|n| j + n)
}

/// A key tracing writes, known from comparing it whole.
#[derive(Clone, Copy)]
enum Known {
    /// `timestamp`, `target`, `method`, `path`, `client`, `duration_ms`, `status`: their slot comes
    /// before the account field's (see `slot`), so it is known without another look.
    Timestamp,
    Target,
    Method,
    Path,
    Client,
    Duration,
    Status,
    /// Any other key (`level` and `route` may be the account field): see `slot`.
    Other,
}

/// The closing quote of the key starting at `j` (after its opening quote), and which key
/// it is. The keys tracing writes are compared whole, with their closing quote and colon
/// (a line without `\` has no other quote): ~10 instructions against ~50 for the search
/// and ~15 more for `slot`'s look at the key, nine keys a line.
#[inline(always)]
fn key_end(b: &[u8], j: usize) -> Option<(usize, Known)> {
    let rest = b.get(j..)?;
    let (len, known) = match rest.first()? {
        b't' if rest.starts_with(b"timestamp\":") => (9, Known::Timestamp),
        b't' if rest.starts_with(b"target\":") => (6, Known::Target),
        b'm' if rest.starts_with(b"method\":") => (6, Known::Method),
        b'p' if rest.starts_with(b"path\":") => (4, Known::Path),
        b'c' if rest.starts_with(b"client\":") => (6, Known::Client),
        b'd' if rest.starts_with(b"duration_ms\":") => (11, Known::Duration),
        b'l' if rest.starts_with(b"level\":") => (5, Known::Other),
        b'r' if rest.starts_with(b"route\":") => (5, Known::Other),
        b's' if rest.starts_with(b"status\":") => (6, Known::Status),
        _ => return Some((quote(b, j)?, Known::Other)),
    };
    Some((j + len, known))
}

/// The slot of a key: `slot`'s answer, without its look at a key already known.
#[inline(always)]
fn known_slot<'f, 'a>(
    f: &'f mut Fields<'a>,
    known: Known,
    key: &[u8],
    account_field: &str,
) -> Slot<'f, 'a> {
    match known {
        Known::Timestamp => Slot::Text(&mut f.timestamp),
        Known::Target => Slot::Text(&mut f.target),
        Known::Method => Slot::Text(&mut f.method),
        Known::Path => Slot::Text(&mut f.path),
        Known::Client => Slot::Text(&mut f.client),
        Known::Duration => Slot::Duration,
        Known::Status => Slot::Status,
        Known::Other => slot(f, key, account_field),
    }
}

/// Read the fields of a plain, compact flat object into `f` (fresh), or `None` to leave the
/// line to `json_scan.rs` (`f` then holds whatever was read before). Compact: tracing
/// writes no whitespace between tokens; a line with some is `json_scan.rs`'s.
pub fn scan<'a>(b: &'a [u8], account_field: &str, f: &mut Fields<'a>) -> Option<()> {
    if b.first() != Some(&b'{') || escapes_or_non_ascii(b) {
        return None;
    }
    let mut i = 1;
    loop {
        if b.get(i) != Some(&b'"') {
            return None;
        }
        let (key_end, known) = key_end(b, i + 1)?;
        let key = &b[i + 1..key_end];
        if b.get(key_end + 1) != Some(&b':') {
            return None;
        }
        i = key_end + 2;
        i = match (b.get(i)?, known_slot(f, known, key, account_field)) {
            (b'"', Slot::Duration) => return None,
            (b'"', slot) => {
                let end = match b[i + 1..].starts_with(ACCESS) {
                    // Every access line's target: compared, not searched.
                    true => i + ACCESS.len(),
                    false => quote(b, i + 1)?,
                };
                if let Slot::Text(slot) = slot {
                    *slot = Some(Cow::Borrowed(&b[i + 1..end]));
                }
                end + 1
            }
            (b'{' | b'[', _) | (_, Slot::Text(_)) => return None,
            (_, Slot::Ignored) => literal_end(b, i)?,
            (_, Slot::Status) => {
                let end = literal_end(b, i)?;
                f.status = super::parse::status_of(&b[i..end]);
                end
            }
            (_, Slot::Duration) => {
                let end = literal_end(b, i)?;
                f.duration_ms = match &b[i..end] {
                    b"null" => None,
                    n => Some(number(n)?),
                };
                end
            }
        };
        match b.get(i)? {
            b',' => i += 1,
            b'}' => return (i + 1 == b.len()).then_some(()),
            _ => return None,
        }
    }
}

/// The end of the number, boolean or null at `i`: the `,` or `}` after it. `None` at
/// whitespace (for `json_scan.rs`) or at the line's end. A `"` inside is read as part of
/// it, as `json_scan.rs` reads it.
#[inline(always)]
fn literal_end(b: &[u8], i: usize) -> Option<usize> {
    let stop = |c: &u8| matches!(c, b',' | b'}') || c.is_ascii_whitespace();
    let end = i + b.get(i..)?.iter().position(stop)?;
    matches!(b[end], b',' | b'}').then_some(end)
}
