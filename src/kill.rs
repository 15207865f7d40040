//! kill(2) and killpg(2) with their results checked, as tini checks each:
//! ESRCH (the process gone, or a group without a member left) is what a
//! kill of something that may have ended expects; any other failure
//! (EPERM: a process not ours; EINVAL) is a fault, said in one line.

use std::fmt;

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

/// Whom a signal goes to.
#[derive(Clone, Copy, Debug)]
pub enum Target {
    Process(Pid),
    Group(Pid),
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Process(pid) => write!(f, "process {pid}"),
            Target::Group(pgid) => write!(f, "process group {pgid}"),
        }
    }
}

/// Send `sig` to `target`: whether it was delivered. Gone (ESRCH) is
/// false and nothing more; any other failure is false and a warning.
pub fn send(target: Target, sig: Signal) -> bool {
    match raw(target, sig) {
        Ok(()) => true,
        Err(Errno::ESRCH) => false,
        Err(e) => {
            crate::log::warn(format_args!("cannot send {sig} to {target}: {e}"));
            false
        }
    }
}

/// The system call alone, for a process that has nobody to tell.
pub fn raw(target: Target, sig: Signal) -> nix::Result<()> {
    match target {
        Target::Process(pid) => kill(pid, sig),
        Target::Group(pgid) => killpg(pgid, sig),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_gone_is_no_fault_and_a_live_one_gets_the_signal() {
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        let pid = Pid::from_raw(gone.id() as i32);
        gone.wait().unwrap();
        assert!(!send(Target::Process(pid), Signal::SIGTERM));
        assert_eq!(
            raw(Target::Process(pid), Signal::SIGTERM),
            Err(Errno::ESRCH)
        );
        assert!(send(Target::Process(Pid::this()), Signal::SIGCONT));
        assert!(send(Target::Group(nix::unistd::getpgrp()), Signal::SIGCONT));
    }
}
