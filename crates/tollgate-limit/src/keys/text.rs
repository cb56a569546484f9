//! Text that goes into keys, written by hand byte for byte as the general code writes it:
//! the client address part (as std's and ipnet's `Display`) and keyed hashes (as
//! `spec::keyed_hash`).
//!
//! Why by hand: `Display` for addresses goes through the formatter's width and padding
//! machinery and one `write!` per group. Under callgrind (`tollgate replay`) that cost
//! about 2 000 instructions per IPv4 client and about 1 870 per IPv6 client (`ipnet`'s
//! `Display` writes the address and the length through two more `write!`s), the largest
//! single cost of building a key; these functions take a few dozen to a few hundred. The
//! tests compare them with the general code on every edge they have.

use std::net::{Ipv4Addr, Ipv6Addr};

use ipnet::Ipv6Net;

/// Dotted-quad text of `ip`, as `Display` writes it.
pub(super) fn ipv4_text(ip: Ipv4Addr) -> String {
    let mut s = String::with_capacity(15);
    push_ipv4(&mut s, ip);
    s
}

fn push_ipv4(s: &mut String, ip: Ipv4Addr) {
    for (i, o) in ip.octets().into_iter().enumerate() {
        if i > 0 {
            s.push('.');
        }
        if o >= 100 {
            s.push(char::from(b'0' + o / 100));
        }
        if o >= 10 {
            s.push(char::from(b'0' + o / 10 % 10));
        }
        s.push(char::from(b'0' + o % 10));
    }
}

/// `addr/len` of `net`, as ipnet's `Display` writes it (std's text of the address, then the
/// prefix length).
pub(super) fn ipv6_net_text(net: Ipv6Net) -> String {
    let mut s = String::with_capacity(44);
    push_ipv6(&mut s, net.addr());
    s.push('/');
    push_decimal(&mut s, net.prefix_len());
    s
}

/// std's text of `ip` (RFC 5952): lower-case hex groups without leading zeros, the first
/// longest run of two or more zero groups as `::`, and IPv4-mapped addresses as
/// `::ffff:a.b.c.d`.
fn push_ipv6(s: &mut String, ip: Ipv6Addr) {
    if let Some(v4) = ip.to_ipv4_mapped() {
        s.push_str("::ffff:");
        return push_ipv4(s, v4);
    }
    let groups = ip.segments();
    // The first longest run of zero groups: (start, length).
    let (mut best, mut run) = ((0, 0), (0, 0));
    for (i, &g) in groups.iter().enumerate() {
        match g {
            0 if run.1 == 0 => run = (i, 1),
            0 => run.1 += 1,
            _ => run.1 = 0,
        }
        if run.1 > best.1 {
            best = run;
        }
    }
    if best.1 > 1 {
        push_groups(s, &groups[..best.0]);
        s.push_str("::");
        push_groups(s, &groups[best.0 + best.1..]);
    } else {
        push_groups(s, &groups);
    }
}

/// Groups in hex, `:` between them.
fn push_groups(s: &mut String, groups: &[u16]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for (i, &g) in groups.iter().enumerate() {
        if i > 0 {
            s.push(':');
        }
        // Digits from the highest non-zero nibble (one digit for zero).
        let digits = (16 - g.leading_zeros() as usize).div_ceil(4).max(1);
        for d in (0..digits).rev() {
            s.push(char::from(HEX[usize::from(g >> (4 * d) & 0xf)]));
        }
    }
}

fn push_decimal(s: &mut String, n: u8) {
    if n >= 100 {
        s.push(char::from(b'0' + n / 100));
    }
    if n >= 10 {
        s.push(char::from(b'0' + n / 10 % 10));
    }
    s.push(char::from(b'0' + n % 10));
}

/// `spec::keyed_hash` (SipHash-1-3, 128 bits, in lower-case hex), with the hex written
/// here: `hex::encode` collects it a `char` at a time through `FromIterator`, ~1 000
/// instructions a hash under callgrind (an account-keyed request hashes its account once),
/// against ~200. The tests hold it to `spec::keyed_hash`.
pub(super) fn keyed_hash(secret: &[u8; 16], value: &[u8]) -> String {
    use siphasher::sip128::{Hasher128, SipHasher13};
    use std::hash::Hasher;
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut h = SipHasher13::new_with_key(secret);
    h.write(value);
    let mut s = String::with_capacity(32);
    for b in h.finish128().as_bytes() {
        s.push(char::from(HEX[usize::from(b >> 4)]));
        s.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyed_hash_is_configs() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for len in 0..100 {
            let value: Vec<u8> = (0..len).map(|i| (x >> (i % 8 * 8)) as u8).collect();
            let secret: [u8; 16] = std::array::from_fn(|i| (x >> (i % 8 * 8)) as u8 ^ i as u8);
            assert_eq!(
                keyed_hash(&secret, &value),
                crate::spec::keyed_hash(&secret, &value)
            );
            x = x.rotate_left(7) ^ 0x2545_f491_4f6c_dd1d;
        }
    }

    #[test]
    fn ipv4_text_is_what_display_writes() {
        // Every octet value in every position, and the edges of each digit count.
        for o in 0..=255u8 {
            for ip in [
                [o, 0, 0, 0],
                [1, o, 2, 3],
                [255, 10, o, 99],
                [9, 100, 200, o],
            ] {
                let ip = Ipv4Addr::from(ip);
                assert_eq!(ipv4_text(ip), ip.to_string());
            }
        }
    }

    #[test]
    fn ipv6_net_text_is_what_display_writes() {
        let mut cases: Vec<Ipv6Addr> = [
            "::",
            "::1",
            "1::",
            "::ffff:192.0.2.1",
            "::ffff:0:0",
            "::192.0.2.1",
            "64:ff9b::192.0.2.1",
            "1:0:1:0:1:0:1:0",
            "1:0:0:1:0:0:1:1",
            "1:0:0:1:0:0:0:1",
            "0:0:1:0:0:1:0:0",
            "2001:db8:8d4::c",
            "ffff:fff:ff:f:1000:100:10:1",
        ]
        .iter()
        .map(|a| a.parse().unwrap())
        .collect();
        // Every pattern of zero and non-zero groups, with group values of every width.
        let widths = [0x1, 0x1f, 0xabc, 0xffff, 0x10, 0x100, 0x1000];
        for zeros in 0..=255u8 {
            let groups: [u16; 8] = std::array::from_fn(|i| match zeros >> i & 1 {
                1 => 0,
                _ => widths[(i + usize::from(zeros)) % widths.len()],
            });
            cases.push(groups.into());
        }
        for ip in cases {
            for len in [0, 1, 48, 56, 64, 95, 96, 100, 127, 128] {
                let net = Ipv6Net::new(ip, len).unwrap();
                assert_eq!(ipv6_net_text(net), net.to_string(), "{ip} /{len}");
                let trunc = net.trunc();
                assert_eq!(ipv6_net_text(trunc), trunc.to_string(), "{ip} /{len}");
            }
        }
    }
}
