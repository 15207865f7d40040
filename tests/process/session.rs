//! Long-running and interactive use: `--rejoin`, elect as PID 1, and
//! commands that use the terminal.

use crate::stores::etcd::Etcd;
use crate::support;

use std::time::Duration;

use support::{Running, SECOND, elect};

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
    as_pid_1_with(store, lock, &[], script)
}

fn as_pid_1_with(store: &str, lock: &str, extra: &[&str], script: &str) -> std::process::Command {
    let mut c = std::process::Command::new("unshare");
    c.args(["--pid", "--fork", "--mount-proc", "--kill-child"])
        .arg(env!("CARGO_BIN_EXE_elect"))
        .args(["run", "--store", store, "--lock", lock])
        .args(extra)
        .args(["--", "sh", "-c", script]);
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

/// As PID 1 too, a command that ignores TERM is killed once `--grace` has
/// passed, and the lock is free as soon as elect is gone.
#[test]
fn as_pid_1_a_stop_is_bounded_by_the_grace() {
    let dir = support::TempDir::new("session-pid1-grace");
    let script = "trap '' TERM; echo ready; sleep 1000; echo never";
    let mut unshare = Running::spawn(as_pid_1_with(
        &dir.url(),
        "grace",
        &["--grace", "1s"],
        script,
    ));
    unshare.expect_line("ready", 10 * SECOND);
    let pid1 = support::find_child(unshare.pid(), "elect");
    let pid1_death = support::Death::watch(pid1);
    let sleeper = support::Death::watch(support::find_child(unshare.pid(), "sleep"));
    let told = support::now_ns();
    // SAFETY: plain kill(2).
    assert_eq!(unsafe { libc::kill(pid1, libc::SIGTERM) }, 0);
    let ended = Duration::from_nanos((pid1_death.at(10 * SECOND) - told) as u64);
    eprintln!(
        "SIGTERM to elect as PID 1, whose command ignores it, --grace 1s: elect ended {} ms after",
        ended.as_millis()
    );
    assert!(
        ended < Duration::from_millis(1500),
        "the stop took {ended:?}"
    );
    sleeper.at(SECOND);
    assert_eq!(unshare.wait_code(10 * SECOND), 128 + libc::SIGTERM);
    let out = elect()
        .args(["status", "--store", &dir.url(), "--lock", "grace"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "the lock is free: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// `elect run --store STORE --lock LOCK [extra] -- sh -c SCRIPT` on a new terminal.
fn on_a_terminal(store: &str, lock: &str, extra: &[&str], script: &str) -> support::Pty {
    support::Pty::spawn(support::elect_run(store, lock, extra, script))
}

#[test]
fn an_interactive_command_gets_the_terminal_and_leaves_it_sane() {
    let dir = support::TempDir::new("tty-fg");
    let script = r#"echo "pgid $(cut -d' ' -f5 /proc/$$/stat)"; read line; echo "got $line"; stty raw -echo; echo bye"#;
    let mut tty = on_a_terminal(&dir.url(), "tty", &[], script);
    let pgid: i32 = tty
        .expect_line("pgid ", 10 * SECOND)
        .trim()
        .parse()
        .unwrap();
    assert_eq!(
        tty.foreground(),
        pgid,
        "the command's group has the terminal"
    );
    tty.type_in(b"hello\r");
    tty.expect("got hello", 10 * SECOND);
    tty.expect("bye", 10 * SECOND);
    assert!(tty.wait(10 * SECOND).success());
    let modes = tty.local_modes();
    assert!(
        modes & libc::ICANON != 0 && modes & libc::ECHO != 0,
        "the terminal's modes were restored"
    );
}

#[test]
fn ctrl_c_reaches_the_command_once() {
    let dir = support::TempDir::new("tty-int");
    let script = r#"trap 'echo caught-int' INT; echo ready; while :; do read l; [ "$l" = quit ] && exit 0; done"#;
    let mut tty = on_a_terminal(&dir.url(), "int", &[], script);
    tty.expect("ready", 10 * SECOND);
    tty.type_in(&[0x03]);
    tty.expect("caught-int", 10 * SECOND);
    tty.type_in(b"quit\r");
    assert!(tty.wait(10 * SECOND).success(), "{:?}", tty.seen);
    assert_eq!(tty.seen.matches("caught-int").count(), 1, "{:?}", tty.seen);
}

#[test]
fn ctrl_z_gives_the_terminal_back_and_sigcont_resumes() {
    let dir = support::TempDir::new("tty-stop");
    let script = r#"echo ready; read l; echo "got $l""#;
    let mut tty = on_a_terminal(&dir.url(), "stop", &[], script);
    let elect = tty.child.id() as i32;
    tty.expect("ready", 10 * SECOND);
    tty.type_in(&[0x1a]);
    wait_until(
        || support::state(elect) == Some('T'),
        "elect stopped with its command",
    );
    assert_eq!(
        tty.foreground(),
        elect,
        "elect's group (the shell's job) has the terminal again"
    );
    // What `fg` does: continue the job.
    // SAFETY: plain kill(2).
    assert_eq!(unsafe { libc::kill(-elect, libc::SIGCONT) }, 0);
    wait_until(
        || tty.foreground() != elect,
        "the command has the terminal again",
    );
    tty.type_in(b"after\r");
    tty.expect("got after", 10 * SECOND);
    assert!(tty.wait(10 * SECOND).success());
}

#[test]
fn a_lease_lost_while_stopped_is_not_resumed() {
    let etcd = Etcd::start();
    let script = r#"echo ready; read l; echo "got $l""#;
    let mut tty = on_a_terminal(&etcd.url(), "stale", &["--ttl", "2s"], script);
    let elect = tty.child.id() as i32;
    tty.expect("ready", 10 * SECOND);
    tty.type_in(&[0x1a]);
    wait_until(|| support::state(elect) == Some('T'), "elect stopped");
    // Stopped, elect cannot renew: wait until etcd has expired the lease.
    wait_until(
        || etcd.keys("stale/").is_empty(),
        "the lease expired on the server",
    );
    // SAFETY: plain kill(2).
    assert_eq!(unsafe { libc::kill(-elect, libc::SIGCONT) }, 0);
    let status = tty.wait(10 * SECOND);
    assert_eq!(status.code(), Some(76), "{:?}", tty.seen);
    tty.expect("while elect and the command were stopped", 5 * SECOND);
    assert!(
        !tty.seen.contains("got"),
        "the command ran on: {:?}",
        tty.seen
    );
}

#[test]
fn started_in_the_background_elect_leaves_the_terminal_alone() {
    let dir = support::TempDir::new("tty-bg");
    let elect_bin = env!("CARGO_BIN_EXE_elect");
    // An interactive shell with job control runs `elect ... &`.
    let inner = r#"set -- $(cat /proc/$$/stat); echo "pgid $5 tpgid $8""#;
    let script = format!(
        "{elect_bin} run --store {} --lock bg -- sh -c '{inner}' & wait",
        dir.url()
    );
    let mut command = std::process::Command::new("sh");
    command.args(["-m", "-c", &script]);
    let mut tty = support::Pty::spawn(command);
    let line = tty.expect_line("pgid ", 10 * SECOND);
    let mut words = line.split_whitespace();
    let pgid = words.next().unwrap();
    assert_eq!(words.next(), Some("tpgid"));
    let tpgid = words.next().unwrap();
    assert_ne!(
        pgid, tpgid,
        "a background elect gave its command the terminal"
    );
    assert!(tty.wait(10 * SECOND).success());
}

fn wait_until(condition: impl FnMut() -> bool, what: &str) {
    support::until(what, 10 * SECOND, condition)
}

#[test]
fn on_a_terminal_elect_says_what_it_connects_to_when_the_store_is_slow() {
    let etcd = Etcd::start();
    let proxy = support::proxy::Proxy::start(&etcd.endpoint);
    proxy.set(support::proxy::Mode::Blackhole);
    let mut tty = on_a_terminal(
        &proxy.url(),
        "slow",
        &["--connect-timeout", "20s"],
        "echo ran",
    );
    tty.expect(
        &format!("connecting to {} for lock slow", proxy.url()),
        5 * SECOND,
    );
    proxy.set(support::proxy::Mode::Forward);
    tty.expect("ran", 10 * SECOND);
    assert!(tty.wait(10 * SECOND).success(), "{:?}", tty.seen);
}
