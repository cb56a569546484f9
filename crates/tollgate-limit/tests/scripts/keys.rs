//! Every Lua script touches only the keys passed in `KEYS` (Redis Cluster, Dragonfly and
//! Redis proxies require it): each op of each script runs as a Redis ACL user allowed
//! exactly the keys of that call, so any undeclared key fails the call (`NOPERM`).

use crate::common::redis::RedisServer;
use redis::aio::MultiplexedConnection;
use tollgate_limit::central::CHECK_LUA;
use tollgate_limit::lease::LEASE_LUA;
use tollgate_limit::membership::MEMBERSHIP_LUA;

/// A connection as a user that may touch `keys` and nothing else.
async fn confined(redis: &RedisServer, user: &str, keys: &[&str]) -> MultiplexedConnection {
    let mut acl = vec!["ACL", "SETUSER", user, "reset", "on", ">secret", "+@all"];
    let patterns: Vec<String> = keys.iter().map(|k| format!("~{k}")).collect();
    acl.extend(patterns.iter().map(String::as_str));
    assert_eq!(redis.cli(&acl), "OK");
    let url = format!("redis://{user}:secret@127.0.0.1:{}", redis.port);
    redis::Client::open(url)
        .expect("a redis URL")
        .get_multiplexed_async_connection()
        .await
        .expect("connecting as the confined user")
}

/// Runs `script` with `keys` and `args` as a user allowed only `keys`.
async fn run(redis: &RedisServer, user: &str, script: &str, keys: &[&str], args: &[String]) {
    let mut conn = confined(redis, user, keys).await;
    let script = redis::Script::new(script);
    let mut call = script.prepare_invoke();
    for k in keys {
        call.key(*k);
    }
    for a in args {
        call.arg(a.as_str());
    }
    let reply: redis::RedisResult<redis::Value> = call.invoke_async(&mut conn).await;
    if let Err(e) = reply {
        panic!("{user}: {e} (keys {keys:?}, args {args:?})");
    }
}

/// check.lua's 8 arguments per key: algorithm, limit, period_us, burst, cost, max_delay_us,
/// mode, slot id.
fn check_args(op: &str, algorithms: &[u32]) -> Vec<String> {
    let mut args = vec![op.to_string()];
    for (i, alg) in algorithms.iter().enumerate() {
        let period = if *alg == 5 { "0" } else { "60000000" };
        args.extend(
            ["{alg}", "10", period, "10", "2", "0", "1", "s{i}"]
                .iter()
                .map(|a| {
                    a.replace("{alg}", &alg.to_string())
                        .replace("{i}", &i.to_string())
                }),
        );
    }
    args
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_script_touches_only_its_declared_keys() {
    let redis = RedisServer::start();
    let keys = ["tg:a", "tg:b", "tg:c", "tg:d", "tg:e:slots"];
    let all = [1, 2, 3, 4, 5];
    for op in ["check", "release", "debit", "reset"] {
        run(&redis, op, CHECK_LUA, &keys, &check_args(op, &all)).await;
    }
    // A refund names its marker last, and the marker's life (ms) goes before the values. The
    // keys hold the check's spends again, so the refund gives them back and sets the marker.
    let spend = check_args("check", &all);
    run(&redis, "spend", CHECK_LUA, &keys, &spend).await;
    let marker = "tg:~refund:{1}2f.3";
    let refund_keys = [&keys[..], &[marker]].concat();
    let mut refund = check_args("refund", &all);
    refund.insert(1, "16000".to_string());
    run(&redis, "refund", CHECK_LUA, &refund_keys, &refund).await;
    assert_eq!(redis.cli(&["EXISTS", marker]), "1", "the marker is set");
    // A batch of two requests (2 keys, then 3): the sizes go before the keys' values.
    let mut batch = check_args("batch", &all);
    batch.splice(1..1, ["2", "2", "3"].map(String::from));
    run(&redis, "batch", CHECK_LUA, &keys, &batch).await;
    // Cluster reservations: the last key is the receipt.
    let reserve_keys = ["tg:a", "tg:e:slots", "tg:receipt:{1}x"];
    for op in ["reserve", "refund_if"] {
        run(
            &redis,
            op,
            CHECK_LUA,
            &reserve_keys,
            &check_args(op, &[1, 5]),
        )
        .await;
    }
    // As the gateway calls it: the key's state, its grant rate, its long cells' holds and
    // its returnable run, then the rate's span, a long ask (the key is new, so busy:
    // ordinary cells; the holds key is read) and a cell given back (the run key is read).
    let lease: Vec<String> = [
        "lease", "1000", "10000", "50000", "20", "2000000", "3", "150000", "1", "800", "6",
        "100000", "950", "1", "1",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    let keys = ["tg:l", "tg:~busy:l", "tg:~hold:l", "tg:~ret:l"];
    run(&redis, "lease", LEASE_LUA, &keys, &lease).await;
    for op in ["join", "leave"] {
        let args: Vec<String> = ["membership", op, "gw#1", "3000"]
            .iter()
            .map(|a| a.to_string())
            .collect();
        run(&redis, op, MEMBERSHIP_LUA, &["tg:members"], &args).await;
    }
}

/// The confinement is real: a call that names one key and touches another is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undeclared_key_is_refused() {
    let redis = RedisServer::start();
    let mut conn = confined(&redis, "probe", &["tg:a"]).await;
    let reply: redis::RedisResult<i64> = redis::Script::new("return redis.call('EXISTS', 'tg:b')")
        .key("tg:a")
        .invoke_async(&mut conn)
        .await;
    let err = reply.expect_err("tg:b is not the user's");
    let text = err.to_string();
    assert!(
        text.contains("NOPERM") || text.contains("can't access"),
        "{text}"
    );
}
