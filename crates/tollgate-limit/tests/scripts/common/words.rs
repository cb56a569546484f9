//! `check.lua`'s decision replies (`check`, `batch`, `reserve`) read as the integers they
//! carry, whichever way the store sent them: little-endian 64-bit words packed in one string
//! (the script's `packed`, on every Redis with Lua's `struct` library), or integer replies.

use redis::{FromRedisValue, ParsingError, Value};

/// The reply's integers, in order (`now` last, as the script returns it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Words(pub Vec<i64>);

impl FromRedisValue for Words {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        match v {
            Value::BulkString(bytes) if bytes.len() % 8 == 0 => Ok(Words(
                bytes
                    .chunks_exact(8)
                    .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
                    .collect(),
            )),
            Value::BulkString(bytes) => {
                Err(format!("{} bytes: not whole 64-bit words", bytes.len()).into())
            }
            other => Ok(Words(Vec::<i64>::from_redis_value(other)?)),
        }
    }
}
