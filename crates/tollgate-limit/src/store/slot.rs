//! Redis Cluster slots: a script call may only touch keys of one slot, so callers group
//! their keys by slot ([`by_slot`]) and the store picks each call's node (and breaker) by
//! the slot of its first key.

use std::collections::BTreeMap;
use std::sync::OnceLock;

/// Slots of a Redis Cluster.
const SLOTS: usize = 16384;

/// Indexes of `keys` grouped by Redis Cluster slot.
pub fn by_slot<'a>(keys: impl IntoIterator<Item = &'a str>) -> BTreeMap<u16, Vec<usize>> {
    let mut groups: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
    for (i, key) in keys.into_iter().enumerate() {
        groups.entry(slot(key.as_bytes())).or_default().push(i);
    }
    groups
}

/// The Redis Cluster slot of a key: CRC16 (XMODEM) of the key, or of its `{hash tag}`.
pub fn slot(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.iter()
                .position(|&b| b == b'}')
                .filter(|&len| len > 0)
                .map(|len| &rest[..len])
        })
        .unwrap_or(key);
    crc16::State::<crc16::XMODEM>::calculate(tagged) % SLOTS as u16
}

/// A short hash tag that lands in `slot`: the smallest decimal number that does, found once
/// for all slots (about 170 000 CRCs, a few milliseconds, on a cluster's first multi-slot
/// request). Hand-written: no crate publishes this table.
pub fn slot_tag(slot: u16) -> Option<&'static str> {
    static TAGS: OnceLock<Vec<String>> = OnceLock::new();
    let tags = TAGS.get_or_init(|| {
        let mut tags = vec![String::new(); SLOTS];
        let mut left = SLOTS;
        for n in 0u32..10_000_000 {
            let tag = n.to_string();
            let s = usize::from(self::slot(tag.as_bytes()));
            if tags[s].is_empty() {
                tags[s] = tag;
                left -= 1;
                if left == 0 {
                    break;
                }
            }
        }
        tags
    });
    let tag = tags[usize::from(slot)].as_str();
    (!tag.is_empty()).then_some(tag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis() {
        // Values from `redis-cli CLUSTER KEYSLOT`.
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"{user1000}.following"), slot(b"{user1000}.followers"));
        assert_eq!(slot(b"123456789"), 12739);
    }

    #[test]
    fn every_slot_has_a_tag_that_lands_in_it() {
        for s in 0..SLOTS as u16 {
            let tag = slot_tag(s).expect("a tag for every slot");
            assert_eq!(slot(format!("tg:receipt:{{{tag}}}x").as_bytes()), s);
        }
    }
}
