//! Time as the tests measure it, and as faketime shifts a server's clock.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
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

/// Write faketime's `offset` to `path` in one rename, readable by the
/// server: a backend never reads half a line.
pub fn write_clock(path: &Path, offset: &str) {
    let next = path.with_extension("next");
    std::fs::write(&next, format!("{offset}\n")).unwrap();
    std::fs::set_permissions(&next, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::rename(&next, path).unwrap();
}

/// Seconds of an offset in faketime's form: `+1h`, `-1d`, `+30m`, `+0`.
pub fn faketime_secs(offset: &str) -> f64 {
    let (number, unit) = offset.split_at(offset.len() - 1);
    let (number, scale) = match unit {
        "s" => (number, 1.0),
        "m" => (number, 60.0),
        "h" => (number, 3600.0),
        "d" => (number, 86400.0),
        _ => (offset, 1.0),
    };
    number.parse::<f64>().unwrap() * scale
}
