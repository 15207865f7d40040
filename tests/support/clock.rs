//! Time as the tests measure it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub const SECOND: Duration = Duration::from_secs(1);

/// Nanoseconds since the epoch on the wall clock, as `date +%s%N` prints.
/// Every process in a test runs on this one machine, so these compare.
pub fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i128
}

/// Nanoseconds as milliseconds, for messages.
pub fn ms(ns: i128) -> f64 {
    ns as f64 / 1e6
}
