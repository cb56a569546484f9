//! Each algorithm's `check.lua` path against its Rust implementation on the same steps.

use super::*;

#[tokio::test]
async fn gcra_matches_rust() {
    let p = Params {
        alg: GCRA,
        limit: 10,
        period_us: 1_000_000,
        burst: 4,
        max_delay_us: 0,
    };
    let alg = Gcra::new(nz(10), Duration::from_secs(1), nz(4)).unwrap();
    for path in [Path::Alone, Path::Beside] {
        let n = compare_on(path, alg, p, STEPS).await;
        assert!(
            (4..STEPS.len()).contains(&n),
            "{path:?}: some admitted, some denied: {n}"
        );
    }
}

#[tokio::test]
async fn token_bucket_matches_rust() {
    let p = Params {
        alg: TOKEN_BUCKET,
        limit: 10,
        period_us: 1_000_000,
        burst: 4,
        max_delay_us: 0,
    };
    let alg = TokenBucket::new(nz(10), Duration::from_secs(1), nz(4)).unwrap();
    let n = compare(alg, p, STEPS).await;
    assert!(
        (4..STEPS.len()).contains(&n),
        "some admitted, some denied: {n}"
    );
}

#[tokio::test]
async fn sliding_window_matches_rust() {
    let p = Params {
        alg: SLIDING_WINDOW,
        limit: 5,
        period_us: 500_000,
        burst: 1,
        max_delay_us: 0,
    };
    let alg = SlidingWindow::new(nz(5), Duration::from_millis(500)).unwrap();
    let n = compare(alg, p, STEPS).await;
    assert!(
        (5..STEPS.len()).contains(&n),
        "some admitted, some denied: {n}"
    );
}

#[tokio::test]
async fn leaky_bucket_matches_rust() {
    let p = Params {
        alg: LEAKY_BUCKET,
        limit: 10,
        period_us: 1_000_000,
        burst: 1,
        max_delay_us: 300_000,
    };
    let alg = LeakyBucket::new(nz(10), Duration::from_secs(1), Duration::from_millis(300)).unwrap();
    let n = compare(alg, p, STEPS).await;
    assert!(
        (4..STEPS.len()).contains(&n),
        "some admitted, some denied: {n}"
    );
}

/// Concurrency: acquisitions and releases (by slot id) in an interleaved order.
#[tokio::test]
async fn concurrency_matches_rust() {
    let redis = RedisServer::start();
    let mut conn = redis.connect().await;
    let p = Params {
        alg: CONCURRENCY,
        limit: 3,
        period_us: 0,
        burst: 1,
        max_delay_us: 0,
    };
    let alg = Concurrency::new(nz(3));
    let mut state = None;
    let mut held: Vec<(String, u32)> = Vec::new();
    // (acquire cost, or 0 = release the oldest held slot)
    let steps = [1, 1, 2, 1, 0, 2, 1, 0, 0, 3, 1, 0, 3];
    for (i, &cost) in steps.iter().enumerate() {
        if cost == 0 {
            let (slot, c) = held.remove(0);
            release(&mut conn, "c", p, c, &slot).await;
            state = state.map(|s| alg.release(s, c));
            continue;
        }
        let slot = format!("slot{i}");
        let lua = check(&mut conn, "c", p, cost, &slot).await;
        let d = alg.decide(state, cost, lua.now_us * 1_000);
        let at = format!("step {i} (cost {cost}): lua {lua:?}, rust {d:?}");
        assert_eq!(lua.admitted, d.verdict.admits(), "{at}");
        assert_eq!(lua.remaining, d.remaining, "{at}");
        if d.verdict.admits() {
            state = Some(d.state);
            held.push((slot, cost));
        }
    }
}
