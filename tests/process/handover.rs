//! The handover: the moment the lock is ours and the guard is told to start
//! the command. Renewals go on through it, however long it takes (here: a
//! guard that is stopped as it is told), and a command is never started
//! once its lease may be gone: not after the store ended it, and not after
//! deadline − grace; elect queues again instead. Measured on one monotonic
//! clock against the next holder's command.

use crate::stores::etcd::Etcd;
use crate::support;

use std::os::unix::process::CommandExt;
use std::time::Duration;

use support::proxy::{Mode, Proxy};
use support::ticker::{Ticks, group_alive};
use support::{GUARD, HOLD, Running, SECOND, TempDir, elect_run, find_child};

/// How long a stalled handover lasts: well past the lease.
const STALL: Duration = Duration::from_millis(5000);

/// A contender for `lock` on `url` whose command ticks as `label`, its elect
/// leading a process group of its own, with `-v` (it says when the lock is
/// its own) and a 2 s TTL.
fn contender(url: &str, lock: &str, label: &str, ticks: &Ticks) -> Running {
    let mut command = elect_run(
        url,
        lock,
        &["-v", "--ttl", "2s"],
        &ticks.script(label, false),
    );
    command.process_group(0);
    Running::spawn(command)
}

fn killpg(pgid: i32, sig: i32) {
    // SAFETY: plain killpg(2) of a group a child of ours leads.
    assert_eq!(unsafe { libc::killpg(pgid, sig) }, 0);
}

/// A holds `lock` directly; B waits behind it on `b_url`, then C directly.
/// B's guard is stopped; A lets go, and the test returns once B's elect
/// says the lock is its own: B's handover now waits for a stopped guard.
/// Returns B, its guard, its lease, and C.
fn stall_b_handover(
    etcd: &Etcd,
    b_url: &str,
    lock: &str,
    ticks: &Ticks,
) -> (Running, i32, String, Running) {
    let mut a = Running::spawn(elect_run(&etcd.url(), lock, &["--ttl", "2s"], HOLD));
    a.expect_line("token", 10 * SECOND);
    let mut b = contender(b_url, lock, "B", ticks);
    etcd.wait_keys(&format!("{lock}/"), 2);
    let b_lease = etcd.keys(&format!("{lock}/"))[1]
        .rsplit('/')
        .next()
        .unwrap()
        .to_string();
    let c = contender(&etcd.url(), lock, "C", ticks);
    etcd.wait_keys(&format!("{lock}/"), 3);
    let guard = find_child(b.pid(), GUARD);
    killpg(guard, libc::SIGSTOP);
    a.send_line("done");
    assert_eq!(a.wait_code(10 * SECOND), 0);
    b.expect_stderr(&format!("acquired lock {lock}"), 10 * SECOND);
    (b, guard, b_lease, c)
}

#[test]
fn renewals_go_on_while_the_guard_is_slow_to_start_the_command() {
    let etcd = Etcd::start();
    let dir = TempDir::new("stalled-handover");
    let ticks = Ticks::new(&dir.0);
    let (mut b, guard, _, c) = stall_b_handover(&etcd, &etcd.url(), "slow", &ticks);
    std::thread::sleep(STALL);
    killpg(guard, libc::SIGCONT);
    let b_first = ticks.first("B", 10 * SECOND);
    let b_group: i32 = b.expect_line("pgid", 10 * SECOND).parse().unwrap();
    let c_first = ticks.all().into_iter().find(|(l, _)| l == "C").map(|t| t.1);
    eprintln!(
        "a handover stalled {STALL:?} at TTL 2s: C's first tick {:?} ms after B's",
        c_first.map(|c| (c - b_first) as f64 / 1e6)
    );
    assert!(
        c_first.is_none(),
        "the next waiter took the lock while B's handover stalled: B's lease lapsed"
    );
    // B keeps its lease for longer than a TTL after its start.
    std::thread::sleep(3 * SECOND);
    b.drain_stderr();
    assert!(b.try_wait_code().is_none(), "B ended: {:?}", b.stderr_seen);
    assert!(ticks.last("C").is_none(), "C started beside B");
    let said = b.stderr_seen.join("\n");
    let handover = said
        .split_once("acquired lock slow")
        .map(|(_, rest)| rest.split_once("started the command").map_or(rest, |r| r.0))
        .unwrap_or_default();
    assert!(
        handover.matches("lease renewed").count() >= 3,
        "no renewals while the handover stalled: {said}"
    );
    b.signal(libc::SIGTERM);
    let overlap = ticks.overlap_ms("B", b_group, "C");
    assert!(overlap < 0.0, "B ran {overlap:.1} ms beside C");
    assert!(!group_alive(b_group));
    c.signal(libc::SIGTERM);
}

/// B's lease ends while its guard is stopped as it is told to start the
/// command; once the guard runs again, the command must not start, and B,
/// whose command never ran, queues again as a waiter would: it starts its
/// command only once C's has ended.
fn a_lost_handover_never_starts_the_command(how: &str) {
    let etcd = Etcd::start();
    let dir = TempDir::new(&format!("lost-handover-{how}"));
    let ticks = Ticks::new(&dir.0);
    let proxy = Proxy::start(&etcd.endpoints()[0]);
    let (mut b, guard, b_lease, mut c) = stall_b_handover(&etcd, &proxy.url(), "lost", &ticks);
    match how {
        "revoked" => {
            let out = etcd.etcdctl(&["lease", "revoke", &b_lease]);
            assert!(out.status.success(), "{out:?}");
        }
        "expired" => proxy.set(Mode::Blackhole),
        _ => unreachable!("{how}"),
    }
    let c_first = ticks.first("C", 10 * SECOND);
    std::thread::sleep(STALL);
    killpg(guard, libc::SIGCONT);
    proxy.set(Mode::Forward);
    b.expect_stderr("queueing again", 10 * SECOND);
    // B's new place is behind C, which still runs.
    etcd.wait_keys("lost/", 2);
    let b_ticks = ticks.all().into_iter().filter(|(l, _)| l == "B").count();
    let b_last = ticks.last("B");
    eprintln!(
        "B's lease {how} during a stalled handover: B queued again; its command ticked {b_ticks} times, the last {:?} ms after C's first",
        b_last.map(|b| (b - c_first) as f64 / 1e6)
    );
    let started = b
        .stderr_seen
        .iter()
        .any(|l| l.contains("started the command"));
    assert!(
        !started && b_ticks == 0,
        "B's command started after its lease ended: {:?}",
        b.stderr_seen
    );
    assert!(b.try_wait_code().is_none(), "B ended: {:?}", b.stderr_seen);
    assert!(
        b.stderr_seen
            .iter()
            .any(|l| l.contains("lost the lease on lock lost")),
        "{:?}",
        b.stderr_seen
    );
    // C lets go: B's command starts, after C's last tick.
    let c_group: i32 = c.expect_line("pgid", 10 * SECOND).parse().unwrap();
    c.signal(libc::SIGTERM);
    let b_first = ticks.first("B", 15 * SECOND);
    let c_last = ticks.last("C").unwrap();
    eprintln!(
        "then C let go: B's command started {:.1} ms after C's last tick",
        (b_first - c_last) as f64 / 1e6
    );
    assert!(c_last < b_first, "B's command ran beside C's");
    assert!(!group_alive(c_group));
    b.signal(libc::SIGTERM);
    b.wait(10 * SECOND);
}

#[test]
fn a_lease_revoked_during_the_handover_never_starts_the_command() {
    a_lost_handover_never_starts_the_command("revoked");
}

#[test]
fn a_lease_expired_during_the_handover_never_starts_the_command() {
    a_lost_handover_never_starts_the_command("expired");
}
