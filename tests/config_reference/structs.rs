//! The serde struct reader: every struct of `src/config/` that derives `Deserialize`, with
//! its keys as serde spells them, and the walk from a struct to every key it accepts.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::root;
use crate::syntax::{
    attr_value, closing, has_word, serde_attrs, split_top, strip_comments, take_attrs,
};

/// One key of a struct, as serde reads it.
#[derive(Debug)]
pub struct Field {
    /// The names the TOML may use: the (renamed) name, then aliases.
    pub names: Vec<String>,
    /// The field's Rust type, as written (to find the structs it reaches).
    pub ty: String,
    /// `#[serde(flatten)]`: its struct's keys are the parent's.
    pub flatten: bool,
}

#[derive(Debug)]
pub struct Struct {
    pub file: String,
    pub fields: Vec<Field>,
    pub deny_unknown: bool,
}

/// A field name as `rename_all` spells it.
pub fn renamed(name: &str, rule: Option<&str>) -> String {
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
        Some(other) => {
            panic!("rename_all = {other:?}: teach tests/config_reference/structs.rs this rule")
        }
    }
}

/// Every struct deriving `Deserialize` in `src/config/`.
pub fn config_structs() -> BTreeMap<String, Struct> {
    let dir = root().join("src/config");
    let mut files = Vec::new();
    rust_files(&dir, &mut files);
    files.sort();
    let mut structs = BTreeMap::new();
    for path in files {
        let file = path
            .strip_prefix(&dir)
            .unwrap()
            .to_string_lossy()
            .to_string();
        parse_structs(
            &file,
            &std::fs::read_to_string(&path).unwrap(),
            &mut structs,
        );
    }
    structs
}

/// The `.rs` files under `dir`, at any depth (the config keeps its passes in `raw/` and
/// `validate/`).
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for path in std::fs::read_dir(dir)
        .expect("src/config")
        .flatten()
        .map(|e| e.path())
    {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every struct deriving `Deserialize` in one source file, into `structs`.
pub fn parse_structs(file: &str, src: &str, structs: &mut BTreeMap<String, Struct>) {
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
pub fn referenced<'a>(ty: &str, structs: &'a BTreeMap<String, Struct>) -> Vec<&'a str> {
    ty.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter_map(|w| structs.get_key_value(w).map(|(k, _)| k.as_str()))
        .collect()
}

/// Every key a struct accepts, with the nested field it sits under (`None`: the page's own),
/// following flattened and nested structs. `reached` collects every struct met; a struct is
/// walked again under each field that names it (only a cycle stops the walk).
pub fn walk<'a>(
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
