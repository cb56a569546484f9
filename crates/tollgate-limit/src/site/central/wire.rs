//! What goes over the wire to `check.lua` and back: an item's arguments as the script
//! reads them, and its reply read into results. The layout is the script's (see its head).

use super::CentralResult;
use crate::store::StoreError;

/// Arguments of one item: its 7 numbers and its slot.
pub(super) const ARGS: usize = 8;

/// One script argument, written straight into the call: no `String` per value, and whole
/// numbers (all of them in practice) printed by `itoa`, not by the float formatter, which
/// was a sixth of the gateway's instructions a central request spends beyond a local one
/// (callgrind). A whole number prints as `Display` prints it ("1", not "1.0"): check.lua
/// compares the algorithm's text.
#[derive(Debug, Clone, Copy)]
pub(super) enum ScriptArg<'a> {
    Number(f64),
    Text(&'a str),
}

impl redis::ToRedisArgs for ScriptArg<'_> {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        /// 2^53: every whole f64 below it is exactly an i64.
        const EXACT: f64 = 9_007_199_254_740_992.0;
        match *self {
            ScriptArg::Number(v) if v.fract() == 0.0 && v.abs() < EXACT => {
                out.write_arg(itoa::Buffer::new().format(v as i64).as_bytes());
            }
            ScriptArg::Number(v) => out.write_arg_fmt(v),
            ScriptArg::Text(s) => out.write_arg(s.as_bytes()),
        }
    }
}

/// 6 integers per item (admitted, committed, remaining, reset_us, wait_us, next_us), then
/// now_us: packed as little-endian 64-bit words in one string (`check.lua`'s `packed`), or
/// as that many integer replies from a store whose Lua lacks the `struct` library.
pub(super) fn decode(reply: &redis::Value, n: usize) -> Result<Vec<CentralResult>, StoreError> {
    let words = n * 6 + 1;
    let wrong = |what: String| Err(StoreError::Reply(format!("{what} for {n} keys")));
    match reply {
        redis::Value::BulkString(bytes) if bytes.len() == words * 8 => Ok(bytes
            .chunks_exact(48)
            .map(|c| {
                result(std::array::from_fn(|i| {
                    i64::from_le_bytes(c[i * 8..i * 8 + 8].try_into().expect("8 bytes"))
                }))
            })
            .collect()),
        redis::Value::Array(values) if values.len() == words => values
            .chunks_exact(6)
            .map(|c| {
                let mut w = [0; 6];
                for (w, v) in w.iter_mut().zip(c) {
                    let redis::Value::Int(i) = v else {
                        return Err(StoreError::Reply(format!("{v:?} for a number")));
                    };
                    *w = *i;
                }
                Ok(result(w))
            })
            .collect(),
        redis::Value::BulkString(bytes) => wrong(format!("{} bytes", bytes.len())),
        redis::Value::Array(values) => wrong(format!("{} values", values.len())),
        other => wrong(format!("{other:?}")),
    }
}

/// One item's six words.
fn result(w: [i64; 6]) -> CentralResult {
    let us = |v: i64| (v.max(0) as u64).saturating_mul(1_000);
    CentralResult {
        admitted: w[0] == 1,
        committed: w[1] == 1,
        remaining: w[2].max(0) as u64,
        reset_after: us(w[3]),
        wait: us(w[4]),
        next_after: us(w[5]),
    }
}

#[cfg(test)]
mod tests {
    use super::{ScriptArg, decode};
    use crate::store::StoreError;
    use redis::{ToRedisArgs, Value};

    /// The script receives exactly the text it received when every value went through
    /// `f64::to_string`: whole numbers, fractions, and numbers too large to be exact.
    #[test]
    fn arguments_print_as_display_prints_them() {
        for v in [0.0, 1.0, 5.0, 3.6e9, 1e15, 9.0e15, 0.5, 2.25, 1e17, 1.5e300] {
            let bytes = ScriptArg::Number(v).to_redis_args();
            assert_eq!(bytes, vec![v.to_string().into_bytes()], "{v}");
        }
        assert_eq!(ScriptArg::Text("-").to_redis_args(), vec![b"-".to_vec()]);
    }

    /// A reply is read item by item, microseconds into nanoseconds, negatives as zero; a
    /// reply of another shape is the store's `Reply` (the call falls back, no breaker).
    #[test]
    fn replies_are_read_item_by_item_and_wrong_shapes_refused() {
        let ints = |v: &[i64]| Value::Array(v.iter().map(|&i| Value::Int(i)).collect());
        let got = decode(&ints(&[1, 1, 19, 50, 0, 10, 0, 0, -1, 7, 3, 0, 99]), 2).unwrap();
        assert!(got[0].admitted && got[0].committed && got[0].remaining == 19);
        assert_eq!(
            (got[0].reset_after, got[0].wait, got[0].next_after),
            (50_000, 0, 10_000)
        );
        assert!(!got[1].admitted && !got[1].committed && got[1].remaining == 0);
        assert_eq!((got[1].reset_after, got[1].wait), (7_000, 3_000));
        for (reply, n) in [
            (ints(&[1, 1, 19, 50, 0, 10]), 1),
            (ints(&[1, 1, 19, 50, 0, 10, 99]), 2),
            (Value::Int(1), 1),
            (Value::Array(vec![Value::Nil; 7]), 1),
        ] {
            assert!(
                matches!(decode(&reply, n), Err(StoreError::Reply(_))),
                "{reply:?}"
            );
        }
    }
}
