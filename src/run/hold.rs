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

use std::os::fd::AsFd;
use std::time::{Duration, SystemTime};

use nix::sys::signal::Signal;

use super::command::exec_failure;
use super::signals::{Signals, stop_self};
use super::standing::Cause;
use super::{Job, TurnEnd, Won};
use crate::clock::{Instant, show, sleep_until};
use crate::exit::{Code, Failure, Outcome};
use crate::history::{self, Ended, Once, Tenure};
use crate::lease::{Keeper, Kept, NEVER};
use crate::log;
use crate::report::describe_status;
use crate::store::{Boxed, CHECKPOINT_IN_ENV_MAX, Loss, Session, Store};
use crate::supervisor::{Ending, Event, Handover, Preparing, SpawnError, Stop, Supervisor};
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

/// How long a command runs before its tenure is written into the history
/// as running: a short one is written once, when it ends.
const NOTE_RUNNING_AFTER: Duration = Duration::from_secs(1);

/// What a turn holds while its command runs, borrowed from the turn: the
/// store and session the lock was taken in, the lease's keeper, the tenure
/// being recorded, and the history's trim under way.
pub(super) struct Held<'t, 's> {
    pub store: &'t dyn Store,
    pub session: &'t dyn Session,
    pub keeper: &'t mut Keeper,
    pub tenure: &'t mut Tenure,
    pub trimming: &'t mut Option<Boxed<'s, ()>>,
}

impl Job {
    /// Run the command while the lease holds. How the turn ended, and the
    /// guard if it reported the end of the command's group: it is reaped
    /// while the lease is released, which need not wait for it to exit.
    pub(super) async fn hold(
        &self,
        won: &Won<'_>,
        guard: Preparing,
        signals: &mut Signals,
        mut ours: Held<'_, '_>,
    ) -> (TurnEnd, Option<Supervisor>) {
        let lock = &*won.lock;
        let mut lost_watch = lock.lost();
        let (mut child, loss) = match self.start(won, guard, &mut lost_watch, &mut ours).await {
            Ok(started) => started,
            Err(end) => {
                if matches!(end, TurnEnd::NotStarted) && ours.tenure.outcome == Ended::Running {
                    ours.tenure.outcome = Ended::Lost;
                    ours.tenure.why = Some("lost as the command was about to start".into());
                }
                return (end, None);
            }
        };
        timeline::step("command started");
        let started = Instant::now();
        self.standing.started();

        // A command that runs a second is written in as running.
        let running = ours.tenure.clone();
        let noting = async {
            tokio::time::sleep(NOTE_RUNNING_AFTER).await;
            history::note_or_warn(ours.store, &running, self.keep_history, true).await;
        };
        tokio::pin!(noting);
        let mut noted = self.keep_history == 0;
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
                loss = &mut lost_watch, if !watch.lost => {
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
                        self.standing.stopping();
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
                () = &mut noting, if !noted => noted = true,
                () = drive(ours.trimming) => {}
            }
        };
        if watch.lost {
            ours.tenure.outcome = match watch.asked {
                true => Ended::Broken,
                false => Ended::Lost,
            };
            ours.tenure.why = watch.why.clone();
        }
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
        let ending = match (watch.stop_enforced, watch.stop_by, ending) {
            (true, Some((_, sig)), Ending::Killed(libc::SIGKILL)) => {
                if !watch.lost {
                    ours.tenure.outcome = Ended::Killed;
                    ours.tenure.signal = Some(Signal::SIGKILL as i32);
                    ours.tenure.why = Some(format!("it did not end within --grace of {sig}"));
                }
                Ending::Killed(sig as i32)
            }
            (_, _, ending) => ending,
        };
        let end = match (watch.lost, watch.told_to_stop) {
            (true, _) => TurnEnd::Lost,
            (false, true) => TurnEnd::Done(TurnEnd::Ended(ending).outcome(self.lost_code)),
            (false, false) => TurnEnd::Ended(ending),
        };
        (end, Some(child))
    }

    /// Hand the lock to the waiting guard: it starts the command with
    /// `token`, safe until `deadline`, and holds what holds the lock. The
    /// lease is renewed all the while: the checkpoint read, the acquisition
    /// record and the guard may each take a while. A loss before the guard
    /// is told ends the turn with nothing started; a loss after is passed
    /// on, and the guard does not start the command, unless it already had:
    /// then the command is started, and the loss is returned with it.
    async fn start(
        &self,
        won: &Won<'_>,
        guard: Preparing,
        lost_watch: &mut Boxed<'_, Loss>,
        ours: &mut Held<'_, '_>,
    ) -> Result<(Supervisor, Option<Loss>), TurnEnd> {
        let (lock, token, shard) = (&*won.lock, won.token, won.shard);
        let spawned = |e: SpawnError| match e {
            SpawnError::Guard(e) => crate::descriptors::or(&e, || {
                Failure::software(format!("cannot start the guard: {e}"))
            }),
            e => Failure::software(format!("cannot start the guard: {e}")),
        };
        // The checkpoint comes with the acquisition where the store can
        // (etcd when first at once, PostgreSQL always); else it is read now,
        // beside the guard's start, and so is the record of work done.
        let name = ours.tenure.lock.clone();
        let done = async {
            match &self.once {
                Some(once) => history::done_before(ours.store, &name, once).await,
                None => Ok(None),
            }
        };
        let ready = async { tokio::join!(guard.ready(), lock.checkpoint(), lock.acquired(), done) };
        tokio::pin!(ready);
        let (guard, checkpoint, (), done) = loop {
            tokio::select! {
                // The lease first: nothing may start once it is lost.
                biased;
                kept = ours.keeper.next() => match kept {
                    // The guard is told the latest deadline.
                    Kept::Extended(_) => {}
                    Kept::Lost(loss) => return Err(self.not_started(Cause::of(&loss), &loss)),
                },
                loss = &mut *lost_watch => return Err(self.not_started(Cause::of(&loss), &loss)),
                ready = &mut ready => break ready,
                () = drive(ours.trimming) => {}
            }
        };
        let failed = |failure: Failure| Err(TurnEnd::Done(failure.into()));
        let guard = match guard {
            Ok(guard) => guard,
            Err(e) => return failed(spawned(e)),
        };
        let checkpoint = match checkpoint {
            Ok(checkpoint) => checkpoint,
            Err(e) => {
                return failed(
                    Failure::from(e).about(format_args!("the checkpoint of lock {}", self.lock)),
                );
            }
        };
        match done {
            Ok(None) => {}
            Ok(Some(done)) => return Err(self.done_before(ours.tenure, &done)),
            Err(e) => {
                return failed(Failure::from(e).about(format_args!(
                    "the record of lock {}'s last success",
                    ours.tenure.lock
                )));
            }
        }
        timeline::step("guard ready");
        let held = match lock.hold_fds() {
            Ok(held) => held,
            Err(e) => {
                return failed(crate::descriptors::or(&e, || {
                    Failure::software(format!("cannot hand the lock to the guard: {e}"))
                }));
            }
        };
        let held: Vec<_> = held.iter().map(|fd| fd.as_fd()).collect();
        let mut set_env = vec![
            ("ELECT_KEY".into(), lock.key().to_string()),
            ("ELECT_LEASE_ID".into(), ours.session.id()),
        ];
        if let (Some(k), Some(n)) = (shard, self.shards) {
            set_env.push(("ELECT_SHARD".into(), k.to_string()));
            set_env.push(("ELECT_SHARDS".into(), n.to_string()));
        }
        match checkpoint {
            Some(c) if c.value.len() <= CHECKPOINT_IN_ENV_MAX => {
                set_env.push(("ELECT_CHECKPOINT".into(), c.value));
            }
            Some(c) => log::verbose(format_args!(
                "the checkpoint is {} bytes, more than ELECT_CHECKPOINT takes ({CHECKPOINT_IN_ENV_MAX}); \
                 the command reads it with elect checkpoint get",
                c.value.len()
            )),
            None => {}
        }
        // Before the command can look.
        ours.tenure.started = Some(history::timestamp(SystemTime::now()));
        self.reports.started(ours.tenure);
        let handover = Handover {
            set_env,
            held: &held,
            release_order: crate::release::order(
                &self.location,
                &ours.session.release_token(),
                ours.tenure,
                self.keep_history,
                &self.reports,
            ),
        };
        let mut child = match guard
            .start(token.get(), ours.keeper.deadline(), handover)
            .await
        {
            Ok(child) => child,
            Err(e) => {
                ours.tenure.started = None;
                return failed(self.spawn_failure(e));
            }
        };
        let (started, loss) = self
            .await_start(&mut child, ours.keeper, lost_watch, ours.trimming)
            .await;
        if started.is_err() {
            ours.tenure.started = None;
        }
        match started {
            Ok(()) => Ok((child, loss)),
            Err(SpawnError::NotStarted) => {
                child.reap().await;
                let cause = loss.as_ref().map_or(Cause::Expired, Cause::of);
                let why = loss.map_or_else(
                    || "no renewal was confirmed in time".to_string(),
                    |loss| loss.to_string(),
                );
                Err(self.not_started(cause, why))
            }
            Err(e) => {
                child.reap().await;
                failed(self.spawn_failure(e))
            }
        }
    }

    /// Until the guard answers the token, each renewal and a loss go to it:
    /// it reads them before it starts the command. Its answer, and the loss
    /// if there was one.
    async fn await_start(
        &self,
        child: &mut Supervisor,
        keeper: &mut Keeper,
        lost_watch: &mut Boxed<'_, Loss>,
        trimming: &mut Option<Boxed<'_, ()>>,
    ) -> (Result<(), SpawnError>, Option<Loss>) {
        let mut loss = None;
        loop {
            let news = tokio::select! {
                biased;
                started = child.started() => return (started, loss),
                kept = keeper.next(), if loss.is_none() => kept,
                lost = &mut *lost_watch, if loss.is_none() => Kept::Lost(lost),
                () = drive(trimming) => continue,
            };
            match news {
                Kept::Extended(at) => child.extend(at).await,
                // The guard judges that by the same deadline.
                Kept::Lost(lost @ Loss::Expired { .. }) => loss = Some(lost),
                Kept::Lost(lost) => {
                    child.stop(self.grace_after(&lost)).await;
                    loss = Some(lost);
                }
            }
        }
    }

    fn spawn_failure(&self, e: SpawnError) -> Failure {
        match e {
            SpawnError::Exec(errno) => exec_failure(&self.command[0], errno),
            SpawnError::Guard(e) => crate::descriptors::or(&e, || {
                Failure::software(format!("cannot start the command: {e}"))
            }),
            e => Failure::software(format!("cannot start the command: {e}")),
        }
    }

    /// A run of this period succeeded already: say who, and end without
    /// the command.
    fn done_before(&self, tenure: &mut Tenure, done: &Tenure) -> TurnEnd {
        let when = done.started.as_deref().unwrap_or(&done.queued);
        let ago = done
            .began()
            .and_then(|t| SystemTime::now().duration_since(t).ok())
            .map_or_else(String::new, |ago| format!(" ({} ago)", show(ago)));
        let period = match &self.once {
            Some(Once::Slot(key)) => format!("slot {key}"),
            Some(Once::Per(window)) => format!("the last {}", show(*window)),
            None => "this period".to_string(),
        };
        let said = format!(
            "lock {}: done already for {period}: {} ran it at {when}{ago}; not running the command",
            tenure.lock,
            done.who()
        );
        log::event(log::Level::Normal, "done-before", format_args!("{said}"));
        tenure.outcome = Ended::DoneBefore;
        tenure.done_ended = done.ended_at();
        tenure.why = Some(format!("{} ran it at {when}", done.who()));
        TurnEnd::Done(Outcome::Exit(self.done_code))
    }

    /// The lease was lost before the command started: it never will.
    fn not_started(&self, cause: Cause, loss: impl std::fmt::Display) -> TurnEnd {
        self.standing.lost(cause);
        log::warn(format_args!(
            "lost the lease on lock {} at {} as the command was about to start: {loss}; \
             the command was not started; queueing again",
            self.lock,
            self.location.shown(),
        ));
        TurnEnd::NotStarted
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
    fn grace_after(&self, loss: &Loss) -> Duration {
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
        self.standing.lost(cause);
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

/// Drive `work` to its end, then leave it done: a select arm that never
/// loses what it was doing when another arm wins.
pub(super) async fn drive(work: &mut Option<Boxed<'_, ()>>) {
    match work {
        Some(future) => {
            future.await;
            *work = None;
        }
        None => std::future::pending().await,
    }
}

/// Drive `work` to its end, if it has one left.
pub(super) async fn drive_to_end(work: &mut Option<Boxed<'_, ()>>) {
    if let Some(future) = work {
        future.await;
        *work = None;
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
