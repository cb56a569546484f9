//! envoyproxy/ratelimit YAML fixtures (`tests/common/fixtures/rls/`), loaded as the rate limit
//! service will load them: each `valid/` file or folder loads with the rules its `# rules: N`
//! lines count; each `invalid/` file or folder is refused with exactly the problems its
//! `# expect: LINE: MESSAGE` lines state (line 0: a problem with no line), all at once.

use std::path::{Path, PathBuf};

use tollgate::rls::RlsConfig;

use crate::common::repo_path;

/// The fixtures under `rls/{kind}`: files and folders, in name order.
fn fixtures(kind: &str) -> Vec<PathBuf> {
    let dir = repo_path(&format!("tests/common/fixtures/rls/{kind}"));
    let mut all: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    all.sort();
    assert!(all.len() > 3, "fixtures in {}", dir.display());
    all
}

/// The YAML files a fixture is made of (itself, or the folder's *.yaml / *.yml).
fn files(fixture: &Path) -> Vec<PathBuf> {
    if !fixture.is_dir() {
        return vec![fixture.to_path_buf()];
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(fixture)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    files
}

/// The text after `# NAME: ` on each line of `file` that has it.
fn header(file: &Path, name: &str) -> Vec<String> {
    let prefix = format!("# {name}: ");
    std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix).map(str::to_owned))
        .collect()
}

#[test]
fn every_valid_fixture_loads_with_the_rules_it_counts() {
    for fixture in fixtures("valid") {
        let config = RlsConfig::load(&fixture)
            .unwrap_or_else(|e| panic!("{} is refused:\n{e}", fixture.display()));
        let rules: usize = files(&fixture)
            .iter()
            .flat_map(|f| header(f, "rules"))
            .map(|n| n.parse::<usize>().unwrap())
            .sum();
        assert!(rules > 0, "{}: no `# rules:` line", fixture.display());
        assert_eq!(config.rules().len(), rules, "{}", fixture.display());
        let domains = config.domains().count();
        assert_eq!(domains, files(&fixture).len(), "{}", fixture.display());
    }
}

#[test]
fn every_invalid_fixture_is_refused_with_each_of_its_problems() {
    let mut wrong = Vec::new();
    for fixture in fixtures("invalid") {
        let mut expected: Vec<String> = Vec::new();
        for file in files(&fixture) {
            for expect in header(&file, "expect") {
                let expect = expect.replace("{dir}", &fixture.display().to_string());
                expected.push(match expect.strip_prefix("0: ") {
                    Some(rest) => format!("{}: {rest}", file.display()),
                    None => format!("{}:{expect}", file.display()),
                });
            }
        }
        assert!(
            !expected.is_empty(),
            "{}: no `# expect:` line",
            fixture.display()
        );
        let errors = match RlsConfig::load(&fixture) {
            Ok(_) => panic!("{} loads", fixture.display()),
            Err(e) => e.to_string(),
        };
        let got: Vec<&str> = errors.lines().collect();
        if got != expected {
            wrong.push(format!(
                "{}:\n  got:  {got:#?}\n  want: {expected:#?}",
                fixture.display()
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
