//! A session on PostgreSQL: the rows it holds ([`Shared`]), renewed by
//! one statement. A renewal sent while an acquisition is on its way may
//! miss the row being taken; the lease loop's rule for a lock taken by a
//! request of its own covers that (the turn says when the acquisition
//! left: `crate::lease`).
//!
//! A waiter takes a row its holder has not let go only once it has seen it
//! unchanged for the holder's TTL on its own clock ([`Observed`]), so a
//! step of the database's clock hands over no live lock. It learns of each
//! renewal from a notification the renewal sends while anyone waits, or,
//! where it cannot LISTEN, by polling.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use tokio::sync::broadcast;
use tokio_postgres::types::Type;

use super::conn::{Cells, Link, describe, is_transient};
use super::{POLL_EVERY, Postgres, missing_column, missing_tables, read_only};
use crate::clock::{Instant, sleep_until};
use crate::log;
use crate::store::PAST_EXPIRY;
use crate::store::Token;
use crate::store::lease_row::session::worth_a_take_in;
use crate::store::lease_row::{Cell, Row, Shared, Version, key, store::checkpoint_of};
use crate::store::observed::{NAMED_FIRST, Observed};
use crate::store::retry::{self, Backoff};
use crate::store::{
    Boxed, Checkpoint, ErrorKind, HolderRecord, Lock, Loss, Renewal, Renewer, Session, StoreError,
    Turn,
};

/// How long a holder's command runs before its elect listens for news of
/// its lock on a second connection.
const LISTEN_AFTER: Duration = Duration::from_millis(200);

pub struct PgSession<'s> {
    store: &'s Postgres,
    shared: Rc<Shared>,
    granted_at: Instant,
}

impl<'s> PgSession<'s> {
    pub fn new(store: &'s Postgres, ttl: Duration) -> Self {
        PgSession {
            store,
            shared: Rc::new(Shared::new(ttl, ())),
            granted_at: Instant::now(),
        }
    }

    fn ttl_ms(&self) -> i64 {
        self.shared.ttl.as_millis() as i64
    }
}

impl Session for PgSession<'_> {
    fn id(&self) -> String {
        self.shared.tenure.clone()
    }

    fn ttl(&self) -> Option<Duration> {
        Some(self.shared.ttl)
    }

    fn granted_at(&self) -> Instant {
        self.granted_at
    }

    fn renewer(&self) -> Box<dyn Renewer> {
        Box::new(PgRenewer {
            shared: self.shared.clone(),
            link: self.store.link.clone(),
            statement: self.store.sql.renew.clone(),
            in_flight: false,
        })
    }

    fn join(
        &self,
        lock: String,
        record: HolderRecord,
    ) -> Boxed<'_, Result<Box<dyn Lock + '_>, StoreError>> {
        Box::pin(async move {
            let lock: Box<dyn Lock + '_> = Box::new(PgLock {
                session: self,
                key: key(&lock, &self.shared.tenure),
                record: record.acquired_now().to_json(),
                lock,
                checkpoint: RefCell::new(None),
                observed: RefCell::new(Observed::new()),
            });
            Ok(lock)
        })
    }

    fn release(&self) -> Boxed<'_, Result<(), StoreError>> {
        Box::pin(async move {
            // Before: no renewal may count them lost once they are let go.
            self.shared.held.borrow_mut().clear();
            self.store
                .query(
                    &self.store.sql.release,
                    &[(&self.shared.tenure, Type::TEXT)],
                )
                .await?;
            Ok(())
        })
    }
}

/// Renews every row of the session in one statement.
struct PgRenewer {
    shared: Rc<Shared>,
    link: Link,
    statement: String,
    /// A renewal was sent and not answered (yet).
    in_flight: bool,
}

impl Renewer for PgRenewer {
    fn renew(&mut self) -> Boxed<'_, Result<Renewal, StoreError>> {
        Box::pin(async move {
            let held = self.shared.held.borrow().clone();
            let client = self.link.client().await?;
            let ttl_ms = self.shared.ttl.as_millis() as i64;
            self.in_flight = true;
            let rows = client
                .query_typed(
                    &self.statement,
                    &[(&self.shared.tenure, Type::TEXT), (&ttl_ms, Type::INT8)],
                )
                .await;
            self.in_flight = false;
            let rows = rows.map_err(|e| StoreError::unavailable(describe(&e)))?;
            let renewed = rows
                .iter()
                .map(|row| Ok((row.cell(0)?, row.cell::<Option<String>>(1)?)))
                .collect::<Result<Vec<_>, StoreError>>()?;
            Ok(self.shared.judge(&held, renewed))
        })
    }

    fn reset(&mut self) {
        // A renewal given up on may still wait on the server (for a
        // synchronous standby that is gone): cancelled there.
        if std::mem::take(&mut self.in_flight) {
            self.link.cancel_later();
        }
        self.link = self.link.fresh();
    }
}

/// A place in the race for one lock's row.
struct PgLock<'s> {
    session: &'s PgSession<'s>,
    lock: String,
    key: String,
    record: String,
    /// The checkpoint, as the acquisition found the row.
    checkpoint: RefCell<Option<Checkpoint>>,
    /// The holder's row as we have seen it, and since when.
    observed: RefCell<Observed<Version>>,
}

/// The version and TTL a renewal's notification tells of (`renewed LOCK
/// TENURE RENEWALS MICROS TTL`), if it is of `lock`.
fn notified(payload: &str, lock: &str) -> Option<(Version, Duration)> {
    let mut words = payload.split(' ');
    if words.next()? != "renewed" || words.next()? != lock {
        return None;
    }
    let tenure = Some(words.next()?.to_string());
    let renewals = words.next()?.parse().ok()?;
    let micros = words.next()?.parse().ok();
    let ttl = Duration::from_millis(words.next()?.parse().ok()?);
    Some((
        Version {
            tenure,
            renewals,
            micros,
        },
        ttl,
    ))
}

/// Why an acquisition attempt failed.
enum Failed {
    /// Reaching the database, or reading its answer.
    Store(StoreError),
    Statement(tokio_postgres::Error),
}

impl From<StoreError> for Failed {
    fn from(e: StoreError) -> Self {
        Failed::Store(e)
    }
}

/// What one acquisition attempt found.
enum Attempt {
    /// Ours, with this token, by the statement sent at this instant.
    Ours(u64, Instant),
    /// Busy; worth another try in this long: when the holder's lease ends
    /// by the database's clock and we have seen its row unchanged for its
    /// TTL (`None`: both are so now; a race).
    Busy(Option<Duration>),
    /// Let go before the server's timeline began, so perhaps taken since
    /// on the old primary; ours to take once it has stayed so this long.
    Unsettled(Duration),
    /// Free, but left to a waiter that came before us.
    Deferred,
}

impl PgLock<'_> {
    fn store(&self) -> &Postgres {
        self.session.store
    }

    /// One acquisition; with `out_of_turn`, of a free row that a waiter
    /// before us had its time to take.
    async fn attempt(&self, out_of_turn: bool) -> Result<Attempt, Failed> {
        let shared = &self.session.shared;
        let client = self.store().link.client().await.map_err(Failed::Store)?;
        let ttl_ms = self.session.ttl_ms();
        let (tenure, renewals, micros) = Version::ripe(&self.observed.borrow());
        let sent = Instant::now();
        let rows = client
            .query_typed(
                &self.store().sql.acquire,
                &[
                    (&self.lock, Type::TEXT),
                    (&shared.tenure, Type::TEXT),
                    (&ttl_ms, Type::INT8),
                    (&self.record, Type::TEXT),
                    (&tenure, Type::TEXT),
                    (&renewals, Type::INT8),
                    (&micros, Type::INT8),
                    (&out_of_turn, Type::BOOL),
                ],
            )
            .await
            .map_err(Failed::Statement)?;
        let answered = Instant::now();
        let row = super::first_row(&rows)?;
        let fence: Option<i64> = row.cell(0)?;
        let left: Option<i64> = row.cell(1)?;
        if let Some(fence) = fence {
            shared.held.borrow_mut().insert(self.lock.clone());
            let cells = Row(vec![
                row.cell::<Option<String>>(3)?
                    .map_or(Cell::Null, Cell::Text),
                row.cell::<Option<i64>>(4)?.map_or(Cell::Null, Cell::Int),
                row.cell::<Option<String>>(5)?
                    .map_or(Cell::Null, Cell::Text),
            ]);
            *self.checkpoint.borrow_mut() = checkpoint_of(&cells, 0)?;
            return Ok(Attempt::Ours(fence as u64, sent));
        }
        if row.cell::<Option<bool>>(12)? == Some(true) {
            return Ok(Attempt::Deferred);
        }
        let mut observed = self.observed.borrow_mut();
        let unsettled = row.cell::<Option<bool>>(11)? == Some(true);
        match row.cell::<Option<String>>(6)? {
            None if unsettled => {
                let version = Version {
                    tenure: None,
                    renewals: row.cell::<Option<i64>>(7)?.unwrap_or(0),
                    micros: None,
                };
                let wait = observed.wait_out(version, shared.ttl, answered);
                log::verbose(format_args!(
                    "lock {} was let go before the server's timeline began (a failover); \
                     taking it in {}, once no take lost with the old primary can be alive",
                    self.lock,
                    crate::clock::show(wait)
                ));
                return Ok(Attempt::Unsettled(wait));
            }
            Some(tenure) => {
                let version = Version {
                    tenure: Some(tenure),
                    renewals: row.cell::<Option<i64>>(7)?.unwrap_or(0),
                    micros: row.cell(8)?,
                };
                let ttl = row
                    .cell::<Option<i64>>(9)?
                    .map_or(shared.ttl, |ms| Duration::from_millis(ms.max(0) as u64));
                observed.saw(version, ttl, answered);
            }
            None => observed.forget(),
        }
        let left = left.map(|ms| Duration::from_millis(ms.max(0) as u64));
        let wait = worth_a_take_in(&observed, left);
        Ok(Attempt::Busy((!wait.is_zero()).then_some(wait)))
    }

    /// Try until the row is ours; set up the tables on first use.
    async fn wait(&self, until: Option<Instant>) -> Result<Turn, StoreError> {
        let store = self.store();
        // A statement that hangs on a dead connection is given up and
        // tried on a new one: a retry of an acquisition is safe. A third of
        // the TTL, at least a second, as every store's attempts.
        let patience = retry::attempt_within(self.session.shared.ttl);
        let mut notices: Option<broadcast::Receiver<String>> = None;
        let mut listening: Option<Boxed<'_, Option<broadcast::Receiver<String>>>> = None;
        let mut set_up = false;
        let mut read_only_once = false;
        let mut backoff = Backoff::STORE;
        // Until the server first answers an attempt, the wait is bounded by
        // --connect-timeout, as every call before we are queued; after,
        // attempts go on until the lock is ours.
        let unanswered_until = Instant::now() + store.within;
        let mut answered = false;
        // A free row is left to the waiters before us until then (they are
        // named by the release, or heard of at a look).
        let mut turn_passes_at: Option<Instant> = None;
        loop {
            let bound = match answered {
                true => patience,
                false => patience.min(unanswered_until.remaining()),
            };
            let out_of_turn = turn_passes_at.is_some_and(|at| at.remaining().is_zero());
            let left = match tokio::time::timeout(bound, self.attempt(out_of_turn)).await {
                // The statement that answered sets the row's expiry, also
                // where an earlier one, unanswered, had taken it.
                Ok(Ok(Attempt::Ours(token, sent))) => {
                    return Ok(Turn::First {
                        token: Token::new(token),
                        taken: Some(sent),
                    });
                }
                Ok(Ok(Attempt::Busy(left))) => {
                    turn_passes_at = None;
                    left
                }
                // An older waiter's turn (one that did not hear the release
                // yet, say): its take is heard, or its time passes.
                Ok(Ok(Attempt::Deferred)) => {
                    let at = *turn_passes_at.get_or_insert(Instant::now() + NAMED_FIRST);
                    Some(at.remaining().max(Duration::from_millis(1)))
                }
                // Not held by anyone we can see: no `-n` or `--wait` gives
                // up on it, the wait is one TTL once a failover.
                Ok(Ok(Attempt::Unsettled(left))) => {
                    answered = true;
                    sleep_until(Instant::now() + left + PAST_EXPIRY).await;
                    continue;
                }
                Ok(Err(Failed::Statement(e)))
                    if (missing_tables(&e) || missing_column(&e)) && !set_up =>
                {
                    set_up = true;
                    store.set_up().await?;
                    continue;
                }
                // Once more on a new connection, which may reach another
                // server of the URL's; a second time, it is what we have.
                Ok(Err(Failed::Statement(e))) if read_only(&e) => {
                    if read_only_once {
                        return Err(store.failed(&e).await);
                    }
                    read_only_once = true;
                    store.link.reset();
                    continue;
                }
                Ok(Err(Failed::Statement(e))) if !is_transient(&e) => {
                    return Err(store.failed(&e).await);
                }
                Ok(Err(Failed::Store(e))) if e.kind != ErrorKind::Unavailable => return Err(e),
                Ok(Err(failed)) => {
                    let why = match failed {
                        Failed::Statement(e) => describe(&e),
                        Failed::Store(e) => e.message,
                    };
                    if !answered && unanswered_until.remaining().is_zero() {
                        return Err(StoreError::unavailable(format!(
                            "could not try for lock {} within {}: {why}",
                            self.lock,
                            crate::clock::show(store.within)
                        )));
                    }
                    log::verbose(format_args!("could not try for lock {}: {why}", self.lock));
                    store.link.reset();
                    // Busy only as last seen: a lock never seen is not
                    // called held (`-n` tries until --connect-timeout).
                    match answered {
                        true => self.pause(backoff.pause(), until).await,
                        false => self.pause(backoff.pause(), Some(unanswered_until)).await,
                    }
                    if answered && until.is_some_and(|at| at.remaining().is_zero()) {
                        return Ok(Turn::Busy);
                    }
                    continue;
                }
                Err(_) if !answered && unanswered_until.remaining().is_zero() => {
                    return Err(store
                        .give_up(&format!(" the take of lock {}", self.lock))
                        .await);
                }
                Err(_) => {
                    log::verbose(format_args!(
                        "no answer within {}; connecting again",
                        crate::clock::show(bound)
                    ));
                    store.link.abandon().await;
                    continue;
                }
            };
            answered = true;
            backoff.reset();
            if until.is_some_and(|at| at.remaining().is_zero()) {
                return Ok(Turn::Busy);
            }
            // Start listening beside the wait: connecting and the probe take
            // round trips, and behind a pooler the probe takes its whole
            // timeout; polling goes on meanwhile.
            if notices.is_none() && listening.is_none() {
                listening = Some(Box::pin(store.notifications()));
            }
            // Wake when the holder's lease ends by the database's clock and
            // by ours, or on a release, or to poll.
            let nap = match (&notices, left) {
                (Some(_), Some(left)) => left + PAST_EXPIRY,
                (Some(_), None) => PAST_EXPIRY,
                (None, left) => left.map_or(POLL_EVERY, |l| l.min(POLL_EVERY)),
            };
            let wake_at = |nap: Duration| match until {
                Some(at) => at.min(Instant::now() + nap),
                None => Instant::now() + nap,
            };
            let mut wake = wake_at(nap);
            // Another waiter named to take the row next: until when it may
            // alone.
            let mut named_other: Option<Instant> = None;
            loop {
                tokio::select! {
                    news = heard(notices.as_mut(), &self.lock) => match news {
                        News::Next(tenure) if tenure != self.session.shared.tenure => {
                            named_other = Some(Instant::now() + NAMED_FIRST);
                            turn_passes_at = named_other;
                        }
                        News::Next(_) => named_other = None,
                        // Let go to another: look once it has had its time,
                        // unless its take is heard first.
                        News::Released => match named_other.filter(|t| !t.remaining().is_zero()) {
                            Some(until) => wake = wake.min(until),
                            None => break,
                        },
                        // The listener was lost: look, and listen again.
                        News::Closed => {
                            notices = None;
                            break;
                        }
                        // The holder lives: its TTL again from now, by
                        // either clock; no statement needed to know it.
                        News::Renewed(version, ttl) => {
                            self.observed.borrow_mut().saw(version, ttl, Instant::now());
                            wake = wake_at(ttl + PAST_EXPIRY);
                            named_other = None;
                        }
                    },
                    listened = async {
                        match listening.as_mut() {
                            Some(listening) => listening.await,
                            None => std::future::pending().await,
                        }
                    }, if listening.is_some() => {
                        listening = None;
                        // Listening now, or never here: either way look again,
                        // as a release before this went unheard.
                        notices = listened;
                        if notices.is_none() && !store.may_listen() {
                            // Not here (a pooler): never.
                            listening = Some(Box::pin(std::future::pending()));
                        }
                        // Not now: again after the next look.
                        break;
                    }
                    () = sleep_until(wake) => break,
                }
            }
        }
    }

    async fn pause(&self, backoff: Duration, until: Option<Instant>) {
        let wake = Instant::now() + backoff;
        sleep_until(until.map_or(wake, |at| at.min(wake))).await;
    }

    /// While we hold the lock: a break request or the end of our row, as
    /// soon as a notification about the lock comes (`elect break` sends
    /// one), else as a renewal finds it. A listener lost (a server
    /// restarted, its backend terminated, an idle timeout) is made again at
    /// once, then after growing pauses; until it is, the renewals judge the
    /// row, as behind a pooler.
    async fn watch(&self) -> Loss {
        let store = self.store();
        // A command that ends at once costs the database no second
        // connection, unless it waited and listens already.
        if !store.listening() {
            tokio::time::sleep(LISTEN_AFTER).await;
        }
        let mut notices = None;
        let mut pause = Duration::ZERO;
        let mut backoff = Backoff::STORE;
        loop {
            let listen = async {
                tokio::time::sleep(pause).await;
                store.notifications().await
            };
            tokio::select! {
                loss = self.session.shared.asked(&self.lock) => return loss,
                listened = listen, if notices.is_none() && store.may_listen() => {
                    notices = listened;
                    if notices.is_none() {
                        pause = backoff.pause();
                        continue;
                    }
                    backoff.reset();
                    // News before we listened was not heard (a `break
                    // --force` in the tenure's first moments, or while the
                    // listener was lost): look once, now that we listen.
                    if let Some(loss) = self.look().await {
                        return loss;
                    }
                }
                news = heard(notices.as_mut(), &self.lock) => match news {
                    News::Closed => {
                        log::verbose(format_args!(
                            "the connection that listens for news of lock {} ended; \
                             listening again",
                            self.lock
                        ));
                        notices = None;
                        pause = Duration::ZERO;
                    }
                    News::Renewed(..) | News::Next(_) => {}
                    News::Released => {
                        if let Some(loss) = self.look().await {
                            return loss;
                        }
                    }
                }
            }
        }
    }

    /// Read our row: is it still ours, and has someone asked us to let go?
    async fn look(&self) -> Option<Loss> {
        let rows = self
            .store()
            .query(&self.store().sql.look, &[(&self.lock, Type::TEXT)])
            .await
            .ok()?;
        let row = rows.first()?;
        // An answer unread, as one not come: the renewals judge the lease.
        let tenure: Option<String> = row.cell(0).ok()?;
        let asked: Option<String> = row.cell(1).ok()?;
        if tenure.as_deref() != Some(&self.session.shared.tenure) {
            return Some(Loss::Gone(format!(
                "the lease row of lock {} was ended or taken over",
                self.lock
            )));
        }
        asked.map(|why| Loss::Asked(format!("{why} asked it to let go")))
    }
}

/// What a notification about one lock told.
enum News {
    /// Let go or ended (or some notifications were missed, one of which may
    /// have said so): look at the row.
    Released,
    /// Renewed or taken: its version now, and its holder's TTL.
    Renewed(Version, Duration),
    /// The release on its way names this tenure to take the row next.
    Next(String),
    /// The listener is gone.
    Closed,
}

/// Wait for a notification about `lock`. Without a listener, never.
async fn heard(rx: Option<&mut broadcast::Receiver<String>>, lock: &str) -> News {
    let Some(rx) = rx else {
        return std::future::pending().await;
    };
    loop {
        match rx.recv().await {
            Ok(name) if name == lock => return News::Released,
            Ok(payload) => {
                if let Some((version, ttl)) = notified(&payload, lock) {
                    return News::Renewed(version, ttl);
                }
                let mut words = payload.split(' ');
                if let (Some("next"), Some(of), Some(tenure)) =
                    (words.next(), words.next(), words.next())
                    && of == lock
                {
                    return News::Next(tenure.to_string());
                }
            }
            Err(broadcast::error::RecvError::Lagged(_)) => return News::Released,
            Err(broadcast::error::RecvError::Closed) => return News::Closed,
        }
    }
}

impl Lock for PgLock<'_> {
    fn key(&self) -> &str {
        &self.key
    }

    fn rank(&self) -> u64 {
        0
    }

    fn wait_turn(&self, until: Option<Instant>) -> Boxed<'_, Result<Turn, StoreError>> {
        Box::pin(self.wait(until))
    }

    fn lost(&self) -> Boxed<'_, Loss> {
        Box::pin(self.watch())
    }

    fn checkpoint(&self) -> Boxed<'_, Result<Option<Checkpoint>, StoreError>> {
        Box::pin(async move { Ok(self.checkpoint.borrow_mut().take()) })
    }

    fn leave(&self) -> Boxed<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let shared = &self.session.shared;
            // Before: no renewal may count it lost once it is let go.
            shared.held.borrow_mut().remove(&self.lock);
            self.store()
                .query(
                    &self.store().sql.leave,
                    &[(&self.lock, Type::TEXT), (&shared.tenure, Type::TEXT)],
                )
                .await?;
            Ok(())
        })
    }
}
