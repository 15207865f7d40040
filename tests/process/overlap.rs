//! The local ways a holder's command could run on beside the next holder's:
//! a job-control stop of elect's process group, a killed guard, and
//! `elect break`. Each is measured on one monotonic clock: the old
//! command's last tick must come before the new one's first, and nothing of
//! the old command's group may be left.

use crate::stores::etcd::Etcd;
use crate::support;

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::time::Instant;

use support::ticker::{Ticks, group_alive};
use support::{Running, SECOND, TempDir, elect, elect_run, find_child};

/// A holder or waiter of `lock` whose command ticks as `label`, with elect
/// leading a process group of its own (a shell's job).
fn contender(etcd: &Etcd, lock: &str, label: &str, extra: &[&str], ticks: &Ticks) -> Running {
    contender_with(etcd, lock, label, extra, ticks, false)
}

fn contender_with(
    etcd: &Etcd,
    lock: &str,
    label: &str,
    extra: &[&str],
    ticks: &Ticks,
    ignore_term: bool,
) -> Running {
    let mut command = elect_run(&etcd.url(), lock, extra, &ticks.script(label, ignore_term));
    command.process_group(0);
    Running::spawn(command)
}

/// A holds `lock` and ticks; B waits behind it. Returns them with the
/// process group of A's command.
fn holder_and_waiter(
    etcd: &Etcd,
    lock: &str,
    extra: &[&str],
    ticks: &Ticks,
    ignore_term: bool,
) -> (Running, i32, Running) {
    let mut a = contender_with(etcd, lock, "A", extra, ticks, ignore_term);
    let a_group: i32 = a.expect_line("pgid", 10 * SECOND).parse().unwrap();
    ticks.first("A", 10 * SECOND);
    let b = contender_with(etcd, lock, "B", extra, ticks, ignore_term);
    etcd.wait_keys(&format!("{lock}/"), 2);
    (a, a_group, b)
}

fn killpg(pgid: i32, sig: i32) {
    // SAFETY: plain killpg(2) of a group our own child leads.
    assert_eq!(unsafe { libc::killpg(pgid, sig) }, 0);
}

fn job_control_stop(sig: i32, name: &str) {
    let etcd = Etcd::start();
    let dir = TempDir::new(&format!("job-stop-{name}"));
    let ticks = Ticks::new(&dir.0);
    let (mut a, a_group, _b) = holder_and_waiter(&etcd, "job", &["--ttl", "2s"], &ticks, false);
    // As `kill -STOP %1` or `kill -TSTP %1` in a shell: elect's group only.
    killpg(a.pid(), sig);
    let overlap = ticks.overlap_ms("A", a_group, "B");
    eprintln!("{name} to elect's group, TTL 2s: A's last tick {overlap:.1} ms after B's first");
    assert!(
        overlap < 0.0,
        "A's command ran {overlap:.1} ms beside B's after {name} to A's elect"
    );
    assert!(
        !group_alive(a_group),
        "a process of A's command group outlived its lease: {:?}",
        support::ticker::group_members(a_group),
    );
    killpg(a.pid(), libc::SIGCONT);
    assert_eq!(a.wait_code(10 * SECOND), 76, "{:?}", a.stderr_seen);
    assert!(
        a.stderr_seen
            .iter()
            .any(|l| l.contains("lost the lease on lock job")),
        "{:?}",
        a.stderr_seen
    );
}

#[test]
fn sigstop_to_elects_group_cannot_keep_the_command_past_the_lease() {
    job_control_stop(libc::SIGSTOP, "SIGSTOP");
}

#[test]
fn sigtstp_to_elects_group_stops_the_command_too_and_not_past_the_lease() {
    job_control_stop(libc::SIGTSTP, "SIGTSTP");
}

#[test]
fn sigstop_to_the_guards_group_leaves_elect_to_kill_the_command_by_the_deadline() {
    let etcd = Etcd::start();
    let dir = TempDir::new("guard-stop");
    let ticks = Ticks::new(&dir.0);
    let (mut a, a_group, _b) = holder_and_waiter(&etcd, "gstop", &["--ttl", "2s"], &ticks, false);
    let guard = find_child(a.pid(), support::GUARD);
    // With the guard frozen, elect alone can stop the command; revoking the
    // lease makes it try, with the 100 ms an ended lease leaves.
    killpg(guard, libc::SIGSTOP);
    let lease = etcd.keys("gstop/")[0]
        .rsplit('/')
        .next()
        .unwrap()
        .to_string();
    assert!(etcd.etcdctl(&["lease", "revoke", &lease]).status.success());
    let overlap = ticks.overlap_ms("A", a_group, "B");
    eprintln!("guard stopped, lease revoked: A's last tick {overlap:.1} ms after B's first");
    assert!(
        overlap < 500.0,
        "A ran {overlap:.1} ms beside B while its guard was stopped"
    );
    assert!(
        !group_alive(a_group),
        "A's command outlived its lease while its guard was stopped: {:?}",
        support::ticker::group_members(a_group)
    );
    killpg(guard, libc::SIGCONT);
    assert_eq!(a.wait_code(10 * SECOND), 76, "{:?}", a.stderr_seen);
}

#[test]
fn sigtstp_then_sigcont_in_time_resumes_the_command() {
    let etcd = Etcd::start();
    let dir = TempDir::new("job-resume");
    let ticks = Ticks::new(&dir.0);
    let mut a = contender(&etcd, "resume", "A", &["--ttl", "6s"], &ticks);
    a.expect_line("pgid", 10 * SECOND);
    ticks.first("A", 10 * SECOND);
    killpg(a.pid(), libc::SIGTSTP);
    // The command stops with elect: no tick for a while.
    let wait_quiet = Instant::now();
    let mut last = ticks.last("A");
    loop {
        std::thread::sleep(std::time::Duration::from_millis(200));
        let now = ticks.last("A");
        if now == last {
            break;
        }
        last = now;
        assert!(
            wait_quiet.elapsed() < 5 * SECOND,
            "the command never stopped"
        );
    }
    let stopped_at = support::ticker::monotonic_ns();
    killpg(a.pid(), libc::SIGCONT);
    let give_up = Instant::now() + 5 * SECOND;
    while ticks.last("A").is_none_or(|t| t < stopped_at) {
        assert!(Instant::now() < give_up, "the command was not resumed");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(
        a.try_wait_code().is_none(),
        "elect ended: {:?}",
        a.stderr_seen
    );
}

#[test]
fn a_killed_guard_leaves_nothing_running_before_the_lock_is_released() {
    let etcd = Etcd::start();
    let dir = TempDir::new("guard-killed");
    let ticks = Ticks::new(&dir.0);
    let (mut a, a_group, _b) = holder_and_waiter(&etcd, "guard", &["--ttl", "5s"], &ticks, false);
    let guard = find_child(a.pid(), support::GUARD);
    // SAFETY: plain kill(2) of elect's guard.
    assert_eq!(unsafe { libc::kill(guard, libc::SIGKILL) }, 0);
    let overlap = ticks.overlap_ms("A", a_group, "B");
    eprintln!("SIGKILL of the guard: A's last tick {overlap:.1} ms after B's first");
    assert!(overlap < 0.0, "A's grandchild ran {overlap:.1} ms beside B");
    assert!(
        !group_alive(a_group),
        "A's command group outlived its guard"
    );
    assert_eq!(a.wait_code(10 * SECOND), 71, "{:?}", a.stderr_seen);
    let said = a.stderr_seen.join("\n");
    assert!(
        said.contains("the guard process was killed by SIGKILL"),
        "{said}"
    );
}

/// `elect break` on the holder of `lock`; its exit code, stderr and duration.
fn break_lock(etcd: &Etcd, lock: &str, extra: &[&str]) -> (i32, String, f64) {
    let started = Instant::now();
    let out = elect()
        .args(["break", "--store", &etcd.url(), "--lock", lock, "--yes"])
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let took = started.elapsed().as_secs_f64() * 1e3;
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        took,
    )
}

#[test]
fn break_waits_for_the_holder_to_stop_its_command() {
    let etcd = Etcd::start();
    let dir = TempDir::new("break");
    let ticks = Ticks::new(&dir.0);
    // The command ignores SIGTERM: it runs through its whole grace.
    let extra = ["--ttl", "6s", "--grace", "1500ms"];
    let (mut a, a_group, _b) = holder_and_waiter(&etcd, "brk", &extra, &ticks, true);
    let (code, said, took) = break_lock(&etcd, "brk", &[]);
    assert_eq!(code, 0, "{said}");
    assert!(said.contains("stopped its command and let go"), "{said}");
    let overlap = ticks.overlap_ms("A", a_group, "B");
    eprintln!(
        "elect break, grace 1.5s, TERM ignored: took {took:.0} ms; A's last tick {overlap:.1} ms after B's first"
    );
    assert!(
        overlap < 0.0,
        "A ran {overlap:.1} ms beside B after a break"
    );
    assert!(!group_alive(a_group));
    assert!(took >= 1400.0, "break returned before the grace ran out");
    assert_eq!(a.wait_code(10 * SECOND), 76, "{:?}", a.stderr_seen);
    assert!(
        a.stderr_seen.iter().any(|l| l.contains("elect break from")),
        "{:?}",
        a.stderr_seen
    );
}

#[test]
fn break_force_ends_the_lease_at_once_and_says_so() {
    let etcd = Etcd::start();
    let dir = TempDir::new("break-force");
    let ticks = Ticks::new(&dir.0);
    let extra = ["--ttl", "6s", "--grace", "1500ms"];
    let (mut a, a_group, _b) = holder_and_waiter(&etcd, "force", &extra, &ticks, true);
    let (code, said, took) = break_lock(&etcd, "force", &["--force"]);
    assert_eq!(code, 0, "{said}");
    assert!(said.contains("may still run"), "{said}");
    let overlap = ticks.overlap_ms("A", a_group, "B");
    eprintln!(
        "elect break --force: took {took:.0} ms; A's last tick {overlap:.1} ms after B's first"
    );
    assert!(took < 1000.0, "--force waited: {took:.0} ms");
    // Its elect learns at once that the lease is gone and kills its command
    // without the grace: another holder may already run.
    assert!(
        overlap < 1000.0,
        "A ran {overlap:.1} ms beside B: the whole grace"
    );
    assert_eq!(a.wait_code(10 * SECOND), 76, "{:?}", a.stderr_seen);
    assert!(!group_alive(a_group));
}

#[test]
fn sigkill_of_elect_hands_over_within_a_second_not_a_ttl() {
    let etcd = Etcd::start();
    let dir = TempDir::new("elect-killed");
    let ticks = Ticks::new(&dir.0);
    let mut a = contender(&etcd, "crash", "A", &["--ttl", "15s"], &ticks);
    let a_token: u64 = a.expect_line("token", 10 * SECOND).parse().unwrap();
    let a_group: i32 = a.expect_line("pgid", 10 * SECOND).parse().unwrap();
    ticks.first("A", 10 * SECOND);
    let mut b = contender(&etcd, "crash", "B", &["--ttl", "15s"], &ticks);
    etcd.wait_keys("crash/", 2);
    let killed_at = support::ticker::monotonic_ns();
    // SAFETY: plain kill(2) of our own child.
    assert_eq!(unsafe { libc::kill(a.pid(), libc::SIGKILL) }, 0);
    let b_token: u64 = b.expect_line("token", 10 * SECOND).parse().unwrap();
    let overlap = ticks.overlap_ms("A", a_group, "B");
    let handover = (ticks.first("B", SECOND) - killed_at) as f64 / 1e6;
    eprintln!(
        "SIGKILL of elect, TTL 15s: B ticked {handover:.0} ms after the kill; A's last tick {overlap:.1} ms after B's first"
    );
    assert!(b_token > a_token, "B's token {b_token} after A's {a_token}");
    assert!(handover < 1000.0, "the next holder waited {handover:.0} ms");
    assert!(overlap < 0.0, "A ran {overlap:.1} ms beside B");
    assert!(!group_alive(a_group));
    a.expect_stderr("then released the lease", 5 * SECOND);
}

#[test]
fn a_hundred_elects_on_one_stderr_write_whole_json_lines() {
    let dir = TempDir::new("json-lines");
    let (reader, writer) = std::io::pipe().unwrap();
    let children: Vec<_> = (0..100)
        .map(|_| {
            elect()
                .args(["run", "--store", &dir.url(), "--lock", "many", "-n", "-v"])
                .args(["--log-format", "json", "--", "true"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(writer.try_clone().unwrap())
                .spawn()
                .unwrap()
        })
        .collect();
    drop(writer);
    let lines: Vec<String> = BufReader::new(reader).lines().map(|l| l.unwrap()).collect();
    for mut child in children {
        child.wait().unwrap();
    }
    assert!(lines.len() >= 100, "only {} lines", lines.len());
    let torn: Vec<&String> = lines
        .iter()
        .filter(|l| serde_json::from_str::<serde_json::Value>(l).is_err())
        .collect();
    assert!(
        torn.is_empty(),
        "{} of {} lines are not JSON: {torn:?}",
        torn.len(),
        lines.len()
    );
}
