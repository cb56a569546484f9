//! envoyproxy/ratelimit's README examples 1–7: which rule a request's descriptors get
//! (key and value, nesting, depth, unlimited, shadow mode, replaces), each config as
//! printed there.

use super::super::Unit::{Day, Minute, Second};
use super::*;

#[test]
fn example_1_key_value_pairs_each_get_their_own_rule() {
    let c = config(
        "domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500

  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
",
    );
    let (policy, limit, _) = rule(&c, "mongo_cps", &[("database", "users")]).unwrap();
    assert_eq!(policy, "mongo_cps.database_users");
    assert_eq!(limit, per(500, Second));
    let (policy, _, _) = rule(&c, "mongo_cps", &[("database", "default")]).unwrap();
    assert_eq!(policy, "mongo_cps.database_default");
    assert_eq!(rule(&c, "mongo_cps", &[("database", "orders")]), None);
    assert_eq!(rule(&c, "other_domain", &[("database", "users")]), None);
}

#[test]
fn example_2_nested_and_flat_descriptors_answer_together() {
    let c = config(
        "domain: messaging
descriptors:
  # Only allow 5 marketing messages a day
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5

  # Only allow 100 messages a day to any unique phone number
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
",
    );
    let marketing: &[(&str, &str)] = &[("message_type", "marketing"), ("to_number", "2061111111")];
    let (policy, limit, _) = rule(&c, "messaging", marketing).unwrap();
    assert_eq!(policy, "messaging.message_type_marketing.to_number");
    assert_eq!(limit, per(5, Day));
    let (policy, limit, _) = rule(&c, "messaging", &[("to_number", "2061111111")]).unwrap();
    assert_eq!(policy, "messaging.to_number");
    assert_eq!(limit, per(100, Day));
    // The placeholder level has no rule of its own.
    assert_eq!(
        rule(&c, "messaging", &[("message_type", "marketing")]),
        None
    );
    // Both descriptors of one request get their rule: the answer is their aggregate.
    assert_eq!(
        applied(
            &c,
            "messaging",
            &[marketing, &[("to_number", "2061111111")]]
        ),
        [
            "limited:messaging.message_type_marketing.to_number",
            "limited:messaging.to_number"
        ]
    );
    // Each number its own count: the key carries the value.
    let one = entries(marketing);
    let other = entries(&[("message_type", "marketing"), ("to_number", "2062222222")]);
    let (d1, d2) = (
        Descriptor {
            entries: &one,
            limit: None,
        },
        Descriptor {
            entries: &other,
            limit: None,
        },
    );
    let k1 = c.find("messaging", &d1).unwrap().key("messaging", &d1);
    let k2 = c.find("messaging", &d2).unwrap().key("messaging", &d2);
    assert_eq!(k1, "messaging_message_type_marketing_to_number_2061111111_");
    assert_ne!(k1, k2);
}

#[test]
fn example_3_key_value_is_tried_before_key() {
    let c = config(
        "domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10

  # Black list IP
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
",
    );
    let (policy, limit, _) =
        rule(&c, "edge_proxy_per_ip", &[("remote_address", "50.0.0.1")]).unwrap();
    assert_eq!(policy, "edge_proxy_per_ip.remote_address");
    assert_eq!(limit, per(10, Second));
    let (policy, limit, _) =
        rule(&c, "edge_proxy_per_ip", &[("remote_address", "50.0.0.5")]).unwrap();
    assert_eq!(policy, "edge_proxy_per_ip.remote_address_50.0.0.5");
    assert_eq!(limit, per(0, Second));
}

#[test]
fn example_4_descriptor_length_must_equal_the_nesting_level() {
    let request: &[(&str, &str)] = &[("key", "value"), ("subkey", "subvalue")];
    let flat = config(
        "domain: example4
descriptors:
  - key: key
    value: value
    rate_limit:
      requests_per_unit: 300
      unit: second
",
    );
    assert_eq!(rule(&flat, "example4", request), None);
    assert!(rule(&flat, "example4", &[("key", "value")]).is_some());
    let nested = config(
        "domain: example4
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        rate_limit:
          requests_per_unit: 300
          unit: second
",
    );
    let (policy, limit, _) = rule(&nested, "example4", request).unwrap();
    assert_eq!(policy, "example4.key_value.subkey");
    assert_eq!(limit, per(300, Second));
    assert_eq!(rule(&nested, "example4", &[("key", "value")]), None);
}

#[test]
fn example_5_unlimited_is_a_rule_without_a_limit() {
    let c = config(
        "domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true

  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 100
",
    );
    assert_eq!(
        applied(
            &c,
            "internal",
            &[&[("ldap", "x")], &[("azure", "y")], &[("gcp", "z")]]
        ),
        ["unlimited:internal.ldap", "limited:internal.azure", "none"]
    );
    let (_, limit, _) = rule(&c, "internal", &[("azure", "y")]).unwrap();
    assert_eq!(limit, per(100, Minute));
    assert!(
        c.rules()
            .iter()
            .any(|r| r.policy == "internal.ldap" && r.unlimited())
    );
}

#[test]
fn example_6_shadow_mode_is_carried_by_its_rule_only() {
    let c = config(
        "domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 10
          unit: second
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 20
          unit: second
",
    );
    let shadow = |user: &str| {
        let e = entries(&[("service", "auth-service"), ("user", user)]);
        let d = Descriptor {
            entries: &e,
            limit: None,
        };
        c.find("example6", &d)
            .map(|m| (m.rule().shadow_mode, m.rule().limit))
    };
    assert_eq!(shadow("user-a"), Some((true, per(10, Second))));
    assert_eq!(shadow("user-b"), Some((false, per(20, Second))));
    assert_eq!(shadow("user-c"), None);
}

#[test]
fn example_7_replaces_drops_the_named_rule_when_both_match() {
    let c = config(
        "domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: second
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: second
",
    );
    let one: &[(&str, &str)] = &[("key_1", "value_1"), ("user", "bkthomps")];
    let two: &[(&str, &str)] = &[("key_2", "value_2"), ("user", "bkthomps")];
    assert_eq!(
        applied(&c, "example7", &[one]),
        ["limited:example7.key_1_value_1.user_bkthomps"]
    );
    assert_eq!(
        applied(&c, "example7", &[two]),
        ["limited:example7.key_2_value_2.user_bkthomps"]
    );
    assert_eq!(
        applied(&c, "example7", &[one, two]),
        [
            "replaced:example7.key_1_value_1.user_bkthomps",
            "limited:example7.key_2_value_2.user_bkthomps"
        ]
    );
    let (_, limit, _) = rule(&c, "example7", two).unwrap();
    assert_eq!(limit, per(10, Second));
}
