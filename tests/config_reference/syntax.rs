//! The Rust source read as text, for the struct reader: comments stripped, brackets matched,
//! commas split at the top level, attributes and their `name = "value"`s taken apart.

/// Source text without `//` comments (doc comments included), strings left whole.
pub fn strip_comments(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    for line in src.lines() {
        let mut in_str = false;
        let mut escaped = false;
        let mut cut = line.len();
        let bytes = line.as_bytes();
        for (i, &b) in bytes.iter().enumerate() {
            if in_str {
                match b {
                    _ if escaped => escaped = false,
                    b'\\' => escaped = true,
                    b'"' => in_str = false,
                    _ => {}
                }
            } else if b == b'"' {
                in_str = true;
            } else if b == b'/' && bytes.get(i + 1) == Some(&b'/') {
                cut = i;
                break;
            }
        }
        out.push_str(&line[..cut]);
        out.push('\n');
    }
    out
}

/// Index of the bracket closing the one at `open` (`(`, `[`, `{` or `<`).
pub fn closing(s: &str, open: usize) -> usize {
    let mut depth = 0i32;
    let mut in_str = false;
    let bytes = s.as_bytes();
    let mut i = open;
    while i < bytes.len() {
        let b = bytes[i];
        if in_str {
            if b == b'\\' {
                i += 1;
            } else if b == b'"' {
                in_str = false;
            }
        } else {
            match b {
                b'"' => in_str = true,
                b'(' | b'[' | b'{' | b'<' => depth += 1,
                b')' | b']' | b'}' => depth -= 1,
                b'>' if i > 0 && bytes[i - 1] != b'-' => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                return i;
            }
        }
        i += 1;
    }
    panic!("unbalanced brackets in:\n{}", &s[open..]);
}

/// Split at commas outside brackets and strings.
pub fn split_top(s: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut in_str = false;
    let mut start = 0;
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if in_str {
            if b == b'\\' {
                i += 1;
            } else if b == b'"' {
                in_str = false;
            }
        } else {
            match b {
                b'"' => in_str = true,
                b'(' | b'[' | b'{' | b'<' => depth += 1,
                b')' | b']' | b'}' => depth -= 1,
                b'>' if i > 0 && bytes[i - 1] != b'-' => depth -= 1,
                b',' if depth == 0 => {
                    parts.push(s[start..i].to_string());
                    start = i + 1;
                }
                _ => {}
            }
        }
        i += 1;
    }
    parts.push(s[start..].to_string());
    parts
        .into_iter()
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

/// Leading `#[...]` attributes of `item`, and the rest.
pub fn take_attrs(item: &str) -> (Vec<String>, String) {
    let mut attrs = Vec::new();
    let mut rest = item.trim_start();
    while rest.starts_with("#[") {
        let end = closing(rest, 1);
        attrs.push(rest[2..end].to_string());
        rest = rest[end + 1..].trim_start();
    }
    (attrs, rest.to_string())
}

/// The string value of `name = "…"` inside a serde attribute, if any.
pub fn attr_value(attr: &str, name: &str) -> Vec<String> {
    let mut values = Vec::new();
    let mut rest = attr;
    while let Some(at) = rest.find(name) {
        let before_ok = at == 0
            || !rest.as_bytes()[at - 1].is_ascii_alphanumeric() && rest.as_bytes()[at - 1] != b'_';
        let after = rest[at + name.len()..].trim_start();
        if before_ok && let Some(v) = after.strip_prefix('=') {
            let v = v.trim_start();
            if let Some(v) = v.strip_prefix('"') {
                let end = v.find('"').expect("a closed string");
                values.push(v[..end].to_string());
            }
        }
        rest = &rest[at + name.len()..];
    }
    values
}

/// Inner text of every `serde(...)` attribute.
pub fn serde_attrs(attrs: &[String]) -> Vec<String> {
    attrs
        .iter()
        .filter_map(|a| a.trim().strip_prefix("serde"))
        .map(|a| {
            a.trim()
                .trim_start_matches('(')
                .trim_end_matches(')')
                .to_string()
        })
        .collect()
}

pub fn has_word(attr: &str, word: &str) -> bool {
    attr.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .any(|w| w == word)
}
