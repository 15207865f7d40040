//! The fleet figures: what elect costs a store and a machine when many
//! use it at once, and how short a lease can be on a busy machine.
//!
//! - [`herd`]: N elects started at once on one `--once-per` lock, as cron
//!   starts the same line on N hosts;
//! - [`holders`]: N elects, each holding a lock of its own, for a while;
//! - [`waiters`]: N waiters queued on one lock, and handovers among them;
//! - [`short_lease`]: the shortest TTL a holder keeps on saturated cores,
//!   and failover at it.
//!
//! Each runs against every store of [`stores`], a server started for the
//! figure: `holders` and `waiters` on one store after another, since a
//! fleet starting starves the renewals of another holding on the same two
//! cores, and a handover's time is the figure; `short-lease` on all of them
//! side by side ([`side_by_side`]), a few holders on each through the same
//! 30 minutes, since its loads saturate the cores anyway and its holds one
//! store after another would take five hours.
//! [`Growth`] keeps how each figure grows with N for the plot.

pub mod herd;
pub mod holders;
pub mod short_lease;
pub mod waiters;

use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use crate::harness::plot::{self, Panel, Series};
use crate::harness::process::Quiet;
use crate::harness::served::Served;
use crate::stores::etcd::Etcd;
use crate::stores::k8s::KubeStore;
use crate::stores::mysql::MariaDb;
use crate::stores::postgres::Postgres;
use crate::stores::zookeeper::ZooKeeper;

/// The stores the fleet figures run against, by name.
pub const STORES: [&str; 5] = ["etcd", "postgres", "mariadb", "zookeeper", "k8s"];

/// `ELECT_BENCH_STORES` (a comma-separated part of [`STORES`]), or all.
pub fn stores() -> Vec<&'static str> {
    let chosen = std::env::var("ELECT_BENCH_STORES").unwrap_or_default();
    if chosen.is_empty() {
        return STORES.to_vec();
    }
    chosen
        .split(',')
        .map(|name| {
            STORES
                .into_iter()
                .find(|s| *s == name.trim())
                .unwrap_or_else(|| panic!("unknown store {name:?}; the stores are {STORES:?}"))
        })
        .collect()
}

/// A figure that runs the same way on every store.
pub trait OnEvery {
    fn on<S: Served>(&mut self);
}

/// Run `figure` on each chosen store in turn.
pub fn on_every(figure: &mut impl OnEvery) {
    for store in stores() {
        on(store, figure);
    }
}

/// Run `figure` on the store named `store`, one of [`STORES`].
fn on(store: &str, figure: &mut impl OnEvery) {
    match store {
        "etcd" => figure.on::<Etcd>(),
        "postgres" => figure.on::<Postgres>(),
        "mariadb" => figure.on::<MariaDb>(),
        "zookeeper" => figure.on::<ZooKeeper>(),
        _ => figure.on::<KubeStore>(),
    }
}

/// A figure whose stores run side by side, each in a thread of its own,
/// with a [`Seat`] at the table they meet at between phases.
pub trait SideBySide: Sync {
    fn on<S: Served>(&self, seat: &Seat);
}

/// Run `figure` on each chosen store at once.
pub fn side_by_side(figure: &impl SideBySide) {
    let stores = stores();
    let together = Together::new(stores.len());
    thread::scope(|scope| {
        for (index, store) in stores.into_iter().enumerate() {
            let together = &together;
            scope.spawn(move || {
                // A store that fails or panics leaves its seat, so that
                // the rest do not wait for it.
                let seat = Seat { together, index };
                on(store, &mut Beside(figure, &seat));
            });
        }
    });
}

/// A side-by-side figure on one store, in that store's thread.
struct Beside<'a, F>(&'a F, &'a Seat<'a>);

impl<F: SideBySide> OnEvery for Beside<'_, F> {
    fn on<S: Served>(&mut self) {
        self.0.on::<S>(self.1);
    }
}

/// Where the stores of a side-by-side figure meet between phases, and
/// whose turn it is to start its server or its holders, or to time its
/// failovers: one store at a time, so that none does on cores busy with
/// another's, and in the order of [`STORES`], so that a run is the same
/// run each time.
struct Together {
    state: Mutex<State>,
    changed: Condvar,
}

struct State {
    /// Stores still running the figure.
    members: usize,
    /// Stores waiting at the meeting.
    arrived: usize,
    /// Meetings held so far: a store waiting leaves when this moves on.
    held: u64,
    /// Turns each store has had, and whether it has left.
    turns: Vec<usize>,
    left: Vec<bool>,
    /// Whether a store is having its turn.
    busy: bool,
}

impl Together {
    fn new(members: usize) -> Together {
        Together {
            state: Mutex::new(State {
                members,
                arrived: 0,
                held: 0,
                turns: vec![0; members],
                left: vec![false; members],
                busy: false,
            }),
            changed: Condvar::new(),
        }
    }

    fn wait<'a>(&self, state: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.changed.wait(state).unwrap_or_else(|e| e.into_inner())
    }
}

/// One store's place at the [`Together`].
pub struct Seat<'a> {
    together: &'a Together,
    index: usize,
}

impl Seat<'_> {
    /// Wait until every store still running has arrived.
    pub fn meet(&self) {
        let mut s = lock(&self.together.state);
        s.arrived += 1;
        if s.arrived == s.members {
            s.arrived = 0;
            s.held += 1;
            self.together.changed.notify_all();
            return;
        }
        let held = s.held;
        while s.held == held {
            s = self.together.wait(s);
        }
    }

    /// This store's turn, until the guard drops: once no other store has
    /// its turn, and each store before it has had as many turns as this
    /// one will have had, or has left.
    pub fn turn(&self) -> Turn<'_> {
        let mut s = lock(&self.together.state);
        let mine = s.turns[self.index];
        while s.busy || (0..self.index).any(|j| !s.left[j] && s.turns[j] <= mine) {
            s = self.together.wait(s);
        }
        s.busy = true;
        Turn(self)
    }
}

impl Drop for Seat<'_> {
    fn drop(&mut self) {
        let mut s = lock(&self.together.state);
        s.members -= 1;
        s.left[self.index] = true;
        if s.members > 0 && s.arrived == s.members {
            // The rest were waiting for this one only.
            s.arrived = 0;
            s.held += 1;
        }
        self.together.changed.notify_all();
    }
}

/// A store's turn, which ends when this drops.
pub struct Turn<'a>(&'a Seat<'a>);

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let mut s = lock(&self.0.together.state);
        s.busy = false;
        s.turns[self.0.index] += 1;
        self.0.together.changed.notify_all();
    }
}

/// Where a fleet's elects write their stderr, one file each by its index
/// in the fleet, beside the directory of the marks its commands leave:
/// what says why a holder exited.
pub struct Stderrs(PathBuf);

impl Stderrs {
    /// The stderrs of the fleet whose marks go to `marks`.
    pub fn of(marks: &Path) -> Stderrs {
        Stderrs(marks.with_extension("stderr"))
    }

    /// [`Stderrs::of`], its directory made.
    pub fn new(marks: &Path) -> Result<Stderrs, String> {
        let stderrs = Stderrs::of(marks);
        std::fs::create_dir_all(&stderrs.0).map_err(|e| format!("{}: {e}", stderrs.0.display()))?;
        Ok(stderrs)
    }

    /// The file for the stderr of elect `i`.
    pub fn file(&self, i: usize) -> Result<std::fs::File, String> {
        let path = self.0.join(i.to_string());
        std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// How the ones of `fleet` that exited did, and the first line of the
    /// first one's stderr (its reason; a warning about its history may
    /// follow).
    pub fn why(&self, fleet: &mut [Quiet]) -> String {
        let (how, first) = exits(fleet);
        let said = first.map_or(String::new(), |i| {
            let path = self.0.join(i.to_string());
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            // Its last write is about when it exited.
            let when = std::fs::metadata(&path)
                .and_then(|m| m.modified())
                .map_or(String::new(), |t| {
                    format!(" (at {})", humantime::format_rfc3339_seconds(t))
                });
            format!(
                "; elect {i} said{when}: {}",
                text.lines().next().unwrap_or("nothing")
            )
        });
        format!("exited: {how}{said}")
    }
}

/// Which of `fleet` have exited, how many each way ("3 exit status: 69"),
/// and the first of them; empty and `None` if none has.
pub fn exits(fleet: &mut [Quiet]) -> (String, Option<usize>) {
    let mut how = std::collections::BTreeMap::new();
    let mut first = None;
    for (i, elect) in fleet.iter_mut().enumerate() {
        if let Some(status) = elect.wait_within(Duration::ZERO) {
            *how.entry(status.to_string()).or_insert(0) += 1;
            first.get_or_insert(i);
        }
    }
    let shown: Vec<String> = how.iter().map(|(s, k)| format!("{k} {s}")).collect();
    (shown.join(", "), first)
}

/// Until each of `holders` holds its lock (its command has left its mark
/// in `marks`): an error if one exits first, or if they take too long.
pub fn all_held(marks: &Path, holders: &mut [Quiet]) -> Result<(), String> {
    let n = holders.len();
    let give_up = Instant::now() + crate::PATIENCE;
    loop {
        let held = std::fs::read_dir(marks).map_or(0, |d| d.count());
        if held == n {
            return Ok(());
        }
        if let Some((i, status)) = holders
            .iter_mut()
            .enumerate()
            .find_map(|(i, h)| Some((i, h.wait_within(Duration::ZERO)?)))
        {
            return Err(format!(
                "holder {i} exited before it held its lock: {status}"
            ));
        }
        if Instant::now() >= give_up {
            return Err(format!("{held} of {n} holders held their lock in time"));
        }
        thread::sleep(Duration::from_millis(100));
    }
}

/// What a side-by-side figure shares (its table, its growth), even after
/// another store's thread panicked while holding it.
pub fn lock<T>(shared: &Mutex<T>) -> MutexGuard<'_, T> {
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

/// What each fleet figure came to at each N, on each store: the plot's data.
#[derive(Default)]
pub struct Growth {
    pub holders: Vec<(&'static str, holders::Outcome)>,
    pub waiters: Vec<(&'static str, waiters::Outcome)>,
}

impl Growth {
    /// Each store's rows together, in the order of [`STORES`], by N: the
    /// side-by-side figures add them as each store finishes.
    pub fn sort(&mut self) {
        let at = |store: &str| STORES.iter().position(|s| *s == store);
        self.holders.sort_by_key(|(store, o)| (at(store), o.n));
        self.waiters.sort_by_key(|(store, o)| (at(store), o.n));
    }

    fn series<T>(
        rows: &[(&'static str, T)],
        n: impl Fn(&T) -> usize,
        value: impl Fn(&T) -> f64,
    ) -> Vec<Series> {
        let mut series: Vec<Series> = Vec::new();
        for (store, row) in rows {
            let point = (n(row) as f64, value(row));
            match series.iter_mut().find(|s| s.name == *store) {
                Some(s) => s.points.push(point),
                None => series.push(Series {
                    name: store.to_string(),
                    points: vec![point],
                }),
            }
        }
        series
    }

    /// The panels: per holder, then per handover.
    fn panels(&self) -> Vec<Panel> {
        let h = &self.holders;
        let w = &self.waiters;
        let panel = |title: &str, series, goal| Panel {
            title: title.to_string(),
            series,
            goal,
        };
        vec![
            panel(
                "holders: store requests / renewal floor",
                Self::series(h, |o| o.n, |o| o.requests / o.floor),
                Some(1.0),
            ),
            panel(
                "holders: PSS per holder, MiB",
                Self::series(h, |o| o.n, |o| o.pss_mib),
                Some(2.5),
            ),
            panel(
                "holders: wake-ups per holder per minute",
                Self::series(h, |o| o.n, |o| o.wakeups),
                Some(30.0),
            ),
            panel(
                "holders: store CPU, % of a core",
                Self::series(h, |o| o.n, |o| o.cpu * 100.0),
                None,
            ),
            panel(
                "waiters: handover, ms",
                Self::series(w, |o| o.n, |o| o.handover_ms),
                None,
            ),
            panel(
                "waiters: store requests per handover",
                Self::series(w, |o| o.n, |o| o.requests),
                None,
            ),
        ]
    }

    /// Write the plot to `path`, if any fleet figure ran.
    pub fn plot(&self, path: &Path, title: &str) -> Option<std::io::Result<()>> {
        if self.holders.is_empty() && self.waiters.is_empty() {
            return None;
        }
        let panels: Vec<Panel> = self
            .panels()
            .into_iter()
            .filter(|p| !p.series.is_empty())
            .collect();
        let write = || {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            std::fs::write(path, plot::svg(title, &panels))
        };
        Some(write())
    }

    /// The growth tables, in Markdown, as the README shows them.
    pub fn markdown(&self) -> String {
        let holders = self.holders_markdown();
        let waiters = self.waiters_markdown();
        if holders.is_empty() || waiters.is_empty() {
            holders + &waiters
        } else {
            format!("{holders}\n{waiters}")
        }
    }

    /// The holders' growth table, in Markdown, or nothing if none ran.
    pub fn holders_markdown(&self) -> String {
        let mut out = String::new();
        if !self.holders.is_empty() {
            out.push_str(
                "| store | holders | lost | requests/s (floor) | store CPU | PSS/holder | wake-ups/holder/min | preempted/holder/min |\n\
                 |---|---:|---:|---:|---:|---:|---:|---:|\n",
            );
            for (store, o) in &self.holders {
                out.push_str(&format!(
                    "| {store} | {} | {} | {:.1} ({:.1}) | {:.1}% | {:.2} MiB | {:.1} | {:.1} |\n",
                    o.n,
                    o.lost,
                    o.requests,
                    o.floor,
                    o.cpu * 100.0,
                    o.pss_mib,
                    o.wakeups,
                    o.preempted
                ));
            }
        }
        out
    }

    /// The waiters' growth table, in Markdown, or nothing if none ran.
    pub fn waiters_markdown(&self) -> String {
        let mut out = String::new();
        if !self.waiters.is_empty() {
            out.push_str(
                "| store | waiters | handover | requests/handover | PSS/waiter | store PSS/waiter |\n\
                 |---|---:|---:|---:|---:|---:|\n",
            );
            for (store, o) in &self.waiters {
                out.push_str(&format!(
                    "| {store} | {} | {:.1} ms | {:.1} | {:.2} MiB | {:.2} MiB |\n",
                    o.n, o.handover_ms, o.requests, o.pss_mib, o.store_pss_mib
                ));
            }
        }
        out
    }
}
