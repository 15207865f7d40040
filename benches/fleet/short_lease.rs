//! Figure `short-lease`: the shortest TTL at which a holder keeps its
//! lease with both cores saturated, on each store. One holder at each TTL
//! of the ladder holds a lock of its own, side by side, for the hold;
//! twice: beside a CPU hog (a busy loop per core, at normal priority), and
//! beside a load on the same store (contenders looping `elect run -- true`
//! on locks of their own, two per core in all, shared among the stores,
//! which also fills the cores).
//! A holder that exits lost its lease. The shortest TTL no holder lost in
//! either is the figure; then failover at that TTL: the holder, its guard
//! and its command killed at once, until the queued waiter's command
//! starts, less the TTL (goal: within 100 ms).
//!
//! The stores run side by side: their holders hold through the same
//! minutes, beside one CPU hog, then each beside the load on its own store
//! while the other stores are loaded too. Failovers are timed one store
//! at a time.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use super::{Seat, SideBySide, Stderrs, all_held, lock};
use crate::harness::locker::Locker;
use crate::harness::process::{Quiet, Talking};
use crate::harness::procfs;
use crate::harness::report::{Row, Table, Verdict};
use crate::harness::served::Served;
use crate::harness::stats::Samples;
use crate::{Mode, PATIENCE, Scratch, verdict};

/// Goal: the shortest safe TTL, and failover past it.
const TTL_GOAL: u64 = 1;
const FAILOVER_GOAL_MS: f64 = 100.0;

/// What saturates the cores while the holders hold.
pub enum Load {
    Hog(Vec<Quiet>),
    Store {
        stop: Arc<AtomicBool>,
        cycles: Arc<AtomicUsize>,
        workers: Vec<thread::JoinHandle<()>>,
        since: Instant,
    },
}

fn cores() -> usize {
    thread::available_parallelism().map_or(2, |n| n.get())
}

impl Load {
    /// What the hog is, for the report.
    const HOG: &str = "a busy loop per core";

    fn hog() -> Load {
        let hogs = (0..cores())
            .map(|_| {
                let mut c = std::process::Command::new("sh");
                c.args(["-c", "while :; do :; done"]);
                Quiet::spawn(c).expect("cannot start sh")
            })
            .collect();
        Load::Hog(hogs)
    }

    /// `contenders` looping on the store at `url`.
    fn store(url: &str, contenders: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let cycles = Arc::new(AtomicUsize::new(0));
        let workers = (0..contenders)
            .map(|k| {
                let (stop, cycles) = (stop.clone(), cycles.clone());
                let locker = Locker::elect_on(url);
                thread::spawn(move || {
                    let lock = format!("bench-short-load-{k}");
                    while !stop.load(Ordering::Relaxed) {
                        let done = Quiet::spawn(locker.command(&lock, None, &["true"]))
                            .ok()
                            .and_then(|mut p| p.wait_within(PATIENCE))
                            .is_some_and(|s| s.success());
                        if done {
                            cycles.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        Load::Store {
            stop,
            cycles,
            workers,
            since: Instant::now(),
        }
    }

    /// End the load; what it was, for the report.
    fn end(self) -> String {
        match self {
            Load::Hog(hogs) => {
                drop(hogs);
                Load::HOG.to_string()
            }
            Load::Store {
                stop,
                cycles,
                workers,
                since,
            } => {
                stop.store(true, Ordering::Relaxed);
                let n = workers.len();
                for w in workers {
                    let _ = w.join();
                }
                let rate = cycles.load(Ordering::Relaxed) as f64 / since.elapsed().as_secs_f64();
                format!("{n} contenders, {rate:.1} cycles/s")
            }
        }
    }
}

pub struct Figure<'a> {
    pub mode: &'a Mode,
    pub scratch: &'a Scratch,
    pub table: Mutex<&'a mut Table>,
    /// The CPU hog every store's holders hold beside, while it runs.
    pub hog: Mutex<Option<Load>>,
}

/// The loads, in the order the holders meet them.
const LOADS: [&str; 2] = ["CPU hog", "store load"];

impl SideBySide for Figure<'_> {
    fn on<S: Served>(&self, seat: &Seat) {
        let store = {
            let _turn = seat.turn();
            S::for_fleet("short-lease", 2 * cores() + self.mode.short_ttls.len())
        };
        let ttls = &self.mode.short_ttls;
        let mut lost = vec![0usize; ttls.len()];
        let mut failed = false;
        for (round, load) in LOADS.into_iter().enumerate() {
            match self.round(&store, seat, round) {
                Ok((losses, what)) => {
                    let shown: Vec<String> = ttls
                        .iter()
                        .zip(&losses)
                        .map(|(t, l)| format!("{t} s: {l}"))
                        .collect();
                    lock(&self.table).row(Row {
                        figure: format!(
                            "short lease [{}]: leases lost in {} s beside a {load}, by TTL",
                            S::NAME,
                            self.mode.short_hold.as_secs()
                        ),
                        elect: shown.join(", "),
                        reference: what,
                        ratio: "-".into(),
                        target: "-".into(),
                        verdict: Verdict::Info,
                    });
                    for (sum, l) in lost.iter_mut().zip(losses) {
                        *sum += l;
                    }
                }
                Err(e) => {
                    lock(&self.table)
                        .note(format!("short lease [{}] {load}: failed: {e}", S::NAME));
                    failed = true;
                }
            }
        }
        if failed {
            return;
        }
        let safe = ttls
            .iter()
            .zip(&lost)
            .find(|(_, l)| **l == 0)
            .map(|(t, _)| *t);
        lock(&self.table).row(Row {
            figure: format!(
                "short lease [{}]: shortest TTL kept beside both loads",
                S::NAME
            ),
            elect: safe.map_or("none of the ladder".into(), |t| format!("{t} s")),
            reference: format!("ladder: {ttls:?} s"),
            ratio: "-".into(),
            target: format!("{TTL_GOAL} s"),
            verdict: verdict(safe == Some(TTL_GOAL)),
        });
        let Some(ttl) = safe else { return };
        // Timed alone: one store's failovers at a time.
        let late = {
            let _turn = seat.turn();
            failovers(&store, ttl, self.mode.short_failovers)
        };
        match late {
            Ok(late) => lock(&self.table).row(Row {
                figure: format!(
                    "short lease [{}]: failover after SIGKILL of elect, guard and command - TTL ({ttl} s), median / max, n={}",
                    S::NAME,
                    self.mode.short_failovers
                ),
                elect: format!("{:+.0} / {:+.0} ms", late.median(), late.max()),
                reference: String::new(),
                ratio: "-".into(),
                target: format!("max <= +{FAILOVER_GOAL_MS} ms"),
                verdict: verdict(late.max() <= FAILOVER_GOAL_MS),
            }),
            Err(e) => lock(&self.table)
                .note(format!("short lease [{}] failover: failed: {e}", S::NAME)),
        }
    }
}

impl Figure<'_> {
    /// Round `round`: a holder at each TTL of the ladder, started in this
    /// store's turn, for the hold beside the round's load: how many of
    /// each lost the lease, and what the load was. Every store meets the
    /// others before the load starts and before it ends, whatever failed.
    fn round<S: Served>(
        &self,
        store: &S,
        seat: &Seat,
        round: usize,
    ) -> Result<(Vec<usize>, String), String> {
        let mut holders = Vec::new();
        let marks = self.scratch.path(&format!("short-{}-{round}", S::NAME));
        let started = {
            let _turn = seat.turn();
            start(store, self.mode, &marks, &mut holders)
        };
        seat.meet();
        let own = match LOADS[round] {
            "CPU hog" => {
                lock(&self.hog).get_or_insert_with(Load::hog);
                None
            }
            // Two contenders per core in all, as many on each store: the
            // cores saturated as beside one store alone, not once per store.
            _ => Some(Load::store(
                &store.url(),
                (2 * cores()).div_ceil(super::stores().len()),
            )),
        };
        if started.is_ok() {
            thread::sleep(self.mode.short_hold);
        }
        let lost: Vec<usize> = holders
            .iter_mut()
            .map(|h| usize::from(h.wait_within(Duration::ZERO).is_some()))
            .collect();
        let why = match lost.iter().sum::<usize>() {
            0 => String::new(),
            _ => format!("; {}", Stderrs::of(&marks).why(&mut holders)),
        };
        seat.meet();
        let what = match own {
            Some(load) => load.end(),
            None => {
                if let Some(hog) = lock(&self.hog).take() {
                    hog.end();
                }
                Load::HOG.to_string()
            }
        };
        started.map(|()| (lost, format!("{what}{why}")))
    }
}

/// A holder at each TTL of the ladder, each until it holds its lock.
fn start<S: Served>(
    store: &S,
    mode: &Mode,
    marks: &Path,
    holders: &mut Vec<Quiet>,
) -> Result<(), String> {
    std::fs::create_dir_all(marks).map_err(|e| e.to_string())?;
    let stderrs = Stderrs::new(marks)?;
    let locker = Locker::elect_on(&store.url());
    for (i, &ttl) in mode.short_ttls.iter().enumerate() {
        let script = format!(": > '{}/{ttl}'; exec sleep 1000000", marks.display());
        let lock = format!(
            "bench-{}-{ttl}",
            marks.file_name().unwrap_or_default().to_string_lossy()
        );
        let command = locker.command(&lock, Some(ttl), &["sh", "-c", &script]);
        holders.push(
            Quiet::spawn_with_stderr(command, stderrs.file(i)?)
                .map_err(|e| format!("cannot start a holder: {e}"))?,
        );
    }
    all_held(marks, holders).map_err(|e| format!("{e}; {}", stderrs.why(holders)))
}

/// Failovers at `ttl`: SIGKILL of the holder's elect, guard and command
/// at once, to the waiter's command; each less the TTL, in ms.
fn failovers<S: Served>(store: &S, ttl: u64, rounds: usize) -> Result<Samples, String> {
    let locker = Locker::elect_on(&store.url());
    let script = "echo started; exec sleep 600";
    let mut late = Samples::default();
    for round in 0..rounds {
        let lock = format!("bench-short-failover-{ttl}-{round}");
        let cmd = || locker.command(&lock, Some(ttl), &["sh", "-c", script]);
        let mut holder = Talking::spawn(cmd());
        holder
            .line("started", PATIENCE)
            .ok_or_else(|| format!("holder did not start: {}", holder.stderr()))?;
        let mut waiter = Talking::spawn(cmd());
        let give_up = Instant::now() + PATIENCE;
        while store.contenders(&lock) < 2 {
            if Instant::now() >= give_up {
                return Err(format!("{lock}: the waiter never queued"));
            }
            thread::sleep(Duration::from_millis(10));
        }
        let killed = Instant::now();
        procfs::kill_tree(holder.pid());
        let (_, started) = waiter
            .line("started", PATIENCE + Duration::from_secs(ttl))
            .ok_or_else(|| format!("waiter did not take over: {}", waiter.stderr()))?;
        late.push_ms((started - killed).as_secs_f64() * 1e3 - (ttl * 1000) as f64);
    }
    Ok(late)
}
