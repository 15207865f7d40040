//! Long holds: elect's HTTP/2 pings stay within what etcd's gRPC server
//! allows, so that etcd never hangs up on it.
//!
//! The tests in this file run one at a time: they measure time, and CI has
//! two cores.

mod support;

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use support::cluster::Cluster;
use support::{HOLD, Running, SECOND, elect_run};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// The waiter's command: it says so if it ever gets the lock.
const WAIT: &str = r#"echo "token $ELECT_TOKEN"; read _line"#;

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

/// etcd's gRPC server (`--grpc-keepalive-min-time`, 5 s by default, and no
/// pings without a stream) answers a client that pings more often with
/// GOAWAY "too_many_pings". A holder and a waiter at a 3 s TTL must never
/// provoke it, nor lose anything. Three members, so that the watches and
/// the renewals may travel on different connections: a connection with
/// only a quiet watch on it is where fast pings hit the limit.
#[test]
fn pings_stay_within_etcds_keepalive_policy() {
    let _one = one_at_a_time();
    // Cluster::start sets no --grpc-keepalive-* flag: etcd's defaults apply.
    let etcd = Cluster::start(3);
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
