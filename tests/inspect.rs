//! `elect status` of etcdctl's holders, the live waiting line and JSON
//! logs. What `status`, `list`, `check` and `break` show of elect's own
//! holders, on every store, is in tests/behaviour.rs.

mod support;

use std::process::Command;

use serde_json::Value;
use support::inspect::status;
use support::{Etcd, Running, SECOND, TempDir, elect, elect_run, hold};

#[test]
fn status_shows_holders_that_etcdctl_started() {
    let etcd = Etcd::start();
    let dir = TempDir::new("inspect-etcdctl");
    let release = dir.join("release");
    let script = format!(
        "echo held; while [ ! -e {} ]; do sleep 0.01; done",
        release.display()
    );
    let mut etcdctl = etcd.etcdctl_command();
    etcdctl.args(["lock", "theirs", "--", "sh", "-c", &script]);
    let mut theirs = Running::spawn(etcdctl);
    theirs.expect_line("held", 10 * SECOND);
    let (code, out) = status(&etcd.url(), "theirs", true);
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["held"], true);
    assert!(v["token"].as_u64().unwrap() > 0);
    assert!(v["holder"].is_null(), "etcdctl records no holder: {v}");
    assert!(v["ttl_left_ms"].as_u64().unwrap() > 0);
    std::fs::write(&release, "").unwrap();
    assert!(theirs.wait(10 * SECOND).success());
}

#[test]
fn the_live_waiting_line_shows_on_a_terminal_only() {
    let dir = TempDir::new("inspect-live");
    let (mut holder, token) = hold(&dir.url(), "live", &["--identity", "first-holder"]);
    let elect_bin = env!("CARGO_BIN_EXE_elect");
    // `script` runs the waiter on a pseudo-terminal and records what it shows.
    let typescript = dir.join("typescript");
    let waiter_cmd = format!(
        "{elect_bin} run --store {} --lock live -- echo acquired",
        dir.url()
    );
    let mut waiter = Running::spawn({
        let mut c = Command::new("script");
        c.args(["-qfec", &waiter_cmd]).arg(&typescript);
        c
    });
    let give_up = std::time::Instant::now() + 10 * SECOND;
    while !std::fs::read_to_string(&typescript)
        .unwrap_or_default()
        .contains("waiting for lock live")
    {
        assert!(
            std::time::Instant::now() < give_up,
            "no live line on the terminal"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    holder.send_line("done");
    assert_eq!(waiter.wait_code(10 * SECOND), 0);
    let shown = std::fs::read_to_string(&typescript).unwrap();
    assert!(
        shown.contains(&format!("held with token {token} by first-holder")),
        "{shown:?}"
    );
    assert!(
        shown.contains("\r\x1b[Kacquired"),
        "the line is erased when the lock is acquired: {shown:?}"
    );

    // Without a terminal: not a byte of it.
    let (mut holder, _) = hold(&dir.url(), "live", &[]);
    let mut waiter = Running::spawn(elect_run(&dir.url(), "live", &["-v"], "echo acquired"));
    waiter.expect_stderr("waiting for the lock", 10 * SECOND);
    // Nothing to wait for when checking that something does not appear:
    // give the line time for a redraw or two.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    holder.send_line("done");
    assert_eq!(waiter.wait_code(10 * SECOND), 0);
    let seen = waiter.stderr_seen.join("\n");
    assert!(
        !seen.contains("\x1b[K") && !seen.contains("waiting for lock"),
        "{seen:?}"
    );
}

#[test]
fn json_logs_are_one_object_per_line() {
    let dir = TempDir::new("inspect-json");
    let out = elect()
        .args([
            "--log-format",
            "json",
            "-v",
            "run",
            "--store",
            &dir.url(),
            "--lock",
            "j",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stderr).unwrap();
    assert!(text.lines().count() >= 3, "{text}");
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(
            v["time"].is_string() && v["level"].is_string() && v["message"].is_string(),
            "{line}"
        );
    }
    assert!(text.contains("acquired lock j with token 1"));
}

/// `since` is when the holder got the lock, `queued` when it joined the
/// queue: for a holder that waited, they differ.
fn since_is_when_the_lock_was_got(store: &str) {
    let (mut first, _) = hold(store, "since", &[]);
    let mut second = Running::spawn(elect_run(store, "since", &[], support::HOLD));
    // Until the second has queued, and a second more has passed on the wall
    // clock the times are written in (to the second).
    let give_up = std::time::Instant::now() + 10 * SECOND;
    let queued = loop {
        let (_, out) = status(store, "since", true);
        let v: Value = serde_json::from_str(&out).unwrap();
        if v["waiting"].as_u64() == Some(1) {
            break std::time::SystemTime::now();
        }
        assert!(
            std::time::Instant::now() < give_up,
            "the second never queued"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    while queued.elapsed().unwrap() < std::time::Duration::from_millis(1100) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    first.send_line("done");
    second.expect_line("token", 10 * SECOND);
    // etcd records the time a second after the lock was got.
    let give_up = std::time::Instant::now() + 5 * SECOND;
    loop {
        let (_, out) = status(store, "since", true);
        let v: Value = serde_json::from_str(&out).unwrap();
        let holder = &v["holder"];
        if holder["since"] != holder["queued"] {
            assert!(holder["since"].as_str() > holder["queued"].as_str(), "{v}");
            break;
        }
        assert!(
            std::time::Instant::now() < give_up,
            "since stayed the queue time: {v}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    second.send_line("done");
    assert_eq!(second.wait_code(10 * SECOND), 0);
}

#[test]
fn since_is_when_the_lock_was_got_on_etcd() {
    let etcd = Etcd::start();
    since_is_when_the_lock_was_got(&etcd.url());
}

#[test]
fn since_is_when_the_lock_was_got_on_the_file_store() {
    let dir = TempDir::new("inspect-since");
    since_is_when_the_lock_was_got(&dir.url());
}
