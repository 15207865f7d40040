//! `elect status` and `elect check` as a script would call them, and a
//! lock for them to look at.

use super::SECOND;
use super::process::{Running, elect, elect_run};

/// A holder that reports its key and token, and a waiter behind it.
pub fn holder_and_waiter(store: &str, lock: &str) -> (Running, Running, String, u64) {
    let script = r#"echo "key $ELECT_KEY"; echo "token $ELECT_TOKEN"; read _line"#;
    let mut holder = Running::spawn(elect_run(
        store,
        lock,
        &["--identity", "nightly-1", "--ttl", "3s"],
        script,
    ));
    let key = holder.expect_line("key", 10 * SECOND);
    let token = holder.expect_line("token", 10 * SECOND).parse().unwrap();
    let waiter = Running::spawn(elect_run(store, lock, &[], "echo ran"));
    (holder, waiter, key, token)
}

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
