//! Handing the lock over: the guard, forked ahead, is told the token and
//! the deadline and starts the command; the lease is renewed all the
//! while, and a loss before the command starts means it never will.

use std::os::fd::AsFd;
use std::time::SystemTime;

use super::Job;
use super::chronicle::Chronicle;
use super::command::exec_failure;
use super::hold::Held;
use super::queue::Won;
use super::standing::{Cause, Step};
use super::turn::{Skip, TurnEnd};
use crate::clock::show;
use crate::exit::{Failure, Outcome};
use crate::history::{self, Once, Tenure};
use crate::lease::{Keeper, Kept};
use crate::log;
use crate::store::{Boxed, CHECKPOINT_IN_ENV_MAX, Loss};
use crate::supervisor::{Handover, Preparing, SpawnError, Supervisor};
use crate::timeline;

/// The command under its guard, and a loss that came as it started.
pub(super) struct Started {
    pub child: Supervisor,
    pub loss: Option<Loss>,
}

impl Job {
    /// Hand the lock to the waiting guard: it starts the command with
    /// `token`, safe until `deadline`, and holds what holds the lock. The
    /// lease is renewed all the while: the checkpoint read, the acquisition
    /// record and the guard may each take a while. A loss before the guard
    /// is told ends the turn with nothing started; a loss after is passed
    /// on, and the guard does not start the command, unless it already had:
    /// then the command is started, and the loss is returned with it.
    pub(super) async fn hand_over(
        &self,
        won: &Won<'_>,
        guard: Preparing,
        lost_watch: &mut Boxed<'_, Loss>,
        ours: &mut Held<'_, '_>,
    ) -> Result<Started, TurnEnd> {
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
        let name = self.held_name(shard);
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
                    Kept::Lost(loss) => {
                        return Err(self.not_started(Cause::of(&loss), &loss));
                    }
                },
                loss = &mut *lost_watch => {
                    return Err(self.not_started(Cause::of(&loss), &loss));
                }
                ready = &mut ready => break ready,
                () = ours.chronicle.writes() => {}
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
            Ok(Some(done)) => return Err(self.done_before(&name, &done)),
            Err(e) => {
                return failed(
                    Failure::from(e)
                        .about(format_args!("the record of lock {}'s last success", name)),
                );
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
        let tenure = ours.chronicle.starting();
        let handover = Handover {
            set_env,
            held: &held,
            release_order: crate::release::order(
                &self.location,
                &ours.session.release_token(),
                tenure,
                self.keep_history,
                &self.reports,
            ),
        };
        let mut child = match guard
            .start(token.get(), ours.keeper.deadline(), handover)
            .await
        {
            Ok(child) => child,
            Err(e) => return failed(self.spawn_failure(e)),
        };
        let (started, loss) = self
            .await_start(&mut child, ours.keeper, lost_watch, ours.chronicle)
            .await;
        match started {
            Ok(()) => Ok(Started { child, loss }),
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
        chronicle: &mut Chronicle<'_>,
    ) -> (Result<(), SpawnError>, Option<Loss>) {
        let mut loss = None;
        loop {
            let news = tokio::select! {
                biased;
                started = child.started() => return (started, loss),
                kept = keeper.next(), if loss.is_none() => kept,
                lost = &mut *lost_watch, if loss.is_none() => Kept::Lost(lost),
                () = chronicle.writes() => continue,
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
    pub(super) fn done_before(&self, lock: &str, done: &Tenure) -> TurnEnd {
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
            "lock {lock}: done already for {period}: {} ran it at {when}{ago}; not running the command",
            done.who()
        );
        log::event(log::Level::Normal, "done-before", format_args!("{said}"));
        let skip = Skip::DoneBefore {
            by: format!("{} ran it at {when}", done.who()),
            ended: done.ended_at(),
        };
        TurnEnd::Skipped(Outcome::Exit(self.done_code), skip)
    }

    /// The lease was lost before the command started: it never will.
    fn not_started(&self, cause: Cause, loss: impl std::fmt::Display) -> TurnEnd {
        self.observe(Step::Lost(cause));
        log::warn(format_args!(
            "lost the lease on lock {} at {} as the command was about to start: {loss}; \
             the command was not started; queueing again",
            self.lock,
            self.location.shown(),
        ));
        TurnEnd::NotStarted
    }
}
