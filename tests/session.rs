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
