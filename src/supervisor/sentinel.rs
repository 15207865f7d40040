//! The sentinel: a process inside the command's group that kills the group
//! when the guard dies.
//!
//! The guard kills the command's group when elect dies, and elect kills it
//! when the guard dies; when both die at once (SIGKILL of both), the
//! command's own process dies by its parent-death signal, but what it
//! started would run on unwatched, and beside the next holder once the
//! lease expires. The sentinel closes that: the guard forks it once the
//! command runs; it joins the command's group, asks for a signal when the
//! guard dies, and then SIGKILLs the group, itself included. Being a member
//! keeps the group's id from being reused for as long as it could signal it.
//!
//! It blocks every signal it can, so that one meant for the group (a
//! script's `kill 0`, Ctrl-C, the `--signal` that stops the command) leaves
//! it be; it takes a signal as the guard's death only once its parent has
//! changed. It holds no descriptor: elect must see the guard's socket close
//! when the guard dies, and the lock must not be kept by it. The guard's
//! SIGKILL to the group at the command's end ends it with the rest.

use nix::sys::signal::{SigSet, Signal, killpg};
use nix::unistd::{ForkResult, Pid, getpid, getppid, setpgid};

/// Its name, as `ps` and `pkill` see it: not elect's (see [`super::guard::NAME`]).
const NAME: &std::ffi::CStr = c"lease-sentinel";

/// Fork the sentinel of the command's group `group`; its pid. The guard
/// must have one thread. Best effort: without it, the guard and elect
/// still watch.
pub fn fork(group: Pid) -> nix::Result<Pid> {
    let guard = getpid();
    // SAFETY: the guard is single-threaded; the child only makes system
    // calls and exits.
    match unsafe { nix::unistd::fork() }? {
        ForkResult::Parent { child } => Ok(child),
        ForkResult::Child => {
            watch(guard, group);
            // SAFETY: _exit skips the guard's exit handlers, which are not ours.
            unsafe { libc::_exit(0) }
        }
    }
}

/// In the sentinel: returns only if it could not take its post.
fn watch(guard: Pid, group: Pid) {
    if SigSet::all().thread_block().is_err() {
        return;
    }
    close_every_descriptor();
    let _ = nix::sys::prctl::set_name(NAME);
    if setpgid(Pid::from_raw(0), group).is_err()
        || nix::sys::prctl::set_pdeathsig(Signal::SIGTERM).is_err()
    {
        return;
    }
    let waited = SigSet::all();
    // The guard may have died before the parent-death signal was asked for.
    while getppid() == guard {
        let _ = waited.wait();
    }
    let _ = killpg(group, Signal::SIGKILL);
}

/// Close every descriptor this copy of the guard holds.
fn close_every_descriptor() {
    // SAFETY: close_range(2) with no flags takes no pointers.
    let closed = unsafe { libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32) };
    if closed != 0 {
        // Before Linux 5.9: one by one, as far as descriptors go here.
        for fd in 0..1024 {
            // SAFETY: closing a descriptor this process owns, or EBADF.
            unsafe { libc::close(fd) };
        }
    }
}
