//! The doorbell of a lease row: the holder hangs it (a `GET_LOCK` on the
//! lock's second connection) once the row is its, and again when a
//! renewal finds it gone; a waiter blocks on it until a release or the
//! row's expiry. It only wakes: who holds the lock is the row's alone.

use std::time::Duration;

use super::super::conn::{Failed, Link, p};
use super::super::{POLL_EVERY, sql::Sql};
use super::MyLock;
use crate::clock::{Instant, sleep_until};
use crate::log;
use crate::store::StoreError;
use crate::store::lease_row::take::{Queue, Waking, wake_at};
use crate::store::retry::{self, Backoff};

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

impl MyLock<'_> {
    /// Block on the doorbell of the holder with `fence` for at most
    /// `within`.
    async fn listen(&self, fence: i64, within: Duration) -> Heard {
        let sql = &self.store().sql;
        let lock = self.place.lock.as_str();
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
            .insert(self.place.lock.clone(), (fence, self.bell.clone()));
        ring(
            &self.store().sql,
            &self.bell,
            &self.place.lock,
            fence,
            shared.ttl,
        )
        .await;
    }

    /// Hang our doorbell, and again each time a renewal finds it gone.
    pub(super) async fn keep_bell(&self) -> std::convert::Infallible {
        let shared = &self.session.shared;
        loop {
            self.hang_bell().await;
            loop {
                let news = shared.news.notified();
                if shared.own.silent.borrow_mut().remove(&self.place.lock) {
                    self.bell.reset();
                    break;
                }
                news.await;
            }
        }
    }
}

/// A waiter at its holder's doorbell.
pub(super) struct Doorbell<'a> {
    pub(super) lock: &'a MyLock<'a>,
    /// How long to wait first, since the doorbell of the holder with this
    /// fence was found free while its row was still held.
    pub(super) gap: Option<(i64, Backoff)>,
}

impl Waking<Option<i64>> for Doorbell<'_> {
    async fn nap(
        &mut self,
        left: Option<Duration>,
        fence: Option<i64>,
        until: Option<Instant>,
        _: &mut Queue,
    ) {
        // Wake when the holder's lease ends by the database's clock and
        // by ours, or at its release.
        match (left, fence) {
            (Some(left), Some(fence)) => self.lock.nap(left, fence, until, &mut self.gap).await,
            _ => sleep_until(wake_at(FIRST_GAP, until)).await,
        }
    }
}

/// The first wait after a doorbell found free beside a held row.
const FIRST_GAP: Duration = Duration::from_millis(5);
