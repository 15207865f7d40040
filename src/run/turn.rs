//! One turn: a session, a place in the queue, the handover, the command,
//! the release.

use std::time::{Duration, SystemTime};

use nix::sys::signal::Signal;

use super::Job;
use super::chronicle::Chronicle;
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
use crate::store::{Put, Session, Store};
use crate::supervisor::{Ending, Preparing, Supervisor};
use crate::timeline;

/// How long to try to revoke the lease on the way out; if the store cannot
/// be reached, the lease expires on its own.
pub(super) const RELEASE_TIMEOUT: Duration = Duration::from_secs(2);

/// The same, when elect ends before the store answered all it asked
/// (a signal, a store that never answers, a server of another kind): a
/// healthy store answers by then, and elect is not kept waiting again.
const UNANSWERED_RELEASE_TIMEOUT: Duration = Duration::from_millis(250);

/// How a turn ended: all the lock's history says of it follows from this.
pub(super) enum TurnEnd {
    /// The lease was lost and elect stopped the command: why, and whether
    /// the holder was asked to let go.
    Lost { why: String, asked: bool },
    /// The lease was lost while the lock was being handed to the command,
    /// which never started: elect queues again, as a waiter would.
    NotStarted,
    /// The command ended on its own.
    Ended(Ending),
    /// Told to stop by this signal, the command outlived `--grace` and
    /// was killed: elect ends by the signal, as if it had obeyed.
    Outlived(Signal),
    /// The command did not run, and why: elect ends with this outcome.
    Skipped(Outcome, Skip),
    /// Anything else: this is how elect ends.
    Done(Outcome),
}

/// Why a run did not run the command.
pub(super) enum Skip {
    /// Another holder had the lock all the while.
    Busy,
    /// This period's work is done: by whom and when, and when it ended.
    DoneBefore {
        by: String,
        ended: Option<SystemTime>,
    },
}

impl TurnEnd {
    pub(super) fn outcome(self, lost_code: u8) -> Outcome {
        match self {
            TurnEnd::Lost { .. } | TurnEnd::NotStarted => Outcome::Exit(lost_code),
            TurnEnd::Ended(Ending::Exited(code)) => {
                Outcome::Exit(u8::try_from(code & 0xff).unwrap_or(1))
            }
            TurnEnd::Ended(Ending::Killed(sig)) => Outcome::Raise(sig),
            TurnEnd::Outlived(sig) => Outcome::Raise(sig as i32),
            TurnEnd::Skipped(outcome, _) | TurnEnd::Done(outcome) => outcome,
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
    /// The turn's tenure in the lock's history, and its reports.
    chronicle: Chronicle<'j>,
}

/// What a turn leaves to its release, besides the session.
struct Finished {
    end: TurnEnd,
    /// The guard, once it reported the end of the command's group.
    guard: Option<Supervisor>,
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
                Queued::Busy(outcome) => Finished {
                    end: TurnEnd::Skipped(outcome, Skip::Busy),
                    guard: None,
                },
                Queued::Done(outcome) => Finished {
                    end: TurnEnd::Done(outcome),
                    guard: None,
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
        let mut turn = Turn {
            job,
            store,
            signals,
            guard,
            reach,
            give_up: match job.wait {
                Wait::Forever => None,
                Wait::For(d) => Some(waited_from + d),
            },
            chronicle: Chronicle::new(job, store),
        };
        turn.observe(Step::Began);
        turn
    }

    /// Tell those who follow the turn that it went on to `step`.
    fn observe(&mut self, step: Step) {
        self.chronicle.observe(&step);
        self.job.observe(step);
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
        let looks = store.look(&job.lock, job.once.as_ref().map(Once::record), no_wait);
        let looked = tokio::select! {
            looked = self.reach.bounded("a look at the lock", looks) => looked,
            sig = self.signals.terminating() => {
                return Some(TurnEnd::Done(Outcome::Raise(sig as i32)));
            }
        };
        let look = match looked {
            Ok(look) => look,
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
        let done = job
            .once
            .as_ref()
            .and_then(|once| history::done_in(look.record, &job.lock, once));
        let end = match (done, look.holder) {
            (Some(done), _) => job.done_before(&job.lock, &done),
            (None, Some(holder)) => TurnEnd::Skipped(job.busy_as(Some(&holder)), Skip::Busy),
            (None, None) => return None,
        };
        self.chronicle.report(&end).await;
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
        self.observe(Step::Acquired {
            shard: won.shard,
            token: won.token,
        });
        let Some(guard) = self.guard.take() else {
            let failure = Failure::software("a turn without its guard");
            return Finished {
                end: TurnEnd::Done(failure.into()),
                guard: None,
            };
        };
        let mut held = hold::Held {
            store: self.store,
            session,
            keeper,
            chronicle: &mut self.chronicle,
        };
        let mut lost_watch = won.lock.lost();
        let (end, guard) = match job.hand_over(&won, guard, &mut lost_watch, &mut held).await {
            Ok(started) => job.hold(started, &mut lost_watch, self.signals, held).await,
            Err(end) => (end, None),
        };
        drop(lost_watch);
        // While the lock is still ours, fenced by its token.
        let succeeded = matches!(end, TurnEnd::Ended(Ending::Exited(0)));
        if let (Some(once), true, Some(tenure)) = (&job.once, succeeded, self.chronicle.tenure()) {
            job.record_success(self.store, once, &*won.lock, tenure)
                .await;
        }
        self.observe(Step::LetGo);
        Finished { end, guard }
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

    /// Releasing: the session ends, the guard is reaped, the chronicle
    /// writes the tenure, the release first, and then the reports.
    async fn release(mut self, session: &dyn Session, ended: Finished) -> TurnEnd {
        let job = self.job;
        let Finished { end, guard } = ended;
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
        // Beside the release, never before it: the history is not on the
        // way of the next holder.
        let (released, (), ()) = tokio::join!(
            release(session, &job.lock, within, reached),
            reaped,
            self.chronicle.close(&end, within)
        );
        // Said only of a release the store confirmed: `release` said once
        // what became of one it did not.
        self.observe(Step::Released(released && reached));
        self.chronicle.report(&end).await;
        end
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
        tenure: &Tenure,
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
