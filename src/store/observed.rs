//! When a lock whose holder has not let go may be taken: for a store whose
//! lock is a record (a row, an object) with an expiry, judged by the
//! store's wall clock.
//!
//! A wall clock steps: forward, and a live holder's record looks expired;
//! back, and a dead one's looks alive. So the store's own test is not
//! enough. The rule (client-go's `observedTime`): a taker may take a record
//! its holder still names only after it has seen that record unchanged (the
//! same holder tenure and the same renewal) for the holder's whole TTL on
//! its own monotonic clock, besides the store's test. A holder stops its
//! command within its TTL of sending its last confirmed renewal; that
//! renewal was written before the taker first read its result, so a whole
//! TTL after that read, on a clock that does not step, the holder's command
//! is dead. A take is conditional on the record being still the version
//! seen, so a renewal that lands meanwhile wins and the taker looks again.
//!
//! The cost: a taker that first looks at a record its holder left behind
//! without letting go (a crash) waits a TTL from that look, however long
//! ago the record expired by the store's clock. A record let go is free at
//! once.

use std::time::Duration;

use crate::clock::Instant;

/// How long a record let go to a named waiter (the oldest, named by the
/// holder that let go) is left to that waiter before the others may take
/// it: the named one hears of it in milliseconds and takes it, and the
/// others, told of the take, sleep on; a release thus wakes one taker, not
/// every waiter. A named waiter that died costs this once a handover, until
/// its record lapses. Order only: who holds the lock is still decided by
/// the record alone.
pub const NAMED_FIRST: Duration = Duration::from_millis(500);

/// What a taker has seen of one lock's record: the version, since when it
/// has looked the same, and the TTL its holder renews with.
pub struct Observed<V> {
    seen: Option<Seen<V>>,
}

struct Seen<V> {
    version: V,
    since: Instant,
    ttl: Duration,
}

impl<V: PartialEq> Observed<V> {
    pub const fn new() -> Self {
        Observed { seen: None }
    }

    /// A look found the record at `version`, renewed with `ttl`; `at` is when
    /// its answer arrived (never the send time: the renewal may have landed
    /// while the look was on its way). The same version as before keeps the
    /// instant it was first seen.
    pub fn saw(&mut self, version: V, ttl: Duration, at: Instant) {
        match &mut self.seen {
            Some(seen) if seen.version == version => seen.ttl = seen.ttl.max(ttl),
            _ => {
                self.seen = Some(Seen {
                    version,
                    since: at,
                    ttl,
                })
            }
        }
    }

    /// A look found the record at `version`, to be taken only once it has
    /// stayed so for `ttl` (a record let go before a failover): how long
    /// that is from now.
    pub fn wait_out(&mut self, version: V, ttl: Duration, at: Instant) -> Duration {
        self.saw(version, ttl, at);
        self.ripe_at().map_or(Duration::ZERO, Instant::remaining)
    }

    /// The look found no holder (the record let go, or none yet).
    pub fn forget(&mut self) {
        self.seen = None;
    }

    /// When the version seen may be taken, if a holder's record was seen.
    pub fn ripe_at(&self) -> Option<Instant> {
        self.seen.as_ref().map(|seen| seen.since + seen.ttl)
    }

    /// The version that may be taken at `now`: seen unchanged for its TTL.
    pub fn ripe(&self, now: Instant) -> Option<&V> {
        let seen = self.seen.as_ref()?;
        (now >= seen.since + seen.ttl).then_some(&seen.version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(2);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[tokio::test(start_paused = true)]
    async fn a_version_is_ripe_only_a_whole_ttl_after_it_was_first_seen() {
        let mut observed = Observed::new();
        assert!(observed.ripe(Instant::now()).is_none(), "nothing seen yet");
        let first = Instant::now();
        observed.saw(("tenure", 1), TTL, first);
        tokio::time::advance(ms(1999)).await;
        // Seen again: the same version keeps its first instant.
        observed.saw(("tenure", 1), TTL, Instant::now());
        assert!(observed.ripe(Instant::now()).is_none(), "1999 ms in");
        tokio::time::advance(ms(1)).await;
        assert_eq!(observed.ripe(Instant::now()), Some(&("tenure", 1)));
        assert_eq!(observed.ripe_at(), Some(first + TTL));
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_or_a_new_holder_starts_the_wait_again() {
        let mut observed = Observed::new();
        observed.saw(("a", 1), TTL, Instant::now());
        tokio::time::advance(ms(1500)).await;
        let renewed = Instant::now();
        observed.saw(("a", 2), TTL, renewed);
        tokio::time::advance(ms(1500)).await;
        assert!(observed.ripe(Instant::now()).is_none(), "renewed 1.5 s ago");
        observed.saw(("b", 2), TTL, Instant::now());
        tokio::time::advance(ms(1999)).await;
        assert!(observed.ripe(Instant::now()).is_none(), "a new holder");
        tokio::time::advance(ms(1)).await;
        assert_eq!(observed.ripe(Instant::now()), Some(&("b", 2)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_longer_ttl_of_the_same_version_is_waited_out_and_a_release_forgets() {
        let mut observed = Observed::new();
        let first = Instant::now();
        observed.saw(1, TTL, first);
        observed.saw(1, 2 * TTL, first);
        tokio::time::advance(TTL).await;
        assert!(observed.ripe(Instant::now()).is_none());
        assert_eq!(observed.ripe_at(), Some(first + 2 * TTL));
        observed.forget();
        assert!(observed.ripe_at().is_none());
        assert!(observed.ripe(Instant::now() + 10 * TTL).is_none());
    }

    /// Whatever the store's wall clock does, the wait is on ours: a look
    /// answered late counts from its answer.
    #[tokio::test(start_paused = true)]
    async fn the_wait_counts_from_the_answer_of_the_look() {
        let mut observed = Observed::new();
        let sent = Instant::now();
        tokio::time::advance(ms(700)).await;
        let answered = Instant::now();
        observed.saw(7, TTL, answered);
        tokio::time::advance(TTL - ms(1)).await;
        assert!(observed.ripe(sent + TTL + ms(699)).is_none());
        assert!(observed.ripe(Instant::now()).is_none());
        tokio::time::advance(ms(1)).await;
        assert!(observed.ripe(Instant::now()).is_some());
    }
}
