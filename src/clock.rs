//! The one clock elect judges leases by.
//!
//! A lease on the store keeps running while this machine is suspended, so the
//! local deadline must too: `CLOCK_BOOTTIME` is monotonic (never jumps with
//! the wall clock) and, unlike `CLOCK_MONOTONIC`, counts time spent in
//! suspend. It is system-wide, so elect and its guard process (see
//! [`crate::supervisor`]) can exchange instants as plain nanoseconds.

use std::io;
use std::ops::{Add, Sub};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use rustix::time::{
    Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags, Timespec, timerfd_create,
    timerfd_settime,
};

/// A point on `CLOCK_BOOTTIME`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Instant(Duration);

impl Instant {
    /// Later than anything elect will live to see, and still a valid timer value.
    pub const FAR_FUTURE: Instant = Instant(Duration::from_secs(1 << 40));

    #[cfg(not(test))]
    pub fn now() -> Self {
        use nix::time::{ClockId, clock_gettime};
        #[allow(
            clippy::expect_used,
            reason = "Linux has had CLOCK_BOOTTIME since 2.6.39; no fallback would be sound"
        )]
        let ts =
            clock_gettime(ClockId::CLOCK_BOOTTIME).expect("CLOCK_BOOTTIME is always available");
        Instant(Duration::from(ts))
    }

    /// In unit tests, a clock the test controls: tokio's, which a test can
    /// pause and advance, counted from a fixed, nonzero origin.
    #[cfg(test)]
    pub fn now() -> Self {
        thread_local! {
            static ORIGIN: tokio::time::Instant = tokio::time::Instant::now();
        }
        let elapsed = ORIGIN.with(|origin| tokio::time::Instant::now() - *origin);
        Instant(Duration::from_secs(1000) + elapsed)
    }

    pub fn from_nanos(nanos: u64) -> Self {
        Instant(Duration::from_nanos(nanos))
    }

    pub fn as_nanos(self) -> u64 {
        u64::try_from(self.0.as_nanos()).unwrap_or(u64::MAX)
    }

    /// Time from `earlier` to `self`, zero if `earlier` is later.
    pub fn since(self, earlier: Instant) -> Duration {
        self.0.saturating_sub(earlier.0)
    }

    /// Time from `self` until now, zero if `self` is later.
    pub fn elapsed(self) -> Duration {
        Instant::now().since(self)
    }

    /// Time left until `self`, zero if it has passed.
    pub fn remaining(self) -> Duration {
        self.since(Instant::now())
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(d))
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;
    fn sub(self, d: Duration) -> Instant {
        Instant(self.0.saturating_sub(d))
    }
}

/// Sleep until `at` on the boot clock. Tokio's timers do not count suspend:
/// a timer on `CLOCK_BOOTTIME` (a timerfd) does, and wakes elect once, at
/// the deadline. Armed with the time left rather than the instant, so a
/// clock that a test's preloaded library offsets stays consistent. Without
/// a timerfd, or in unit tests (whose clock is tokio's), sleep in slices of
/// a second and look at the clock after each.
pub async fn sleep_until(at: Instant) {
    #[cfg(not(test))]
    if boot_timer::sleep_until(at).await.is_ok() {
        return;
    }
    loop {
        let left = at.remaining();
        if left.is_zero() {
            return;
        }
        tokio::time::sleep(left.min(Duration::from_secs(1))).await;
    }
}

#[cfg(not(test))]
mod boot_timer {
    use super::{BootTimer, Instant};

    /// Sleep on a timerfd until `at`; an error if none can be made.
    pub async fn sleep_until(at: Instant) -> std::io::Result<()> {
        let timer = crate::descriptors::readiness(BootTimer::new(true)?.into())?;
        loop {
            let left = at.remaining();
            if left.is_zero() {
                return Ok(());
            }
            BootTimer::of(timer.get_ref()).ring_in(left)?;
            let mut ready = timer.readable().await?;
            // Readable until read; armed again, if need be, above.
            let _ = BootTimer::of(ready.get_inner()).clear();
            ready.clear_ready();
        }
    }
}

/// A timerfd on `CLOCK_BOOTTIME`, over any descriptor: one that another
/// process sent needs no unchecked conversion, since a descriptor that is
/// no timerfd only makes each call fail (EINVAL).
pub struct BootTimer<F: AsFd = OwnedFd>(F);

impl BootTimer {
    /// A new timer, unset; close-on-exec, and non-blocking if asked.
    pub fn new(nonblocking: bool) -> io::Result<BootTimer> {
        let mut flags = TimerfdFlags::CLOEXEC;
        if nonblocking {
            flags |= TimerfdFlags::NONBLOCK;
        }
        Ok(BootTimer(timerfd_create(TimerfdClockId::Boottime, flags)?))
    }
}

impl<F: AsFd> BootTimer<F> {
    /// The timer behind `fd`.
    pub fn of(fd: F) -> BootTimer<F> {
        BootTimer(fd)
    }

    /// Ring at `at` on the boot clock; an instant already past rings at once.
    pub fn ring_at(&self, at: Instant) -> io::Result<()> {
        // Zero would disarm it.
        self.set(
            Duration::from_nanos(at.as_nanos().max(1)),
            TimerfdTimerFlags::ABSTIME,
        )
    }

    /// Ring `after` from now (at once if zero).
    #[cfg(not(test))]
    pub fn ring_in(&self, after: Duration) -> io::Result<()> {
        self.set(
            after.max(Duration::from_nanos(1)),
            TimerfdTimerFlags::empty(),
        )
    }

    /// Disarm it.
    pub fn unset(&self) -> io::Result<()> {
        self.set(Duration::ZERO, TimerfdTimerFlags::empty())
    }

    /// How long until it rings; `None` if it is not set.
    #[cfg(test)]
    pub fn left(&self) -> io::Result<Option<Duration>> {
        let left = rustix::time::timerfd_gettime(&self.0)?.it_value;
        let left = Duration::try_from(left).map_err(io::Error::other)?;
        Ok((!left.is_zero()).then_some(left))
    }

    /// Read off that it rang, so that it is readable no more; EAGAIN on a
    /// non-blocking timer that has not.
    pub fn clear(&self) -> io::Result<()> {
        let mut rang = [0u8; 8];
        rustix::io::read(&self.0, &mut rang)?;
        Ok(())
    }

    fn set(&self, value: Duration, flags: TimerfdTimerFlags) -> io::Result<()> {
        let spec = Itimerspec {
            it_interval: Timespec::try_from(Duration::ZERO).map_err(io::Error::other)?,
            it_value: Timespec::try_from(value).map_err(io::Error::other)?,
        };
        timerfd_settime(&self.0, flags, &spec)?;
        Ok(())
    }
}

impl<F: AsFd> AsFd for BootTimer<F> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

impl From<BootTimer> for OwnedFd {
    fn from(timer: BootTimer) -> OwnedFd {
        timer.0
    }
}

/// Durations as users write them, to the millisecond; hours, not days
/// (`25h`, as `--ttl` takes it, never `1day 1h`).
pub fn show(d: Duration) -> String {
    const HOUR: u64 = 3600;
    let rounded = Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let hours = rounded.as_secs() / HOUR;
    if hours < 24 {
        return humantime::format_duration(rounded).to_string();
    }
    let rest = rounded - Duration::from_secs(hours * HOUR);
    match rest.is_zero() {
        true => format!("{hours}h"),
        false => format!("{hours}h {}", humantime::format_duration(rest)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_shown_in_hours_not_days() {
        assert_eq!(show(Duration::from_millis(1500)), "1s 500ms");
        assert_eq!(show(Duration::from_secs(25 * 3600)), "25h");
        assert_eq!(show(Duration::from_secs(24 * 3600 + 90)), "24h 1m 30s");
    }
}
