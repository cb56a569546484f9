//! The config fixtures (`tests/common/fixtures/valid/`, `invalid/`) and the lines at their
//! head: `# expect: KEY: FRAGMENT` (an invalid one: a line `check` prints for it),
//! `# env: NAME=VALUE` (a variable `check` runs with, for a fixture about what a variable
//! holds) and `# docs: reference/PAGE.md` (the book's page whose "`check` prints" table it
//! proves a row of: `tests/config/docs/check_tables.rs`). Shared by the fixture test
//! (`tests/cli/cli.rs`) and the docs test, so both run a fixture alike.

use std::path::PathBuf;
use std::process::Output;

use super::process::tollgate;
use super::repo_path;

/// One fixture file and its head.
pub struct ConfigFixture {
    pub path: PathBuf,
    /// `# expect:` (invalid fixtures).
    pub expect: Option<String>,
    /// `# env:` lines, as (name, value).
    pub env: Vec<(String, String)>,
    /// `# docs:` lines: pages under `docs/src/`.
    pub docs: Vec<String>,
}

impl ConfigFixture {
    fn read(path: PathBuf) -> Self {
        let text = std::fs::read_to_string(&path).unwrap();
        let header = |name: &str| -> Vec<String> {
            let prefix = format!("# {name}: ");
            text.lines()
                .filter_map(|l| l.strip_prefix(&prefix))
                .map(String::from)
                .collect()
        };
        let env = header("env")
            .iter()
            .map(|e| {
                let (name, value) = e
                    .split_once('=')
                    .unwrap_or_else(|| panic!("{}: `# env: NAME=VALUE`", path.display()));
                (name.to_string(), value.to_string())
            })
            .collect();
        Self {
            expect: header("expect").into_iter().next(),
            env,
            docs: header("docs"),
            path,
        }
    }

    /// `tollgate check -c FILE` (the path absolute) with the fixture's variables set.
    pub fn check(&self) -> Output {
        tollgate()
            .args(["check", "-c"])
            .arg(&self.path)
            .envs(self.env.iter().map(|(n, v)| (n, v)))
            .output()
            .unwrap()
    }
}

/// The fixtures of `tests/common/fixtures/{kind}` (`valid` or `invalid`), in name order.
pub fn config_fixtures(kind: &str) -> Vec<ConfigFixture> {
    let dir = repo_path(&format!("tests/common/fixtures/{kind}"));
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no fixtures in {}", dir.display());
    files.into_iter().map(ConfigFixture::read).collect()
}
