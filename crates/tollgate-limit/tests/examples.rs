//! The library's examples do what their headers say: `examples/in_code.rs` builds a limiter
//! in code, with no config file, and its decisions are the policy's (3 a minute per
//! client: the fourth request of one client is denied, another client has its own budget).
//! The example is included, not spawned: its `run` writes what `main` prints.

#[path = "../examples/in_code.rs"]
#[allow(dead_code)] // its `main`: the test calls `run`
mod in_code;

#[tokio::test]
async fn in_code_prints_three_admissions_a_denial_and_another_clients_admission() {
    let mut out = Vec::new();
    in_code::run(&mut out).await.unwrap();
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "192.0.2.1: admitted, 2 left\n\
         192.0.2.1: admitted, 1 left\n\
         192.0.2.1: admitted, 0 left\n\
         192.0.2.1: denied by per_ip\n\
         198.51.100.7: admitted, 2 left\n"
    );
}
