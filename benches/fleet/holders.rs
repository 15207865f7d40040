//! Figure `holders`: N elects, each holding a lock of its own on one store
//! at the default TTL (15 s), for a hold of minutes. Counted over the hold:
//! leases lost (an elect that exited), the store's requests per second
//! against the renewal floor (one request per holder per renewal interval,
//! TTL/3), the store server's CPU, each holder's proportional memory
//! (elect + guard, Pss at the end) and wake-ups (voluntary context switches
//! of elect + guard, per minute; the involuntary ones, preemptions, beside
//! them). The store's own rates with no holder, read
//! over a window before, are taken off its requests and CPU.
//!
//! The largest N holds for the whole hold (10 minutes in a full run), the
//! smaller ones for [`SMALLER_HOLD`] at most: they give the figures'
//! growth, which are rates. One store after another: with four
//! stores' fleets side by side on two cores, a fleet starting starved the
//! renewals of one holding (all 1,000 etcd holders lost their leases, no
//! renewal confirmed for 10 s, while PostgreSQL's 1,000 started).

use std::path::Path;
use std::thread;
use std::time::Duration;

use super::{Growth, OnEvery, Stderrs, all_held};
use crate::harness::locker::Locker;
use crate::harness::process::Quiet;
use crate::harness::procfs::{self, Usage};
use crate::harness::report::{Row, Table, ratio};
use crate::harness::served::{Reading, Served};
use crate::support::GUARD;
use crate::{Mode, Scratch, verdict};

/// elect's default TTL, and its renewal interval (TTL/3).
const TTL: Duration = Duration::from_secs(15);
const RENEWAL: Duration = Duration::from_secs(5);

/// How many holders start at once: a fleet of N, each started while the
/// ones before hold, not N connecting in the same instant, which a store
/// on two shared cores answers later than elect's `--connect-timeout`.
const WAVE: usize = 100;

/// The hold of every N but the largest.
const SMALLER_HOLD: Duration = Duration::from_secs(120);

/// Goals: per holder, proportional memory and wake-ups per minute.
const PSS_GOAL_MIB: f64 = 2.5;
const WAKEUPS_GOAL: f64 = 30.0;

/// What N holders came to over the hold.
#[derive(Clone, Copy)]
pub struct Outcome {
    pub n: usize,
    pub lost: usize,
    /// Store requests per second, the store's idle rate taken off.
    pub requests: f64,
    /// The renewal floor: N / renewal interval, per second.
    pub floor: f64,
    /// Store CPU, in cores, the idle share taken off.
    pub cpu: f64,
    pub pss_mib: f64,
    pub wakeups: f64,
    /// Preemptions per holder a minute: no wake-up, but a switch.
    pub preempted: f64,
}

pub struct Figure<'a> {
    pub mode: &'a Mode,
    pub scratch: &'a Scratch,
    pub table: &'a mut Table,
    pub growth: &'a mut Growth,
}

impl OnEvery for Figure<'_> {
    fn on<S: Served>(&mut self) {
        let most = self.mode.holders.iter().copied().max().unwrap_or(0);
        let store = S::for_fleet("holders", most);
        let idle = match idle_rates(&store) {
            Ok(r) => r,
            Err(e) => {
                self.table
                    .note(format!("holders [{}]: no idle reading: {e}", S::NAME));
                return;
            }
        };
        self.table.note(format!(
            "holders [{}]: with no holder, the server serves {:.1} {}/s on {:.1}% of a core; taken off below",
            S::NAME,
            idle.0,
            S::REQUESTS,
            idle.1 * 100.0
        ));
        for &n in &self.mode.holders {
            let hold = match n == most {
                true => self.mode.fleet_hold,
                false => self.mode.fleet_hold.min(SMALLER_HOLD),
            };
            match once(&store, n, hold, self.scratch, idle) {
                Ok((o, why)) => {
                    if let Some(why) = why {
                        self.table.note(format!("holders [{}] {n}: {why}", S::NAME));
                    }
                    rows::<S>(self.table, &o, hold);
                    self.growth.holders.push((S::NAME, o));
                }
                Err(e) => self
                    .table
                    .note(format!("holders [{}] {n}: failed: {e}", S::NAME)),
            }
        }
    }
}

/// The server's request rate and CPU with no holder.
fn idle_rates<S: Served>(store: &S) -> Result<(f64, f64), String> {
    let before = Reading::take(store)?;
    thread::sleep(Duration::from_secs(10).max(S::LAG));
    Ok(before.rates(&Reading::take(store)?))
}

/// elect and its guard: the processes a holder costs, its command aside.
fn elect_and_guard(pid: i32, family: &std::collections::HashMap<i32, Vec<i32>>) -> Vec<i32> {
    let mut pids = vec![pid];
    pids.extend(
        family
            .get(&pid)
            .into_iter()
            .flatten()
            .filter(|&&child| procfs::command_line(child).starts_with(GUARD)),
    );
    pids
}

fn usage(pids: &[i32]) -> Usage {
    pids.iter()
        .filter_map(|&pid| Usage::read(pid))
        .fold(Usage::default(), Usage::plus)
}

/// N holders for `hold`, each on a lock of its own.
fn once<S: Served>(
    store: &S,
    n: usize,
    hold: Duration,
    scratch: &Scratch,
    idle: (f64, f64),
) -> Result<(Outcome, Option<String>), String> {
    let mut holders = Vec::with_capacity(n);
    let marks = scratch.path(&format!("holders-{}-{n}", S::NAME));
    start(store, n, &marks, &mut holders)?;
    let o = count(store, &mut holders, hold, idle)?;
    let why = (o.lost > 0).then(|| Stderrs::of(&marks).why(&mut holders));
    Ok((o, why))
}

/// Start N holders, each on a lock of its own, until each holds it: each
/// command leaves a mark in `marks` once it runs, and each elect's stderr
/// is kept beside them.
fn start<S: Served>(
    store: &S,
    n: usize,
    marks: &Path,
    holders: &mut Vec<Quiet>,
) -> Result<(), String> {
    std::fs::create_dir_all(marks).map_err(|e| e.to_string())?;
    let stderrs = Stderrs::new(marks)?;
    let locker = Locker::elect_on(&store.url());
    for i in 0..n {
        // The command marks that it runs, so that the lock is held.
        let script = format!(": > '{}/{i}'; exec sleep 1000000", marks.display());
        let lock = format!("bench-holders-{n}-{i}");
        let command = locker.command(&lock, Some(TTL.as_secs()), &["sh", "-c", &script]);
        let stderr = stderrs.file(i)?;
        holders.push(
            Quiet::spawn_with_stderr(command, stderr)
                .map_err(|e| format!("cannot start holder {i}: {e}"))?,
        );
        if holders.len().is_multiple_of(WAVE) || holders.len() == n {
            all_held(marks, holders).map_err(|e| format!("{e}; {}", stderrs.why(holders)))?;
        }
    }
    Ok(())
}

/// What `holders` cost and lost over `hold`.
fn count<S: Served>(
    store: &S,
    holders: &mut [Quiet],
    hold: Duration,
    idle: (f64, f64),
) -> Result<Outcome, String> {
    let n = holders.len();
    // Past start-up: the first renewal of the last one started, and the
    // server's counter has caught up with the start-up's requests.
    thread::sleep((RENEWAL + Duration::from_secs(1)).max(S::LAG));
    let family = procfs::family();
    let pids: Vec<Vec<i32>> = holders
        .iter()
        .map(|h| elect_and_guard(h.pid(), &family))
        .collect();
    let before: Vec<Usage> = pids.iter().map(|p| usage(p)).collect();
    let start = Reading::take(store)?;
    thread::sleep(hold);
    let end = Reading::take(store)?;
    let after: Vec<Usage> = pids.iter().map(|p| usage(p)).collect();
    let lost = holders
        .iter_mut()
        .map(|h| usize::from(h.wait_within(Duration::ZERO).is_some()))
        .sum();
    let used = before
        .iter()
        .zip(&after)
        .map(|(b, a)| b.until(*a))
        .fold(Usage::default(), Usage::plus);
    let (requests, cpu) = start.rates(&end);
    let per_minute = 60.0 / hold.as_secs_f64();
    Ok(Outcome {
        n,
        lost,
        requests: requests - idle.0,
        floor: n as f64 / RENEWAL.as_secs_f64(),
        cpu: (cpu - idle.1).max(0.0),
        pss_mib: used.pss_kib as f64 / 1024.0 / n as f64,
        wakeups: used.wakeups as f64 * per_minute / n as f64,
        preempted: used.preempted as f64 * per_minute / n as f64,
    })
}

fn rows<S: Served>(table: &mut Table, o: &Outcome, hold: Duration) {
    let of = |what: &str| {
        format!(
            "holders [{}]: {} x 1 lock, TTL {} s, {what}",
            S::NAME,
            o.n,
            TTL.as_secs()
        )
    };
    table.row(Row {
        figure: of(&format!("leases lost in {} s", hold.as_secs())),
        elect: format!("{} of {}", o.lost, o.n),
        reference: String::new(),
        ratio: "-".into(),
        target: "0".into(),
        verdict: verdict(o.lost == 0),
    });
    table.row(Row {
        figure: of(&format!("{}/s", S::REQUESTS)),
        elect: format!("{:.1}/s, CPU {:.1}%", o.requests, o.cpu * 100.0),
        reference: format!("floor: {:.1}/s", o.floor),
        ratio: ratio(o.requests, o.floor),
        target: "<= 1.10x floor".into(),
        verdict: verdict(o.requests <= 1.1 * o.floor),
    });
    table.row(Row {
        figure: of("Pss per holder (elect + guard)"),
        elect: format!("{:.2} MiB", o.pss_mib),
        reference: String::new(),
        ratio: "-".into(),
        target: format!("<= {PSS_GOAL_MIB} MiB"),
        verdict: verdict(o.pss_mib <= PSS_GOAL_MIB),
    });
    table.row(Row {
        figure: of("wake-ups per holder (elect + guard)"),
        elect: format!("{:.1}/min ({:.1}/min preempted)", o.wakeups, o.preempted),
        reference: String::new(),
        ratio: "-".into(),
        target: format!("<= {WAKEUPS_GOAL}/min"),
        verdict: verdict(o.wakeups <= WAKEUPS_GOAL),
    });
}
