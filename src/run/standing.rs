//! Where a run stands, for those who ask from outside: `--listen`'s
//! `/readyz`, `/livez` and `/metrics`, and systemd's `STATUS=` lines.
//!
//! The run writes each change here as it happens (a few cells set once a
//! turn, never per renewal); the renewal counts and the lease's deadline
//! are the renewal loop's own ([`Tally`]), read, not copied. Nothing here
//! waits, so a reader never delays the run, and a run nobody asks costs a
//! handful of stores a turn.

use std::cell::{Cell, RefCell};
use std::fmt::Write;
use std::rc::Rc;
use std::time::{Duration, SystemTime};

use tokio::sync::Notify;

use crate::clock::Instant;
use crate::lease::{NEVER, Tally};
use crate::store::Loss;
use crate::store::Token;

/// Why a held lock was lost, as `elect_losses_total` labels it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// No renewal was confirmed in time.
    Expired,
    /// The store ended the lease (revoked, key deleted, session gone).
    Ended,
    /// `elect break` asked the holder to let go.
    Broken,
}

impl Cause {
    const ALL: [Cause; 3] = [Cause::Expired, Cause::Ended, Cause::Broken];

    pub fn of(loss: &Loss) -> Cause {
        match loss {
            Loss::Expired { .. } => Cause::Expired,
            Loss::Gone(_) => Cause::Ended,
            Loss::Asked(_) => Cause::Broken,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Cause::Expired => "expired",
            Cause::Ended => "ended",
            Cause::Broken => "broken",
        }
    }
}

/// What the run is doing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Reaching the store for a lease and a place in the queue.
    Connecting,
    /// In the queue; the holder as last seen, when someone looked.
    Waiting { holder: Option<String> },
    /// The lock (or shard) is ours.
    Holding {
        shard: Option<u32>,
        token: Token,
        since: SystemTime,
    },
    /// The held lock was lost.
    Lost(Cause),
    /// The command ended; the lock is being let go.
    Ended,
    /// Between turns under `--rejoin`, after this.
    Rejoining(String),
    /// On the way out.
    Stopping,
}

/// A change in a run, as the turn reports it to those who watch: where
/// the run stands (the endpoint, systemd, the metrics) follows from these
/// alone.
#[derive(Debug)]
pub enum Step {
    /// A turn begins: waiting starts.
    Began,
    /// In the queue.
    Queued,
    /// The lock, or a shard of it, is ours with this token.
    Acquired { shard: Option<u32>, token: Token },
    /// The command started under the lock.
    Started,
    /// The held lock was lost.
    Lost(Cause),
    /// The turn's command ended (or it never started): the lock, if it
    /// is still ours, is let go.
    LetGo,
    /// The turn's session was released; whether the store confirmed it.
    Released(bool),
    /// Between turns, under `--rejoin`, after this.
    Rejoining(String),
    /// On the way out.
    Stopping,
}

/// Where a run stands. One per `elect run`.
pub struct Standing {
    lock: String,
    shards: Option<u32>,
    phase: RefCell<Phase>,
    /// The renewal loops' record, shared with each session's [`crate::lease::Keeper`].
    pub tally: Rc<Tally>,
    /// Each shard's last token (one entry without `--shards`); 0: never held.
    tokens: RefCell<Vec<u64>>,
    acquisitions: Cell<u64>,
    losses: [Cell<u64>; 3],
    starts: Cell<u64>,
    waited: Cell<Duration>,
    waiting_since: Cell<Option<Instant>>,
    /// Told at every change of phase.
    pub changed: Notify,
}

impl Standing {
    pub fn new(lock: &str, shards: Option<u32>) -> Standing {
        Standing {
            lock: lock.to_string(),
            shards,
            phase: RefCell::new(Phase::Connecting),
            tally: Rc::default(),
            tokens: RefCell::new(vec![0; shards.unwrap_or(1) as usize]),
            acquisitions: Cell::new(0),
            losses: Default::default(),
            starts: Cell::new(0),
            waited: Cell::new(Duration::ZERO),
            waiting_since: Cell::new(None),
            changed: Notify::new(),
        }
    }

    /// Follow the run to `step`.
    pub fn observe(&self, step: Step) {
        match step {
            Step::Began => self.turn(),
            Step::Queued => self.queued(),
            Step::Acquired { shard, token } => self.acquired(shard, token),
            Step::Started => self.started(),
            Step::Lost(cause) => self.lost(cause),
            Step::LetGo => self.let_go(),
            Step::Released(_) => self.released(),
            Step::Rejoining(why) => self.rejoining(why),
            Step::Stopping => self.stopping(),
        }
    }

    pub fn phase(&self) -> Phase {
        self.phase.borrow().clone()
    }

    fn set(&self, phase: Phase) {
        let mut now = self.phase.borrow_mut();
        // The way out is one way.
        if *now != phase && *now != Phase::Stopping {
            *now = phase;
            self.changed.notify_one();
        }
    }

    /// A turn begins: waiting starts.
    fn turn(&self) {
        if self.waiting_since.get().is_none() {
            self.waiting_since.set(Some(Instant::now()));
        }
        if !matches!(*self.phase.borrow(), Phase::Waiting { .. }) {
            self.set(Phase::Connecting);
        }
    }

    /// In the queue.
    fn queued(&self) {
        if !matches!(*self.phase.borrow(), Phase::Waiting { .. }) {
            self.set(Phase::Waiting { holder: None });
        }
    }

    /// Who holds the lock we wait for, as last seen.
    pub fn holder_seen(&self, holder: String) {
        if matches!(*self.phase.borrow(), Phase::Waiting { .. }) {
            self.set(Phase::Waiting {
                holder: Some(holder),
            });
        }
    }

    /// Waiting ended (the lock is ours, or the turn is over).
    fn waited(&self) {
        if let Some(since) = self.waiting_since.take() {
            self.waited.set(self.waited.get() + since.elapsed());
        }
    }

    /// The lock, or `shard` of it, is ours with `token`.
    fn acquired(&self, shard: Option<u32>, token: Token) {
        self.waited();
        self.acquisitions.set(self.acquisitions.get() + 1);
        if let Some(t) = self
            .tokens
            .borrow_mut()
            .get_mut(shard.unwrap_or(0) as usize)
        {
            *t = token.get();
        }
        self.set(Phase::Holding {
            shard,
            token,
            since: SystemTime::now(),
        });
    }

    /// The command started under the lock.
    fn started(&self) {
        self.starts.set(self.starts.get() + 1);
    }

    /// The held lock was lost.
    fn lost(&self, cause: Cause) {
        let i = Cause::ALL.iter().position(|c| *c == cause).unwrap_or(0);
        self.losses[i].set(self.losses[i].get() + 1);
        if cause == Cause::Expired {
            self.tally.expired();
        }
        self.tally.retired();
        self.waited();
        self.set(Phase::Lost(cause));
    }

    /// The turn's command ended (or it never started): the lock, if it
    /// is still ours, is let go.
    fn let_go(&self) {
        self.waited();
        self.tally.retired();
        if matches!(*self.phase.borrow(), Phase::Holding { .. }) {
            self.set(Phase::Ended);
        }
    }

    /// The turn's session was released.
    fn released(&self) {
        self.let_go();
        self.tally.released();
    }

    /// Between turns, under `--rejoin`.
    fn rejoining(&self, why: String) {
        self.set(Phase::Rejoining(why));
    }

    /// On the way out.
    fn stopping(&self) {
        self.set(Phase::Stopping);
    }

    /// Whether this elect holds the lock (any shard of it).
    pub fn holding(&self) -> bool {
        matches!(*self.phase.borrow(), Phase::Holding { .. })
    }

    /// Why elect is not live, if it is not: its renewals failed past the
    /// lease's deadline, or the renewal loop is wedged.
    pub fn unwell(&self) -> Option<String> {
        self.tally.unwell()
    }

    /// The metrics, in Prometheus's text format (each in [`METRICS`]).
    pub fn metrics(&self) -> String {
        let lock = crate::report::escape(&self.lock);
        let held_shard = match *self.phase.borrow() {
            Phase::Holding { shard, .. } => Some(shard.unwrap_or(0)),
            _ => None,
        };
        let mut out = String::with_capacity(2048);
        for (name, kind, help) in METRICS {
            let _ = write!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n");
            let mut line = |labels: String, value: String| {
                let _ = writeln!(out, "{name}{{lock=\"{lock}\"{labels}}} {value}");
            };
            let per_shard = |k: usize| match self.shards {
                Some(_) => format!(",shard=\"{k}\""),
                None => String::new(),
            };
            match *name {
                "elect_lock_held" => {
                    for k in 0..self.tokens.borrow().len() {
                        let held = u8::from(held_shard == Some(k as u32));
                        line(per_shard(k), held.to_string());
                    }
                }
                "elect_lock_token" => {
                    for (k, token) in self.tokens.borrow().iter().enumerate() {
                        line(per_shard(k), token.to_string());
                    }
                }
                "elect_lease_remaining_seconds" => {
                    if let Some(deadline) = self.tally.safe_until() {
                        let value = match deadline >= NEVER {
                            true => "+Inf".to_string(),
                            false => {
                                let now = Instant::now();
                                let secs = match deadline >= now {
                                    true => deadline.since(now).as_secs_f64(),
                                    false => -now.since(deadline).as_secs_f64(),
                                };
                                format!("{secs:.3}")
                            }
                        };
                        line(String::new(), value);
                    }
                }
                "elect_renewals_total" => line(String::new(), self.tally.renewed.get().to_string()),
                "elect_renewal_failures_total" => {
                    line(String::new(), self.tally.failed.get().to_string())
                }
                "elect_acquisitions_total" => {
                    line(String::new(), self.acquisitions.get().to_string())
                }
                "elect_losses_total" => {
                    for (cause, count) in Cause::ALL.iter().zip(&self.losses) {
                        line(
                            format!(",cause=\"{}\"", cause.label()),
                            count.get().to_string(),
                        );
                    }
                }
                "elect_waiting_seconds_total" => {
                    let now = self
                        .waiting_since
                        .get()
                        .map_or(Duration::ZERO, Instant::elapsed);
                    line(
                        String::new(),
                        format!("{:.3}", (self.waited.get() + now).as_secs_f64()),
                    );
                }
                "elect_command_restarts_total" => line(
                    String::new(),
                    self.starts.get().saturating_sub(1).to_string(),
                ),
                _ => {}
            }
        }
        out
    }

    /// One line for a person (systemd's `STATUS=`).
    pub fn status_line(&self) -> String {
        let lock = &self.lock;
        match &*self.phase.borrow() {
            Phase::Connecting => format!("connecting to the store for lock {lock}"),
            Phase::Waiting { holder: None } => format!("waiting for lock {lock}"),
            Phase::Waiting {
                holder: Some(holder),
            } => format!("waiting for lock {lock}, {holder}"),
            Phase::Holding {
                shard,
                token,
                since,
            } => {
                let what = match shard {
                    Some(k) => format!("shard {k} of lock {lock}"),
                    None => format!("lock {lock}"),
                };
                format!(
                    "holding {what} (token {token}) since {}",
                    humantime::format_rfc3339_seconds(*since)
                )
            }
            Phase::Lost(cause) => format!(
                "lost lock {lock} ({})",
                match cause {
                    Cause::Expired => "no renewal was confirmed in time",
                    Cause::Ended => "the store ended the lease",
                    Cause::Broken => "elect break asked",
                }
            ),
            Phase::Ended => format!("the command ended; letting go of lock {lock}"),
            Phase::Rejoining(why) => format!("{why}; rejoining the queue for lock {lock}"),
            Phase::Stopping => format!("stopping (lock {lock})"),
        }
    }
}

/// The endpoint's metrics, each with its type and help (docs/operations.md lists
/// them; a test compares). Every one has the label `lock`.
pub const METRICS: &[(&str, &str, &str)] = &[
    (
        "elect_lock_held",
        "gauge",
        "1 while this elect holds the lock (with --shards: the shard, label shard), else 0.",
    ),
    (
        "elect_lock_token",
        "gauge",
        "The fencing token of this elect's current or last tenure of the lock (0 if it never held it).",
    ),
    (
        "elect_lease_remaining_seconds",
        "gauge",
        "Seconds until the deadline of the last confirmed renewal (negative once it passed; +Inf for a lease that does not expire by time).",
    ),
    (
        "elect_renewals_total",
        "counter",
        "Lease renewals confirmed.",
    ),
    (
        "elect_renewal_failures_total",
        "counter",
        "Lease renewals that failed or were given up unanswered.",
    ),
    (
        "elect_acquisitions_total",
        "counter",
        "Times this elect got the lock.",
    ),
    (
        "elect_losses_total",
        "counter",
        "Times this elect lost the lock it held, by cause: expired (no renewal confirmed in time), ended (by the store), broken (elect break).",
    ),
    (
        "elect_waiting_seconds_total",
        "counter",
        "Seconds spent waiting for the lock.",
    ),
    (
        "elect_command_restarts_total",
        "counter",
        "Times the command was started again under --rejoin.",
    ),
];

/// A holder as a waiter's status line names it.
pub fn holder_line(status: &crate::store::LockStatus) -> Option<String> {
    let holder = status.holder.as_ref()?;
    Some(match &holder.record {
        Some(r) => format!(
            "held by {} since {} (token {})",
            r.identity,
            r.since(),
            holder.token
        ),
        None => format!("held by {} (token {})", holder.key, holder.token),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_reads_held_with_its_token_and_a_waiter_does_not() {
        let s = Standing::new("billing", None);
        s.observe(Step::Began);
        s.observe(Step::Queued);
        assert!(!s.holding());
        assert!(
            s.metrics()
                .contains("elect_lock_held{lock=\"billing\"} 0\n")
        );
        s.observe(Step::Acquired {
            shard: None,
            token: Token::new(41),
        });
        assert!(s.holding());
        let m = s.metrics();
        assert!(m.contains("elect_lock_held{lock=\"billing\"} 1\n"), "{m}");
        assert!(m.contains("elect_lock_token{lock=\"billing\"} 41\n"), "{m}");
        assert!(
            m.contains("elect_acquisitions_total{lock=\"billing\"} 1\n"),
            "{m}"
        );
        assert!(
            s.status_line()
                .starts_with("holding lock billing (token 41) since ")
        );
        s.observe(Step::Lost(Cause::Broken));
        let m = s.metrics();
        assert!(m.contains("elect_lock_held{lock=\"billing\"} 0\n"), "{m}");
        assert!(
            m.contains("elect_losses_total{lock=\"billing\",cause=\"broken\"} 1\n"),
            "{m}"
        );
        assert!(
            m.contains("elect_lock_token{lock=\"billing\"} 41\n"),
            "the last token: {m}"
        );
    }

    #[test]
    fn every_shard_has_its_gauge() {
        let s = Standing::new("jobs", Some(3));
        s.observe(Step::Acquired {
            shard: Some(2),
            token: Token::new(7),
        });
        let m = s.metrics();
        assert!(
            m.contains("elect_lock_held{lock=\"jobs\",shard=\"0\"} 0\n"),
            "{m}"
        );
        assert!(
            m.contains("elect_lock_held{lock=\"jobs\",shard=\"2\"} 1\n"),
            "{m}"
        );
        assert!(
            m.contains("elect_lock_token{lock=\"jobs\",shard=\"2\"} 7\n"),
            "{m}"
        );
        assert!(
            s.status_line()
                .starts_with("holding shard 2 of lock jobs (token 7)")
        );
    }

    #[test]
    fn stopping_is_final() {
        let s = Standing::new("x", None);
        s.observe(Step::Stopping);
        s.observe(Step::Acquired {
            shard: None,
            token: Token::new(1),
        });
        assert_eq!(s.phase(), Phase::Stopping);
    }
}
