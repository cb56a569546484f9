use super::*;

fn counts(p: &Picker, n: usize, draws: usize, ok: impl Fn(usize) -> bool) -> Vec<usize> {
    let mut c = vec![0; n];
    for _ in 0..draws {
        c[p.pick(&ok, |_| 0).expect("a URL")] += 1;
    }
    c
}

#[test]
fn smooth_schedule_spreads_by_weight() {
    assert_eq!(&*smooth_schedule(&[3, 1]), &[0, 0, 1, 0]);
    assert_eq!(&*smooth_schedule(&[1, 1, 1]), &[0, 1, 2]);
    // Reduced by the common divisor: 6:2 is 3:1.
    assert_eq!(&*smooth_schedule(&[6, 2]), &[0, 0, 1, 0]);
    // nginx's own example: 5, 1, 1 gives a a b a c a a.
    assert_eq!(&*smooth_schedule(&[5, 1, 1]), &[0, 0, 1, 0, 2, 0, 0]);
}

#[test]
fn round_robin_weights_are_exact() {
    let p = Picker::new(Balance::RoundRobin, &[3, 1]);
    assert_eq!(counts(&p, 2, 400, |_| true), vec![300, 100]);
}

#[test]
fn round_robin_skips_what_is_not_allowed() {
    let p = Picker::new(Balance::RoundRobin, &[1, 1, 1]);
    assert_eq!(counts(&p, 3, 300, |i| i != 1), vec![150, 0, 150]);
    assert_eq!(p.pick(|_| false, |_| 0), None);
}

#[test]
fn random_follows_weights() {
    let p = Picker::new(Balance::Random, &[3, 1]);
    let c = counts(&p, 2, 20_000, |_| true);
    // 15 000 expected; the binomial's standard deviation is ~61: ±400 is > 6 of them.
    assert!((14_600..=15_400).contains(&c[0]), "{c:?}");
    // A URL not allowed is never drawn, even when it weighs the most.
    let c = counts(&p, 2, 1000, |i| i == 1);
    assert_eq!(c, vec![0, 1000]);
}

#[test]
fn least_request_prefers_the_less_loaded() {
    let p = Picker::new(Balance::LeastRequest, &[1, 1]);
    // URL 0 has 10 in flight, URL 1 none: every draw of two picks 1.
    let picks: Vec<_> = (0..100)
        .map(|_| p.pick(|_| true, |i| if i == 0 { 10 } else { 0 }).unwrap())
        .collect();
    assert!(picks.iter().all(|&i| i == 1), "{picks:?}");
    // Weighted: 4 in flight on a weight-4 URL is as loaded as 1 on a weight-1 URL; with
    // 3 on the heavy one it is the lighter load.
    let p = Picker::new(Balance::LeastRequest, &[4, 1]);
    let pick = p.pick(|_| true, |i| if i == 0 { 3 } else { 1 }).unwrap();
    assert_eq!(pick, 0);
    // Only one URL allowed: it is taken.
    assert_eq!(p.pick(|i| i == 1, |_| 0), Some(1));
}

#[test]
fn a_retry_does_not_take_a_round_robin_turn() {
    let p = Picker::new(Balance::RoundRobin, &[1, 1]);
    // Request 1 takes URL 0's turn; its retry (URL 0 excluded) goes to URL 1 without moving
    // the cursor; request 2 then gets URL 1's own turn, request 3 URL 0's.
    assert_eq!(p.pick(|_| true, |_| 0), Some(0));
    assert_eq!(p.pick_again(|i| i != 0, |_| 0), Some(1));
    assert_eq!(p.pick(|_| true, |_| 0), Some(1));
    assert_eq!(p.pick(|_| true, |_| 0), Some(0));
}
