//! envoyproxy/ratelimit's stats-key cases from `test/config/config_test.go` that the README
//! examples do not show: `detailed_metric` on nested rules, `value_to_metric` with empty values
//! and beside `detailed_metric`, and `share_threshold` patterns in stats and counter keys.

use super::super::Unit::Minute;
use super::*;

/// `route` → `http_method` → `subject_id` (60 a minute), the first two with
/// `value_to_metric`; `subject_extra` is one more line of the `subject_id` rule.
fn route_method_subject(subject_extra: &str) -> RlsConfig {
    let extra = match subject_extra {
        "" => String::new(),
        line => format!("            {line}\n"),
    };
    config(&format!(
        "domain: domain
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
{extra}            rate_limit: {{unit: minute, requests_per_unit: 60}}
"
    ))
}

#[test]
fn detailed_metric_on_nested_rules() {
    let c = config(
        "domain: nested
descriptors:
  - key: key_1
    rate_limit: {requests_per_unit: 500, unit: minute}
    detailed_metric: true
  - key: key_1
    value: some-value-for-key-1
    rate_limit: {requests_per_unit: 500, unit: minute}
  - key: key_2
    rate_limit: {requests_per_unit: 5000, unit: minute}
    detailed_metric: true
    descriptors:
      - key: key_3
        detailed_metric: true
      - key: key_3
        value: requested-key3-value
        detailed_metric: true
        rate_limit: {requests_per_unit: 5, unit: minute}
",
    );
    let stats = |pairs: &[(&str, &str)]| rule(&c, "nested", pairs).unwrap().2;
    assert_eq!(
        stats(&[("key_1", "value-for-key-1")]),
        "nested.key_1_value-for-key-1"
    );
    assert_eq!(
        stats(&[("key_2", "key-2-value")]),
        "nested.key_2_key-2-value"
    );
    assert_eq!(
        stats(&[("key_2", "key-2-value"), ("key_3", "requested-key3-value")]),
        "nested.key_2_key-2-value.key_3_requested-key3-value"
    );
    // A level with a rule and children still answers a descriptor that stops there.
    let c = config(
        "domain: nested
descriptors:
  - key: key-1
    detailed_metric: false
    rate_limit: {requests_per_unit: 100, unit: minute}
    descriptors:
      - key: key-2
        rate_limit: {requests_per_unit: 5, unit: minute}
",
    );
    assert_eq!(
        rule(&c, "nested", &[("key-1", "value-1")]).unwrap().2,
        "nested.key-1"
    );
    assert_eq!(
        rule(&c, "nested", &[("key-1", "value-1"), ("key-2", "value-2")])
            .unwrap()
            .2,
        "nested.key-1.key-2"
    );
}

#[test]
fn value_to_metric_leaves_out_empty_values_and_yields_to_detailed_metric() {
    let c = route_method_subject("");
    let stats = |pairs: &[(&str, &str)]| rule(&c, "domain", pairs).unwrap().2;
    assert_eq!(
        stats(&[("route", ""), ("http_method", "GET"), ("subject_id", "123")]),
        "domain.route.http_method_GET.subject_id"
    );
    assert_eq!(
        stats(&[
            ("route", "draw"),
            ("http_method", ""),
            ("subject_id", "123")
        ]),
        "domain.route_draw.http_method.subject_id"
    );
    let c = route_method_subject("detailed_metric: true");
    assert_eq!(
        rule(
            &c,
            "domain",
            &[
                ("route", "draw"),
                ("http_method", "GET"),
                ("subject_id", "123")
            ]
        )
        .unwrap()
        .2,
        "domain.route_draw.http_method_GET.subject_id_123"
    );
}

#[test]
fn share_threshold_patterns_in_stats_and_keys() {
    let c = config(
        "domain: test-domain
descriptors:
  - key: service
    value: svc/*
    share_threshold: true
    descriptors:
      - key: endpoint
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 80}
  - key: path
    value: path/*
    share_threshold: true
    descriptors:
      - key: file
        value: file/*
        share_threshold: false
        descriptors:
          - key: type
            rate_limit: {unit: minute, requests_per_unit: 120}
  - key: file
    value: test1
    rate_limit: {unit: minute, requests_per_unit: 50}
  - key: file
    value: test*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 100}
",
    );
    let d = "test-domain";
    assert_eq!(
        rule(&c, d, &[("service", "svc/user"), ("endpoint", "get")])
            .unwrap()
            .2,
        "test-domain.service_svc/*.endpoint_get"
    );
    let e = entries(&[("path", "path/foo"), ("file", "file/doc1"), ("type", "pdf")]);
    let desc = Descriptor {
        entries: &e,
        limit: None,
    };
    let m = c.find(d, &desc).unwrap();
    assert_eq!(
        m.stats_key(d, &desc),
        "test-domain.path_path/*.file_file/*.type"
    );
    assert_eq!(
        m.key(d, &desc),
        "test-domain_path_path/*_file_file/doc1_type_pdf_"
    );
    // An exact value beats the wildcard that would also match it.
    let (policy, limit, _) = rule(&c, d, &[("file", "test1")]).unwrap();
    assert_eq!(
        (policy.as_str(), limit),
        ("test-domain.file_test1", per(50, Minute))
    );
    let (policy, limit, _) = rule(&c, d, &[("file", "test23")]).unwrap();
    assert_eq!(
        (policy.as_str(), limit),
        ("test-domain.file_test*", per(100, Minute))
    );
}
