//! Coalesced central checks (`central/batch.rs`, `check.lua`'s `batch` op), against a real
//! Redis: a batch decides each request exactly as the same checks one call at a time would,
//! each all-or-nothing on its own keys; a gateway whose store is slow sends the checks that
//! queue behind a call in one call, and still admits exactly the limit.

use std::time::Duration;

use crate::common::config::{central_config, policy};
use crate::common::faulty::{Fault, FaultyProxy};
use crate::common::redis::RedisServer;
use crate::common::*;
use ::redis::aio::MultiplexedConnection;
use futures_util::future::join_all;
use tollgate::limit::central::CHECK_LUA;

/// The 8 script values of a GCRA key: `limit` per hour, burst `limit`, cost 1, enforcing.
fn gcra(limit: u32) -> Vec<String> {
    let hour_us = 3_600_000_000u64;
    [
        "1",
        &limit.to_string(),
        &hour_us.to_string(),
        &limit.to_string(),
        "1",
        "0",
        "1",
        "-",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

async fn connect(redis: &RedisServer) -> MultiplexedConnection {
    ::redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Runs `op` with `requests` (each a list of (key, values)); the reply without `now`.
async fn run(
    conn: &mut MultiplexedConnection,
    op: &str,
    requests: &[Vec<(String, Vec<String>)>],
) -> Result<Vec<i64>, ::redis::RedisError> {
    let script = ::redis::Script::new(CHECK_LUA);
    let mut inv = script.prepare_invoke();
    for (key, _) in requests.iter().flatten() {
        inv.key(key);
    }
    inv.arg(op);
    if op == "batch" {
        inv.arg(requests.len());
        for r in requests {
            inv.arg(r.len());
        }
    }
    for (_, values) in requests.iter().flatten() {
        inv.arg(values);
    }
    let crate::common::words::Words(mut reply) = inv.invoke_async(conn).await?;
    reply.pop();
    Ok(reply)
}

#[tokio::test]
async fn a_batch_answers_as_the_same_checks_in_a_row() {
    let redis = RedisServer::start();
    let mut conn = connect(&redis).await;
    // Request 2 is denied by its second key: it spends neither, and request 3 still
    // finds the one cell request 1 left on `a`.
    let requests = |p: &'static str| -> Vec<Vec<(String, Vec<String>)>> {
        vec![
            vec![(format!("{p}a"), gcra(2))],
            vec![(format!("{p}a"), gcra(2)), (format!("{p}b"), gcra(1))],
            vec![(format!("{p}a"), gcra(2))],
        ]
    };
    // `b` is empty before anything runs, in both worlds.
    for p in ["batch:", "seq:"] {
        run(&mut conn, "check", &[vec![(format!("{p}b"), gcra(1))]])
            .await
            .unwrap();
    }
    let together = run(&mut conn, "batch", &requests("batch:")).await.unwrap();
    let mut in_a_row = Vec::new();
    for r in requests("seq:") {
        in_a_row.extend(run(&mut conn, "check", &[r]).await.unwrap());
    }
    // Per key: admitted, committed, remaining (reset and wait are times: compared apart).
    let decisions = |r: &[i64]| -> Vec<(i64, i64, i64)> {
        r.chunks_exact(6).map(|c| (c[0], c[1], c[2])).collect()
    };
    assert_eq!(decisions(&together), decisions(&in_a_row));
    assert_eq!(
        decisions(&together),
        [(1, 1, 1), (1, 0, 0), (0, 0, 0), (1, 1, 0)],
        "request 2 spent nothing (its `a` would have been admitted); request 3 took the last cell"
    );
    // Sizes that do not add up to the keys are refused, not guessed at.
    let script = ::redis::Script::new(CHECK_LUA);
    let mut inv = script.prepare_invoke();
    inv.key("x").arg("batch").arg(1).arg(2).arg(gcra(1));
    let err = inv
        .invoke_async::<::redis::Value>(&mut conn)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("do not add up"), "{err}");
}

/// The 8 script values of one-key requests of algorithm `alg` (1 gcra, 2 token bucket,
/// 3 sliding window, 4 leaky bucket): 2 an hour, burst 2, cost 1, no delay, enforcing.
fn of_algorithm(alg: u32) -> Vec<String> {
    [
        alg.to_string().as_str(),
        "2",
        "3600000000",
        "2",
        "1",
        "0",
        "1",
        "-",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

#[tokio::test]
async fn a_batch_of_one_key_requests_answers_as_checks_in_a_row_for_every_algorithm() {
    // check.lua decides a batch of one-key GCRA requests before it defines its general
    // path: a batch of another algorithm's requests, or a single check of one, must not
    // take that path. Three requests on one key: admitted, admitted, denied, with each
    // algorithm's own reset (a GCRA answers 30 minutes after one request where a sliding
    // window answers two hours) and its own state format.
    let redis = RedisServer::start();
    let mut conn = connect(&redis).await;
    for alg in 1..=4 {
        let requests = |p: &str| -> Vec<Vec<(String, Vec<String>)>> {
            (0..3)
                .map(|_| vec![(format!("{p}{alg}"), of_algorithm(alg))])
                .collect()
        };
        let together = run(&mut conn, "batch", &requests("batch:")).await.unwrap();
        let mut in_a_row = Vec::new();
        for r in requests("seq:") {
            in_a_row.extend(run(&mut conn, "check", &[r]).await.unwrap());
        }
        // admitted, committed, remaining, and the reset in whole minutes (the two runs'
        // clocks differ by microseconds).
        let decisions = |r: &[i64]| -> Vec<(i64, i64, i64, i64)> {
            r.chunks_exact(6)
                .map(|c| (c[0], c[1], c[2], (c[3] + 30_000_000) / 60_000_000))
                .collect()
        };
        assert_eq!(
            decisions(&together),
            decisions(&in_a_row),
            "algorithm {alg}"
        );
        let admitted: Vec<i64> = together.chunks_exact(6).map(|c| c[0]).collect();
        let want = if alg == 4 { [1, 0, 0] } else { [1, 1, 0] };
        assert_eq!(admitted, want, "algorithm {alg}");
        let (batched, sequential) = (
            redis.cli(&["GET", &format!("batch:{alg}")]),
            redis.cli(&["GET", &format!("seq:{alg}")]),
        );
        assert_eq!(
            batched.matches(':').count(),
            sequential.matches(':').count(),
            "algorithm {alg}: {batched} against {sequential}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_store_gets_one_call_for_the_checks_queued_behind_another() {
    let redis = RedisServer::start();
    let proxy = FaultyProxy::start(redis.addr()).await;
    let up = echo_upstream().await;
    let limit = 20;
    let policies = policy(
        "per_route",
        &["route"],
        "gcra",
        limit,
        "1h",
        "site = \"central\"",
    );
    let gw = Gateway::start(&central_config(
        up,
        &proxy.url(),
        &policies,
        "policies = [\"per_route\"]",
    ))
    .await;
    let admin = gw.addrs.admin_listen.unwrap();
    // Connected and warm: the script is loaded and the first call has gone.
    assert_eq!(
        get_as(gw.addrs.listen, "/x", "192.0.2.1", None)
            .await
            .status(),
        200
    );
    // Each round trip now takes at least 40 ms: requests sent together queue behind it.
    proxy.set(Fault::Delay(Duration::from_millis(20)));
    let sent = 60;
    let statuses = join_all((0..sent).map(|i| {
        let addr = gw.addrs.listen;
        async move {
            get_as(addr, "/x", &format!("192.0.2.{}", i % 200 + 2), None)
                .await
                .status()
                .as_u16()
        }
    }))
    .await;
    let ok = statuses.iter().filter(|&&s| s == 200).count();
    let denied = statuses.iter().filter(|&&s| s == 429).count();
    assert_eq!(
        (ok, denied),
        (limit as usize - 1, sent - (limit as usize - 1)),
        "{statuses:?}"
    );
    let m = metrics_text(admin).await;
    let calls = |op: &str| metric_sum(&m, &format!("tollgate_store_calls_total{{op=\"{op}\"}}"));
    let (checks, batches) = (calls("check"), calls("batch"));
    assert!(batches >= 1.0, "no batch call: {m}");
    assert!(
        checks + batches < sent as f64 / 2.0,
        "{checks} check and {batches} batch calls for {sent} requests"
    );
}
