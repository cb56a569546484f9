//! Log timestamps to Unix nanoseconds and back: the replay's virtual clock is read from
//! them, and the report names minutes with them.
//!
//! Hand-written rather than `chrono`/`time` (neither is in the tree): the two formats are
//! fixed-width, every line has one, and a direct digit scan plus the days-from-civil
//! formula costs a few nanoseconds where a general parser costs a good share of the
//! replay's per-line budget (≥ 1 M lines/s).

use std::cell::Cell;

/// Nanoseconds since the Unix epoch (UTC); signed so dates before 1970 stay ordered.
pub type UnixNanos = i64;

const NANOS: i64 = 1_000_000_000;

/// `N` ASCII digits at `at` as a number, or `None`. A plain loop over a fixed-length slice:
/// the fold with `try_fold` and `then` it replaced cost twice the instructions.
fn digits(b: &[u8], at: usize, n: usize) -> Option<i64> {
    let mut acc = 0i64;
    for &c in b.get(at..at + n)? {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        acc = acc * 10 + i64::from(d);
    }
    Some(acc)
}

/// Days from 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The inverse of [`days_from_civil`]: (year, month, day).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// The years a line may carry: nanoseconds since 1970 in an `i64` reach 1677 to 2262, and
/// seconds, a fraction and a zone are added after; a line outside is malformed (a corrupt
/// or hostile stamp must not wrap to another time, nor stop the replay).
const YEARS: std::ops::RangeInclusive<i64> = 1700..=2200;

/// A checked wall-clock moment to nanoseconds, before applying the zone offset.
fn instant(y: i64, mo: i64, d: i64, h: i64, mi: i64, s: i64) -> Option<i64> {
    let valid = (1..=12).contains(&mo)
        && (1..=31).contains(&d)
        && h < 24
        && mi < 60
        && s <= 60 // a leap second is read as the next second's start
        && YEARS.contains(&y);
    valid.then(|| (days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + s) * NANOS)
}

/// `±HHMM` or `±HH:MM` at the start of `b` in seconds east of UTC.
fn zone(b: &[u8]) -> Option<i64> {
    let sign = match b.first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let h = digits(b, 1, 2)?;
    let rest = &b[3..];
    let m = match rest {
        [b':', ..] if rest.len() == 3 => digits(rest, 1, 2)?,
        _ if rest.len() == 2 => digits(rest, 0, 2)?,
        _ => return None,
    };
    (h < 24 && m < 60).then_some(sign * (h * 3600 + m * 60))
}

thread_local! {
    /// The minute the last stamp named: its text up to the minute (an RFC 3339 prefix is
    /// padded with a zero byte, which no CLF prefix holds) and its nanoseconds.
    static MINUTE: Cell<([u8; 17], i64)> = const { Cell::new(([0xff; 17], 0)) };
}

/// The moment of a minute's text `key`, computed by `minute` only when it differs from the
/// last stamp's (a log's consecutive lines nearly always share their minute). Why: the
/// date checks and the days-from-civil arithmetic were over half of each parse, ~200
/// instructions a line under callgrind, for the same minute line after line. A memo of a
/// pure function: the answer is the one `minute` gives, only stored when it is `Some`.
fn memo(key: [u8; 17], minute: impl FnOnce() -> Option<i64>) -> Option<i64> {
    MINUTE.with(|last| {
        let (k, t) = last.get();
        if k == key {
            return Some(t);
        }
        let t = minute()?;
        last.set((key, t));
        Some(t)
    })
}

/// Seconds `ss` (00 to 60: a leap second is read as the next second's start) in nanoseconds.
fn seconds(b: &[u8], at: usize) -> Option<i64> {
    digits(b, at, 2).filter(|&s| s <= 60).map(|s| s * NANOS)
}

/// Common Log Format `10/Oct/2000:13:55:36 -0700` (the text between `[` and `]`).
pub fn parse_clf(b: &[u8]) -> Option<UnixNanos> {
    const MONTHS: [&[u8; 3]; 12] = [
        b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov",
        b"Dec",
    ];
    if b.len() < 26 || b[17] != b':' || b[20] != b' ' {
        return None;
    }
    let key: [u8; 17] = *b.first_chunk()?;
    let minute = memo(key, || {
        if b[2] != b'/' || b[6] != b'/' || b[11] != b':' || b[14] != b':' {
            return None;
        }
        let mon = MONTHS.iter().position(|m| m[..] == b[3..6])? as i64 + 1;
        let (y, d) = (digits(b, 7, 4)?, digits(b, 0, 2)?);
        instant(y, mon, d, digits(b, 12, 2)?, digits(b, 15, 2)?, 0)
    })?;
    Some(minute + seconds(b, 18)? - zone(&b[21..])? * NANOS)
}

/// RFC 3339 `2026-11-30T23:28:41.206599Z` (or `+01:00`; `t`/space and `z` accepted), as
/// tracing-subscriber's JSON lines write it.
pub fn parse_rfc3339(b: &[u8]) -> Option<UnixNanos> {
    if b.len() < 20 || b[16] != b':' {
        return None;
    }
    let mut key = [0; 17];
    key[..16].copy_from_slice(&b[..16]);
    let minute = memo(key, || {
        if b[4] != b'-' || b[7] != b'-' || b[13] != b':' || !matches!(b[10], b'T' | b't' | b' ') {
            return None;
        }
        let (y, mo, d) = (digits(b, 0, 4)?, digits(b, 5, 2)?, digits(b, 8, 2)?);
        instant(y, mo, d, digits(b, 11, 2)?, digits(b, 14, 2)?, 0)
    })?;
    let t = minute + seconds(b, 17)?;
    // The fraction in one pass: up to nine digits kept (nanoseconds), further ones dropped.
    let (mut at, mut frac, mut kept) = (19, 0, 0);
    if b[at] == b'.' {
        at += 1;
        while let Some(d) = b.get(at).map(|c| c.wrapping_sub(b'0')).filter(|&d| d <= 9) {
            if kept < 9 {
                frac = frac * 10 + i64::from(d);
                kept += 1;
            }
            at += 1;
        }
        if at == 20 {
            return None;
        }
    }
    const SCALE: [i64; 10] = [
        NANOS,
        100_000_000,
        10_000_000,
        1_000_000,
        100_000,
        10_000,
        1_000,
        100,
        10,
        1,
    ];
    let offset = match &b[at..] {
        [b'Z' | b'z'] => 0,
        z => zone(z)?,
    };
    Some(t + frac * SCALE[kept] - offset * NANOS)
}

/// `2026-11-30T23:28:00Z`: a moment as the report prints it (UTC, whole seconds).
pub fn format_utc(t: UnixNanos) -> String {
    let secs = t.div_euclid(NANOS);
    let (days, s) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2000-10-10T20:55:36Z, the Apache documentation's example moment.
    const APACHE_EXAMPLE: i64 = 971_211_336 * NANOS;

    /// The years' edges: inside parse, outside are malformed (no overflow, no wrap).
    #[test]
    fn years_outside_what_nanoseconds_hold_are_malformed() {
        for (clf, ok) in [
            (&b"01/Jan/1700:00:00:00 +2359"[..], true),
            (b"31/Dec/2200:23:59:60 -2359", true),
            (b"31/Dec/1699:23:59:59 +0000", false),
            (b"01/Jan/2201:00:00:00 +0000", false),
            (b"30/Nov/2300:09:00:00 +0000", false),
            (b"30/Nov/9999:09:00:00 +0000", false),
        ] {
            assert_eq!(
                parse_clf(clf).is_some(),
                ok,
                "{}",
                String::from_utf8_lossy(clf)
            );
        }
        assert!(parse_rfc3339(b"2200-12-31T23:59:60.999999999-23:59").is_some());
        assert!(parse_rfc3339(b"2300-01-01T00:00:00Z").is_none());
    }

    #[test]
    fn clf_with_zones() {
        assert_eq!(
            parse_clf(b"10/Oct/2000:13:55:36 -0700"),
            Some(APACHE_EXAMPLE)
        );
        assert_eq!(
            parse_clf(b"10/Oct/2000:22:25:36 +0130"),
            Some(APACHE_EXAMPLE)
        );
        assert_eq!(
            parse_clf(b"10/Oct/2000:20:55:36 +0000"),
            Some(APACHE_EXAMPLE)
        );
    }

    #[test]
    fn clf_rejects_nonsense() {
        for bad in [
            &b"10/Oct/2000:13:55:36"[..],
            b"10/Foo/2000:13:55:36 -0700",
            b"10/Oct/2000:25:55:36 -0700",
            b"10/Oct/2000:13:55:36 0700x",
            b"1x/Oct/2000:13:55:36 -0700",
            b"10/Oct/2000:13:55:36 -07000",
        ] {
            assert_eq!(parse_clf(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn rfc3339_with_zones_and_fractions() {
        assert_eq!(parse_rfc3339(b"2000-10-10T20:55:36Z"), Some(APACHE_EXAMPLE));
        assert_eq!(
            parse_rfc3339(b"2000-10-10T13:55:36-07:00"),
            Some(APACHE_EXAMPLE)
        );
        assert_eq!(
            parse_rfc3339(b"2000-10-10 22:25:36.5+01:30"),
            Some(APACHE_EXAMPLE + NANOS / 2)
        );
        assert_eq!(
            parse_rfc3339(b"2000-10-10t20:55:36.000001z"),
            Some(APACHE_EXAMPLE + 1_000)
        );
        // Beyond nanoseconds, digits are dropped rather than refused.
        assert_eq!(
            parse_rfc3339(b"2000-10-10T20:55:36.1234567891Z"),
            Some(APACHE_EXAMPLE + 123_456_789)
        );
    }

    #[test]
    fn rfc3339_rejects_nonsense() {
        for bad in [
            &b"2000-10-10T20:55:36"[..],
            b"2000-13-10T20:55:36Z",
            b"2000-10-10T20:55:36.Z",
            b"2000-10-10T20:55:36+0100x",
            b"2000/10/10T20:55:36Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn the_minute_memo_changes_no_answer() {
        let stamps: [&[u8]; 8] = [
            b"2000-10-10T20:55:36Z",
            b"2000-10-10T20:55:61Z",
            b"2000-10-10T20:55:60.5Z",
            b"2000-13-10T20:55:36Z",
            b"2000-10-10t20:55:36Z",
            b"10/Oct/2000:20:55:36 +0000",
            b"10/Oct/2000:20:55:36 +0000x",
            b"10/Oct/2000:20:55:99 +0000",
        ];
        let parse = |b: &[u8]| match b[2] {
            b'/' => parse_clf(b),
            _ => parse_rfc3339(b),
        };
        let first: Vec<_> = stamps.iter().map(|b| parse(b)).collect();
        assert_eq!(first[0], Some(APACHE_EXAMPLE));
        assert_eq!(
            first[1..4],
            [None, Some(APACHE_EXAMPLE + 24 * NANOS + NANOS / 2), None]
        );
        // Every order of pairs: the memo of one stamp's minute never changes another's answer.
        for (i, a) in stamps.iter().enumerate() {
            for (j, b) in stamps.iter().enumerate() {
                assert_eq!((parse(a), parse(b)), (first[i], first[j]));
            }
        }
    }

    #[test]
    fn formats_back_to_utc() {
        assert_eq!(format_utc(APACHE_EXAMPLE + 999), "2000-10-10T20:55:36Z");
        assert_eq!(format_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_utc(-NANOS), "1969-12-31T23:59:59Z");
        let leap_day = parse_rfc3339(b"2024-02-29T12:00:00Z").unwrap();
        assert_eq!(format_utc(leap_day), "2024-02-29T12:00:00Z");
    }
}
