//! The command's process, forked by the guard before the lock is ours.
//!
//! A fork of the guard costs a copy of its page tables, and the new process
//! must be put in the command's group ([`super::sentinel::Sentinel::admit`])
//! and ask for its parent-death signal before it execs. All of that can
//! happen while elect still waits for the store: the process then waits on
//! a pipe, and the word to go (the token and the variables that name the
//! holder) leaves only the exec for the moment the lock is ours. It never
//! execs without that word: if the guard closes the pipe first, or dies, it
//! exits.
//!
//! Over a second, close-on-exec pipe the process answers the word: `+`
//! when it has it, then `!` and an errno if the command could not be
//! started, `-` if the word came too late (the lease's deadline minus the
//! grace, which the word carries, had passed by the moment of the exec), or
//! nothing (the pipe closes at the exec). Silence without `+` means it died
//! before the word, and the guard forks another.

use std::ffi::OsString;
use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::Command;

use nix::fcntl::OFlag;
use nix::sys::signal::{SigSet, Signal};
use nix::sys::socket::{
    AddressFamily, ControlMessage, MsgFlags, SockFlag, SockType, recvmsg, sendmsg, socketpair,
};
use nix::sys::wait::waitpid;
use nix::unistd::{ForkResult, Pid};

use super::protocol::{MAX_HELD, Orders};
use super::sentinel::Sentinel;
use crate::clock::Instant;
use crate::disposition::{self, Disposition};

/// The command's process, forked and waiting for the word to go.
pub struct Launch {
    /// Until it has exec'd the command (or been reaped).
    pid: Option<Pid>,
    /// The word goes here (a socket, to carry the lock's descriptors);
    /// closing it unsent makes the process exit.
    go: Option<UnixStream>,
    /// Its answer.
    answer: std::fs::File,
}

/// What the process answers when told to go.
const READY: u8 = b'+';
const FAILED: u8 = b'!';
const LATE: u8 = b'-';

/// How the word to go was taken.
pub enum Went {
    /// The command runs with this pid.
    Started(Pid),
    /// The process was gone before it heard the word.
    Gone,
    /// The word came after the time it named: nothing was started.
    Late,
}

impl Launch {
    /// Put the process in the command's group, which it must be in before
    /// it hears the word. Dropped on failure: it exits, and is reaped.
    pub fn join(self, group: &Sentinel) -> std::io::Result<Launch> {
        if let Some(pid) = self.pid {
            group.admit(pid)?;
        }
        Ok(self)
    }

    /// Fork the command's process, in the guard's group until it
    /// [`Launch::join`]s the command's. The guard must have one thread.
    pub fn fork(orders: &Orders) -> std::io::Result<Launch> {
        let (go_read, go_write) = socketpair(
            AddressFamily::Unix,
            SockType::Stream,
            None,
            SockFlag::SOCK_CLOEXEC,
        )?;
        let (answer_read, answer_write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
        let guard = nix::unistd::getpid();
        match super::fork_single_threaded()? {
            ForkResult::Child => {
                drop(go_write);
                drop(answer_read);
                // Not even a panic may unwind into the guard's frames above.
                let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    let mut answer = std::fs::File::from(answer_write);
                    let errno = match wait_and_exec(orders, guard, go_read, &mut answer) {
                        Waited::Closed => return 0,
                        Waited::Late => {
                            let _ = answer.write_all(&[LATE]);
                            return 0;
                        }
                        Waited::Failed(e) => e.raw_os_error().unwrap_or(libc::EINVAL),
                    };
                    let mut report = [FAILED; 5];
                    report[1..].copy_from_slice(&errno.to_le_bytes());
                    let _ = answer.write_all(&report);
                    127
                }))
                .unwrap_or(127);
                // Not the guard's exit handlers and buffers, which are the
                // guard's, not ours.
                super::exit_forked(code)
            }
            ForkResult::Parent { child } => Ok(Launch {
                pid: Some(child),
                go: Some(UnixStream::from(go_write)),
                answer: std::fs::File::from(answer_read),
            }),
        }
    }

    /// Give the word to go, with the variables that name the holder as
    /// elect sent them (`NAME=VALUE\0`…) and the descriptors that hold the
    /// lock (the command inherits them: a lock that lives in a descriptor
    /// cannot pass while any process of the command's keeps it), unless
    /// `stop_at` has passed by the moment of the exec. `Err` if the command
    /// could not be exec'd (the process is reaped).
    pub fn go(
        mut self,
        token: u64,
        stop_at: Instant,
        env: &[u8],
        held: &[OwnedFd],
        interactive: bool,
    ) -> std::io::Result<Went> {
        let mut word = vec![u8::from(interactive)];
        word.extend_from_slice(&token.to_le_bytes());
        word.extend_from_slice(&stop_at.as_nanos().to_le_bytes());
        word.extend_from_slice(env);
        // One stopped by a stray SIGSTOP to its group would never answer.
        if let Some(pid) = self.pid {
            crate::kill::send(crate::kill::Target::Process(pid), Signal::SIGCONT);
        }
        // A process gone already makes this fail (EPIPE: the guard ignores
        // SIGPIPE) or go unread; either way its answer is silence. Closing
        // the socket ends the word.
        if let Some(go) = self.go.take() {
            let _ = send_word(go, &word, held);
        }
        let mut tag = [0u8; 1];
        if read_full(&mut self.answer, &mut tag)? == 0 {
            self.reap();
            return Ok(Went::Gone);
        }
        let mut errno = [0u8; 4];
        if tag[0] == READY {
            let mut next = [0u8; 1];
            match (read_full(&mut self.answer, &mut next)?, next[0]) {
                (0, _) => return Ok(self.pid.take().map_or(Went::Gone, Went::Started)),
                (_, LATE) => {
                    self.reap();
                    return Ok(Went::Late);
                }
                _ => {}
            }
        }
        read_full(&mut self.answer, &mut errno)?;
        self.reap();
        Err(std::io::Error::from_raw_os_error(i32::from_le_bytes(errno)))
    }

    fn reap(&mut self) {
        if let Some(pid) = self.pid.take() {
            let _ = waitpid(pid, None);
        }
    }
}

impl Drop for Launch {
    /// Not started: close the pipe, so the process exits, and reap it.
    fn drop(&mut self) {
        self.go = None;
        self.reap();
    }
}

/// How the wait for the word ended, if not in an exec.
enum Waited {
    /// The guard closed the pipe without a word.
    Closed,
    /// The word came after the time it named.
    Late,
    Failed(std::io::Error),
}

/// In the forked process: die with the guard, wait for the word (by then
/// the guard has put this process in the command's group), then take the
/// terminal if told to, reset every signal to its default and exec the
/// command. Returns only if it cannot.
fn wait_and_exec(orders: &Orders, guard: Pid, go: OwnedFd, answer: &mut std::fs::File) -> Waited {
    let failed = |call: &str, e: nix::Error| {
        eprintln!("elect: guard: {call} failed in the command's process: {e}");
        Waited::Failed(std::io::Error::from(e))
    };
    // If the guard dies, this process dies; and if the guard died before
    // this line, the signal will never come: give up.
    if let Err(e) = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL) {
        return failed("prctl(PR_SET_PDEATHSIG)", e);
    }
    if nix::unistd::getppid() != guard {
        return Waited::Closed;
    }
    // The descriptors that hold the lock come without close-on-exec: the
    // command keeps them.
    let word = match receive_word(go) {
        Ok(word) => word,
        Err(e) => return Waited::Failed(e),
    };
    let Some((&interactive, rest)) = word.split_first() else {
        return Waited::Closed;
    };
    let Some((token, rest)) = rest.split_first_chunk::<8>() else {
        return Waited::Closed;
    };
    let Some((stop_at, env)) = rest.split_first_chunk::<8>() else {
        return Waited::Closed;
    };
    let stop_at = Instant::from_nanos(u64::from_le_bytes(*stop_at));
    if let Err(e) = answer.write_all(&[READY]) {
        return Waited::Failed(e);
    }
    if interactive == 1 {
        // Take the foreground: SIGTTOU would stop a background group that
        // asks, so it is ignored until the reset below.
        if let Err(e) = disposition::set(libc::SIGTTOU, Disposition::Ignore) {
            return failed("rt_sigaction", e);
        }
        if let Err(e) = nix::unistd::tcsetpgrp(std::io::stdin(), nix::unistd::getpgrp()) {
            return failed("tcsetpgrp", e);
        }
    }
    // Default dispositions and an empty mask, whatever elect's parent or
    // elect itself ignored or blocked.
    for sig in 1..=libc::SIGRTMAX() {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        if let Err(e) = reset_disposition(sig) {
            return failed("rt_sigaction", e);
        }
    }
    if let Err(e) = SigSet::empty().thread_set_mask() {
        return failed("sigprocmask", e);
    }
    // The open-file limit elect was started with, had it raised its own.
    if let Err(e) = crate::descriptors::restore() {
        eprintln!("elect: guard: setrlimit failed in the command's process: {e}");
        return Waited::Failed(e);
    }
    let mut command = Command::new(&orders.command[0]);
    command.args(&orders.command[1..]);
    for name in &orders.remove_env {
        command.env_remove(name);
    }
    command.envs(orders.set_env.iter().map(|(k, v)| (k, v)));
    for pair in env.split(|&b| b == 0).filter(|p| !p.is_empty()) {
        let at = pair.iter().position(|&b| b == b'=').unwrap_or(pair.len());
        let value = pair.get(at + 1..).unwrap_or_default();
        command.env(
            OsString::from_vec(pair[..at].to_vec()),
            OsString::from_vec(value.to_vec()),
        );
    }
    command.env("ELECT_TOKEN", u64::from_le_bytes(*token).to_string());
    // The last look at the clock before the command may run: never once
    // the lease may be gone (this process may have been stopped meanwhile).
    if Instant::now() >= stop_at {
        return Waited::Late;
    }
    Waited::Failed(command.exec())
}

/// Send the word and the descriptors with its first byte, then close.
fn send_word(mut go: UnixStream, word: &[u8], held: &[OwnedFd]) -> std::io::Result<()> {
    let raw: Vec<RawFd> = held.iter().map(|fd| fd.as_raw_fd()).collect();
    let rights = [ControlMessage::ScmRights(&raw)];
    let cmsgs: &[ControlMessage<'_>] = if raw.is_empty() { &[] } else { &rights };
    let sent = loop {
        match sendmsg::<()>(
            go.as_raw_fd(),
            &[IoSlice::new(word)],
            cmsgs,
            MsgFlags::empty(),
            None,
        ) {
            Err(nix::Error::EINTR) => continue,
            other => break other?,
        }
    };
    go.write_all(&word[sent..])
}

/// Read the word until the guard closes its end: its bytes, with any
/// descriptors that came with them installed (inheritable) in this process.
fn receive_word(go: OwnedFd) -> std::io::Result<Vec<u8>> {
    let mut word = Vec::new();
    loop {
        let mut buf = [0u8; 4096];
        let mut space = nix::cmsg_space!([RawFd; MAX_HELD]);
        let mut iov = [IoSliceMut::new(&mut buf)];
        let message = match recvmsg::<()>(
            go.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::empty(),
        ) {
            Ok(m) => m,
            Err(nix::Error::EINTR) => continue,
            Err(e) => return Err(e.into()),
        };
        // The kernel installed the descriptors that came with it (all of
        // them, or the room was too small: ENOBUFS). They stay open, for the
        // command, on purpose: nothing takes ownership of their numbers.
        message.cmsgs()?;
        match message.bytes {
            0 => return Ok(word),
            n => word.extend_from_slice(&buf[..n]),
        }
    }
}

/// Read until `buf` is full or the pipe closes; how much was read.
fn read_full(from: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match from.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// Set `sig` to its default action. Where [`disposition::set`] goes
/// through glibc, glibc's own signals (which it refuses) are left as they
/// are. Async-signal-safe.
fn reset_disposition(sig: i32) -> nix::Result<()> {
    match disposition::set(sig, Disposition::Default) {
        Err(_) if !disposition::RAW && (32..libc::SIGRTMIN()).contains(&sig) => Ok(()),
        other => other,
    }
}
