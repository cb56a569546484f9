//! The reference's tables of what `tollgate check` prints (`docs/src/reference/*.md`, the
//! tables whose last column is headed "`check` prints"): every row's message is a line the
//! binary prints for a fixture that names the page.
//!
//! The link: a fixture in `tests/common/fixtures/invalid/` (or `valid/`, for a warning)
//! says `# docs: reference/PAGE.md`; each row of that page's tables must be a line `check`
//! prints for one of the fixtures naming the page, and each such fixture must print a row of
//! it (a link does not outlive its row). A row no fixture prints fails, so a new row comes
//! with its fixture. The comparison is exact but for what the reference's `index.md` says
//! varies: the `FILE: ` in front is dropped, a `(line N)` is any line, and the fixture's
//! folder is shown as `/etc/tollgate/` (the rows name files of a config in
//! `/etc/tollgate/`; the fixtures keep files of those names beside them).
//!
//! Two kinds of row are not a `check` line of a fixture: "see the block below" (the message
//! is in the page's next `toml,check-fails` block, which `blocks.rs` checks; here the block
//! must name the row's key), and the one row of what `serve` prints ([`FROM_SERVE`]: run
//! here with `serve` on a config it refuses so).

use pulldown_cmark::Options;

use super::*;
use crate::common::config_fixtures::{ConfigFixture, config_fixtures};

/// Rows whose message `serve`, not `check`, prints (a file `check` finds fine that `serve`
/// cannot open), by page and key, with a config `serve` refuses so. Its access log is in
/// `/sys`, where no one, root included, creates a file (tests may run as root, whom no file
/// mode refuses); the path and the system's words for the failure (`Permission denied`, or
/// a read-only file system's) are masked ([`mask_open_failure`]).
const FROM_SERVE: &[(&str, &str, &str)] = &[(
    "reference/server.md",
    "access_log",
    "[server]\nlisten = \"127.0.0.1:0\"\naccess_log = \"/sys/tollgate-access.log\"\n",
)];

/// `cannot open `PATH`: WHY` → `cannot open `<PATH>`: <WHY>`.
fn mask_open_failure(line: &str) -> String {
    match line.split_once("cannot open `") {
        Some((head, rest)) if rest.contains("`: ") => format!("{head}cannot open `<PATH>`: <WHY>"),
        _ => line.to_string(),
    }
}

/// What `tollgate serve -c config` prints before it exits, its exit code, the file's name
/// dropped as check's is; a serve that is still running after a minute fails the test.
fn serve_refuses(config: &str) -> (Option<i32>, Vec<String>) {
    let dir = crate::common::temp::TempDir::new("check-tables-serve");
    dir.file("config.toml", config.as_bytes());
    let child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["serve", "-c", "config.toml"])
        .current_dir(&dir.0)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    let out = match rx.recv_timeout(std::time::Duration::from_secs(60)) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            let _ = Command::new("kill").arg(pid.to_string()).status();
            panic!("serve did not refuse {config:?}: it was still running after a minute");
        }
    };
    let lines = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| !l.starts_with('{'))
        .map(|l| l.strip_prefix("config.toml: ").unwrap_or(l).to_string())
        .collect();
    (out.status.code(), lines)
}

/// What a row says `check` prints.
enum Printed {
    /// A line, as unescaped from its code span.
    Line(String),
    /// "see the block below".
    BlockBelow,
    /// A message followed by a note (`(from `serve`, exit 2)`).
    Noted(String),
}

struct Row {
    page: String,
    line: usize,
    key: String,
    printed: Printed,
}

/// One cell as (is a code span, text) pieces.
type Cell = Vec<(bool, String)>;

fn cell_text(cell: &Cell) -> String {
    cell.iter().map(|(_, t)| t.as_str()).collect()
}

/// Every row of every "`check` prints" table of the reference.
fn rows() -> Vec<Row> {
    let dir = root().join("docs/src/reference");
    let mut pages: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    pages.sort();
    let mut rows = Vec::new();
    for path in pages {
        let page = format!("reference/{}", path.file_name().unwrap().to_string_lossy());
        let text = std::fs::read_to_string(&path).unwrap();
        let mut in_table = false;
        let mut head: Vec<Cell> = Vec::new();
        let mut cells: Vec<Cell> = Vec::new();
        let mut row_line = 0;
        let mut is_check_table = false;
        for (event, range) in Parser::new_ext(&text, Options::ENABLE_TABLES).into_offset_iter() {
            match event {
                Event::Start(Tag::Table(_)) => {
                    in_table = true;
                    head.clear();
                }
                Event::End(TagEnd::Table) => in_table = false,
                Event::Start(Tag::TableHead) => cells.clear(),
                Event::End(TagEnd::TableHead) => {
                    head = std::mem::take(&mut cells);
                    is_check_table = head.last().is_some_and(|c| cell_text(c) == "check prints");
                }
                Event::Start(Tag::TableRow) => {
                    cells.clear();
                    row_line = line_of(&text, range.start);
                }
                Event::End(TagEnd::TableRow) if is_check_table => {
                    let printed = cells.last().unwrap();
                    let printed = match printed.as_slice() {
                        [(true, line)] => Printed::Line(line.clone()),
                        [(false, see), ..] if see.starts_with("see ") => Printed::BlockBelow,
                        [(true, line), rest @ ..] if !rest.is_empty() => {
                            Printed::Noted(line.clone())
                        }
                        _ => panic!(
                            "{page}:{row_line}: a `check` prints cell is one code span, \
                             or says \"see the block below\""
                        ),
                    };
                    rows.push(Row {
                        page: page.clone(),
                        line: row_line,
                        key: cell_text(&cells[0]),
                        printed,
                    });
                }
                Event::Start(Tag::TableCell) if in_table => cells.push(Vec::new()),
                Event::Code(t) if in_table => {
                    if let Some(c) = cells.last_mut() {
                        c.push((true, t.to_string()))
                    }
                }
                Event::Text(t) if in_table => {
                    if let Some(c) = cells.last_mut() {
                        c.push((false, t.to_string()))
                    }
                }
                _ => {}
            }
        }
    }
    rows
}

/// `(line 12)` → `(line N)`: the line depends on the config around the bad value.
fn mask_line(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(at) = rest.find("(line ") {
        let after = &rest[at + "(line ".len()..];
        let digits = after.chars().take_while(char::is_ascii_digit).count();
        out.push_str(&rest[..at]);
        if digits > 0 && after[digits..].starts_with(')') {
            out.push_str("(line N)");
            rest = &after[digits + 1..];
        } else {
            out.push_str("(line ");
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// What `check` prints for a fixture, line by line, as the reference shows it.
fn printed(fixture: &ConfigFixture) -> Vec<String> {
    let out = fixture.check();
    let file = fixture.path.to_string_lossy().into_owned();
    let dir = format!("{}/", fixture.path.parent().unwrap().to_string_lossy());
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .map(|l| {
            let l = l.strip_prefix(&format!("{file}: ")).unwrap_or(l);
            mask_line(&l.replace(&dir, "/etc/tollgate/"))
        })
        .collect()
}

#[test]
fn every_check_table_row_is_what_check_prints_for_its_fixture() {
    let rows = rows();
    assert!(rows.len() > 100, "only {} rows were found", rows.len());
    // Fixtures by the page they name, each with what check prints for it.
    let mut linked: HashMap<String, Vec<(PathBuf, Vec<String>)>> = HashMap::new();
    for fixture in config_fixtures("invalid")
        .into_iter()
        .chain(config_fixtures("valid"))
    {
        let pages = fixture.docs.clone();
        if pages.is_empty() {
            continue;
        }
        let lines = printed(&fixture);
        for page in pages {
            linked
                .entry(page)
                .or_default()
                .push((fixture.path.clone(), lines.clone()));
        }
    }
    let mut problems = Vec::new();
    let mut proven: HashSet<(String, PathBuf)> = HashSet::new();
    let none = Vec::new();
    for row in &rows {
        let here = format!("docs/src/{}:{}", row.page, row.line);
        let fixtures = linked.get(&row.page).unwrap_or(&none);
        match &row.printed {
            Printed::Line(line) => {
                let want = mask_line(line);
                let by: Vec<&PathBuf> = fixtures
                    .iter()
                    .filter(|(_, lines)| lines.contains(&want))
                    .map(|(f, _)| f)
                    .collect();
                for f in &by {
                    proven.insert((row.page.clone(), (*f).clone()));
                }
                if by.is_empty() {
                    // The nearest: what the page's fixtures print for the row's key.
                    let key = want.split(": ").next().unwrap_or_default();
                    let near: Vec<String> = fixtures
                        .iter()
                        .flat_map(|(f, lines)| {
                            lines
                                .iter()
                                .filter(|l| l.starts_with(&format!("{key}: ")))
                                .map(move |l| format!("  {}: {l}", name(f)))
                        })
                        .collect();
                    problems.push(format!(
                        "{here}: no fixture naming `# docs: {}` prints\n  {want}\n{}",
                        row.page,
                        if near.is_empty() {
                            "  (no fixture prints anything for this key: add one)".to_string()
                        } else {
                            format!(
                                "the page's fixtures print for this key:\n{}",
                                near.join("\n")
                            )
                        }
                    ));
                }
            }
            Printed::BlockBelow => {
                let blocks = read_page(&root().join("docs/src").join(&row.page)).toml;
                let named = blocks.iter().any(|b| {
                    b.line > row.line
                        && b.expect_failure.as_ref().is_some_and(|lines| {
                            lines.iter().any(|l| l.contains(&format!(".{}: ", row.key)))
                        })
                });
                if !named {
                    problems.push(format!(
                        "{here}: says \"see the block below\", but no `toml,check-fails` block \
                         below it shows a message for `{}`",
                        row.key
                    ));
                }
            }
            Printed::Noted(line) => {
                let Some((_, _, config)) = FROM_SERVE
                    .iter()
                    .find(|(page, key, _)| *page == row.page && *key == row.key)
                else {
                    problems.push(format!(
                        "{here}: a message with a note after it is not `check`'s: make it one \
                         code span, or list the row in FROM_SERVE with a config serve refuses so"
                    ));
                    continue;
                };
                let (code, said) = serve_refuses(config);
                let want = mask_open_failure(line);
                if code != Some(2) || !said.iter().any(|l| mask_open_failure(l) == want) {
                    problems.push(format!(
                        "{here}: serve exited {code:?} and printed\n  {}\nnot (masked)\n  {want}",
                        said.join("\n  ")
                    ));
                }
            }
        }
    }
    for (page, key, _) in FROM_SERVE {
        if !rows
            .iter()
            .any(|r| r.page == *page && r.key == *key && matches!(r.printed, Printed::Noted(_)))
        {
            problems.push(format!(
                "FROM_SERVE names {page} `{key}`, which has no such row"
            ));
        }
    }
    // Every link proves a row: a fixture that names a page prints one of its rows.
    for (page, fixtures) in &linked {
        for (f, lines) in fixtures {
            if !proven.contains(&(page.clone(), f.clone())) {
                problems.push(format!(
                    "{}: says `# docs: {page}`, but prints no row of its tables:\n  {}",
                    name(f),
                    lines.join("\n  ")
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{} of {} rows or links:\n{}",
        problems.len(),
        rows.len(),
        problems.join("\n")
    );
}

fn name(f: &Path) -> String {
    f.strip_prefix(root()).unwrap_or(f).display().to_string()
}
