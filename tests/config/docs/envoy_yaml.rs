//! The book's Envoy YAML is what Envoy and its control planes accept, and its envoyproxy/ratelimit
//! YAML is what tollgate reads.
//!
//! Every ```yaml block of the book names what it is in its info string, and is checked as that:
//! - `yaml,envoy=KIND`: parsed into Envoy's own messages (`bootstrap`, `http_filter`, `cluster`,
//!   `route_config`, …), an Istio `EnvoyFilter` (`istio`), Envoy Gateway's `EnvoyPatchPolicy`
//!   and startup config (`envoy_gateway`), Contour's resources (`contour`), by
//!   `tests/common/envoy_yaml.py` in the xds-protos Python (`tests/common/xds.rs`). Its
//!   docstring says what is checked for each kind and what is not (protoc-gen-validate rules;
//!   whether a cluster exists; a Kubernetes object's metadata). A misspelled field, a wrong
//!   enum value or a misspelled `@type` fails.
//! - `yaml,ratelimit`: loaded by tollgate's own reader of envoyproxy/ratelimit's YAML
//!   ([`tollgate::rls::RlsConfig`]), every problem reported; with `file=PATH` the block is also
//!   the file at PATH beside its page, byte for byte (the page's TOML names that file).
//! - `yaml,k8s`: a Kubernetes object that is none of the above, loaded as YAML only.
//!
//! An unmarked ```yaml block fails: nothing in the book escapes a check by accident.

use super::*;

use tollgate::rls::RlsConfig;

use crate::common::{repo_path, xds};

struct YamlBlock {
    /// `docs/src/page.md:LINE`.
    at: String,
    page: PathBuf,
    info: String,
    text: String,
}

fn yaml_blocks() -> Vec<YamlBlock> {
    let mut blocks = Vec::new();
    for page in markdown_files() {
        let text = std::fs::read_to_string(&page).unwrap();
        let mut open: Option<(usize, String, String)> = None;
        for (event, range) in Parser::new(&text).into_offset_iter() {
            match event {
                Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(info))) => {
                    open = Some((line_of(&text, range.start), info.to_string(), String::new()));
                }
                Event::Text(t) => {
                    if let Some((_, _, body)) = open.as_mut() {
                        body.push_str(&t);
                    }
                }
                Event::End(TagEnd::CodeBlock) => {
                    if let Some((line, info, body)) = open.take()
                        && info.split([',', ' ']).next() == Some("yaml")
                    {
                        blocks.push(YamlBlock {
                            at: format!("{}:{line}", page.strip_prefix(root()).unwrap().display()),
                            page: page.clone(),
                            info,
                            text: body,
                        });
                    }
                }
                _ => {}
            }
        }
    }
    blocks
}

/// The value of `name=VALUE` in an info string.
fn attribute<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.split([',', ' '])
        .find_map(|w| w.strip_prefix(name)?.strip_prefix('='))
}

#[test]
fn every_envoy_yaml_block_parses_into_envoys_messages() {
    let blocks: Vec<serde_json::Value> = yaml_blocks()
        .iter()
        .filter_map(|b| {
            let kind = attribute(&b.info, "envoy")?;
            Some(serde_json::json!({ "where": b.at, "kind": kind, "text": b.text }))
        })
        .collect();
    // The chapter "tollgate as Envoy's rate limit service" alone has more: this guards the
    // marking, not a count to keep in step.
    assert!(
        blocks.len() >= 10,
        "only {} ```yaml,envoy=… blocks found",
        blocks.len()
    );
    let said = run_checker(&serde_json::to_string(&blocks).unwrap());
    assert!(
        said.status.success(),
        "the book's Envoy YAML is not what Envoy accepts:\n{}{}",
        String::from_utf8_lossy(&said.stdout),
        String::from_utf8_lossy(&said.stderr)
    );
    let out = String::from_utf8_lossy(&said.stdout);
    assert!(
        out.contains(&format!("checked {} blocks", blocks.len())),
        "the checker did not check every block: {out}"
    );
}

fn run_checker(input: &str) -> std::process::Output {
    use std::io::Write;
    let mut child = Command::new(xds::python())
        .arg(repo_path("tests/common/envoy_yaml.py"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the xds-protos Python runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// The checker is not a yes-machine: one misspelled field, in a block taken from the book, in
/// each kind of place it checks (an Envoy message, an `@type`'s message, a CRD) fails it.
#[test]
fn the_envoy_yaml_checker_refuses_a_misspelled_field() {
    let blocks = yaml_blocks();
    let of = |kind: &str| {
        blocks
            .iter()
            .find(|b| attribute(&b.info, "envoy") == Some(kind))
            .unwrap_or_else(|| panic!("no envoy={kind} block"))
            .text
            .clone()
    };
    let cases = [
        (
            "cluster",
            of("cluster").replace("connect_timeout", "connect_timout"),
        ),
        (
            "http_filter",
            of("http_filter").replace("failure_mode_deny", "failure_mode_denied"),
        ),
        (
            "route_config",
            of("route_config").replace("descriptor_key", "descriptor_name"),
        ),
        (
            "istio",
            of("istio").replace("applyTo: CLUSTER", "applyTo: CLUSTERS"),
        ),
        (
            "istio",
            of("istio").replace("transport_api_version", "transport_api"),
        ),
        (
            "contour",
            of("contour").replace("protocol: h2c", "protocl: h2c"),
        ),
        (
            "envoy_gateway",
            of("envoy_gateway").replace("enableEnvoyPatchPolicy", "enablePatchPolicy"),
        ),
    ];
    for (kind, text) in cases {
        let input = serde_json::json!([{ "where": "misspelled", "kind": kind, "text": text }]);
        let said = run_checker(&input.to_string());
        assert!(
            !said.status.success(),
            "a misspelled {kind} block passed:\n{text}"
        );
    }
}

#[test]
fn every_ratelimit_yaml_block_loads_with_tollgates_reader() {
    let blocks = yaml_blocks();
    let mut checked = 0;
    let mut problems = Vec::new();
    for b in &blocks {
        let words: Vec<&str> = b.info.split([',', ' ']).collect();
        if !words.contains(&"ratelimit") {
            assert!(
                attribute(&b.info, "envoy").is_some() || words.contains(&"k8s"),
                "{}: a ```yaml block must say what it is: `yaml,envoy=KIND`, `yaml,ratelimit` or `yaml,k8s`",
                b.at
            );
            continue;
        }
        checked += 1;
        if let Err(e) = RlsConfig::from_texts(&[(PathBuf::from(&b.at), b.text.clone())]) {
            problems.push(format!("{}: tollgate does not load it:\n{e}", b.at));
        }
        if let Some(file) = attribute(&b.info, "file") {
            let path = b.page.parent().unwrap().join(file);
            match std::fs::read_to_string(&path) {
                Ok(on_disk) if on_disk == b.text => {}
                Ok(_) => problems.push(format!(
                    "{}: {} differs from the block",
                    b.at,
                    path.display()
                )),
                Err(e) => problems.push(format!("{}: {}: {e}", b.at, path.display())),
            }
        }
    }
    assert!(checked > 0, "no ```yaml,ratelimit block was found");
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}
