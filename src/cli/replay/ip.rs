//! Client addresses as logs write them, to [`IpAddr`]: both parsers (`parse.rs`, `json.rs`)
//! read one per line. The common forms take a one-pass path; std's parser decides the rest.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// An address as logged: IPv4, IPv6, or IPv6 in brackets.
pub fn parse_ip(b: &[u8]) -> Option<IpAddr> {
    if let Some(v4) = plain_ipv4(b) {
        return Some(IpAddr::V4(v4));
    }
    let b = match b {
        [b'[', inner @ .., b']'] => inner,
        _ => b,
    };
    if let Some(v6) = plain_ipv6(b) {
        return Some(IpAddr::V6(v6));
    }
    std::str::from_utf8(b).ok()?.parse().ok()
}

/// IPv6 as hex groups with at most one `::`, in one pass: std's parser tries an embedded
/// IPv4 address at every group and cost ~1 800 instructions an address (a quarter of a
/// parsed line where a log is a quarter IPv6). Whatever else — an embedded IPv4 address,
/// a zone, a malformed form — is left to std (`None`), so std decides every odd case.
fn plain_ipv6(b: &[u8]) -> Option<Ipv6Addr> {
    // Groups before the `::` (or all of them) and after it.
    let (mut head, mut tail) = ([0u16; 8], [0u16; 8]);
    let (mut heads, mut tails, mut gap) = (0, 0, false);
    let mut i = 0;
    if b.starts_with(b"::") {
        (gap, i) = (true, 2);
    }
    while i < b.len() {
        let start = i;
        let mut v = 0u16;
        while let Some(d) = b.get(i).and_then(|&c| (c as char).to_digit(16)) {
            if i - start == 4 {
                return None;
            }
            v = v << 4 | d as u16;
            i += 1;
        }
        if i == start || heads + tails == 8 {
            return None;
        }
        match gap {
            false => (head[heads], heads) = (v, heads + 1),
            true => (tail[tails], tails) = (v, tails + 1),
        }
        match &b[i..] {
            [] => break,
            [b':', b':', ..] if !gap => (gap, i) = (true, i + 2),
            [b':', _, ..] => i += 1,
            _ => return None,
        }
    }
    match gap {
        // `::` stands for at least one zero group.
        true if heads + tails <= 7 => {
            head[8 - tails..].copy_from_slice(&tail[..tails]);
        }
        false if heads == 8 => {}
        _ => return None,
    }
    Some(head.into())
}

/// The common dotted quad without leading zeros, in one pass (std's parser cost ~5 % of a
/// parsed line, and a split-by-dot version of this one ~150 instructions); anything else
/// — IPv6, or a form std may judge differently — goes to std.
fn plain_ipv4(b: &[u8]) -> Option<Ipv4Addr> {
    let mut octets = [0u8; 4];
    let mut i = 0;
    for (n, o) in octets.iter_mut().enumerate() {
        if n > 0 {
            if b.get(i) != Some(&b'.') {
                return None;
            }
            i += 1;
        }
        let start = i;
        let mut v = 0u16;
        while let Some(d) = b.get(i).map(|c| c.wrapping_sub(b'0')).filter(|&d| d <= 9) {
            if i - start == 3 {
                return None;
            }
            v = v * 10 + u16::from(d);
            i += 1;
        }
        if i == start || (i - start > 1 && b[start] == b'0') {
            return None;
        }
        *o = u8::try_from(v).ok()?;
    }
    (i == b.len()).then_some(octets.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ipv4_fast_path_agrees_with_std() {
        for a in [
            "0.0.0.0",
            "10.1.2.3",
            "255.255.255.255",
            "256.1.1.1",
            "01.2.3.4",
            "1.2.3",
            "1.2.3.4.5",
            "1..2.3",
            "1.2.3.4 ",
            "a.b.c.d",
            "::1",
            "1.2.3.-4",
            "",
        ] {
            let want = a.parse::<IpAddr>().ok();
            assert_eq!(parse_ip(a.as_bytes()), want, "{a:?}");
        }
    }

    /// `n` strings of 1 to `max_len` characters from `chars` (xorshift, fixed `seed`).
    fn random_strings(mut x: u64, n: usize, max_len: u64, chars: &[char]) -> Vec<String> {
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        (0..n)
            .map(|_| {
                let len = next() % max_len + 1;
                (0..len)
                    .map(|_| chars[(next() % chars.len() as u64) as usize])
                    .collect()
            })
            .collect()
    }

    #[test]
    fn the_ipv4_fast_path_agrees_with_std_on_any_short_string() {
        let chars = ['0', '1', '2', '5', '9', '.', '.', 'a', ':'];
        for s in random_strings(0x9e37_79b9_7f4a_7c15, 50_000, 17, &chars) {
            let want = s.parse::<Ipv4Addr>().ok();
            let fast = plain_ipv4(s.as_bytes());
            assert!(
                fast.is_none() || fast == want,
                "{s:?}: {fast:?} vs {want:?}"
            );
            assert_eq!(parse_ip(s.as_bytes()), s.parse::<IpAddr>().ok(), "{s:?}");
        }
        assert!(
            plain_ipv4(b"10.0.11.173").is_some(),
            "the common form is fast"
        );
    }

    #[test]
    fn the_ipv6_fast_path_agrees_with_std() {
        let mut cases: Vec<String> = [
            "::",
            "::1",
            "1::",
            "1:2:3:4:5:6:7:8",
            "1:2:3:4:5:6:7::",
            "::2:3:4:5:6:7:8",
            "1:2:3:4:5:6:7:8:9",
            "1:2:3:4::5:6:7:8",
            "2001:DB8::7",
            "2001:db8:0:0:0:0:0:1",
            "12345::",
            "1:::2",
            "1::2::3",
            ":1::",
            "1:",
            ":",
            "",
            "::ffff:192.0.2.1",
            "fe80::1%eth0",
            "1:2:3:4:5:6:7:",
            "g::",
            "0000:0:00:000::abcd",
        ]
        .map(str::to_owned)
        .to_vec();
        // And every short string over the characters that matter.
        let chars = ['0', '1', 'f', 'A', ':', ':', ':', '.', 'g'];
        cases.extend(random_strings(0x2545_f491_4f6c_dd1d, 20_000, 14, &chars));
        for a in cases {
            let want = a.parse::<Ipv6Addr>().ok();
            let fast = plain_ipv6(a.as_bytes());
            assert!(
                fast.is_none() || fast == want,
                "{a:?}: {fast:?} vs {want:?}"
            );
        }
        assert!(
            plain_ipv6(b"2001:db8:8d4::c").is_some(),
            "the common form is fast"
        );
    }
}
