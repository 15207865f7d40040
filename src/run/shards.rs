//! `--shards N`: N independent locks under one name, one owner each.
//!
//! An instance takes a free shard if there is one, the one it prefers
//! first (`--prefer-shard`, else the one its identity held last, so that a
//! restart does not reshuffle owners); if none is free, it waits in every
//! shard's queue at once under its one session, keeps the first shard that
//! is its turn and leaves the other queues. A held shard is never taken
//! away while its lease lives.

use super::Job;
use super::queue::{Queued, Won};
use crate::clock::Instant;
use crate::exit::Outcome;
use crate::lease::Keeper;
use crate::log;
use crate::reach::Reach;
use crate::store::records;
use crate::store::{ErrorKind, HolderRecord, Lock, Session, Store, StoreError, Turn, first_turn};
use crate::timeline;

use super::signals::Signals;
use super::standing::Step;
use crate::store::Token;

/// The shard won: its lock, its number, its token and when it was taken
/// (see [`Turn::First`]).
type Shard<'s> = (Box<dyn Lock + 's>, u32, Token, Option<Instant>);

impl Job {
    /// Queue for a shard of the lock (`--shards`), as [`Job::queue`] does
    /// for a lock.
    pub(super) async fn queue_for_shards<'s>(
        &self,
        store: &dyn Store,
        session: &'s dyn Session,
        keeper: &mut Keeper,
        give_up: Option<Instant>,
        signals: &mut Signals,
        reach: &mut Reach,
    ) -> Queued<'s> {
        let shards = self.shards.unwrap_or(1);
        let raced = tokio::select! {
            raced = self.race(store, session, shards, give_up, reach) => raced,
            loss = keeper.lost() => return Queued::Again(loss.to_string()),
            sig = signals.terminating() => return Queued::Done(Outcome::Raise(sig as i32)),
        };
        match raced {
            Ok(Some((lock, shard, token, taken))) => Queued::First(Won {
                lock,
                token,
                taken,
                shard: Some(shard),
            }),
            Ok(None) => {
                log::notice(format_args!(
                    "every shard of lock {} ({shards}) is held",
                    self.lock
                ));
                Queued::Busy(Outcome::Exit(self.busy_code))
            }
            Err(e) if e.kind == ErrorKind::Gone => Queued::Again(e.message),
            Err(e) if e.kind == ErrorKind::Rewound => Queued::Done(self.rewound(e, signals).await),
            Err(e) => Queued::Done(self.store_failed(e)),
        }
    }

    /// Take a free shard, else wait for the first one whose turn comes;
    /// `None` if none came before `give_up`. Until every queue is joined,
    /// the store's answers are due within `reach`'s bound.
    async fn race<'s>(
        &self,
        store: &dyn Store,
        session: &'s dyn Session,
        shards: u32,
        give_up: Option<Instant>,
        reach: &mut Reach,
    ) -> Result<Option<Shard<'s>>, StoreError> {
        let count = records::shards(store, &self.lock, Some(shards));
        match reach.bounded("the shard count", count).await? {
            Some(recorded) if recorded != shards => {
                return Err(StoreError::config(format!(
                    "it has {recorded} shards, recorded on its first use; this instance asks \
                     for --shards {shards} (to change the number, stop every instance and \
                     remove the record: see docs/shards-and-checkpoints.md)"
                )));
            }
            _ => {}
        }
        let names: Vec<String> = (0..shards)
            .map(|k| self.lock.shard(k).to_string())
            .collect();
        let owners = reach
            .bounded("the shards' owners", store.owners(&names))
            .await?;
        let order = self.preference(&owners.iter().map(|o| o.last.as_deref()).collect::<Vec<_>>());
        timeline::step("queued");

        // A free shard, the most preferred first: alone, without waiting.
        if let Some(&k) = order.iter().find(|&&k| !owners[k as usize].held) {
            let join = session.join(names[k as usize].clone(), self.shard_record(k));
            let lock = reach.bounded("a place in a shard's queue", join).await?;
            let look = lock.wait_turn(Some(Instant::now()));
            match reach.bounded("a look at a shard's queue", look).await? {
                Turn::First { token, taken } => {
                    reach.reached();
                    return Ok(Some((lock, k, token, taken)));
                }
                // Taken meanwhile.
                Turn::Busy => {
                    reach
                        .bounded("leaving a shard's queue", lock.leave())
                        .await?
                }
            }
        }

        // Every shard's queue at once; keep the first won, leave the rest.
        let mut locks = Vec::with_capacity(order.len());
        for &k in &order {
            let join = session.join(names[k as usize].clone(), self.shard_record(k));
            locks.push(reach.bounded("a place in a shard's queue", join).await?);
        }
        reach.reached();
        self.observe(Step::Queued);
        log::verbose(format_args!(
            "every shard of lock {} is held; waiting in all {shards} queues",
            self.lock
        ));
        let (i, turn) = first_turn(&locks, give_up).await?;
        let won = match turn {
            Turn::First { token, taken } => Some((locks.swap_remove(i), order[i], token, taken)),
            Turn::Busy => None,
        };
        for other in &locks {
            if let Err(e) = other.leave().await {
                log::verbose(format_args!("could not leave a shard's queue ({e})"));
            }
        }
        Ok(won)
    }

    /// The shards in the order to try them: `--prefer-shard`, then those
    /// this identity held last, then the rest, each in number order.
    fn preference(&self, last: &[Option<&str>]) -> Vec<u32> {
        let mut order: Vec<u32> = (0..last.len() as u32).collect();
        order.sort_by_key(|&k| {
            (
                Some(k) != self.prefer_shard,
                last[k as usize] != Some(self.identity.as_str()),
                k,
            )
        });
        order
    }

    fn shard_record(&self, shard: u32) -> HolderRecord {
        HolderRecord {
            shard: Some(shard),
            ..self.record()
        }
    }
}
