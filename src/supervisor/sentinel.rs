//! The sentinel: the process whose pid is the command's process group id,
//! which kills the group when the guard dies.
//!
//! The guard kills the command's group when elect dies, and elect kills it
//! when the guard dies; when both die at once (SIGKILL of both), the
//! command's own process dies by its parent-death signal, but what it
//! started would run on unwatched, and beside the next holder once the
//! lease expires. The sentinel closes that: a child of the guard that asks
//! for a signal when the guard dies, and then SIGKILLs the group.
//!
//! The group bears the sentinel's pid, not the command's: the guard makes
//! the sentinel lead a new group, puts the command's process in it, and
//! takes the sentinel out again ([`Sentinel::admit`]). So the group's id
//! belongs to a process that the guard never reaps and that is no member:
//! the id cannot be reused while the guard lives (nor while the sentinel
//! could signal it), whatever the command's processes do, and once the
//! command is reaped, `kill(-group, 0)` failing with ESRCH proves that
//! no process of the group is left, zombies included. That one system call
//! is the whole check at a command's end when it left nothing behind; a
//! look through `/proc` is needed only when it did.
//!
//! It blocks every signal it can, so that a stray one (to the guard's
//! group, which it stays in) leaves it be; it takes a signal as the guard's
//! death only once its parent has changed. It holds no descriptor: elect
//! must see the guard's socket close when the guard dies, and the lock must
//! not be kept by it.

use nix::sys::signal::{SigSet, Signal, kill};
use nix::unistd::{ForkResult, Pid, getpgrp, getpid, getppid, setpgid};

/// Its name, as `ps` and `pkill` see it: not elect's (see [`super::guard::NAME`]).
const NAME: &std::ffi::CStr = c"lease-sentinel";

/// The sentinel, as the guard holds it: a child never reaped, whose pid is
/// the command's group id.
pub struct Sentinel {
    pid: Pid,
    /// SIGKILL went out to it: it is done with.
    dismissed: bool,
}

impl Sentinel {
    /// Fork the sentinel. The guard must have one thread.
    pub fn fork() -> nix::Result<Sentinel> {
        let guard = getpid();
        // The child only makes system calls and exits.
        match super::fork_single_threaded()? {
            ForkResult::Parent { child } => Ok(Sentinel {
                pid: child,
                dismissed: false,
            }),
            ForkResult::Child => {
                watch(guard);
                // Not the guard's exit handlers, which are not ours.
                super::exit_forked(0)
            }
        }
    }

    /// The command's process group id.
    pub fn group(&self) -> Pid {
        self.pid
    }

    /// Put `member`, a child of the guard that has not exec'd, in the
    /// command's group: the sentinel leads the group into being (again, if
    /// an earlier member is gone), the member joins, and the sentinel
    /// leaves, back to the guard's group. Each step from the parent's side:
    /// neither child acts on its own group.
    pub fn admit(&self, member: Pid) -> nix::Result<()> {
        setpgid(self.pid, self.pid)?;
        setpgid(member, self.pid)?;
        setpgid(self.pid, getpgrp())
    }

    /// The command's group is gone, or the command never ran: SIGKILL the
    /// sentinel, without waiting for it. It is no member of the group, and
    /// the id it could signal is its own pid, which no other group can
    /// bear while it exists; left unreaped, it is the guard's until the
    /// guard exits, then whoever inherits it reaps it.
    pub fn dismiss(&mut self) {
        if self.dismissed {
            return;
        }
        self.dismissed = true;
        // ESRCH cannot be (the guard never reaps it); anything else would
        // leave it to notice the guard's exit, find the group empty and end.
        if let Err(e) = kill(self.pid, Signal::SIGKILL) {
            eprintln!("elect: guard: cannot end the sentinel: {e}");
        }
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        self.dismiss();
    }
}

/// In the sentinel: wait for the guard's death, then kill the group that
/// bears this process's pid. Returns when done, or if it could not take
/// its post.
fn watch(guard: Pid) {
    if SigSet::all().thread_block().is_err() {
        return;
    }
    close_every_descriptor();
    let _ = nix::sys::prctl::set_name(NAME);
    if nix::sys::prctl::set_pdeathsig(Signal::SIGTERM).is_err() {
        return;
    }
    let waited = SigSet::all();
    // The guard may have died before the parent-death signal was asked for.
    while getppid() == guard {
        let _ = waited.wait();
    }
    // ESRCH: the group is empty, or was never made. Any other failure has
    // nobody to be told (every descriptor is closed): the guard, and
    // elect, kill the group too.
    let _unheard = crate::kill::raw(crate::kill::Target::Group(getpid()), Signal::SIGKILL);
}

/// Close every descriptor this copy of the guard holds.
fn close_every_descriptor() {
    // SAFETY: close_range(2) with no flags takes no pointers.
    let closed = unsafe { libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32) };
    if closed != 0 {
        // Before Linux 5.9: one by one, as far as descriptors go here.
        // Unchecked: EBADF is what a number that is not open gives, and
        // the sentinel has nobody to tell of any other failure.
        for fd in 0..1024 {
            let _ = nix::unistd::close(fd);
        }
    }
}
