//! How mainstream backends read an identity value or a bearer token, for the differential
//! tests (`tests/trust/differential.rs`, `tests/trust/token_spellings.rs`,
//! `tests/trust/body_readers.rs`). Python's readings are real: `tests/common/readers.py`
//! runs Werkzeug-style latin-1 headers, `parse_qs`, PyJWT, and Werkzeug's, the
//! `multipart` package's and `email`'s readings of form, multipart and JSON bodies. Go's,
//! .NET's, Java's, Node's and PHP's follow their documented trim sets (no such toolchain
//! here): `strings.TrimSpace` and `String.Trim()` remove Unicode `White_Space`
//! (Go stops at a byte that is no UTF-8, .NET has replaced it with U+FFFD), a servlet
//! container reads headers as latin-1 and `String.trim()` removes up to U+0020, Node reads
//! them as latin-1 and `trim()` removes `White_Space` and U+FEFF, PHP's `trim()` removes
//! ` \t\n\r\0\x0B`.

use std::io::Write;
use std::process::{Command, Stdio};

/// Go's `strings.TrimSpace` on the bytes.
pub fn go(raw: &[u8]) -> Vec<u8> {
    let mut s = raw;
    while let Some(c) = first_char(s).filter(|c| c.is_whitespace()) {
        s = &s[c.len_utf8()..];
    }
    while let Some(c) = last_char(s).filter(|c| c.is_whitespace()) {
        s = &s[..s.len() - c.len_utf8()];
    }
    s.to_vec()
}

/// .NET: UTF-8 with replacement, then `String.Trim()`.
pub fn dotnet(raw: &[u8]) -> Vec<u8> {
    String::from_utf8_lossy(raw)
        .trim_matches(char::is_whitespace)
        .as_bytes()
        .to_vec()
}

/// A servlet container's header (latin-1), then Java's `String.trim()`.
pub fn java(raw: &[u8]) -> Vec<u8> {
    trim_bytes(raw, |b| b <= b' ')
}

/// Node.js's header (latin-1), then JavaScript's `trim()`.
pub fn node(raw: &[u8]) -> Vec<u8> {
    trim_bytes(raw, |b| matches!(b, b'\t'..=b'\r' | b' ' | 0xA0))
}

/// PHP's `trim()` on the bytes.
pub fn php(raw: &[u8]) -> Vec<u8> {
    trim_bytes(raw, |b| {
        matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0 | 0x0B)
    })
}

fn trim_bytes(raw: &[u8], trims: impl Fn(u8) -> bool) -> Vec<u8> {
    let start = raw.iter().position(|&b| !trims(b)).unwrap_or(raw.len());
    let end = raw
        .iter()
        .rposition(|&b| !trims(b))
        .map_or(start, |i| i + 1);
    raw[start..end].to_vec()
}

fn first_char(s: &[u8]) -> Option<char> {
    let head = &s[..s.len().min(4)];
    let valid = match std::str::from_utf8(head) {
        Ok(t) => t,
        Err(e) => std::str::from_utf8(&head[..e.valid_up_to()]).ok()?,
    };
    valid.chars().next()
}

fn last_char(s: &[u8]) -> Option<char> {
    (1..=s.len().min(4)).find_map(|n| {
        let mut chars = std::str::from_utf8(&s[s.len() - n..]).ok()?.chars();
        let c = chars.next()?;
        chars.next().is_none().then_some(c)
    })
}

/// What the Python readers make of each input (see `readers.py`): `headers`, `queries`
/// and `auth` lists of objects, in input order.
pub fn python(
    headers: &[Vec<u8>],
    queries: &[Vec<u8>],
    auth: &[Vec<u8>],
    secret: &str,
) -> serde_json::Value {
    let hex = |v: &[Vec<u8>]| v.iter().map(hex::encode).collect::<Vec<_>>();
    let ask = serde_json::json!({
        "headers": hex(headers), "queries": hex(queries), "auth": hex(auth), "secret": secret,
    });
    run_python(&ask)
}

/// `readers.py` on one question.
fn run_python(ask: &serde_json::Value) -> serde_json::Value {
    let script = super::repo_path("tests/common/readers.py");
    let mut child = Command::new("python3")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 not found: run scripts/test.sh, which installs it and PyJWT");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(ask.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "readers.py failed (are PyJWT, Werkzeug and multipart installed? scripts/test.sh installs them)"
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A Python reading as bytes (`null` is none).
pub fn py_bytes(v: &serde_json::Value) -> Option<Vec<u8>> {
    v.as_str().map(|h| hex::decode(h).unwrap())
}

/// The characters a value is padded with in the corpora: every Unicode `White_Space`
/// character, every control, the default-ignorable ones a client might use (zero-width
/// spaces and joiners, bidi marks, BOM, word joiner, soft hyphen, a tag), as UTF-8; and
/// every byte from 0x80 on its own (obs-text, latin-1 to some readers).
pub fn pads() -> Vec<Vec<u8>> {
    let mut pads: Vec<Vec<u8>> = (0..=0x10FFFFu32)
        .filter_map(char::from_u32)
        .filter(|c| c.is_whitespace() || c.is_control())
        .chain([
            '\u{AD}',
            '\u{34F}',
            '\u{180E}',
            '\u{200B}',
            '\u{200C}',
            '\u{200D}',
            '\u{200E}',
            '\u{200F}',
            '\u{202A}',
            '\u{202E}',
            '\u{2060}',
            '\u{2066}',
            '\u{FE0F}',
            '\u{FEFF}',
            '\u{E0001}',
        ])
        .map(|c| c.to_string().into_bytes())
        .collect();
    pads.extend((0x80..=0xFFu8).map(|b| vec![b]));
    pads
}

/// Bytes as Rust writes them, for the table.
pub fn shown(v: &[u8]) -> String {
    v.escape_ascii().to_string()
}

/// How Werkzeug, the `multipart` package and Python's `email` parser read text field
/// `field` of each body (`content_type`, `body`): per body an object `{"werkzeug",
/// "multipart", "email"}` of lists of values ([`py_values`]), or `"error"` (see
/// `readers.py`).
pub fn python_bodies(bodies: &[(Vec<u8>, Vec<u8>)], field: &str) -> Vec<serde_json::Value> {
    let bodies: Vec<_> = bodies
        .iter()
        .map(|(ct, body)| serde_json::json!({"content_type": hex::encode(ct), "body": hex::encode(body)}))
        .collect();
    let ask = serde_json::json!({
        "headers": [], "queries": [], "auth": [], "secret": "", "field": field, "bodies": bodies,
    });
    let out = run_python(&ask);
    out["bodies"].as_array().unwrap().clone()
}

/// A reader's values of a field as bytes; `None` when it refused the body.
pub fn py_values(v: &serde_json::Value) -> Option<Vec<Vec<u8>>> {
    let list = v.as_array()?;
    Some(
        list.iter()
            .map(|h| hex::decode(h.as_str().unwrap()).unwrap())
            .collect(),
    )
}
