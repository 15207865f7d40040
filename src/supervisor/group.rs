//! The command's process group at its end: which of its processes can
//! still run, and waiting until none can.
//!
//! A killed process runs on until the kernel has torn it down (freeing a
//! large memory takes a while), and one that joined the group after the
//! last SIGKILL missed it; the lock may pass only once nothing of the group
//! can run. Whether the group has any member at all, zombies included, is
//! one `kill(-group, …)`: ESRCH. Which members are not yet zombies only
//! `/proc` tells, one `stat` file per process on the machine, so that look
//! is taken only when the group still has members.
//!
//! The group's id must stay the group's while this runs: the guard's is
//! its sentinel's pid ([`super::sentinel`]), which cannot be reused while
//! the guard lives.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// The most processes watched at once for their end: one ending is enough
/// to look again.
const WATCHED: usize = 64;

/// SIGKILL every process of `group`; false if it has none at all (ESRCH),
/// not even a zombie. EPERM (members we may not signal) counts as members.
pub fn kill(group: Pid) -> bool {
    killpg(group, Signal::SIGKILL) != Err(Errno::ESRCH)
}

/// SIGKILL `group` until none of it can run, waiting on the ends of its
/// processes, not on a clock: each pass looks through `/proc` only if the
/// group still has members, and then sleeps until one of those that can
/// run ends (or `backstop` passes, for one that joins the group meanwhile).
pub fn kill_until_none_can_run(group: Pid) {
    let mut backstop =
        crate::backoff::Backoff::new(Duration::from_millis(10), Duration::from_millis(100));
    while kill(group) {
        let members = match members_that_can_run(group) {
            Ok(members) if members.is_empty() => return,
            Ok(members) => members,
            Err(e) => {
                eprintln!("elect: cannot look through /proc: {e}");
                Vec::new()
            }
        };
        wait_for_an_end(&members, backstop.pause());
    }
}

/// Sleep until one of `pids` ends, or `at_most` passes. A process gone
/// already (its pidfd cannot be had) returns at once.
fn wait_for_an_end(pids: &[Pid], at_most: Duration) {
    let mut pidfds: Vec<OwnedFd> = Vec::new();
    for &pid in pids.iter().take(WATCHED) {
        match super::pidfd_open(pid) {
            Ok(fd) => pidfds.push(fd),
            // Reaped since the look: look again.
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return,
            // Out of descriptors, or a kernel before 5.3: the backstop alone.
            Err(_) => {}
        }
    }
    let mut fds: Vec<PollFd<'_>> = pidfds
        .iter()
        .map(|fd| PollFd::new(fd.as_fd(), PollFlags::POLLIN))
        .collect();
    let timeout = PollTimeout::try_from(at_most).unwrap_or(PollTimeout::MAX);
    // EINTR: as good as an end; the caller looks again.
    if let Err(e) = poll(&mut fds, timeout)
        && e != Errno::EINTR
    {
        eprintln!("elect: poll: {e}");
        std::thread::sleep(at_most);
    }
}

/// The processes of group `pgid` that are not yet zombies, by /proc.
pub fn members_that_can_run(pgid: Pid) -> io::Result<Vec<Pid>> {
    let mut members = Vec::new();
    for entry in std::fs::read_dir("/proc")? {
        let Ok(entry) = entry else {
            continue;
        };
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        // One read into a buffer of our own: a stat line is short
        // (read_to_string takes a stat and five reads for it).
        let mut buffer = [0u8; 1024];
        let read = std::fs::File::open(format!("/proc/{pid}/stat"))
            .and_then(|mut file| io::Read::read(&mut file, &mut buffer));
        // Gone since the directory was read.
        let Ok(n) = read else {
            continue;
        };
        let stat = String::from_utf8_lossy(&buffer[..n]);
        // Fields after the command name, which may contain anything: state ppid pgrp ...
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.get(2).and_then(|p| p.parse::<i32>().ok()) != Some(pgid.as_raw()) {
            continue;
        }
        // A zombie main thread with threads still running (it called
        // pthread_exit) shows as Z too, with a count of threads above one.
        let zombie = matches!(fields.first(), Some(&("Z" | "X")))
            && fields.get(17).and_then(|n| n.parse::<u32>().ok()) == Some(1);
        if !zombie {
            members.push(Pid::from_raw(pid));
        }
    }
    Ok(members)
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::CommandExt;
    use std::process::Command;
    use std::time::Instant;

    use nix::sys::wait::{Id, WaitPidFlag, waitid};

    use super::*;

    /// A group of its own, led by `sh -c script`, not yet reaped.
    fn group_of(script: &str) -> (std::process::Child, Pid) {
        let child = Command::new("sh")
            .args(["-c", script])
            .process_group(0)
            .spawn()
            .unwrap();
        let group = Pid::from_raw(child.id() as i32);
        (child, group)
    }

    #[test]
    fn a_zombie_is_a_member_that_cannot_run_and_a_reaped_group_is_none() {
        let (mut child, group) = group_of("exec sleep 30");
        assert_eq!(members_that_can_run(group).unwrap(), vec![group]);
        assert!(kill(group), "a live member");
        // Dead, not reaped: the group's id stays ours.
        waitid(Id::Pid(group), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT).unwrap();
        assert_eq!(members_that_can_run(group).unwrap(), vec![]);
        assert!(kill(group), "a zombie is still a member");
        child.wait().unwrap();
        // Signal 0 only: the id is free now, and could be another's.
        assert_eq!(killpg(group, None), Err(Errno::ESRCH));
    }

    #[test]
    fn what_a_command_left_behind_is_killed_and_waited_for() {
        let (mut child, group) = group_of("sleep 30 & sleep 30 & exec sleep 30");
        let give_up = Instant::now() + Duration::from_secs(5);
        while members_that_can_run(group).unwrap().len() < 3 {
            assert!(Instant::now() < give_up, "the group did not fill");
            std::thread::sleep(Duration::from_millis(5));
        }
        let (done, waited) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            kill_until_none_can_run(group);
            done.send(()).unwrap();
        });
        waited
            .recv_timeout(Duration::from_secs(10))
            .expect("the wait ended");
        assert_eq!(members_that_can_run(group).unwrap(), vec![]);
        child.wait().unwrap();
    }
}
