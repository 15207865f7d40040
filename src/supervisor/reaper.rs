//! PID 1 duty: reap every orphan without stealing anyone's exit status.
//!
//! As a container's entrypoint elect is PID 1: orphans are re-parented to it
//! and must be reaped, or they pile up as zombies. Reaping means
//! `waitpid(-1)`, and a `waitpid(-1)` loop in the same process as tokio's
//! process support steals the status of the children tokio waits for (its
//! own wait then fails with ECHILD). Routing every status by pid through one
//! loop would work only if that loop owned all waiting, tokio's included.
//!
//! So elect splits in two. The process that is PID 1 (or that `--subreaper`
//! made a child subreaper) becomes this reaper: a small synchronous loop that
//! starts a copy of elect to do the real work, passes it every signal, reaps
//! whatever dies, and exits as the copy did. The copy is an ordinary process:
//! no orphan is ever re-parented to it, so nothing can race its waits.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::Command;

use super::Ending;
use nix::sys::signal::{SigSet, Signal};
use nix::unistd::Pid;

use crate::exit::{Failure, Outcome};

/// The hidden first argument of the copy that the reaper starts.
pub const ARG: &str = "__elect-reaped";

/// Signals the reaper passes on to the copy (SIGCHLD it handles itself).
const PASSED_ON: [Signal; 7] = [
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGWINCH,
];

/// This process is the copy a reaper started (`main` sets it).
static REAPED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Note that this process is the copy a reaper started.
pub fn mark_reaped() {
    REAPED.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Whether this process is the copy a reaper started: its parent is the
/// reaper, which systemd knows as the unit's main process.
pub fn reaped() -> bool {
    REAPED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Whether this elect must be a reaper: it is PID 1, or was asked to be.
pub fn needed(asked: bool) -> bool {
    asked || std::process::id() == 1
}

/// Become the reaper in front of a copy of elect run with `args` (argv[1..]). Never returns.
pub fn main(args: &[OsString]) -> ! {
    let pid1 = std::process::id() == 1;
    let mut handled = SigSet::empty();
    handled.add(Signal::SIGCHLD);
    for sig in PASSED_ON {
        handled.add(sig);
    }
    // Blocked before the copy exists, so that no signal is lost; the copy
    // unblocks them before it execs.
    if let Err(e) = handled.thread_block() {
        fail(format_args!("cannot block signals: {e}"));
    }
    if !pid1 && let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        fail(format_args!("cannot become a subreaper: {e}"));
    }
    let mut command = Command::new("/proc/self/exe");
    command.arg0("elect").arg(ARG).args(args);
    // SAFETY: between fork and exec only pthread_sigmask, an atomic load,
    // getrlimit and setrlimit, which are async-signal-safe; their failure
    // fails the spawn. The copy starts with the open-file limit elect was
    // started with, and raises its own as this process did.
    unsafe {
        command.pre_exec(|| {
            SigSet::empty().thread_set_mask()?;
            crate::descriptors::restore()
        });
    }
    let copy = match command.spawn() {
        Ok(child) => Pid::from_raw(child.id() as i32),
        Err(e) => Outcome::from(crate::descriptors::or(&e, || {
            Failure::software(format!("cannot start: {e}"))
        }))
        .finish(),
    };
    loop {
        let sig = match handled.wait() {
            Ok(sig) => sig,
            Err(_) => continue,
        };
        if sig != Signal::SIGCHLD {
            crate::kill::send(crate::kill::Target::Process(copy), sig);
            continue;
        }
        // Reap everything that has died; remember how the copy ended.
        // Raw statuses: a death by a real-time signal is one too.
        while let Ok(Some((pid, status))) = super::reap_any(None, true) {
            match Ending::of(status) {
                Some(Ending::Exited(code)) if pid == copy => std::process::exit(code),
                Some(Ending::Killed(sig)) if pid == copy => die_as(sig),
                _ => {}
            }
        }
    }
}

/// End as the copy ended: by its signal, or as PID 1, with 128+N.
fn die_as(sig: i32) -> ! {
    Outcome::Raise(sig).finish()
}

fn fail(args: std::fmt::Arguments<'_>) -> ! {
    Outcome::from(Failure::software(args.to_string())).finish()
}
