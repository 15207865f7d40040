//! One lock's place in a lease-row session, and the [`Lock`] every
//! dialect's lock is: its wait is [`take::wait`], its checkpoint the one
//! the take found; how it watches its row and lets it go is the dialect's.

use std::cell::RefCell;
use std::time::Duration;

use super::session::{Version, key};
use super::take::{self, Taker};
use crate::clock::Instant;
use crate::store::observed::Observed;
use crate::store::{Boxed, Checkpoint, HolderRecord, Lock, Loss, StoreError, Turn};

/// What every lease-row lock keeps.
pub struct Place {
    pub lock: String,
    /// `ELECT_KEY`.
    pub key: String,
    /// The holder record a take writes.
    pub record: String,
    /// The checkpoint, as the take found the row.
    pub checkpoint: RefCell<Option<Checkpoint>>,
    /// The holder's row as we have seen it, and since when.
    pub observed: RefCell<Observed<Version>>,
    /// The session's TTL.
    pub ttl: Duration,
    /// `--connect-timeout`: how long a wait tries before the server first
    /// answers.
    pub within: Duration,
}

impl Place {
    pub fn new(
        lock: String,
        record: HolderRecord,
        (tenure, ttl): (&str, Duration),
        within: Duration,
    ) -> Place {
        Place {
            ttl,
            within,
            key: key(&lock, tenure),
            record: record.acquired_now().to_json(),
            lock,
            checkpoint: RefCell::new(None),
            observed: RefCell::new(Observed::new()),
        }
    }
}

/// A dialect's lock, made a [`Lock`] by the core.
#[allow(async_fn_in_trait)]
pub trait RowLock: Taker {
    /// While we hold the lock: a break request or the end of our row.
    async fn watch(&self) -> Loss;
    /// Let the row go (forgotten by the renewals first).
    async fn let_go(&self) -> Result<(), StoreError>;
}

impl<T: RowLock> Lock for T {
    fn key(&self) -> &str {
        &self.place().key
    }

    fn rank(&self) -> u64 {
        0
    }

    fn wait_turn(&self, until: Option<Instant>) -> Boxed<'_, Result<Turn, StoreError>> {
        Box::pin(take::wait(self, until))
    }

    fn lost(&self) -> Boxed<'_, Loss> {
        Box::pin(self.watch())
    }

    fn checkpoint(&self) -> Boxed<'_, Result<Option<Checkpoint>, StoreError>> {
        Box::pin(async move { Ok(self.place().checkpoint.borrow_mut().take()) })
    }

    fn leave(&self) -> Boxed<'_, Result<(), StoreError>> {
        Box::pin(self.let_go())
    }
}
