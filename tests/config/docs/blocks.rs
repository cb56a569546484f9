//! Every ```toml block in the book passes `tollgate check`, or fails as the page shows.

use super::*;

#[test]
fn every_toml_block_passes_check_or_fails_as_shown() {
    let mut problems = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        for (i, block) in read_page(&file).toml.iter().enumerate() {
            checked += 1;
            let here = format!(
                "{}:{}",
                file.strip_prefix(root()).unwrap().display(),
                block.line
            );
            if let Err(p) = check_block(&file, i, block) {
                problems.push(format!("{here}: {p}"));
            }
        }
    }
    assert!(checked > 0, "no ```toml block was found");
    assert!(
        problems.is_empty(),
        "{} blocks:\n{}",
        problems.len(),
        problems.join("\n\n")
    );
}

/// Removes the block's file whatever happens to the check.
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn check_block(markdown: &Path, index: usize, block: &TomlBlock) -> Result<(), String> {
    let has_server = block.text.lines().any(|l| l.trim() == "[server]");
    let text = if has_server {
        block.text.clone()
    } else {
        format!("[server]\nlisten = \"127.0.0.1:8080\"\n\n{}", block.text)
    };
    let stem = markdown.file_stem().unwrap().to_string_lossy();
    let file = TempFile(markdown.with_file_name(format!(
        ".docs-block-{stem}-{index}-{}.toml",
        std::process::id()
    )));
    let mut names = Vec::new();
    // A block meant to fail is checked as written, without them: it may be showing the
    // message for an unset variable.
    if let (None, Ok(table)) = (&block.expect_failure, toml::from_str::<toml::Table>(&text)) {
        env_names(&toml::Value::Table(table), &mut names);
    }
    std::fs::write(&file.0, text).map_err(|e| e.to_string())?;
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["check", "-c"])
        .arg(&file.0)
        .envs(names.iter().map(|n| (n.as_str(), ENV_VALUE)))
        .output()
        .map_err(|e| e.to_string())?;
    // The message names the file: a reader's copy is `config.toml`, and so is the block's.
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
    .replace(&*file.0.to_string_lossy(), "config.toml");
    if block.rls_pending {
        return match out.status.success() {
            true => {
                Err("`[rls]` is known now: drop `rls-pending` from this block's info string".into())
            }
            false if said.contains("unknown field `rls`") => Ok(()),
            false => Err(format!(
                "marked rls-pending, but check failed otherwise:\n{said}"
            )),
        };
    }
    match (&block.expect_failure, out.status.success()) {
        (None, true) => Ok(()),
        (None, false) => Err(format!("check failed:\n{said}")),
        (Some(_), true) => Err("marked check-fails, but check passed".into()),
        (Some(lines), false) => match lines.iter().find(|l| !said.contains(l.as_str())) {
            None => Ok(()),
            Some(l) => Err(format!("check's output lacks `{l}`; it said:\n{said}")),
        },
    }
}
