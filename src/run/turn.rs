//! One turn: a session, a place in the queue, the handover, the command,
//! the release.

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, SystemTime};

use super::Job;
use super::hold;
use super::queue::Queued;
use super::queue::Won;
use super::signals::Signals;
use super::standing::Step;
use crate::cli::Wait;
use crate::clock::{Instant, show};
use crate::exit::{Failure, Outcome};
use crate::history::{self, Once, Tenure, Verdict};
use crate::lease::Keeper;
use crate::log;
use crate::reach::Reach;
use crate::store::{Boxed, Put, Session, Store};
use crate::supervisor::{Ending, Preparing, Supervisor};
use crate::timeline;

/// How long to try to revoke the lease on the way out; if the store cannot
/// be reached, the lease expires on its own.
pub(super) const RELEASE_TIMEOUT: Duration = Duration::from_secs(2);

/// The same, when elect ends before the store answered all it asked
/// (a signal, a store that never answers, a server of another kind): a
/// healthy store answers by then, and elect is not kept waiting again.
const UNANSWERED_RELEASE_TIMEOUT: Duration = Duration::from_millis(250);

/// How a turn ended.
pub(super) enum TurnEnd {
    /// The lease was lost and elect stopped the command.
    Lost,
    /// The lease was lost while the lock was being handed to the command,
    /// which never started: elect queues again, as a waiter would.
    NotStarted,
    /// The command ended on its own.
    Ended(Ending),
    /// Anything else: this is how elect ends.
    Done(Outcome),
}

impl TurnEnd {
    pub(super) fn outcome(self, lost_code: u8) -> Outcome {
        match self {
            TurnEnd::Lost | TurnEnd::NotStarted => Outcome::Exit(lost_code),
            TurnEnd::Ended(Ending::Exited(code)) => {
                Outcome::Exit(u8::try_from(code & 0xff).unwrap_or(1))
            }
            TurnEnd::Ended(Ending::Killed(sig)) => Outcome::Raise(sig),
            TurnEnd::Done(outcome) => outcome,
        }
    }
}

/// One turn as it goes: what every phase shares. Each phase is a method
/// that returns where the turn goes next, with what that needs; the driver,
/// [`Job::take_turn`], is the whole turn in one screen.
pub(super) struct Turn<'j> {
    job: &'j Job,
    store: &'j dyn Store,
    signals: &'j mut Signals,
    /// The guard, ready or on its way: a handover need not wait for it.
    guard: Option<Preparing>,
    /// The bound on reaching the store until queued.
    reach: Reach,
    /// `--wait`'s end.
    give_up: Option<Instant>,
    /// When this turn began, for its tenure.
    queued: SystemTime,
    /// Room in the history for this turn's tenure, made from the moment
    /// the lock is ours, beside the handover and the command and never
    /// before them, so that the write at the end is one request.
    trim: Trim<'j>,
}

/// The history's trim under way, and whether it made room.
#[derive(Default)]
pub(super) struct Trim<'j> {
    pub work: Option<Boxed<'j, ()>>,
    room: Rc<Cell<bool>>,
}

/// What a turn leaves to its release, besides the session.
struct Finished {
    end: TurnEnd,
    /// The guard, once it reported the end of the command's group.
    guard: Option<Supervisor>,
    /// This turn's entry in the lock's history, if it has one.
    tenure: Option<Tenure>,
}

impl Job {
    /// One turn: a session, a place in the queue, the command, the release.
    /// If the lease is lost while queued (a long partition), queue again
    /// under a new one. Until queued, the store's answers are due within
    /// `reach`'s bound.
    pub(super) async fn take_turn(
        &self,
        store: &dyn Store,
        signals: &mut Signals,
        guard: Preparing,
        reach: Reach,
        waited_from: Instant,
    ) -> TurnEnd {
        let mut turn = Turn::begin(self, store, signals, Some(guard), reach, waited_from);
        if let Some(end) = turn.skip().await {
            return end;
        }
        loop {
            let session = match turn.connect().await {
                Ok(session) => session,
                Err(Some(end)) => return end,
                Err(None) => continue,
            };
            let mut keeper = Keeper::start(&*session, self.timing, self.standing.tally.clone());
            let ended = match turn.queue(&*session, &mut keeper).await {
                Queued::First(won) => turn.hold(won, &*session, &mut keeper).await,
                Queued::Again(why) => match turn.requeue(&*session, keeper, &why).await {
                    Some(end) => return end,
                    None => continue,
                },
                Queued::Busy(outcome) => turn.busy(outcome),
                Queued::Done(outcome) => Finished {
                    end: TurnEnd::Done(outcome),
                    guard: None,
                    tenure: None,
                },
            };
            drop(keeper);
            return turn.release(&*session, ended).await;
        }
    }
}

impl<'j> Turn<'j> {
    fn begin(
        job: &'j Job,
        store: &'j dyn Store,
        signals: &'j mut Signals,
        guard: Option<Preparing>,
        reach: Reach,
        waited_from: Instant,
    ) -> Turn<'j> {
        job.observe(Step::Began);
        Turn {
            job,
            store,
            signals,
            guard,
            reach,
            give_up: match job.wait {
                Wait::Forever => None,
                Wait::For(d) => Some(waited_from + d),
            },
            queued: SystemTime::now(),
            trim: Trim::default(),
        }
    }

    /// Skipping: a run that will not run the command costs the store a
    /// look or two and nothing of its own. With `--once-per` or `--slot`,
    /// the record of the last success; with `-n`, the lock: done already,
    /// or held, ends the turn before any session. Either may change by the
    /// time a session would have come (the holder lets go, the work is
    /// done): the turn then goes on as if not looked, and the record is
    /// read again under the lock.
    async fn skip(&mut self) -> Option<TurnEnd> {
        let job = self.job;
        let no_wait = matches!(job.wait, Wait::For(d) if d.is_zero());
        if job.shards.is_some() || (job.once.is_none() && !no_wait) {
            return None;
        }
        let store = self.store;
        let looks = async {
            let done = async {
                match &job.once {
                    Some(once) => history::done_before(store, &job.lock, once).await,
                    None => Ok(None),
                }
            };
            let status = async {
                match no_wait {
                    true => store.status(&job.lock).await.map(Some),
                    false => Ok(None),
                }
            };
            let (done, status) = tokio::join!(done, status);
            Ok((done?, status?))
        };
        let looked = tokio::select! {
            looked = self.reach.bounded("a look at the lock", looks) => looked,
            sig = self.signals.terminating() => {
                return Some(TurnEnd::Done(Outcome::Raise(sig as i32)));
            }
        };
        let (done, status) = match looked {
            Ok(looked) => looked,
            // No answer within the bound is the run's end, said as any
            // call's would be (with what the probe found).
            Err(e) if self.reach.spent() => return Some(TurnEnd::Done(job.store_failed(e))),
            // Another failure (a connection reset under the look) is no
            // verdict: the turn goes on, and its own calls, tried again as
            // they are, say what became of the store.
            Err(e) => {
                log::verbose(format_args!("could not look at the lock first ({e})"));
                return None;
            }
        };
        let mut tenure = job.tenure(self.queued, None);
        let end = match (done, status) {
            (Some(done), _) => job.done_before(&mut tenure, &done),
            (None, Some(status)) if status.holder.is_some() => {
                tenure.outcome = Verdict::Busy;
                TurnEnd::Done(job.busy_as(Some(&status)))
            }
            _ => return None,
        };
        if job.reports.any() {
            finish(&mut tenure, &end);
            job.reports.ended(&tenure).await;
        }
        Some(end)
    }

    /// Connecting: a session (a lease), within the bound. `Err(None)`:
    /// try again; `Err(Some(end))`: the turn is over.
    async fn connect(&mut self) -> Result<Box<dyn Session + 'j>, Option<TurnEnd>> {
        let job = self.job;
        // Queued once, lost since: a new session, due in a new bound that
        // waits for a store on its way back.
        if self.reach.was_reached() {
            self.reach = Reach::again(&job.location, job.connect_timeout);
        }
        let open = self
            .store
            .open_session(job.timing.ttl(), job.connect_timeout);
        let session = match job
            .attempt(&mut self.reach, self.signals, "a lease", open)
            .await
        {
            Ok(session) => session,
            Err(outcome) => return Err(outcome.map(TurnEnd::Done)),
        };
        if let Some(refused) = session
            .renewal_waits(job.timing.renew_every() + job.timing.margin())
            .and_then(|(waits, why)| job.timing.refuse_renewal_wait(waits, &why))
        {
            let failure = Failure::new(crate::exit::Code::Config, refused);
            return Err(Some(TurnEnd::Done(failure.into())));
        }
        // Not "granted": etcd's grant may still be on its way (it is
        // confirmed with the place in the queue).
        timeline::step("lease requested");
        Ok(session)
    }

    /// Queued: join, and wait for our turn under a lease fresh enough to
    /// start the command.
    async fn queue<'s>(&mut self, session: &'s dyn Session, keeper: &mut Keeper) -> Queued<'s> {
        let job = self.job;
        let queued = job
            .queue(
                self.store,
                session,
                keeper,
                self.give_up,
                self.signals,
                &mut self.reach,
            )
            .await;
        match queued {
            Queued::First(won) => {
                if let Some(sent) = won.taken {
                    keeper.taken(sent);
                }
                keeper.queued();
                job.renewed_in_time(won, keeper, self.signals).await
            }
            other => other,
        }
    }

    /// Handing over and holding: the lock is ours; the command runs under
    /// the guard until it ends or the lease is lost.
    async fn hold(&mut self, won: Won<'_>, session: &dyn Session, keeper: &mut Keeper) -> Finished {
        let job = self.job;
        job.observe(Step::Acquired {
            shard: won.shard,
            token: won.token,
        });
        let Some(guard) = self.guard.take() else {
            let failure = Failure::software("a turn without its guard");
            return Finished {
                end: TurnEnd::Done(failure.into()),
                guard: None,
                tenure: None,
            };
        };
        let mut tenure = job.tenure(self.queued, Some(&won));
        self.trim.begin(self.store, &tenure, job.keep_history);
        let mut held = hold::Held {
            store: self.store,
            session,
            keeper,
            tenure: &mut tenure,
            trimming: &mut self.trim.work,
        };
        let mut lost_watch = won.lock.lost();
        let (end, guard) = match job.hand_over(&won, guard, &mut lost_watch, &mut held).await {
            Ok(started) => job.hold(started, &mut lost_watch, self.signals, held).await,
            Err(end) => (end, None),
        };
        drop(lost_watch);
        // While the lock is still ours, fenced by its token.
        if let (Some(once), TurnEnd::Ended(Ending::Exited(0))) = (&job.once, &end) {
            job.record_success(self.store, once, &*won.lock, &mut tenure)
                .await;
        }
        job.observe(Step::LetGo);
        Finished {
            end,
            guard,
            tenure: Some(tenure),
        }
    }

    /// Someone else held the lock all the while.
    fn busy(&self, outcome: Outcome) -> Finished {
        let mut tenure = self.job.tenure(self.queued, None);
        tenure.outcome = Verdict::Busy;
        Finished {
            end: TurnEnd::Done(outcome),
            guard: None,
            tenure: Some(tenure),
        }
    }

    /// Our place was lost before our turn came: end the session, so that
    /// the next one queues afresh. `Some(end)` if a signal ended the turn.
    async fn requeue(
        &mut self,
        session: &dyn Session,
        keeper: Keeper,
        why: &str,
    ) -> Option<TurnEnd> {
        let queued = self.reach.was_reached();
        match queued {
            true => log::verbose(format_args!(
                "lost our place in the queue ({why}); queueing again"
            )),
            false => log::verbose(format_args!(
                "the lease was never confirmed ({why}); asking for another"
            )),
        }
        drop(keeper);
        // Patiently once queued: after an outage the old lease may live on
        // (a restarted etcd renews every lease), and our new key would
        // queue behind the old one for a whole TTL. Before that, within
        // the bound.
        let reach = &mut self.reach;
        let revoke = async {
            match queued {
                true => session.release().await,
                false => {
                    reach
                        .bounded("the old session's end", session.release())
                        .await
                }
            }
        };
        let revoked = tokio::select! {
            revoked = revoke => revoked,
            sig = self.signals.terminating() => {
                return Some(TurnEnd::Done(Outcome::Raise(sig as i32)));
            }
        };
        match (revoked, self.reach.was_reached()) {
            (Ok(()), _) => {}
            (Err(e), true) => log::verbose(format_args!(
                "could not revoke the old lease ({e}); it will expire"
            )),
            (Err(e), false) => log::verbose(format_args!(
                "could not end the old session ({e}): a lease the store made meanwhile, \
                 if any, expires on its own"
            )),
        }
        None
    }

    /// Releasing: the session ends, the guard is reaped, the tenure is
    /// written into the history and the reports are made, the release
    /// first.
    async fn release(mut self, session: &dyn Session, ended: Finished) -> TurnEnd {
        let job = self.job;
        let Finished {
            end,
            guard,
            mut tenure,
        } = ended;
        if let Some(tenure) = &mut tenure {
            finish(tenure, &end);
        }
        let reported = job.reports.any().then(|| {
            tenure.clone().unwrap_or_else(|| {
                let mut tenure = job.tenure(self.queued, None);
                finish(&mut tenure, &end);
                tenure
            })
        });
        // The command's group is gone: the guard exits while the lease is
        // released.
        let reaped = async {
            if let Some(guard) = guard {
                guard.reap().await;
            }
        };
        // A store that never answered is not waited for again, and a
        // signal before then is obeyed at once: the lease, if granted at
        // all, expires.
        let reached = self.reach.was_reached();
        let within = match reached {
            true => RELEASE_TIMEOUT,
            false => UNANSWERED_RELEASE_TIMEOUT,
        };
        // Beside the release, never before it (the history is not on the
        // way of the next holder), and within its bound: a store that
        // cannot take the release cannot take the history either.
        let store = self.store;
        let trim = &mut self.trim;
        let noted = async {
            if let Some(tenure) = tenure.as_ref().filter(|t| !t.outcome.skipped()) {
                let noting = trim.note_end(store, tenure, job.keep_history);
                if tokio::time::timeout(within, noting).await.is_err() {
                    log::warn(format_args!(
                        "could not record the tenure in the history of lock {} within {}",
                        tenure.lock,
                        show(within)
                    ));
                }
            }
        };
        let (released, (), ()) =
            tokio::join!(release(session, &job.lock, within, reached), reaped, noted);
        // Said only of a release the store confirmed: `release` said once
        // what became of one it did not.
        job.observe(Step::Released(released && reached));
        if let Some(tenure) = reported {
            job.reports.ended(&tenure).await;
        }
        end
    }
}

impl<'j> Trim<'j> {
    /// Begin to make room in the history for `tenure`, beside the handover.
    fn begin(&mut self, store: &'j dyn Store, tenure: &Tenure, keep: usize) {
        let (lock, mine) = (tenure.lock.clone(), history::id(tenure));
        let room = self.room.clone();
        room.set(false);
        self.work = (keep > 0).then(|| {
            Box::pin(async move {
                let trimmed = history::trim(store, &lock, keep - 1, &mine).await;
                room.set(trimmed.is_ok());
            }) as Boxed<'j, ()>
        });
    }

    /// `tenure` into the history as it ended: beside the trim begun while
    /// the command ran, if that is still on its way; once more after it,
    /// should the trim have failed (or never begun: a busy run) where the
    /// write went through (else its warning said it: one line is enough).
    async fn note_end(&mut self, store: &dyn Store, tenure: &Tenure, keep: usize) {
        if self.work.is_none() && !self.room.get() {
            history::note_or_warn(store, tenure, keep, false).await;
            return;
        }
        let ((), noted) = tokio::join!(
            hold::drive_to_end(&mut self.work),
            history::note_or_warn(store, tenure, keep, true)
        );
        if noted && !self.room.get() {
            history::note_or_warn(store, tenure, keep, false).await;
        }
    }
}

impl Job {
    /// The command succeeded: say so in the store while the lock is ours, so
    /// that no other host runs this period again.
    pub(super) async fn record_success(
        &self,
        store: &dyn Store,
        once: &Once,
        lock: &dyn crate::store::Lock,
        tenure: &mut Tenure,
    ) {
        let mut done = tenure.clone();
        done.outcome = Verdict::Succeeded;
        done.exit_code = Some(0);
        done.ended = Some(history::timestamp(SystemTime::now()));
        let recorded = tokio::time::timeout(
            self.connect_timeout,
            history::record_success(store, once, lock.key(), &done),
        )
        .await;
        let why = match recorded {
            Ok(Ok(Put::Stored)) => return,
            Ok(Ok(Put::Stale(why))) => why,
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {}", show(self.connect_timeout)),
        };
        log::warn(format_args!(
            "the command succeeded, but its success could not be recorded for lock {} ({why}): \
             another run may do this period's work again",
            tenure.lock
        ));
    }
}

/// The history entry of a turn that ended as `end`, unless the turn said
/// already (a lost lease, work done before).
fn finish(tenure: &mut Tenure, end: &TurnEnd) {
    tenure.ended = Some(history::timestamp(SystemTime::now()));
    if tenure.outcome != Verdict::Running {
        return;
    }
    let exited = |tenure: &mut Tenure, code: i32| {
        tenure.exit_code = Some(code);
        tenure.outcome = match code {
            0 => Verdict::Succeeded,
            _ => Verdict::Failed,
        };
    };
    let killed = |tenure: &mut Tenure, sig: i32| {
        tenure.signal = Some(sig);
        tenure.outcome = Verdict::Killed;
    };
    match end {
        TurnEnd::Lost | TurnEnd::NotStarted => tenure.outcome = Verdict::Lost,
        TurnEnd::Ended(Ending::Exited(code)) => exited(tenure, *code),
        TurnEnd::Ended(Ending::Killed(sig)) => killed(tenure, *sig),
        TurnEnd::Done(Outcome::Exit(code)) => exited(tenure, i32::from(*code)),
        TurnEnd::Done(Outcome::Raise(sig)) => killed(tenure, *sig),
        TurnEnd::Done(Outcome::Fail(failure)) => {
            tenure.outcome = Verdict::Error;
            tenure.why = Some(failure.message.clone());
        }
    }
}

/// End the session within `within`: whether the store confirmed it. If
/// not, says once (with `-v`) that the lease will expire instead.
async fn release(session: &dyn Session, lock: &str, within: Duration, reached: bool) -> bool {
    if within.is_zero() {
        return false;
    }
    let released = tokio::time::timeout(within, session.release()).await;
    // What is claimed of a lease the store may never have granted.
    match (released, reached) {
        (Ok(Ok(())), _) => return true,
        (_, false) => log::verbose(format_args!(
            "the store never answered: a lease it made meanwhile, if any, expires on its own"
        )),
        (Ok(Err(e)), true) => log::verbose(format_args!(
            "could not release lock {lock} ({e}); its lease will expire"
        )),
        (Err(_), true) => log::verbose(format_args!(
            "could not release lock {lock} within {}; its lease will expire",
            show(within)
        )),
    }
    false
}

#[cfg(test)]
mod tests;
