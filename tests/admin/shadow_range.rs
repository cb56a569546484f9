//! The operator's one-minute search limit with traffic straddling a minute of the clock:
//! 300, 60, 6 and 2 requests from four clients over t = 30–90 s. The windows a peak is
//! counted in are aligned to the clock's minutes, so each client's requests are split in
//! two halves; by hand the second client's most in any one minute is 60. `/shadow`,
//! `tollgate shadow-report` and the dashboard give the range that holds it (30 to 60),
//! never 30 alone.

use std::time::Duration;

use crate::admin_shadow_trial::{a_minute_of_search, search_gateway};
use crate::common::process::tollgate;
use crate::common::reload::admin;
use http::Method;
use tollgate::limit::clock::ManualClock;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minute_of_traffic_across_the_clocks_minute_gets_the_range_that_holds_sixty() {
    let clock = ManualClock::new();
    let gw = search_gateway(&clock).await;
    clock.advance(Duration::from_secs(30));
    a_minute_of_search(&gw, &clock).await;
    clock.advance(Duration::from_secs(5));
    let (_, v) = admin(gw.admin, Method::GET, "/shadow").await;
    let p = &v["policies"][0];
    let w = &p["windows"]["15m"];
    assert_eq!(
        (&w["requests"], &w["seen_seconds"]),
        (&368.into(), &95.0.into()),
        "{w}"
    );
    assert_eq!(w["peak_windows_aligned"], true, "{w}");
    // By hand: the second client's most in one minute is 60, the fourth's 2; each was
    // counted as two halves (30 and 1) in the clock's minutes.
    let t: Vec<_> = (w["by_top"].as_array().unwrap().iter())
        .map(|t| {
            (
                t["suggested_limit"].clone(),
                t["suggested_limit_upper"].clone(),
            )
        })
        .collect();
    assert_eq!(t[0], (30.into(), 60.into()), "{w}");
    assert_eq!(t[1], (1.into(), 2.into()), "{w}");
    let means = p["suggestion_means"].as_str().unwrap();
    assert!(
        means.contains("aligned to the clock") && means.contains("suggested_limit_upper"),
        "{means}"
    );

    let adm = gw.admin;
    let out = tokio::task::spawn_blocking(move || {
        tollgate()
            .args(["shadow-report", "--admin", &adm.to_string()])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let row = "| 30–60 / 1–2 / - per 1m (now 100) |";
    assert!(stdout.contains(row), "no `{row}` in:\n{stdout}");
    assert!(stdout.contains("so it is a range"), "{stdout}");
    assert!(stdout.contains("150–300  search:ip:10.0.0.1"), "{stdout}");

    // The dashboard, in headless Chromium: the range, and what it is.
    let url = format!("http://{}/dashboard", gw.admin);
    let dom = crate::common::browser::dump_dom(&url).await;
    for shown in [
        ">limit 30–60 per 1m refuses 1 key",
        "counted in 1m windows aligned to the clock, which split a burst across their edge",
        "<td>150–300</td>",
    ] {
        assert!(dom.contains(shown), "no `{shown}` in:\n{dom}");
    }
    let png = std::env::temp_dir().join(format!("tollgate-range-{}.png", std::process::id()));
    crate::common::browser::screenshot(&url, &png, 1280, 900).await;
}
