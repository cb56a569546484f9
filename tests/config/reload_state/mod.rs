//! Config reload edge cases found by attacking it: what each policy's state does when a
//! reload changes its site, algorithm, key derivation or the fleet's N, and that nothing
//! old is kept alive or counted twice. Real sockets, a manual clock, no sleeps.

use std::time::Duration;

use crate::common::reload::*;
use crate::common::*;
use http::{Method, StatusCode};
use serde_json::Value;
use tollgate::limit::clock::ManualClock;

mod moves;
mod tables;
