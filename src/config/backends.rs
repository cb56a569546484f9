//! `[upstreams.NAME]` as a set of backends (step 5): each URL's `weight`, how a request's URL
//! is chosen (`balance`), when a request is sent again (`retries` and its budget) and when a
//! failing URL is left out (`outlier`). The proxy side is `proxy/upstream/balance.rs`,
//! `proxy/upstream/retry.rs` and `proxy/upstream/outlier.rs`.

use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};

use super::validate::Validator;

/// One `urls` entry as written: `"http://…"`, or `{ url = "http://…", weight = 3 }`.
#[derive(Debug, Clone, PartialEq)]
pub struct RawUpstreamUrl {
    pub url: String,
    pub weight: Option<u64>,
}

impl From<String> for RawUpstreamUrl {
    fn from(url: String) -> Self {
        RawUpstreamUrl { url, weight: None }
    }
}

impl<'de> Deserialize<'de> for RawUpstreamUrl {
    /// By hand rather than `#[serde(untagged)]`, whose one message for every mistake
    /// ("data did not match any variant") would not say which key is wrong.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Entry;
        impl<'de> Visitor<'de> for Entry {
            type Value = RawUpstreamUrl;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a URL string or a table { url = \"http://…\", weight = N }")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
                Ok(RawUpstreamUrl {
                    url: s.to_owned(),
                    weight: None,
                })
            }
            /// The table form, its keys checked as `deny_unknown_fields` would (a misspelt
            /// `wieght` is an error, not ignored).
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                const KEYS: &[&str] = &["url", "weight"];
                let (mut url, mut weight) = (None, None);
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "url" if url.is_none() => url = Some(map.next_value()?),
                        "weight" if weight.is_none() => weight = Some(map.next_value()?),
                        "url" | "weight" => {
                            return Err(de::Error::custom(format_args!("duplicate field `{key}`")));
                        }
                        other => return Err(de::Error::unknown_field(other, KEYS)),
                    }
                }
                Ok(RawUpstreamUrl {
                    url: url.ok_or_else(|| de::Error::missing_field("url"))?,
                    weight,
                })
            }
        }
        d.deserialize_any(Entry)
    }
}

/// `upstreams.NAME.balance`: how a request's URL is chosen among the usable ones.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Balance {
    /// In turn, each URL as often as its weight (smooth weighted round robin, as nginx).
    #[default]
    RoundRobin,
    /// Of two URLs drawn at random (by weight), the one with fewer requests in flight per
    /// unit of weight: power of two choices, as Envoy's `LEAST_REQUEST`.
    LeastRequest,
    /// At random, by weight.
    Random,
}

/// `[upstreams.NAME.outlier]` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOutlier {
    #[serde(default)]
    pub consecutive_5xx: u64,
    #[serde(default = "one")]
    pub consecutive_connect_failures: u64,
    #[serde(default = "two_seconds")]
    pub base_ejection: String,
    #[serde(default = "five_minutes")]
    pub max_ejection: String,
    #[serde(default = "ten")]
    pub max_ejected_percent: u64,
}

impl Default for RawOutlier {
    fn default() -> Self {
        RawOutlier {
            consecutive_5xx: 0,
            consecutive_connect_failures: one(),
            base_ejection: two_seconds(),
            max_ejection: five_minutes(),
            max_ejected_percent: ten(),
        }
    }
}

fn one() -> u64 {
    1
}
fn ten() -> u64 {
    10
}
fn two_seconds() -> String {
    "2s".into()
}
fn five_minutes() -> String {
    "5m".into()
}
fn default_retry_on() -> Vec<u16> {
    vec![502, 503, 504]
}
fn default_retry_budget_percent() -> f64 {
    20.0
}
fn default_retry_budget_min_per_second() -> u64 {
    3
}
fn default_retry_backoff() -> String {
    "25ms".into()
}

/// When a request to this upstream is sent again (`proxy/upstream/retry.rs`).
#[derive(Debug, Clone, PartialEq)]
pub struct Retry {
    /// Extra attempts after the first, for requests that reached an upstream; 0 = none.
    pub retries: u32,
    /// Upstream statuses retried.
    pub on_status: Vec<u16>,
    /// Retries as a share of requests, 0.0 to 1.0, over the budget's 10 s window.
    pub budget_ratio: f32,
    /// Retries a second allowed on top of the share.
    pub budget_min_per_second: u32,
    /// The first retry's wait (before jitter); doubled for each next one, at most 10×.
    pub backoff: Duration,
}

/// When a failing URL is ejected (`proxy/upstream/outlier.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outlier {
    /// Upstream 5xx answers in a row that eject a URL; 0 = never for a status.
    pub consecutive_5xx: u32,
    /// Failed connections (or connections broken before the answer) in a row that eject
    /// a URL; 0 = never.
    pub consecutive_connect_failures: u32,
    /// The first ejection's length; the n-th in a row lasts n times as long.
    pub base_ejection: Duration,
    /// The longest an ejection lasts.
    pub max_ejection: Duration,
    /// At most this share of the URLs (%, at least one URL) is ejected at once; 0 = off.
    pub max_ejected_percent: u32,
}

/// What [`Validator::backends`] makes of one upstream's keys (the proxy's shared state of
/// the same URLs is `proxy::upstream::outlier::Backends`).
pub(super) struct BackendKeys {
    pub weights: Vec<u32>,
    pub retry: Retry,
    pub outlier: Outlier,
}

/// The largest weight: a schedule of round robin holds the sum of the weights.
const MOST_WEIGHT: u64 = 1000;
const MOST_RETRIES: u64 = 10;

impl Validator {
    /// The weights, retry and outlier settings of upstream `name`.
    pub(super) fn backends(&mut self, name: &str, raw: &super::raw::RawUpstream) -> BackendKeys {
        let at = |k: &str| format!("upstreams.{name}.{k}");
        let weights = (raw.urls.iter().enumerate())
            .map(|(i, u)| match u.weight {
                None => 1,
                Some(w @ 1..=MOST_WEIGHT) => w as u32,
                Some(w) => {
                    let hint = if w == 0 {
                        " (leave a URL out to send it nothing)"
                    } else {
                        ""
                    };
                    self.fail(
                        &format!("upstreams.{name}.urls[{i}].weight"),
                        format!("{w} is out of range: use 1 to {MOST_WEIGHT}{hint}"),
                    );
                    1
                }
            })
            .collect();
        let retries = self.at_most(&at("retries"), raw.retries, MOST_RETRIES);
        let written = [
            ("retry_on", raw.retry_on.is_some()),
            ("retry_budget_percent", raw.retry_budget_percent.is_some()),
            (
                "retry_budget_min_per_second",
                raw.retry_budget_min_per_second.is_some(),
            ),
            ("retry_backoff", raw.retry_backoff.is_some()),
        ];
        for (key, _) in written.iter().filter(|(_, set)| *set && raw.retries == 0) {
            self.fail(&at(key), "has no effect without retries (set retries = N)");
        }
        let retry_on = raw.retry_on.clone().unwrap_or_else(default_retry_on);
        for (i, s) in retry_on.iter().enumerate() {
            if !(500..=599).contains(s) {
                self.fail(
                    &format!("upstreams.{name}.retry_on[{i}]"),
                    format!("{s} is not a 5xx status: only 500 to 599 are retried"),
                );
            }
        }
        let percent = raw
            .retry_budget_percent
            .unwrap_or_else(default_retry_budget_percent);
        if !(0.0..=100.0).contains(&percent) {
            self.fail(
                &at("retry_budget_percent"),
                format!("{percent} is out of range: use 0 to 100"),
            );
        }
        let min =
            (raw.retry_budget_min_per_second).unwrap_or_else(default_retry_budget_min_per_second);
        let min = self.at_most(&at("retry_budget_min_per_second"), min, 1000);
        let backoff = raw
            .retry_backoff
            .clone()
            .unwrap_or_else(default_retry_backoff);
        let backoff = self.span(&at("retry_backoff"), &backoff, MS, TEN_S);
        let retry = Retry {
            retries,
            on_status: retry_on,
            budget_ratio: (percent.clamp(0.0, 100.0) / 100.0) as f32,
            budget_min_per_second: min,
            backoff: backoff.unwrap_or(Duration::from_millis(25)),
        };
        BackendKeys {
            weights,
            retry,
            outlier: self.outlier(name, &raw.outlier),
        }
    }

    fn outlier(&mut self, name: &str, raw: &RawOutlier) -> Outlier {
        let at = |k: &str| format!("upstreams.{name}.outlier.{k}");
        let base = self.span(&at("base_ejection"), &raw.base_ejection, TEN_MS, HOUR);
        let max = self.span(&at("max_ejection"), &raw.max_ejection, TEN_MS, DAY);
        if let (Some(b), Some(m)) = (base, max)
            && m < b
        {
            self.fail(
                &at("max_ejection"),
                format!(
                    "`{}` (5m unless set) is shorter than base_ejection `{}`: make it at least that",
                    raw.max_ejection, raw.base_ejection
                ),
            );
        }
        Outlier {
            consecutive_5xx: self.at_most(&at("consecutive_5xx"), raw.consecutive_5xx, 1000),
            consecutive_connect_failures: self.at_most(
                &at("consecutive_connect_failures"),
                raw.consecutive_connect_failures,
                1000,
            ),
            base_ejection: base.unwrap_or(Duration::from_secs(2)),
            max_ejection: max.unwrap_or(Duration::from_secs(300)),
            max_ejected_percent: self.at_most(
                &at("max_ejected_percent"),
                raw.max_ejected_percent,
                100,
            ),
        }
    }

    /// `n` when it is at most `most`, else an error (and `most`).
    fn at_most(&mut self, key: &str, n: u64, most: u64) -> u32 {
        if n > most {
            self.fail(key, format!("{n} is out of range: use 0 to {most}"));
        }
        n.min(most) as u32
    }

    /// The duration `s` when it lies in `least..=most`.
    fn span(&mut self, key: &str, s: &str, least: Duration, most: Duration) -> Option<Duration> {
        let d = self.duration(key, s)?;
        if !(least..=most).contains(&d) {
            self.fail(
                key,
                format!("must be at least {least:?} and at most {}", human(most)),
            );
            return None;
        }
        Some(d)
    }
}

const MS: Duration = Duration::from_millis(1);
const TEN_MS: Duration = Duration::from_millis(10);
const TEN_S: Duration = Duration::from_secs(10);
const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(86_400);

/// `10s`, `1h`, `24h`: the bounds as a user writes them.
fn human(d: Duration) -> String {
    match d.as_secs() {
        s if s >= 3600 => format!("{}h", s / 3600),
        s => format!("{s}s"),
    }
}
