//! The one rule for a value a key is made of: it is the single byte string every mainstream
//! reader agrees on, or the request is refused as ambiguous. A reader that trims sees
//! `victim`, `victim\u{a0}` and `\u{3000}victim` as one identity; a key on the raw bytes
//! would give each its own budget. So a value is refused, never keyed ([`unclear`]), when:
//!
//! - **it is not UTF-8**: a latin-1 reader (WSGI hands headers to Python so, PEP 3333;
//!   servlet containers and Node.js read them so too) keeps the bytes, a UTF-8 reader with
//!   replacement (Django's query parser, .NET, `bytes.decode(errors="replace")`) folds every
//!   invalid byte to U+FFFD: `victim\xff` and `victim\xfe` would be two keys for one reading.
//! - **its first or last character is one some reader trims or no one can see**:
//!   - Unicode `White_Space` (`char::is_whitespace`): Python's `str.strip()`, Go's
//!     `strings.TrimSpace`, .NET's `String.Trim()` and JavaScript's `trim()` remove them
//!     (U+0085, U+00A0, U+1680, U+2000–U+200A, U+2028, U+2029, U+202F, U+205F, U+3000, and
//!     the ASCII ones);
//!   - controls (`char::is_control`, U+0000–U+001F and U+007F–U+009F): Java's `trim()`
//!     removes everything up to U+0020, Python's `strip()` also U+001C–U+001F, PHP's
//!     `trim()` NUL and vertical tab;
//!   - default-ignorable code points (Unicode's `Default_Ignorable_Code_Point`): zero-width
//!     spaces and joiners, bidi marks, U+FEFF (which JavaScript's `trim()` removes),
//!     variation selectors, fillers: invisible, so neither an operator reading a log nor a
//!     person reading an account name can tell the two keys apart.
//! - **for a header value, its first or last byte is `0x85` or `0xA0`**: a latin-1 reader
//!   sees U+0085 or U+00A0 there and `strip()` removes it, so `victimą` (`…\xc4\x85`) and
//!   `victimĠ` (`…\xc4\xa0`) are both `victimÄ` to a Flask app. Query and cookie values are
//!   decoded as UTF-8 by the frameworks that read them, so they are spared this one.
//!
//! Cost of the rule: a header value whose last UTF-8 character ends in byte `0x85` or
//! `0xA0` (`ą`, `Š`, `Ġ`, some CJK) is refused too.

/// Whether readers may read `value` as another string than its bytes (module docs);
/// `header` adds the latin-1 reading of header bytes.
pub(super) fn unclear(value: &[u8], header: bool) -> bool {
    let Ok(text) = std::str::from_utf8(value) else {
        return true;
    };
    let (Some(first), Some(last)) = (text.chars().next(), text.chars().next_back()) else {
        return false;
    };
    let latin1_space = |b: Option<&u8>| matches!(b, Some(0x85 | 0xA0));
    trimmable(first)
        || trimmable(last)
        || (header && (latin1_space(value.first()) || latin1_space(value.last())))
}

/// Whether some reader trims `c` or cannot see it (module docs).
pub(super) fn trimmable(c: char) -> bool {
    c.is_whitespace() || c.is_control() || default_ignorable(c)
}

/// Unicode's `Default_Ignorable_Code_Point` (DerivedCoreProperties.txt, stable since Unicode
/// 5.2 apart from additions in these reserved blocks). Written out: no crate of the
/// unicode-rs family exposes the property, and `icu_properties` would bring its data tables
/// for twenty ranges.
fn default_ignorable(c: char) -> bool {
    matches!(
        u32::from(c),
        0x00AD
            | 0x034F
            | 0x061C
            | 0x115F..=0x1160
            | 0x17B4..=0x17B5
            | 0x180B..=0x180F
            | 0x200B..=0x200F
            | 0x202A..=0x202E
            | 0x2060..=0x206F
            | 0x3164
            | 0xFE00..=0xFE0F
            | 0xFEFF
            | 0xFFA0
            | 0xFFF0..=0xFFF8
            | 0x1BCA0..=0x1BCA3
            | 0x1D173..=0x1D17A
            | 0xE0000..=0xE0FFF
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unclear_values_are_the_ones_readers_read_otherwise() {
        for v in [
            &b"victim "[..],
            b"\tvictim",
            b"victim\xa0",
            b"\x85victim",
            b"victim\xc2\xa0",
            b"victim\xc2\x85",
            b"\xe3\x80\x80victim",
            b"victim\xe2\x80\x8b",
            b"\xef\xbb\xbfvictim",
            b"victim\x1f",
            b"victim\x00",
            b"victim\x0b",
            b"victim\xe2\x81\xa0",
            b"victim\xf3\xa0\x80\x81",
        ] {
            assert!(unclear(v, true), "{v:?} as a header");
        }
        for v in [
            &b"victim"[..],
            b"vic tim",
            b"\xc3\xa9t\xc3\xa9",
            b"a\xc2\xa0b",
            b"",
        ] {
            assert!(!unclear(v, true), "{v:?}");
        }
        // Query and cookie values: U+0105 (`ą`, ending in byte 0x85) is a letter in UTF-8.
        assert!(!unclear(b"victim\xc4\x85", false) && unclear(b"victim\xc4\x85", true));
        assert!(unclear(b"victim\xc2\xa0", false));
        // No UTF-8 at all, anywhere in the value.
        for v in [
            &b"victim\xa0"[..],
            b"vic\xfftim",
            b"\xc3victim",
            b"victim\xed\xa0\x80",
        ] {
            assert!(unclear(v, false) && unclear(v, true), "{v:?}");
        }
    }

    #[test]
    fn every_white_space_and_control_is_trimmable() {
        let all = (0..=0x10FFFFu32).filter_map(char::from_u32);
        for c in all.filter(|c| c.is_whitespace() || c.is_control()) {
            let v = format!("victim{c}");
            assert!(unclear(v.as_bytes(), false), "U+{:04X}", u32::from(c));
        }
        assert!(!trimmable('a') && !trimmable('é') && !trimmable('\u{4e00}'));
    }
}
