//! A store that goes back in time: restored from an older snapshot or
//! backup, or failed over to a replica that lacks the last writes. Its
//! revision (etcd's header revision, ZooKeeper's zxid, the API server's
//! resource version) falls below one already seen, and what it says of the
//! lock is the past's: a holder's key may be gone while its command runs,
//! and a new key's create revision, the next token, may be at or below one
//! already handed out.
//!
//! The rule, for every store that has a revision: everything a process has
//! seen raises one mark; an authoritative read below that mark means the
//! store went back. A holder then stops its command as for a revoked
//! lease, and a waiter takes nothing under a token at or below the mark.
//! Only an authoritative read counts (etcd: a linearizable one), because a
//! follower may lag the leader by a few writes without anything being lost.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::StoreError;

/// The highest revision seen of one store, shared by every session and
/// lock of one process.
#[derive(Clone, Debug, Default)]
pub struct Mark(Arc<AtomicU64>);

/// The mark as it stood when a request was sent: only what was seen before
/// then binds its answer (a reply to a request sent beside it may have been
/// answered later, at a higher revision).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Floor(u64);

/// The store was seen at `was` and now reads `now`, below it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rewound {
    pub was: u64,
    pub now: u64,
}

impl Mark {
    /// `revision` was seen (a reply's, a key's create revision: a token).
    pub fn saw(&self, revision: u64) {
        self.0.fetch_max(revision, Ordering::Relaxed);
    }

    /// Take before sending a request whose answer [`Mark::read`] or
    /// [`Mark::token`] judges.
    pub fn floor(&self) -> Floor {
        Floor(self.0.load(Ordering::Relaxed))
    }

    /// An authoritative read, sent at `floor`, answered at `revision`: the
    /// mark rises to it, unless it lies below the floor.
    pub fn read(&self, floor: Floor, revision: u64) -> Result<(), Rewound> {
        self.saw(revision);
        match revision < floor.0 {
            true => Err(Rewound {
                was: floor.0,
                now: revision,
            }),
            false => Ok(()),
        }
    }

    /// A new token, asked for at `floor`: it must lie above every revision
    /// seen before.
    pub fn token(&self, floor: Floor, token: u64) -> Result<(), Rewound> {
        self.saw(token);
        match token <= floor.0 {
            true => Err(Rewound {
                was: floor.0,
                now: token,
            }),
            false => Ok(()),
        }
    }
}

impl Rewound {
    /// What a holder's loss says, for `store` (its name and how it counts:
    /// "etcd's revision").
    pub fn said(&self, counter: &str) -> String {
        format!(
            "{counter} went back from {} to {}: the store was restored from an older state, \
             so what it says of the lock is the past's",
            self.was, self.now
        )
    }

    /// What a waiter fails with: no token at or below one already handed
    /// out. `remedy` says how to restore the store without going back.
    pub fn error(&self, counter: &str, lock: &str, remedy: &str) -> StoreError {
        StoreError::rewound(format!(
            "{counter} went back from {} to {} (restored from an older state?): a token for \
             lock {lock} now would not be above those already handed out, so elect takes none; \
             {remedy}",
            self.was, self.now
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_below_the_floor_is_a_rewind_and_a_token_must_lie_above_it() {
        let mark = Mark::default();
        assert_eq!(mark.token(mark.floor(), 11), Ok(()));
        mark.saw(50);
        let floor = mark.floor();
        // Answered beside a request sent later, which raised the mark: only
        // the floor binds.
        mark.saw(70);
        assert_eq!(mark.read(floor, 50), Ok(()));
        assert_eq!(mark.read(floor, 12), Err(Rewound { was: 50, now: 12 }));
        assert_eq!(mark.token(floor, 50), Err(Rewound { was: 50, now: 50 }));
        assert_eq!(mark.token(floor, 13), Err(Rewound { was: 50, now: 13 }));
        assert_eq!(mark.token(floor, 51), Ok(()));
        // Clones share the mark: every session of one process.
        let other = mark.clone();
        other.saw(80);
        assert_eq!(
            mark.read(mark.floor(), 79),
            Err(Rewound { was: 80, now: 79 })
        );
    }
}
