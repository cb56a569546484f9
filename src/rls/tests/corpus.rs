//! Cases from envoyproxy/ratelimit's `test/config/config_test.go` the README examples do not
//! show: its basic config's lookups, overrides, wildcard misses, YAML 1.1 scalars as go-yaml v2
//! reads them, and every problem at once (its stats-key cases: `corpus_stats.rs`).

use super::super::Unit::{Day, Hour, Minute, Second};
use super::*;

const BASIC: &str = "# Basic configuration for testing.
domain: test-domain
descriptors:
  - key: key1
    value: value1
    descriptors:
      - key: subkey1
        rate_limit:
          unit: second
          requests_per_unit: 5
      - key: subkey1
        value: subvalue1
        rate_limit:
          unit: second
          requests_per_unit: 10
  - key: key2
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: key2
    value: value2
    rate_limit:
      unit: minute
      requests_per_unit: 30
  - key: key2
    value: value3
  - key: key3
    rate_limit:
      unit: hour
      requests_per_unit: 1
  - key: key4
    rate_limit:
      name: key4_rate_limit
      unit: day
      requests_per_unit: 1
  - key: key5
    value: value5
    rate_limit:
      unit: day
      requests_per_unit: 15
    descriptors:
      - key: subkey5
        value: subvalue5
        rate_limit:
          unit: day
          requests_per_unit: 25
  - key: key6
    rate_limit:
      unlimited: true
  - key: key7
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 70
";

#[test]
fn basic_config_lookups_as_ratelimit_tests_them() {
    let c = config(BASIC);
    let d = "test-domain";
    assert_eq!(rule(&c, "foo_domain", &[("key1", "value1")]), None);
    assert_eq!(rule(&c, d, &[("key1", "something")]), None);
    assert_eq!(rule(&c, d, &[("key1", "value1")]), None);
    assert_eq!(
        rule(&c, d, &[("key2", "value2"), ("subkey", "subvalue")]),
        None
    );
    assert_eq!(
        rule(&c, d, &[("key5", "value5"), ("subkey5", "subvalue")]),
        None
    );
    let got = |pairs: &[(&str, &str)]| rule(&c, d, pairs).map(|(p, l, _)| (p, l));
    assert_eq!(
        got(&[("key1", "value1"), ("subkey1", "something")]),
        Some(("test-domain.key1_value1.subkey1".into(), per(5, Second)))
    );
    assert_eq!(
        got(&[("key1", "value1"), ("subkey1", "subvalue1")]),
        Some((
            "test-domain.key1_value1.subkey1_subvalue1".into(),
            per(10, Second)
        ))
    );
    assert_eq!(
        got(&[("key2", "something")]),
        Some(("test-domain.key2".into(), per(20, Minute)))
    );
    assert_eq!(
        got(&[("key2", "value2")]),
        Some(("test-domain.key2_value2".into(), per(30, Minute)))
    );
    // A level without rate_limit and without children: no rule, as whitelisted.
    assert_eq!(got(&[("key2", "value3")]), None);
    assert_eq!(
        got(&[("key3", "foo")]),
        Some(("test-domain.key3".into(), per(1, Hour)))
    );
    assert_eq!(
        got(&[("key4", "foo")]),
        Some(("test-domain.key4".into(), per(1, Day)))
    );
    assert_eq!(
        got(&[("key6", "foo")]),
        Some(("test-domain.key6".into(), None))
    );
    let (_, _, stats) = rule(&c, d, &[("key7", "unspecified_value")]).unwrap();
    assert_eq!(stats, "test-domain.key7_unspecified_value");
    let key4 = c
        .rules()
        .iter()
        .find(|r| r.policy == "test-domain.key4")
        .unwrap();
    assert_eq!(key4.name.as_deref(), Some("key4_rate_limit"));
}

#[test]
fn an_override_names_the_descriptor_and_needs_a_known_domain() {
    let c = config(BASIC);
    let e = entries(&[("key1", "value1"), ("subkey1", "something")]);
    let override_limit = per(42, Hour);
    let d = Descriptor {
        entries: &e,
        limit: override_limit,
    };
    assert!(c.find("foo_domain", &d).is_none());
    let m = c.find("test-domain", &d).unwrap();
    assert!(m.is_override());
    assert_eq!(m.rule().policy, "test-domain.key1_value1.subkey1_something");
    assert_eq!(
        m.stats_key("test-domain", &d),
        "test-domain.key1_value1.subkey1_something"
    );
    assert_eq!(m.rule().limit, override_limit);
    assert!(!m.rule().shadow_mode && m.rule().name.is_none());
    // Also where no rule matches: ratelimit takes the override before looking.
    let e = entries(&[("nothing", "here")]);
    let d = Descriptor {
        entries: &e,
        limit: override_limit,
    };
    assert_eq!(
        c.find("test-domain", &d).unwrap().rule().policy,
        "test-domain.nothing_here"
    );
}

#[test]
fn wildcards_need_prefix_middle_and_suffix_in_order() {
    let c = config(
        "domain: test-domain
descriptors:
  - key: midWild
    value: bar*b
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: multiWild
    value: foo*bar*baz
    rate_limit: {unit: minute, requests_per_unit: 10}
",
    );
    let d = "test-domain";
    for v in ["barab", "bar123b", "barb"] {
        assert!(rule(&c, d, &[("midWild", v)]).is_some(), "{v}");
    }
    for v in ["bara", "xbarb", "bab"] {
        assert_eq!(rule(&c, d, &[("midWild", v)]), None, "{v}");
    }
    for v in ["foo123bar456baz", "foobarbaz"] {
        assert!(rule(&c, d, &[("multiWild", v)]).is_some(), "{v}");
    }
    for v in ["foo123baz", "bar456baz", "foobaz"] {
        assert_eq!(rule(&c, d, &[("multiWild", v)]), None, "{v}");
    }
}

#[test]
fn yaml_1_1_scalars_read_as_go_yaml_v2_reads_them() {
    let c = config(
        "domain: d
descriptors:
  - key: port
    value: 8080
    shadow_mode: yes
    rate_limit:
      unit: MINUTE
      requests_per_unit: 0x10
  - key: flag
    value: on
    rate_limit: &std
      unit: Second
      requests_per_unit: 1_000
  - key: copy
    rate_limit: *std
  - key: merged
    rate_limit:
      <<: *std
      requests_per_unit: 7
",
    );
    let e = entries(&[("port", "8080")]);
    let desc = Descriptor {
        entries: &e,
        limit: None,
    };
    let m = c.find("d", &desc).unwrap();
    assert!(m.rule().shadow_mode);
    assert_eq!(m.rule().limit, per(16, Minute));
    assert_eq!(
        rule(&c, "d", &[("flag", "on")]).unwrap().1,
        per(1000, Second)
    );
    assert_eq!(
        rule(&c, "d", &[("copy", "x")]).unwrap().1,
        per(1000, Second)
    );
    assert_eq!(rule(&c, "d", &[("merged", "x")]).unwrap().1, per(7, Second));
}

#[test]
fn every_problem_of_every_file_is_reported_at_once() {
    let files = [
        (
            "a.yaml".into(),
            "domain: d
descriptors:
  - key: k
    rate_limit: {unit: fortnight, requests_per_unit: 1}
  - value: v
  - key: k
  - key: x
    ratelimit: {}
"
            .to_owned(),
        ),
        ("b.yaml".into(), "domain: d\n".to_owned()),
        ("c.yaml".into(), "'''".to_owned()),
    ];
    let errors = RlsConfig::from_texts(&files).unwrap_err();
    let text = errors.to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        [
            "a.yaml:4: descriptors[0](k).rate_limit.unit: invalid rate limit unit 'fortnight'",
            "a.yaml:5: descriptors[1]: descriptor has empty key",
            "a.yaml:6: descriptors[2](k): duplicate descriptor composite key 'd.k'",
            "a.yaml:8: descriptors[3](x): config error, unknown key 'ratelimit'",
            "b.yaml:1: domain: duplicate domain 'd' in config file (first in a.yaml)",
            "c.yaml:1: error loading config file: while scanning a quoted scalar, \
             found unexpected end of stream at line 1 column 1",
        ],
        "{text}"
    );
}

#[test]
fn keys_and_items_are_shown_as_go_prints_them_and_an_unreadable_path_is_named() {
    let files = [(
        "k.yaml".into(),
        "domain: d\non: 1\n0x10: 2\ndescriptors:\n  - yes\n".to_owned(),
    )];
    let text = RlsConfig::from_texts(&files).unwrap_err().to_string();
    assert_eq!(
        text.lines().collect::<Vec<_>>(),
        [
            "k.yaml:2: config error, key is not of type string: true",
            "k.yaml:3: config error, key is not of type string: 16",
            "k.yaml:5: descriptors[0]: config error, yaml file contains list of type other than map: true",
        ],
        "{text}"
    );
    let missing = std::path::Path::new("/nonexistent/tollgate-rls.yaml");
    let text = RlsConfig::load(missing).unwrap_err().to_string();
    assert!(
        text.starts_with("/nonexistent/tollgate-rls.yaml: cannot read: "),
        "{text}"
    );
}
