//! ARCHITECTURE.md cannot drift from the tree: its table ("Where things live") names every
//! source file of both crates, and every path it names anywhere exists.
//!
//! How the table names a file: each row's first cell gives its folder (`proxy/upstream/`;
//! none for the files at the root of `src/`), relative to `src/`, with `limit/` standing for
//! `crates/tollgate-limit/src/`. A file is named by its path relative to the deepest folder
//! that has a row (`forward.rs` in the `proxy/upstream/` row; `headers/names.rs` in the
//! `proxy/` row, since `proxy/headers/` has none). Tests beside their code (`tests.rs`,
//! `tests_*.rs`, anything under a `tests/` folder) are left out, as the doc says.
//!
//! A path the doc names is a code span that looks like one (a `/` at its end, or a `.rs`,
//! `.lua`, `.html`, `.md`, `.sh`, `.py` or `.toml` name); it exists when a file or folder of
//! the repository has that path, or ends with it after a `/` (`check/store.rs` is
//! `limit/check/store.rs`): prose names files by their short paths.

use super::*;

use pulldown_cmark::Options;

/// One row of the table: its folder (`""` at the root of `src/`) and every code span in it.
struct Row {
    folder: String,
    names: HashSet<String>,
}

/// The rows of the table under "## Where things live".
fn rows(doc: &str) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut in_section = false;
    let mut in_heading = false;
    let mut heading = String::new();
    let mut cell = 0;
    let mut row: Option<(Option<String>, HashSet<String>)> = None;
    for event in Parser::new_ext(doc, Options::ENABLE_TABLES) {
        match event {
            Event::Start(Tag::Heading { .. }) => {
                in_heading = true;
                heading.clear();
            }
            Event::End(TagEnd::Heading(_)) => {
                in_heading = false;
                in_section = heading == "Where things live";
            }
            Event::Text(t) if in_heading => heading.push_str(&t),
            Event::Start(Tag::TableRow) if in_section => {
                cell = 0;
                row = Some((None, HashSet::new()));
            }
            Event::End(TagEnd::TableCell) => cell += 1,
            Event::Code(code) => {
                if in_heading {
                    heading.push_str(&code);
                } else if let Some((folder, names)) = row.as_mut() {
                    if cell == 0 && folder.is_none() && code.ends_with('/') {
                        *folder = Some(code.to_string());
                    }
                    names.insert(code.to_string());
                }
            }
            Event::End(TagEnd::TableRow) => {
                if let Some((folder, names)) = row.take() {
                    rows.push(Row {
                        folder: folder.unwrap_or_default(),
                        names,
                    });
                }
            }
            _ => {}
        }
    }
    rows
}

/// Every code span of the doc that names a path.
fn named_paths(doc: &str) -> Vec<String> {
    let mut paths: Vec<String> = Parser::new_ext(doc, Options::ENABLE_TABLES)
        .filter_map(|e| match e {
            Event::Code(code) if looks_like_path(&code) => Some(code.to_string()),
            _ => None,
        })
        .collect();
    paths.sort();
    paths.dedup();
    paths
}

fn looks_like_path(span: &str) -> bool {
    let chars = span
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_./-".contains(c));
    let ext = ["rs", "lua", "html", "md", "sh", "py", "toml"]
        .iter()
        .any(|e| span.ends_with(&format!(".{e}")));
    chars && !span.starts_with('/') && (span.ends_with('/') || ext)
}

/// The source files the table must name, as it names them: relative to `src/`, or under
/// `limit/` for the limiter's.
fn source_files() -> Vec<String> {
    let mut files = Vec::new();
    for (dir, prefix) in [("src", ""), ("crates/tollgate-limit/src", "limit/")] {
        let base = root().join(dir);
        let mut found = Vec::new();
        walk(&base, &mut found);
        for path in found {
            let rel = path
                .strip_prefix(&base)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let name = rel.rsplit('/').next().unwrap();
            let source = ["rs", "lua", "html"]
                .iter()
                .any(|e| name.ends_with(&format!(".{e}")));
            let test = name.starts_with("tests") || rel.split('/').any(|part| part == "tests");
            if source && !test {
                files.push(format!("{prefix}{rel}"));
            }
        }
    }
    files.sort();
    files
}

/// Each file the table does not name where it should, with the row and name it looked for.
fn unnamed(files: &[String], rows: &[Row]) -> Vec<String> {
    files
        .iter()
        .filter_map(|file| {
            let folder = rows
                .iter()
                .map(|r| r.folder.as_str())
                .filter(|f| file.starts_with(f))
                .max_by_key(|f| f.len())
                .unwrap_or("");
            let rel = &file[folder.len()..];
            let named = rows
                .iter()
                .any(|r| r.folder == folder && r.names.contains(rel));
            (!named).then(|| format!("`{file}`: the `{folder}` row does not name `{rel}`"))
        })
        .collect()
}

/// Every file and folder of the repository (build output, the built book and hidden folders
/// aside), by its path from the root, and the limiter's also under `limit/`.
fn repository_paths() -> HashSet<String> {
    fn visit(dir: &Path, out: &mut HashSet<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            let rel = path
                .strip_prefix(root())
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if name.starts_with('.') || rel == "target" || rel == "docs/book" {
                continue;
            }
            if let Some(limit) = rel.strip_prefix("crates/tollgate-limit/src/") {
                out.insert(format!("limit/{limit}"));
            }
            out.insert(rel);
            if path.is_dir() {
                visit(&path, out);
            }
        }
    }
    let mut paths = HashSet::from(["limit".to_string()]);
    visit(&root(), &mut paths);
    paths
}

/// Each named path no file or folder has (or ends with).
fn missing(named: &[String], paths: &HashSet<String>) -> Vec<String> {
    named
        .iter()
        .filter(|name| {
            let name = name.trim_end_matches('/');
            let tail = format!("/{name}");
            !paths.contains(name) && !paths.iter().any(|p| p.ends_with(&tail))
        })
        .map(|name| format!("`{name}`: no such file or folder"))
        .collect()
}

fn architecture() -> String {
    std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap()
}

#[test]
fn the_table_names_every_source_file() {
    let rows = rows(&architecture());
    assert!(
        rows.iter().any(|r| r.folder == "proxy/upstream/"),
        "the table was not read: no `proxy/upstream/` row among {} rows",
        rows.len()
    );
    let files = source_files();
    assert!(
        files.contains(&"limit/check/mod.rs".to_string()),
        "the limiter's sources were not found"
    );
    let unnamed = unnamed(&files, &rows);
    assert!(
        unnamed.is_empty(),
        "ARCHITECTURE.md's table does not name {} files:\n{}",
        unnamed.len(),
        unnamed.join("\n")
    );
}

#[test]
fn every_path_the_doc_names_exists() {
    let named = named_paths(&architecture());
    assert!(
        named.contains(&"proxy/upstream/pool.rs".to_string()),
        "the doc's paths were not read"
    );
    let missing = missing(&named, &repository_paths());
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names {} paths that do not exist:\n{}",
        missing.len(),
        missing.join("\n")
    );
}

/// The two checks can fail: a file the table does not name, and a name no file has.
#[test]
fn an_unnamed_file_and_a_stale_name_are_found() {
    let rows = rows(&architecture());
    let mut files = source_files();
    files.push("proxy/upstream/unnamed.rs".to_string());
    let found = unnamed(&files, &rows);
    let expected =
        "`proxy/upstream/unnamed.rs`: the `proxy/upstream/` row does not name `unnamed.rs`";
    assert!(found.iter().any(|f| f == expected), "{found:?}");
    let stale = ["proxy/forward.rs".to_string()];
    assert_eq!(
        missing(&stale, &repository_paths()),
        ["`proxy/forward.rs`: no such file or folder"]
    );
}
