//! Benchmarks of `elect run` against the tools it replaces, as whole
//! processes on one machine: `cargo bench` (all figures, full counts), or
//! `ELECT_BENCH_QUICK=1 cargo bench` (small counts, a minute or two).
//! Figures can be picked by name: `cargo bench -- handover scale`, or
//! `ELECT_BENCH_ONLY=handover,scale`. With `ELECT_BENCH_AGAINST=PATH`, the
//! reference tool of the etcd and file figures (cycle, handover, failover,
//! revoke, idle, contention) is the elect at PATH, an earlier build: a
//! change measured before and after in one run, alternating run by run.
//! In the `postgres`, `mariadb`, `zookeeper` and `k8s` figures the earlier
//! build is the cycle's reference (alternating run by run), and its
//! handover, failovers and idle waiters' load are measured after this
//! build's on the same server, in rows marked "before".
//!
//! Every figure runs elect and the reference tool side by side in one run,
//! alternating them run by run, against one etcd started for the purpose on
//! loopback (the tests' etcd: heartbeat 10 ms, election timeout 100 ms).
//! Times are measured by the harness on the monotonic clock; a child
//! "starts" when its first line (`echo started` in `sh`) reaches the
//! harness, which both tools pay alike.
//!
//! The figures, in the order they run, what each measures, its target
//! and how: [`harness::figures::FIGURES`], one source for these docs and
//! for the page the bench writes.
//!
//! The fleet figures ([`fleet`]) run against five stores (etcd, PostgreSQL,
//! MariaDB, ZooKeeper, Kubernetes; `ELECT_BENCH_STORES=etcd,postgres` picks
//! some), each on a server started for the figure, whose own counters tell
//! its requests (etcd's gRPC messages, the statements of PostgreSQL's elect
//! role and of MariaDB's elect user, ZooKeeper's packets, the API server's
//! requests) and whose processes in /proc its CPU. `ELECT_BENCH_HOLD=SECS` sets their hold,
//! `ELECT_BENCH_FLEET=10,100,1000` the counts of holders and of waiters.
//!
//! `holders` and `waiters` also write `docs/scale.svg` (or
//! `ELECT_BENCH_PLOT`), a plot of each figure against N, and print their
//! table in Markdown.
//!
//! At the end of each figure the bench writes `docs/benchmarks.md` (or
//! `ELECT_BENCH_PAGE`, for a trial run): a section for each figure, the
//! ones this run measured replaced and the others kept as they were
//! ([`harness::page`]). `cargo test --benches` runs this binary without
//! `--bench`: then it checks the page's merge instead of measuring.

#[path = "../tests/support/mod.rs"]
mod support;
// The tests' trait of a store under test, and each store's server and impl
// of it (not the tests: those files are not named here).
#[path = "../tests/suites/store.rs"]
mod suites;
#[path = "../tests/stores"]
#[allow(dead_code, unused_imports)]
mod stores {
    pub mod etcd {
        pub mod http;
        pub mod server;
        pub mod under_test;
        pub use server::{Etcd, EtcdOptions};
    }
    pub mod k8s {
        pub mod server;
        pub mod under_test;
        pub use server::*;
        pub use under_test::KubeStore;
    }
    pub mod mysql {
        pub mod server;
        pub mod under_test;
        pub use server::*;
    }
    pub mod postgres {
        pub mod server;
        pub mod under_test;
        pub use server::*;
    }
    pub mod zookeeper {
        pub mod server;
        pub mod under_test;
        pub use server::*;
    }
}

mod fleet;
mod harness;

use std::ffi::CString;
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use harness::figures::{self, FIGURES};
use harness::floor;
use harness::locker::{self, Locker, Pair};
use harness::page::{self, Measured, Run};
use harness::process::{self, Quiet, Talking};
use harness::procfs::{self, Usage};
use harness::report::{Machine, Row, Table, Verdict, ratio};
use harness::stats::Samples;
use stores::etcd::Etcd;
use stores::etcd::http::{self as etcd_http, Metrics};
use stores::mysql::MariaDb;
use stores::postgres::{PgBouncer, Postgres};
use stores::zookeeper::ZooKeeper;

/// Counts and durations for one run.
struct Mode {
    name: &'static str,
    figures: Vec<String>,
    cycles: usize,
    handovers: usize,
    failovers: usize,
    failover_ttl: u64,
    revokes: usize,
    /// How long to watch an etcdctl command for a signal that never comes.
    revoke_patience: Duration,
    idle: Duration,
    contenders: usize,
    contention: Duration,
    contention_rounds: usize,
    scale: Vec<usize>,
    /// Largest queue to run etcdctl lock with (each is a Go process).
    etcdctl_scale_max: usize,
    /// Counts of the fleet figures: holders of a lock each, waiters on one.
    holders: Vec<usize>,
    waiters: Vec<usize>,
    /// Counts of the herd figure: elects started at once on one lock.
    herd: Vec<usize>,
    /// How long the holders figure holds.
    fleet_hold: Duration,
    /// The TTL ladder of the short-lease figure (seconds), its hold, and
    /// the failovers at the shortest safe TTL.
    short_ttls: Vec<u64>,
    short_hold: Duration,
    short_failovers: usize,
}

/// Handovers measured in the scale figure: the holder's, then 7 waiters
/// whose command is `true`, ending at the 8th waiter.
const SCALE_HANDOVERS: usize = 8;

/// Time for a waiter whose key is in etcd to settle on its watch.
const SETTLE: Duration = Duration::from_millis(100);

/// Upper bound for anything that should take milliseconds.
const PATIENCE: Duration = Duration::from_secs(15);

impl Mode {
    fn from_env() -> Mode {
        let quick = std::env::var("ELECT_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
        let mut figures: Vec<String> = std::env::args()
            .skip(1)
            .filter(|a| !a.starts_with('-'))
            .collect();
        if figures.is_empty() {
            figures = std::env::var("ELECT_BENCH_ONLY")
                .unwrap_or_default()
                .split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect();
        }
        for f in &figures {
            assert!(
                figures::names().any(|name| name == f),
                "unknown figure {f:?}; the figures are {:?}",
                figures::names().collect::<Vec<_>>()
            );
        }
        // ELECT_BENCH_HOLD: the fleet figures' hold, in seconds.
        let hold = |default: u64| {
            let secs = std::env::var("ELECT_BENCH_HOLD").map_or(default, |v| {
                v.parse()
                    .unwrap_or_else(|_| panic!("ELECT_BENCH_HOLD={v:?} is not a number of seconds"))
            });
            Duration::from_secs(secs)
        };
        // ELECT_BENCH_FLEET: the counts of holders and of waiters, for a
        // quick run that reaches a full run's counts.
        let fleet = |default: Vec<usize>| {
            std::env::var("ELECT_BENCH_FLEET").map_or(default, |v| {
                v.split(',')
                    .map(|n| {
                        n.trim().parse().unwrap_or_else(|_| {
                            panic!("ELECT_BENCH_FLEET={v:?} is not a list of counts, such as 10,100,1000")
                        })
                    })
                    .collect()
            })
        };
        if quick {
            Mode {
                name: "quick (ELECT_BENCH_QUICK=1)",
                figures,
                cycles: 20,
                handovers: 15,
                failovers: 3,
                failover_ttl: 2,
                revokes: 5,
                revoke_patience: Duration::from_secs(1),
                idle: Duration::from_secs(20),
                contenders: 4,
                contention: Duration::from_secs(5),
                contention_rounds: 1,
                scale: vec![10, 50],
                etcdctl_scale_max: 100,
                holders: fleet(vec![10, 100]),
                waiters: fleet(vec![10, 100]),
                herd: vec![100],
                fleet_hold: hold(120),
                short_ttls: vec![1, 2, 3, 5],
                short_hold: hold(120),
                short_failovers: 3,
            }
        } else {
            Mode {
                name: "full",
                figures,
                cycles: 200,
                handovers: 100,
                failovers: 10,
                failover_ttl: 2,
                revokes: 20,
                revoke_patience: Duration::from_secs(3),
                idle: Duration::from_secs(60),
                contenders: 4,
                contention: Duration::from_secs(10),
                contention_rounds: 3,
                scale: vec![10, 100, 500],
                etcdctl_scale_max: 100,
                holders: fleet(vec![10, 100, 1000]),
                waiters: fleet(vec![10, 100, 1000, 10000]),
                herd: vec![100, 1000, 10000],
                fleet_hold: hold(600),
                short_ttls: vec![1, 2, 3, 5],
                short_hold: hold(1800),
                short_failovers: 10,
            }
        }
    }

    fn runs(&self, figure: &str) -> bool {
        self.figures.is_empty() || self.figures.iter().any(|f| f == figure)
    }
}

/// A directory for FIFOs and file-store locks, removed at the end.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        let dir = std::env::temp_dir().join(format!("elect-bench-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("cannot create the scratch directory");
        Scratch(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// A new FIFO named `name`.
    fn fifo(&self, name: &str) -> PathBuf {
        let path = self.path(name);
        let c = CString::new(path.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        let r = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
        assert_eq!(
            r,
            0,
            "mkfifo {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        );
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Let the command blocked reading `fifo` go on; returns when it was let go.
/// Opening without blocking fails until the reader has opened its end.
fn release(fifo: &Path) -> Instant {
    let give_up = Instant::now() + PATIENCE;
    loop {
        let at = Instant::now();
        match OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(fifo)
        {
            Ok(mut f) => {
                f.write_all(b"go\n").expect("write to the FIFO");
                return at;
            }
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) && Instant::now() < give_up => {
                thread::sleep(Duration::from_micros(200));
            }
            Err(e) => panic!("nobody reads {}: {e}", fifo.display()),
        }
    }
}

/// Wait until `lock` has `n` keys in etcd (holder and waiters), within `within`.
fn wait_queue(etcd: &Etcd, lock: &str, n: usize, within: Duration) -> Result<(), String> {
    let give_up = Instant::now() + within;
    loop {
        let keys = etcd.keys(&format!("{lock}/")).len();
        if keys == n {
            return Ok(());
        }
        if Instant::now() >= give_up {
            return Err(format!(
                "{lock}: {keys} keys after {within:?}, expected {n}"
            ));
        }
        thread::sleep(Duration::from_millis(20));
    }
}

fn ms(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0} ms")
    } else {
        format!("{v:.1} ms")
    }
}

fn median_p99(s: &Samples) -> String {
    format!("{} / {}", ms(s.median()), ms(s.p99()))
}

fn verdict(ok: bool) -> Verdict {
    if ok { Verdict::Pass } else { Verdict::Miss }
}

/// Goals of the uncontended cycle: at most this share of `etcdctl lock`'s
/// on etcd, and of `flock(1)`'s on the file store.
const CYCLE_VS_ETCDCTL: f64 = 0.25;
const CYCLE_VS_FLOCK: f64 = 1.5;

/// Figure `cycle`: one uncontended `LOCKER -- true`, spawn to exit.
/// The cycle of each tool; returns elect's median (ms).
fn cycle(mode: &Mode, pair: &Pair, table: &mut Table) -> f64 {
    // elect, the reference tool, and elect keeping no history.
    let lockers = [&pair.elect, &pair.reference, &pair.elect];
    let mut times = [Samples::default(), Samples::default(), Samples::default()];
    // Round 0 warms the page cache and etcd and is not counted.
    for round in 0..=mode.cycles {
        // Each order in turn, so no tool always runs right after another.
        let order = [[0, 1, 2], [2, 0, 1], [1, 2, 0]][round % 3];
        for i in order {
            let locker = lockers[i];
            let lock = format!(
                "bench-cycle-{}{}",
                locker.tag(),
                if i == 2 { "-h0" } else { "" }
            );
            let mut command = locker.command(&lock, None, &["true"]);
            if i == 2 {
                command.env("ELECT_HISTORY", "0");
            }
            let start = Instant::now();
            let mut p = Quiet::spawn(command)
                .unwrap_or_else(|e| panic!("cannot start {}: {e}", locker.name));
            let status = p.wait_within(PATIENCE).unwrap_or_else(|| {
                panic!("{} -- true still running after {PATIENCE:?}", locker.name)
            });
            let took = start.elapsed();
            assert!(status.success(), "{} -- true: {status}", locker.name);
            if round > 0 {
                times[i].push(took);
            }
        }
    }
    let r = times[0].median() / times[1].median();
    table.row(Row {
        figure: format!(
            "cycle -- true [{}], median / p99, n={}",
            pair.store, mode.cycles
        ),
        elect: median_p99(&times[0]),
        reference: format!("{}: {}", pair.reference.name, median_p99(&times[1])),
        ratio: ratio(times[0].median(), times[1].median()),
        // Against etcdctl lock, and on one host against flock(1), which
        // has no token to keep and no guard to start.
        target: match pair.store {
            "etcd" => format!("<= {CYCLE_VS_ETCDCTL:.2}x"),
            "file" => format!("<= {CYCLE_VS_FLOCK:.2}x"),
            _ => "-".into(),
        },
        verdict: match pair.store {
            "etcd" => verdict(r <= CYCLE_VS_ETCDCTL),
            "file" => verdict(r <= CYCLE_VS_FLOCK),
            _ => Verdict::Info,
        },
    });
    let kept = times[0].median() / times[2].median();
    table.row(Row {
        figure: format!(
            "cycle with the history kept [{}], median / p99, n={}",
            pair.store, mode.cycles
        ),
        elect: median_p99(&times[0]),
        reference: format!("elect --history 0: {}", median_p99(&times[2])),
        ratio: ratio(times[0].median(), times[2].median()),
        target: "<= 1.05x".into(),
        verdict: verdict(kept <= 1.05),
    });
    times[0].median()
}

/// The floor under a cycle, measured now, and each cycle against it.
fn floor(mode: &Mode, etcd: &Etcd, scratch: &Scratch, cycles: &[(String, f64)], table: &mut Table) {
    let exec = floor::exec(mode.cycles);
    let writes = floor::etcd(&etcd.endpoint, mode.cycles);
    let fsync = floor::fsync(&scratch.path("."), mode.cycles);
    let info = |figure: String, elect: String| Row {
        figure,
        elect,
        reference: String::new(),
        ratio: "-".into(),
        target: "-".into(),
        verdict: Verdict::Info,
    };
    table.row(info(
        format!("floor: spawn and wait for true, median (n={})", mode.cycles),
        ms(exec.median()),
    ));
    table.row(info(
        "floor: etcd grant on a new connection (TCP, HTTP/2, the request), median".into(),
        ms(writes.first.median()),
    ));
    table.row(info(
        "floor: etcd grant / queue txn / revoke on a warm connection, median".into(),
        format!(
            "{} / {} / {}",
            ms(writes.grant.median()),
            ms(writes.txn.median()),
            ms(writes.revoke.median())
        ),
    ));
    table.row(info(
        "floor: 32 bytes written in place and fdatasync'd, median".into(),
        ms(fsync.median()),
    ));
    for (store, cycle) in cycles {
        let (floor, what) = match store.as_str() {
            "etcd" => (
                2.0 * exec.median() + writes.first.median() + writes.revoke.median(),
                "2 execs + grant and txn on a new connection + revoke",
            ),
            _ => (2.0 * exec.median() + fsync.median(), "2 execs + fdatasync"),
        };
        table.row(Row {
            figure: format!("cycle over its floor [{store}]: {what}"),
            elect: ms(*cycle),
            reference: format!("floor: {}", ms(floor)),
            ratio: ratio(*cycle, floor),
            target: "<= 1.30x".into(),
            verdict: verdict(*cycle <= 1.3 * floor),
        });
    }
}

/// Figure `timeline`: the median of each step of an uncontended cycle,
/// from elect's `-v` lines, one row per step with each store's median.
fn timeline(mode: &Mode, pairs: &[Pair], table: &mut Table) {
    let runs = if mode.cycles >= 200 { 40 } else { 10 };
    // Step names in the order elect logs them, and each store's samples.
    let mut steps: Vec<(String, Vec<Samples>)> = Vec::new();
    for (p, pair) in pairs.iter().enumerate() {
        let lock = format!("bench-timeline-{}", pair.elect.tag());
        for _ in 0..runs {
            let mut command = pair.elect.command(&lock, None, &["true"]);
            let out = command
                .env("ELECT_VERBOSE", "1")
                .env("ELECT_TIMELINE", "1")
                .stdin(std::process::Stdio::null())
                .output()
                .unwrap_or_else(|e| panic!("cannot start {}: {e}", pair.elect.name));
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{}: {stderr}", pair.elect.name);
            for (at, name) in stderr.lines().filter_map(step_of) {
                let i = match steps.iter().position(|(n, _)| *n == name) {
                    Some(i) => i,
                    None => {
                        steps.push((name, pairs.iter().map(|_| Samples::default()).collect()));
                        steps.len() - 1
                    }
                };
                steps[i].1[p].push_ms(at);
            }
        }
    }
    assert!(!steps.is_empty(), "elect -v logged no steps");
    let stores: Vec<&str> = pairs.iter().map(|p| p.store).collect();
    for (name, samples) in steps {
        let medians: Vec<String> = samples
            .iter()
            .map(|s| match s.median() {
                m if m.is_nan() => "-".into(),
                m => ms_fine(m),
            })
            .collect();
        table.row(info_row(
            format!(
                "timeline: {name}, median of {runs} [{}]",
                stores.join(" / ")
            ),
            medians.join(" / "),
            String::new(),
        ));
    }
}

/// `elect: TIME step +1.234ms NAME` → (1.234, NAME): ms from the start of `main`.
fn step_of(line: &str) -> Option<(f64, String)> {
    let (_, rest) = line.split_once(" step +")?;
    let (at, name) = rest.split_once("ms ")?;
    Some((at.parse().ok()?, name.to_string()))
}

/// Two decimals: steps a tenth of a millisecond apart stay apart.
fn ms_fine(v: f64) -> String {
    format!("{v:.2} ms")
}

/// A contender whose command prints `started`, then blocks on its FIFO.
struct Holder {
    process: Talking,
    fifo: PathBuf,
}

impl Holder {
    fn queue(locker: &Locker, lock: &str, scratch: &Scratch, name: &str) -> Holder {
        let fifo = scratch.fifo(name);
        let script = format!("echo started; read _ < '{}'", fifo.display());
        let process = Talking::spawn(locker.command(lock, None, &["sh", "-c", &script]));
        Holder { process, fifo }
    }

    /// Wait for the command's `started` line; when it arrived.
    fn started(&mut self, within: Duration) -> Instant {
        match self.process.line("started", within) {
            Some((_, at)) => at,
            None => panic!(
                "command of pid {} did not start within {within:?}; stderr: {}",
                self.process.pid(),
                self.process.stderr()
            ),
        }
    }
}

/// Figure `handover`: holder's command exits → next waiter's command starts.
fn handover(mode: &Mode, etcd: &Etcd, pair: &Pair, scratch: &Scratch, table: &mut Table) {
    let lockers = [&pair.elect, &pair.reference];
    let locks = lockers.map(|l| format!("bench-handover-{}", l.tag()));
    let mut holders: Vec<Holder> = (0..2)
        .map(|i| {
            let mut h = Holder::queue(lockers[i], &locks[i], scratch, &format!("h-{i}-0"));
            h.started(PATIENCE);
            h
        })
        .collect();
    let mut times = [Samples::default(), Samples::default()];
    let mut overlaps = [0usize; 2];
    for round in 1..=mode.handovers {
        for i in 0..2 {
            let name = format!("h-{i}-{round}");
            let mut waiter = Holder::queue(lockers[i], &locks[i], scratch, &name);
            wait_queue(etcd, &locks[i], 2, PATIENCE).unwrap_or_else(|e| panic!("{e}"));
            // Let the waiter finish start-up and settle on its watch: the
            // figure is a steady handover, not a waiter still starting.
            thread::sleep(SETTLE);
            if waiter.process.running.try_line().is_some() {
                overlaps[i] += 1; // started while the holder still held the lock
            }
            let released = release(&holders[i].fifo);
            let started = waiter.started(PATIENCE);
            times[i].push(started - released);
            let old = std::mem::replace(&mut holders[i], waiter);
            drop(old); // it has exited; dropping reaps it
        }
    }
    table.row(Row {
        figure: format!(
            "handover after clean exit, median / p99, n={}",
            mode.handovers
        ),
        elect: median_p99(&times[0]),
        reference: format!("{}: {}", pair.reference.name, median_p99(&times[1])),
        ratio: ratio(times[0].median(), times[1].median()),
        target: "median < 5 ms".into(),
        verdict: verdict(times[0].median() < 5.0),
    });
    for (i, n) in overlaps.iter().enumerate() {
        if *n > 0 {
            table.note(format!(
                "{}: {n} waiter(s) started before the holder's command was released",
                lockers[i].name
            ));
        }
    }
}

/// Figure `failover`: SIGKILL of the holder → next waiter's command starts.
fn failover(mode: &Mode, etcd: &Etcd, pair: &Pair, table: &mut Table) {
    let ttl = mode.failover_ttl;
    let lockers = [&pair.elect, &pair.reference];
    let mut late = [Samples::default(), Samples::default()];
    let script = "echo started; exec sleep 60";
    for round in 0..mode.failovers {
        for i in 0..2 {
            let lock = format!("bench-failover-{}-{round}", lockers[i].tag());
            let cmd = || lockers[i].command(&lock, Some(ttl), &["sh", "-c", script]);
            let mut holder = Talking::spawn(cmd());
            holder
                .line("started", PATIENCE)
                .unwrap_or_else(|| panic!("holder did not start: {}", holder.stderr()));
            let mut waiter = Talking::spawn(cmd());
            wait_queue(etcd, &lock, 2, PATIENCE).unwrap_or_else(|e| panic!("{e}"));
            let killed = Instant::now();
            holder.crash();
            let (_, started) = waiter
                .line("started", PATIENCE + Duration::from_secs(ttl))
                .unwrap_or_else(|| panic!("waiter did not take over: {}", waiter.stderr()));
            let after = (started - killed).as_secs_f64() * 1e3 - (ttl * 1000) as f64;
            late[i].push_ms(after);
        }
    }
    table.row(Row {
        figure: format!(
            "failover after SIGKILL - TTL ({ttl} s), median / max, n={}",
            mode.failovers
        ),
        elect: format!("{:+.0} / {:+.0} ms", late[0].median(), late[0].max()),
        reference: format!(
            "{}: {:+.0} / {:+.0} ms",
            pair.reference.name,
            late[1].median(),
            late[1].max()
        ),
        ratio: "-".into(),
        target: "max <= +100 ms".into(),
        verdict: verdict(late[0].max() <= 100.0),
    });
}

/// Figure `revoke`: an external lease revoke → the command gets its signal.
fn revoke(mode: &Mode, etcd: &Etcd, pair: &Pair, table: &mut Table) {
    // The lease id: elect's ELECT_LEASE_ID, or the tail of etcdctl's ETCD_LOCK_KEY.
    let script = "trap 'echo stopped; exit 0' TERM; \
                  echo lease ${ELECT_LEASE_ID:-${ETCD_LOCK_KEY##*/}}; sleep 60 & wait";
    let mut reaction = Samples::default();
    let mut ignored = 0;
    // etcdctl lock never reacts; a few rounds show that.
    let reference_rounds = mode.revokes.min(3);
    for round in 0..mode.revokes {
        let lockers: &[&Locker] = if round < reference_rounds {
            &[&pair.elect, &pair.reference]
        } else {
            &[&pair.elect]
        };
        for (i, locker) in lockers.iter().enumerate() {
            let lock = format!("bench-revoke-{}-{round}", locker.tag());
            let mut holder = Talking::spawn(locker.command(&lock, None, &["sh", "-c", script]));
            let (lease, _) = holder
                .line("lease", PATIENCE)
                .unwrap_or_else(|| panic!("holder did not start: {}", holder.stderr()));
            let revoked = Instant::now();
            etcd_http::revoke(&etcd.endpoint, &lease)
                .unwrap_or_else(|e| panic!("revoke {lease}: {e}"));
            let patience = if i == 0 {
                PATIENCE
            } else {
                mode.revoke_patience
            };
            match holder.line("stopped", patience) {
                Some((_, at)) if i == 0 => reaction.push(at - revoked),
                Some(_) => table.note(format!("{} stopped its command on revoke", locker.name)),
                None if i == 0 => panic!("elect did not stop its command: {}", holder.stderr()),
                None => ignored += 1,
            }
        }
    }
    table.row(Row {
        figure: format!("reaction to lease revoke, median / p99, n={}", mode.revokes),
        elect: median_p99(&reaction),
        reference: format!(
            "{}: no signal ({ignored}/{reference_rounds} in {:?})",
            pair.reference.name, mode.revoke_patience
        ),
        ratio: "-".into(),
        target: "-".into(),
        verdict: Verdict::Info,
    });
}

/// Figure `idle`: memory, CPU and wake-ups of a holder with an idle command.
fn idle(mode: &Mode, pair: &Pair, table: &mut Table) {
    let sleep = format!("echo started; exec sleep {}", mode.idle.as_secs() + 60);
    let ttl = 15;
    let mut elect = Talking::spawn(pair.elect.command(
        "bench-idle-elect",
        Some(ttl),
        &["sh", "-c", &sleep],
    ));
    let mut reference = Talking::spawn(pair.reference.command(
        "bench-idle-reference",
        Some(ttl),
        &["sh", "-c", &sleep],
    ));
    // The same holder with `--listen` on, asked nothing, in the same window.
    let mut listening =
        pair.elect
            .command("bench-idle-listening", Some(ttl), &["sh", "-c", &sleep]);
    listening.env("ELECT_LISTEN", support::tools::free_port().to_string());
    let mut listening = Talking::spawn(listening);
    for p in [&mut elect, &mut reference, &mut listening] {
        p.line("started", PATIENCE)
            .unwrap_or_else(|| panic!("holder did not start: {}", p.stderr()));
    }
    let guard_of = |pid| {
        procfs::children(pid)
            .into_iter()
            .find(|&pid| procfs::command_line(pid).starts_with("lease-guard"))
            .expect("elect's guard process")
    };
    let (guard, listening_guard) = (guard_of(elect.pid()), guard_of(listening.pid()));
    // An earlier elect as the reference has its guard counted too.
    let their_guard = pair.reference.is_elect().then(|| guard_of(reference.pid()));
    // Start-up is over once the command runs; give the first renewal a moment.
    thread::sleep(Duration::from_secs(1));
    let read = |pid| Usage::read(pid).unwrap_or_else(|| panic!("cannot read /proc/{pid}"));
    let mut pids = vec![
        elect.pid(),
        guard,
        listening.pid(),
        listening_guard,
        reference.pid(),
    ];
    pids.extend(their_guard);
    let before: Vec<Usage> = pids.iter().map(|&pid| read(pid)).collect();
    thread::sleep(mode.idle);
    let after: Vec<Usage> = pids.iter().map(|&pid| read(pid)).collect();
    let used: Vec<Usage> = before
        .iter()
        .zip(&after)
        .map(|(b, a)| b.until(*a))
        .collect();
    let ours = used[0].plus(used[1]);
    let on = used[2].plus(used[3]);
    let theirs = used[4..]
        .iter()
        .skip(1)
        .fold(used[4], |sum, u| sum.plus(*u));
    let per_minute = 60.0 / mode.idle.as_secs_f64();
    let mib = |kib: u64| format!("{:.1} MiB", kib as f64 / 1024.0);
    let memory = |kib: fn(&Usage) -> u64| {
        (
            format!(
                "{} ({} + {})",
                mib(kib(&ours)),
                mib(kib(&used[0])),
                mib(kib(&used[1]))
            ),
            format!("{}: {}", pair.reference.name, mib(kib(&theirs))),
            ratio(kib(&ours) as f64, kib(&theirs) as f64),
        )
    };
    let (elect, reference, peak_ratio) = memory(|u| u.peak_rss_kib);
    table.row(Row {
        figure: "peak RSS holding a lock (elect + guard)".into(),
        elect,
        reference,
        ratio: peak_ratio,
        target: "< 8 MiB".into(),
        verdict: verdict(ours.peak_rss_kib < 8 * 1024),
    });
    // The guard is a fork of elect: most of its resident pages are elect's
    // own (the binary's code, above all), counted in both peaks above.
    let (elect, reference, pss_ratio) = memory(|u| u.pss_kib);
    table.row(Row {
        figure: "proportional memory holding a lock, Pss (elect + guard)".into(),
        elect,
        reference,
        ratio: pss_ratio,
        target: "-".into(),
        verdict: Verdict::Info,
    });
    let cpu = |u: &Usage| format!("{:.1} ms/min", u.cpu.as_secs_f64() * 1e3 * per_minute);
    table.row(Row {
        figure: format!(
            "idle CPU, TTL {ttl} s, over {:?} (elect + guard)",
            mode.idle
        ),
        elect: format!("{} ({} + {})", cpu(&ours), cpu(&used[0]), cpu(&used[1])),
        reference: format!("{}: {}", pair.reference.name, cpu(&theirs)),
        ratio: ratio(ours.cpu.as_secs_f64(), theirs.cpu.as_secs_f64()),
        target: "-".into(),
        verdict: Verdict::Info,
    });
    let wakeups = |u: &Usage| format!("{:.0}/min", u.wakeups as f64 * per_minute);
    table.row(Row {
        figure: format!(
            "idle wake-ups, TTL {ttl} s, over {:?} (elect + guard)",
            mode.idle
        ),
        elect: format!(
            "{} ({} + {})",
            wakeups(&ours),
            wakeups(&used[0]),
            wakeups(&used[1])
        ),
        reference: format!("{}: {}", pair.reference.name, wakeups(&theirs)),
        ratio: ratio(ours.wakeups as f64, theirs.wakeups as f64),
        target: "-".into(),
        verdict: Verdict::Info,
    });
    // `--listen` on against off: the reference column is elect without it.
    table.row(Row {
        figure: format!("idle CPU, endpoint on (--listen, not asked), TTL {ttl} s (elect + guard)"),
        elect: format!("{} ({} + {})", cpu(&on), cpu(&used[2]), cpu(&used[3])),
        reference: format!("endpoint off: {}", cpu(&ours)),
        ratio: ratio(on.cpu.as_secs_f64(), ours.cpu.as_secs_f64()),
        target: "-".into(),
        verdict: Verdict::Info,
    });
    table.row(Row {
        figure: format!(
            "idle wake-ups, endpoint on (--listen, not asked), TTL {ttl} s (elect + guard)"
        ),
        elect: format!(
            "{} ({} + {})",
            wakeups(&on),
            wakeups(&used[2]),
            wakeups(&used[3])
        ),
        reference: format!("endpoint off: {}", wakeups(&ours)),
        ratio: ratio(on.wakeups as f64, ours.wakeups as f64),
        target: "-".into(),
        verdict: Verdict::Info,
    });
}

/// Figure `contention`: K contenders looping `LOCKER L -- true`.
fn contention(mode: &Mode, pair: &Pair, table: &mut Table) {
    let lockers = [&pair.elect, &pair.reference];
    let mut rates = [Samples::default(), Samples::default()];
    let mut failures = [0usize; 2];
    for round in 0..mode.contention_rounds {
        for i in 0..2 {
            let locker = lockers[i];
            let lock = format!("bench-contention-{}-{round}", locker.tag());
            let start = Instant::now();
            let stop = start + mode.contention;
            let counts: Vec<(usize, usize)> = thread::scope(|s| {
                let workers: Vec<_> = (0..mode.contenders)
                    .map(|_| {
                        let lock = &lock;
                        s.spawn(move || {
                            let (mut done, mut failed) = (0, 0);
                            while Instant::now() < stop {
                                let ok = Quiet::spawn(locker.command(lock, None, &["true"]))
                                    .ok()
                                    .and_then(|mut p| p.wait_within(PATIENCE))
                                    .is_some_and(|s| s.success());
                                if ok { done += 1 } else { failed += 1 }
                            }
                            (done, failed)
                        })
                    })
                    .collect();
                workers.into_iter().map(|w| w.join().unwrap()).collect()
            });
            let elapsed = start.elapsed().as_secs_f64();
            let done: usize = counts.iter().map(|c| c.0).sum();
            failures[i] += counts.iter().map(|c| c.1).sum::<usize>();
            // Samples holds the rate in its "milliseconds" slot: only order matters.
            rates[i].push_ms(done as f64 / elapsed);
        }
    }
    table.row(Row {
        figure: format!(
            "contended, {} contenders, acquisitions/s, {} x {:?}",
            mode.contenders, mode.contention_rounds, mode.contention
        ),
        elect: format!("{:.1}/s", rates[0].median()),
        reference: format!("{}: {:.1}/s", pair.reference.name, rates[1].median()),
        ratio: ratio(rates[0].median(), rates[1].median()),
        target: "-".into(),
        verdict: Verdict::Info,
    });
    for (i, n) in failures.iter().enumerate() {
        if *n > 0 {
            table.note(format!(
                "contention: {n} runs of {} failed",
                lockers[i].name
            ));
        }
    }
}

/// What etcd counted during the measured handovers of the scale figure.
struct ScaleResult {
    requests: f64,
    watch_sent: f64,
    keepalives: f64,
    per_handover: Duration,
}

/// One queue of `waiters` behind a holder, in a fresh etcd.
fn scale_once(
    locker_of: fn(&Etcd) -> Locker,
    waiters: usize,
    scratch: &Scratch,
) -> Result<ScaleResult, String> {
    let etcd = Etcd::start();
    process::kill_on_interrupt(etcd.pid());
    let locker = locker_of(&etcd);
    let lock = "bench-scale";
    let tag = format!("scale-{}-{waiters}", locker.tag());
    let mut holder = Holder::queue(&locker, lock, scratch, &tag);
    holder.started(PATIENCE);
    // The chain, in order: each waits until the previous one is queued.
    let mut chain = Vec::new();
    for k in 1..SCALE_HANDOVERS {
        chain.push(
            Quiet::spawn(locker.command(lock, None, &["true"]))
                .map_err(|e| format!("cannot start waiter {k}: {e}"))?,
        );
        wait_queue(&etcd, lock, k + 1, PATIENCE)?;
    }
    let mut last =
        Talking::spawn(locker.command(lock, None, &["sh", "-c", "echo started; exec sleep 300"]));
    wait_queue(&etcd, lock, SCALE_HANDOVERS + 1, PATIENCE)?;
    let mut rest = Vec::new();
    for k in SCALE_HANDOVERS + 1..=waiters {
        rest.push(
            Quiet::spawn(locker.command(lock, None, &["true"]))
                .map_err(|e| format!("cannot start waiter {k} of {waiters}: {e}"))?,
        );
    }
    let queue_time = PATIENCE + Duration::from_millis(100 * waiters as u64);
    wait_queue(&etcd, lock, waiters + 1, queue_time)?;
    // Let every waiter finish looking at the queue and set up its watch.
    thread::sleep(Duration::from_secs(1));
    let before = Metrics::scrape(&etcd.endpoint).map_err(|e| e.to_string())?;
    let released = release(&holder.fifo);
    let (_, started) = last
        .line("started", PATIENCE)
        .ok_or_else(|| format!("the chain did not reach its end: {}", last.stderr()))?;
    // The last holder's own set-up (its watch on its key) belongs to the chain.
    thread::sleep(Duration::from_millis(200));
    let after = Metrics::scrape(&etcd.endpoint).map_err(|e| e.to_string())?;
    let delta =
        |name: &str, keep: &dyn Fn(&str) -> bool| after.sum(name, keep) - before.sum(name, keep);
    let keepalive = |l: &str| l.contains("grpc_method=\"LeaseKeepAlive\"");
    let handovers = SCALE_HANDOVERS as f64;
    Ok(ScaleResult {
        requests: delta("grpc_server_msg_received_total", &|l| !keepalive(l)) / handovers,
        watch_sent: delta("grpc_server_msg_sent_total", &|l| {
            l.contains("grpc_method=\"Watch\"") && l.contains("etcdserverpb.Watch")
        }) / handovers,
        keepalives: delta("grpc_server_msg_received_total", &keepalive) / handovers,
        per_handover: (started - released) / SCALE_HANDOVERS as u32,
    })
}

/// Figure `scale`: etcd requests per handover as the queue grows.
fn scale(mode: &Mode, scratch: &Scratch, table: &mut Table) {
    let mut per_size: Vec<f64> = Vec::new();
    for &waiters in &mode.scale {
        let ours = scale_once(Locker::elect_etcd, waiters, scratch);
        let theirs = (waiters <= mode.etcdctl_scale_max)
            .then(|| scale_once(Locker::etcdctl_lock, waiters, scratch));
        let show = |r: &Result<ScaleResult, String>| match r {
            Ok(r) => format!(
                "{:.1} req, {:.1} watch msg, {:.1} ms",
                r.requests,
                r.watch_sent,
                r.per_handover.as_secs_f64() * 1e3
            ),
            Err(e) => format!("failed: {e}"),
        };
        let reference = match &theirs {
            Some(r) => format!("etcdctl lock: {}", show(r)),
            None => format!(
                "etcdctl lock: not run above {} waiters",
                mode.etcdctl_scale_max
            ),
        };
        let theirs_requests = theirs
            .as_ref()
            .and_then(|r| r.as_ref().ok())
            .map_or(f64::NAN, |r| r.requests);
        table.row(Row {
            figure: format!("scale: {waiters} waiters, per handover (of {SCALE_HANDOVERS})"),
            elect: show(&ours),
            reference,
            ratio: ours
                .as_ref()
                .map_or("-".into(), |r| ratio(r.requests, theirs_requests)),
            target: "-".into(),
            verdict: Verdict::Info,
        });
        match &ours {
            Ok(r) => {
                per_size.push(r.requests);
                if r.keepalives > 0.0 {
                    table.note(format!(
                        "scale {waiters}: plus {:.2} lease keep-alives per handover (per waiter per TTL/3, not per handover)",
                        r.keepalives
                    ));
                }
            }
            Err(e) => table.note(format!("scale {waiters}: elect failed: {e}")),
        }
    }
    let (low, high) = per_size
        .iter()
        .fold((f64::INFINITY, 0.0f64), |(l, h), &v| (l.min(v), h.max(v)));
    let flat = per_size.len() == mode.scale.len() && high <= low * 1.2 + 0.5;
    table.row(Row {
        figure: format!("scale: requests per handover over {:?} waiters", mode.scale),
        elect: format!("{low:.1} .. {high:.1}"),
        reference: String::new(),
        ratio: ratio(high, low),
        target: "flat (max <= 1.2 min)".into(),
        verdict: verdict(flat),
    });
}

/// A row that only informs: no reference, no target.
fn info_row(figure: String, elect: String, reference: String) -> Row {
    Row {
        figure,
        elect,
        reference,
        ratio: "-".into(),
        target: "-".into(),
        verdict: Verdict::Info,
    }
}

/// This build, and with `ELECT_BENCH_AGAINST` the earlier one on the same
/// store after it: each with the tag its rows carry.
fn and_before(elect: &Locker) -> Vec<(&'static str, Locker)> {
    let mut all = vec![("", elect.clone())];
    if let Some(program) = locker::against() {
        all.push((", before", Locker::elect_at(&program, elect)));
    }
    all
}

/// Wait until `waiting()` says the waiter is queued.
fn wait_queued(lock: &str, waiting: &dyn Fn(&str) -> bool) {
    let give_up = Instant::now() + PATIENCE;
    while !waiting(lock) {
        assert!(Instant::now() < give_up, "{lock}: the waiter never queued");
        thread::sleep(Duration::from_millis(10));
    }
}

/// Clean-exit handovers on `lock` with `elect`, as the `handover` figure
/// measures them; `waiting` tells when the waiter is queued.
fn handovers(
    mode: &Mode,
    elect: &Locker,
    lock: &str,
    scratch: &Scratch,
    waiting: &dyn Fn(&str) -> bool,
) -> Samples {
    let mut holder = Holder::queue(elect, lock, scratch, &format!("{lock}-0"));
    holder.started(PATIENCE);
    let mut times = Samples::default();
    for round in 1..=mode.handovers {
        let mut waiter = Holder::queue(elect, lock, scratch, &format!("{lock}-{round}"));
        wait_queued(lock, waiting);
        thread::sleep(SETTLE);
        let released = release(&holder.fifo);
        let started = waiter.started(PATIENCE);
        times.push(started - released);
        holder = waiter;
    }
    times
}

/// Failovers with `elect` on `store`: SIGKILL of elect alone (its guard
/// ends the lease, as `released` says), and of elect, guard and command at
/// once (the lease ends as `expires` says); a row for each.
fn failovers(
    mode: &Mode,
    table: &mut Table,
    store: &str,
    elect: &Locker,
    waiting: &dyn Fn(&str) -> bool,
    (released, expires): (&str, &str),
) {
    let ttl = mode.failover_ttl;
    let script = "echo started; exec sleep 60";
    let mut after = [Samples::default(), Samples::default()];
    for round in 0..mode.failovers {
        for (i, whole) in [false, true].into_iter().enumerate() {
            let lock = format!("bench-failover-{i}-{round}");
            let cmd = || elect.command(&lock, Some(ttl), &["sh", "-c", script]);
            let mut holder = Talking::spawn(cmd());
            holder
                .line("started", PATIENCE)
                .unwrap_or_else(|| panic!("holder did not start: {}", holder.stderr()));
            let mut waiter = Talking::spawn(cmd());
            wait_queued(&lock, waiting);
            let killed = Instant::now();
            match whole {
                // elect, its guard and the command, all at once.
                true => procfs::kill_tree(holder.pid()),
                false => holder.crash(),
            }
            let (_, started) = waiter
                .line("started", PATIENCE + Duration::from_secs(ttl))
                .unwrap_or_else(|| panic!("waiter did not take over: {}", waiter.stderr()));
            after[i].push(started - killed);
        }
    }
    table.row(info_row(
        format!(
            "failover after SIGKILL of elect [{store}], median / max, n={}",
            mode.failovers
        ),
        format!("{} / {}", ms(after[0].median()), ms(after[0].max())),
        released.into(),
    ));
    table.row(info_row(
        format!(
            "failover after SIGKILL of elect, guard and command [{store}] - TTL ({ttl} s), median / max"
        ),
        format!(
            "{:+.0} / {:+.0} ms",
            after[1].median() - (ttl * 1000) as f64,
            after[1].max() - (ttl * 1000) as f64
        ),
        expires.into(),
    ));
}

/// Figure `postgres`: cycle, handover and failover on PostgreSQL.
fn postgres(mode: &Mode, scratch: &Scratch, table: &mut Table) {
    let pg = Postgres::start();
    let bouncer = PgBouncer::start(&pg, "transaction");
    let tcp = pg.url();
    let socket = pg.socket_url();
    // A waiter's row, live.
    let waiting = |lock: &str| {
        pg.try_psql(&format!(
            "SELECT count(*) FROM elect.waiter WHERE name = '{lock}' \
             AND expires_at > clock_timestamp()"
        ))
        .is_ok_and(|n| n == "1")
    };

    for (how, url) in [("TCP", &tcp), ("socket", &socket)] {
        let elect = Locker::elect_postgres(url, "elect (postgres)");
        let before = locker::against().map(|program| Locker::elect_at(&program, &elect));
        let mut times = [Samples::default(), Samples::default()];
        for round in 0..=mode.cycles {
            let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
            for i in order {
                let mut command = match (i, &before) {
                    (0, _) => elect.command("bench-cycle", None, &["true"]),
                    (_, Some(before)) => before.command("bench-cycle", None, &["true"]),
                    _ => {
                        let mut c = std::process::Command::new("psql");
                        c.args(["-X", "-q", "-At", url.as_str(), "-c", "SELECT 1"])
                            .env("PGPASSWORD", stores::postgres::PASSWORD);
                        c
                    }
                };
                command.stdout(std::process::Stdio::null());
                let start = Instant::now();
                let mut p = Quiet::spawn(command).expect("cannot start");
                let status = p.wait_within(PATIENCE).expect("still running");
                assert!(status.success(), "cycle [{how}] {i}: {status}");
                if round > 0 {
                    times[i].push(start.elapsed());
                }
            }
        }
        table.row(Row {
            figure: format!(
                "cycle -- true [postgres, {how}], median / p99, n={}",
                mode.cycles
            ),
            elect: median_p99(&times[0]),
            reference: match before {
                Some(_) => format!("elect before: {}", median_p99(&times[1])),
                None => format!("psql -c 'SELECT 1': {}", median_p99(&times[1])),
            },
            ratio: ratio(times[0].median(), times[1].median()),
            target: "-".into(),
            verdict: Verdict::Info,
        });
    }

    for (how, url, lock) in [
        ("LISTEN", tcp.clone(), "bench-handover-listen"),
        ("polling, PgBouncer", bouncer.url(), "bench-handover-poll"),
    ] {
        for (tag, elect) in and_before(&Locker::elect_postgres(&url, "elect (postgres)")) {
            let lock = format!("{lock}{}", tag.len());
            let times = handovers(mode, &elect, &lock, scratch, &waiting);
            table.row(info_row(
                format!(
                    "handover after clean exit [postgres, {how}{tag}], median / p99, n={}",
                    mode.handovers
                ),
                median_p99(&times),
                String::new(),
            ));
        }
    }

    let pid = pg.pid();
    // PostgreSQL's counters lag (its statistics are flushed now and then):
    // its CPU time alone.
    let statements = || -> Option<u64> { None };
    for (tag, elect) in and_before(&Locker::elect_postgres(&tcp, "elect (postgres)")) {
        failovers(
            mode,
            table,
            &format!("postgres{tag}"),
            &elect,
            &waiting,
            ("its guard releases", "the lease expires on the server"),
        );
        waiter_load(
            mode,
            table,
            &format!("postgres, LISTEN{tag}"),
            &elect,
            scratch,
            &|| server_usage(pid, true),
            &statements,
        );
    }
}

/// The CPU time of a server: `pid` and, with `children`, every process
/// below it (PostgreSQL's backends).
fn server_usage(pid: i32, children: bool) -> Duration {
    let mut all = vec![pid];
    let mut i = 0;
    while children && i < all.len() {
        all.extend(procfs::children(all[i]));
        i += 1;
    }
    all.iter()
        .filter_map(|&p| procfs::Usage::read(p))
        .map(|u| u.cpu)
        .sum()
}

/// What idle waiters cost the server: a holder and [`WAITERS`] waiters over
/// a window, against the holder alone over the same window; per waiter per
/// minute, in server CPU time and statements.
fn waiter_load(
    mode: &Mode,
    table: &mut Table,
    store: &str,
    elect: &Locker,
    scratch: &Scratch,
    cpu: &dyn Fn() -> Duration,
    statements: &dyn Fn() -> Option<u64>,
) {
    const WAITERS: usize = 4;
    let window = match mode.idle > Duration::from_secs(30) {
        true => Duration::from_secs(30),
        false => Duration::from_secs(10),
    };
    let lock = "bench-idle-waiters";
    let tag: String = store.chars().filter(char::is_ascii_alphanumeric).collect();
    let spawn = |name: &str| {
        let fifo = scratch.fifo(&format!("{tag}-{name}"));
        let script = format!("echo started; read _ < '{}'", fifo.display());
        (
            Talking::spawn(elect.command(lock, Some(6), &["sh", "-c", &script])),
            fifo,
        )
    };
    let (mut holder, holder_fifo) = spawn("idle-holder");
    assert!(
        holder.line("started", PATIENCE).is_some(),
        "the holder runs"
    );
    let measure = || {
        let (c0, s0) = (cpu(), statements());
        thread::sleep(window);
        let (c1, s1) = (cpu(), statements());
        (
            c1.saturating_sub(c0),
            s0.zip(s1).map(|(a, b)| b.saturating_sub(a)),
        )
    };
    thread::sleep(Duration::from_secs(1));
    let alone = measure();
    let waiters: Vec<_> = (0..WAITERS)
        .map(|i| spawn(&format!("idle-waiter-{i}")))
        .collect();
    // Queued and settled.
    thread::sleep(Duration::from_secs(2));
    let crowded = measure();
    let per_minute = 60.0 / window.as_secs_f64() / WAITERS as f64;
    let cpu_ms = (crowded.0.as_secs_f64() - alone.0.as_secs_f64()) * 1000.0 * per_minute;
    let per_window = 60.0 / window.as_secs_f64();
    let (stmts, alone_stmts) = match (crowded.1, alone.1) {
        (Some(c), Some(a)) => (
            format!(", {:.0} statements", (c as f64 - a as f64) * per_minute),
            format!(", {:.0} statements", a as f64 * per_window),
        ),
        _ => (String::new(), String::new()),
    };
    table.row(info_row(
        format!(
            "idle waiter's load on the server [{store}], per waiter per minute, {WAITERS} waiters, TTL 6 s, {} s",
            window.as_secs()
        ),
        format!("{cpu_ms:.1} ms CPU{stmts}"),
        format!(
            "holder alone, a minute: {:.1} ms CPU{alone_stmts}",
            alone.0.as_secs_f64() * 1000.0 * per_window,
        ),
    ));
    drop(waiters);
    release(&holder_fifo);
    drop(holder);
}

/// Figure `mariadb`: cycle, handover, failover and idle waiters on MariaDB.
fn mariadb(mode: &Mode, scratch: &Scratch, table: &mut Table) {
    let db = MariaDb::start();
    let tcp = format!(
        "mysql://elect:{}@127.0.0.1:{}/elect?ssl-mode=DISABLED",
        stores::mysql::PASSWORD,
        db.port()
    );
    let socket = db.socket_url();
    let waiting = |lock: &str| {
        db.try_sql(&format!(
            "SELECT count(*) FROM elect_waiter WHERE name = '{lock}' \
             AND expires_at > UTC_TIMESTAMP(6)"
        ))
        .is_ok_and(|n| n == "1")
    };
    for (how, url) in [("TCP", &tcp), ("socket", &socket)] {
        let elect = Locker::elect_mysql(url);
        let before = locker::against().map(|program| Locker::elect_at(&program, &elect));
        let mut times = [Samples::default(), Samples::default()];
        for round in 0..=mode.cycles {
            let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
            for i in order {
                let mut command = match (i, &before) {
                    (0, _) => elect.command("bench-cycle", None, &["true"]),
                    (_, Some(before)) => before.command("bench-cycle", None, &["true"]),
                    _ => {
                        let mut c = std::process::Command::new("mariadb");
                        c.arg("--no-defaults");
                        match how {
                            "TCP" => c.args([
                                "-h127.0.0.1",
                                &format!("-P{}", db.port()),
                                &format!("-p{}", stores::mysql::PASSWORD),
                            ]),
                            _ => c.arg(format!("--socket={}", db.socket().display())),
                        };
                        c.args(["-uelect", "elect", "-e", "SELECT 1"]);
                        c
                    }
                };
                command.stdout(std::process::Stdio::null());
                let start = Instant::now();
                let mut p = Quiet::spawn(command).expect("cannot start");
                let status = p.wait_within(PATIENCE).expect("still running");
                assert!(status.success(), "cycle [{how}] {i}: {status}");
                if round > 0 {
                    times[i].push(start.elapsed());
                }
            }
        }
        table.row(Row {
            figure: format!(
                "cycle -- true [mariadb, {how}], median / p99, n={}",
                mode.cycles
            ),
            elect: median_p99(&times[0]),
            reference: match before {
                Some(_) => format!("elect before: {}", median_p99(&times[1])),
                None => format!("mariadb -e 'SELECT 1': {}", median_p99(&times[1])),
            },
            ratio: ratio(times[0].median(), times[1].median()),
            target: "-".into(),
            verdict: Verdict::Info,
        });
    }
    let pid = db.pid();
    let statements = || -> Option<u64> {
        db.sql("SHOW GLOBAL STATUS LIKE 'Questions'")
            .split_whitespace()
            .nth(1)
            .and_then(|n| n.parse().ok())
    };
    for (tag, elect) in and_before(&Locker::elect_mysql(&tcp)) {
        handover_and_failovers(
            mode,
            table,
            &format!("mariadb{tag}"),
            &elect,
            scratch,
            &waiting,
            (
                "its guard releases",
                "the row expires by the server's clock",
            ),
        );
        waiter_load(
            mode,
            table,
            &format!("mariadb{tag}"),
            &elect,
            scratch,
            &|| server_usage(pid, false),
            &statements,
        );
    }
}

/// Figure `zookeeper`: cycle, handover and failover on ZooKeeper.
fn zookeeper(mode: &Mode, scratch: &Scratch, table: &mut Table) {
    let zk = ZooKeeper::start();
    let elect = Locker::elect_zookeeper(&zk.url());
    // The holder's node and the waiter's.
    let waiting = |lock: &str| zk.children(&format!("/{lock}")).len() >= 2;

    let all = and_before(&elect);
    let lockers: Vec<&Locker> = all.iter().map(|(_, l)| l).collect();
    let times = cycles(mode, &lockers);
    table.row(Row {
        figure: format!("cycle -- true [zookeeper], median / p99, n={}", mode.cycles),
        elect: median_p99(&times[0]),
        reference: times
            .get(1)
            .map_or_else(String::new, |t| format!("elect before: {}", median_p99(t))),
        ratio: times
            .get(1)
            .map_or_else(|| "-".into(), |t| ratio(times[0].median(), t.median())),
        target: "-".into(),
        verdict: Verdict::Info,
    });

    for (tag, elect) in &all {
        handover_and_failovers(
            mode,
            table,
            &format!("zookeeper{tag}"),
            elect,
            scratch,
            &waiting,
            (
                "its guard deletes the node",
                "the lease expires on the server",
            ),
        );
    }
}

/// The handover after a clean exit and the failovers of `elect` on
/// `store` (as the rows name it).
fn handover_and_failovers(
    mode: &Mode,
    table: &mut Table,
    store: &str,
    elect: &Locker,
    scratch: &Scratch,
    waiting: &dyn Fn(&str) -> bool,
    why: (&str, &str),
) {
    let tag: String = store.chars().filter(char::is_ascii_alphanumeric).collect();
    let times = handovers(
        mode,
        elect,
        &format!("bench-handover-{tag}"),
        scratch,
        waiting,
    );
    table.row(info_row(
        format!(
            "handover after clean exit [{store}], median / p99, n={}",
            mode.handovers
        ),
        median_p99(&times),
        String::new(),
    ));
    failovers(mode, table, store, elect, waiting, why);
}

/// Uncontended cycles `-- true` of each of `lockers`, alternating them
/// run by run, the first round not counted.
fn cycles(mode: &Mode, lockers: &[&Locker]) -> Vec<Samples> {
    let mut times: Vec<Samples> = lockers.iter().map(|_| Samples::default()).collect();
    for round in 0..=mode.cycles {
        let mut order: Vec<usize> = (0..lockers.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let mut command = lockers[i].command("bench-cycle", None, &["true"]);
            command.stdout(std::process::Stdio::null());
            let start = Instant::now();
            let mut p = Quiet::spawn(command).expect("cannot start");
            let status = p.wait_within(PATIENCE).expect("still running");
            assert!(status.success(), "cycle of {}: {status}", lockers[i].name);
            if round > 0 {
                times[i].push(start.elapsed());
            }
        }
    }
    times
}

/// Figure `k8s`: cycle, handover, failover and requests on Kubernetes.
fn kubernetes(mode: &Mode, scratch: &Scratch, table: &mut Table) {
    use stores::k8s::Kube;
    let audit = support::TempDir::new("bench-k8s-audit");
    let kube = Kube::start_audited("bench", &audit);
    kube.create_namespace("bench");
    kube.register("bench");
    let elect = Locker::elect_kube("k8s:bench?context=bench");
    // The waiter's record, a key of its lock's records' ConfigMap, and its
    // watch of the Lease begun (the holder's own is the other): its key is
    // written before, and a holder killed in between would time its join.
    let waiting = |lock: &str| {
        let watch = format!(
            "watch /apis/coordination.k8s.io/v1/namespaces/bench/leases?watch=1&fieldSelector=metadata.name%3D{lock}&"
        );
        let watches = Kube::requests_of_elect(&audit)
            .iter()
            .filter(|r| r.starts_with(&watch))
            .count();
        if watches < 2 {
            return false;
        }
        let (_, body) = kube.request(
            "GET",
            "/api/v1/namespaces/bench/configmaps?labelSelector=elect%2Frecords-of",
            None,
        );
        serde_json::from_str::<serde_json::Value>(&body).is_ok_and(|list| {
            list["items"].as_array().is_some_and(|items| {
                items.iter().any(|m| {
                    m["metadata"]["annotations"]["elect/lock"] == lock
                        && m["data"]
                            .as_object()
                            .is_some_and(|d| d.keys().any(|k| k.starts_with("waiter.")))
                })
            })
        })
    };

    let all = and_before(&elect);
    for (tag, elect) in &all {
        // One build at a time, so that the audit log tells its requests.
        let before = Kube::requests_of_elect(&audit).len();
        let times = cycles(mode, &[elect]);
        let requests = Kube::requests_of_elect(&audit).len() - before;
        table.row(info_row(
            format!("cycle -- true [k8s{tag}], median / p99, n={}", mode.cycles),
            median_p99(&times[0]),
            format!(
                "{:.1} requests a cycle",
                requests as f64 / (mode.cycles + 1) as f64
            ),
        ));
    }

    for (tag, elect) in &all {
        handover_and_failovers(
            mode,
            table,
            &format!("k8s{tag}"),
            elect,
            scratch,
            &waiting,
            (
                "its guard lets go",
                "the waiter saw the Lease unchanged for its duration",
            ),
        );
    }

    // Requests while holding at --ttl 3s for 9 s, alone and with a waiter.
    for waiters in [0, 1] {
        let lock = format!("bench-renewals-{waiters}");
        let cmd = || elect.command(&lock, Some(3), &["sh", "-c", "echo started; exec sleep 60"]);
        let mut holder = Talking::spawn(cmd());
        holder
            .line("started", PATIENCE)
            .unwrap_or_else(|| panic!("holder did not start: {}", holder.stderr()));
        let waiter = (waiters > 0).then(|| {
            let waiter = Talking::spawn(cmd());
            wait_queued(&lock, &waiting);
            waiter
        });
        let from = Kube::requests_of_elect(&audit).len();
        let window = Duration::from_secs(9);
        thread::sleep(window);
        let made = Kube::requests_of_elect(&audit)[from..].to_vec();
        let (renewals, others): (Vec<&String>, Vec<&String>) = made
            .iter()
            .partition(|r| r.ends_with(&format!("/leases/{lock}")) && r.starts_with("update"));
        eprintln!("k8s, {waiters} waiter(s): besides the renewals, {others:#?}");
        table.row(info_row(
            format!("requests while holding 9 s at --ttl 3s [k8s], {waiters} waiter(s)"),
            format!("{} renewal PUTs, {} others", renewals.len(), others.len()),
            "a renewal: one PUT".into(),
        ));
        procfs::kill_tree(holder.pid());
        if let Some(waiter) = waiter {
            procfs::kill_tree(waiter.pid());
        }
    }
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` runs this binary
    // without it, where hours of figures are no test: there, as criterion
    // does, check the bench's own code instead.
    if !std::env::args().any(|a| a == "--bench") {
        for (name, check) in page::CHECKS {
            check();
            println!("check page::{name} ... ok");
        }
        return;
    }
    // cargo points the dynamic loader at its build directories; no user's
    // elect, `true`, flock or psql runs with that, and each exec of a
    // dynamically linked program (not of etcdctl, which is static) would
    // pay for looking through them.
    // SAFETY: nothing else runs yet: no thread reads the environment.
    unsafe { std::env::remove_var("LD_LIBRARY_PATH") };
    let mode = Mode::from_env();
    process::clean_up_on_interrupt();
    let run = Run {
        machine: Machine::now(mode.name),
        against: locker::against().map(|p| p.display().to_string()),
    };
    println!("{}\n", run.machine);
    let etcd = Etcd::start();
    process::kill_on_interrupt(etcd.pid());
    let scratch = Scratch::new();
    let mut table = Table::default();
    // The file store's pair is the cycle's: a note that it was skipped
    // belongs there.
    table.measuring("cycle");
    let (pairs, notes) = locker::pairs(&etcd, &scratch.path("file-store"));
    for note in notes {
        table.note(note);
    }
    let on_etcd = &pairs[0];
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
    let plot =
        std::env::var_os("ELECT_BENCH_PLOT").map_or_else(|| docs.join("scale.svg"), PathBuf::from);
    let page_path = std::env::var_os("ELECT_BENCH_PAGE")
        .map_or_else(|| docs.join("benchmarks.md"), PathBuf::from);
    let mut growth = fleet::Growth::default();
    let mut plotted = false;
    let mut done = Vec::new();
    for figure in figures::names().filter(|f| mode.runs(f)) {
        table.measuring(figure);
        match figure {
            "cycle" => {
                let mut cycles = Vec::new();
                for pair in &pairs {
                    cycles.push((pair.store.to_string(), cycle(&mode, pair, &mut table)));
                }
                floor(&mode, &etcd, &scratch, &cycles, &mut table);
                timeline(&mode, &pairs, &mut table);
            }
            "handover" => handover(&mode, &etcd, on_etcd, &scratch, &mut table),
            "failover" => failover(&mode, &etcd, on_etcd, &mut table),
            "revoke" => revoke(&mode, &etcd, on_etcd, &mut table),
            "idle" => idle(&mode, on_etcd, &mut table),
            "postgres" => postgres(&mode, &scratch, &mut table),
            "mariadb" => mariadb(&mode, &scratch, &mut table),
            "zookeeper" => zookeeper(&mode, &scratch, &mut table),
            "k8s" => kubernetes(&mode, &scratch, &mut table),
            "contention" => contention(&mode, on_etcd, &mut table),
            "scale" => scale(&mode, &scratch, &mut table),
            "herd" => fleet::on_every(&mut fleet::herd::Figure {
                mode: &mode,
                scratch: &scratch,
                table: &mut table,
            }),
            "holders" => fleet::on_every(&mut fleet::holders::Figure {
                mode: &mode,
                scratch: &scratch,
                table: &mut table,
                growth: &mut growth,
            }),
            "waiters" => fleet::on_every(&mut fleet::waiters::Figure {
                mode: &mode,
                scratch: &scratch,
                table: &mut table,
                growth: &mut growth,
            }),
            "short-lease" => fleet::side_by_side(&fleet::short_lease::Figure {
                mode: &mode,
                scratch: &scratch,
                table: Mutex::new(&mut table),
                hog: Mutex::new(None),
            }),
            _ => unreachable!("{figure} is in FIGURES but not measured here"),
        }
        if matches!(figure, "holders" | "waiters") {
            growth.sort();
            let title = format!("elect with many holders and waiters ({})", mode.name);
            match growth.plot(&plot, &title) {
                Some(Ok(())) => {
                    plotted = true;
                    println!("  plot written to {}", plot.display());
                }
                Some(Err(e)) => {
                    plotted = false;
                    table.note(format!("cannot write the plot to {}: {e}", plot.display()));
                }
                None => {}
            }
        }
        done.push(figure);
        // After each figure, so that a run cut short keeps what it measured.
        write_page(&page_path, &run, &table, &done, |name| match name {
            "holders" => with_plot(growth.holders_markdown(), plotted, &plot, &page_path),
            "waiters" => with_plot(growth.waiters_markdown(), plotted, &plot, &page_path),
            _ => String::new(),
        });
    }
    println!();
    table.print();
    let markdown = growth.markdown();
    if !markdown.is_empty() {
        println!("\n{markdown}");
    }
}

/// Merge the sections of the figures `done` into the page at `path`, each
/// with its rows and notes from `table` and `more(figure)` after them.
fn write_page(
    path: &Path,
    run: &Run,
    table: &Table,
    done: &[&'static str],
    more: impl Fn(&str) -> String,
) {
    let fresh: Vec<(&str, String)> = FIGURES
        .iter()
        .filter(|figure| done.contains(&figure.name))
        .map(|figure| {
            let section = page::measured(&Measured {
                figure,
                run,
                rows: table.rows_of(figure.name).collect(),
                notes: table.notes_of(figure.name).collect(),
                more: more(figure.name),
            });
            (figure.name, section)
        })
        .collect();
    match page::write(path, &fresh) {
        Ok(()) => println!("  page written to {}", path.display()),
        Err(e) => println!("  cannot write the page to {}: {e}", path.display()),
    }
}

/// A fleet figure's growth table and, if it was drawn, a link to the plot
/// from the page: by its name if it sits beside the page, else by its path.
fn with_plot(table: String, plotted: bool, plot: &Path, page: &Path) -> String {
    if table.is_empty() || !plotted {
        return table;
    }
    let link = match (plot.parent(), page.parent(), plot.file_name()) {
        (Some(a), Some(b), Some(name)) if a == b => name.to_string_lossy().into_owned(),
        _ => plot.display().to_string(),
    };
    format!("{table}\nEach figure against N, one line per store: [{link}]({link}).\n")
}
