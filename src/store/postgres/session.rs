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

use std::rc::Rc;
use std::time::Duration;

use tokio::sync::broadcast;
use tokio_postgres::types::Type;

use super::conn::{Cells, Link, describe, is_transient};
use super::{POLL_EVERY, Postgres, missing_column, missing_tables, read_only};
use crate::clock::{Instant, sleep_until};
use crate::log;
use crate::store::PAST_EXPIRY;
use crate::store::lease_row::lock::{Place, RowLock};
use crate::store::lease_row::session::RowSession;
use crate::store::lease_row::session::worth_a_take_in;
use crate::store::lease_row::take::{Attempt, Queue, Sorted, Taker, Tries, Try, Waking, wake_at};
use crate::store::lease_row::{Cell, Row, Shared, Version, store::checkpoint_of};
use crate::store::retry::Backoff;
use crate::store::{Boxed, ErrorKind, Lock, Loss, Renewal, Renewer, StoreError};

/// How long a holder's command runs before its elect listens for news of
/// its lock on a second connection.
const LISTEN_AFTER: Duration = Duration::from_millis(200);

pub struct PgSession<'s> {
    store: &'s Postgres,
    shared: Rc<Shared>,
}

impl<'s> PgSession<'s> {
    pub fn new(store: &'s Postgres, ttl: Duration) -> Self {
        PgSession {
            store,
            shared: Rc::new(Shared::new(ttl, ())),
        }
    }

    fn ttl_ms(&self) -> i64 {
        self.shared.ttl.as_millis() as i64
    }
}

impl RowSession for PgSession<'_> {
    type Own = ();

    fn shared(&self) -> &Shared {
        &self.shared
    }

    fn within(&self) -> Duration {
        self.store.within
    }

    fn new_renewer(&self) -> Box<dyn Renewer> {
        Box::new(PgRenewer {
            shared: self.shared.clone(),
            link: self.store.link.clone(),
            statement: self.store.sql.renew.clone(),
            in_flight: false,
        })
    }

    fn lock_at(&self, place: Place) -> Box<dyn Lock + '_> {
        Box::new(PgLock {
            session: self,
            place,
        })
    }

    async fn let_all_go(&self) -> Result<(), StoreError> {
        // Before: no renewal may count them lost once they are let go.
        self.shared.held.borrow_mut().clear();
        self.store
            .query(
                &self.store.sql.release,
                &[(&self.shared.tenure, Type::TEXT)],
            )
            .await?;
        Ok(())
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
    place: Place,
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

impl PgLock<'_> {
    fn store(&self) -> &Postgres {
        self.session.store
    }

    /// One acquisition; with `out_of_turn`, of a free row that a waiter
    /// before us had its time to take.
    async fn try_once(&self, out_of_turn: bool) -> Result<Attempt<()>, Failed> {
        let shared = &self.session.shared;
        let client = self.store().link.client().await.map_err(Failed::Store)?;
        let ttl_ms = self.session.ttl_ms();
        let (tenure, renewals, micros) = Version::ripe(&self.place.observed.borrow());
        let sent = Instant::now();
        let rows = client
            .query_typed(
                &self.store().sql.acquire,
                &[
                    (&self.place.lock, Type::TEXT),
                    (&shared.tenure, Type::TEXT),
                    (&ttl_ms, Type::INT8),
                    (&self.place.record, Type::TEXT),
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
            shared.held.borrow_mut().insert(self.place.lock.clone());
            let cells = Row(vec![
                row.cell::<Option<String>>(3)?
                    .map_or(Cell::Null, Cell::Text),
                row.cell::<Option<i64>>(4)?.map_or(Cell::Null, Cell::Int),
                row.cell::<Option<String>>(5)?
                    .map_or(Cell::Null, Cell::Text),
            ]);
            *self.place.checkpoint.borrow_mut() = checkpoint_of(&cells, 0)?;
            return Ok(Attempt::Ours(fence as u64, sent));
        }
        if row.cell::<Option<bool>>(12)? == Some(true) {
            return Ok(Attempt::Deferred);
        }
        let mut observed = self.place.observed.borrow_mut();
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
                    self.place.lock,
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
        Ok(Attempt::Busy((!wait.is_zero()).then_some(wait), ()))
    }

    /// While we hold the lock: a break request or the end of our row, as
    /// soon as a notification about the lock comes (`elect break` sends
    /// one), else as a renewal finds it. A listener lost (a server
    /// restarted, its backend terminated, an idle timeout) is made again at
    /// once, then after growing pauses; until it is, the renewals judge the
    /// row, as behind a pooler.
    async fn listen_while_held(&self) -> Loss {
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
                loss = self.session.shared.asked(&self.place.lock) => return loss,
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
                news = heard(notices.as_mut(), &self.place.lock) => match news {
                    News::Closed => {
                        log::verbose(format_args!(
                            "the connection that listens for news of lock {} ended; \
                             listening again",
                            self.place.lock
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
            .query(&self.store().sql.look, &[(&self.place.lock, Type::TEXT)])
            .await
            .ok()?;
        let row = rows.first()?;
        // An answer unread, as one not come: the renewals judge the lease.
        let tenure: Option<String> = row.cell(0).ok()?;
        let asked: Option<String> = row.cell(1).ok()?;
        if tenure.as_deref() != Some(&self.session.shared.tenure) {
            return Some(Loss::Gone(format!(
                "the lease row of lock {} was ended or taken over",
                self.place.lock
            )));
        }
        asked.map(|why| Loss::Asked(format!("{why} asked it to let go")))
    }
}

/// A wait for the row of a [`PgLock`]: the loop is the core's; an attempt
/// is one statement that takes the row or queues us, and the wake-up is a
/// notification, or polling where we cannot LISTEN.
impl<'s> Taker for PgLock<'s> {
    type Hint = ();
    type Failed = Failed;

    fn place(&self) -> &Place {
        &self.place
    }

    async fn attempt(&self, how: Try) -> Result<Attempt<()>, Failed> {
        self.try_once(how.out_of_turn).await
    }

    async fn sort(&self, failed: Failed, tries: &Tries) -> Sorted<Failed> {
        let store = self.store();
        match failed {
            Failed::Statement(e) if (missing_tables(&e) || missing_column(&e)) && !tries.set_up => {
                Sorted::SetUp
            }
            // Once more on a new connection, which may reach another
            // server of the URL's; a second time, it is what we have.
            Failed::Statement(e) if read_only(&e) => match tries.again {
                true => Sorted::Fatal(store.failed(&e).await),
                false => {
                    store.link.reset();
                    Sorted::Again
                }
            },
            Failed::Statement(e) if !is_transient(&e) => Sorted::Fatal(store.failed(&e).await),
            Failed::Store(e) if e.kind != ErrorKind::Unavailable => Sorted::Fatal(e),
            failed => Sorted::Transient(failed),
        }
    }

    async fn set_up(&self) -> Result<(), StoreError> {
        self.store().set_up().await
    }

    async fn late(&self, failed: Failed) -> StoreError {
        StoreError::unavailable(format!(
            "could not try for lock {} within {}: {}",
            self.place.lock,
            crate::clock::show(self.store().within),
            Self::describe(&failed)
        ))
    }

    fn describe(failed: &Failed) -> String {
        match failed {
            Failed::Statement(e) => describe(e),
            Failed::Store(e) => e.message.clone(),
        }
    }

    async fn recover(&self) {
        self.store().link.reset();
    }

    async fn abandon(&self) {
        self.store().link.abandon().await;
    }

    async fn give_up(&self) -> StoreError {
        self.store()
            .give_up(&format!(" the take of lock {}", self.place.lock))
            .await
    }

    fn waking(&self) -> impl Waking<()> + '_ {
        Listener {
            lock: self,
            notices: None,
            listening: None,
        }
    }
}

/// A waiter's ear for news of its lock.
struct Listener<'a> {
    lock: &'a PgLock<'a>,
    notices: Option<broadcast::Receiver<String>>,
    /// A listener on its way.
    listening: Option<Boxed<'a, Option<broadcast::Receiver<String>>>>,
}

impl Waking<()> for Listener<'_> {
    async fn nap(
        &mut self,
        left: Option<Duration>,
        (): (),
        until: Option<Instant>,
        queue: &mut Queue,
    ) {
        let lock = self.lock;
        let store = lock.store();
        // Start listening beside the wait: connecting and the probe take
        // round trips, and behind a pooler the probe takes its whole
        // timeout; polling goes on meanwhile.
        if self.notices.is_none() && self.listening.is_none() {
            self.listening = Some(Box::pin(store.notifications()));
        }
        // Wake when the holder's lease ends by the database's clock and
        // by ours, or on a release, or to poll.
        let nap = match (&self.notices, left) {
            (Some(_), Some(left)) => left + PAST_EXPIRY,
            (Some(_), None) => PAST_EXPIRY,
            (None, left) => left.map_or(POLL_EVERY, |l| l.min(POLL_EVERY)),
        };
        let mut wake = wake_at(nap, until);
        // Another waiter named to take the row next: until when it may
        // alone.
        let mut named_other: Option<Instant> = None;
        loop {
            tokio::select! {
                news = heard(self.notices.as_mut(), &lock.place.lock) => match news {
                    News::Next(tenure) if tenure != lock.session.shared.tenure => {
                        named_other = Some(queue.named_other());
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
                        self.notices = None;
                        break;
                    }
                    // The holder lives: its TTL again from now, by
                    // either clock; no statement needed to know it.
                    News::Renewed(version, ttl) => {
                        lock.place.observed.borrow_mut().saw(version, ttl, Instant::now());
                        wake = wake_at(ttl + PAST_EXPIRY, until);
                        named_other = None;
                    }
                },
                listened = async {
                    match self.listening.as_mut() {
                        Some(listening) => listening.await,
                        None => std::future::pending().await,
                    }
                }, if self.listening.is_some() => {
                    self.listening = None;
                    // Listening now, or never here: either way look again,
                    // as a release before this went unheard.
                    self.notices = listened;
                    if self.notices.is_none() && !store.may_listen() {
                        // Not here (a pooler): never.
                        self.listening = Some(Box::pin(std::future::pending()));
                    }
                    // Not now: again after the next look.
                    break;
                }
                () = sleep_until(wake) => break,
            }
        }
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

impl RowLock for PgLock<'_> {
    async fn watch(&self) -> Loss {
        self.listen_while_held().await
    }

    async fn let_go(&self) -> Result<(), StoreError> {
        let shared = &self.session.shared;
        // Before: no renewal may count it lost once it is let go.
        shared.held.borrow_mut().remove(&self.place.lock);
        self.store()
            .query(
                &self.store().sql.leave,
                &[(&self.place.lock, Type::TEXT), (&shared.tenure, Type::TEXT)],
            )
            .await?;
        Ok(())
    }
}
