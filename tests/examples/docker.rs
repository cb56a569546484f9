//! The `Dockerfile`, checked without a Docker daemon: its config step runs here as written
//! (the same `sed`, the real binary, the token variable) and what it leaves passes
//! `tollgate check` only with the token; the entrypoint writes the development certificate
//! the image does not ship; the dependency layer's stand-in workspace is one cargo
//! accepts; the base images carry exact tags; no private key is copied in; the docs'
//! `docker run` lines pass the token.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

use crate::common::process::tollgate;
use crate::common::repo_path;
use crate::common::temp::TempDir;
use crate::read;

/// The Dockerfile's instructions, as Docker reads them: continuation lines joined, comment
/// lines dropped; `(INSTRUCTION, arguments)`.
fn instructions() -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in read(&repo_path("Dockerfile")).lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with('#') || (current.is_empty() && trimmed.is_empty()) {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(part) => current.push_str(part),
            None => {
                current.push_str(line);
                let (op, args) = current.trim().split_once(char::is_whitespace).unwrap();
                out.push((op.to_uppercase(), args.trim().to_string()));
                current.clear();
            }
        }
    }
    out
}

/// The one `RUN` whose command contains `needle`.
fn run_with(needle: &str) -> String {
    let runs: Vec<String> = instructions()
        .into_iter()
        .filter(|(op, args)| op == "RUN" && args.contains(needle))
        .map(|(_, args)| args)
        .collect();
    assert_eq!(runs.len(), 1, "one RUN with {needle:?}: {runs:?}");
    runs.into_iter().next().unwrap()
}

/// `sh -c script` in `dir` (Docker's shell form runs `/bin/sh -c`).
fn sh(dir: &Path, script: &str, env: &[(&str, &str)]) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn check(config: &Path, env: &[(&str, &str)]) -> Output {
    tollgate()
        .args(["check", "--config"])
        .arg(config)
        .env_remove("TOLLGATE_ADMIN_TOKEN")
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// The image's `/app`, here: the repository's `config.toml`, the real binary, the
/// entrypoint, with every `/app/` of `script` pointed at it.
fn app(tmp: &TempDir, script: &str) -> String {
    std::fs::copy(repo_path("config.toml"), tmp.0.join("config.toml")).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_tollgate"), tmp.0.join("tollgate")).unwrap();
    script.replace("/app/", &format!("{}/", tmp.0.display()))
}

#[test]
fn the_config_step_runs_and_its_config_needs_the_admin_token() {
    let tmp = TempDir::new("docker-config");
    let step = app(&tmp, &run_with("tollgate check"));
    let out = sh(&tmp.0, &step, &[]);
    assert!(
        out.status.success(),
        "the Dockerfile's config step:\n{step}\n{}",
        text(&out)
    );

    let config = tmp.0.join("config.toml");
    let cfg: toml::Table = read(&config).parse().unwrap();
    let server = &cfg["server"];
    assert_eq!(server["listen"].as_str(), Some("0.0.0.0:8080"));
    assert_eq!(server["tls_listen"].as_str(), Some("0.0.0.0:8443"));
    assert_eq!(server["admin_listen"].as_str(), Some("0.0.0.0:9901"));
    assert_eq!(
        server["admin_token_env"].as_str(),
        Some("TOLLGATE_ADMIN_TOKEN")
    );
    // The throwaway certificate the check used is gone: the layer holds no key.
    let left: Vec<_> = std::fs::read_dir(tmp.0.join("certs")).unwrap().collect();
    assert!(left.is_empty(), "the config step left {left:?} in certs/");

    // Run as the image runs it, through the entrypoint: it writes the development
    // certificate (the key private to its user), then the config passes with the token
    // `docker run -e` passes, and without it fails naming the variable.
    let entrypoint = app_entrypoint(&tmp);
    let token = [("TOLLGATE_ADMIN_TOKEN", "a-test-admin-token-0123456789")];
    let run = |env: &[(&str, &str)]| {
        Command::new("sh")
            .arg(&entrypoint)
            .args(["check", "--config"])
            .arg(&config)
            .env_remove("TOLLGATE_ADMIN_TOKEN")
            .envs(env.iter().copied())
            .output()
            .unwrap()
    };
    let out = run(&token);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("wrote a self-signed development certificate"),
        "{}",
        text(&out)
    );
    let key = tmp.0.join("certs/localhost-key.pem");
    let mode = std::fs::metadata(&key).unwrap().permissions().mode();
    assert_eq!(mode & 0o077, 0, "the key is its user's alone: {mode:o}");
    // A second start keeps the certificate it has (a mounted one is never overwritten).
    let cert = read(&tmp.0.join("certs/localhost.pem"));
    let out = run(&token);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(read(&tmp.0.join("certs/localhost.pem")), cert);

    let out = run(&[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains(
            "server.admin_token_env: environment variable `TOLLGATE_ADMIN_TOKEN` is not set"
        ),
        "{}",
        text(&out)
    );
    // Without the line the step adds, `check` refuses the wildcard admin listener.
    let without: String = read(&config)
        .lines()
        .filter(|l| !l.starts_with("admin_token_env"))
        .map(|l| format!("{l}\n"))
        .collect();
    let bare = tmp.file("bare.toml", without.as_bytes());
    std::fs::create_dir_all(tmp.0.join("certs")).unwrap();
    let out = check(&bare, &token);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("server.admin_listen: `0.0.0.0:9901` is not a loopback address"),
        "{}",
        text(&out)
    );
}

/// `scripts/docker-entrypoint.sh` with its `/app` pointed at `tmp`.
fn app_entrypoint(tmp: &TempDir) -> std::path::PathBuf {
    let script = read(&repo_path("scripts/docker-entrypoint.sh"));
    assert!(script.contains("certs=/app/certs"), "{script}");
    let script = script.replace("/app/", &format!("{}/", tmp.0.display()));
    tmp.file("docker-entrypoint.sh", script.as_bytes())
}

#[test]
fn the_image_runs_the_entrypoint_and_copies_no_key() {
    let ins = instructions();
    let copies: Vec<&String> = ins
        .iter()
        .filter(|(op, _)| op == "COPY" || op == "ADD")
        .map(|(_, a)| a)
        .collect();
    for c in &copies {
        assert!(
            !c.contains("key") && !c.contains("certs"),
            "the image copies no certificate or key: COPY {c}"
        );
    }
    // `COPY . .` in the build stage sees the context .dockerignore leaves: no key.
    let ignore = read(&repo_path(".dockerignore"));
    assert!(
        ignore.lines().any(|l| l.trim() == "**/*-key.pem"),
        ".dockerignore keeps every *-key.pem out of the build context"
    );
    let entry = ins.iter().find(|(op, _)| op == "ENTRYPOINT").unwrap();
    assert_eq!(entry.1, r#"["/app/docker-entrypoint.sh"]"#);
    assert!(
        copies
            .iter()
            .any(|c| *c == "scripts/docker-entrypoint.sh /app/docker-entrypoint.sh")
    );
    let mode = std::fs::metadata(repo_path("scripts/docker-entrypoint.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o111, 0o111, "the entrypoint is executable");
    assert!(
        ins.iter()
            .any(|(op, a)| op == "VOLUME" && a.contains("/app/certs")),
        "/app/certs is writable under --read-only"
    );
}

#[test]
fn the_base_images_carry_exact_tags() {
    let manifest: toml::Table = read(&repo_path("Cargo.toml")).parse().unwrap();
    let rust_version = manifest["package"]["rust-version"].as_str().unwrap();
    let froms: Vec<String> = instructions()
        .into_iter()
        .filter(|(op, _)| op == "FROM")
        .map(|(_, a)| a.split_whitespace().next().unwrap().to_string())
        .collect();
    assert_eq!(froms.len(), 2, "{froms:?}");
    for image in &froms {
        let (name, tag) = image
            .split_once(':')
            .unwrap_or_else(|| panic!("{image}: no tag"));
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        let exact = match name {
            // rust:<rust-version>.<patch>-<debian>: the toolchain Cargo.toml names.
            "rust" => tag
                .strip_prefix(&format!("{rust_version}."))
                .and_then(|t| t.split_once('-'))
                .is_some_and(|(patch, _)| digits(patch)),
            // debian:<suite>-<YYYYMMDD>[-slim]: one dated build.
            "debian" => tag
                .split('-')
                .nth(1)
                .is_some_and(|d| d.len() == 8 && digits(d)),
            _ => false,
        };
        assert!(exact, "FROM {image}: not an exact tag");
    }
}

#[test]
fn the_dependency_layer_is_a_workspace_cargo_accepts() {
    // Only what the Dockerfile copies before the stand-in build, then that RUN, with the
    // build itself swapped for one that stops after reading the manifests and Cargo.lock
    // (no bin of that name): a target Cargo.toml names without a stand-in, or a lock file
    // that does not match, fails it before that.
    let tmp = TempDir::new("docker-deps");
    let ins = instructions();
    let stand_in = ins
        .iter()
        .position(|(op, a)| op == "RUN" && a.contains("fn main() {}"))
        .expect("the stand-in RUN");
    for (op, args) in &ins[..stand_in] {
        if op != "COPY" {
            continue;
        }
        let parts: Vec<&str> = args.split_whitespace().collect();
        let (dest, sources) = parts.split_last().unwrap();
        let dest = tmp.0.join(dest.trim_start_matches("./"));
        std::fs::create_dir_all(&dest).unwrap();
        for s in sources {
            let name = Path::new(s).file_name().unwrap();
            std::fs::copy(repo_path(s), dest.join(name)).unwrap();
        }
    }
    let run = &ins[stand_in].1;
    let build = "cargo build --release --locked";
    assert!(run.contains(build), "{run}");
    let script = run.replacen(
        build,
        "cargo build --release --locked --offline --bin no-such-bin-here",
        1,
    );
    let out = sh(
        &tmp.0,
        &script,
        &[(
            "CARGO_TARGET_DIR",
            &tmp.0.join("target").display().to_string(),
        )],
    );
    let said = text(&out);
    assert!(
        said.contains("no bin target named `no-such-bin-here`"),
        "the stand-in workspace:\n{script}\n{said}"
    );
}

#[test]
fn the_docs_docker_run_lines_pass_the_admin_token() {
    for file in ["Dockerfile", "docs/src/operating.md", "README.md"] {
        for line in read(&repo_path(file)).lines() {
            if line.contains("docker run") && line.contains("tollgate") {
                assert!(
                    line.contains("-e TOLLGATE_ADMIN_TOKEN"),
                    "{file}: the image's admin listener needs its token: {line}"
                );
            }
        }
    }
    let operating = read(&repo_path("docs/src/operating.md"));
    assert!(operating.contains("docker run --rm -e TOLLGATE_ADMIN_TOKEN"));
}
