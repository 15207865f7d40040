//! The wait for a lease row, written once: attempts until the row is ours,
//! the tables set up on first use, failures retried on a new connection,
//! `--wait`'s end, and the sleep between attempts. A dialect supplies one
//! attempt ([`Taker::attempt`]: its statements, and the judging of a busy
//! row by the observed-unchanged rule of [`crate::store::observed`]) and
//! one wake-up ([`Waking::nap`]: NOTIFY, a doorbell, or polling).
//!
//! A free row that a release names another waiter for is left to that one
//! first, for [`NAMED_FIRST`]: a dialect that hears of such a release (or
//! finds the row so) says so to the [`Queue`], and the next attempt may
//! take it out of turn only once that time has passed.

use std::time::Duration;

use super::lock::Place;
use crate::clock::{Instant, sleep_until};
use crate::log;
use crate::store::observed::NAMED_FIRST;
use crate::store::retry::{self, Backoff};
use crate::store::{PAST_EXPIRY, StoreError, Token, Turn};

/// What one acquisition attempt found.
pub enum Attempt<H> {
    /// Ours, with this token, by the statement sent at this instant.
    Ours(u64, Instant),
    /// Busy; worth another try in this long: when the holder's lease ends
    /// by the database's clock and we have seen its row unchanged for its
    /// TTL (`None`: both are so now; a race). `H`: what the wake-up needs
    /// to hear of its release.
    Busy(Option<Duration>, H),
    /// Let go before a failover, so perhaps taken since on the old
    /// primary; ours to take once it has stayed so this long.
    Unsettled(Duration),
    /// Free, but left to a waiter that came before us.
    Deferred,
}

/// How the next attempt is to go.
#[derive(Clone, Copy, Default)]
pub struct Try {
    /// A free row that a waiter before us had its time to take may be
    /// taken.
    pub out_of_turn: bool,
    /// The row was busy for a while yet at the last attempt: a read alone
    /// while it still is.
    pub look_first: bool,
}

/// A failed attempt, as its dialect sorts it.
pub enum Sorted<F> {
    /// The tables are missing (asked only until they were set up once).
    SetUp,
    /// Once more at once on a new connection (asked only once).
    Again,
    /// The wait ends with this.
    Fatal(StoreError),
    /// Tried again after a pause.
    Transient(F),
}

/// What a wait has done so far, for the sorting of a failure.
#[derive(Default)]
pub struct Tries {
    pub set_up: bool,
    pub again: bool,
}

/// Which waiter a free row is left to.
#[derive(Default)]
pub struct Queue {
    /// Until then a free row is another waiter's alone.
    passes_at: Option<Instant>,
}

impl Queue {
    /// A release names another waiter to take the row next: until when it
    /// may alone.
    pub fn named_other(&mut self) -> Instant {
        let at = Instant::now() + NAMED_FIRST;
        self.passes_at = Some(at);
        at
    }
}

/// How a waiter sleeps until a row is worth another attempt.
#[allow(async_fn_in_trait)]
pub trait Waking<H> {
    /// Until `left` has passed (`None`: a moment), or the holder lets go,
    /// or `until`.
    async fn nap(
        &mut self,
        left: Option<Duration>,
        hint: H,
        until: Option<Instant>,
        queue: &mut Queue,
    );
}

/// One lock's race for its row, as a dialect runs it.
#[allow(async_fn_in_trait)]
pub trait Taker {
    /// What a busy attempt tells the wake-up.
    type Hint: Default;
    type Failed;

    fn place(&self) -> &Place;
    async fn attempt(&self, how: Try) -> Result<Attempt<Self::Hint>, Self::Failed>;
    async fn sort(&self, failed: Self::Failed, tries: &Tries) -> Sorted<Self::Failed>;
    async fn set_up(&self) -> Result<(), StoreError>;
    /// A failure of an attempt never answered, once `--connect-timeout`
    /// has passed.
    async fn late(&self, failed: Self::Failed) -> StoreError;
    fn describe(failed: &Self::Failed) -> String;
    /// After a failed attempt: a new connection for the next.
    async fn recover(&self);
    /// After an attempt that did not answer in time.
    async fn abandon(&self);
    /// An attempt that did not answer, once `--connect-timeout` has passed.
    async fn give_up(&self) -> StoreError;
    fn waking(&self) -> impl Waking<Self::Hint> + '_;
}

/// Try until the row is ours, or `until` has passed while it is busy.
pub async fn wait<T: Taker>(taker: &T, until: Option<Instant>) -> Result<Turn, StoreError> {
    // A statement that hangs on a dead connection is given up and tried on
    // a new one: an attempt sent again is safe. A third of the TTL, at
    // least a second, as every store's attempts.
    let patience = retry::attempt_within(taker.place().ttl);
    let mut waking = taker.waking();
    let mut tries = Tries::default();
    let mut queue = Queue::default();
    let mut how = Try::default();
    let mut backoff = Backoff::STORE;
    // Until the server first answers an attempt, the wait is bounded by
    // --connect-timeout, as every call before we are queued; after,
    // attempts go on until the lock is ours.
    let unanswered_until = Instant::now() + taker.place().within;
    let mut answered = false;
    loop {
        let bound = match answered {
            true => patience,
            false => patience.min(unanswered_until.remaining()),
        };
        how.out_of_turn = queue.passes_at.is_some_and(|at| at.remaining().is_zero());
        let (left, hint) = match tokio::time::timeout(bound, taker.attempt(how)).await {
            // The statement that answered sets the row's expiry, also where
            // an earlier one, unanswered, had taken it.
            Ok(Ok(Attempt::Ours(token, sent))) => {
                return Ok(Turn::First {
                    token: Token::new(token),
                    taken: Some(sent),
                });
            }
            Ok(Ok(Attempt::Busy(left, hint))) => {
                queue.passes_at = None;
                (left, hint)
            }
            // An older waiter's turn (one that did not hear the release
            // yet, say): its take is heard, or its time passes.
            Ok(Ok(Attempt::Deferred)) => {
                let at = *queue.passes_at.get_or_insert(Instant::now() + NAMED_FIRST);
                (Some(at.remaining().max(AT_LEAST)), T::Hint::default())
            }
            // Not held by anyone we can see: no `-n` or `--wait` gives up
            // on it, the wait is one TTL once a failover.
            Ok(Ok(Attempt::Unsettled(left))) => {
                answered = true;
                sleep_until(Instant::now() + left + PAST_EXPIRY).await;
                continue;
            }
            Ok(Err(failed)) => {
                let failed = match taker.sort(failed, &tries).await {
                    Sorted::SetUp => {
                        tries.set_up = true;
                        taker.set_up().await?;
                        continue;
                    }
                    Sorted::Again => {
                        tries.again = true;
                        continue;
                    }
                    Sorted::Fatal(e) => return Err(e),
                    Sorted::Transient(failed) => failed,
                };
                if !answered && unanswered_until.remaining().is_zero() {
                    return Err(taker.late(failed).await);
                }
                log::verbose(format_args!(
                    "could not try for lock {}: {}",
                    &taker.place().lock,
                    T::describe(&failed)
                ));
                taker.recover().await;
                // Busy only as last seen: a lock never seen is not called
                // held (`-n` tries until --connect-timeout).
                let wake = Instant::now() + backoff.pause();
                match answered {
                    true => sleep_until(until.map_or(wake, |at| at.min(wake))).await,
                    false => sleep_until(wake.min(unanswered_until)).await,
                }
                if answered && until.is_some_and(|at| at.remaining().is_zero()) {
                    return Ok(Turn::Busy);
                }
                continue;
            }
            Err(_) if !answered && unanswered_until.remaining().is_zero() => {
                return Err(taker.give_up().await);
            }
            Err(_) => {
                log::verbose(format_args!(
                    "no answer within {}; connecting again",
                    crate::clock::show(bound)
                ));
                taker.abandon().await;
                continue;
            }
        };
        answered = true;
        backoff.reset();
        how.look_first = left.is_some();
        if until.is_some_and(|at| at.remaining().is_zero()) {
            return Ok(Turn::Busy);
        }
        waking.nap(left, hint, until, &mut queue).await;
    }
}

/// The shortest wait for a deferred row's turn: a timer of zero would spin.
const AT_LEAST: Duration = Duration::from_millis(1);

/// A moment from now, or `until` if sooner.
pub fn wake_at(nap: Duration, until: Option<Instant>) -> Instant {
    let wake = Instant::now() + nap;
    until.map_or(wake, |at| at.min(wake))
}
