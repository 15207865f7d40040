//! Slow links and long holds: a holder far from etcd keeps its lock as long
//! as its renewals are answered in time, and elect's HTTP/2 pings stay
//! within what etcd's gRPC server allows, so that etcd never hangs up on it.
//!
//! The tests in this file run one at a time: they measure round trips to
//! the millisecond, and CI has two cores.

use crate::stores::etcd::Etcd;
use crate::support;

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use support::proxy::{Mode, Proxy};
use support::{HOLD, Running, SECOND, elect_run};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// The waiter's command: it says so if it ever gets the lock.
const WAIT: &str = r#"echo "token $ELECT_TOKEN"; read _line"#;

/// The largest round trip that keeps a 3 s lease with the default grace:
/// TTL − TTL/3 (renewal interval) − TTL/3 (grace) − (TTL/50 + 50 ms) (margin),
/// as src/lease.rs derives it.
const LIMIT_AT_3S: Duration = Duration::from_millis(890);

/// A holder of `lock` at `--ttl 3s` through a proxy, and a waiter straight
/// to etcd; once the waiter waits, the proxy delays each way by `one_way`.
/// Returns them with the time the delay began.
fn slow_holder(
    etcd: &Etcd,
    proxy: &Proxy,
    lock: &str,
    one_way: Duration,
) -> (Running, Running, Instant) {
    proxy.set(Mode::Forward);
    let extra = ["--ttl", "3s", "-v"];
    let mut holder = Running::spawn(elect_run(&proxy.url(), lock, &extra, HOLD));
    holder.expect_line("token", 10 * SECOND);
    let mut waiter = Running::spawn(elect_run(&etcd.url(), lock, &extra, WAIT));
    waiter.expect_stderr("waiting for", 10 * SECOND);
    proxy.set(Mode::Delay(one_way));
    (holder, waiter, Instant::now())
}

/// Follow `holder`'s `-v` stderr until it has confirmed `renewals` renewals
/// and `at_least` has passed since `since`; panic if it says it lost the
/// lease. Returns how long it held.
fn keeps_renewing(
    holder: &mut Running,
    renewals: usize,
    since: Instant,
    at_least: Duration,
) -> Duration {
    let mut confirmed = 0;
    while confirmed < renewals || since.elapsed() < at_least {
        let line = holder.expect_stderr("lease", 5 * SECOND);
        assert!(
            !line.contains("lost the lease"),
            "the holder lost its lease after {:?} and {confirmed} renewals: {line}\nstderr: {:#?}",
            since.elapsed(),
            holder.stderr_seen
        );
        if line.contains("lease renewed") {
            confirmed += 1;
        }
    }
    since.elapsed()
}

/// The holder still runs its command, the waiter never started its own,
/// and the lock passes to the waiter when the holder is done.
fn hand_over(holder: &mut Running, waiter: &mut Running) {
    assert_eq!(
        waiter.try_line(),
        None,
        "the waiter got the lock while the holder held it; its stderr: {}",
        waiter.drain_stderr()
    );
    holder.send_line("done");
    holder.expect_line("end", 5 * SECOND);
    assert_eq!(
        holder.wait_code(10 * SECOND),
        0,
        "{:#?}",
        holder.stderr_seen
    );
    waiter.expect_line("token", 10 * SECOND);
}

/// 300 ms each way, 600 ms round trip, at a 3 s TTL: every renewal reaches
/// etcd and is answered in time, though later than elect waits (500 ms)
/// before it sends another; the lease must hold.
#[test]
fn a_holder_behind_a_slow_link_keeps_its_lock() {
    let _one = one_at_a_time();
    let etcd = Etcd::start();
    let proxy = Proxy::start(&etcd.endpoint);
    let (mut holder, mut waiter, since) =
        slow_holder(&etcd, &proxy, "slow", Duration::from_millis(300));
    let held = keeps_renewing(&mut holder, 6, since, 8 * SECOND);
    eprintln!("held through a 600 ms round trip for {held:?}");
    hand_over(&mut holder, &mut waiter);
}

/// A connection that died silently (a NAT or firewall that forgot it) is
/// noticed by HTTP/2 pings only after 10 s or more: renewals must not wait
/// for that. After a slow spell has made the holder renew over both of its
/// connections, both freeze at once, the idle one too; renewals move to new
/// ones in time.
#[test]
fn renewals_leave_connections_that_died_silently() {
    let _one = one_at_a_time();
    let etcd = Etcd::start();
    let proxy = Proxy::start(&etcd.endpoint);
    let (mut holder, mut waiter, since) =
        slow_holder(&etcd, &proxy, "frozen", Duration::from_millis(300));
    keeps_renewing(&mut holder, 3, since, Duration::ZERO);
    // A fast link again: one connection renews, the other idles.
    proxy.set(Mode::Forward);
    keeps_renewing(&mut holder, 2, Instant::now(), Duration::ZERO);
    proxy.freeze_open_connections();
    let frozen = Instant::now();
    keeps_renewing(&mut holder, 6, frozen, 8 * SECOND);
    hand_over(&mut holder, &mut waiter);
}

/// Just under the limit the lease holds; just over it, the holder stops its
/// command and the waiter takes over. Nothing is faster than the proxy's
/// delay, so the second half cannot pass by luck.
#[test]
fn the_round_trip_limit_at_a_3s_ttl() {
    let _one = one_at_a_time();
    let etcd = Etcd::start();
    let proxy = Proxy::start(&etcd.endpoint);

    // The proxy adds its own delay (some 75 ms a round trip on two busy
    // cores) and the renewal may leave a few ms late: 190 ms under.
    let under = (LIMIT_AT_3S - Duration::from_millis(190)) / 2;
    let (mut holder, mut waiter, since) = slow_holder(&etcd, &proxy, "under", under);
    keeps_renewing(&mut holder, 4, since, 3 * SECOND);
    hand_over(&mut holder, &mut waiter);

    let over = (LIMIT_AT_3S + Duration::from_millis(30)) / 2;
    let (mut holder, mut waiter, since) = slow_holder(&etcd, &proxy, "over", over);
    holder.expect_stderr("lost the lease", 5 * SECOND);
    let lost = since.elapsed();
    assert_eq!(holder.wait_code(10 * SECOND), 76);
    waiter.expect_line("token", 10 * SECOND);
    eprintln!(
        "{:?} round trip: held; {:?}: lost {lost:?} into the delay",
        under * 2,
        over * 2
    );
}

/// etcd's gRPC server (`--grpc-keepalive-min-time`, 5 s by default, and no
/// pings without a stream) answers a client that pings more often with
/// GOAWAY "too_many_pings". A holder and a waiter at a 3 s TTL must never
/// provoke it, nor lose anything. Three members, so that the watches and
/// the renewals may travel on different connections: a connection with
/// only a quiet watch on it is where fast pings hit the limit.
#[test]
fn pings_stay_within_etcds_keepalive_policy() {
    let _one = one_at_a_time();
    // Etcd::cluster sets no --grpc-keepalive-* flag: etcd's defaults apply.
    let etcd = Etcd::cluster(3);
    let extra = ["--ttl", "3s", "-v"];
    let mut holder = Running::spawn(elect_run(&etcd.url(), "calm", &extra, HOLD));
    holder.expect_line("token", 10 * SECOND);
    let since = Instant::now();
    let mut waiter = Running::spawn(elect_run(&etcd.url(), "calm", &extra, WAIT));
    waiter.expect_stderr("waiting for", 10 * SECOND);

    keeps_renewing(&mut holder, 14, since, 15 * SECOND);
    let waited = waiter.drain_stderr();
    hand_over(&mut holder, &mut waiter);
    for (who, text) in [("holder", holder.drain_stderr()), ("waiter", waited)] {
        for line in text.lines() {
            let bad = ["protocol error", "GOAWAY", "too_many_pings", "failed"]
                .iter()
                .find(|w| line.contains(*w));
            assert!(bad.is_none(), "the {who} said {bad:?}: {line}\n{text}");
        }
    }
}
