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

    /// [`Backoff::pause`], somewhere in its second half, at random: many
    /// that were refused together (a fleet's cron at one minute) come back
    /// spread over that half, not together again.
    pub fn jittered(&mut self) -> Duration {
        let pause = self.pause();
        pause / 2 + (pause / 2).mul_f64(share())
    }

    /// After an attempt that got somewhere: the next pause is the first again.
    pub fn reset(&mut self) {
        self.next = self.first;
    }
}

/// The pause before asking a store again that refused for load and asked
/// for `asked` (an HTTP `Retry-After`): at least that, and up to half as
/// long again, at random, so that a crowd refused together (a fleet's cron
/// at one minute) comes back spread over that half, never sooner than
/// asked.
pub fn at_least(asked: Duration) -> Duration {
    asked + (asked / 2).mul_f64(share())
}

/// A share between 0 and 1, at random; without randomness (never on
/// Linux), 1: the longest pause.
fn share() -> f64 {
    let mut bytes = [0u8; 2];
    match getrandom::fill(&mut bytes) {
        Ok(()) => f64::from(u16::from_le_bytes(bytes)) / f64::from(u16::MAX),
        Err(_) => 1.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jittered_pause_lies_in_the_second_half_and_spreads_over_it() {
        let ms = Duration::from_millis;
        let pauses: Vec<Duration> = (0..1000)
            .map(|_| Backoff::new(ms(100), ms(100)).jittered())
            .collect();
        assert!(pauses.iter().all(|p| (ms(50)..=ms(100)).contains(p)));
        let (low, high) = (pauses.iter().min().unwrap(), pauses.iter().max().unwrap());
        assert!(*high - *low > ms(40), "{low:?} .. {high:?}");
        // And it doubles as the pause does.
        let mut b = Backoff::new(ms(100), ms(1000));
        b.jittered();
        assert!((ms(100)..=ms(200)).contains(&b.jittered()));
    }

    #[test]
    fn a_pause_asked_for_is_kept_and_spread_over_half_as_long_again() {
        let ms = Duration::from_millis;
        let pauses: Vec<Duration> = (0..1000).map(|_| at_least(ms(1000))).collect();
        assert!(pauses.iter().all(|p| (ms(1000)..=ms(1500)).contains(p)));
        let (low, high) = (pauses.iter().min().unwrap(), pauses.iter().max().unwrap());
        assert!(*high - *low > ms(400), "{low:?} .. {high:?}");
    }
}
