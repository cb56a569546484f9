//! The examples under `examples/` are what a newcomer copies first, so each one is held to
//! what its README says:
//! - every `examples/**/*.toml`, the config inside the Kubernetes ConfigMap and the config
//!   `compose.yaml` mounts pass `tollgate check` (with the secrets the examples name set);
//! - the `Dockerfile`'s config step runs here as written and leaves a config that passes
//!   `check` only with the admin token; its entrypoint writes the development certificate
//!   the image does not ship; its base images carry exact tags (no Docker daemon needed);
//! - the Kubernetes manifests pass `kubernetes-validate --strict` and say what the README
//!   promises (non-root, read-only root, probes on the admin port, the token from a
//!   Secret, the proxy port alone in the Service); `compose.yaml` parses with its services;
//! - the promises that can run here run over real sockets: the login example locks an
//!   account after five failures with a 429 and `Retry-After`, and fails closed when
//!   Redis is gone; the JWT example's tiers, 401s and response costs; the three gateways
//!   on one real `redis-server` admit at most `burst + elapsed × rate` for both the central
//!   and the lease policy; `run.sh` starts and stops its processes; the owner fleet shares
//!   one exact limit; the compose config, on a real Redis and an echoing backend, echoes
//!   the forwarding headers and answers 40 requests at once with its burst and 429s; the
//!   Kubernetes ConfigMap's config, served alone, shows a pod's share and two nodes.
//!
//! Each running test starts from the example's own file and changes only addresses (free
//! ports, the test's upstream and Redis) and, where the bound is about a store or owner that
//! answers, the store timeout: [`rewrite`] fails if the text it replaces is gone, so an edited
//! example cannot silently stop being the thing tested.
//!
//! The modules, by area: `static_files` (the configs pass `check`, the ConfigMap's and the
//! compose mount's too; `compose.yaml`'s services), `docker` (the `Dockerfile`),
//! `kubernetes` (the manifests), `running` (what the running tests share), then one module
//! per running example: `login`, `jwt`, `three_gateways` (with `run.sh`), `owner_fleet`,
//! `compose` (its config without Docker) and `kubernetes_run` (the ConfigMap's config without a
//! cluster).

#[path = "../common/mod.rs"]
mod common;
mod compose;
mod docker;
mod jwt;
mod kubernetes;
mod kubernetes_run;
mod login;
mod owner_fleet;
mod running;
mod static_files;
mod three_gateways;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::repo_path;

/// The secrets the examples name with `*_env` keys, and test values of the lengths they need.
const SECRETS: &[(&str, &str)] = &[
    (
        "TOLLGATE_ACCOUNT_HASH_KEY",
        "the examples' test account hash key",
    ),
    (
        "TOLLGATE_JWT_SECRET",
        "the examples' test HS256 secret, 32+ bytes",
    ),
    (
        "TOLLGATE_PEER_SECRET",
        "the examples' test peer secret, 32+ bytes long",
    ),
    ("TOLLGATE_ADMIN_TOKEN", "the-examples-test-admin-token"),
];

fn secret(name: &str) -> &'static str {
    SECRETS.iter().find(|(n, _)| *n == name).unwrap().1
}

fn examples() -> PathBuf {
    repo_path("examples")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `text` with each `from` replaced by its `to`; every `from` must be there.
fn rewrite(text: &str, pairs: &[(&str, &str)]) -> String {
    let mut out = text.to_string();
    for (from, to) in pairs {
        assert!(
            out.contains(from),
            "the example no longer contains {from:?}"
        );
        out = out.replace(from, to);
    }
    out
}

/// Every file under `dir` whose name ends with `ext`, sorted.
fn files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files(&path, ext));
        } else if path.to_string_lossy().ends_with(ext) {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// Every YAML document of `path`, as JSON, read by PyYAML (which `kubernetes-validate`
/// installs): the repository has no YAML parser of its own.
fn yaml_docs(path: &Path) -> Vec<serde_json::Value> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import json, sys, yaml\n\
             json.dump(list(yaml.safe_load_all(open(sys.argv[1]))), sys.stdout)",
        ])
        .arg(path)
        .output()
        .expect("python3 runs (scripts/test.sh installs it)");
    assert!(
        out.status.success(),
        "{} does not parse as YAML (or PyYAML is missing: pip install kubernetes-validate \
         brings it):\n{}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn yaml_doc(path: &Path) -> serde_json::Value {
    let mut docs = yaml_docs(path);
    assert_eq!(docs.len(), 1, "{}: one document", path.display());
    docs.remove(0)
}
