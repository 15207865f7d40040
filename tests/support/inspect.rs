//! `elect status` and `elect check` as a script would call them.

use super::process::elect;

/// `elect status [--json]`: its exit code and stdout; it prints nothing else.
pub fn status(store: &str, lock: &str, json: bool) -> (i32, String) {
    let mut c = elect();
    c.args(["status", "--store", store, "--lock", lock]);
    if json {
        c.arg("--json");
    }
    let out = c.output().unwrap();
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
    )
}

/// `elect check` as the command itself would run it, with the variables it
/// was given: its exit code and stderr.
pub fn check(store: &str, lock: &str, key: &str, token: u64) -> (i32, String) {
    let out = elect()
        .arg("check")
        .env("ELECT_STORE", store)
        .env("ELECT_LOCK", lock)
        .env("ELECT_KEY", key)
        .env("ELECT_TOKEN", token.to_string())
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
