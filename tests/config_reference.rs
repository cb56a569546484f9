//! The config reference (`docs/src/reference/`) documents every key the config accepts.
//!
//! How: the keys are read from the code that accepts them, not from a list kept by hand.
//! The TOML file is deserialized by serde into the `Raw*` structs of `src/config/` (every
//! one `#[serde(deny_unknown_fields)]`, so a key is accepted exactly when it is a field of
//! one of them). This test reads those sources as text, finds every struct that derives
//! `Deserialize`, and takes its keys as serde spells them: the field name, or its
//! `rename`, after the struct's `rename_all`, plus every `alias`; `skip`ped fields are not
//! keys and `flatten`ed ones lend their struct's keys to the parent. Starting from
//! `RawConfig`, each top-level field is a table with a page of its own
//! (`client_ip` → `reference/client-ip.md`), and every struct reachable from that field's
//! type (`RawPolicy`, then `RawTier`, `RawOverride`, `RawCount`, `RawExempt`, …) belongs to
//! that page. Each key must then be documented there, read with pulldown-cmark (the parser
//! mdBook uses):
//!
//! - as `` `name` `` in the first cell of a row of a *keys* table (a table whose second
//!   column is `type`), and of a row of a *check* table (second column `bad value`): so no
//!   key lacks its type, default and example, nor the error `check` prints for it;
//! - for a nested table's key (`health.path`, `tiers.NAME.limit`), in tables under a heading
//!   that names the nested field as `` `health` ``, so `limit` of a tier is not taken as
//!   documented by the policy's own `limit`.
//!
//! And every top-level table must have a row in `reference/index.md`. The test also fails
//! when it cannot see what it checks: no `RawConfig`, fewer structs or keys than the config
//! has today, a `deny_unknown_fields` struct no table reaches (a new struct this walk does
//! not know), or a reachable struct without `deny_unknown_fields` (the reference promises
//! that unknown keys are errors). A failure lists every missing key with its page.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// One key of a struct, as serde reads it.
#[derive(Debug)]
struct Field {
    /// The names the TOML may use: the (renamed) name, then aliases.
    names: Vec<String>,
    /// The field's Rust type, as written (to find the structs it reaches).
    ty: String,
    /// `#[serde(flatten)]`: its struct's keys are the parent's.
    flatten: bool,
}

#[derive(Debug)]
struct Struct {
    file: String,
    fields: Vec<Field>,
    deny_unknown: bool,
}

/// Source text without `//` comments (doc comments included), strings left whole.
fn strip_comments(src: &str) -> String {
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
fn closing(s: &str, open: usize) -> usize {
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
fn split_top(s: &str) -> Vec<String> {
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
fn take_attrs(item: &str) -> (Vec<String>, String) {
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
fn attr_value(attr: &str, name: &str) -> Vec<String> {
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
fn serde_attrs(attrs: &[String]) -> Vec<String> {
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

fn has_word(attr: &str, word: &str) -> bool {
    attr.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .any(|w| w == word)
}

/// A field name as `rename_all` spells it.
fn renamed(name: &str, rule: Option<&str>) -> String {
    let words: Vec<&str> = name.split('_').filter(|w| !w.is_empty()).collect();
    let cap = |w: &str| {
        let mut c = w.chars();
        c.next()
            .map(|f| f.to_uppercase().collect::<String>() + c.as_str())
            .unwrap_or_default()
    };
    match rule {
        None | Some("snake_case") => name.to_string(),
        Some("lowercase") => name.replace('_', ""),
        Some("UPPERCASE") => name.replace('_', "").to_uppercase(),
        Some("kebab-case") => name.replace('_', "-"),
        Some("SCREAMING_SNAKE_CASE") => name.to_uppercase(),
        Some("SCREAMING-KEBAB-CASE") => name.replace('_', "-").to_uppercase(),
        Some("PascalCase") => words.iter().map(|w| cap(w)).collect(),
        Some("camelCase") => {
            let mut s = words.first().map(|w| w.to_string()).unwrap_or_default();
            s.extend(words.iter().skip(1).map(|w| cap(w)));
            s
        }
        Some(other) => panic!("rename_all = {other:?}: teach tests/config_reference.rs this rule"),
    }
}

/// Every struct deriving `Deserialize` in `src/config/`.
fn config_structs() -> BTreeMap<String, Struct> {
    let dir = root().join("src/config");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("src/config")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    files.sort();
    let mut structs = BTreeMap::new();
    for path in files {
        let file = path.file_name().unwrap().to_string_lossy().to_string();
        parse_structs(
            &file,
            &std::fs::read_to_string(&path).unwrap(),
            &mut structs,
        );
    }
    structs
}

/// Every struct deriving `Deserialize` in one source file, into `structs`.
fn parse_structs(file: &str, src: &str, structs: &mut BTreeMap<String, Struct>) {
    let file = file.to_string();
    let src = strip_comments(src);
    let mut from = 0;
    while let Some(found) = src[from..].find("struct ") {
        let at = from + found;
        from = at + 7;
        // A `struct` keyword at the start of an item, not inside a word.
        if at > 0
            && (src.as_bytes()[at - 1].is_ascii_alphanumeric() || src.as_bytes()[at - 1] == b'_')
        {
            continue;
        }
        let after = &src[at + 7..];
        let name: String = after
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let rest = after[name.len()..].trim_start();
        if name.is_empty() || !rest.starts_with('{') {
            continue; // a tuple or unit struct, or generics (none of which are config tables)
        }
        // The attributes right above: from the end of the previous item.
        let head_start = src[..at].rfind(['}', ';']).map_or(0, |i| i + 1);
        let head = &src[head_start..at];
        let attrs: Vec<String> = {
            let mut attrs = Vec::new();
            let mut rest = head;
            while let Some(i) = rest.find("#[") {
                let end = closing(rest, i + 1);
                attrs.push(rest[i + 2..end].to_string());
                rest = &rest[end + 1..];
            }
            attrs
        };
        let derives_deserialize = attrs
            .iter()
            .any(|a| a.trim_start().starts_with("derive") && has_word(a, "Deserialize"));
        if !derives_deserialize {
            continue;
        }
        let container = serde_attrs(&attrs);
        let rename_all = container
            .iter()
            .flat_map(|a| attr_value(a, "rename_all"))
            .next();
        let deny_unknown = container.iter().any(|a| has_word(a, "deny_unknown_fields"));
        let open = at + 7 + name.len() + (after[name.len()..].len() - rest.len());
        let close = closing(&src, open);
        let body = &src[open + 1..close];
        let mut fields = Vec::new();
        for item in split_top(body) {
            let (attrs, decl) = take_attrs(&item);
            let serde = serde_attrs(&attrs);
            if serde
                .iter()
                .any(|a| has_word(a, "skip") || has_word(a, "skip_deserializing"))
            {
                continue;
            }
            let decl = match decl.strip_prefix("pub") {
                Some(rest) if rest.starts_with([' ', '(']) => rest.trim_start(),
                _ => decl.as_str(),
            };
            let decl = if decl.starts_with('(') {
                &decl[closing(decl, 0) + 1..]
            } else {
                decl
            }
            .trim_start();
            let (ident, ty) = decl
                .split_once(':')
                .unwrap_or_else(|| panic!("{file}: struct {name}: cannot read field `{decl}`"));
            let ident = ident.trim().trim_start_matches("r#");
            let mut names: Vec<String> = serde
                .iter()
                .flat_map(|a| {
                    // `rename = "x"` or `rename(deserialize = "x")`
                    let mut v = attr_value(a, "rename");
                    if let Some(i) = a.find("rename(") {
                        let inner = &a[i + 6..=closing(a, i + 6)];
                        v.extend(attr_value(inner, "deserialize"));
                    }
                    v
                })
                .take(1)
                .collect();
            if names.is_empty() {
                names.push(renamed(ident, rename_all.as_deref()));
            }
            names.extend(serde.iter().flat_map(|a| attr_value(a, "alias")));
            let flatten = serde.iter().any(|a| has_word(a, "flatten"));
            fields.push(Field {
                names,
                ty: ty.trim().to_string(),
                flatten,
            });
        }
        let previous = structs.insert(
            name.clone(),
            Struct {
                file: file.clone(),
                fields,
                deny_unknown,
            },
        );
        assert!(
            previous.is_none(),
            "two structs named {name} in src/config: the walk cannot tell them apart"
        );
    }
}

/// The structs a type names (`Option<super::tiers::RawTier>` → `RawTier`).
fn referenced<'a>(ty: &str, structs: &'a BTreeMap<String, Struct>) -> Vec<&'a str> {
    ty.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter_map(|w| structs.get_key_value(w).map(|(k, _)| k.as_str()))
        .collect()
}

/// What one reference page documents.
#[derive(Default)]
struct Documented {
    /// (headings' code spans above the table, table kind, key) per first-cell code span.
    rows: Vec<(BTreeSet<String>, Kind, String)>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Keys,
    Check,
    Other,
}

fn read_page(path: &Path) -> Documented {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut doc = Documented::default();
    // Open headings: (level, code spans in it).
    let mut headings: Vec<(usize, BTreeSet<String>)> = Vec::new();
    let mut in_heading: Option<(usize, BTreeSet<String>)> = None;
    let mut kind = Kind::Other;
    let mut head_cells: Vec<String> = Vec::new();
    let mut in_head = false;
    let mut cell = 0usize;
    let mut cell_text = String::new();
    let mut first_cell_code: Vec<String> = Vec::new();
    for event in Parser::new_ext(&text, Options::ENABLE_TABLES) {
        match event {
            Event::Start(Tag::Heading { level, .. }) => {
                in_heading = Some((level as usize, BTreeSet::new()))
            }
            Event::End(TagEnd::Heading(_)) => {
                let (level, spans) = in_heading.take().expect("a heading ends after it starts");
                headings.retain(|(l, _)| *l < level);
                headings.push((level, spans));
            }
            Event::Start(Tag::TableHead) => {
                in_head = true;
                head_cells.clear();
            }
            Event::End(TagEnd::TableHead) => {
                in_head = false;
                kind = match head_cells.get(1).map(|c| c.trim().to_lowercase()) {
                    Some(c) if c == "type" => Kind::Keys,
                    Some(c) if c == "bad value" => Kind::Check,
                    _ => Kind::Other,
                };
            }
            Event::Start(Tag::TableRow) => {
                cell = 0;
                first_cell_code.clear();
            }
            Event::Start(Tag::TableCell) => cell_text.clear(),
            Event::End(TagEnd::TableCell) => {
                if in_head {
                    head_cells.push(cell_text.clone());
                }
                cell += 1;
            }
            Event::End(TagEnd::TableRow) => {
                let above: BTreeSet<String> = headings
                    .iter()
                    .flat_map(|(_, s)| s.iter().cloned())
                    .collect();
                for code in &first_cell_code {
                    doc.rows.push((above.clone(), kind, code.clone()));
                }
            }
            Event::Code(c) => {
                if let Some((_, spans)) = in_heading.as_mut() {
                    spans.insert(c.to_string());
                }
                cell_text.push_str(&c);
                if cell == 0 && !in_head {
                    first_cell_code.push(c.to_string());
                }
            }
            Event::Text(t) => cell_text.push_str(&t),
            _ => {}
        }
    }
    doc
}

impl Documented {
    /// Whether `key` is in a table of `kind`, under a heading naming `section` if given.
    fn has(&self, key: &str, kind: Kind, section: Option<&str>) -> bool {
        self.rows.iter().any(|(above, k, code)| {
            *k == kind
                && (code == key || code.ends_with(&format!(".{key}")))
                && section.is_none_or(|s| above.contains(s))
        })
    }
}

/// Every key a struct accepts, with the nested field it sits under (`None`: the page's own),
/// following flattened and nested structs. `reached` collects every struct met; a struct is
/// walked again under each field that names it (only a cycle stops the walk).
fn walk<'a>(
    name: &'a str,
    section: Option<&'a str>,
    structs: &'a BTreeMap<String, Struct>,
    reached: &mut BTreeSet<&'a str>,
    out: &mut Vec<(Option<&'a str>, &'a str, &'a str)>,
) {
    fn go<'a>(
        name: &'a str,
        section: Option<&'a str>,
        structs: &'a BTreeMap<String, Struct>,
        ancestors: &mut Vec<&'a str>,
        reached: &mut BTreeSet<&'a str>,
        out: &mut Vec<(Option<&'a str>, &'a str, &'a str)>,
    ) {
        if ancestors.contains(&name) {
            return;
        }
        reached.insert(name);
        ancestors.push(name);
        for f in &structs[name].fields {
            let nested = referenced(&f.ty, structs);
            if f.flatten {
                for n in nested {
                    go(n, section, structs, ancestors, reached, out);
                }
                continue;
            }
            for n in &f.names {
                out.push((section, n.as_str(), name));
            }
            for n in nested {
                go(
                    n,
                    Some(f.names[0].as_str()),
                    structs,
                    ancestors,
                    reached,
                    out,
                );
            }
        }
        ancestors.pop();
    }
    go(name, section, structs, &mut Vec::new(), reached, out);
}

#[test]
fn every_config_key_is_in_the_reference() {
    let structs = config_structs();
    let top = structs
        .get("RawConfig")
        .expect("struct RawConfig in src/config: the walk starts there");
    assert!(
        top.fields.len() >= 10,
        "RawConfig has {} tables: the parser lost some",
        top.fields.len()
    );

    let reference = root().join("docs/src/reference");
    let index = read_page(&reference.join("index.md"));
    let mut missing = Vec::new();
    let mut reached: BTreeSet<&str> = BTreeSet::from(["RawConfig"]);
    let mut keys = 0;
    for table in &top.fields {
        let table_name = &table.names[0];
        let page_name = format!("{}.md", table_name.replace('_', "-"));
        let page_path = reference.join(&page_name);
        if !index.rows.iter().any(|(_, _, code)| code == table_name) {
            missing.push(format!(
                "reference/index.md: no row for the table `{table_name}`"
            ));
        }
        if !page_path.exists() {
            missing.push(format!(
                "reference/{page_name}: no such page for the table `{table_name}`"
            ));
            continue;
        }
        let page = read_page(&page_path);
        let mut seen = BTreeSet::new();
        let mut found = Vec::new();
        for s in referenced(&table.ty, &structs) {
            walk(s, None, &structs, &mut seen, &mut found);
        }
        assert!(
            !found.is_empty(),
            "the table `{table_name}` ({}) reaches no struct",
            table.ty
        );
        reached.extend(seen.iter().copied());
        for (section, key, owner) in found {
            keys += 1;
            let at = section.map_or(String::new(), |s| format!(" under a heading naming `{s}`"));
            for (kind, what) in [
                (Kind::Keys, "keys table (type, default, example)"),
                (Kind::Check, "check table (bad value, message)"),
            ] {
                if !page.has(key, kind, section) {
                    missing.push(format!(
                        "reference/{page_name}: `{key}` ({owner}) is in no {what}{at}"
                    ));
                }
            }
        }
    }
    for (name, s) in &structs {
        if s.deny_unknown && !reached.contains(name.as_str()) {
            missing.push(format!("src/config/{}: struct {name} denies unknown fields but no table reaches it: teach this test where it sits", s.file));
        }
    }
    for name in &reached {
        let s = &structs[*name];
        if !s.deny_unknown {
            missing.push(format!("src/config/{}: struct {name} is read from the config without #[serde(deny_unknown_fields)]: the reference says unknown keys are errors", s.file));
        }
    }
    assert!(
        reached.len() >= 15,
        "only {} structs reached from RawConfig: the parser lost some",
        reached.len()
    );
    assert!(keys >= 100, "only {keys} keys found: the parser lost some");
    assert!(
        missing.is_empty(),
        "{} gaps in the config reference:\n{}",
        missing.len(),
        missing.join("\n")
    );
}

/// The reader of serde structs sees what serde sees: renames, `rename_all`, aliases,
/// skipped and flattened fields, attributes over several lines, comments with `//` in them.
#[test]
fn the_struct_reader_spells_keys_as_serde_does() {
    let src = r#"
        /// A doc comment: struct Fake { no: u8 } // is not code
        #[derive(Debug, Clone,
                 Deserialize)]
        #[serde(deny_unknown_fields, rename_all = "kebab-case")]
        pub struct RawDemo {
            pub plain_key: String, // a trailing comment
            #[serde(rename = "match", default)]
            pub matcher: Option<BTreeMap<String, RawInner>>,
            #[serde(alias = "old_name")]
            pub(crate) new_name: u32,
            #[serde(skip)]
            pub internal: u8,
            #[serde(flatten)]
            pub more: RawInner,
            #[serde(default = "defaults::url")] // "redis://" in a comment
            pub url: String,
        }

        #[derive(Deserialize)]
        struct RawInner {
            inner_key: Vec<(u8, u8)>,
        }

        #[derive(Debug)]
        struct NotConfig {
            x: u8,
        }
    "#;
    let mut structs = BTreeMap::new();
    parse_structs("demo.rs", src, &mut structs);
    assert_eq!(structs.keys().collect::<Vec<_>>(), ["RawDemo", "RawInner"]);
    let demo = &structs["RawDemo"];
    assert!(demo.deny_unknown);
    assert!(!structs["RawInner"].deny_unknown);
    let names: Vec<&Vec<String>> = demo.fields.iter().map(|f| &f.names).collect();
    assert_eq!(
        names,
        [
            &vec!["plain-key".to_string()],
            &vec!["match".to_string()],
            &vec!["new-name".to_string(), "old_name".to_string()],
            &vec!["more".to_string()],
            &vec!["url".to_string()],
        ]
    );
    assert!(demo.fields[3].flatten);
    assert_eq!(referenced(&demo.fields[1].ty, &structs), ["RawInner"]);
    let mut seen = BTreeSet::new();
    let mut keys = Vec::new();
    walk("RawDemo", None, &structs, &mut seen, &mut keys);
    let keys: Vec<(Option<&str>, &str)> = keys.iter().map(|(s, k, _)| (*s, *k)).collect();
    assert_eq!(
        keys,
        [
            (None, "plain-key"),
            (None, "match"),
            (Some("match"), "inner_key"),
            (None, "new-name"),
            (None, "old_name"),
            (None, "inner_key"),
            (None, "url"),
        ],
        "a flattened struct's keys are the parent's; a struct named twice is walked twice"
    );
}
