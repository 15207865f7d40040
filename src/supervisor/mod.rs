//! The child supervisor: start the command under a guard process, pass on
//! deadlines and signals, and learn how it ended.
//!
//! The command runs as a child of the guard ([`guard`]), a copy of elect
//! that is single-threaded and tiny; elect talks to it over a socket pair
//! ([`protocol`]). Every signal goes to the command's whole process group.
//!
//! Three process groups, so that no one stop freezes both watchers: elect's
//! (the shell's job), the guard's, and the command's. Either watcher alone
//! ends the command by the deadline: the guard on its timer, elect with
//! [`kill_group`] if the guard is stopped or dead.

mod deadline;
mod group;
pub mod guard;
mod launch;
mod protocol;
pub mod reaper;
mod sentinel;

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, FdFlag, fcntl};
use nix::sys::signal::Signal;
use nix::sys::socket::{
    AddressFamily, ControlMessage, MsgFlags, SockFlag, SockType, recv, sendmsg, socketpair,
};
use nix::unistd::{ForkResult, Pid};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::UnixStream;
use tokio::process::{Child, Command};

use crate::clock::Instant;
use crate::log;
use deadline::Teller;
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
}

/// What the guard learns when the lock is ours, besides the token.
pub struct Handover<'a> {
    /// Variables that name this holder (its key, its lease), set in the
    /// command's environment over inherited ones.
    pub set_env: Vec<(String, String)>,
    /// Descriptors that hold the lock (a file store's lock file): the guard
    /// keeps them open until the command's group is dead, so that not even
    /// a killed elect lets the lock go sooner, and the command inherits
    /// them, so that not even a killed guard does.
    pub held: &'a [BorrowedFd<'a>],
    /// How to end the session if elect dies while the command runs (see
    /// [`crate::store::Target::release_order`]); secrets included, so it
    /// travels over the socket only.
    pub release_order: Option<Vec<u8>>,
}

/// A guard on its way. Forked at elect's start it is ready at once; a
/// later turn's guard is spawned (fork and exec) in a thread of its own,
/// beside the talk with the store.
pub enum Preparing {
    Forked(Result<Forked, SpawnError>),
    Spawning(tokio::task::JoinHandle<Result<Prepared, SpawnError>>),
}

impl Preparing {
    pub async fn ready(self) -> Result<Prepared, SpawnError> {
        match self {
            Preparing::Forked(forked) => {
                let Forked {
                    socket,
                    pid,
                    pidfd,
                    grace,
                } = forked?;
                socket.set_nonblocking(true).map_err(SpawnError::Guard)?;
                let exited = crate::descriptors::readiness(pidfd).map_err(SpawnError::Guard)?;
                Ok(Prepared {
                    socket: UnixStream::from_std(socket).map_err(SpawnError::Guard)?,
                    guard: GuardProcess::Forked {
                        pid,
                        exited,
                        status: None,
                    },
                    grace,
                })
            }
            Preparing::Spawning(thread) => thread
                .await
                .unwrap_or_else(|e| Err(SpawnError::Guard(io::Error::other(e.to_string())))),
        }
    }
}

/// A guard forked before the runtime started: its socket, not yet the
/// runtime's, and a pidfd to wait for it by.
pub struct Forked {
    socket: StdUnixStream,
    pid: Pid,
    pidfd: OwnedFd,
    grace: Duration,
}

/// The guard's process.
enum GuardProcess {
    Spawned(Child),
    /// Not tokio's child: waited for through its pidfd, which turns
    /// readable when the guard exits.
    Forked {
        pid: Pid,
        exited: AsyncFd<OwnedFd>,
        status: Option<ExitStatus>,
    },
}

impl GuardProcess {
    async fn wait(&mut self) -> io::Result<ExitStatus> {
        let (pid, exited, status) = match self {
            GuardProcess::Spawned(child) => return child.wait().await,
            GuardProcess::Forked {
                pid,
                exited,
                status,
            } => (*pid, exited, status),
        };
        if let Some(done) = status {
            return Ok(*done);
        }
        loop {
            if let Some(done) = reap(pid, false)? {
                *status = Some(done);
                return Ok(done);
            }
            exited.readable().await?.clear_ready();
        }
    }
}

/// Reap our child `pid`, waiting for its end unless `nohang` (then `None`
/// while it runs); EINTR is tried again. rustix's waitpid, not nix's: nix
/// turns the status of a death by a real-time signal, which it has no
/// `Signal` for, into EINVAL, and loses the status of a child it reaped;
/// rustix hands back the raw status.
pub fn reap(pid: Pid, nohang: bool) -> io::Result<Option<ExitStatus>> {
    Ok(reap_any(Some(pid), nohang)?.map(|(_, status)| status))
}

/// [`reap`] of child `pid`, or of any child (`None`): which, and how.
pub fn reap_any(pid: Option<Pid>, nohang: bool) -> io::Result<Option<(Pid, ExitStatus)>> {
    let flags = match nohang {
        true => rustix::process::WaitOptions::NOHANG,
        false => rustix::process::WaitOptions::empty(),
    };
    // A pid that is no process's (not positive) waits for none: ECHILD.
    let pid = match pid {
        Some(pid) => Some(
            rustix::process::Pid::from_raw(pid.as_raw())
                .ok_or_else(|| io::Error::from_raw_os_error(libc::ECHILD))?,
        ),
        None => None,
    };
    loop {
        // rustix's waitpid(None) is our group's children; wait is any child.
        let reaped = match pid {
            Some(pid) => rustix::process::waitpid(Some(pid), flags),
            None => rustix::process::wait(flags),
        };
        match reaped {
            Ok(None) => return Ok(None),
            Ok(Some((reaped, status))) => {
                return Ok(Some((
                    Pid::from_raw(reaped.as_raw_pid()),
                    ExitStatus::from_raw(status.as_raw()),
                )));
            }
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// How the command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    Exited(i32),
    /// By this signal: real-time ones too, which `Signal` cannot name.
    Killed(i32),
}

impl Ending {
    /// How a process that ended with `status` ended; `None` for a status
    /// that is no end (a stop).
    pub fn of(status: ExitStatus) -> Option<Ending> {
        match (status.code(), status.signal()) {
            (Some(code), _) => Some(Ending::Exited(code)),
            (None, Some(sig)) => Some(Ending::Killed(sig)),
            _ => None,
        }
    }
}

/// In words: "exited with 3", "was killed by SIGKILL".
impl std::fmt::Display for Ending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ending::Exited(code) => write!(f, "exited with {code}"),
            Ending::Killed(sig) => write!(f, "was killed by {}", signal_name(*sig)),
        }
    }
}

/// Signal `n` by name ("SIGTERM"), or by number ("signal 35") where it
/// has none (a real-time signal).
pub fn signal_name(n: i32) -> String {
    Signal::try_from(n).map_or_else(|_| format!("signal {n}"), |s| s.to_string())
}

/// What the supervisor has to say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// The guard began the stop on its own.
    Stopping(Stop),
    /// The command ended (its group is gone too).
    Ended(Ending),
    /// The guard died without a report: the command's group may live on.
    GuardLost,
}

/// Why the command did not start.
#[derive(Debug)]
pub enum SpawnError {
    /// The command could not be executed: the errno from exec.
    Exec(i32),
    /// elect could not start its guard.
    Guard(io::Error),
    /// The guard did not start it: the lease was lost, or its deadline
    /// minus the grace had passed, when the guard came to start it.
    NotStarted,
}

impl std::fmt::Display for SpawnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpawnError::Exec(errno) => write!(f, "{}", io::Error::from_raw_os_error(*errno)),
            SpawnError::Guard(e) => write!(f, "{e}"),
            SpawnError::NotStarted => write!(f, "the lease may be gone"),
        }
    }
}

pub struct Supervisor {
    socket: UnixStream,
    inbox: Vec<u8>,
    guard: GuardProcess,
    /// How later deadlines reach the guard without waking it.
    teller: Teller,
    pid: i32,
    group: i32,
}

/// A guard started ahead of time, while elect waits for the lock, so that a
/// handover does not wait for an exec: it starts the command the moment it
/// is given the token. Dropped unused, it exits without starting anything.
pub struct Prepared {
    socket: UnixStream,
    guard: GuardProcess,
    /// The guard's grace: its lease timer rings this long before a deadline.
    grace: Duration,
}

impl Supervisor {
    /// Fork a guard for `plan`; it waits for [`Prepared::start`]. A fork
    /// without an exec: the guard is ready in a fraction of a millisecond,
    /// where starting elect again would take about one.
    ///
    /// # Safety
    ///
    /// No other thread may exist. The child runs ordinary code (it
    /// allocates, it takes std's locks), which is sound after a fork only
    /// if no thread that the fork left behind could have held a lock.
    pub unsafe fn fork(plan: Plan) -> Preparing {
        #[cfg(debug_assertions)]
        {
            let threads = std::fs::read_dir("/proc/self/task").map_or(1, Iterator::count);
            assert_eq!(threads, 1, "the guard is forked before any thread starts");
        }
        let fail = |e: Errno| SpawnError::Guard(e.into());
        let forked = || -> Result<Forked, SpawnError> {
            let (ours, theirs) = socketpair(
                AddressFamily::Unix,
                SockType::Stream,
                None,
                SockFlag::SOCK_CLOEXEC,
            )
            .map_err(fail)?;
            // The caller promises a single thread (see above).
            match fork_single_threaded().map_err(fail)? {
                ForkResult::Child => {
                    // elect's end must close when elect dies: the guard
                    // must not hold it open itself.
                    drop(ours);
                    guard::forked(
                        theirs,
                        protocol::Orders {
                            signal: plan.signal,
                            grace: plan.grace,
                            command: plan.command,
                            set_env: plan.set_env,
                            remove_env: plan.remove_env,
                        },
                    )
                }
                ForkResult::Parent { child } => {
                    drop(theirs);
                    // Also from this side, so the guard is in its own group
                    // before anything is sent to it. ESRCH: it died already,
                    // which its socket will say.
                    match nix::unistd::setpgid(child, child) {
                        Ok(()) | Err(Errno::ESRCH) => {}
                        Err(e) => return Err(fail(e)),
                    }
                    Ok(Forked {
                        socket: StdUnixStream::from(ours),
                        pid: child,
                        pidfd: pidfd_open(child).map_err(SpawnError::Guard)?,
                        grace: plan.grace,
                    })
                }
            }
        };
        Preparing::Forked(forked())
    }

    /// Start a guard for `plan` by exec, in a thread of its own, once
    /// elect has threads; it waits for [`Prepared::start`].
    pub fn prepare(plan: Plan) -> Preparing {
        Preparing::Spawning(tokio::task::spawn_blocking(move || {
            Supervisor::spawn_guard(plan)
        }))
    }

    /// Fork and exec the guard: std's spawn waits until the exec is done.
    fn spawn_guard(plan: Plan) -> Result<Prepared, SpawnError> {
        // The guard's end must survive exec, ours must not: made that way
        // here, so that no code runs between fork and exec and the spawn
        // can take posix_spawn's fast path.
        let (ours, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::Stream,
            None,
            SockFlag::empty(),
        )
        .map_err(|e| SpawnError::Guard(e.into()))?;
        fcntl(&ours, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))
            .map_err(|e| SpawnError::Guard(e.into()))?;
        let mut command = Command::new("/proc/self/exe");
        command
            .arg0(
                <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(
                    guard::NAME.to_bytes(),
                ),
            )
            .args(guard::args(theirs.as_raw_fd(), plan.signal, plan.grace))
            .args(&plan.command)
            .stdin(Stdio::inherit())
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit())
            // A group of its own: a job-control stop of elect's group
            // (Ctrl-Z, kill -STOP -PGID) must leave the guard awake.
            .process_group(0)
            // A guard left over from an abandoned wait is reaped by tokio.
            .kill_on_drop(false);
        for name in &plan.remove_env {
            command.env_remove(name);
        }
        command.envs(plan.set_env.iter().map(|(k, v)| (k, v)));
        let guard = command.spawn().map_err(SpawnError::Guard)?;
        drop(theirs);
        let ours = StdUnixStream::from(ours);
        ours.set_nonblocking(true).map_err(SpawnError::Guard)?;
        let socket = UnixStream::from_std(ours).map_err(SpawnError::Guard)?;
        Ok(Prepared {
            socket,
            guard: GuardProcess::Spawned(guard),
            grace: plan.grace,
        })
    }
}

impl Prepared {
    /// The lock is ours: tell the guard to start the command with `token`,
    /// safe until `deadline`, as `handover` says. Until
    /// [`Supervisor::started`] says it runs, elect may send later deadlines
    /// ([`Supervisor::extend`]) or a stop ([`Supervisor::stop`]): the guard
    /// reads them before it starts the command.
    pub async fn start(
        self,
        token: u64,
        deadline: Instant,
        handover: Handover<'_>,
    ) -> Result<Supervisor, SpawnError> {
        let Prepared {
            socket,
            guard,
            grace,
        } = self;
        let teller = Teller::new(deadline, grace).map_err(SpawnError::Guard)?;
        let mut supervisor = Supervisor {
            socket,
            inbox: Vec::new(),
            guard,
            teller,
            pid: 0,
            group: 0,
        };
        let env: Vec<u8> = handover
            .set_env
            .iter()
            .flat_map(|(k, v)| format!("{k}={v}\0").into_bytes())
            .collect();
        supervisor
            .send_bytes(Message::Env(env.len() as u64), &env)
            .await;
        if let Some(order) = handover.release_order {
            supervisor
                .send_bytes(Message::Order(order.len() as u64), &order)
                .await;
        }
        let shared = supervisor.teller.shared().map(|fd| fd.as_raw_fd());
        if let Err(e) = supervisor
            .send_with_raw_fds(Message::Deadline(deadline.as_nanos()), &shared)
            .await
        {
            return Err(SpawnError::Guard(e));
        }
        if let Err(e) = supervisor
            .send_with_fds(Message::Token(token), handover.held)
            .await
        {
            return Err(SpawnError::Guard(e));
        }
        Ok(supervisor)
    }
}

impl Supervisor {
    /// The guard's answer to the token: the command runs, or why not (then
    /// [`Supervisor::reap`] the guard, which exits). Cancel-safe.
    pub async fn started(&mut self) -> Result<(), SpawnError> {
        match self.receive().await {
            Some(Message::Started { pid, group }) => {
                self.pid = pid;
                self.group = group;
                Ok(())
            }
            Some(Message::SpawnFailed(errno)) => Err(SpawnError::Exec(errno)),
            Some(Message::NotStarted) => Err(SpawnError::NotStarted),
            _ => Err(SpawnError::Guard(io::Error::other(
                "the guard process failed to start",
            ))),
        }
    }

    /// The command's pid.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// The command's process group id: the pid of the guard's sentinel.
    pub fn group(&self) -> i32 {
        self.group
    }

    /// A renewal made the lease safe until `deadline`: the guard reads it
    /// when it wakes, and its timer is set for it, without waking it
    /// ([`deadline`]); by a message, which wakes it, only if that fails.
    pub async fn extend(&mut self, deadline: Instant) {
        if let Err(e) = self.teller.tell(deadline) {
            log::verbose(format_args!(
                "the guard is told the deadline by a message: {e}"
            ));
            self.send(Message::Deadline(deadline.as_nanos())).await;
        }
    }

    /// The lease is lost: signal the group now, SIGKILL after `grace` (at
    /// most the configured grace).
    pub async fn stop(&mut self, grace: Duration) {
        self.send(Message::stop(grace)).await;
    }

    /// SIGKILL the command's group from here, for when the guard cannot (it
    /// is stopped). Called only before the guard reported the command's end:
    /// until then the guard holds its sentinel unreaped, whose pid is the
    /// group's id, so the id cannot have been reused. ESRCH: the group is
    /// gone already.
    pub fn kill_now(&self) {
        crate::kill::send(
            crate::kill::Target::Group(Pid::from_raw(self.group)),
            Signal::SIGKILL,
        );
    }

    /// elect was told to stop (SIGTSTP): stop the command with it.
    pub async fn suspend(&mut self) {
        self.send(Message::Suspend).await;
    }

    /// elect was continued: so is the command, if its lease allows.
    pub async fn resume(&mut self) {
        self.send(Message::Resume).await;
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
            Some(Message::Killed(n)) => Event::Ended(Ending::Killed(n)),
            // The guard died without a report; it only does so if killed.
            // Its parent-death signal killed the command, not the command's
            // children.
            _ => Event::GuardLost,
        }
    }

    /// Reap the guard; how it ended.
    pub async fn reap(mut self) -> Option<std::process::ExitStatus> {
        self.guard.wait().await.ok()
    }

    /// Send `message` with descriptors (SCM_RIGHTS): they travel as open
    /// files, so the guard shares their locks.
    async fn send_with_fds(&mut self, message: Message, fds: &[BorrowedFd<'_>]) -> io::Result<()> {
        let raw: Vec<i32> = fds.iter().map(|fd| fd.as_raw_fd()).collect();
        self.send_with_raw_fds(message, &raw).await
    }

    /// The same, with descriptors that stay open while it runs.
    async fn send_with_raw_fds(&mut self, message: Message, raw: &[i32]) -> io::Result<()> {
        let record = message.encode();
        loop {
            self.socket.writable().await?;
            let sent = self.socket.try_io(Interest::WRITABLE, || {
                let iov = [io::IoSlice::new(&record)];
                let rights = [ControlMessage::ScmRights(raw)];
                let cmsgs: &[ControlMessage<'_>] = if raw.is_empty() { &[] } else { &rights };
                sendmsg::<()>(
                    self.socket.as_raw_fd(),
                    &iov,
                    cmsgs,
                    MsgFlags::empty(),
                    None,
                )
                .map_err(io::Error::from)
            });
            match sent {
                Ok(n) if n == record.len() => return Ok(()),
                Ok(_) => return Err(io::Error::other("a short write to the guard")),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// A message that announces `bytes`, then the bytes.
    async fn send_bytes(&mut self, message: Message, bytes: &[u8]) {
        self.send(message).await;
        let _ = self.socket.write_all(bytes).await;
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
            // Whatever is there now, whether or not the runtime has heard of
            // it yet: when elect is continued after a stop, the guard's
            // report of what it did meanwhile comes before any timer.
            let read = match recv(self.socket.as_raw_fd(), &mut buf, MsgFlags::MSG_DONTWAIT) {
                Err(Errno::EAGAIN | Errno::EINTR) => {
                    if self.socket.readable().await.is_err() {
                        return None;
                    }
                    match self.socket.try_read(&mut buf) {
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                        other => other.ok(),
                    }
                }
                other => other.ok(),
            };
            match read {
                Some(0) | None => return None,
                Some(n) => self.inbox.extend_from_slice(&buf[..n]),
            }
        }
    }
}

/// fork(2) in a process of one thread: elect's, forking the guard, whose
/// caller promises that no thread has started (see [`Supervisor::fork`]),
/// and the guard's, forking the command's process and the sentinel (the
/// guard has one thread from its start, forked from elect before the
/// runtime or exec'd, and starts none). Only those call it.
fn fork_single_threaded() -> nix::Result<ForkResult> {
    // SAFETY: the process is single-threaded (see above), so no lock that
    // the child could need is held by a thread the fork leaves behind: the
    // child may allocate and use std freely.
    unsafe { nix::unistd::fork() }
}

/// End a forked child at once with `code`: not through `exit`, which would
/// run the exit handlers and flush the buffers of the process it was forked
/// from, which are not the child's.
fn exit_forked(code: i32) -> ! {
    // SAFETY: _exit(2) takes no pointers and reads no memory of ours; it
    // ends the process without returning.
    unsafe { libc::_exit(code) }
}

/// A pidfd for process `pid` (our child: unreaped, its pid cannot be reused
/// first).
fn pidfd_open(pid: Pid) -> io::Result<OwnedFd> {
    let pid = rustix::process::Pid::from_raw(pid.as_raw())
        .ok_or_else(|| io::Error::from_raw_os_error(libc::ESRCH))?;
    Ok(rustix::process::pidfd_open(
        pid,
        rustix::process::PidfdFlags::empty(),
    )?)
}

/// SIGKILL process group `pgid` until none of it can run any more: the group
/// is gone, or holds only zombies (which whoever inherited them reaps).
pub async fn kill_group(pgid: i32) {
    let group = Pid::from_raw(pgid);
    // Waits on the ends of the group's processes, in a thread of its own.
    let waited = tokio::task::spawn_blocking(move || group::kill_until_none_can_run(group));
    if waited.await.is_err() {
        // That thread is lost (a panic): the same wait on this one.
        group::kill_until_none_can_run(group);
    }
}
