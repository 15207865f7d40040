//! Long-running and interactive use: `--rejoin`, elect as PID 1, and
//! commands that use the terminal.

mod support;

use support::{Etcd, Running, SECOND, elect};

#[test]
fn rejoin_after_a_loss_runs_a_new_command_with_a_new_token() {
    let etcd = Etcd::start();
    let url = etcd.url();
    let script = r#"echo "token $ELECT_TOKEN"; read _line"#;
    let mut first = Running::spawn(support::elect_run(
        &url,
        "rejoin",
        &["--rejoin", "--ttl", "3s"],
        script,
    ));
    let t1: u64 = first.expect_line("token", 10 * SECOND).parse().unwrap();
    let mut second = Running::spawn(support::elect_run(&url, "rejoin", &[], script));
    etcd.wait_keys("rejoin/", 2);

    let out = elect()
        .args(["break", "--store", &url, "--lock", "rejoin", "--yes"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t2: u64 = second.expect_line("token", 10 * SECOND).parse().unwrap();
    first.expect_stderr("rejoining the queue for lock rejoin", 10 * SECOND);
    etcd.wait_keys("rejoin/", 2);

    second.send_line("done");
    assert_eq!(second.wait_code(10 * SECOND), 0);
    let t3: u64 = first.expect_line("token", 10 * SECOND).parse().unwrap();
    assert!(t1 < t2 && t2 < t3, "{t1} {t2} {t3}");
    first.send_line("done");
    assert_eq!(
        first.wait_code(10 * SECOND),
        0,
        "a command that ends well ends elect"
    );
}

#[test]
fn rejoin_always_runs_a_failed_command_again_but_not_after_a_signal_to_elect() {
    let dir = support::TempDir::new("session-always");
    let script = r#"echo "token $ELECT_TOKEN"; read line; exit $line"#;
    let mut elect = Running::spawn(support::elect_run(
        &dir.url(),
        "again",
        &["--rejoin=always"],
        script,
    ));
    let t1: u64 = elect.expect_line("token", 10 * SECOND).parse().unwrap();
    elect.send_line("3");
    elect.expect_stderr("the command exited with 3; rejoining", 10 * SECOND);
    let t2: u64 = elect.expect_line("token", 10 * SECOND).parse().unwrap();
    assert!(t2 > t1);
    elect.signal(libc::SIGTERM);
    let status = elect.wait(10 * SECOND);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        status.signal(),
        Some(libc::SIGTERM),
        "told to stop, elect stops: {status:?}"
    );
}

/// `unshare --pid --fork --mount-proc elect run ...`: elect as PID 1 of a
/// new PID namespace (needs root, as in CI).
fn as_pid_1(store: &str, lock: &str, script: &str) -> std::process::Command {
    let mut c = std::process::Command::new("unshare");
    c.args(["--pid", "--fork", "--mount-proc", "--kill-child"])
        .arg(env!("CARGO_BIN_EXE_elect"))
        .args([
            "run", "--store", store, "--lock", lock, "--", "sh", "-c", script,
        ]);
    c
}

#[test]
fn as_pid_1_elect_reaps_orphans_and_passes_the_status_through() {
    let dir = support::TempDir::new("session-pid1");
    // Two orphans for PID 1 to reap, then wait until no sleep and no zombie
    // is left in the namespace.
    let script = r#"
        (sleep 0.1 &); (sleep 0.1 &)
        i=0
        while [ $i -lt 500 ]; do
            o=$(pgrep -c -x sleep); z=$(cat /proc/[0-9]*/stat 2>/dev/null | awk '$3 == "Z"' | wc -l)
            [ "$o" = 0 ] && [ "$z" = 0 ] && break
            i=$((i + 1)); sleep 0.01
        done
        echo "pid1 $(cat /proc/1/comm) orphans $o zombies $z"
        exit 7"#;
    let out = as_pid_1(&dir.url(), "pid1", script)
        .output()
        .expect("unshare (util-linux) is needed, and root");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("pid1 elect orphans 0 zombies 0"),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        out.status.code(),
        Some(7),
        "the command's status comes through"
    );
}

#[test]
fn sigterm_to_pid_1_stops_the_command_and_releases_the_lock() {
    let dir = support::TempDir::new("session-pid1-term");
    let mut unshare = Running::spawn(as_pid_1(&dir.url(), "term", "echo ready; exec sleep 1000"));
    unshare.expect_line("ready", 10 * SECOND);
    let pid1 = support::find_child(unshare.pid(), "elect");
    let sleeper = support::Death::watch(support::find_child(unshare.pid(), "sleep"));
    // SAFETY: plain kill(2).
    assert_eq!(unsafe { libc::kill(pid1, libc::SIGTERM) }, 0);
    sleeper.at(5 * SECOND);
    assert_eq!(
        unshare.wait_code(10 * SECOND),
        128 + libc::SIGTERM,
        "PID 1 exits 128+N"
    );
    let out = elect()
        .args(["status", "--store", &dir.url(), "--lock", "term"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "the lock is free: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}
