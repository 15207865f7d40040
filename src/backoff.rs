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
        let mut byte = [0u8; 2];
        // Without randomness (never on Linux), the pause itself.
        let share = match getrandom::fill(&mut byte) {
            Ok(()) => u32::from(u16::from_le_bytes(byte)),
            Err(_) => u32::from(u16::MAX),
        };
        pause / 2 + (pause / 2).mul_f64(f64::from(share) / f64::from(u16::MAX))
    }

    /// After an attempt that got somewhere: the next pause is the first again.
    pub fn reset(&mut self) {
        self.next = self.first;
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
}
