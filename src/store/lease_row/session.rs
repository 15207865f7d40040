//! What every lease-row session keeps: its id, the rows it holds, the
//! break requests its renewals found, and how a renewal is judged.
//!
//! There is no lease object in the database; the session's lease is the
//! `expires_at` of each row it holds, all renewed together. The deadline
//! elect keeps counts from the send time of the last renewal that
//! confirmed every row we hold. A renewal judges only the rows held both
//! when it left and when it came back, and a row is forgotten before the
//! statement that lets it go is sent: a renewal that crosses an
//! acquisition, a leave or a release never reports a row lost that it was
//! not meant to renew.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::sync::Notify;

use super::lock::Place;
use crate::clock::Instant;
use crate::store::observed::Observed;
use crate::store::{Boxed, HolderRecord, Lock, Loss, Renewal, Renewer, Session, StoreError};

/// The key of a holder (`ELECT_KEY`): the lock and the holder's tenure.
pub fn key(lock: &str, tenure: &str) -> String {
    format!("{lock}/{tenure}")
}

/// What a session and its renewers share; `X`, what a dialect adds.
pub struct Shared<X = ()> {
    pub tenure: String,
    pub ttl: Duration,
    /// When the session began.
    pub granted_at: Instant,
    /// The locks whose rows we hold.
    pub held: RefCell<BTreeSet<String>>,
    /// Break requests seen by renewals, by lock.
    pub asked: RefCell<BTreeMap<String, String>>,
    pub news: Notify,
    pub own: X,
}

impl<X> Shared<X> {
    /// A new session's: its tenure a fresh id.
    pub fn new(ttl: Duration, own: X) -> Self {
        Shared {
            tenure: crate::store::ids::tenure(),
            ttl,
            granted_at: Instant::now(),
            held: RefCell::default(),
            asked: RefCell::default(),
            news: Notify::new(),
            own,
        }
    }

    /// A renewal sent while we held `held` came back with `renewed`: each
    /// row it kept, and any break request in it. A row held both then and
    /// now that it did not keep is lost.
    pub fn judge(
        &self,
        held: &BTreeSet<String>,
        renewed: impl IntoIterator<Item = (String, Option<String>)>,
    ) -> Renewal {
        let mut kept = BTreeSet::new();
        for (lock, asked) in renewed {
            if let Some(why) = asked {
                self.asked
                    .borrow_mut()
                    .insert(lock.clone(), format!("{why} asked it to let go"));
                self.news.notify_waiters();
            }
            kept.insert(lock);
        }
        let still = self.held.borrow();
        match held
            .iter()
            .find(|lock| still.contains(*lock) && !kept.contains(*lock))
        {
            Some(lost) => Renewal::Gone(format!(
                "the lease row of lock {lost} was ended or taken over"
            )),
            None => Renewal::Alive(self.ttl),
        }
    }

    /// Wait for a break request that a renewal found for `lock`.
    pub async fn asked(&self, lock: &str) -> Loss {
        loop {
            let news = self.news.notified();
            if let Some(why) = self.asked.borrow().get(lock) {
                return Loss::Asked(why.clone());
            }
            news.await;
        }
    }
}

/// A dialect's session, made a [`Session`] by the core.
#[allow(async_fn_in_trait)]
pub trait RowSession {
    /// What the dialect adds to [`Shared`].
    type Own;
    fn shared(&self) -> &Shared<Self::Own>;
    /// `--connect-timeout`.
    fn within(&self) -> Duration;
    /// One that renews every row the session holds.
    fn new_renewer(&self) -> Box<dyn Renewer>;
    /// The dialect's lock at `place`.
    fn lock_at(&self, place: Place) -> Box<dyn Lock + '_>;
    /// Let every row go (forgotten by the renewals first).
    async fn let_all_go(&self) -> Result<(), StoreError>;
}

impl<T: RowSession> Session for T {
    fn id(&self) -> String {
        self.shared().tenure.clone()
    }

    fn ttl(&self) -> Option<Duration> {
        Some(self.shared().ttl)
    }

    fn granted_at(&self) -> Instant {
        self.shared().granted_at
    }

    fn renewer(&self) -> Box<dyn Renewer> {
        self.new_renewer()
    }

    fn join(
        &self,
        lock: String,
        record: HolderRecord,
    ) -> Boxed<'_, Result<Box<dyn Lock + '_>, StoreError>> {
        let shared = self.shared();
        let place = Place::new(lock, record, (&shared.tenure, shared.ttl), self.within());
        Box::pin(async move { Ok(self.lock_at(place)) })
    }

    fn release(&self) -> Boxed<'_, Result<(), StoreError>> {
        Box::pin(self.let_all_go())
    }
}

/// A version of a lease row held by someone: its holder's tenure (none:
/// let go before a failover, which may hide a take lost with the old
/// primary), its count of renewals, and the database's time of the last
/// (µs; it moves also where an earlier elect, counting none, renews).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    pub tenure: Option<String>,
    pub renewals: i64,
    pub micros: Option<i64>,
}

impl Version {
    /// The version a take may name now, seen unchanged for its holder's
    /// TTL, as the take's parameters: tenure ('' for none), renewals,
    /// renewal time; NULLs where there is none.
    pub fn ripe(observed: &Observed<Version>) -> (Option<String>, Option<i64>, Option<i64>) {
        match observed.ripe(Instant::now()) {
            Some(v) => (
                Some(v.tenure.clone().unwrap_or_default()),
                Some(v.renewals),
                v.micros,
            ),
            None => (None, None, None),
        }
    }
}

/// How long until a row held by someone else is worth a take, by the
/// database's clock (`left`) and by ours, once `observed` has seen it.
pub fn worth_a_take_in(observed: &Observed<Version>, left: Option<Duration>) -> Duration {
    let by_us = observed
        .ripe_at()
        .map_or(Duration::ZERO, Instant::remaining);
    left.unwrap_or(Duration::ZERO).max(by_us)
}
