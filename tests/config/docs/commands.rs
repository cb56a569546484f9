//! The outputs of `tollgate simulate` the book shows are the binary's (issue 52: the
//! default run and the lease matrix had drifted from what every run prints). A ```text
//! block whose first line is `$ tollgate simulate …` is run with those arguments and its
//! lines compared with the output's, but for the one column a machine decides: the
//! simulator's own speed (`M decisions/s`, the last field of a row under that header).
//! The simulator runs on a virtual clock from a fixed seed, so the rest repeats exactly.

use pulldown_cmark::{CodeBlockKind, Event, Parser, Tag, TagEnd};

use super::markdown_files;
use crate::common::process::tollgate;

/// Every (file, line, block) whose block starts with `$ tollgate simulate`.
fn simulate_blocks() -> Vec<(String, usize, String)> {
    let mut out = Vec::new();
    for path in markdown_files() {
        let text = std::fs::read_to_string(&path).unwrap();
        let mut open: Option<(usize, String)> = None;
        for (event, range) in Parser::new(&text).into_offset_iter() {
            match event {
                Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(info))) if &*info == "text" => {
                    open = Some((super::line_of(&text, range.start), String::new()));
                }
                Event::Text(t) => {
                    if let Some((_, body)) = open.as_mut() {
                        body.push_str(&t);
                    }
                }
                Event::End(TagEnd::CodeBlock) => {
                    if let Some((line, body)) = open.take()
                        && body.starts_with("$ tollgate simulate")
                    {
                        out.push((path.display().to_string(), line, body));
                    }
                }
                _ => {}
            }
        }
    }
    out
}

/// `lines` with the speed column masked: under a header ending in `M decisions/s`, each
/// row's last field becomes `*`.
fn masked(lines: &[&str]) -> Vec<String> {
    let mut speed = false;
    lines
        .iter()
        .map(|l| {
            let l = l.trim_end();
            if l.ends_with("M decisions/s") {
                speed = true;
                return l.to_string();
            }
            match (speed, l.rsplit_once(' ')) {
                (true, Some((rest, last))) if last.parse::<f64>().is_ok() => {
                    format!("{} *", rest.trim_end())
                }
                _ => l.to_string(),
            }
        })
        .collect()
}

#[test]
fn every_simulate_output_shown_is_what_the_binary_prints() {
    let blocks = simulate_blocks();
    assert!(!blocks.is_empty(), "no `$ tollgate simulate` block found");
    for (file, line, block) in blocks {
        let mut lines = block.lines();
        let command = lines.next().unwrap();
        let args: Vec<&str> = command["$ tollgate ".len()..].split_whitespace().collect();
        let out = tollgate().args(&args).output().unwrap();
        assert!(out.status.success(), "{file}:{line}: `{command}` failed");
        let printed = String::from_utf8(out.stdout).unwrap();
        let shown: Vec<&str> = lines.collect();
        let printed: Vec<&str> = printed.lines().collect();
        assert_eq!(
            masked(&shown),
            masked(&printed),
            "{file}:{line}: `{command}` prints otherwise"
        );
    }
}
