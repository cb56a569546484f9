//! Attacks on issue 16's configs `check` should refuse. Each test asserts the SAFE outcome
//! (refused), so a failure is a config that is accepted but should not be. Tests marked
//! HELD pass and document a case that was tried.

fn outcome(policies: &str) -> Result<(), String> {
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n\
         [account]\nheader = \"x-api-key\"\n\
         [upstreams.app]\nurls = [\"http://127.0.0.1:9\"]\n\
         {policies}\n\
         [[routes]]\nname = \"api\"\nupstream = \"app\"\npolicies = [\"p\"]\n"
    );
    let origin = crate::common::repo_path("inline-test.toml");
    let raw = tollgate::config::parse_str(&text, &origin).map_err(|e| e.to_string())?;
    tollgate::config::validate(raw, &origin)
        .map(drop)
        .map_err(|e| e.to_string())
}

/// Refused, with a message naming `why`.
fn refused(case: &str, policies: &str, why: &str) {
    match outcome(policies) {
        Ok(()) => panic!("accepted, should be refused: {case}\n{policies}"),
        Err(e) => assert!(e.contains(why), "{case}: refused, but not for `{why}`: {e}"),
    }
}

const BASE: &str = "[policies.p]\nkey = [\"account\"]\nalgorithm = \"gcra\"\nperiod = \"1m\"\n";

#[test]
fn held_tier_burst_below_max_cost_is_refused() {
    refused(
        "max_cost 50 but tier `free` holds 10",
        &format!(
            "{BASE}limit = 100\ncost_header = \"x-cost\"\nmax_cost = 50\n\
             tier_header = \"x-plan\"\ntiers = {{ free = {{ limit = 10 }} }}\n"
        ),
        "tiers.free.max_cost",
    );
    refused(
        "max_cost 50 but an override holds 5",
        &format!(
            "{BASE}limit = 100\ncost_header = \"x-cost\"\nmax_cost = 50\n\
             overrides = {{ abuser = {{ limit = 5 }} }}\n"
        ),
        "overrides.max_cost",
    );
}

#[test]
fn held_spend_combinations_are_refused() {
    let conc = "[policies.p]\nkey = [\"account\"]\nalgorithm = \"concurrency\"\nlimit = 5\n";
    refused(
        "count + concurrency",
        &format!("{conc}count = {{ statuses = [401] }}\n"),
        "count",
    );
    refused(
        "request_bytes + lease",
        &format!("{BASE}limit = 1000\ncost = \"request_bytes\"\nsite = \"lease\"\n"),
        "cannot be leased",
    );
    refused(
        "request_bytes + count",
        &format!("{BASE}limit = 1000\ncost = \"request_bytes\"\ncount = {{ statuses = [401] }}\n"),
        "whole price",
    );
    refused(
        "count with an empty list",
        &format!("{BASE}limit = 10\ncount = {{ statuses = [] }}\n"),
        "is empty",
    );
    refused(
        "max_cost = 0",
        &format!("{BASE}limit = 10\ncost_header = \"x-cost\"\nmax_cost = 0\n"),
        "max_cost",
    );
}

/// HELD: a policy named like a variant (`p@free`) would share the tier's state; `@` in a
/// policy name is refused.
#[test]
fn held_policy_named_like_a_variant_is_refused() {
    let r = outcome(&format!(
        "{BASE}limit = 100\ntier_header = \"x-plan\"\ntiers = {{ free = {{ limit = 10 }} }}\n\
         [policies.\"p@free\"]\nkey = [\"account\"]\nalgorithm = \"gcra\"\nperiod = \"1m\"\nlimit = 1000\n"
    ));
    let e = r.expect_err("accepted a policy named `p@free` beside tier `free` of `p`");
    assert!(e.contains("@") || e.contains("p@free"), "{e}");
}

/// Was a break (low, careless operator; fixed): two `overrides` entries that name the same account
/// (`hash:` is compared lower-cased, so `hash:AB…` and `hash:ab…` are one account; so are a
/// raw value and its `hash:`) are accepted; `TierTable` collects them into a map and the
/// later entry in key order silently wins. An operator capping an abusive account at 5
/// while an old entry grants it 500 gets 500, with no word from `check`.
#[test]
fn one_account_overridden_twice_is_refused() {
    let upper = "A".repeat(32);
    let lower = "a".repeat(32);
    let r = outcome(&format!(
        "{BASE}limit = 100\n\
         overrides = {{ \"hash:{upper}\" = {{ limit = 5 }}, \"hash:{lower}\" = {{ limit = 500 }} }}\n"
    ));
    assert!(
        r.is_err(),
        "accepted two overrides (limit 5 and limit 500) for one account"
    );
}
