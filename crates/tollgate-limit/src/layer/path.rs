//! Canonical paths: the first step of every request, before routing; the output of
//! [`normalize_path`] is what the router matches, what rate-limit keys are built from and
//! what is forwarded upstream.
//!
//! Why one canonical form: a strict route on `/api/login` is only as strict as the
//! gateway's idea of "the same path". If `//api/login`, `/api/./login`, `/x/../api/login`
//! or `/api/%6Cogin` route differently here but mean `/api/login` to the backend, the
//! route's limits are walked around. So every spelling is reduced to one form, and the
//! backend receives that form, never the client's.
//!
//! What is done (RFC 3986 §2.3, §5.2.4, §6.2.2; at least Envoy's `normalize_path` +
//! `merge_slashes` + `path_with_escaped_slashes_action` and nginx's `merge_slashes`):
//! - `%XX` of an unreserved character (ALPHA DIGIT `-` `.` `_` `~`) is decoded; every
//!   other `%XX` stays encoded with uppercase hex. Decoding happens ONCE: `%252e` stays
//!   `%252e` (a backend that decodes twice is outside what a proxy can make safe).
//! - Raw characters outside unreserved, sub-delims, `:`, `@`, `/` (e.g. `"`, `{`, space,
//!   any non-ASCII byte) are percent-encoded, so the output is pure ASCII.
//! - Dot segments are removed after decoding (`%2e` is a dot); `..` stops at the root.
//! - Repeated slashes merge; a trailing slash is kept.
//! - Refused with a [`PathError`] (400): not origin form, a bad `%`, control bytes,
//!   `%2F` / `%5C` / `\` unless [`EscapedSlashes::Keep`], `;` unless
//!   [`PathParameters::Keep`].
//!
//! The rules' enums are config values (`[server] escaped_slashes`, `path_parameters`); they
//! live here, in the limiter's layer (whose `path` keys read the canonical path too), and
//! the gateway re-exports them (`tollgate::normalize`), so both its `config` (which checks
//! route prefixes) and its `proxy` use this one canonicalizer.
//!
//! Hand-written rather than a crate: `percent-encoding` decodes every `%XX` (we must keep
//! reserved ones encoded) and `url` applies WHATWG rules (a `\` becomes `/`, `%41` is not
//! decoded, hex case is kept) after parsing a whole URL with allocation; neither merges
//! slashes nor rejects what is ambiguous. The common, already-canonical path must also
//! cost one table-driven pass with no allocation.

use std::borrow::Cow;

use serde::Deserialize;

/// The operator's choices for the ambiguous parts of a path.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PathRules {
    pub escaped_slashes: EscapedSlashes,
    pub path_parameters: PathParameters,
}

/// `server.escaped_slashes` (a config key: the names are the user-facing contract): what to do with `%2F`, `%5C` and `\` in a path.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EscapedSlashes {
    /// 400: a backend that decodes them would see segments the router never saw.
    #[default]
    Reject,
    /// Keep them encoded (`%2F`, `%5C`; a raw `\` is sent as `%5C`): they never match
    /// across a segment boundary, but a backend that decodes them sees a `/`.
    Keep,
}

/// `server.path_parameters` (a config key): what to do with `;` in a path.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PathParameters {
    /// 400: Java servlet containers drop `;params` from segments, so `/api;/login` would be
    /// `/api/login` to them and `/api;` to the router.
    #[default]
    Reject,
    /// Keep `;` as an ordinary character of its segment (backends that do not strip it).
    Keep,
}

/// Why a path cannot be made canonical; the request gets 400 with this text as the reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// The target does not start with `/` (`*`, absolute form left unparsed, empty).
    #[error("the path does not start with /")]
    NotOrigin,
    /// A `%` not followed by two hex digits: no two parsers agree on what it means.
    #[error("the path contains a % not followed by two hex digits")]
    BadPercent,
    /// `%00`–`%1F`, `%7F` or the raw bytes: truncation and log-injection tricks.
    #[error("the path contains a control character")]
    ControlByte,
    /// `%2F`, `%5C` or `\` under [`EscapedSlashes::Reject`]: a backend that decodes them
    /// would see segments the router never saw.
    #[error("the path contains an encoded slash (%2F) or backslash")]
    EscapedSlash,
    /// `;` under [`PathParameters::Reject`]: servlet containers strip `;params`.
    #[error("the path contains a ; (path parameter)")]
    PathParameter,
}

/// The canonical form of `path` (no query), or why it is refused.
///
/// Returns `Cow::Borrowed` exactly when `path` is already canonical, so a caller can tell
/// "unchanged" from "rewritten" without comparing. Idempotent: feeding the output back in
/// returns it borrowed, under the same `rules`.
pub fn normalize_path(path: &str, rules: PathRules) -> Result<Cow<'_, str>, PathError> {
    let bytes = path.as_bytes();
    if bytes.first() != Some(&b'/') {
        return Err(PathError::NotOrigin);
    }
    let table = &FAST[usize::from(rules.path_parameters == PathParameters::Keep)];
    let Some(start) = first_unclean_segment(bytes, table) else {
        return Ok(Cow::Borrowed(path));
    };
    let out = rebuild(path, start, rules)?;
    // The slow path may still find nothing to change (`/a%3A` is canonical but has a `%`):
    // keep the Borrowed-means-unchanged contract for the caller.
    Ok(if out == path {
        Cow::Borrowed(path)
    } else {
        Cow::Owned(out)
    })
}

/// What a byte is, for both passes. `/` only matters to the segment split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// RFC 3986 unreserved: kept raw, and decoded when percent-encoded.
    Unreserved,
    /// Sub-delims except `;`, plus `:` and `@`: kept raw, kept encoded when encoded
    /// (decoding them could change meaning for the backend, §2.2).
    Plain,
    Semicolon,
    Percent,
    Slash,
    Backslash,
    /// C0 controls and DEL.
    Control,
    /// Anything else (`"`, `<`, space, non-ASCII bytes…): percent-encoded on output.
    Other,
}

const fn classify(b: u8) -> Class {
    match b {
        b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => Class::Unreserved,
        b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b'=' | b':' | b'@' => {
            Class::Plain
        }
        b';' => Class::Semicolon,
        b'%' => Class::Percent,
        b'/' => Class::Slash,
        b'\\' => Class::Backslash,
        0x00..=0x1F | 0x7F => Class::Control,
        _ => Class::Other,
    }
}

const CLASS: [Class; 256] = {
    let mut t = [Class::Other; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = classify(b as u8);
        b += 1;
    }
    t
};

/// Bytes that may appear unchanged inside a canonical segment, indexed by "`;` is kept".
/// A lookup table so the hot loop is one compare, one load and one branch per byte.
static FAST: [[bool; 256]; 2] = {
    let mut t = [[false; 256]; 2];
    let mut b = 0;
    while b < 256 {
        let plain = matches!(CLASS[b], Class::Unreserved | Class::Plain);
        t[0][b] = plain;
        t[1][b] = plain || matches!(CLASS[b], Class::Semicolon);
        b += 1;
    }
    t
};

/// The fast path: `None` if `bytes` (starting with `/`) is already canonical, else the
/// index where the first segment needing work starts. Everything before that index is
/// canonical segments, so the slow path can copy it instead of redoing it.
fn first_unclean_segment(bytes: &[u8], table: &[bool; 256]) -> Option<usize> {
    let mut seg = 1;
    for (i, &b) in bytes.iter().enumerate().skip(1) {
        if b == b'/' {
            // An empty segment before this `/` is a `//`; `.`/`..` are dot segments.
            if matches!(&bytes[seg..i], [] | [b'.'] | [b'.', b'.']) {
                return Some(seg);
            }
            seg = i + 1;
        } else if !table[usize::from(b)] {
            return Some(seg);
        }
    }
    // The last segment may be empty (a trailing slash is kept) but not a dot segment.
    matches!(&bytes[seg..], [b'.'] | [b'.', b'.']).then_some(seg)
}

/// The slow path, from the segment at `start` on. The output is built as `/seg/seg…`
/// (each kept segment preceded by its slash), so `..` is "cut back to the last `/`".
fn rebuild(path: &str, start: usize, rules: PathRules) -> Result<String, PathError> {
    let mut out = String::with_capacity(path.len() + 8);
    out.push_str(&path[..start - 1]);
    let mut trailing = false;
    for raw in path[start..].split('/') {
        let mark = out.len();
        out.push('/');
        push_segment(&mut out, raw, rules)?;
        trailing = close_segment(&mut out, mark);
    }
    // A path ending in an empty or dot segment names a directory: `/a/b/..` is `/a/`.
    if trailing || out.is_empty() {
        out.push('/');
    }
    Ok(out)
}

/// Looks at the segment just written after `out[mark]` (its `/`) once it is decoded, so
/// `%2e%2E` counts as `..` (§5.2.4 after §6.2.2). Drops it if empty (slash merging) or
/// `.`, drops it and its parent if `..` (never above the root: the parent of nothing is
/// nothing). Returns whether it was dropped, i.e. whether a trailing `/` is due if last.
fn close_segment(out: &mut String, mark: usize) -> bool {
    match &out[mark + 1..] {
        "" | "." => out.truncate(mark),
        ".." => {
            let parent = out[..mark].rfind('/').unwrap_or(0);
            out.truncate(parent);
        }
        _ => return false,
    }
    true
}

/// Writes one raw segment (no `/` in it) in canonical form. Byte by byte: copying runs
/// of plain bytes as slices measured slower on real paths, whose runs are short.
fn push_segment(out: &mut String, raw: &str, rules: PathRules) -> Result<(), PathError> {
    let raw = raw.as_bytes();
    let mut i = 0;
    while i < raw.len() {
        let b = raw[i];
        match CLASS[usize::from(b)] {
            Class::Unreserved | Class::Plain => out.push(char::from(b)),
            Class::Percent => {
                push_decoded(out, hex_pair(raw, i)?, rules)?;
                i += 2;
            }
            Class::Semicolon => match rules.path_parameters {
                PathParameters::Keep => out.push(';'),
                PathParameters::Reject => return Err(PathError::PathParameter),
            },
            Class::Slash | Class::Backslash => push_escaped_slash(out, b, rules)?,
            Class::Control => return Err(PathError::ControlByte),
            Class::Other => push_encoded(out, b),
        }
        i += 1;
    }
    Ok(())
}

/// The byte a `%XX` at `raw[i]` stands for. Any case of hex is accepted; anything short
/// of two hex digits is refused rather than guessed at (some servers pass it through,
/// others decode `%u` or half bytes).
fn hex_pair(raw: &[u8], i: usize) -> Result<u8, PathError> {
    let digit = |j: usize| raw.get(j).and_then(|&d| char::from(d).to_digit(16));
    match (digit(i + 1), digit(i + 2)) {
        (Some(hi), Some(lo)) => Ok((hi * 16 + lo) as u8),
        _ => Err(PathError::BadPercent),
    }
}

/// Writes a percent-decoded byte: decoded if unreserved, re-encoded (uppercase) if not.
/// An encoded `;` stays `%3B` in both modes: it is data, not a parameter delimiter.
fn push_decoded(out: &mut String, b: u8, rules: PathRules) -> Result<(), PathError> {
    match CLASS[usize::from(b)] {
        Class::Unreserved => out.push(char::from(b)),
        Class::Control => return Err(PathError::ControlByte),
        Class::Slash | Class::Backslash => push_escaped_slash(out, b, rules)?,
        Class::Plain | Class::Semicolon | Class::Percent | Class::Other => push_encoded(out, b),
    }
    Ok(())
}

/// `%2F`, `%5C` or a raw `\`: refused, or kept encoded as a plain segment byte that the
/// router never splits on.
fn push_escaped_slash(out: &mut String, b: u8, rules: PathRules) -> Result<(), PathError> {
    match rules.escaped_slashes {
        EscapedSlashes::Keep => {
            push_encoded(out, b);
            Ok(())
        }
        EscapedSlashes::Reject => Err(PathError::EscapedSlash),
    }
}

/// `%XX` with uppercase hex (§6.2.2.1: the one spelling of every encoded byte).
fn push_encoded(out: &mut String, b: u8) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.push('%');
    out.push(char::from(HEX[usize::from(b >> 4)]));
    out.push(char::from(HEX[usize::from(b & 0xF)]));
}

#[cfg(test)]
mod tests {
    //! The table of spellings (60+ cases) and the property tests are in
    //! `tests/proxy/prop_normalize.rs`; here, only what the public API cannot show.
    use super::*;

    #[test]
    fn fast_path_stops_at_the_first_segment_needing_work() {
        let t = &FAST[0];
        assert_eq!(first_unclean_segment(b"/api/v1/users", t), None);
        assert_eq!(first_unclean_segment(b"/api/v1//users", t), Some(8));
        assert_eq!(first_unclean_segment(b"/api/%61", t), Some(5));
        assert_eq!(first_unclean_segment(b"/api/..", t), Some(5));
        assert_eq!(first_unclean_segment(b"/a;b", t), Some(1));
        assert_eq!(first_unclean_segment(b"/a;b", &FAST[1]), None);
    }

    #[test]
    fn classes_match_rfc_3986() {
        let unreserved = (0u8..=255).filter(|&b| CLASS[usize::from(b)] == Class::Unreserved);
        assert_eq!(unreserved.count(), 26 + 26 + 10 + 4);
        let plain: Vec<u8> = (0u8..=255)
            .filter(|&b| CLASS[usize::from(b)] == Class::Plain)
            .collect();
        assert_eq!(plain, b"!$&'()*+,:=@");
        assert_eq!(CLASS[0x7F], Class::Control);
        assert_eq!(CLASS[0x80], Class::Other);
    }
}
