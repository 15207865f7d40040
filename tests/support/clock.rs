//! Time as the tests measure it, and a server's wall clock shifted by
//! libfaketime ([`skewed_clock`], [`step_clock`]).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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
fn write_clock(path: &Path, offset: &str) {
    let next = path.with_extension("next");
    std::fs::write(&next, format!("{offset}\n")).unwrap();
    std::fs::set_permissions(&next, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::rename(&next, path).unwrap();
}

/// Seconds of an offset in faketime's form: `+1h`, `-1d`, `+30m`, `+0`.
fn faketime_secs(offset: &str) -> f64 {
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

/// What makes a server's wall clock `offset` (faketime's form: `+1d`,
/// `-2h`) away from the machine's: libfaketime preloaded, the offset read
/// from a clock file (its path, returned for [`step_clock`]) on every look
/// at the clock, so that the clock moves while the server runs. Its
/// monotonic clock is left alone. `server` names the clock file.
pub fn skewed_clock(server: &str, offset: &str) -> (PathBuf, Vec<(String, String)>) {
    static CLOCKS: AtomicUsize = AtomicUsize::new(0);
    let library = [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib",
    ]
    .iter()
    .map(|dir| PathBuf::from(dir).join("faketime/libfaketime.so.1"))
    .find(|path| path.exists())
    .expect("libfaketime not found: install Debian's faketime package (apt-get install faketime)");
    let clock = std::env::temp_dir().join(format!(
        "elect-test-{server}-clock-{}-{}",
        std::process::id(),
        CLOCKS.fetch_add(1, Ordering::Relaxed)
    ));
    write_clock(&clock, offset);
    let env = vec![
        ("LD_PRELOAD".into(), library.display().to_string()),
        (
            "FAKETIME_TIMESTAMP_FILE".into(),
            clock.display().to_string(),
        ),
        ("FAKETIME_NO_CACHE".into(), "1".into()),
        ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
    ];
    (clock, env)
}

/// Step the clock of [`skewed_clock`] to `offset` from the machine's
/// (faketime's form: `+1h`, `-1d`, `+0`); returns once `skew`, the
/// server's own clock less the machine's in seconds, shows it.
pub fn step_clock(clock: &Path, offset: &str, skew: impl Fn() -> f64) {
    write_clock(clock, offset);
    let wanted = faketime_secs(offset);
    let give_up = Instant::now() + 10 * SECOND;
    loop {
        let skew = skew();
        if (skew - wanted).abs() < 60.0 {
            return;
        }
        assert!(
            Instant::now() < give_up,
            "the server's clock is {skew:.0} s off, not {offset}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
