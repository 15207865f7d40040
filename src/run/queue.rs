//! Waiting for our turn: the join, the wait, and what is shown meanwhile
//! (the live line at a terminal, the holder for systemd).

use std::io::IsTerminal;
use std::time::Duration;

use super::Job;
use super::live::LiveLine;
use super::signals::Signals;
use super::standing::{self, Step};
use super::turn::RELEASE_TIMEOUT;
use crate::cli::Wait;
use crate::clock::{Instant, show};
use crate::exit::Outcome;
use crate::lease::{Keeper, Kept};
use crate::log;
use crate::reach::Reach;
use crate::store::records;
use crate::store::{ErrorKind, Holder, Lock, Session, Store, StoreError, Token, Turn, first_turn};
use crate::timeline;

/// The lock that came our turn.
pub struct Won<'s> {
    pub lock: Box<dyn Lock + 's>,
    /// Its fencing token.
    pub token: Token,
    /// See [`Turn::First`].
    pub taken: Option<Instant>,
    /// With `--shards`: which shard it is.
    pub shard: Option<u32>,
}

/// How waiting in the queue ended.
pub(super) enum Queued<'s> {
    /// The lock is ours, with this token.
    First(Won<'s>),
    /// Our place was lost before our turn came; queue again.
    Again(String),
    /// Someone else held the lock all the while (said already).
    Busy(Outcome),
    Done(Outcome),
}

impl Job {
    /// Join the queue and wait for our turn.
    pub(super) async fn queue<'s>(
        &self,
        store: &dyn Store,
        session: &'s dyn Session,
        keeper: &mut Keeper,
        give_up: Option<Instant>,
        signals: &mut Signals,
        reach: &mut Reach,
    ) -> Queued<'s> {
        if self.shards.is_some() {
            return self
                .queue_for_shards(store, session, keeper, give_up, signals, reach)
                .await;
        }
        let record = self.record();
        // Whether the lock is a sharded one's, asked beside the join: a
        // run without --shards would wait behind its shards' holders.
        let join_unsharded = async {
            let (joined, shards) = tokio::join!(
                session.join(self.lock.to_string(), record),
                records::shards(store, &self.lock, None)
            );
            let lock = joined?;
            match shards {
                Ok(None) => Ok(lock),
                Ok(Some(n)) => {
                    let _ = lock.leave().await;
                    Err(StoreError::config(format!(
                        "it is sharded: {n} shards are recorded for it, on its first use; \
                         run it with --shards {n}"
                    )))
                }
                // The look is a courtesy: a store that failed it (a
                // connection reset under the join, which the join itself
                // outlived) leaves the run as it was without it.
                Err(e) => {
                    log::verbose(format_args!("could not look for a shard count ({e})"));
                    Ok(lock)
                }
            }
        };
        let join = async {
            tokio::select! {
                joined = join_unsharded => joined.map(Ok),
                loss = keeper.lost() => Ok(Err(loss)),
            }
        };
        let lock = match self
            .attempt(reach, signals, "a place in the queue", join)
            .await
        {
            Ok(Ok(lock)) => lock,
            Ok(Err(loss)) => return Queued::Again(loss.to_string()),
            Err(Some(outcome)) => return Queued::Done(outcome),
            Err(None) => return Queued::Again("no place in the queue yet".into()),
        };
        reach.reached();
        timeline::step("queued");
        keeper.queued();
        self.observe(Step::Queued);
        let rank = lock.rank();
        let mut locks = vec![lock];
        let turn = tokio::select! {
            never = self.live_line(store, rank) => match never {},
            never = self.look_at_holder(store) => match never {},
            turn = first_turn(&locks, give_up) => turn,
            loss = keeper.lost() => return Queued::Again(loss.to_string()),
            sig = signals.terminating() => return Queued::Done(Outcome::Raise(sig as i32)),
        };
        if let Ok((_, Turn::First { .. })) = turn {
            timeline::step("first in line");
        }
        match turn {
            Ok((i, Turn::First { token, taken })) => Queued::First(Won {
                lock: locks.swap_remove(i),
                token,
                taken,
                shard: None,
            }),
            Ok((_, Turn::Busy)) => Queued::Busy(self.busy(store).await),
            Err(e) if e.kind == ErrorKind::Gone => Queued::Again(e.message),
            Err(e) if e.kind == ErrorKind::Rewound => Queued::Done(self.rewound(e, signals).await),
            Err(e) => Queued::Done(self.store_failed(e)),
        }
    }

    /// The lock is won, but is the lease fresh enough to start the command
    /// under? Not while a renewal that was due is unconfirmed (a store just
    /// back from an outage, a waiter whose renewals failed meanwhile): the
    /// command would be stopped as it starts, and the run would end on a
    /// lost lease with the lock free for the taking. So wait for that
    /// renewal; should the lease be lost first, leave the lock and queue
    /// again under a new one, as a waiter does.
    pub(super) async fn renewed_in_time<'s>(
        &self,
        won: Won<'s>,
        keeper: &mut Keeper,
        signals: &mut Signals,
    ) -> Queued<'s> {
        if !keeper.overdue() {
            return Queued::First(won);
        }
        log::verbose(format_args!(
            "won lock {} while a renewal of the lease is overdue: the command starts once \
             one is confirmed",
            self.lock
        ));
        while keeper.overdue() {
            tokio::select! {
                kept = keeper.next() => if let Kept::Lost(loss) = kept {
                    let _ = tokio::time::timeout(RELEASE_TIMEOUT, won.lock.leave()).await;
                    return Queued::Again(format!("{loss}, before the command started"));
                },
                sig = signals.terminating() => return Queued::Done(Outcome::Raise(sig as i32)),
            }
        }
        Queued::First(won)
    }

    /// While waiting, and only when stderr is a terminal: one line that says
    /// who holds the lock and how many are ahead, redrawn every second and
    /// erased when the wait ends (when this future is dropped).
    pub(super) async fn live_line(&self, store: &dyn Store, rank: u64) -> std::convert::Infallible {
        if !(log::notices_shown() && std::io::stderr().is_terminal()) {
            return std::future::pending().await;
        }
        let line = LiveLine::default();
        loop {
            if let Ok(Ok(status)) =
                tokio::time::timeout(RELEASE_TIMEOUT, store.status(&self.lock)).await
            {
                // Most important first: the line is cut at the terminal's width.
                let holder = match &status.holder {
                    Some(h) => match &h.record {
                        Some(r) => format!(
                            "held with token {} by {} since {} (pid {} on {})",
                            h.token,
                            r.identity,
                            r.since(),
                            r.pid,
                            r.hostname
                        ),
                        None => format!("held with token {} by {}", h.token, h.key),
                    },
                    None => "changing hands".into(),
                };
                let ahead = if status.ranks.is_empty() {
                    format!("{} waiting", status.waiting)
                } else {
                    format!(
                        "{} ahead",
                        status.ranks.iter().filter(|r| **r < rank).count()
                    )
                };
                line.show(&format!(
                    "elect: waiting for lock {}, {ahead}: {holder}",
                    self.lock
                ));
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// While waiting, and only when systemd is told: who holds the lock,
    /// for its status line, looked at once and then every 10 s.
    pub(super) async fn look_at_holder(&self, store: &dyn Store) -> std::convert::Infallible {
        if !self.look_at_holder {
            return std::future::pending().await;
        }
        loop {
            if let Ok(Ok(status)) =
                tokio::time::timeout(RELEASE_TIMEOUT, store.status(&self.lock)).await
                && let Some(holder) = standing::holder_line(&status)
            {
                self.standing.holder_seen(holder);
            }
            tokio::time::sleep(Duration::from_secs(10)).await;
        }
    }

    /// Someone else holds the lock: say who (a look at the lock, unless
    /// nothing would be said), and end with `--busy-exit-code`.
    pub(super) async fn busy(&self, store: &dyn Store) -> Outcome {
        let holder = match log::shows(log::Level::Normal) {
            true => tokio::time::timeout(RELEASE_TIMEOUT, store.holder(&self.lock))
                .await
                .ok()
                .and_then(Result::ok)
                .flatten(),
            false => None,
        };
        self.busy_as(holder.as_ref())
    }

    /// [`Job::busy`], with the lock's holder in hand, if known.
    pub(super) fn busy_as(&self, holder: Option<&Holder>) -> Outcome {
        let waited = match self.wait {
            Wait::For(d) if !d.is_zero() => format!("; gave up after {}", show(d)),
            _ => String::new(),
        };
        let code = self.busy_code;
        let not_run = format!("; the command was not run (exit {code})");
        match holder {
            Some(holder) => log::event(
                log::Level::Normal,
                "busy",
                format_args!("lock {} is held by {holder}{waited}{not_run}", self.lock),
            ),
            None => log::event(
                log::Level::Normal,
                "busy",
                format_args!(
                    "lock {} is held by someone else{waited}{not_run}",
                    self.lock
                ),
            ),
        }
        Outcome::Exit(code)
    }
}
