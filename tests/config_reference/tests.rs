//! The tests: every key `RawConfig` reaches is documented on its page, and the struct reader
//! itself spells keys as serde does.

use std::collections::{BTreeMap, BTreeSet};

use crate::page::{Kind, read_page};
use crate::root;
use crate::structs::{config_structs, parse_structs, referenced, walk};

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
