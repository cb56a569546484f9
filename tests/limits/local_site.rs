//! The local decision site under pressure: all-or-nothing with many threads on overlapping
//! keys, the memory bound under a flood of distinct clients, and keys seen once leaving
//! memory as they refill.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::num::{NonZeroU32, NonZeroUsize};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, Method};
use tollgate::config::{AlgorithmName, KeyPart, Policy};
use tollgate::limit::Limiter;
use tollgate::limit::clock::{Clock, ManualClock};
use tollgate::limit::local::{CheckItem, LocalStore};
use tollgate::limit::metrics::PolicyGauges;
use tollgate::limit::policy::PolicyRuntime;

pub(super) fn policy(name: &str, algorithm: AlgorithmName, burst: u32) -> Policy {
    Policy {
        name: name.into(),
        key: vec![KeyPart::Ip],
        algorithm,
        limit: NonZeroU32::new(burst).unwrap(),
        period: Duration::from_secs(60),
        burst: NonZeroU32::new(burst).unwrap(),
        cost: NonZeroU32::MIN,
        max_delay: Duration::ZERO,
        mode: None,
        max_keys: NonZeroUsize::new(1_000_000).unwrap(),
        site: tollgate::config::Site::Local,
        local_first: false,
        lease: Default::default(),
        spend: Default::default(),
        on_missing_key: None,
        show_values: Vec::new(),
    }
}

/// 4 threads, each request spending on one "ip" key (GCRA) and one "account" key (token
/// bucket) drawn from small overlapping sets, time frozen. Per key: admitted ≤ burst, and the
/// key's remaining budget is exactly burst − admitted, so denied requests charged nothing.
#[test]
fn all_or_nothing_holds_under_concurrency() {
    const BURST: u32 = 40;
    let policies: Arc<[PolicyRuntime]> = vec![
        PolicyRuntime::new(0, &policy("ip", AlgorithmName::Gcra, BURST), &[]).unwrap(),
        PolicyRuntime::new(1, &policy("acct", AlgorithmName::TokenBucket, BURST), &[]).unwrap(),
    ]
    .into();
    let clock = ManualClock::new();
    clock.set(1_000_000_000);
    let store = Arc::new(LocalStore::new(
        policies.clone(),
        Arc::new(clock.clone()),
        Arc::new(PolicyGauges::detached(2)),
    ));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                let mut admitted: HashMap<(usize, String), u32> = HashMap::new();
                let mut seed = 0x9E37_79B9_7F4A_7C15u64 ^ (t + 1);
                for _ in 0..3_000 {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    let items = [
                        CheckItem {
                            policy: 0,
                            headroom: NonZeroU32::MIN,
                            key: format!("ip:{}", seed % 7),
                            cost: 1,
                            fallback: false,
                        },
                        CheckItem {
                            policy: 1,
                            headroom: NonZeroU32::MIN,
                            key: format!("acct:{}", (seed >> 8) % 5),
                            cost: 1,
                            fallback: false,
                        },
                    ];
                    let results = store.check(&items, |ds| {
                        let all = ds.iter().all(|v| v.admits());
                        tollgate::limit::local::Spends::from_elem(all, ds.len())
                    });
                    let all_admitted = results.iter().all(|r| r.decision.verdict.admits());
                    assert!(
                        results.iter().all(|r| r.committed == all_admitted),
                        "partial commit"
                    );
                    if all_admitted {
                        for it in &items {
                            *admitted.entry((it.policy, it.key.clone())).or_default() += 1;
                        }
                    }
                }
                admitted
            })
        })
        .collect();
    let mut total: HashMap<(usize, String), u32> = HashMap::new();
    for t in threads {
        for (k, n) in t.join().unwrap() {
            *total.entry(k).or_default() += n;
        }
    }
    assert!(total.values().sum::<u32>() > 0);
    let now = clock.now();
    for ((p, key), n) in &total {
        assert!(*n <= BURST, "{key}: admitted {n} > burst {BURST}");
        let state = store.state(*p, key);
        let remaining = policies[*p]
            .algorithm(NonZeroU32::MIN)
            .peek(state, now)
            .remaining;
        assert_eq!(
            remaining,
            u64::from(BURST - n),
            "{key}: a denied request was charged"
        );
    }
    // Keys that never admitted anything hold no state at all.
    for p in 0..2 {
        assert_eq!(
            store.key_count(p),
            total.keys().filter(|(q, _)| *q == p).count()
        );
    }
}

/// A limiter on `clock` with one route `api` and its policy `per_ip` (gcra, 10 a minute,
/// keyed on `ip`, with `extra` keys), and the registry its metrics are in.
fn per_ip_limiter(
    extra: &str,
    clock: &ManualClock,
) -> (Limiter, prometheus_client::registry::Registry) {
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[upstreams.app]\nurls = [\"http://127.0.0.1:9\"]\n\
         [policies.per_ip]\nkey = [\"ip\"]\nalgorithm = \"gcra\"\nlimit = 10\nperiod = \"1m\"\n{extra}\n\
         [[routes]]\nname = \"api\"\nupstream = \"app\"\npolicies = [\"per_ip\"]\n"
    );
    let origin = Path::new("per_ip.toml");
    let cfg =
        tollgate::config::validate(tollgate::config::parse_str(&text, origin).unwrap(), origin)
            .unwrap();
    let mut registry = prometheus_client::registry::Registry::default();
    let limiter = Limiter::new(&cfg, Arc::new(clock.clone()), &mut registry).unwrap();
    (limiter, registry)
}

/// A million distinct IPv6 /64s against one policy bounded at 100 000 keys.
#[tokio::test(flavor = "current_thread")]
async fn a_flood_of_distinct_clients_stays_within_max_keys() {
    let clock = ManualClock::new();
    let (limiter, registry) = per_ip_limiter("burst = 10\nmax_keys = 100000", &clock);
    let route: Arc<str> = Arc::from("api");
    let (method, headers) = (Method::GET, HeaderMap::new());
    let mut peak = 0;
    for i in 0..1_000_000u64 {
        // A different /64 each time; the low 64 bits vary too but are folded away.
        let ip = Ipv6Addr::new(
            0x2001,
            0xdb8,
            (i >> 16) as u16,
            i as u16,
            1,
            2,
            3,
            (i % 7) as u16,
        );
        let a = limiter
            .check(0, &route, IpAddr::V6(ip), &method, &headers)
            .await;
        assert!(a.admitted(), "every client is new");
        if i % 50_000 == 0 {
            peak = peak.max(limiter.local().key_count(0));
        }
    }
    let keys = limiter.local().key_count(0);
    peak = peak.max(keys);
    assert!(peak <= 100_000, "held {peak} keys, bound is 100000");
    assert!(keys >= 80_000, "the bound is used, not emptied: {keys}");
    let mut exported = String::new();
    prometheus_client::encoding::text::encode(&mut exported, &registry).unwrap();
    assert!(
        exported.contains(&format!(
            "tollgate_limiter_keys{{policy=\"per_ip\"}} {keys}"
        )),
        "{exported}"
    );
    // The counter exists from startup at 0, so its presence proves nothing: a million
    // clients through 100 000 places must have evicted at least 900 000 keys.
    let evictions: u64 = exported
        .lines()
        .find_map(|l| l.strip_prefix("tollgate_limiter_evictions_total{policy=\"per_ip\"} "))
        .unwrap_or_else(|| panic!("no eviction counter: {exported}"))
        .trim()
        .parse()
        .unwrap();
    assert!(
        evictions > 0 && evictions >= 1_000_000 - keys as u64,
        "{evictions} evictions for {keys} keys held out of 1000000 clients"
    );
}

/// Keys seen once leave memory once they are back to full, without `max_keys` pressure and
/// without being written again (the soak of issue 47: a key count that grew with every
/// client ever seen). Rounds of 2 000 new clients, one request each, the clock then moved
/// past the period: the key count follows the clients of the last round or two, not all
/// 60 000, and the gauge follows it.
#[tokio::test(flavor = "current_thread")]
async fn keys_seen_once_leave_memory_as_they_refill() {
    const ROUND: u32 = 2_000;
    let clock = ManualClock::new();
    let (limiter, registry) = per_ip_limiter("", &clock);
    let route: Arc<str> = Arc::from("api");
    let (method, headers) = (Method::GET, HeaderMap::new());
    let mut peak = 0;
    for round in 0..30u32 {
        for i in 0..ROUND {
            let ip = std::net::Ipv4Addr::from(0x0a00_0000 + round * ROUND + i);
            let a = limiter
                .check(0, &route, IpAddr::V4(ip), &method, &headers)
                .await;
            assert!(a.admitted(), "every client is new");
            peak = peak.max(limiter.local().key_count(0));
        }
        clock.advance(Duration::from_secs(61));
    }
    let keys = limiter.local().key_count(0);
    assert!(
        peak <= 3 * ROUND as usize,
        "held {peak} keys while at most {ROUND} were below full"
    );
    let mut exported = String::new();
    prometheus_client::encoding::text::encode(&mut exported, &registry).unwrap();
    assert!(
        exported.contains(&format!(
            "tollgate_limiter_keys{{policy=\"per_ip\"}} {keys}"
        )),
        "{exported}"
    );
    assert!(
        exported.contains("tollgate_limiter_evictions_total{policy=\"per_ip\"} 0"),
        "keys back to full are dropped, not evicted: {exported}"
    );
}

/// Cells spent elsewhere (`debit`, gossip) weigh on the next decision; `refund` (an owner's
/// reservation given back) frees them again.
#[test]
fn debits_deny_and_refunds_free() {
    for algorithm in [
        AlgorithmName::Gcra,
        AlgorithmName::TokenBucket,
        AlgorithmName::SlidingWindow,
    ] {
        let policies: Arc<[PolicyRuntime]> =
            vec![PolicyRuntime::new(0, &policy("p", algorithm, 5), &[]).unwrap()].into();
        let clock = ManualClock::new();
        clock.set(1_000_000_000);
        let store = LocalStore::new(
            policies,
            Arc::new(clock.clone()),
            Arc::new(PolicyGauges::detached(1)),
        );
        let item = |cost| CheckItem {
            policy: 0,
            headroom: NonZeroU32::MIN,
            key: "p:ip:192.0.2.1".into(),
            cost,
            fallback: false,
        };
        let admits = || {
            store.check(&[item(1)], |ds| ds.iter().map(|v| v.admits()).collect())[0]
                .decision
                .verdict
                .admits()
        };
        store.debit(&item(1));
        store.debit(&item(4));
        assert!(!admits(), "{algorithm:?}: 5 spent elsewhere leave nothing");
        store.refund(&item(2));
        assert!(admits() && admits(), "{algorithm:?}: 2 given back");
        assert!(!admits(), "{algorithm:?}");
    }
}

/// N changing under load: a spent `split` key stays spent however often its share is
/// rescaled (2 → 1 → 2 …) while two threads keep asking, time frozen. A request sees the old
/// share with the old state or the new share with the rescaled one, never a mix: the
/// rescale holds every shard's lock, and a check reads its share under its key's lock.
/// (A mix is an over-admission: a sliding window's 50 cells of a 50-share read as 50 of a
/// 100-share admit 50 more.)
#[test]
fn a_spent_split_key_stays_spent_while_n_changes() {
    const LIMIT: u32 = 100;
    let mut p = policy("p", AlgorithmName::SlidingWindow, LIMIT);
    p.site = tollgate::config::Site::Split;
    let policies: Arc<[PolicyRuntime]> = vec![PolicyRuntime::new(0, &p, &[]).unwrap()].into();
    let clock = ManualClock::new();
    clock.set(1_000_000_000);
    let store = Arc::new(LocalStore::new(
        policies.clone(),
        Arc::new(clock.clone()),
        Arc::new(PolicyGauges::detached(1)),
    ));
    let item = CheckItem {
        policy: 0,
        headroom: NonZeroU32::MIN,
        key: "ip:1".into(),
        cost: 1,
        fallback: true,
    };
    let admits = |store: &LocalStore| store.check_single(&item, |v| v.admits()).committed;
    let spent = (0..LIMIT + 10).filter(|_| admits(&store)).count();
    assert_eq!(spent, LIMIT as usize, "the whole share at N = 1");
    let askers: Vec<_> = (0..2)
        .map(|_| {
            let (store, item) = (store.clone(), item.clone());
            std::thread::spawn(move || {
                (0..50_000)
                    .filter(|_| store.check_single(&item, |v| v.admits()).committed)
                    .count()
            })
        })
        .collect();
    for i in 0..4_000u32 {
        let n = NonZeroU32::new(2 - i % 2).unwrap();
        assert!(store.rescale_split(&policies[0], n));
    }
    let more: usize = askers.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(more, 0, "admitted {more} on a spent key while N changed");
}
