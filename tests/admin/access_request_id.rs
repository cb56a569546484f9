//! Each access-log line names its request's id, the same one the client got back in
//! `x-request-id` (text and JSON formats), so a client's complaint finds its line.

use super::access_duration::{field, served};

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
