//! The lease loop: when to renew, and until when a confirmed renewal keeps
//! the lease safe.
//!
//! The store cannot tell a paused or partitioned holder that its lease
//! expired, so elect judges expiry itself, on its own clock, from the moment
//! it SENT the renewal whose reply confirmed the lease: the store started
//! counting no earlier than that. Counting from the reply's arrival (as Go's
//! client does) would let elect believe in a lease the store already dropped.
//!
//! ```text
//!  sent ──renew every TTL/3──▶ … ──────────────── stop_at ── grace ── deadline ── (sent + TTL)
//!                                                  first signal     SIGKILL     margin
//! ```
//!
//! The margin covers the difference in clock rates between this machine and
//! the store's, and the time the kernel takes to kill a process group:
//! 1/50 of the TTL plus 50 ms. This module knows no store and no child.

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::timeout;

use crate::clock::{Instant, show, sleep_until};
use crate::log;
use crate::store::{Loss, Renewal, Renewer};

/// The shortest lease elect asks for: stores grant whole seconds.
pub const MIN_TTL: Duration = Duration::from_secs(1);
/// Longer leases mean hours of waiting after a crash: surely a typo.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);

/// TTL and grace, checked to fit together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    ttl: Duration,
    grace: Duration,
}

impl Timing {
    /// Check `--ttl` and `--grace` (default TTL/3) together.
    pub fn new(ttl: Duration, grace: Option<Duration>) -> Result<Self, String> {
        if ttl < MIN_TTL {
            return Err(format!(
                "--ttl {} is too short; the minimum is 1s",
                show(ttl)
            ));
        }
        if ttl > MAX_TTL {
            return Err(format!(
                "--ttl {} is too long; the maximum is 24h",
                show(ttl)
            ));
        }
        let grace = grace.unwrap_or(ttl / 3);
        if grace.is_zero() {
            return Err(
                "--grace must be longer than zero; use --signal KILL to kill at once".into(),
            );
        }
        let timing = Timing { ttl, grace };
        // The first signal must come after at least one renewal retry, or a
        // single lost packet would stop the child.
        let room = ttl.saturating_sub(timing.renew_every() + timing.margin());
        if grace >= room {
            return Err(format!(
                "--grace {} does not fit in --ttl {}: it must be shorter than {} \
                 (TTL minus the renewal interval TTL/3 minus the safety margin); \
                 shorten --grace or lengthen --ttl",
                show(grace),
                show(ttl),
                show(room)
            ));
        }
        Ok(timing)
    }

    /// Use the smaller of what was asked and what the store granted.
    pub fn granted(self, granted: Duration) -> Self {
        Timing {
            ttl: self.ttl.min(granted),
            ..self
        }
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    pub fn grace(&self) -> Duration {
        self.grace
    }

    pub fn renew_every(&self) -> Duration {
        self.ttl / 3
    }

    /// How long one renewal may take before it counts as failed.
    pub fn attempt_timeout(&self) -> Duration {
        (self.renew_every() / 2).max(Duration::from_millis(100))
    }

    pub fn margin(&self) -> Duration {
        self.ttl / 50 + Duration::from_millis(50)
    }

    /// Until when a renewal sent at `sent`, confirmed with `ttl`, keeps the lease safe.
    pub fn deadline(&self, sent: Instant, ttl: Duration) -> Instant {
        sent + self.ttl.min(ttl) - self.margin()
    }

    /// When the child gets the first signal if no renewal confirms the lease first.
    pub fn stop_at(&self, deadline: Instant) -> Instant {
        deadline - self.grace
    }
}

/// The deadline of a lease that does not expire by time.
pub const NEVER: Instant = Instant::FAR_FUTURE;

/// The grace of a command whose lease the store already ended (revoked,
/// expired on the server, key deleted): another holder may already run.
pub const GONE_GRACE: Duration = Duration::from_millis(100);

/// Renew the lease until it is lost; publish each new deadline on `deadline`.
///
/// A failed or unanswered renewal is retried at once with a short backoff
/// and a fresh stream, so one lost packet or one restarting store member
/// does not cost the lease. Returns when the store says the lease is gone,
/// or when the stop time passes without a confirmed renewal.
pub async fn keep<R: Renewer>(
    renewer: &mut R,
    timing: Timing,
    granted_at: Instant,
    deadline: &watch::Sender<Instant>,
) -> Loss {
    const FIRST_BACKOFF: Duration = Duration::from_millis(50);
    let mut last_confirmed = granted_at;
    let mut next = last_confirmed + timing.renew_every();
    let mut backoff = FIRST_BACKOFF;
    loop {
        let stop_at = timing.stop_at(*deadline.borrow());
        sleep_until(next.min(stop_at)).await;
        if Instant::now() >= stop_at {
            return Loss::Expired { last_confirmed };
        }
        let sent = Instant::now();
        let limit = timing.attempt_timeout().min(stop_at.since(sent));
        match timeout(limit, renewer.renew()).await {
            Ok(Ok(Renewal::Alive(ttl))) => {
                let new = timing.deadline(sent, ttl);
                if new > *deadline.borrow() {
                    deadline.send_replace(new);
                }
                last_confirmed = sent;
                next = sent + timing.renew_every();
                backoff = FIRST_BACKOFF;
                log::verbose(format_args!(
                    "lease renewed; safe for {}",
                    show(new.remaining())
                ));
            }
            Ok(Ok(Renewal::Held)) => {
                last_confirmed = sent;
                next = sent + timing.renew_every();
                backoff = FIRST_BACKOFF;
            }
            Ok(Ok(Renewal::Gone(why))) => return Loss::Gone(why),
            Ok(Ok(Renewal::Asked(why))) => return Loss::Asked(why),
            Ok(Err(e)) => {
                log::verbose(format_args!(
                    "renewal failed, retrying in {}: {e}",
                    show(backoff)
                ));
                renewer.reset();
                next = Instant::now() + backoff;
                backoff = (backoff * 2).min(timing.renew_every() / 2);
            }
            Err(_) => {
                log::verbose(format_args!(
                    "renewal unanswered after {}, retrying",
                    show(limit)
                ));
                renewer.reset();
                next = Instant::now();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn default_grace_is_a_third_of_the_ttl() {
        let t = Timing::new(15 * S, None).unwrap();
        assert_eq!(t.grace(), 5 * S);
        assert_eq!(t.renew_every(), 5 * S);
    }

    #[test]
    fn grace_must_leave_room_for_a_retry() {
        assert!(Timing::new(15 * S, Some(9 * S)).is_ok());
        let err = Timing::new(15 * S, Some(10 * S)).unwrap_err();
        assert!(err.contains("does not fit"), "{err}");
        assert!(Timing::new(15 * S, Some(Duration::ZERO)).is_err());
    }

    #[test]
    fn ttl_bounds() {
        assert!(Timing::new(Duration::from_millis(999), None).is_err());
        assert!(Timing::new(S, None).is_ok());
        assert!(Timing::new(25 * 3600 * S, None).is_err());
    }

    #[test]
    fn deadline_counts_from_the_send_time_and_the_smaller_ttl() {
        let t = Timing::new(10 * S, None).unwrap();
        let sent = Instant::from_nanos(1_000_000_000_000);
        // margin = 10s/50 + 50ms = 250ms
        assert_eq!(t.deadline(sent, 10 * S), sent + Duration::from_millis(9750));
        // the store granted more than asked: ours counts
        assert_eq!(t.deadline(sent, 60 * S), sent + Duration::from_millis(9750));
        // the store says less: its word counts
        assert_eq!(t.deadline(sent, 5 * S), sent + Duration::from_millis(4750));
        let t = t.granted(4 * S);
        assert_eq!(t.ttl(), 4 * S);
    }

    #[test]
    fn stop_leaves_the_grace_before_the_deadline() {
        let t = Timing::new(9 * S, Some(2 * S)).unwrap();
        let d = Instant::from_nanos(50_000_000_000);
        assert_eq!(t.stop_at(d), d - 2 * S);
        assert!(t.stop_at(d) > d - t.ttl() + t.renew_every());
    }
}
