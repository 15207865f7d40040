//! `elect status` and `elect check` as a script would call them, and a
//! lock for them to look at.

use super::SECOND;
use std::path::Path;

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

/// Assert that `elect check`, `checkpoint put` and `checkpoint get`, run
/// inside the command of `elect run` (started in `cwd` with `flags` and
/// `env`) from another directory, reach the store, and that `secret`
/// shows in neither the command's environment nor its arguments.
pub fn reached_from_inside_the_command(
    store: &str,
    lock: &str,
    (cwd, flags): (&Path, &[&str]),
    env: &[(&str, &str)],
    secret: &str,
) {
    let seen = super::TempDir::new("inside");
    let elect_path = env!("CARGO_BIN_EXE_elect");
    let script = format!(
        "env > {0}/env; cat /proc/$$/cmdline > {0}/cmdline; cd /; \
         {elect_path} check && {elect_path} checkpoint put resumed-here && {elect_path} checkpoint get",
        seen.0.display()
    );
    let mut command = super::elect_run(store, lock, flags, &script);
    command.current_dir(cwd);
    for (k, v) in env {
        command.env(k, v);
    }
    let out = command.output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    let case = format!("{flags:?} {env:?}");
    assert_eq!(out.status.code(), Some(0), "{case}: {stdout}{stderr}");
    assert!(stdout.contains("resumed-here"), "{case}: {stdout}{stderr}");
    for f in ["env", "cmdline"] {
        let text = String::from_utf8_lossy(&std::fs::read(seen.join(f)).unwrap()).into_owned();
        assert!(
            !text.contains(secret),
            "{case}: the password is in the command's {f}"
        );
    }
}

/// What a person with read rights only sees through `store`: status,
/// history and list read `looked_at` (free, run once, succeeded) and
/// `held`; a break of `held` is refused, 78, its last line holding each of
/// `refused`.
pub fn a_person_who_only_looks(store: &str, looked_at: &str, held: &str, refused: &[&str]) {
    let look = |args: &[&str]| {
        let out = elect()
            .args(args)
            .args(["--store", store])
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, err) = look(&["status", "--lock", looked_at]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        out.contains("last run:") && out.contains("succeeded"),
        "{out}"
    );
    let (code, out, err) = look(&["history", "--lock", looked_at]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("succeeded"), "{out}");
    let (code, out, err) = look(&["list"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains(looked_at) && out.contains(held), "{out}");
    // break asks first, and is refused with what a role that may needs.
    let (code, _, err) = look(&["break", "--yes", "--lock", held]);
    assert_eq!(code, Some(78), "{err}");
    let last = err.lines().last().unwrap_or_default();
    for text in refused {
        assert!(last.contains(text), "{text}: {err}");
    }
}
