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
use super::{MySql, POLL_EVERY, sql::Sql};
use crate::clock::{Instant, sleep_until};
use crate::log;
use crate::store::lease_row::session::worth_a_take_in;
use crate::store::lease_row::store::checkpoint_of;
use crate::store::lease_row::{self, Cell as Value, Version, key};
use crate::store::observed::Observed;
use crate::store::retry::{self, Backoff};
use crate::store::{
    Boxed, Checkpoint, HolderRecord, Lock, Loss, Renewal, Renewer, Session, StoreError, Turn,
};
use crate::store::{PAST_EXPIRY, Token};

/// What a session adds to the [`Shared`] of every lease-row session.
#[derive(Default)]
struct Own {
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
    granted_at: Instant,
}

impl<'s> MySession<'s> {
    pub fn new(store: &'s MySql, ttl: Duration) -> Self {
        MySession {
            store,
            shared: Rc::new(Shared::new(ttl, Own::default())),
            granted_at: Instant::now(),
        }
    }
}

impl Session for MySession<'_> {
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
        Box::new(MyRenewer {
            shared: self.shared.clone(),
            link: self.store.link.clone(),
            sql: self.store.sql.clone(),
        })
    }

    fn join(
        &self,
        lock: String,
        record: HolderRecord,
    ) -> Boxed<'_, Result<Box<dyn Lock + '_>, StoreError>> {
        Box::pin(async move {
            let lock: Box<dyn Lock + '_> = Box::new(MyLock {
                session: self,
                key: key(&lock, &self.shared.tenure),
                record: record.acquired_now().to_json(),
                lock,
                checkpoint: RefCell::new(None),
                observed: RefCell::new(Observed::new()),
                bell: self.store.link.fresh(),
                fence: Cell::new(None),
            });
            Ok(lock)
        })
    }

    fn release(&self) -> Boxed<'_, Result<(), StoreError>> {
        Box::pin(async move {
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
        })
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
    lock: String,
    key: String,
    record: String,
    /// The checkpoint, as the take found the row.
    checkpoint: RefCell<Option<Checkpoint>>,
    /// The holder's row as we have seen it, and since when.
    observed: RefCell<Observed<Version>>,
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

/// What one acquisition attempt found.
enum Attempt {
    /// Ours, with this token, by the statement sent at this instant.
    Ours(u64, Instant),
    /// Busy; worth another look in this long (`None`: at once, a race),
    /// and the fence of its holder, whose doorbell tells of a release.
    Busy(Option<Duration>, Option<i64>),
    /// Let go on another server, so perhaps taken since on the old
    /// primary; ours to take once it has stayed so this long.
    Unsettled(Duration),
}

/// What a waiter heard at a holder's doorbell.
enum Heard {
    /// It was free: the holder let go of it, or its connection ended.
    Free,
    /// The time was up.
    Quiet,
    /// No answer: the second connection failed.
    Nothing,
}

/// Hang the doorbell of `lock`'s row held with `fence`. Logged, never
/// fatal: without it waiters read the row.
async fn ring(sql: &Sql, link: &Link, lock: &str, fence: i64, ttl: Duration) {
    let patience = retry::attempt_within(ttl);
    let answer = link
        .exec(&sql.ring, vec![p(lock), p(fence)], patience)
        .await;
    match answer.map(|(rows, _)| rows.first().and_then(|r| r.get::<Option<i64>, _>(0))) {
        Ok(Some(Some(1))) => {}
        Ok(_) => log::verbose(format_args!(
            "the doorbell of lock {lock} is held elsewhere; waiters will read the row"
        )),
        Err(e) => {
            link.reset();
            log::verbose(format_args!(
                "cannot hang the doorbell of lock {lock}: {}",
                e.text()
            ));
        }
    }
}

/// Let the doorbell of `lock` go; where that fails, drop its connection,
/// which lets it go as well.
async fn unring(sql: &Sql, link: &Link, lock: &str, fence: i64, ttl: Duration) {
    let patience = retry::attempt_within(ttl);
    if link
        .exec(&sql.unring, vec![p(lock), p(fence)], patience)
        .await
        .is_err()
    {
        link.reset();
    }
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
            .exec(&self.store().sql.row, vec![p(self.lock.as_str())])
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
        let mut observed = self.observed.borrow_mut();
        observed.saw(seen.version, seen.ttl.unwrap_or(shared.ttl), answered);
        worth_a_take_in(&observed, seen.left)
    }

    /// One acquisition: with `look_first`, a read alone while the row is
    /// still busy.
    async fn attempt(&self, look_first: bool) -> Result<Attempt, Failed> {
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
        let (t, r, m) = Version::ripe(&self.observed.borrow());
        let tenure = self.tenure();
        let sent = Instant::now();
        let take = vec![
            p(tenure),
            p(tenure),
            p(tenure),
            p(self.record.as_str()),
            p(tenure),
            p(ttl_us(shared)),
            p(self.lock.as_str()),
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
                        p(self.lock.as_str()),
                        p(tenure),
                        p(ttl_us(shared)),
                        p(self.record.as_str()),
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
            shared.held.borrow_mut().insert(self.lock.clone());
            shared.own.queued.borrow_mut().remove(&self.lock);
            *self.checkpoint.borrow_mut() = seen.checkpoint;
            self.fence.set(Some(seen.fence));
            let unqueue = vec![p(self.lock.as_str()), p(tenure)];
            if let Err(e) = self.exec(&self.store().sql.unqueue_taken, unqueue).await {
                log::verbose(format_args!(
                    "leaving the queue of {}: {}",
                    self.lock,
                    e.text()
                ));
            }
            return Ok(Attempt::Ours(seen.fence as u64, sent));
        }
        if seen.tenure.is_none() && seen.unsettled {
            let wait = self
                .observed
                .borrow_mut()
                .wait_out(seen.version, shared.ttl, answered);
            log::verbose(format_args!(
                "lock {} was let go on another server (a failover); taking it in {}, once no \
                 take lost with the old primary can be alive",
                self.lock,
                crate::clock::show(wait)
            ));
            return Ok(Attempt::Unsettled(wait));
        }
        if seen.tenure.is_none() {
            // Let go between the take and the look.
            self.observed.borrow_mut().forget();
            return Ok(Attempt::Busy(None, None));
        }
        let fence = seen.fence;
        let wait = self.judge(seen, answered);
        if !shared.own.queued.borrow().contains(&self.lock) {
            let queue = vec![p(self.lock.as_str()), p(tenure), p(ttl_us(shared))];
            self.exec(&self.store().sql.queue, queue).await?;
            shared.own.queued.borrow_mut().insert(self.lock.clone());
        }
        Ok(Attempt::Busy(
            (!wait.is_zero()).then_some(wait),
            Some(fence),
        ))
    }

    /// Block on the doorbell of the holder with `fence` for at most
    /// `within`.
    async fn listen(&self, fence: i64, within: Duration) -> Heard {
        let sql = &self.store().sql;
        let lock = self.lock.as_str();
        let seconds = within.as_secs_f64();
        let patience = within + retry::attempt_within(self.session.shared.ttl);
        let params = vec![p(lock), p(fence), p(seconds)];
        // The bound covers a connect as well: a server out of reach holds
        // the waiter no longer than a statement.
        let answer =
            match tokio::time::timeout(patience, self.bell.exec(&sql.listen, params, patience))
                .await
            {
                Ok(answer) => answer,
                Err(_) => Err(Failed::Link(StoreError::unavailable(
                    "the doorbell's connection did not answer",
                ))),
            };
        match answer.map(|(rows, _)| rows.first().and_then(|r| r.get::<Option<i64>, _>(0))) {
            Ok(Some(Some(1))) => {
                // Ours for a moment: give it back, for the holder's own.
                unring(sql, &self.bell, lock, fence, self.session.shared.ttl).await;
                Heard::Free
            }
            Ok(Some(Some(_))) => Heard::Quiet,
            Ok(_) => Heard::Nothing,
            Err(e) => {
                log::verbose(format_args!(
                    "cannot wait at the doorbell of lock {lock}: {}",
                    e.text()
                ));
                self.bell.reset();
                Heard::Nothing
            }
        }
    }

    /// Until `left` has passed (or `until`), or the holder with `fence`
    /// lets go. `gap`: how long to wait first, since its doorbell was
    /// found free while its row was still held.
    async fn nap(
        &self,
        left: Duration,
        fence: i64,
        until: Option<Instant>,
        gap: &mut Option<(i64, Backoff)>,
    ) {
        let end = Instant::now() + left;
        let end = until.map_or(end, |at| at.min(end));
        if let Some((f, wait)) = gap
            && *f == fence
        {
            sleep_until(end.min(Instant::now() + wait.pause())).await;
        }
        let within = end.remaining();
        if within.is_zero() {
            return;
        }
        match self.listen(fence, within).await {
            Heard::Free => {
                if gap.as_ref().is_none_or(|(f, _)| *f != fence) {
                    *gap = Some((fence, Backoff::new(FIRST_GAP, POLL_EVERY)));
                }
            }
            Heard::Quiet => {
                *gap = None;
                // A server that rounds the time down answers early.
                sleep_until(end.min(Instant::now() + POLL_EVERY)).await;
            }
            Heard::Nothing => sleep_until(end.min(Instant::now() + POLL_EVERY)).await,
        }
    }

    /// Try until the row is ours; set up the tables on first use.
    async fn wait(&self, until: Option<Instant>) -> Result<Turn, StoreError> {
        let store = self.store();
        // A statement that hangs on a dead connection is given up and
        // tried on a new one: a take sent again is safe.
        let patience = retry::attempt_within(self.session.shared.ttl);
        let mut set_up = false;
        let mut look_first = false;
        let mut backoff = Backoff::STORE;
        let mut gap = None;
        // Until the server first answers an attempt, the wait is bounded by
        // --connect-timeout, as every call before we are queued; after,
        // attempts go on until the lock is ours.
        let unanswered_until = Instant::now() + store.within;
        let mut answered = false;
        loop {
            let bound = match answered {
                true => patience,
                false => patience.min(unanswered_until.remaining()),
            };
            let left = match tokio::time::timeout(bound, self.attempt(look_first)).await {
                Ok(Ok(Attempt::Ours(token, sent))) => {
                    return Ok(Turn::First {
                        token: Token::new(token),
                        taken: Some(sent),
                    });
                }
                Ok(Ok(Attempt::Busy(left, fence))) => (left, fence),
                // Not held by anyone we can see: no `-n` or `--wait` gives
                // up on it, the wait is one TTL once a failover.
                Ok(Ok(Attempt::Unsettled(left))) => {
                    answered = true;
                    sleep_until(Instant::now() + left + PAST_EXPIRY).await;
                    continue;
                }
                Ok(Err(e)) if e.code() == Some(code::NO_SUCH_TABLE) && !set_up => {
                    set_up = true;
                    store.set_up().await?;
                    continue;
                }
                Ok(Err(e)) if !e.is_transient() => return Err(store.failed(&e).await),
                Ok(Err(e)) if !answered && unanswered_until.remaining().is_zero() => {
                    return Err(store.failed(&e).await);
                }
                Ok(Err(e)) => {
                    log::verbose(format_args!(
                        "could not try for lock {}: {}",
                        self.lock,
                        e.text()
                    ));
                    store.link.reset();
                    store.link.cancel_unanswered().await;
                    // Busy only as last seen: a lock never seen is not
                    // called held (`-n` tries until --connect-timeout).
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
                    store.link.reset();
                    return Err(store
                        .give_up(&format!(" the take of lock {}", self.lock))
                        .await);
                }
                Err(_) => {
                    log::verbose(format_args!(
                        "no answer within {}; connecting again",
                        crate::clock::show(bound)
                    ));
                    store.link.reset();
                    store.link.cancel_unanswered().await;
                    continue;
                }
            };
            answered = true;
            let (left, fence) = left;
            backoff.reset();
            look_first = left.is_some();
            if until.is_some_and(|at| at.remaining().is_zero()) {
                return Ok(Turn::Busy);
            }
            // Wake when the holder's lease ends by the database's clock and
            // by ours, or at its release.
            match (left, fence) {
                (Some(left), Some(fence)) => self.nap(left, fence, until, &mut gap).await,
                _ => {
                    let wake = Instant::now() + FIRST_GAP;
                    sleep_until(until.map_or(wake, |at| at.min(wake))).await;
                }
            }
        }
    }

    /// Hang the doorbell of the row we hold.
    async fn hang_bell(&self) {
        let shared = &self.session.shared;
        let Some(fence) = self.fence.get() else {
            return;
        };
        // Before: a renewal hangs it again if this one fails.
        shared
            .own
            .bells
            .borrow_mut()
            .insert(self.lock.clone(), (fence, self.bell.clone()));
        ring(&self.store().sql, &self.bell, &self.lock, fence, shared.ttl).await;
    }

    /// Hang our doorbell, and again each time a renewal finds it gone.
    async fn keep_bell(&self) -> std::convert::Infallible {
        let shared = &self.session.shared;
        loop {
            self.hang_bell().await;
            loop {
                let news = shared.news.notified();
                if shared.own.silent.borrow_mut().remove(&self.lock) {
                    self.bell.reset();
                    break;
                }
                news.await;
            }
        }
    }
}

/// The first wait after a doorbell found free beside a held row.
const FIRST_GAP: Duration = Duration::from_millis(5);

impl Lock for MyLock<'_> {
    fn key(&self) -> &str {
        &self.key
    }

    fn rank(&self) -> u64 {
        0
    }

    fn wait_turn(&self, until: Option<Instant>) -> Boxed<'_, Result<Turn, StoreError>> {
        Box::pin(self.wait(until))
    }

    /// A break request or the end of our row, as a renewal finds it;
    /// meanwhile our doorbell is hung, and hung again when a renewal finds
    /// it gone. Here, beside the command's start and not before it: an
    /// uncontended run need not wait for its second connection.
    fn lost(&self) -> Boxed<'_, Loss> {
        Box::pin(async move {
            tokio::select! {
                loss = self.session.shared.asked(&self.lock) => loss,
                never = self.keep_bell() => match never {},
            }
        })
    }

    fn checkpoint(&self) -> Boxed<'_, Result<Option<Checkpoint>, StoreError>> {
        Box::pin(async move { Ok(self.checkpoint.borrow_mut().take()) })
    }

    fn leave(&self) -> Boxed<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let shared = &self.session.shared;
            // Before: no renewal may count it lost once it is let go.
            shared.held.borrow_mut().remove(&self.lock);
            shared.own.queued.borrow_mut().remove(&self.lock);
            let params = vec![p(self.lock.as_str()), p(self.tenure())];
            self.store()
                .query(&self.store().sql.leave, params.clone())
                .await?;
            self.store()
                .query(&self.store().sql.leave_queue, params)
                .await?;
            let bell = shared.own.bells.borrow_mut().remove(&self.lock);
            if let Some((_, link)) = bell {
                link.reset();
            }
            Ok(())
        })
    }
}
