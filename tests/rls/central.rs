//! `site = "central"`: two tollgate rate limit services on one real Redis admit exactly N
//! between them.

use std::sync::Arc;

use tollgate::limit::clock::SystemClock;

use crate::common::redis::RedisServer;
use crate::common::rls::{RlsServed, request};
use crate::{MESSAGING, toml};

#[tokio::test(flavor = "multi_thread")]
async fn two_services_on_one_redis_admit_exactly_n() {
    let redis = RedisServer::start();
    let extra = "site = \"central\"";
    let store = format!(
        "\n[store]\nkind = \"redis\"\nurls = [\"{}\"]\n",
        redis.url()
    );
    let text = format!("{}{store}", toml(extra));
    let clock = || Arc::new(SystemClock::new());
    let a = RlsServed::start(&text, MESSAGING, clock()).await;
    let b = RlsServed::start(&text, MESSAGING, clock()).await;
    let (mut ca, mut cb) = (a.client().await, b.client().await);
    let call = request("messaging", &[&[("to_number", "555")]]);
    let mut ok = 0;
    for _ in 0..60 {
        for c in [&mut ca, &mut cb] {
            let r = c.answer(call.clone()).await;
            ok += usize::from(r["overall_code"] == "OK");
        }
    }
    assert_eq!(ok, 100, "100 a day between the two services");
    assert!(redis.scripts_run() > 0, "decided in Redis");
}
