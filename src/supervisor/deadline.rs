//! How a renewal moves the guard's deadline on without waking the guard.
//!
//! The guard must act at the deadline minus the grace unless a renewal came
//! first. A message for each renewal would wake it once a renewal (12 times
//! a minute at the default TTL) only to set its timer again. So elect and
//! the guard share two descriptors, handed over with the first deadline:
//!
//! - an eventfd, to which elect adds how far each renewal moved the deadline
//!   on: the guard's deadline is the handover's plus all it has read, and
//!   it reads whenever it happens to wake;
//! - the guard's lease timer, a `CLOCK_BOOTTIME` timerfd, which elect sets
//!   to the new deadline minus the grace right after each addition.
//!
//! So the guard sleeps from the command's start to its end, or to the
//! instant no renewal came in time. The timer never rings later than the
//! latest deadline the guard can read, minus the grace: elect adds before
//! it sets, and the guard sets the timer again from what it read after
//! every wake, so an elect stopped between the two leaves the guard's own
//! setting. A setting of the guard's that overtakes a later one of elect's
//! only wakes it early, and it reads the later deadline then. The lease
//! timer serves the running command's deadline alone: the guard's other
//! instants (SIGKILL after the signal) are on a timer that only the guard
//! sets, so that no renewal can put them off.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::eventfd::{EfdFlags, EventFd};

use crate::clock::{BootTimer, Instant};

/// elect's end: tells the guard each later deadline.
pub(super) struct Teller {
    added: EventFd,
    timer: BootTimer,
    /// The deadline the guard can read: the handover's plus all added.
    told: Instant,
    /// The guard's grace: its timer rings this long before the deadline.
    grace: Duration,
}

impl Teller {
    /// The two descriptors, for a guard told `deadline` at the handover
    /// whose command gets its signal `grace` before a deadline.
    pub(super) fn new(deadline: Instant, grace: Duration) -> io::Result<Teller> {
        Ok(Teller {
            added: EventFd::from_flags(EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)?,
            timer: BootTimer::new(false)?,
            told: deadline,
            grace,
        })
    }

    /// What the guard is sent with the handover's deadline: the eventfd,
    /// then the timer.
    pub(super) fn shared(&self) -> [BorrowedFd<'_>; 2] {
        [self.added.as_fd(), self.timer.as_fd()]
    }

    /// A renewal made the lease safe until `deadline`. An error: the guard
    /// must be told otherwise (it still reads what was added, and sets its
    /// timer again when it wakes).
    pub(super) fn tell(&mut self, deadline: Instant) -> io::Result<()> {
        let moved = deadline.as_nanos().saturating_sub(self.told.as_nanos());
        if moved == 0 {
            // Not later: the guard keeps the later deadline it has.
            return Ok(());
        }
        self.added.write(moved)?;
        self.told = deadline;
        self.timer.ring_at(deadline - self.grace)?;
        Ok(())
    }
}

/// The guard's end: the deadline as elect last moved it on, and the timer
/// elect sets for it.
pub(super) struct Told {
    added: OwnedFd,
    timer: BootTimer,
    deadline: Instant,
}

impl Told {
    /// From the descriptors sent with the handover's `deadline`, in
    /// [`Teller::shared`]'s order; `None` if they are not two.
    pub(super) fn new(fds: Vec<OwnedFd>, deadline: Instant) -> Option<Told> {
        let [added, timer]: [OwnedFd; 2] = fds.try_into().ok()?;
        Some(Told {
            added,
            timer: BootTimer::of(timer),
            deadline,
        })
    }

    /// The deadline, if elect moved it on since the last look.
    pub(super) fn moved(&mut self) -> Option<Instant> {
        let mut buf = [0u8; 8];
        loop {
            match nix::unistd::read(&self.added, &mut buf) {
                Ok(8) => {
                    let moved = Duration::from_nanos(u64::from_ne_bytes(buf));
                    self.deadline = self.deadline + moved;
                    return Some(self.deadline);
                }
                Err(Errno::EINTR) => continue,
                // EAGAIN: nothing added since.
                _ => return None,
            }
        }
    }

    /// The lease timer, which elect sets too.
    pub(super) fn timer(&self) -> &BootTimer {
        &self.timer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(deadline: Instant, grace: Duration) -> (Teller, Told) {
        let teller = Teller::new(deadline, grace).unwrap();
        let fds = teller
            .shared()
            .iter()
            .map(|fd| fd.try_clone_to_owned().unwrap())
            .collect();
        (teller, Told::new(fds, deadline).unwrap())
    }

    #[test]
    fn the_guard_reads_the_latest_deadline_and_its_timer_rings_the_grace_before() {
        // The boot clock itself: the timer runs on it (unit tests' `Instant::now` is tokio's).
        let boot = nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME).unwrap();
        let now = Instant::from_nanos(Duration::from(boot).as_nanos().try_into().unwrap());
        let grace = Duration::from_secs(5);
        let (mut teller, mut told) = pair(now + Duration::from_secs(10), grace);
        assert_eq!(told.moved(), None, "nothing added yet");
        teller.tell(now + Duration::from_secs(12)).unwrap();
        teller.tell(now + Duration::from_secs(17)).unwrap();
        // An earlier deadline never moves the guard's back.
        teller.tell(now + Duration::from_secs(15)).unwrap();
        assert_eq!(told.moved(), Some(now + Duration::from_secs(17)));
        assert_eq!(told.moved(), None, "read once");
        let Some(left) = told.timer().left().unwrap() else {
            panic!("the lease timer is set");
        };
        // Set for now + 17 s − 5 s, read a moment later.
        assert!(
            left <= Duration::from_secs(12) && left > Duration::from_secs(11),
            "{left:?}"
        );
    }
}
