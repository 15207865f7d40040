//! Every fault, on every store, written once: etcd, PostgreSQL, ZooKeeper,
//! `file:`, and PostgreSQL behind PgBouncer pooling by transaction.
//!
//! Each run: a holder A whose command ticks on CLOCK_MONOTONIC
//! (`support/ticker.rs`), a waiter B on a direct link, ticking too once it
//! holds; a fault to A, its link or the store; then, on the one clock:
//! A's last tick comes before B's first (or, where the fault rightly leaves
//! A holding, B never started while A's command ran), nothing of A's
//! command group is left, B's token is higher than A's, someone holds the
//! lock again within a bound after the fault heals, and A's elect ends
//! (never sits stuck). Every run prints `STORE, FAULT: overlap N ms`
//! (negative: the gap between the two holders).
//!
//! A store says what it can suffer in `StoreUnderTest` (`suites/mod.rs`):
//! a link (a TCP fault proxy between A and the store, `support/proxy.rs`,
//! and real packet loss on it, `support/loss.rs`), a server process
//! (paused, restarted), a wall clock it judges expiry by (stepped), and
//! each line of `stores!` at the end names the groups of scenarios that
//! apply. Each scenario is one test per store,
//! `etcd::NAME`, `pgbouncer::NAME` and so on.
//!
//! The replicated set-ups, a cluster of three etcd members
//! (`etcd_cluster::`, each member in a network namespace of its own,
//! `support/netns.rs`) and an ensemble of three ZooKeeper servers
//! (`zookeeper_ensemble::`, the servers linked through proxies), also
//! suffer their members' faults (the `replicated` group): the leader
//! SIGKILLed, the follower A talks to SIGKILLed, quorum lost, and A cut off
//! together with the one member it reaches.
//!
//! The TTL is 2 s with a grace of 500 ms: A's command gets SIGTERM 1.41 s
//! and SIGKILL 1.91 s after the send of its last confirmed renewal
//! (`src/lease.rs`), the store lets the lease go 2 s after it.

use crate::stores::etcd::{Etcd, EtcdCluster};
use crate::stores::file::FileStore;
use crate::stores::k8s::KubeStore;
use crate::stores::postgres::{Pooled, Postgres};
use crate::stores::zookeeper::{Ensemble, ZooKeeper};
use crate::suites::StoreUnderTest;
use crate::support;
use support::process::signal;

use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::stores::mysql::MariaDb;
use support::limits;
use support::loss::Loss;
use support::proxy::{Mode, Proxy};
use support::ticker::{Ticks, group_alive, group_members, monotonic_ns};
use support::{Running, SECOND, TempDir, elect, elect_run, find_child};

const TTL: Duration = Duration::from_secs(2);
/// A waiter outlives any fault here: a quorum lost and restarted members
/// can take longer than the default `--connect-timeout` on a busy machine.
const TIMING: [&str; 7] = [
    "--ttl",
    "2s",
    "--grace",
    "500ms",
    "--connect-timeout",
    "30s",
    "-v",
];
const LOCK: &str = "fault";
/// After the fault heals (or, where A keeps the lock, after A is told to
/// end), someone must hold the lock within this.
const HOLDER_AGAIN_WITHIN: Duration = Duration::from_secs(6);

/// What the fault must do to A's tenure.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Tenure {
    /// A's command is stopped and the lock passes to B.
    Ended,
    /// Either, by where in A's renewal cycle the fault fell.
    Either,
    /// A keeps the lock, renewing on, until it is told to end.
    Kept,
}

/// One run: the store, A holding, B waiting.
struct Run<S: StoreUnderTest> {
    fault: String,
    /// When the store was started, for how long the run took.
    began: Instant,
    a: Running,
    a_elect: i32,
    a_guard: i32,
    /// The command's own process (`sh`), the guard's child.
    a_command: i32,
    /// Its process group (the id of the guard's sentinel).
    a_group: i32,
    a_token: u64,
    b: Running,
    /// The store's URL as B reaches it.
    b_url: String,
    ticks: Ticks,
    proxy: Option<Proxy>,
    store: S,
    _dir: TempDir,
}

impl<S: StoreUnderTest> Drop for Run<S> {
    /// Whatever a failed run left ticking goes, before the store does.
    fn drop(&mut self) {
        for pid in [self.a_elect, self.a_guard, self.b.pid()] {
            // SAFETY: plain kill(2); one that is gone is no matter.
            unsafe { libc::kill(pid, libc::SIGCONT) };
        }
        if group_alive(self.a_group) {
            // SAFETY: plain killpg(2) of the group A's command led.
            unsafe { libc::killpg(self.a_group, libc::SIGKILL) };
        }
    }
}

/// A contender whose command ticks as `label`; its elect leads a process
/// group of its own, as a shell's job. `ttl`: its `--ttl`, if not [`TTL`].
fn contender(
    url: &str,
    label: &str,
    ticks: &Ticks,
    ignore_term: bool,
    ttl: Option<&str>,
) -> Running {
    let mut timing = TIMING.to_vec();
    if let Some(ttl) = ttl {
        timing[1] = ttl;
    }
    let mut command = elect_run(url, LOCK, &timing, &ticks.script(label, ignore_term));
    command.process_group(0);
    Running::spawn(command)
}

/// How A holds: whether its command ignores SIGTERM, and its `--ttl` if
/// not [`TTL`].
#[derive(Clone, Copy, Default)]
struct Holding {
    ignore_term: bool,
    ttl: Option<&'static str>,
}

/// A new store for `scenario`; A holding, through a fault proxy if
/// `proxied`, its command ignoring SIGTERM if `ignore_term`; B waiting.
fn start<S: StoreUnderTest>(
    scenario: &str,
    fault: &str,
    proxied: bool,
    ignore_term: bool,
) -> Run<S> {
    let began = Instant::now();
    let store = S::start(scenario);
    let via = match proxied {
        true => Via::Proxy,
        false => Via::Direct,
    };
    let a = Holding {
        ignore_term,
        ttl: None,
    };
    start_on(store, began, scenario, fault, via, a, |_| {})
}

/// How A and B reach the store: directly, A through a fault proxy, or
/// each by its own store URL (of some members of a replicated store).
enum Via {
    Direct,
    Proxy,
    Urls(String, String),
}

/// [`start`] on `store`, started at `began`, A holding as `holding` says;
/// `before_b` is done to the store once A holds, before B starts.
fn start_on<S: StoreUnderTest>(
    store: S,
    began: Instant,
    scenario: &str,
    fault: &str,
    via: Via,
    holding: Holding,
    before_b: impl FnOnce(&S),
) -> Run<S> {
    let dir = TempDir::new(&format!("every-fault-{}-{scenario}", S::NAME));
    let ticks = Ticks::new(&dir.0);
    let proxy = matches!(via, Via::Proxy).then(|| Proxy::start(&store.link()));
    let (a_url, b_url) = match (via, &proxy) {
        (Via::Urls(a, b), _) => (a, b),
        (_, Some(proxy)) => (store.url_through(proxy.port), store.url()),
        (_, None) => (store.url(), store.url()),
    };
    let mut a = contender(&a_url, "A", &ticks, holding.ignore_term, holding.ttl);
    let a_token = a.expect_line("token", 20 * SECOND).parse().unwrap();
    let a_group = a.expect_line("pgid", 5 * SECOND).parse().unwrap();
    ticks.first("A", 5 * SECOND);
    before_b(&store);
    let mut b = contender(&b_url, "B", &ticks, false, None);
    let b_url = b_url.to_string();
    let give_up = Instant::now() + 10 * SECOND;
    while store.contenders(LOCK) != 2 || ticks.last("B").is_some() {
        if Instant::now() > give_up || ticks.last("B").is_some() {
            panic!(
                "{}, {fault}: A holding, B waiting: {} contenders, B ticked: {:?}\nA said:\n  {}\nB said:\n  {}",
                S::NAME,
                store.contenders(LOCK),
                ticks.last("B"),
                a.drain_stderr().replace('\n', "\n  "),
                b.drain_stderr().replace('\n', "\n  ")
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let a_elect = a.pid();
    let a_guard = find_child(a_elect, support::GUARD);
    let a_command = find_child(a_guard, "sh");
    Run {
        fault: fault.to_string(),
        began,
        a,
        a_elect,
        a_guard,
        a_command,
        a_group,
        a_token,
        b,
        b_url,
        ticks,
        proxy,
        store,
        _dir: dir,
    }
}

fn ns(d: Duration) -> i128 {
    d.as_nanos() as i128
}

fn ms(ns: i128) -> f64 {
    ns as f64 / 1e6
}

/// Wait until `done` or monotonic `until`; whether `done`.
fn wait_until(until: i128, mut done: impl FnMut() -> bool) -> bool {
    loop {
        if done() {
            return true;
        }
        if monotonic_ns() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

impl<S: StoreUnderTest> Run<S> {
    fn proxy(&self) -> &Proxy {
        self.proxy.as_ref().expect("A's link goes through a proxy")
    }

    /// Everything A and B said, for a failure's message.
    fn said(&mut self) -> String {
        format!(
            "A said:\n  {}\nB said:\n  {}",
            self.a.drain_stderr().replace('\n', "\n  "),
            self.b.drain_stderr().replace('\n', "\n  ")
        )
    }

    /// Judge the run after a fault that began at `began` and healed at
    /// `healed` (monotonic ns): see the module's doc. `allowed_ms`: the
    /// overlap the fault is allowed (below zero unless said otherwise).
    fn judge(self, expected: Tenure, began: i128, healed: i128, allowed_ms: f64) {
        self.judge_and_keep(expected, began, healed, allowed_ms);
    }

    /// [`Run::judge`], the run kept for a look at what it left.
    fn judge_and_keep(
        mut self,
        expected: Tenure,
        began: i128,
        healed: i128,
        allowed_ms: f64,
    ) -> Self {
        let name = S::NAME;
        let fault = self.fault.clone();
        // A renewal sent before the fault is good for a TTL, and the first
        // after it heals is answered within a second.
        let decide_by = (began + ns(TTL) + ns(Duration::from_millis(300))).max(healed + ns(SECOND));
        let (ticks, a_group) = (&self.ticks, self.a_group);
        wait_until(decide_by, || {
            ticks.last("B").is_some() || !group_alive(a_group)
        });
        let kept = self.ticks.last("B").is_none() && group_alive(self.a_group);
        let asked_to_end = if kept {
            // A holds on, as it may: it ends the usual way, and B follows.
            signal(self.a_elect, libc::SIGTERM);
            monotonic_ns()
        } else {
            healed
        };
        let (ticks, b) = (&self.ticks, &mut self.b);
        let b_held = wait_until(asked_to_end + ns(HOLDER_AGAIN_WITHIN), || {
            ticks.last("B").is_some() || b.try_wait_code().is_some()
        }) && ticks.last("B").is_some();
        if !b_held {
            let said = self.said();
            panic!(
                "{name}, {fault}: nobody held the lock within {HOLDER_AGAIN_WITHIN:?} of {} \
                 (A {}):\n{said}",
                if kept { "A's end" } else { "the heal" },
                if kept { "kept the lock" } else { "lost it" },
            );
        }
        let overlap = self.ticks.overlap_ms("A", self.a_group, "B");
        let first_b = self.ticks.first("B", SECOND);
        let left = group_members(self.a_group);
        eprintln!(
            "{name}, {fault}: overlap {overlap:.0} ms (A {}; B's first tick {:.0} ms after {}; \
             run {:.1} s)",
            if kept { "kept the lock" } else { "lost it" },
            ms(first_b - asked_to_end),
            if kept {
                "A was told to end"
            } else {
                "the heal"
            },
            self.began.elapsed().as_secs_f64(),
        );
        if overlap >= allowed_ms || !left.is_empty() {
            let said = self.said();
            assert!(
                overlap < allowed_ms,
                "{name}, {fault}: A's command ran {overlap:.0} ms beside B's (allowed: under \
                 {allowed_ms:.0}):\n{said}"
            );
            panic!("{name}, {fault}: A's command group outlived its tenure: {left:?}\n{said}");
        }
        let b_token: u64 = self.b.expect_line("token", SECOND).parse().unwrap();
        assert!(
            b_token > self.a_token,
            "{name}, {fault}: B's token {b_token} is not above A's {}",
            self.a_token
        );
        match expected {
            Tenure::Ended => assert!(!kept, "{name}, {fault}: A kept the lock\n{}", self.said()),
            Tenure::Kept => assert!(
                kept,
                "{name}, {fault}: A lost the lock it kept renewing\n{}",
                self.said()
            ),
            Tenure::Either => {}
        }
        // A's elect ends, whatever happened to it; B ends when told.
        self.a.wait(10 * SECOND);
        self.b.signal(libc::SIGTERM);
        self.b.wait(10 * SECOND);
        // However A's tenure ended, the history says how once B has held
        // the lock: never still running, nor ended without a word.
        if let Some(a) = self.a_in_the_history_if_any() {
            assert!(
                !matches!(a["outcome"].as_str(), Some("running" | "unrecorded")),
                "{name}, {fault}: A's tenure in the history: {a:#}"
            );
        }
        self
    }
}

impl<S: StoreUnderTest> Run<S> {
    /// A's tenure as the lock's history tells it now, if it has one.
    fn a_in_the_history_if_any(&self) -> Option<serde_json::Value> {
        let out = support::elect()
            .args(["history", "--json", "--store", &self.b_url, "--lock", LOCK])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .find(|t| t["token"] == self.a_token)
    }

    /// A's tenure as the lock's history tells it, once both have ended.
    fn a_in_the_history(&self) -> serde_json::Value {
        self.a_in_the_history_if_any().unwrap_or_else(|| {
            let out = support::elect()
                .args(["history", "--json", "--store", &self.b_url, "--lock", LOCK])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            panic!(
                "{}, {}: no tenure of A's (token {}) in the history: {text}{}",
                S::NAME,
                self.fault,
                self.a_token,
                String::from_utf8_lossy(&out.stderr)
            )
        })
    }
}

/// The holder's link cut the way `mode` does for `ttls` × TTL.
fn cut<S: StoreUnderTest>(scenario: &str, mode: Mode, ttls: f64, expected: Tenure) {
    assert!(S::HAS_LINK);
    let fault = format!("link {mode:?} for {ttls} TTL").to_lowercase();
    let run = start::<S>(scenario, &fault, true, false);
    let began = monotonic_ns();
    run.proxy().set(mode);
    std::thread::sleep(TTL.mul_f64(ttls));
    run.proxy().set(Mode::Forward);
    run.judge(expected, began, monotonic_ns(), 0.0);
}

fn link_blackholed_for_half_a_ttl<S: StoreUnderTest>() {
    cut::<S>("blackhole-short", Mode::Blackhole, 0.5, Tenure::Either);
}

fn link_blackholed_for_one_and_a_half_ttls<S: StoreUnderTest>() {
    cut::<S>("blackhole-long", Mode::Blackhole, 1.5, Tenure::Ended);
}

fn link_reset_for_half_a_ttl<S: StoreUnderTest>() {
    cut::<S>("reset-short", Mode::Reset, 0.5, Tenure::Either);
}

fn link_reset_for_one_and_a_half_ttls<S: StoreUnderTest>() {
    cut::<S>("reset-long", Mode::Reset, 1.5, Tenure::Ended);
}

/// The holder's link slowed by `one_way` each way for 1.5 TTL.
fn delay<S: StoreUnderTest>(scenario: &str, one_way: Duration, expected: Tenure) {
    assert!(S::HAS_LINK);
    let fault = format!("link delayed {one_way:?} each way");
    let run = start::<S>(scenario, &fault, true, false);
    let began = monotonic_ns();
    run.proxy().set(Mode::Delay(one_way));
    std::thread::sleep(TTL.mul_f64(1.5));
    run.proxy().set(Mode::Forward);
    run.judge(expected, began, monotonic_ns(), 0.0);
}

/// A 400 ms round trip: within what a 2 s lease with a 500 ms grace
/// survives (TTL − TTL/3 − grace − margin: 744 ms), when nothing else is
/// slow; with two tests at a time on two cores, not always. That the lease
/// holds is `tests/stores/etcd/slow_link.rs`'s, one test at a time.
fn link_delayed_200ms_each_way<S: StoreUnderTest>() {
    delay::<S>("delay-200", Duration::from_millis(200), Tenure::Either);
}

/// A 1 s round trip: beyond it.
fn link_delayed_500ms_each_way<S: StoreUnderTest>() {
    delay::<S>("delay-500", Duration::from_millis(500), Tenure::Ended);
}

/// 30 % of the packets each way between A and its proxy dropped, for 2 TTL.
fn link_losing_30_percent_of_packets<S: StoreUnderTest>() {
    assert!(S::HAS_LINK);
    let run = start::<S>("loss", "link losing 30 % of packets", true, false);
    let began = monotonic_ns();
    let loss = Loss::on_port(run.proxy().port, 30);
    std::thread::sleep(2 * TTL);
    drop(loss);
    run.judge(Tenure::Either, began, monotonic_ns(), 0.0);
}

/// SIGSTOP to A's elect alone for 1.5 TTL: its guard runs on, and must
/// stop the command by the deadline.
fn elect_stopped_past_the_ttl<S: StoreUnderTest>() {
    let run = start::<S>("elect-stopped", "elect SIGSTOPped 1.5 TTL", false, false);
    let began = monotonic_ns();
    signal(run.a_elect, libc::SIGSTOP);
    std::thread::sleep(TTL.mul_f64(1.5));
    signal(run.a_elect, libc::SIGCONT);
    // On every store, `file:` too: the guard stops the command of an elect
    // that has not renewed for its TTL, and the lock passes.
    run.judge(Tenure::Ended, began, monotonic_ns(), 0.0);
}

/// The store's server SIGSTOPped for 1.5 TTL: nobody can renew.
fn server_stopped_past_the_ttl<S: StoreUnderTest>() {
    assert!(S::HAS_SERVER);
    let run = start::<S>("server-stopped", "server SIGSTOPped 1.5 TTL", false, false);
    let began = monotonic_ns();
    run.store.pause_server();
    std::thread::sleep(TTL.mul_f64(1.5));
    run.store.resume_server();
    run.judge(Tenure::Ended, began, monotonic_ns(), 0.0);
}

fn restarted<S: StoreUnderTest>(how: &str) {
    assert!(S::HAS_SERVER);
    let mut run = start::<S>(
        &format!("restart-{how}"),
        &format!("server restarted {how}"),
        false,
        false,
    );
    let began = monotonic_ns();
    let timer = Instant::now();
    run.store.restart_server(how);
    run.fault = format!(
        "{} (down {:.0} ms)",
        run.fault,
        timer.elapsed().as_secs_f64() * 1e3
    );
    run.judge(Tenure::Either, began, monotonic_ns(), 0.0);
}

fn server_restarted_fast<S: StoreUnderTest>() {
    restarted::<S>("fast");
}

fn server_restarted_immediately<S: StoreUnderTest>() {
    restarted::<S>("immediate");
}

/// SIGKILL to each of `victims` of A at once: elect, the guard, the
/// command's own process (its ticking grandchild is not signalled). One
/// after the first may be gone already, ended (and reaped) by those
/// watching a victim killed before it, when this thread was held up
/// between the two kills on a busy machine.
fn sigkill<S: StoreUnderTest>(scenario: &str, victims: &[&str]) {
    let fault = format!("SIGKILL of {}", victims.join(" + "));
    let run = start::<S>(scenario, &fault, false, false);
    let began = monotonic_ns();
    for (k, victim) in victims.iter().enumerate() {
        let pid = match *victim {
            "elect" => run.a_elect,
            "guard" => run.a_guard,
            "command" => run.a_command,
            _ => unreachable!("{victim}"),
        };
        if k == 0 {
            signal(pid, libc::SIGKILL);
            continue;
        }
        // SAFETY: plain kill(2).
        let r = unsafe { libc::kill(pid, libc::SIGKILL) };
        let e = std::io::Error::last_os_error();
        assert!(
            r == 0 || e.raw_os_error() == Some(libc::ESRCH),
            "SIGKILL to {victim} {pid}: {e}"
        );
    }
    run.judge(Tenure::Ended, began, began, 0.0);
}

fn sigkill_of_elect<S: StoreUnderTest>() {
    sigkill::<S>("kill-elect", &["elect"]);
}

fn sigkill_of_the_guard<S: StoreUnderTest>() {
    sigkill::<S>("kill-guard", &["guard"]);
}

/// Both watchers at once: the sentinel, whose pid the command's group
/// bears, is left.
fn sigkill_of_elect_and_guard<S: StoreUnderTest>() {
    sigkill::<S>("kill-elect-guard", &["elect", "guard"]);
}

fn sigkill_of_elect_guard_and_command<S: StoreUnderTest>() {
    sigkill::<S>("kill-all", &["elect", "guard", "command"]);
}

/// `elect break [extra]` of A, whose command ignores SIGTERM.
fn broken<S: StoreUnderTest>(scenario: &str, extra: &[&str], allowed: Duration) {
    let fault =
        format!("break {}on a command ignoring TERM", extra.join(" ") + " ").replace("  ", " ");
    let run = start::<S>(scenario, &fault, false, true);
    let began = monotonic_ns();
    let out = elect()
        .args([
            "break",
            "--store",
            &run.store.url(),
            "--lock",
            LOCK,
            "--yes",
        ])
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{}, {fault}: {said}", S::NAME);
    let allowed_ms = allowed.as_secs_f64() * 1e3;
    run.judge(Tenure::Ended, began, began, allowed_ms);
}

fn break_on_a_command_ignoring_term<S: StoreUnderTest>() {
    broken::<S>("break", &[], Duration::ZERO);
}

/// `--force` ends the lease at once: the old command may run on until its
/// elect notices, as much as the README promises for the store.
fn break_force_on_a_command_ignoring_term<S: StoreUnderTest>() {
    broken::<S>("break-force", &["--force"], S::forced_break_overlap(TTL));
}

/// A holding and B waiting, each listening for news of the lock on a
/// connection of its own; then every such connection ended by the server
/// (as a restart, `pg_terminate_backend` from an idle-session reaper, or
/// `idle_session_timeout` ends it), the renewals' connections left alone.
fn listening<S: StoreUnderTest>(scenario: &str, fault: &str, ignore_term: bool) -> Run<S> {
    assert!(S::NOTIFIES);
    let run = start::<S>(scenario, fault, false, ignore_term);
    let give_up = Instant::now() + 10 * SECOND;
    while run.store.notification_connections() < 2 {
        assert!(
            Instant::now() < give_up,
            "{}, {fault}: A and B are not both listening",
            S::NAME
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let ended = run.store.end_notification_connections();
    assert!(ended >= 2, "{}, {fault}: ended {ended} listeners", S::NAME);
    run
}

/// The listeners ended, then `elect break --force` of A: A must hear of it
/// as soon as it listens again, within the bound `--force` promises.
fn listener_ended_then_a_forced_break<S: StoreUnderTest>() {
    let fault = "listeners ended, then break --force on a command ignoring TERM";
    let run = listening::<S>("listener-force", fault, true);
    let began = monotonic_ns();
    let out = elect()
        .args([
            "break",
            "--store",
            &run.store.url(),
            "--lock",
            LOCK,
            "--yes",
            "--force",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{}, {fault}: {said}", S::NAME);
    let allowed = S::forced_break_overlap(TTL).as_secs_f64() * 1e3;
    run.judge(Tenure::Ended, began, began, allowed);
}

/// The listeners ended, then A let go: B must hear of the release as soon
/// as it listens again, and start within milliseconds, not at its next
/// look at the row.
fn listener_ended_then_a_release<S: StoreUnderTest>() {
    let fault = "listeners ended, then A let go";
    let mut run = listening::<S>("listener-release", fault, false);
    // Both listen again first: the release is heard, not found by a look.
    let give_up = Instant::now() + 5 * SECOND;
    while run.store.notification_connections() < 2 {
        assert!(
            Instant::now() < give_up,
            "{}, {fault}: A and B did not listen again within 5 s\n{}",
            S::NAME,
            run.said()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    signal(run.a_elect, libc::SIGTERM);
    let first_b = run.ticks.first("B", HOLDER_AGAIN_WITHIN);
    let last_a = run.ticks.last("A").expect("A ticked");
    let handover = ms(first_b - last_a);
    eprintln!(
        "{}, {fault}: B's first tick {handover:.0} ms after A's last",
        S::NAME
    );
    assert!(
        handover < 400.0,
        "{}, {fault}: B started {handover:.0} ms after A's command ended\n{}",
        S::NAME,
        run.said()
    );
    run.a.wait(10 * SECOND);
    run.b.signal(libc::SIGTERM);
    run.b.wait(10 * SECOND);
}

/// Every commit waits for a synchronous standby that is gone (named in
/// `synchronous_standby_names`, never connected): a take never commits.
/// `elect run -n` must end within its `--connect-timeout` (plus the second
/// it takes to ask the server why), exit 69 naming the cause in one line,
/// never run its command, and leave no session waiting on the server.
fn commits_wait_for_a_standby_that_is_gone<S: StoreUnderTest>() {
    assert!(S::WAITS_FOR_A_STANDBY);
    let mut store = S::start("standby-gone");
    store.lose_the_synchronous_standby();
    let dir = TempDir::new(&format!("every-fault-{}-standby-gone", S::NAME));
    let ran = dir.0.join("ran");
    let mut command = elect_run(
        &store.url(),
        LOCK,
        &["-n", "--connect-timeout", "3s"],
        &format!("touch {}", ran.display()),
    );
    command.stdin(Stdio::null());
    let started = Instant::now();
    let mut run = Running::spawn(command);
    let name = S::NAME;
    let code = loop {
        if let Some(code) = run.try_wait_code() {
            break code;
        }
        if started.elapsed() > 10 * SECOND {
            let said = run.drain_stderr();
            run.signal(libc::SIGKILL);
            panic!(
                "{name}: elect run -n --connect-timeout 3s did not end within 10 s \
                 ({} sessions wait for the standby)\n{said}",
                store.waiting_for_the_standby()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let took = started.elapsed();
    let said = run.stderr_to_end(SECOND);
    eprintln!("{name}, a synchronous standby gone: exit {code} after {took:?}: {said}");
    assert_eq!(code, 69, "{name}: {said}");
    assert!(
        took < Duration::from_millis(5500),
        "{name}: ended after {took:?}"
    );
    assert_eq!(said.trim().lines().count(), 1, "{name}: {said}");
    assert!(said.contains("synchronous"), "{name}: {said}");
    assert!(!ran.exists(), "{name}: the command ran");
    // The cancel is sent before elect exits: nothing waits on after it.
    let waiting = store.waiting_for_the_standby();
    assert_eq!(
        waiting, 0,
        "{name}: {waiting} sessions still wait for the standby"
    );
}

/// The store turns elect away at its limit: its connections (a herd of
/// clients, a DBA's limit), or its requests, for load (an API server's
/// 429). `elect run -n` keeps trying for its `--connect-timeout`, then
/// exits 69 in one line that names the limit, never running its command;
/// one that is still trying when the limit lifts takes the lock.
fn at_its_connection_limit<S: StoreUnderTest>() {
    assert!(S::LIMITS_CONNECTIONS);
    let name = S::NAME;
    let mut store = S::start("connection-limit");
    store.reach_the_connection_limit();
    let dir = TempDir::new(&format!("every-fault-{name}-connection-limit"));
    let ran = dir.0.join("ran");
    let mut command = elect_run(
        &store.url(),
        LOCK,
        &["-n", "--connect-timeout", "2s"],
        &format!("touch {}", ran.display()),
    );
    command.stdin(Stdio::null());
    let started = Instant::now();
    let mut run = Running::spawn(command);
    let code = run.wait_code(10 * SECOND);
    let took = started.elapsed();
    let said = run.stderr_to_end(SECOND);
    eprintln!("{name}, at its connection limit: exit {code} after {took:?}: {said}");
    assert_eq!(code, 69, "{name}: {said}");
    assert!(
        took >= 2 * SECOND && took < Duration::from_millis(3500),
        "{name}: ended after {took:?}, not at its --connect-timeout of 2 s"
    );
    assert_eq!(said.trim().lines().count(), 1, "{name}: {said}");
    assert!(said.contains(S::AT_THE_LIMIT_SAYS), "{name}: {said}");
    assert!(!ran.exists(), "{name}: the command ran");
    // Still trying when a connection frees: it takes the lock.
    let mut command = elect_run(
        &store.url(),
        LOCK,
        &["-n", "--connect-timeout", "10s"],
        &format!("touch {}", ran.display()),
    );
    command.stdin(Stdio::null());
    let mut run = Running::spawn(command);
    // The limit holds for a second of the attempt, then lifts.
    std::thread::sleep(SECOND);
    assert!(run.try_wait_code().is_none(), "{name}: gave up at once");
    store.lift_the_connection_limit();
    let code = run.wait_code(15 * SECOND);
    let said = run.stderr_to_end(SECOND);
    assert_eq!(code, 0, "{name}, the limit lifted: {said}");
    assert!(ran.exists(), "{name}: the command did not run");
}

/// Under a low open-file limit (a tight container, systemd's
/// `LimitNOFILE=`), `run` and `status` exit 71 at once in one line that
/// names the limit: never an abort, never the store's fault (69), never a
/// wait for `--connect-timeout`; at the limit elect needs, a run runs, and
/// the lock is left free.
fn a_low_open_file_limit<S: StoreUnderTest>() {
    let name = S::NAME;
    let store = S::start("open-files");
    let url = store.url();
    for n in [3, 8, 9, 12, 16, 24, limits::NEEDED - 1] {
        let args = ["run", "--store", &url, "--lock", LOCK, "--", "true"];
        let (out, took) = limits::run_limited(&args, n, n);
        limits::assert_too_low(&format!("{name}, ulimit -n {n}"), &out, took, n);
        let args = ["status", "--store", &url, "--lock", LOCK];
        let (out, took) = limits::run_limited(&args, n, n);
        limits::assert_too_low(&format!("{name} status, ulimit -n {n}"), &out, took, n);
    }
    for n in [limits::NEEDED, 40] {
        let args = ["run", "--store", &url, "--lock", LOCK, "--", "true"];
        let (out, _) = limits::run_limited(&args, n, n);
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{name}, ulimit -n {n}: {said}");
    }
    let out = elect_run(&url, LOCK, &["--wait", "0"], "echo ran")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "ran\n",
        "{name}: the lock is not free: {said}"
    );
}

/// A waiter whose descriptors are taken from it while it waits (its limit
/// lowered to 0 under it, as `prlimit` does) ends with 71 in one line when
/// the lock is let go, at once, and never runs its command.
fn descriptors_taken_from_a_waiter<S: StoreUnderTest>() {
    let mut run = start::<S>(
        "descriptors-taken",
        "descriptors taken from B",
        false,
        false,
    );
    let name = S::NAME;
    let none = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: prlimit reads the struct given and writes none.
    let set = unsafe {
        libc::prlimit(
            run.b.pid(),
            libc::RLIMIT_NOFILE,
            &none,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(set, 0, "{}", std::io::Error::last_os_error());
    let released = Instant::now();
    signal(run.a_elect, libc::SIGTERM);
    run.a.wait(10 * SECOND);
    let code = run.b.wait_code(10 * SECOND);
    let took = released.elapsed();
    let said = run.b.drain_stderr();
    eprintln!("{name}, descriptors taken from B: exit {code} {took:?} after A's end: {said}");
    assert_eq!(code, 71, "{name}: {said}");
    assert!(took < 3 * SECOND, "{name}: took {took:?}");
    // B runs with -v; its last line says why it ended.
    let last = said.trim().lines().last().unwrap_or_default();
    assert!(last.contains("LimitNOFILE="), "{name}: {said}");
    assert!(!said.contains("panicked"), "{name}: {said}");
    assert!(run.ticks.last("B").is_none(), "{name}: B's command ran");
}

/// A credential program as slow as a cloud's (`aws eks get-token`: 5 s
/// its first run, within --connect-timeout, 2 s after) whose credentials
/// live 8 s, under a holder at --ttl 3s: the first take waits for one,
/// and later ones are fetched ahead of need, off the renewals' way, so
/// the holder keeps its lock through two refreshes and more.
fn a_slow_credential_program<S: StoreUnderTest>() {
    assert!(S::FETCHES_CREDENTIALS);
    let name = S::NAME;
    let store = S::start("slow-credentials");
    let dir = TempDir::new(&format!("every-fault-{name}-slow-credentials"));
    let ran = dir.join("ran");
    let body = format!(
        "n=$(cat {ran} 2>/dev/null | wc -l)\necho run >> {ran}\n\
         if [ \"$n\" = 0 ]; then sleep 5; else sleep 2; fi",
        ran = ran.display()
    );
    let credentials = store.credentials_from(&dir, "slow", &body, 8);
    let runs = || {
        std::fs::read_to_string(&ran)
            .unwrap_or_default()
            .lines()
            .count()
    };
    let mut holder = Running::spawn({
        let mut c = elect();
        c.envs(credentials.env.iter().map(|(k, v)| (k, v)))
            .args(["run", "--store", &credentials.url, "--lock", LOCK])
            .args([
                "--ttl",
                "3s",
                "-v",
                "--",
                "sh",
                "-c",
                "echo held; read _line",
            ]);
        c
    });
    holder.expect_line("held", 20 * SECOND);
    // Two refreshes ended once a fourth run starts.
    support::eventually("two refreshes", 40 * SECOND, || match runs() {
        n if n >= 4 => Ok(()),
        n => match holder.try_wait_code() {
            Some(code) => panic!(
                "{name}: elect ended ({code}) after {n} runs of the program: {:?}",
                holder.drain_stderr()
            ),
            None => Err(format!("{n} runs")),
        },
    });
    assert_eq!(holder.try_wait_code(), None, "{}", holder.drain_stderr());
    holder.send_line("done");
    let code = holder.wait_code(20 * SECOND);
    let said = holder.drain_stderr();
    assert_eq!(code, 0, "{name}: {said}");
    assert!(!said.contains("renewal failed"), "{name}: {said}");
}

/// A credential program that never ends: elect names it and how long it
/// waited, within --connect-timeout, exit 69, and none of its processes
/// (the script and its `sleep`) is left. Then one that gives a credential
/// that lives 6 s and hangs when run again ahead of its expiry: the holder
/// keeps its lock while the credential in hand lives, says the program
/// hangs, and loses the lock only once that credential has expired; none
/// of the program's processes is left.
fn a_hung_credential_program<S: StoreUnderTest>() {
    assert!(S::FETCHES_CREDENTIALS);
    let name = S::NAME;
    let store = S::start("hung-credentials");
    let dir = TempDir::new(&format!("every-fault-{name}-hung-credentials"));
    let pids = dir.join("pids");
    let body = format!("echo $$ >> {}\nsleep 1000", pids.display());
    let credentials = store.credentials_from(&dir, "hung", &body, 3600);
    let started = Instant::now();
    let out = elect()
        .envs(credentials.env.iter().map(|(k, v)| (k, v)))
        .args(["run", "--store", &credentials.url, "--lock", LOCK])
        .args(["--connect-timeout", "3s", "--", "true"])
        .output()
        .unwrap();
    let took = started.elapsed();
    let said = String::from_utf8_lossy(&out.stderr);
    eprintln!("{name}, a credential program that hangs: after {took:?}: {said}");
    assert_eq!(out.status.code(), Some(69), "{name}: {said}");
    assert!(took < 5 * SECOND, "{name}: {took:?}");
    assert_eq!(said.trim().lines().count(), 1, "{name}: {said}");
    assert!(
        said.contains(&credentials.program.display().to_string())
            && said.contains("hangs: no token after 3s"),
        "{name}: {said}"
    );
    let groups: Vec<i32> = std::fs::read_to_string(&pids)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(groups.len(), 1, "{name}: the program ran once: {groups:?}");
    support::until("the program's process group empty", SECOND, || {
        !group_alive(groups[0])
    });

    let pids = dir.join("pids-hold");
    let body = format!(
        "if [ -e {pids} ]; then echo $$ >> {pids}; sleep 1000; fi\necho first > {pids}",
        pids = pids.display()
    );
    let credentials = store.credentials_from(&dir, "hangs-later", &body, 6);
    let mut holder = Running::spawn({
        let mut c = elect();
        c.envs(credentials.env.iter().map(|(k, v)| (k, v)))
            .args(["run", "--store", &credentials.url, "--lock", LOCK])
            .args(["--ttl", "3s", "--", "sh", "-c", "echo held; read _line"]);
        c
    });
    holder.expect_line("held", 20 * SECOND);
    let hung = || {
        std::fs::read_to_string(&pids)
            .unwrap_or_default()
            .lines()
            .skip(1)
            .map(|l| l.parse::<i32>().unwrap())
            .collect::<Vec<i32>>()
    };
    support::until("the program run again", 10 * SECOND, || !hung().is_empty());
    let refresh = Instant::now();
    let code = holder.wait_code(30 * SECOND);
    let held = refresh.elapsed();
    let said = holder.drain_stderr();
    eprintln!("{name}: lost {held:?} after the program hung: {said}");
    assert_eq!(code, 76, "{name}: {said}");
    // The refresh started with 3 s of the credential left; a renewal that
    // waited for it would have lost the lock within a TTL.
    assert!(held > 3 * SECOND, "{name}: {held:?}: {said}");
    assert!(
        said.contains("hangs-later.sh has run for")
            && said.contains("the token in hand has expired"),
        "{name}: {said}"
    );
    for group in hung() {
        support::until("the program's process group empty", SECOND, || {
            !group_alive(group)
        });
    }
}

/// A new store backed up, then written to by others (its counter well past
/// the backup's when A takes the lock, as in a store in use); A holding,
/// B waiting.
fn backed_up<S: StoreUnderTest>(scenario: &str, fault: &str) -> Run<S> {
    assert!(S::RESTORES);
    let began = Instant::now();
    let mut store = S::start(scenario);
    store.save_state();
    for _ in 0..10 {
        store.unrelated_write();
    }
    let a = Holding::default();
    start_on(store, began, scenario, fault, Via::Direct, a, |_| {})
}

/// The store restored from a backup saved before A took the lock, as in a
/// disaster recovery: its revision goes back below A's token.
///
/// Restored as the store's tools do by default, what the store says of the
/// lock is the past's: A's key is gone while A's command runs, and a key
/// put now gets a token below A's. A must stop its command at once (a
/// contender that never saw A's token may take the lock as soon as the
/// store serves), and B, which saw A's token, must take none at or below
/// it: it ends with 69, naming the rewind, once a TTL has passed (by then
/// any holder of the old state is stopped). A contender started afresh
/// then holds the lock: nothing is left stuck.
fn restored_from_an_older_backup<S: StoreUnderTest>() {
    let fault = "restored from a backup older than A's tenure";
    let mut run = backed_up::<S>("restored", fault);
    let restore = monotonic_ns();
    run.store.restore_state(false);
    let serving = monotonic_ns();
    let name = S::NAME;
    // B: no token at or below A's, and an end that names the rewind.
    let (ticks, b) = (&run.ticks, &mut run.b);
    wait_until(serving + ns(TTL + 10 * SECOND), || {
        ticks.last("B").is_some() || b.try_wait_code().is_some()
    });
    if let Some(b_first) = run.ticks.earliest("B") {
        let b_token = run.b.expect_line("token", SECOND);
        let overlap = run.ticks.overlap_ms("A", run.a_group, "B");
        let said = run.said();
        panic!(
            "{name}, {fault}: B took the lock with token {b_token} (A's: {}), its first tick \
             {:.0} ms after the store served again; overlap {overlap:.0} ms\n{said}",
            run.a_token,
            ms(b_first - serving),
        );
    }
    let b_code = run.b.wait_code(SECOND);
    let b_said = run.b.stderr_to_end(SECOND);
    let a_code = run.a.wait_code(10 * SECOND);
    let a_said = run.a.drain_stderr();
    let a_last = run.ticks.last("A").expect("A ticked");
    eprintln!(
        "{name}, {fault}: A's command ran on {:.0} ms after the store served again (restore \
         took {:.0} ms); A exited {a_code}, B {b_code}: {}",
        ms(a_last - serving),
        ms(serving - restore),
        b_said.lines().last().unwrap_or_default()
    );
    assert_eq!(
        b_code, 69,
        "{name}, {fault}: B's exit code\nB said:\n  {b_said}"
    );
    assert!(
        b_said.contains("went back from"),
        "{name}, {fault}: B did not say the store went back\nB said:\n  {b_said}"
    );
    assert_eq!(
        a_code, 76,
        "{name}, {fault}: A's exit code\nA said:\n  {a_said}"
    );
    let left = group_members(run.a_group);
    assert!(
        left.is_empty(),
        "{name}, {fault}: A's command group outlived its tenure: {left:?}"
    );
    // A fresh contender would have found the lock free as soon as the store
    // served: A's command must be gone within what the store allows.
    let within = S::restore_noticed_within(TTL);
    assert!(
        a_last - serving < ns(within),
        "{name}, {fault}: A's command ran on {:.0} ms after the store served again (allowed: \
         {within:?})\nA said:\n  {a_said}",
        ms(a_last - serving)
    );
    let mut c = contender(&run.store.url(), "C", &run.ticks, false, None);
    run.ticks.first("C", HOLDER_AGAIN_WITHIN);
    c.signal(libc::SIGTERM);
    c.wait(10 * SECOND);
}

/// As [`restored_from_an_older_backup`], restored the way the store's
/// tools keep its counters above those handed out since the backup (etcd:
/// `--bump-revision`, from 3.5 on): then a restore is a loss like any
/// other, and B takes the lock after A's command is gone, with a higher
/// token.
fn restored_with_the_revision_bumped<S: StoreUnderTest>() {
    let fault = "restored from a backup older than A's tenure, the revision bumped";
    let mut run = backed_up::<S>("restored-bumped", fault);
    let restore = monotonic_ns();
    run.store.restore_state(true);
    // A's key is gone as for an end from outside: the same bound.
    let allowed = S::forced_break_overlap(TTL).as_secs_f64() * 1e3;
    run.judge(Tenure::Ended, restore, monotonic_ns(), allowed);
}

/// The store's wall clock stepped to `offset` just after one of A's
/// renewals, with B queued before the step, or started after it: A renews
/// on and keeps the lock for 2 TTL, which a lease judged by the stepped
/// clock alone would not outlive; once told to end, it hands over as ever.
fn clock_stepped<S: StoreUnderTest>(scenario: &str, offset: &str, b_after: bool) {
    assert!(S::JUDGES_BY_ITS_CLOCK);
    let fault = format!(
        "clock stepped {offset}, B {}",
        match b_after {
            true => "started after the step",
            false => "queued before it",
        }
    );
    let began = Instant::now();
    let store = S::start_with_a_steppable_clock(scenario);
    let mut stepped = None;
    let run = start_on(
        store,
        began,
        scenario,
        &fault,
        Via::Direct,
        Holding::default(),
        |store| {
            if b_after {
                store.step_clock(LOCK, offset);
                stepped = Some(monotonic_ns());
            }
        },
    );
    let stepped = stepped.unwrap_or_else(|| {
        run.store.step_clock(LOCK, offset);
        monotonic_ns()
    });
    std::thread::sleep(2 * TTL);
    run.judge(Tenure::Kept, stepped, monotonic_ns(), 0.0);
}

fn clock_stepped_an_hour_ahead_b_queued<S: StoreUnderTest>() {
    clock_stepped::<S>("clock-hour-ahead-queued", "+1h", false);
}

fn clock_stepped_an_hour_ahead_b_started_after<S: StoreUnderTest>() {
    clock_stepped::<S>("clock-hour-ahead-after", "+1h", true);
}

fn clock_stepped_a_day_ahead_b_started_after<S: StoreUnderTest>() {
    clock_stepped::<S>("clock-day-ahead-after", "+1d", true);
}

fn clock_stepped_an_hour_back_b_queued<S: StoreUnderTest>() {
    clock_stepped::<S>("clock-hour-back-queued", "-1h", false);
}

fn clock_stepped_an_hour_back_b_started_after<S: StoreUnderTest>() {
    clock_stepped::<S>("clock-hour-back-after", "-1h", true);
}

fn clock_stepped_a_day_back_b_queued<S: StoreUnderTest>() {
    clock_stepped::<S>("clock-day-back-queued", "-1d", false);
}

/// Another writer deletes the holder's record, as an administrator's tool
/// would, just after one of A's renewals. B takes the lock at once; A's
/// command, which ignores SIGTERM, must be stopped within what the store
/// promises for a lease ended from outside (as for `break --force`), not
/// at A's next renewal.
fn the_holders_record_deleted_by_another_writer<S: StoreUnderTest>() {
    assert!(S::HAS_FOREIGN_WRITERS);
    let run = start::<S>(
        "foreign-delete",
        "the holder's record deleted by another writer",
        false,
        true,
    );
    run.store.delete_record(LOCK);
    let deleted = monotonic_ns();
    let allowed_ms = S::forced_break_overlap(TTL).as_secs_f64() * 1e3;
    run.judge(Tenure::Ended, deleted, deleted, allowed_ms);
}

/// Another writer shortens the lease the holder's record gives it (a hand
/// edit, a GitOps sync), the holder still named, just after one of A's
/// renewals. A holds with a 6 s TTL, so that its renewals (each TTL/3)
/// come further apart than the shortened lease: a waiter that counts the
/// record's lease could take it between two. A must keep the lock, and B
/// never start while A's command runs, for a TTL and more.
fn the_holders_lease_duration_edited_by_another_writer<S: StoreUnderTest>() {
    assert!(S::HAS_FOREIGN_WRITERS);
    let began = Instant::now();
    let store = S::start("foreign-shorten");
    let a = Holding {
        ignore_term: false,
        ttl: Some("6s"),
    };
    let run = start_on(
        store,
        began,
        "foreign-shorten",
        "the holder's lease duration edited by another writer",
        Via::Direct,
        a,
        |_| {},
    );
    run.store.shorten_record(LOCK);
    let edited = monotonic_ns();
    std::thread::sleep(TTL);
    run.judge(Tenure::Kept, edited, monotonic_ns(), 0.0);
}

/// A new replicated store for `scenario`; A holding through the members
/// `a_members` picks, its command ignoring SIGTERM if `ignore_term`; B
/// waiting through those `b_members` picks (each given the store, with its
/// leader).
fn start_replicated<S: StoreUnderTest>(
    scenario: &str,
    fault: &str,
    ignore_term: bool,
    a_members: impl FnOnce(&S, usize) -> Vec<usize>,
    b_members: impl FnOnce(&S, usize) -> Vec<usize>,
) -> Run<S> {
    assert!(S::REPLICAS > 1);
    let began = Instant::now();
    let store = S::start(scenario);
    let leader = store.leader();
    let (a_url, b_url) = (
        store.url_of(&a_members(&store, leader)),
        store.url_of(&b_members(&store, leader)),
    );
    start_on(
        store,
        began,
        scenario,
        fault,
        Via::Urls(a_url, b_url),
        Holding {
            ignore_term,
            ttl: None,
        },
        |_| {},
    )
}

/// Every member but `leader`.
fn followers<S: StoreUnderTest>(leader: usize) -> Vec<usize> {
    (0..S::REPLICAS).filter(|&i| i != leader).collect()
}

fn every_member<S: StoreUnderTest>(_store: &S, _leader: usize) -> Vec<usize> {
    (0..S::REPLICAS).collect()
}

/// The members that the process `pid` has a TCP connection open to, by its
/// descriptors and its network namespace's table of sockets.
fn members_reached<S: StoreUnderTest>(store: &S, pid: i32) -> Vec<usize> {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|fds| {
            fds.flatten()
                .filter_map(|fd| std::fs::read_link(fd.path()).ok())
                .filter_map(|to| {
                    let to = to.to_string_lossy().into_owned();
                    Some(to.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
                })
                .collect()
        })
        .unwrap_or_default();
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).unwrap_or_default();
    // Established (state 01) connections of its sockets: their remote ports.
    let ports: Vec<u16> = table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let remote = fields.get(2)?;
            (fields.get(3) == Some(&"01")
                && inodes.iter().any(|i| fields.get(9) == Some(&i.as_str())))
            .then(|| u16::from_str_radix(remote.rsplit(':').next()?, 16).ok())?
        })
        .collect();
    (0..S::REPLICAS)
        .filter(|&i| {
            let endpoint = store.member_endpoint(i);
            let port: u16 = endpoint.rsplit(':').next().unwrap().parse().unwrap();
            ports.contains(&port)
        })
        .collect()
}

/// The Raft or ZAB leader SIGKILLed under a holder that knows every
/// member; it comes back once another leads. A new leader is elected
/// within the TTL, or A's lease ends in time.
fn the_leader_killed<S: StoreUnderTest>() {
    let mut run = start_replicated::<S>(
        "leader-killed",
        "the leader SIGKILLed",
        false,
        every_member,
        every_member,
    );
    let leader = run.store.leader();
    let began = monotonic_ns();
    run.store.kill_member(leader);
    let next = run.store.leader();
    let elected = monotonic_ns();
    run.store.restart_member(leader);
    run.store.wait_serving();
    run.fault = format!(
        "the leader SIGKILLed (member {leader}; member {next} led {:.0} ms later)",
        ms(elected - began)
    );
    run.judge(Tenure::Either, began, monotonic_ns(), 0.0);
}

/// The follower that A's elect is connected to SIGKILLed, for 1.5 TTL: the
/// interesting one, since A must go on through another member (A knows the
/// two followers, so that the one it talks to is one; a killed member A
/// does not talk to is a leader's or a quorum's business, not A's).
fn a_member_killed<S: StoreUnderTest>() {
    let mut run = start_replicated::<S>(
        "member-killed",
        "a member SIGKILLed",
        false,
        |_, leader| followers::<S>(leader),
        every_member,
    );
    let reached = members_reached(&run.store, run.a_elect);
    let member = *reached
        .first()
        .unwrap_or_else(|| panic!("{}: A's elect reaches no member", S::NAME));
    let began = monotonic_ns();
    run.store.kill_member(member);
    std::thread::sleep(TTL.mul_f64(1.5));
    run.store.restart_member(member);
    run.store.wait_serving();
    run.fault = format!(
        "a member SIGKILLed 1.5 TTL (the follower {member} that A's elect talked to, of {reached:?})"
    );
    run.judge(Tenure::Either, began, monotonic_ns(), 0.0);
}

/// Two members of three SIGKILLed for 1.5 TTL, then back: no renewal can
/// be confirmed, A's lease must end, B takes it once a quorum is back.
/// The leader goes, and the follower A's elect does not talk to, so that A
/// is left with a member that answers, without a quorum.
fn quorum_lost<S: StoreUnderTest>() {
    let mut run = start_replicated::<S>(
        "quorum-lost",
        "quorum lost",
        false,
        every_member,
        every_member,
    );
    let leader = run.store.leader();
    let reached = members_reached(&run.store, run.a_elect);
    let kept = followers::<S>(leader)
        .into_iter()
        .find(|i| reached.contains(i))
        .unwrap_or(followers::<S>(leader)[0]);
    let down: Vec<usize> = (0..S::REPLICAS).filter(|&i| i != kept).collect();
    // A night's job: its tenure is in the history (as running) before the
    // quorum goes.
    support::eventually("A's tenure recorded as running", 10 * SECOND, || match run
        .a_in_the_history_if_any()
    {
        Some(a) if a["outcome"] == "running" => Ok(()),
        a => Err(format!("{a:?}")),
    });
    let began = monotonic_ns();
    let back_at = Instant::now() + TTL.mul_f64(1.5);
    for &i in &down {
        run.store.kill_member(i);
    }
    // A newcomer meanwhile, given the member left: one line, in time,
    // that says what to look at.
    let newcomer = support::elect_run(
        &run.store.url_of(&[kept]),
        "newcomer",
        &["-n", "--connect-timeout", "1s"],
        "true",
    )
    .output()
    .unwrap();
    let said = String::from_utf8_lossy(&newcomer.stderr).into_owned();
    assert_eq!(newcomer.status.code(), Some(69), "{}: {said}", S::NAME);
    assert_eq!(said.lines().count(), 1, "{}: {said}", S::NAME);
    assert!(said.contains("quorum"), "{}: {said}", S::NAME);
    std::thread::sleep(back_at.saturating_duration_since(Instant::now()));
    for &i in &down {
        run.store.restart_member(i);
    }
    run.store.wait_serving();
    run.fault = format!("quorum lost 1.5 TTL (members {down:?} down, {kept} left)");
    let (name, fault) = (S::NAME, run.fault.clone());
    let judged = run.judge_and_keep(Tenure::Ended, began, monotonic_ns(), 0.0);
    // A could not record its loss while no quorum answered; the history
    // still says lost, and why, not that its elect was killed.
    let a = judged.a_in_the_history();
    assert_eq!(a["outcome"], "lost", "{name}, {fault}: {a:#}");
    assert!(
        a["why"].as_str().is_some_and(|w| !w.is_empty()),
        "{name}, {fault}: {a:#}"
    );
}

/// A's elect knows one member, a follower, which is cut off from the other
/// two for 1.5 TTL; B knows those two. The follower may go on answering A
/// for a while; the leader, with the third member, ends A's lease and
/// hands the lock to B: A's command must be gone first (within what the
/// store's declaration allows). The command ignores SIGTERM, so that what
/// is measured is elect's deadline, not the grace before it.
fn the_holder_cut_off_with_its_member<S: StoreUnderTest>() {
    let mut member = 0;
    let mut run = start_replicated::<S>(
        "cut-off-with-its-member",
        "the holder cut off with its member",
        true,
        |_, leader| {
            member = followers::<S>(leader)[0];
            vec![member]
        },
        |_, leader| {
            followers::<S>(leader)[1..]
                .iter()
                .copied()
                .chain([leader])
                .collect()
        },
    );
    run.fault = format!("the holder cut off with its member 1.5 TTL (the follower {member})");
    let began = monotonic_ns();
    run.store.isolate_member(member);
    std::thread::sleep(TTL.mul_f64(1.5));
    run.store.heal_member(member);
    let allowed_ms = S::cut_off_with_its_member_overlap(TTL).as_secs_f64() * 1e3;
    run.judge(Tenure::Ended, began, monotonic_ns(), allowed_ms);
}

/// The primary crashes and an asynchronous standby is promoted that lacks
/// A's take (most HA set-ups replicate asynchronously): on the new
/// primary the lock was let go by the holder before A. A reaches the old
/// primary alone, as a host cut off in the failover, so it learns nothing
/// and stops at its deadline; B reaches whichever server takes writes.
/// B must not start while A's command may run, nor with a token at or
/// below A's, which the old primary handed out and the new one never saw.
fn promoted_without_the_last_take<S: StoreUnderTest>() {
    assert!(S::FAILS_OVER);
    let fault = "a standby promoted without A's take";
    let began = Instant::now();
    let mut store = S::start("promoted");
    store.add_a_standby();
    // The lock's row is on both: a holder before A took it and let go.
    let dir = TempDir::new(&format!("every-fault-{}-promoted-before", S::NAME));
    let ticks = Ticks::new(&dir.0);
    let mut before = contender(&store.url(), "before", &ticks, false, None);
    let before_token: u64 = before.expect_line("token", 20 * SECOND).parse().unwrap();
    before.signal(libc::SIGTERM);
    before.wait(10 * SECOND);
    store.lag_the_standby();
    let via = Via::Urls(store.url(), store.url_of_both());
    let mut run = start_on(
        store,
        began,
        "promoted",
        fault,
        via,
        Holding::default(),
        |_| {},
    );
    assert!(run.a_token > before_token);
    let failed = monotonic_ns();
    run.store.fail_over();
    let promoted = monotonic_ns();
    eprintln!(
        "{}, {fault}: the standby took writes {:.0} ms after the primary's crash began",
        S::NAME,
        ms(promoted - failed)
    );
    run.judge(Tenure::Ended, failed, promoted, 0.0);
}

/// The groups a line of `stores!` names agree with what the store says it
/// can suffer.
fn declares_what_it_suffers<S: StoreUnderTest>(groups: &[&str]) {
    for every in ["every", "force", "pkill"] {
        assert!(groups.contains(&every), "{}: {every}", S::NAME);
    }
    let suffers = [
        ("link", S::HAS_LINK),
        ("server", S::HAS_SERVER),
        ("clock", S::JUDGES_BY_ITS_CLOCK),
        ("standby", S::WAITS_FOR_A_STANDBY),
        ("failover", S::FAILS_OVER),
        ("limits", S::LIMITS_CONNECTIONS),
        ("credentials", S::FETCHES_CREDENTIALS),
        ("notify", S::NOTIFIES),
        ("restore", S::RESTORES),
        ("bump", S::RESTORES_ABOVE),
        ("foreign", S::HAS_FOREIGN_WRITERS),
        ("replicated", S::REPLICAS > 1),
    ];
    for (group, declared) in suffers {
        assert_eq!(groups.contains(&group), declared, "{}: {group}", S::NAME);
    }
}

macro_rules! tests {
    ($type:ty, [$($scenario:ident),* $(,)?]) => {
        $(
            #[test]
            fn $scenario() {
                super::$scenario::<$type>();
            }
        )*
    };
}

/// The scenarios of each group: `every` store's, `force` (the overlap a
/// `--force` leaves, bounded per store), `pkill` (elect and its guard killed together), those
/// of a store with a `link`, those of a store with a `server`, those of a
/// store that judges expiry by its own `clock`, those of a store whose
/// elects listen for news on a connection of its own (`notify`), whose
/// commits can wait for a synchronous `standby`, that can `failover` to an
/// asynchronous standby, that `limits` its connections, whose
/// `credentials` come from a program, restored from a backup of
/// its own (`restore`; `bump`: with its counters kept above), those of a
/// `replicated` store's members, those of a store that `foreign` writers
/// may edit.
macro_rules! group {
    ($type:ty, every) => {
        tests!(
            $type,
            [
                elect_stopped_past_the_ttl,
                sigkill_of_elect,
                sigkill_of_the_guard,
                break_on_a_command_ignoring_term,
                a_low_open_file_limit,
                descriptors_taken_from_a_waiter,
            ]
        );
    };
    ($type:ty, force) => {
        tests!($type, [break_force_on_a_command_ignoring_term]);
    };
    ($type:ty, pkill) => {
        tests!(
            $type,
            [
                sigkill_of_elect_and_guard,
                sigkill_of_elect_guard_and_command
            ]
        );
    };
    ($type:ty, link) => {
        tests!(
            $type,
            [
                link_blackholed_for_half_a_ttl,
                link_blackholed_for_one_and_a_half_ttls,
                link_reset_for_half_a_ttl,
                link_reset_for_one_and_a_half_ttls,
                link_delayed_200ms_each_way,
                link_delayed_500ms_each_way,
                link_losing_30_percent_of_packets,
            ]
        );
    };
    ($type:ty, clock) => {
        tests!(
            $type,
            [
                clock_stepped_an_hour_ahead_b_queued,
                clock_stepped_an_hour_ahead_b_started_after,
                clock_stepped_a_day_ahead_b_started_after,
                clock_stepped_an_hour_back_b_queued,
                clock_stepped_an_hour_back_b_started_after,
                clock_stepped_a_day_back_b_queued,
            ]
        );
    };
    ($type:ty, replicated) => {
        tests!(
            $type,
            [
                the_leader_killed,
                a_member_killed,
                quorum_lost,
                the_holder_cut_off_with_its_member,
            ]
        );
    };
    ($type:ty, standby) => {
        tests!($type, [commits_wait_for_a_standby_that_is_gone]);
    };
    ($type:ty, notify) => {
        tests!(
            $type,
            [
                listener_ended_then_a_forced_break,
                listener_ended_then_a_release
            ]
        );
    };
    ($type:ty, credentials) => {
        tests!(
            $type,
            [a_slow_credential_program, a_hung_credential_program]
        );
    };
    ($type:ty, limits) => {
        tests!($type, [at_its_connection_limit]);
    };
    ($type:ty, failover) => {
        tests!($type, [promoted_without_the_last_take]);
    };
    ($type:ty, restore) => {
        tests!($type, [restored_from_an_older_backup]);
    };
    ($type:ty, bump) => {
        tests!($type, [restored_with_the_revision_bumped]);
    };
    ($type:ty, foreign) => {
        tests!(
            $type,
            [
                the_holders_record_deleted_by_another_writer,
                the_holders_lease_duration_edited_by_another_writer,
            ]
        );
    };
    ($type:ty, server) => {
        tests!(
            $type,
            [
                server_stopped_past_the_ttl,
                server_restarted_fast,
                server_restarted_immediately,
            ]
        );
    };
}

/// Each store and the groups of scenarios that apply to it.
macro_rules! stores {
    ($($store:ident: $type:ty => [$($group:ident),* $(,)?]),* $(,)?) => {
        $(
            mod $store {
                use super::*;
                $(group!($type, $group);)*

                #[test]
                fn declares_what_it_suffers() {
                    super::declares_what_it_suffers::<$type>(&[$(stringify!($group)),*]);
                }
            }
        )*
    };
}

stores! {
    etcd: Etcd => [every, force, pkill, link, server, restore, bump],
    etcd_cluster: EtcdCluster => [every, force, pkill, replicated],
    file: FileStore => [every, force, pkill, restore],
    k8s: KubeStore => [every, force, pkill, link, server, foreign, restore, credentials, limits],
    mariadb: MariaDb => [every, force, pkill, link, server, clock, standby, failover, limits],
    pgbouncer: Pooled => [every, force, pkill, link, server, clock, standby],
    postgres: Postgres => [every, force, pkill, link, server, clock, notify, standby, failover, limits],
    zookeeper: ZooKeeper => [every, force, pkill, link, server, restore, limits],
    zookeeper_ensemble: Ensemble => [every, force, pkill, replicated],
}
