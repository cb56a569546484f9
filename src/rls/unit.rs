//! A rule's limit: `requests_per_unit` per `unit`, the units envoyproxy/ratelimit knows
//! (Envoy's `RateLimitResponse.RateLimit.Unit` without `UNKNOWN`), each a fixed period as
//! its `UnitToDivider` counts them (a month is 30 days, a year 365).

use std::time::Duration;

/// A unit of `rate_limit.unit`; the YAML spells it in any case (ratelimit upper-cases it
/// before looking it up in the proto's enum names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    Second,
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Year,
}

impl Unit {
    /// The unit a YAML `unit` names, in any case; `None` for anything else, `unknown` too.
    pub fn parse(text: &str) -> Option<Unit> {
        Some(match text.to_uppercase().as_str() {
            "SECOND" => Unit::Second,
            "MINUTE" => Unit::Minute,
            "HOUR" => Unit::Hour,
            "DAY" => Unit::Day,
            "WEEK" => Unit::Week,
            "MONTH" => Unit::Month,
            "YEAR" => Unit::Year,
            _ => return None,
        })
    }

    /// The proto enum's name (what a `current_limit` carries and what the stats print).
    pub fn name(self) -> &'static str {
        match self {
            Unit::Second => "SECOND",
            Unit::Minute => "MINUTE",
            Unit::Hour => "HOUR",
            Unit::Day => "DAY",
            Unit::Week => "WEEK",
            Unit::Month => "MONTH",
            Unit::Year => "YEAR",
        }
    }

    /// The unit's length, as ratelimit's fixed windows have it.
    pub fn period(self) -> Duration {
        const DAY: u64 = 24 * 60 * 60;
        Duration::from_secs(match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 60 * 60,
            Unit::Day => DAY,
            Unit::Week => 7 * DAY,
            Unit::Month => 30 * DAY,
            Unit::Year => 365 * DAY,
        })
    }
}

/// `requests_per_unit` requests per `unit`: a rule's limit, or the override Envoy sends in a
/// descriptor's `limit`. Zero is valid: every request is over the limit (README example 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Limit {
    pub requests_per_unit: u32,
    pub unit: Unit,
}

impl Limit {
    /// The window `requests_per_unit` is counted over.
    pub fn period(&self) -> Duration {
        self.unit.period()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_parse_in_any_case_and_unknown_is_refused() {
        assert_eq!(Unit::parse("second"), Some(Unit::Second));
        assert_eq!(Unit::parse("MiNuTe"), Some(Unit::Minute));
        assert_eq!(Unit::parse("WEEK"), Some(Unit::Week));
        assert_eq!(Unit::parse("unknown"), None);
        assert_eq!(Unit::parse("seconds"), None);
        assert_eq!(Unit::parse(""), None);
        assert_eq!(Unit::Month.period(), Duration::from_secs(30 * 86_400));
        assert_eq!(Unit::Year.period(), Duration::from_secs(365 * 86_400));
    }
}
