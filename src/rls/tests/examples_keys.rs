//! envoyproxy/ratelimit's README examples 8–11: the stats key (`detailed_metric`,
//! `value_to_metric`), wildcards, and the counter's key (`share_threshold`), each config as
//! printed there.

use super::super::Unit::{Hour, Minute};
use super::*;

#[test]
fn example_8_detailed_metric_puts_the_value_in_the_stats_key_only() {
    let c = config(
        "domain: example8
descriptors:
  - key: key1
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 10
  - key: key1
    value: value1
    rate_limit:
      unit: minute
      requests_per_unit: 20
",
    );
    let (policy, limit, stats) = rule(&c, "example8", &[("key1", "unspecified_value")]).unwrap();
    assert_eq!(
        (policy.as_str(), limit, stats.as_str()),
        (
            "example8.key1",
            per(10, Minute),
            "example8.key1_unspecified_value"
        )
    );
    let (policy, _, stats) = rule(&c, "example8", &[("key1", "unspecified_value2")]).unwrap();
    assert_eq!(
        (policy.as_str(), stats.as_str()),
        ("example8.key1", "example8.key1_unspecified_value2")
    );
    let (policy, limit, stats) = rule(&c, "example8", &[("key1", "value1")]).unwrap();
    assert_eq!(
        (policy.as_str(), limit, stats.as_str()),
        (
            "example8.key1_value1",
            per(20, Minute),
            "example8.key1_value1"
        )
    );
}

#[test]
fn example_9_wildcards_trailing_middle_and_several() {
    let trailing = config(
        "domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit:
      unit: minute
      requests_per_unit: 20
",
    );
    for v in ["value1", "value2", "valueXYZ", "value"] {
        let (policy, _, stats) = rule(&trailing, "example9", &[("key1", v)]).unwrap();
        assert_eq!(
            (policy.as_str(), stats.as_str()),
            ("example9.key1_value*", "example9.key1_value*")
        );
    }
    assert_eq!(rule(&trailing, "example9", &[("key1", "valu")]), None);

    let middle = config(
        "domain: example9
descriptors:
  - key: path
    value: /api/*/action
    rate_limit:
      unit: minute
      requests_per_unit: 20
",
    );
    for v in ["/api/123/action", "/api/user-id/action"] {
        assert!(rule(&middle, "example9", &[("path", v)]).is_some(), "{v}");
    }
    assert_eq!(
        rule(&middle, "example9", &[("path", "/api/123/other")]),
        None
    );

    let several = config(
        "domain: example9
descriptors:
  - key: route
    value: /api/*/resource/*/action
    rate_limit:
      unit: minute
      requests_per_unit: 20
",
    );
    for v in ["/api/v1/resource/123/action", "/api/v2/resource/456/action"] {
        let (policy, _, _) = rule(&several, "example9", &[("route", v)]).unwrap();
        assert_eq!(policy, "example9.route_/api/*/resource/*/action");
    }
    assert_eq!(
        rule(
            &several,
            "example9",
            &[("route", "/api/v1/resource/action")]
        ),
        None
    );
    assert_eq!(
        rule(&several, "example9", &[("route", "/api/v1/other/1/action")]),
        None
    );
}

#[test]
fn example_10_value_to_metric_puts_request_values_in_the_stats_key() {
    let c = config(
        "domain: example10
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit:
              unit: minute
              requests_per_unit: 60
",
    );
    let (policy, limit, stats) = rule(
        &c,
        "example10",
        &[
            ("route", "api"),
            ("http_method", "GET"),
            ("subject_id", "123"),
        ],
    )
    .unwrap();
    assert_eq!(policy, "example10.route.http_method.subject_id");
    assert_eq!(limit, per(60, Minute));
    assert_eq!(stats, "example10.route_api.http_method_GET.subject_id");
    let (_, _, stats) = rule(
        &c,
        "example10",
        &[
            ("route", "web"),
            ("http_method", "POST"),
            ("subject_id", "456"),
        ],
    )
    .unwrap();
    assert_eq!(stats, "example10.route_web.http_method_POST.subject_id");

    let wild = config(
        "domain: example10_wildcard
descriptors:
  - key: user
    value_to_metric: true
    descriptors:
      - key: action
        value: read*
        value_to_metric: true
        descriptors:
          - key: resource
            rate_limit:
              unit: minute
              requests_per_unit: 100
",
    );
    let (policy, _, stats) = rule(
        &wild,
        "example10_wildcard",
        &[
            ("user", "alice"),
            ("action", "readfile"),
            ("resource", "documents"),
        ],
    )
    .unwrap();
    assert_eq!(policy, "example10_wildcard.user.action_read*.resource");
    assert_eq!(
        stats,
        "example10_wildcard.user_alice.action_readfile.resource"
    );
}

#[test]
fn example_11_share_threshold_makes_one_count_for_all_wildcard_matches() {
    let c = config(
        "domain: example11
descriptors:
  # With share_threshold: true, all files/* matches share the same threshold
  - key: files
    value: files/*
    share_threshold: true
    rate_limit:
      unit: hour
      requests_per_unit: 10

  # Without share_threshold, each files_no_share/* match has its own isolated threshold
  - key: files_no_share
    value: files_no_share/*
    share_threshold: false
    rate_limit:
      unit: hour
      requests_per_unit: 10
",
    );
    let key = |k: &str, v: &str| {
        let e = entries(&[(k, v)]);
        let d = Descriptor {
            entries: &e,
            limit: None,
        };
        let m = c.find("example11", &d).unwrap();
        assert_eq!(m.rule().limit, per(10, Hour));
        (
            m.key("example11", &d),
            m.stats_key("example11", &d).into_owned(),
        )
    };
    let a = key("files", "files/a.pdf");
    assert_eq!(
        a,
        (
            "example11_files_files/*_".into(),
            "example11.files_files/*".into()
        )
    );
    assert_eq!(key("files", "files/b.csv"), a);
    let (na, na_stats) = key("files_no_share", "files_no_share/a.pdf");
    let (nb, _) = key("files_no_share", "files_no_share/b.csv");
    assert_eq!(na, "example11_files_no_share_files_no_share/a.pdf_");
    assert_ne!(na, nb);
    assert_eq!(na_stats, "example11.files_no_share_files_no_share/*");

    // With value_to_metric too: ratelimit's code (and its test) writes the shared pattern,
    // where the README's prose says `route_api.method_GET`.
    let metrics = config(
        "domain: example11_metrics
descriptors:
  - key: route
    value: api/*
    share_threshold: true
    value_to_metric: true
    descriptors:
      - key: method
        rate_limit:
          unit: minute
          requests_per_unit: 60
",
    );
    let (_, _, stats) = rule(
        &metrics,
        "example11_metrics",
        &[("route", "api/v1"), ("method", "GET")],
    )
    .unwrap();
    assert_eq!(stats, "example11_metrics.route_api/*.method");
}
