//! Figure `waiters`: N waiters queued on one lock of one store, then a
//! chain of handovers among them, as the `scale` figure runs it on etcd:
//! the holder is released, the first waiters' commands are `true`, and the
//! chain ends at the one whose command stays, with the rest still queued.
//! The time per handover, the store's requests per handover (its counter
//! over whole renewal intervals from the release, less what the queue's
//! renewals cost over one interval just before, times as many, for the
//! contenders that stay), and a queued waiter's proportional memory, elect's
//! and the store's servers'. The queue fills in waves of [`WAVE`], each
//! queued before the next starts. A queue that would not fit in the
//! memory available, reckoned from the last one's cost per waiter, is not
//! started: its row says what it would take.

use std::thread;
use std::time::{Duration, Instant};

use super::{Growth, OnEvery, exits};
use crate::harness::locker::Locker;
use crate::harness::process::{Quiet, Talking};
use crate::harness::procfs::{self, Usage};
use crate::harness::report::{Row, Table, Verdict, ratio};
use crate::harness::served::{Reading, Served};
use crate::{Holder, Mode, PATIENCE, SCALE_HANDOVERS, Scratch, release, verdict};

/// A queued waiter's renewal interval: a third of the default TTL.
const RENEWAL: Duration = Duration::from_secs(5);

/// How many waiters start at once, while the queue fills.
const WAVE: usize = 100;

/// What a queue of N came to.
#[derive(Clone, Copy)]
pub struct Outcome {
    pub n: usize,
    pub handover_ms: f64,
    pub requests: f64,
    pub pss_mib: f64,
    /// The store's servers' Pss over the queue, per waiter.
    pub store_pss_mib: f64,
    /// The machine's 1-minute load average and processes, queue and all,
    /// before the release.
    pub load: (f64, usize),
}

impl Outcome {
    /// Whether a queue of `n` would fit in the memory available now,
    /// reckoned from this one's cost per waiter, elect's and the store's.
    fn room_for(&self, n: usize) -> Result<(), String> {
        let per_waiter = self.pss_mib + self.store_pss_mib;
        let needed = per_waiter * n as f64 / 1024.0;
        let available = procfs::available_kib() as f64 / 1024.0 / 1024.0;
        match needed <= 0.8 * available {
            true => Ok(()),
            false => Err(format!(
                "not run: {n} waiters would take about {needed:.1} GiB ({:.2} MiB of elect's \
                 and {:.2} MiB of the store's a waiter, at {}), and {available:.1} GiB is available",
                self.pss_mib, self.store_pss_mib, self.n
            )),
        }
    }
}

pub struct Figure<'a> {
    pub mode: &'a Mode,
    pub scratch: &'a Scratch,
    pub table: &'a mut Table,
    pub growth: &'a mut Growth,
}

impl OnEvery for Figure<'_> {
    fn on<S: Served>(&mut self) {
        let most = self.mode.waiters.iter().copied().max().unwrap_or(0);
        let store = S::for_fleet("waiters", most);
        let mut per_handover = Vec::new();
        let mut last: Option<Outcome> = None;
        for &n in &self.mode.waiters {
            let tried = match last.map(|o| o.room_for(n)) {
                Some(Err(e)) => Err(e),
                _ => once(&store, n, self.scratch),
            };
            match tried {
                Ok(o) => {
                    self.table.row(Row {
                        figure: format!(
                            "waiters [{}]: {n} on 1 lock, per handover (of {SCALE_HANDOVERS})",
                            S::NAME
                        ),
                        elect: format!("{:.1} ms, {:.1} req", o.handover_ms, o.requests),
                        reference: format!(
                            "Pss per waiter: {:.2} MiB, the store's {:.2} MiB; load {:.1}, {} processes",
                            o.pss_mib, o.store_pss_mib, o.load.0, o.load.1
                        ),
                        ratio: "-".into(),
                        target: "-".into(),
                        verdict: Verdict::Info,
                    });
                    per_handover.push(o.requests);
                    last = Some(o);
                    self.growth.waiters.push((S::NAME, o));
                }
                Err(e) => self
                    .table
                    .note(format!("waiters [{}] {n}: failed: {e}", S::NAME)),
            }
        }
        let (low, high) = per_handover
            .iter()
            .fold((f64::INFINITY, 0.0f64), |(l, h), &v| (l.min(v), h.max(v)));
        let flat = per_handover.len() == self.mode.waiters.len() && high <= low * 1.2 + 0.5;
        self.table.row(Row {
            figure: format!(
                "waiters [{}]: {} per handover over {:?} waiters",
                S::NAME,
                S::REQUESTS,
                self.mode.waiters
            ),
            elect: format!("{low:.1} .. {high:.1}"),
            reference: String::new(),
            ratio: ratio(high, low),
            target: "flat (max <= 1.2 min)".into(),
            verdict: verdict(flat),
        });
    }
}

/// Wait until the store counts `n` contenders for `lock`, within `within`.
fn queued<S: Served>(store: &S, lock: &str, n: usize, within: Duration) -> Result<(), String> {
    let give_up = Instant::now() + within;
    loop {
        // A look that panics (a store's tool that gave up) is one more
        // look that could not count, not the end of the whole run.
        let now =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| store.try_contenders(lock)))
                .unwrap_or_else(|_| Err("the look at the queue panicked".into()));
        if now == Ok(n) {
            return Ok(());
        }
        if Instant::now() >= give_up {
            let seen =
                now.map_or_else(|e| format!("no count ({e})"), |k| format!("{k} contenders"));
            return Err(format!("{lock}: {seen} after {within:?}, expected {n}"));
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// Which of `waiters` have exited, and how, for a queue that fell short.
fn exited(waiters: &mut [Quiet]) -> String {
    match exits(waiters) {
        (_, None) => String::new(),
        (how, Some(_)) => format!("; waiters that exited: {how}"),
    }
}

fn once<S: Served>(store: &S, n: usize, scratch: &Scratch) -> Result<Outcome, String> {
    if n < SCALE_HANDOVERS + 1 {
        return Err(format!(
            "at least {} waiters make a chain",
            SCALE_HANDOVERS + 1
        ));
    }
    let locker = Locker::elect_on(&store.url());
    let lock = format!("bench-waiters-{n}");
    let mut holder = Holder::queue(&locker, &lock, scratch, &format!("waiters-{}-{n}", S::NAME));
    holder.started(PATIENCE);
    let mut chain = Vec::new();
    for k in 1..SCALE_HANDOVERS {
        chain.push(
            Quiet::spawn(locker.command(&lock, None, &["true"]))
                .map_err(|e| format!("cannot start waiter {k}: {e}"))?,
        );
        queued(store, &lock, k + 1, PATIENCE)?;
    }
    let mut last =
        Talking::spawn(locker.command(&lock, None, &["sh", "-c", "echo started; exec sleep 600"]));
    queued(store, &lock, SCALE_HANDOVERS + 1, PATIENCE)?;
    // The rest arrive in waves, each queued before the next starts: the
    // figure is a queue of N, not N connecting at once, which a server
    // with a process per connection takes longer than elect's
    // `--connect-timeout` to accept.
    let mut rest = Vec::new();
    for k in SCALE_HANDOVERS + 1..=n {
        rest.push(
            Quiet::spawn(locker.command(&lock, None, &["true"]))
                .map_err(|e| format!("cannot start waiter {k} of {n}: {e}"))?,
        );
        if k % WAVE == 0 || k == n {
            queued(store, &lock, k + 1, PATIENCE)
                .map_err(|e| format!("{e}{}", exited(&mut rest)))?;
        }
    }
    // Every waiter has looked at the queue and set up its watch.
    thread::sleep(Duration::from_secs(1));
    // A queued waiter's memory: elect and whatever it has forked.
    let family = procfs::family();
    let sample: Vec<Usage> = rest
        .iter()
        .take(10)
        .map(|w| {
            let mut pids = vec![w.pid()];
            pids.extend(family.get(&w.pid()).into_iter().flatten());
            pids.iter()
                .filter_map(|&p| Usage::read(p))
                .fold(Usage::default(), Usage::plus)
        })
        .collect();
    let pss_mib =
        sample.iter().map(|u| u.pss_kib as f64).sum::<f64>() / 1024.0 / sample.len().max(1) as f64;
    let store_pss_kib: u64 = store
        .server_pids()
        .into_iter()
        .map(|pid| procfs::tree_pss_kib(pid, &family))
        .sum();
    // The queue's own requests, renewals and all, over one renewal
    // interval: each waiter renews once in any such while, whatever its
    // phase, so the chain's share is what a whole number of them holds
    // beyond that many times this.
    let load = procfs::machine_load();
    let quiet = Reading::take(store)?;
    thread::sleep(RENEWAL);
    let before = Reading::take(store)?;
    let background = before.requests - quiet.requests;
    let released = release(&holder.fifo);
    let (_, started) = last
        .line("started", PATIENCE)
        .ok_or_else(|| format!("the chain did not reach its end: {}", last.stderr()))?;
    // The last holder's set-up belongs to the chain; the counter may lag.
    let needed = started - before.at + Duration::from_millis(200) + S::LAG;
    let periods = needed.as_secs_f64().div_euclid(RENEWAL.as_secs_f64()) + 1.0;
    thread::sleep((before.at + RENEWAL.mul_f64(periods)).saturating_duration_since(Instant::now()));
    let after = Reading::take(store)?;
    // The holder and the chain's waiters renew no more once they are gone,
    // a moment into the first interval: the queue's own requests after
    // the chain are those of the ones that stay.
    let staying = (n + 1 - SCALE_HANDOVERS) as f64 / (n + 1) as f64;
    let chain_requests = after.requests - before.requests - background * periods * staying;
    let handovers = SCALE_HANDOVERS as f64;
    drop(chain);
    Ok(Outcome {
        n,
        handover_ms: (started - released).as_secs_f64() * 1e3 / handovers,
        requests: chain_requests / handovers,
        pss_mib,
        store_pss_mib: store_pss_kib as f64 / 1024.0 / n as f64,
        load,
    })
}
