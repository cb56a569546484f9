//! Every answer the docs show with a problem body (a ```text block with an `HTTP/` status
//! line and `content-type: application/problem+json`, or a ```json problem body) is shaped as the
//! gateway sends one (issue 52: bodies shown without `request_id` and with a
//! `content-length` 52 bytes short): the body is one JSON object whose `status` is the
//! status line's, it carries `request_id` (and the `x-request-id` header, when shown, holds
//! the same id), and a shown `content-length` is the body's own length. The values a run
//! varies (the id, the date) are the reader's to expect; the shape is the binary's, which
//! `problem_bodies_have_the_shape_the_binary_sends` also holds to a real 429.

use pulldown_cmark::{CodeBlockKind, Event, Parser, Tag, TagEnd};

use super::markdown_files;

/// (file, line, block text) of every fenced `text` block of a page.
fn text_blocks() -> Vec<(String, usize, String)> {
    let mut out = Vec::new();
    for path in markdown_files() {
        let text = std::fs::read_to_string(&path).unwrap();
        let mut open: Option<(usize, String)> = None;
        for (event, range) in Parser::new(&text).into_offset_iter() {
            match event {
                Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(info)))
                    if matches!(info.split(',').next(), Some("text" | "json")) =>
                {
                    open = Some((super::line_of(&text, range.start), String::new()));
                }
                Event::Text(t) => {
                    if let Some((_, body)) = open.as_mut() {
                        body.push_str(&t);
                    }
                }
                Event::End(TagEnd::CodeBlock) => {
                    if let Some((line, body)) = open.take() {
                        out.push((path.display().to_string(), line, body));
                    }
                }
                _ => {}
            }
        }
    }
    out
}

/// What is wrong with one shown answer, if it is a problem answer: from its `HTTP/` status
/// line on (a block may show a script's output before it), or a bare problem body (a JSON
/// object with a problem `type` URL and a `status`).
pub(super) fn problem_shape(block: &str) -> Option<Result<(), String>> {
    if block.trim_start().starts_with('{') {
        let v: serde_json::Value = serde_json::from_str(block.trim()).ok()?;
        let problem = v["type"]
            .as_str()
            .is_some_and(|t| t.starts_with("https://"))
            && v["status"].is_u64();
        return problem.then(|| match v["request_id"].as_str() {
            Some(_) => Ok(()),
            None => Err("the body has no request_id, which every problem body carries".into()),
        });
    }
    let block = &block[block.find("HTTP/")?..];
    if !block.starts_with("HTTP/") {
        return None;
    }
    let first = block.lines().next()?;
    let status: u16 = first
        .strip_prefix("HTTP/")?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    let (head, body) = block.split_once("\n\n")?;
    let header = |name: &str| {
        head.lines().skip(1).find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    };
    if header("content-type").as_deref() != Some("application/problem+json") {
        return None;
    }
    let body = body.trim_end_matches('\n');
    Some((|| {
        let v: serde_json::Value =
            serde_json::from_str(body).map_err(|e| format!("the body is not JSON: {e}"))?;
        if v["status"] != status {
            return Err(format!(
                "status {} in the body, {status} in the head",
                v["status"]
            ));
        }
        let id = v["request_id"]
            .as_str()
            .ok_or("the body has no request_id, which every problem body carries")?;
        if let Some(shown) = header("x-request-id")
            && shown != id
        {
            return Err(format!("x-request-id {shown} but request_id {id}"));
        }
        if let Some(length) = header("content-length") {
            let length: usize = length
                .parse()
                .map_err(|_| "a content-length not a number")?;
            if length != body.len() {
                return Err(format!(
                    "content-length {length}, but the body shown is {} bytes",
                    body.len()
                ));
            }
        }
        Ok(())
    })())
}

#[test]
fn every_problem_answer_shown_is_shaped_as_the_gateway_sends_it() {
    let mut seen = 0;
    let mut wrong = Vec::new();
    for (file, line, block) in text_blocks() {
        match problem_shape(&block) {
            None => {}
            Some(Ok(())) => seen += 1,
            Some(Err(why)) => wrong.push(format!("{file}:{line}: {why}")),
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(
        seen >= 5,
        "only {seen} problem answers found: is the parser reading the blocks?"
    );
}

/// The rule above is the binary's: a real 429 from a real gateway passes it, byte for byte
/// as curl -i would show its head and body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn problem_bodies_have_the_shape_the_binary_sends() {
    use crate::common::*;
    let up = echo_upstream().await;
    let toml = config::ConfigBuilder::new("")
        .upstream(up)
        .text(
            "[policies.per_ip]\nkey = [\"ip\"]\nalgorithm = \"gcra\"\nlimit = 1\nperiod = \"1m\"\n\
             [[routes]]\nname = \"api\"\nmatch = { path_prefix = \"/\" }\nupstream = \"app\"\n\
             mode = \"enforce\"\npolicies = [\"per_ip\"]\n",
        )
        .build();
    let gw = Gateway::start(&toml).await;
    let addr = gw.addrs.listen;
    let get = "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    assert!(raw(addr, get).await.starts_with("HTTP/1.1 200"));
    let answer = raw(addr, get).await;
    let shown = answer.replace("\r\n", "\n");
    assert_eq!(problem_shape(&shown), Some(Ok(())), "{shown}");
}
