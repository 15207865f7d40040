//! Figure `herd`: cron on a fleet. N elects run the same line,
//! `elect run -n -q --once-per 1h --lock L -- JOB`, started as fast as the
//! harness can start them, as the same crontab line does on N hosts at one
//! minute. The job must run once; every other elect exits 0 (done already)
//! or 75 (busy) at once, says nothing, and costs the store a look or two.
//! Reported: runs of the job, the time from the last start to the last
//! exit, the store's requests and CPU per skipped elect (its counters over
//! the whole herd, less what one run of the job alone cost it, measured
//! just before on a lock of its own), the exit codes and the lines on
//! stderr.

use std::fs::OpenOptions;
use std::time::{Duration, Instant};

use super::OnEvery;
use crate::harness::process::Quiet;
use crate::harness::report::{Row, Table};
use crate::harness::served::{Reading, Served};
use crate::{Mode, Scratch, verdict};

/// How long the job runs: long enough that most of the herd finds it
/// held, short beside the herd's own time at 1,000.
const JOB: &str = "sleep 0.2";

/// How long the herd may take to exit, after its last start.
const HERD_PATIENCE: Duration = Duration::from_secs(120);

/// Goals: at 1,000, every elect gone within this of the last start …
const GONE_WITHIN: Duration = Duration::from_secs(2);
/// … and at most this many store requests per skipped elect.
const REQUESTS_PER_SKIP: f64 = 2.0;

/// What a herd of N came to.
struct Herd {
    runs: usize,
    /// From the first start to the last, and from the last start to the
    /// last exit.
    starting: Duration,
    draining: Duration,
    requests_per_skip: f64,
    cpu_ms_per_skip: f64,
    exits: String,
    stderr_lines: usize,
}

pub struct Figure<'a> {
    pub mode: &'a Mode,
    pub scratch: &'a Scratch,
    pub table: &'a mut Table,
}

impl OnEvery for Figure<'_> {
    fn on<S: Served>(&mut self) {
        // A server as operators size one: the herd is more than it takes
        // at once, which is what elect must cope with.
        let most = self.mode.herd.iter().copied().max().unwrap_or(0);
        let store = S::for_fleet("herd", most.min(100));
        for &n in &self.mode.herd {
            match once(&store, n, self.scratch) {
                Ok(h) => {
                    let within = h.draining <= GONE_WITHIN || n > 1000;
                    let good = h.runs == 1
                        && h.stderr_lines == 0
                        && h.requests_per_skip <= REQUESTS_PER_SKIP
                        && within;
                    self.table.row(Row {
                        figure: format!("herd [{}]: {n} at once on one --once-per lock", S::NAME),
                        elect: format!(
                            "{} run; all gone {:.2} s after the last start; {:.2} req, \
                             {:.2} ms CPU per skipped elect",
                            h.runs,
                            h.draining.as_secs_f64(),
                            h.requests_per_skip,
                            h.cpu_ms_per_skip
                        ),
                        reference: format!(
                            "started over {:.2} s; exits: {}; {} stderr lines",
                            h.starting.as_secs_f64(),
                            h.exits,
                            h.stderr_lines
                        ),
                        ratio: "-".into(),
                        target: format!(
                            "1 run, 0 lines, <= {REQUESTS_PER_SKIP} req{}",
                            if n == 1000 { ", gone within 2 s" } else { "" }
                        ),
                        verdict: verdict(good),
                    });
                }
                Err(e) => self
                    .table
                    .note(format!("herd [{}] {n}: failed: {e}", S::NAME)),
            }
        }
    }
}

fn once<S: Served>(store: &S, n: usize, scratch: &Scratch) -> Result<Herd, String> {
    let url = store.url();
    let lock = format!("bench-herd-{n}");
    let runs = scratch.path(&format!("herd-{}-{n}.runs", S::NAME));
    let stderr = scratch.path(&format!("herd-{}-{n}.stderr", S::NAME));
    let said = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&stderr)
        .map_err(|e| format!("{}: {e}", stderr.display()))?;
    let job = format!("echo ran >> '{}'; {JOB}", runs.display());
    let elect = |lock: &str, k: usize| {
        let mut c = crate::support::elect();
        c.args(["run", "-n", "-q", "--once-per", "1h", "--store", &url])
            .args(["--lock", lock, "--identity", &format!("host-{k}")])
            .args(["--", "sh", "-c", &job]);
        if url.starts_with("postgres") {
            c.env("PGPASSWORD", crate::stores::postgres::PASSWORD);
        }
        let err = said.try_clone().map_err(|e| e.to_string())?;
        Quiet::spawn_with_stderr(c, err).map_err(|e| format!("elect {k} of {n}: {e}"))
    };
    // What the one run costs the store, alone: the herd's counters less
    // this are the skipped elects' own.
    let before = Reading::take(store)?;
    let status = elect(&format!("{lock}-alone"), n)?
        .wait_within(HERD_PATIENCE)
        .ok_or_else(|| format!("a run alone still ran after {HERD_PATIENCE:?}"))?;
    if !status.success() {
        return Err(format!("a run alone: {status}"));
    }
    std::thread::sleep(S::LAG);
    let alone = Reading::take(store)?;
    let one_run = (
        alone.requests - before.requests,
        alone.cpu.saturating_sub(before.cpu),
    );
    let _ = std::fs::remove_file(&runs);
    let before = Reading::take(store)?;
    let first = Instant::now();
    let mut herd = Vec::with_capacity(n);
    for k in 0..n {
        herd.push(elect(&lock, k)?);
    }
    let last_start = Instant::now();
    // Each wait returns at once for one gone already: the loop ends as the
    // last of them exits.
    let mut exits = std::collections::BTreeMap::new();
    for (k, elect) in herd.iter_mut().enumerate() {
        let left = (last_start + HERD_PATIENCE).saturating_duration_since(Instant::now());
        let status = elect.wait_within(left).ok_or_else(|| {
            format!("elect {k} of {n} still ran {HERD_PATIENCE:?} after the last start")
        })?;
        *exits
            .entry(
                status
                    .code()
                    .map_or_else(|| status.to_string(), |c| c.to_string()),
            )
            .or_insert(0) += 1;
    }
    let drained = Instant::now();
    std::thread::sleep(S::LAG);
    let after = Reading::take(store)?;
    let ran = std::fs::read_to_string(&runs)
        .unwrap_or_default()
        .lines()
        .count();
    let lines = std::fs::read_to_string(&stderr)
        .unwrap_or_default()
        .lines()
        .count();
    let skipped = n.saturating_sub(ran).max(1) as f64;
    Ok(Herd {
        runs: ran,
        starting: last_start - first,
        draining: drained - last_start,
        requests_per_skip: (after.requests - before.requests - one_run.0).max(0.0) / skipped,
        cpu_ms_per_skip: after
            .cpu
            .saturating_sub(before.cpu)
            .saturating_sub(one_run.1)
            .as_secs_f64()
            * 1e3
            / skipped,
        exits: exits
            .iter()
            .map(|(code, k)| format!("{k} exit {code}"))
            .collect::<Vec<_>>()
            .join(", "),
        stderr_lines: lines,
    })
}
