//! Property tests over every parser that reads user text or store data:
//! whatever the input, no panic, and what is accepted keeps its promises.
//!
//! Each property runs `ELECT_FUZZ_CASES` cases (default 1000) in the normal
//! test suite; raise it for a longer search. Failures that proptest finds are
//! kept in `proptest-regressions/` and replayed first on every run;
//! `REGRESSIONS` below keeps hand-picked nasty inputs.

use std::path::Path;

use proptest::prelude::*;

use crate::cli::parse::{parse_duration, parse_signal};
use crate::store::file::{check_name, stem};
use crate::store::{HolderRecord, Location, Settings, check_lock_name};

/// How many cases each property runs, here and in the other modules' property tests.
pub(crate) fn config() -> ProptestConfig {
    let cases = std::env::var("ELECT_FUZZ_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(1000);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Inputs that once broke a parser somewhere, or easily could.
const REGRESSIONS: &[&str] = &[
    "",
    " ",
    "\0",
    "/",
    "//",
    "..",
    "../..",
    "a/../b",
    "%2F",
    "etcd://",
    "etcd://@",
    "etcd://:@:",
    "etcd://[",
    "etcd://[::1",
    "etcd://a:99999",
    "etcd://a:-1",
    "file:",
    "file://",
    "file:///",
    "file:?",
    "file:/x?network-fs=ok?x",
    "etcds://u:p@",
    "1e400s",
    "18446744073709551616s",
    "9999999999999999999999h",
    "-0s",
    "0x10s",
    "1s1s",
    "SIG",
    "SIGSIG",
    "2147483648",
    "\u{202e}evil",
    "a\u{0}b",
    "😀",
    "{\"identity\":1}",
    "{\"pid\":-1}",
    "null",
    "[]",
];

/// Properties, each checked on the regressions and on random input.
fn duration_ok(text: &str) {
    if let Ok(d) = parse_duration(text) {
        assert!(d.as_secs() <= 366 * 24 * 3600, "{text:?} gave {d:?}");
    }
}

fn signal_ok(text: &str) {
    let _ = parse_signal(text);
}

fn lock_name_ok(text: &str) {
    if check_lock_name(text).is_ok() && check_name(text).is_ok() {
        let stem = stem(text);
        assert!(
            !stem.contains('/') && !stem.contains('\0') && stem != "." && stem != "..",
            "{text:?}"
        );
        let dir = Path::new("/store");
        assert_eq!(
            dir.join(format!("{stem}.lock")).parent(),
            Some(dir),
            "{text:?} escapes"
        );
        assert!(stem.len() + ".holder.tmp".len() <= 255);
    }
}

fn store_url_ok(text: &str) {
    match Location::parse(text, &Settings::default()) {
        Ok(location) => {
            let shown = location.to_string();
            // A password in the URL never shows.
            let password = text
                .split_once("://")
                .and_then(|(_, rest)| rest.rsplit_once('@'))
                .and_then(|(userinfo, _)| userinfo.split_once(':'))
                .map(|(_, password)| password);
            if let Some(password) = password.filter(|p| !p.is_empty()) {
                assert!(
                    !shown.contains(&format!(":{password}@")),
                    "{text:?} shows {shown:?}"
                );
            }
            // What elect hands to the command parses back to the same place.
            let again = Location::parse(&shown, &Settings::default())
                .unwrap_or_else(|e| panic!("{shown:?}: {e}"));
            assert_eq!(again.to_string(), shown);
        }
        Err(e) => assert!(!e.message.is_empty()),
    }
}

fn holder_record_ok(bytes: &[u8]) {
    let _ = HolderRecord::from_json(bytes);
}

#[test]
fn regressions() {
    for text in REGRESSIONS {
        duration_ok(text);
        signal_ok(text);
        lock_name_ok(text);
        store_url_ok(text);
        holder_record_ok(text.as_bytes());
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn durations(text in any::<String>(), number in any::<u64>(), unit in "(ns|us|ms|s|m|h|d|w|y|[a-z]{0,3})") {
        duration_ok(&text);
        duration_ok(&format!("{number}{unit}"));
    }

    #[test]
    fn signals(text in any::<String>(), n in any::<i32>()) {
        signal_ok(&text);
        signal_ok(&n.to_string());
    }

    #[test]
    fn lock_names(text in any::<String>(), shaped in "[/.a-z%_-]{0,12}(/[.a-z]{0,3}){0,4}") {
        lock_name_ok(&text);
        lock_name_ok(&shaped);
    }

    #[test]
    fn store_urls(
        text in any::<String>(),
        scheme in "(etcd|etcds|http|https|file|zk|)",
        userinfo in "([a-z]{0,4}(:[a-z@:]{0,4})?@)?",
        hosts in "(\\[?[a-z0-9.:]{0,8}\\]?(:[0-9]{0,6})?,?){0,3}",
        query in "(\\?[a-z=-]{0,14})?",
    ) {
        store_url_ok(&text);
        store_url_ok(&format!("{scheme}://{userinfo}{hosts}"));
        store_url_ok(&format!("{scheme}:/{hosts}{query}"));
    }

    #[test]
    fn holder_records(bytes in any::<Vec<u8>>(), identity in any::<String>(), pid in any::<u32>(), command in any::<Vec<String>>()) {
        holder_record_ok(&bytes);
        let record = HolderRecord { identity, hostname: "h".into(), pid, command, started: "2026-01-01T00:00:00Z".into(), acquired: None, grace_ms: None, ttl_ms: None, break_request: None, shard: None };
        prop_assert_eq!(HolderRecord::from_json(record.to_json().as_bytes()), Some(record));
    }
}
