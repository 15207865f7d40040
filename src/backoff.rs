//! The one doubling pause: every retry, rejoin and backstop in elect
//! waits `first`, then twice as long each time, up to `max`, and starts
//! over after an attempt that got somewhere.

use std::time::Duration;

/// The pause after a failed attempt: `first`, then twice as long each time,
/// up to `max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    first: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    /// The pauses of every store: short at first, since most failures
    /// worth a retry pass within milliseconds (a server that is starting,
    /// a member that just lost its leader, a connection reset), and at most
    /// half a second, so that a store back after an outage is found within
    /// that, and one that stays away is asked at most twice a second.
    pub const STORE: Backoff = Backoff::new(Duration::from_millis(25), Duration::from_millis(500));

    pub const fn new(first: Duration, max: Duration) -> Backoff {
        Backoff {
            first,
            max,
            next: first,
        }
    }

    /// The pause to take now; the next one is twice as long, up to the most.
    pub fn pause(&mut self) -> Duration {
        let now = self.next;
        self.next = (self.next * 2).min(self.max);
        now
    }

    /// After an attempt that got somewhere: the next pause is the first again.
    pub fn reset(&mut self) {
        self.next = self.first;
    }
}
