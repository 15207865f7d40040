//! A session on MySQL or MariaDB: its id, the rows it holds, and the
//! renewals that keep them.
//!
//! There is no lease object in the database; the session's lease is the
//! `expires_at` of each row it holds, all renewed by one UPDATE. The
//! deadline elect keeps counts from the send time of the last renewal that
//! confirmed every row we hold. A renewal sent while an acquisition is on
//! its way may miss the row being taken; the lease loop's rule for a lock
//! taken by a request of its own covers that (the turn says when the take
//! left: `crate::lease`). A renewal judges only the rows held both when it
//! left and when it came back, and a row is forgotten before the statement
//! that lets it go is sent.
//!
//! A waiter takes a row its holder has not let go only once it has seen it
//! unchanged for the holder's TTL on its own clock ([`Observed`]), so a
//! step of the database's clock hands over no live lock.
//!
//! Without NOTIFY, a waiter learns of a release by a doorbell: once a row
//! is its, the holder takes a named lock (`GET_LOCK`) for its tenure on a
//! connection of the lock's own, and lets it go just after it frees the
//! row; the server lets it go too when that connection ends, as it does
//! when elect dies. A waiter blocks on the holder's doorbell, on a
//! connection of its own, until the row is worth a take by the database's
//! clock and by ours, then reads the row again. The doorbell only wakes:
//! exclusion and the token are the row's alone, so a doorbell never rung
//! or lost (a connection cut, a proxy that spreads statements over
//! connections) costs time, never safety. A waiter that finds it free
//! while the row is still held reads the row again 5 ms later, then at
//! twice the gap up to [`POLL_EVERY`], until the row changes or the bell
//! is held again; each renewal finds out whether the holder's doorbell is
//! held, and takes it again where it is not.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::time::Duration;

use super::conn::{Failed, Link, cell, code, p};

mod doorbell;
use doorbell::Doorbell;

use super::{MySql, sql::Sql};
use crate::clock::Instant;
use crate::log;
use crate::store::lease_row::lock::{Place, RowLock};
use crate::store::lease_row::session::RowSession;
use crate::store::lease_row::session::worth_a_take_in;
use crate::store::lease_row::store::checkpoint_of;
use crate::store::lease_row::take::{Attempt, Sorted, Taker, Tries, Try, Waking};
use crate::store::lease_row::{self, Cell as Value, Version};
use crate::store::retry;
use crate::store::{Boxed, Checkpoint, Lock, Loss, Renewal, Renewer, StoreError};

/// What a session adds to the [`Shared`] of every lease-row session.
#[derive(Default)]
pub struct Own {
    /// The locks we are queued for.
    queued: RefCell<BTreeSet<String>>,
    /// The doorbells of the rows we hold, by lock: the fence and the
    /// connection that holds the bell.
    bells: RefCell<BTreeMap<String, (i64, Link)>>,
    /// Locks whose doorbell a renewal found gone, for their holder to hang
    /// again (off the renewal's path: a ring may wait).
    silent: RefCell<BTreeSet<String>>,
}

type Shared = lease_row::Shared<Own>;

fn ttl_us(shared: &Shared) -> i64 {
    shared.ttl.as_micros() as i64
}

pub struct MySession<'s> {
    store: &'s MySql,
    shared: Rc<Shared>,
}

impl<'s> MySession<'s> {
    pub fn new(store: &'s MySql, ttl: Duration) -> Self {
        MySession {
            store,
            shared: Rc::new(Shared::new(ttl, Own::default())),
        }
    }
}

impl RowSession for MySession<'_> {
    type Own = Own;

    fn shared(&self) -> &Shared {
        &self.shared
    }

    fn within(&self) -> Duration {
        self.store.within
    }

    fn new_renewer(&self) -> Box<dyn Renewer> {
        Box::new(MyRenewer {
            shared: self.shared.clone(),
            link: self.store.link.clone(),
            sql: self.store.sql.clone(),
        })
    }

    fn lock_at(&self, place: Place) -> Box<dyn Lock + '_> {
        Box::new(MyLock {
            session: self,
            place,
            bell: self.store.link.fresh(),
            fence: Cell::new(None),
        })
    }

    async fn let_all_go(&self) -> Result<(), StoreError> {
        // Before: no renewal may count them lost once they are let go.
        self.shared.held.borrow_mut().clear();
        self.shared.own.queued.borrow_mut().clear();
        let released = self.store.release(&self.shared.tenure).await;
        // After: a waiter woken finds the rows free. A connection that
        // ends lets its doorbells go: no statement to wait for.
        let bells = std::mem::take(&mut *self.shared.own.bells.borrow_mut());
        for (_, (_, link)) in bells {
            link.reset();
        }
        released
    }
}

/// Renews every row of the session in one statement, and reads which are
/// still ours.
struct MyRenewer {
    shared: Rc<Shared>,
    link: Link,
    sql: Rc<Sql>,
}

impl MyRenewer {
    async fn exec(
        &self,
        statement: &str,
        params: Vec<mysql_async::Value>,
    ) -> Result<Vec<mysql_async::Row>, StoreError> {
        let patience = self.shared.ttl;
        match self.link.exec(statement, params, patience).await {
            Ok((rows, _)) => Ok(rows),
            Err(Failed::Link(e)) => Err(e),
            Err(e) => Err(StoreError::unavailable(e.text())),
        }
    }
}

impl Renewer for MyRenewer {
    fn renew(&mut self) -> Boxed<'_, Result<Renewal, StoreError>> {
        Box::pin(async move {
            let held = self.shared.held.borrow().clone();
            let tenure = self.shared.tenure.as_str();
            let ttl_us = ttl_us(&self.shared);
            if !self.shared.own.queued.borrow().is_empty() {
                self.exec(&self.sql.renew_queued, vec![p(ttl_us), p(tenure)])
                    .await?;
            }
            if held.is_empty() {
                if self.shared.own.queued.borrow().is_empty() {
                    self.exec("SELECT 1", Vec::new()).await?;
                }
                return Ok(Renewal::Alive(self.shared.ttl));
            }
            self.exec(&self.sql.renew, vec![p(ttl_us), p(tenure)])
                .await?;
            let rows = self.exec(&self.sql.renewed, vec![p(tenure)]).await?;
            let mut renewed = Vec::new();
            let mut silent = Vec::new();
            for row in &rows {
                let lock: String = cell(row, 0)?;
                if !cell::<bool>(row, 2)? {
                    silent.push(lock.clone());
                }
                renewed.push((lock, cell::<Option<String>>(row, 1)?));
            }
            if let Renewal::Gone(why) = self.shared.judge(&held, renewed) {
                return Ok(Renewal::Gone(why));
            }
            // Its connection ended: waiters fell back to reading the row;
            // the lock's holder hangs the doorbell again.
            let bells = self.shared.own.bells.borrow();
            let silent: Vec<String> = silent
                .into_iter()
                .filter(|l| bells.contains_key(l))
                .collect();
            if !silent.is_empty() {
                self.shared.own.silent.borrow_mut().extend(silent);
                self.shared.news.notify_waiters();
            }
            Ok(Renewal::Alive(self.shared.ttl))
        })
    }

    fn reset(&mut self) {
        self.link = self.link.fresh();
    }
}

/// A place in the race for one lock's row.
struct MyLock<'s> {
    session: &'s MySession<'s>,
    place: Place,
    /// The lock's second connection: a waiter blocks on the holder's
    /// doorbell there, and the holder hangs its own.
    bell: Link,
    /// Our fence, once the row is ours.
    fence: Cell<Option<i64>>,
}

/// A lease row as read.
struct Seen {
    tenure: Option<String>,
    fence: i64,
    version: Version,
    ttl: Option<Duration>,
    /// Time left by the database's clock; `None` once expired.
    left: Option<Duration>,
    checkpoint: Option<Checkpoint>,
    /// Let go on another server: the take that followed may have been
    /// lost with the old primary.
    unsettled: bool,
}

fn millis(ms: Option<i64>) -> Option<Duration> {
    ms.map(|ms| Duration::from_millis(ms.max(0) as u64))
}

impl MyLock<'_> {
    fn store(&self) -> &MySql {
        self.session.store
    }

    fn tenure(&self) -> &str {
        &self.session.shared.tenure
    }

    async fn exec(
        &self,
        statement: &str,
        params: Vec<mysql_async::Value>,
    ) -> Result<(Vec<mysql_async::Row>, u64), Failed> {
        let patience = retry::attempt_within(self.session.shared.ttl);
        self.store().link.exec(statement, params, patience).await
    }

    /// The lock's row, if it exists.
    async fn look(&self) -> Result<Option<Seen>, Failed> {
        let (rows, _) = self
            .exec(&self.store().sql.row, vec![p(self.place.lock.as_str())])
            .await?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let bad = Failed::Link;
        let tenure: Option<String> = cell(row, 0).map_err(bad)?;
        Ok(Some(Seen {
            fence: cell(row, 1).map_err(bad)?,
            version: Version {
                tenure: tenure.clone(),
                renewals: cell(row, 2).map_err(bad)?,
                micros: cell(row, 3).map_err(bad)?,
            },
            tenure,
            ttl: millis(cell(row, 4).map_err(bad)?),
            left: millis(cell(row, 5).map_err(bad)?),
            checkpoint: {
                let cells = lease_row::Row(vec![
                    cell::<Option<String>>(row, 6)
                        .map_err(bad)?
                        .map_or(Value::Null, Value::Text),
                    cell::<Option<i64>>(row, 7)
                        .map_err(bad)?
                        .map_or(Value::Null, Value::Int),
                    cell::<Option<String>>(row, 8)
                        .map_err(bad)?
                        .map_or(Value::Null, Value::Text),
                ]);
                checkpoint_of(&cells, 0).map_err(bad)?
            },
            unsettled: cell::<Option<i64>>(row, 9).map_err(bad)? == Some(1),
        }))
    }

    /// Judge a row held by someone else: how long until it is worth a
    /// take, by the database's clock and by ours (zero: now).
    fn judge(&self, seen: Seen, answered: Instant) -> Duration {
        let shared = &self.session.shared;
        let mut observed = self.place.observed.borrow_mut();
        observed.saw(seen.version, seen.ttl.unwrap_or(shared.ttl), answered);
        worth_a_take_in(&observed, seen.left)
    }

    /// One acquisition: with `look_first`, a read alone while the row is
    /// still busy.
    async fn try_once(&self, look_first: bool) -> Result<Attempt<Option<i64>>, Failed> {
        let shared = &self.session.shared;
        if look_first
            && let Some(seen) = self.look().await?
            && seen.tenure.as_deref().is_some_and(|t| t != self.tenure())
        {
            let fence = seen.fence;
            let wait = self.judge(seen, Instant::now());
            if !wait.is_zero() {
                return Ok(Attempt::Busy(Some(wait), Some(fence)));
            }
        }
        let (t, r, m) = Version::ripe(&self.place.observed.borrow());
        let tenure = self.tenure();
        let sent = Instant::now();
        let take = vec![
            p(tenure),
            p(tenure),
            p(tenure),
            p(self.place.record.as_str()),
            p(tenure),
            p(ttl_us(shared)),
            p(self.place.lock.as_str()),
            p(tenure),
            p(t),
            p(r),
            p(m),
        ];
        let (_, matched) = self.exec(&self.store().sql.take, take).await?;
        let (sent, seen) = match matched {
            0 => match self.look().await? {
                Some(seen) => (sent, seen),
                None => {
                    // The lock's first take: a row of its own, fence 1.
                    let sent = Instant::now();
                    let insert = vec![
                        p(self.place.lock.as_str()),
                        p(tenure),
                        p(ttl_us(shared)),
                        p(self.place.record.as_str()),
                    ];
                    match self.exec(&self.store().sql.insert, insert).await {
                        Ok(_) => {}
                        // Made meanwhile: look again at once.
                        Err(e) if e.code() == Some(code::DUPLICATE_KEY) => {
                            return Ok(Attempt::Busy(None, None));
                        }
                        Err(e) => return Err(e),
                    }
                    match self.look().await? {
                        Some(seen) => (sent, seen),
                        None => return Ok(Attempt::Busy(None, None)),
                    }
                }
            },
            _ => (
                sent,
                self.look()
                    .await?
                    .ok_or(Failed::Link(StoreError::unavailable(
                        "the lease row vanished",
                    )))?,
            ),
        };
        let answered = Instant::now();
        if seen.tenure.as_deref() == Some(tenure) {
            shared.held.borrow_mut().insert(self.place.lock.clone());
            shared.own.queued.borrow_mut().remove(&self.place.lock);
            *self.place.checkpoint.borrow_mut() = seen.checkpoint;
            self.fence.set(Some(seen.fence));
            let unqueue = vec![p(self.place.lock.as_str()), p(tenure)];
            if let Err(e) = self.exec(&self.store().sql.unqueue_taken, unqueue).await {
                log::verbose(format_args!(
                    "leaving the queue of {}: {}",
                    self.place.lock,
                    e.text()
                ));
            }
            return Ok(Attempt::Ours(seen.fence as u64, sent));
        }
        if seen.tenure.is_none() && seen.unsettled {
            let wait =
                self.place
                    .observed
                    .borrow_mut()
                    .wait_out(seen.version, shared.ttl, answered);
            log::verbose(format_args!(
                "lock {} was let go on another server (a failover); taking it in {}, once no \
                 take lost with the old primary can be alive",
                self.place.lock,
                crate::clock::show(wait)
            ));
            return Ok(Attempt::Unsettled(wait));
        }
        if seen.tenure.is_none() {
            // Let go between the take and the look.
            self.place.observed.borrow_mut().forget();
            return Ok(Attempt::Busy(None, None));
        }
        let fence = seen.fence;
        let wait = self.judge(seen, answered);
        if !shared.own.queued.borrow().contains(&self.place.lock) {
            let queue = vec![p(self.place.lock.as_str()), p(tenure), p(ttl_us(shared))];
            self.exec(&self.store().sql.queue, queue).await?;
            shared
                .own
                .queued
                .borrow_mut()
                .insert(self.place.lock.clone());
        }
        Ok(Attempt::Busy(
            (!wait.is_zero()).then_some(wait),
            Some(fence),
        ))
    }
}

/// A wait for the row of a [`MyLock`]: the loop is the core's; an attempt
/// takes, looks, makes the row or queues us, and the wake-up is the
/// holder's doorbell.
impl<'s> Taker for MyLock<'s> {
    /// The fence of the holder, whose doorbell tells of its release.
    type Hint = Option<i64>;
    type Failed = Failed;

    fn place(&self) -> &Place {
        &self.place
    }

    async fn attempt(&self, how: Try) -> Result<Attempt<Option<i64>>, Failed> {
        self.try_once(how.look_first).await
    }

    async fn sort(&self, failed: Failed, tries: &Tries) -> Sorted<Failed> {
        match failed {
            e if e.code() == Some(code::NO_SUCH_TABLE) && !tries.set_up => Sorted::SetUp,
            e if !e.is_transient() => Sorted::Fatal(self.store().failed(&e).await),
            e => Sorted::Transient(e),
        }
    }

    async fn set_up(&self) -> Result<(), StoreError> {
        self.store().set_up().await
    }

    async fn late(&self, failed: Failed) -> StoreError {
        self.store().failed(&failed).await
    }

    fn describe(failed: &Failed) -> String {
        failed.text()
    }

    async fn recover(&self) {
        self.store().link.reset();
        self.store().link.cancel_unanswered().await;
    }

    async fn abandon(&self) {
        self.recover().await;
    }

    async fn give_up(&self) -> StoreError {
        self.store().link.reset();
        self.store()
            .give_up(&format!(" the take of lock {}", self.place.lock))
            .await
    }

    fn waking(&self) -> impl Waking<Option<i64>> + '_ {
        Doorbell {
            lock: self,
            gap: None,
        }
    }
}

impl RowLock for MyLock<'_> {
    /// A break request or the end of our row, as a renewal finds it;
    /// meanwhile our doorbell is hung, and hung again when a renewal finds
    /// it gone. Here, beside the command's start and not before it: an
    /// uncontended run need not wait for its second connection.
    async fn watch(&self) -> Loss {
        tokio::select! {
            loss = self.session.shared.asked(&self.place.lock) => loss,
            never = self.keep_bell() => match never {},
        }
    }

    async fn let_go(&self) -> Result<(), StoreError> {
        let shared = &self.session.shared;
        // Before: no renewal may count it lost once it is let go.
        shared.held.borrow_mut().remove(&self.place.lock);
        shared.own.queued.borrow_mut().remove(&self.place.lock);
        let params = vec![p(self.place.lock.as_str()), p(self.tenure())];
        self.store()
            .query(&self.store().sql.leave, params.clone())
            .await?;
        self.store()
            .query(&self.store().sql.leave_queue, params)
            .await?;
        let bell = shared.own.bells.borrow_mut().remove(&self.place.lock);
        if let Some((_, link)) = bell {
            link.reset();
        }
        Ok(())
    }
}
