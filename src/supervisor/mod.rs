//! The child supervisor: start the command under a guard process, pass on
//! deadlines and signals, and learn how it ended.
//!
//! The command runs as a child of the guard ([`guard`]), a copy of elect
//! that is single-threaded and tiny; elect talks to it over a socket pair
//! ([`protocol`]). Every signal goes to the command's whole process group.

pub mod guard;
mod protocol;
pub mod reaper;

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::process::{Child, Command};

use crate::clock::Instant;
pub use protocol::Stop;
use protocol::{Message, SIZE};

/// How to run the command.
pub struct Plan {
    pub command: Vec<OsString>,
    /// Variables to set in the command's environment, over inherited ones.
    pub set_env: Vec<(String, String)>,
    /// Inherited variables the command must not see.
    pub remove_env: Vec<String>,
    pub signal: Signal,
    pub grace: Duration,
    /// Descriptors the guard keeps open until the command's group is dead.
    pub hold_fds: Vec<std::os::fd::RawFd>,
}

/// How the command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    Exited(i32),
    Killed(Signal),
}

/// What the supervisor has to say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// The guard began the stop on its own.
    Stopping(Stop),
    /// The command ended (its group is gone too).
    Ended(Ending),
}

/// Why the command did not start.
#[derive(Debug)]
pub enum SpawnError {
    /// The command could not be executed: the errno from exec.
    Exec(i32),
    /// elect could not start its guard.
    Guard(io::Error),
}

impl std::fmt::Display for SpawnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpawnError::Exec(errno) => write!(f, "{}", io::Error::from_raw_os_error(*errno)),
            SpawnError::Guard(e) => write!(f, "{e}"),
        }
    }
}

pub struct Supervisor {
    socket: UnixStream,
    inbox: Vec<u8>,
    guard: Child,
    pid: i32,
}

/// A guard started ahead of time, while elect waits for the lock, so that a
/// handover does not wait for an exec: it starts the command the moment it
/// is given the token. Dropped unused, it exits without starting anything.
pub struct Prepared {
    socket: UnixStream,
    guard: Child,
    /// (device, inode) of each descriptor the guard holds.
    held: Vec<(u64, u64)>,
}

/// (device, inode) of open descriptors: what they are, not their numbers.
pub fn identities(fds: &[std::os::fd::RawFd]) -> Vec<(u64, u64)> {
    fds.iter()
        .map(|&fd| {
            // SAFETY: fstat on a descriptor the caller keeps open.
            let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
            nix::sys::stat::fstat(fd).map_or((0, 0), |st| (st.st_dev, st.st_ino))
        })
        .collect()
}

impl Supervisor {
    /// Start a guard for `plan`; it waits for [`Prepared::start`].
    pub fn prepare(plan: Plan) -> Result<Prepared, SpawnError> {
        let (ours, theirs) = StdUnixStream::pair().map_err(SpawnError::Guard)?;
        let theirs = OwnedFd::from(theirs);
        let fd = theirs.as_raw_fd();
        let mut command = Command::new("/proc/self/exe");
        command
            .arg0("elect")
            .args(guard::args(fd, plan.signal, plan.grace, &plan.hold_fds))
            .args(&plan.command)
            .stdin(Stdio::inherit())
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit())
            // A guard left over from an abandoned wait is reaped by tokio.
            .kill_on_drop(false);
        for name in &plan.remove_env {
            command.env_remove(name);
        }
        command.envs(plan.set_env.iter().map(|(k, v)| (k, v)));
        // SAFETY: fcntl is async-signal-safe. The guard's end of the socket
        // and the descriptors it holds must survive exec.
        let inherited: Vec<std::os::fd::RawFd> = std::iter::once(fd)
            .chain(plan.hold_fds.iter().copied())
            .collect();
        unsafe {
            command.pre_exec(move || {
                for &fd in &inherited {
                    if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let guard = command.spawn().map_err(SpawnError::Guard)?;
        drop(theirs);
        ours.set_nonblocking(true).map_err(SpawnError::Guard)?;
        let socket = UnixStream::from_std(ours).map_err(SpawnError::Guard)?;
        Ok(Prepared {
            socket,
            guard,
            held: identities(&plan.hold_fds),
        })
    }
}

impl Prepared {
    /// Whether this guard holds exactly these descriptors' files (a file
    /// store reopens a lock file that was replaced while it waited).
    pub fn holds(&self, fds: &[std::os::fd::RawFd]) -> bool {
        self.held == identities(fds)
    }

    /// The lock is ours: start the command with `token`, safe until `deadline`.
    pub async fn start(self, token: u64, deadline: Instant) -> Result<Supervisor, SpawnError> {
        let Prepared { socket, guard, .. } = self;
        let mut supervisor = Supervisor {
            socket,
            inbox: Vec::new(),
            guard,
            pid: 0,
        };
        supervisor
            .send(Message::Deadline(deadline.as_nanos()))
            .await;
        supervisor.send(Message::Token(token)).await;
        match supervisor.receive().await {
            Some(Message::Started(pid)) => {
                supervisor.pid = pid;
                Ok(supervisor)
            }
            Some(Message::SpawnFailed(errno)) => {
                let _ = supervisor.guard.wait().await;
                Err(SpawnError::Exec(errno))
            }
            _ => {
                let _ = supervisor.guard.wait().await;
                Err(SpawnError::Guard(io::Error::other(
                    "the guard process failed to start",
                )))
            }
        }
    }
}

impl Supervisor {
    /// The command's pid, which is also its process group id.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// A renewal made the lease safe until `deadline`.
    pub async fn extend(&mut self, deadline: Instant) {
        self.send(Message::Deadline(deadline.as_nanos())).await;
    }

    /// The lease is lost: signal the group now, SIGKILL after the grace.
    pub async fn stop(&mut self) {
        self.send(Message::Stop).await;
    }

    /// Pass a signal sent to elect on to the command's group.
    pub async fn forward(&mut self, signal: Signal) {
        self.send(Message::Signal(signal as i32)).await;
    }

    /// The next event. Cancel-safe: nothing read is lost if dropped.
    pub async fn event(&mut self) -> Event {
        match self.receive().await {
            Some(Message::Stopping(why)) => Event::Stopping(why),
            Some(Message::Exited(code)) => Event::Ended(Ending::Exited(code)),
            Some(Message::Killed(n)) => Event::Ended(Ending::Killed(
                Signal::try_from(n).unwrap_or(Signal::SIGKILL),
            )),
            _ => {
                // The guard died without a report; it only does so if killed,
                // and then its parent-death signal has killed the command.
                crate::log::error(format_args!("the guard process ended unexpectedly"));
                Event::Ended(Ending::Killed(Signal::SIGKILL))
            }
        }
    }

    /// Reap the guard after the command ended.
    pub async fn reap(mut self) {
        let _ = self.guard.wait().await;
    }

    async fn send(&mut self, message: Message) {
        // The guard reads promptly; if it is gone, event() reports that.
        let _ = self.socket.write_all(&message.encode()).await;
    }

    async fn receive(&mut self) -> Option<Message> {
        loop {
            if self.inbox.len() >= SIZE {
                let record: [u8; SIZE] = self.inbox[..SIZE].try_into().ok()?;
                self.inbox.drain(..SIZE);
                return Message::decode(&record);
            }
            let mut buf = [0u8; 64];
            match self.socket.read(&mut buf).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.inbox.extend_from_slice(&buf[..n]),
            }
        }
    }
}
