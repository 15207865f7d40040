//! Holding the lock: the command runs under its guard; each renewal moves
//! the deadline on; a loss, whoever notices it first, stops the command.
//!
//! Who stops the command when the lease is lost:
//! - the store says so (a revoked lease, a deleted key, `elect break`):
//!   elect tells the guard, with little grace when another holder may
//!   already run, the full grace when the holder was asked to let go;
//! - no renewal is confirmed in time: the guard, on its own timer, and elect
//!   at the deadline too, in case the guard is stopped;
//! - the guard dies: elect kills the command's group itself, and only then
//!   releases.

use std::time::Duration;

use nix::sys::signal::Signal;

use super::Job;
use super::chronicle::Chronicle;
use super::handover::Started;
use super::signals::{Signals, stop_self};
use super::standing::{Cause, Step};
use super::turn::TurnEnd;
use crate::clock::{Instant, show, sleep_until};
use crate::exit::{Code, Failure, Outcome};
use crate::lease::{Keeper, Kept, NEVER};
use crate::log;
use crate::report::describe_status;
use crate::store::{Boxed, Loss, Session, Store};
use crate::supervisor::{Ending, Event, Stop, Supervisor};
use crate::timeline;

/// Where a held turn stands.
#[derive(Default)]
struct Watch {
    /// The lease is lost and the command is being stopped.
    lost: bool,
    /// A TERM, INT, HUP or QUIT was passed on: never rejoin after that.
    told_to_stop: bool,
    /// When the command, told to stop so, must have ended: the first such
    /// signal's arrival plus `--grace`. Then its group is SIGKILLed.
    stop_by: Option<(Instant, Signal)>,
    /// That SIGKILL was asked for.
    stop_enforced: bool,
    /// When the guard must have killed the command, if sooner than the
    /// deadline: the end of the grace elect gave it on a loss.
    kill_by: Option<Instant>,
    /// elect's own kill (at the deadline, or at `kill_by`) is done.
    backstopped: bool,
    /// Why the lease was lost, and whether the holder was asked to let go.
    why: Option<String>,
    asked: bool,
}

/// What a turn holds while its command runs, borrowed from the turn: the
/// store and session the lock was taken in, the lease's keeper, and the
/// turn's chronicle.
pub(super) struct Held<'t, 's> {
    pub store: &'t dyn Store,
    pub session: &'t dyn Session,
    pub keeper: &'t mut Keeper,
    pub chronicle: &'t mut Chronicle<'s>,
}

impl Held<'_, '_> {
    /// Tell those who follow the turn that it went on to `step`.
    fn observe(&mut self, job: &Job, step: Step) {
        self.chronicle.observe(&step);
        job.observe(step);
    }
}

impl Job {
    /// Run the command while the lease holds. How the turn ended, and the
    /// guard if it reported the end of the command's group: it is reaped
    /// while the lease is released, which need not wait for it to exit.
    pub(super) async fn hold(
        &self,
        started: Started,
        lost_watch: &mut Boxed<'_, Loss>,
        signals: &mut Signals,
        mut ours: Held<'_, '_>,
    ) -> (TurnEnd, Option<Supervisor>) {
        let Started { mut child, loss } = started;
        timeline::step("command started");
        let started = Instant::now();
        ours.observe(self, Step::Started);
        log::event(
            log::Level::Verbose,
            "started",
            format_args!(
                "started the command as pid {} in process group {} under lease {}",
                child.pid(),
                child.group(),
                ours.session.id()
            ),
        );
        let mut watch = Watch::default();
        // Lost while the guard was on its way: it started the command all
        // the same, before it heard.
        if let Some(loss) = loss {
            self.stop(&mut child, &mut watch, &loss).await;
        }
        let ending = loop {
            // elect's own kill, in case the guard cannot (it is stopped).
            let backstop = watch
                .kill_by
                .map_or(ours.keeper.deadline(), |at| at.min(ours.keeper.deadline()));
            tokio::select! {
                // The guard's word first: after a stop, its report of what
                // it did is waiting, and the backstop below is due too.
                biased;
                event = child.event() => match event {
                    Event::Ended(ending) => break ending,
                    Event::Stopping(why) => self.guard_stops(&mut watch, why),
                    Event::GuardLost => return (self.guard_lost(child).await, None),
                },
                kept = ours.keeper.next(), if !watch.lost => match kept {
                    Kept::Extended(at) => child.extend(at).await,
                    // An expiry is the guard's to act on: it keeps the same
                    // deadline, and says why it stops.
                    Kept::Lost(Loss::Expired { .. }) => {}
                    Kept::Lost(loss) => self.stop(&mut child, &mut watch, &loss).await,
                },
                loss = &mut *lost_watch, if !watch.lost => {
                    self.stop(&mut child, &mut watch, &loss).await;
                },
                // (Nothing to back up while the lease never expires by time
                // and is not lost.)
                () = sleep_until(backstop), if !watch.backstopped && backstop < NEVER => {
                    // The guard kills at this instant too, unless it is
                    // stopped: then nobody else would.
                    watch.backstopped = true;
                    self.lose(
                        &mut watch,
                        Cause::Expired,
                        "no renewal was confirmed in time",
                        Duration::ZERO,
                    );
                    child.kill_now();
                },
                sig = signals.any() => {
                    if Signals::is_terminating(sig) {
                        self.observe(Step::Stopping);
                    }
                    pass_on(&mut child, &mut watch, sig).await;
                    if Signals::is_terminating(sig) && watch.stop_by.is_none() {
                        watch.stop_by = Some((Instant::now() + self.timing.grace(), sig));
                    }
                },
                // A stop from outside (systemd's, a container runtime's) is
                // bounded by --grace, as a lost lease is: a command that
                // ignores it is killed, and the lock released once its group
                // is gone, before the caller's own SIGKILL could take elect
                // and leave the lock to expire.
                () = sleep_until(watch.stop_by.map_or(NEVER, |(at, _)| at)),
                    if watch.stop_by.is_some() && !watch.stop_enforced =>
                {
                    watch.stop_enforced = true;
                    if let Some((_, sig)) = watch.stop_by {
                        log::notice(format_args!(
                            "the command did not end within --grace {} of {sig}; killing its process group",
                            show(self.timing.grace())
                        ));
                    }
                    child.stop(Duration::ZERO).await;
                    // And from here, should the guard be stopped.
                    child.kill_now();
                },
                () = ours.chronicle.writes() => {}
            }
        };
        timeline::step("command ended");
        if let Ending::Exited(code) = ending {
            log::context("exit_code", code);
        }
        log::event(
            log::Level::Verbose,
            "ended",
            format_args!("the command {ending} after {}", show(started.elapsed())),
        );
        // A command killed because it outlived --grace after a stop from
        // outside ends elect by the signal that asked for the stop, as a
        // command that obeyed it would have: a stop the caller asked for.
        let outlived = match (watch.stop_enforced, watch.stop_by, ending) {
            (true, Some((_, sig)), Ending::Killed(libc::SIGKILL)) => Some(sig),
            _ => None,
        };
        let end = match (watch.lost, outlived, watch.told_to_stop) {
            (true, _, _) => TurnEnd::Lost {
                why: watch.why.unwrap_or_default(),
                asked: watch.asked,
            },
            (false, Some(sig), _) => TurnEnd::Outlived(sig),
            (false, None, true) => TurnEnd::Done(TurnEnd::Ended(ending).outcome(self.lost_code)),
            (false, None, false) => TurnEnd::Ended(ending),
        };
        (end, Some(child))
    }

    /// The guard began to stop the command on its own.
    fn guard_stops(&self, watch: &mut Watch, why: Stop) {
        match why {
            Stop::Deadline => {
                self.lose(
                    watch,
                    Cause::Expired,
                    "no renewal was confirmed in time",
                    self.timing.grace(),
                );
            }
            Stop::ExpiredWhileStopped => {
                let why = "the lease ran out while elect and the command were stopped; \
                           the command was not resumed";
                self.lose(watch, Cause::Expired, why, Duration::ZERO);
            }
        }
    }

    /// The store ended the lease, or asked us to let go: stop the command.
    async fn stop(&self, child: &mut Supervisor, watch: &mut Watch, loss: &Loss) {
        let grace = self.grace_after(loss);
        let asked = matches!(loss, Loss::Asked(_));
        if self.lose(watch, Cause::of(loss), loss, grace) {
            watch.asked = asked;
            watch.kill_by = Some(Instant::now() + grace);
            child.stop(grace).await;
        }
    }

    /// The grace a command gets after `loss`.
    pub(super) fn grace_after(&self, loss: &Loss) -> Duration {
        match loss {
            Loss::Asked(_) => self.timing.grace(),
            // Another holder may already run.
            Loss::Gone(_) | Loss::Expired { .. } => {
                self.timing.grace().min(crate::lease::GONE_GRACE)
            }
        }
    }

    /// The guard died (it never exits before the command's group is gone,
    /// so it was killed). Its parent-death signal killed the command, but
    /// not what the command started: kill the whole group here, see it
    /// gone, and only then let the lock go.
    async fn guard_lost(&self, child: Supervisor) -> TurnEnd {
        let pgid = child.group();
        crate::supervisor::kill_group(pgid).await;
        let how = match child.reap().await {
            Some(status) => describe_status(status),
            None => "ended".to_string(),
        };
        let failure = Failure::new(
            Code::OsError,
            format!(
                "the guard process {how}; killed the command's process group {pgid} \
                 before letting lock {} go; exiting {}",
                self.lock,
                Code::OsError.value()
            ),
        );
        TurnEnd::Done(Outcome::from(failure))
    }

    /// Record the first loss and say so once. True if this was the first.
    fn lose(
        &self,
        watch: &mut Watch,
        cause: Cause,
        loss: impl std::fmt::Display,
        grace: Duration,
    ) -> bool {
        if watch.lost {
            return false;
        }
        watch.lost = true;
        self.observe(Step::Lost(cause));
        watch.why = Some(loss.to_string());
        let then = self.then();
        let stopping = match grace.is_zero() {
            true => "the command was killed".to_string(),
            false => format!(
                "stopping the command with {}, SIGKILL within {}",
                self.signal,
                show(grace)
            ),
        };
        log::event(
            log::Level::Quiet,
            "lost",
            format_args!(
                "lost the lease on lock {} at {}: {loss}; {stopping}; {then}",
                self.lock,
                self.location.shown(),
            ),
        );
        true
    }
}

impl Job {
    /// What elect does after a loss.
    fn then(&self) -> String {
        match self.rejoin {
            Some(_) => "then rejoining the queue".to_string(),
            None => format!("exiting {}", self.lost_code),
        }
    }
}

/// A signal sent to elect while the command runs: job control, or one to
/// pass on to the command's group.
async fn pass_on(child: &mut Supervisor, watch: &mut Watch, sig: Signal) {
    match sig {
        Signal::SIGTSTP => {
            // Stop with the command, as a job would: the guard stays awake
            // and still enforces the deadline.
            child.suspend().await;
            stop_self();
        }
        Signal::SIGCONT => child.resume().await,
        sig => {
            watch.told_to_stop |= Signals::is_terminating(sig);
            child.forward(sig).await;
        }
    }
}
