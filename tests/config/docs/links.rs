//! Every link and anchor in the book and the top-level documents resolves, and every
//! `--help` link names an existing chapter.

use super::*;

#[test]
fn every_link_and_anchor_resolves() {
    let files = markdown_files();
    let pages: HashMap<PathBuf, Page> = files.iter().map(|f| (f.clone(), read_page(f))).collect();
    let mut broken = Vec::new();
    let mut checked = 0;
    for (file, page) in &pages {
        for (line, dest) in &page.links {
            if is_external(dest) {
                continue;
            }
            checked += 1;
            let (path, anchor) = dest
                .split_once('#')
                .map_or((dest.as_str(), None), |(p, a)| (p, Some(a)));
            let target = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(path)
            };
            let here = format!(
                "{}:{line}: `{dest}`",
                file.strip_prefix(root()).unwrap().display()
            );
            let Ok(target) = target.canonicalize() else {
                broken.push(format!("{here}: no such file"));
                continue;
            };
            let Some(anchor) = anchor else { continue };
            let target_page = pages.get(&target).map(|p| &p.anchors);
            match target_page {
                Some(anchors) if anchors.contains(anchor) => {}
                Some(_) => broken.push(format!("{here}: no heading makes the anchor `#{anchor}`")),
                None => broken.push(format!(
                    "{here}: an anchor into a file that is not Markdown"
                )),
            }
        }
    }
    assert!(
        checked > 0,
        "no relative link was found: is the book where this test looks?"
    );
    assert!(
        broken.is_empty(),
        "{} broken links:\n{}",
        broken.len(),
        broken.join("\n")
    );
}

/// `tollgate --help` and each subcommand's `--help` name the chapter that explains it, and
/// that chapter (and its anchor) exists.
#[test]
fn every_help_links_an_existing_chapter() {
    let help = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "tollgate {args:?} failed");
        String::from_utf8(out.stdout).unwrap()
    };
    let top = help(&["--help"]);
    let commands: Vec<String> = top
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(String::from))
        .filter(|c| c != "help")
        .collect();
    assert!(commands.len() >= 8, "too few subcommands found in:\n{top}");
    let pages: HashMap<PathBuf, Page> = markdown_files()
        .into_iter()
        .map(|f| (f.clone(), read_page(&f)))
        .collect();
    for (name, text) in std::iter::once(("tollgate".to_string(), top.clone()))
        .chain(commands.iter().map(|c| (c.clone(), help(&[c, "--help"]))))
    {
        let link = text
            .lines()
            .find_map(|l| l.strip_prefix("Docs: "))
            .and_then(|l| l.split_whitespace().next())
            .unwrap_or_else(|| {
                panic!("`{name} --help` names no chapter (a `Docs: …` line):\n{text}")
            });
        let (path, anchor) = link
            .split_once('#')
            .map_or((link, None), |(p, a)| (p, Some(a)));
        let file = root().join(path);
        assert!(file.is_file(), "`{name} --help` names {link}: no such file");
        if let Some(anchor) = anchor {
            let anchors = &pages
                .get(&file.canonicalize().unwrap())
                .expect("a Markdown page")
                .anchors;
            assert!(
                anchors.contains(anchor),
                "`{name} --help` names {link}: no such heading"
            );
        }
    }
}
