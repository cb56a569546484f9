//! Each access-log line names its request's id, the same one the client got back in
//! `x-request-id` (text and JSON formats), so a client's complaint finds its line; so does
//! the WARN line of a request the upstream failed.

use super::access_duration::{field, logged, served};
use crate::common::dead_port;

async fn ids_agree(format: &str, name: &str) {
    let (lines, ids) = served(format, 5).await;
    for (line, id) in lines.iter().zip(&ids) {
        let logged = field(line, name).trim_matches('"');
        assert_eq!(logged, id, "{line}");
    }
    let mut distinct = ids.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        ids.len(),
        "every request its own id: {ids:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_lines_carry_the_returned_request_id() {
    ids_agree("json", "\"request_id\":").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_lines_carry_the_returned_request_id() {
    ids_agree("text", "request_id=").await;
}

/// A 502's `request failed` line names the id its client got back, as its access line does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_requests_warn_line_carries_its_request_id() {
    let (lines, ids) = logged(dead_port().await, "json", 2, 502).await;
    for id in &ids {
        let warned = lines
            .iter()
            .filter(|l| l.contains("request failed"))
            .any(|l| l.contains(&format!("\"request_id\":\"{id}\"")));
        assert!(warned, "no `request failed` line with {id} in {lines:#?}");
    }
}
