//! The guard's watch: from the lock's handover, start the command, then
//! wait for the next event (a message from elect, the command's SIGCHLD,
//! a timer), step [`super::machine`], and perform its actions with their
//! system calls, until the command's group is gone and elect is told.

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Seek, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::Command;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::memfd::MFdFlags;
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::Pid;

use super::RELEASE_ARG;
use super::machine::{Action, Event, Rules, State};
use super::orders::{HandedOver, orders_in, read_latest_orders};
use super::terminal::Terminal;
use crate::clock::{BootTimer, Instant};
use crate::disposition::Disposition;
use crate::release::status_arg;
use crate::supervisor::Ending;
use crate::supervisor::launch::{Launch, Went};
use crate::supervisor::protocol::{Message, Orders, SIZE};
use crate::supervisor::sentinel::Sentinel;

/// Signals that the guard ignores: elect decides what the command gets,
/// and a stray signal to the guard's group must not end its watch.
const IGNORED: [Signal; 10] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGPIPE,
    // Job control must not stop the one process that enforces the deadline
    // while elect is stopped (SIGSTOP cannot be ignored: elect covers that).
    Signal::SIGTSTP,
    Signal::SIGTTIN,
    // To take the terminal back from the background.
    Signal::SIGTTOU,
];

pub(super) struct Guard {
    socket: UnixStream,
    /// The lock: its descriptors live as long as we do.
    lock: HandedOver,
    inbox: Vec<u8>,
    child: Pid,
    /// The command's process group: the sentinel's pid.
    group: Pid,
    /// elect's process group: the job that a shell stops and continues.
    job: Pid,
    /// Readable when the command exits, stops or continues.
    sigchld: SignalFd,
    terminal: Option<Terminal>,
    timer: BootTimer,
    rules: Rules,
    /// Where the command's life is: [`machine`] decides what follows.
    state: State,
    /// Whose pid is the command's group id: alive, or unreaped, until we exit.
    sentinel: Sentinel,
    /// elect, which started us: named in what we say once it is gone.
    elect: Pid,
}

/// What the last look at the command found.
enum ChildState {
    Exited,
    Stopped,
    Continued,
    Unchanged,
}

/// What performing an action led to.
enum Performed {
    Done,
    /// The action waited for this, which the machine is told next.
    Event(Event),
    Exit,
}

impl Guard {
    pub(super) fn start(
        mut socket: UnixStream,
        orders: Orders,
        mut lock: HandedOver,
        launch: std::io::Result<Launch>,
        sentinel: nix::Result<Sentinel>,
        elect: Pid,
    ) -> std::io::Result<Option<Guard>> {
        for sig in IGNORED {
            crate::disposition::set(sig as libc::c_int, Disposition::Ignore)?;
        }
        // SIGCHLD by descriptor: it reports stops too, which a pidfd does not.
        let mut chld = SigSet::empty();
        chld.add(Signal::SIGCHLD);
        chld.thread_block()?;
        let sigchld = SignalFd::with_flags(&chld, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)?;
        // elect, our parent, leads the job; we lead a group of our own.
        let job = nix::unistd::getpgid(Some(elect))?;
        let terminal = Terminal::of_an_interactive_command(job);
        let rules = Rules {
            signal: orders.signal,
            grace: orders.grace,
        };
        // What elect sent after the token, while we were on our way here
        // (slow, or stopped): a later deadline, or the word that the lease
        // is lost. Before the start they move the state only.
        let mut inbox = Vec::with_capacity(SIZE);
        let mut state = State::Starting {
            deadline: lock.deadline,
        };
        for event in read_latest_orders(&socket, &mut inbox) {
            (state, _) = rules.step(state, event, Instant::now());
        }
        if let Some(at) = lock.told.moved() {
            (state, _) = rules.step(state, Event::Renewed(at), Instant::now());
        }
        let sentinel = match sentinel {
            Ok(sentinel) => sentinel,
            Err(e) => {
                // No group to run the command in.
                socket.write_all(&Message::SpawnFailed(e as i32).encode())?;
                return Ok(None);
            }
        };
        let (state, actions) = rules.step(state, Event::Ready, Instant::now());
        let started = match actions[..] {
            [Action::Start { stop_at }] => start_command(
                &orders,
                &lock,
                stop_at,
                terminal.is_some(),
                launch,
                &sentinel,
            ),
            // Action::LeaveUnstarted.
            _ => Ok(None),
        };
        let child = match started {
            Ok(Some(child)) => child,
            Ok(None) => {
                // The lease may be gone: the command must not run at all.
                if terminal.is_some() {
                    let _ = nix::unistd::tcsetpgrp(std::io::stdin(), job);
                }
                drop(sentinel);
                socket.write_all(&Message::NotStarted.encode())?;
                return Ok(None);
            }
            Err(e) => {
                drop(sentinel);
                let errno = e.raw_os_error().unwrap_or(libc::ENOENT);
                socket.write_all(&Message::SpawnFailed(errno).encode())?;
                return Ok(None);
            }
        };
        let group = sentinel.group();
        socket.write_all(
            &Message::Started {
                pid: child.as_raw(),
                group: group.as_raw(),
            }
            .encode(),
        )?;
        let timer = BootTimer::new(false)?;
        Ok(Some(Guard {
            socket,
            lock,
            inbox,
            child,
            group,
            job,
            sigchld,
            terminal,
            timer,
            rules,
            state,
            sentinel,
            elect,
        }))
    }

    /// The watch: read the deadline as renewals moved it, look at the
    /// clock, set the timers for the next instant the state needs, wait for
    /// a timer, the command or elect, and hand each event to the machine;
    /// the exit code.
    pub(super) fn run(&mut self) -> i32 {
        loop {
            if let Some(at) = self.lock.told.moved()
                && let Some(code) = self.handle(Event::Renewed(at))
            {
                return code;
            }
            if let Some(code) = self.handle(Event::Clock) {
                return code;
            }
            // The running command's deadline on the lease timer, which
            // renewals move on; any other instant on ours alone.
            let alarm = self.state.alarm(&self.rules);
            let (lease, own) = match self.state {
                State::Running { .. } => (alarm, None),
                _ => (None, alarm),
            };
            let set = |timer: &BootTimer, at: Option<Instant>| match at {
                // Setting it also clears an expiry we have acted on.
                Some(at) => timer.ring_at(at),
                None => timer.unset(),
            };
            let set = set(self.lock.told.timer(), lease).and_then(|()| set(&self.timer, own));
            if let Err(e) = set {
                eprintln!("elect: guard: timerfd_settime: {e}");
                if let Some(code) = self.handle(Event::Blind) {
                    return code;
                }
            }
            let (socket_ready, child_ready) = match self.wait_for_something() {
                Ok(ready) => ready,
                Err(e) => {
                    eprintln!("elect: guard: poll: {e}");
                    if let Some(code) = self.handle(Event::Blind) {
                        return code;
                    }
                    continue;
                }
            };
            if child_ready {
                while let Ok(Some(_)) = self.sigchld.read_signal() {}
                while let Some(event) = self.look_at_the_command() {
                    if let Some(code) = self.handle(event) {
                        return code;
                    }
                }
            }
            if socket_ready {
                for event in self.read_orders() {
                    if let Some(code) = self.handle(event) {
                        return code;
                    }
                }
            }
        }
    }

    /// Step the machine on `event` and perform what it says, in order, then
    /// the same for each event that performing yields. The exit code, once
    /// it says exit.
    fn handle(&mut self, event: Event) -> Option<i32> {
        let mut events = VecDeque::from([event]);
        while let Some(event) = events.pop_front() {
            let (state, actions) = self.rules.step(self.state, event, Instant::now());
            self.state = state;
            for action in actions {
                match self.perform(action) {
                    Performed::Done => {}
                    Performed::Event(next) => events.push_back(next),
                    // How the command ended went to elect in the report.
                    Performed::Exit => return Some(0),
                }
            }
        }
        None
    }

    fn perform(&mut self, action: Action) -> Performed {
        match action {
            Action::Signal(sig) => self.signal_command(sig),
            Action::TakeTerminal => {
                if let Some(terminal) = &mut self.terminal {
                    terminal.take(self.job);
                }
            }
            Action::StopJob => {
                // Until `fg` or `bg`, when elect says Resume. We stay awake:
                // if the deadline passes first, the stopped command is killed.
                crate::kill::send(crate::kill::Target::Group(self.job), Signal::SIGSTOP);
            }
            Action::GiveTerminal { and_continue } => {
                let given = self
                    .terminal
                    .as_ref()
                    .is_some_and(|terminal| terminal.give(self.job, self.group));
                if given && and_continue {
                    self.signal_command(Signal::SIGCONT);
                }
            }
            Action::KillGroup => {
                crate::supervisor::group::kill(self.group);
            }
            Action::RestoreTerminal => {
                if let Some(terminal) = &self.terminal {
                    terminal.restore(self.job, self.group);
                }
            }
            Action::Reap => return Performed::Event(Event::Reaped(self.reap())),
            Action::KillUntilNoneCanRun => {
                // A command that left nothing behind: one kill(2), which
                // finds the group empty. Otherwise SIGKILL until none of it
                // can run.
                crate::supervisor::group::kill_until_none_can_run(self.group);
                return Performed::Event(Event::GroupEmpty);
            }
            // Its watch is over; it is no member of the group, so it need
            // not be gone before the lock is.
            Action::DismissSentinel => self.sentinel.dismiss(),
            Action::Report(message) => self.report(message),
            Action::Release(end) => self.end_the_session(end),
            Action::Exit => return Performed::Exit,
            // Decided in `start`, before the watch.
            Action::Start { .. } | Action::LeaveUnstarted => {}
        }
        Performed::Done
    }

    /// Poll the socket, the child and the timer. Returns (socket, child) readiness.
    fn wait_for_something(&self) -> nix::Result<(bool, bool)> {
        let mut fds = [
            PollFd::new(self.socket.as_fd(), PollFlags::POLLIN),
            PollFd::new(self.timer.as_fd(), PollFlags::POLLIN),
            PollFd::new(self.sigchld.as_fd(), PollFlags::POLLIN),
            PollFd::new(self.lock.told.timer().as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => return Err(e),
        }
        let ready = |fd: &PollFd| fd.revents().is_some_and(|r| !r.is_empty());
        Ok((ready(&fds[0]), ready(&fds[2])))
    }

    /// Signal the command's group, and the command's own process as well if
    /// it left the group (it leads none, so setsid(2) lets it): unreaped,
    /// its pid is still its own. ESRCH from the group: none of it is left.
    fn signal_command(&self, sig: Signal) {
        crate::kill::send(crate::kill::Target::Group(self.group), sig);
        if nix::unistd::getpgid(Some(self.child)) != Ok(self.group) {
            crate::kill::send(crate::kill::Target::Process(self.child), sig);
        }
    }

    /// Tell elect; if it is gone, the socket's end says so in the next poll.
    fn report(&mut self, message: Message) {
        let _ = self.socket.write_all(&message.encode());
    }

    /// Read what elect sent: the events it makes, or [`Event::ElectGone`].
    fn read_orders(&mut self) -> Vec<Event> {
        let mut buf = [0u8; 256];
        match self.socket.read(&mut buf) {
            Ok(0) => return vec![Event::ElectGone],
            Ok(n) => self.inbox.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => return Vec::new(),
            Err(_) => return vec![Event::ElectGone],
        }
        orders_in(&mut self.inbox)
    }

    /// What the command did since the last look: exited, stopped (with
    /// the terminal or not), continued; `None` if nothing new.
    fn look_at_the_command(&self) -> Option<Event> {
        Some(match self.child_state() {
            ChildState::Exited => Event::CommandExited,
            ChildState::Stopped => Event::CommandStopped {
                had_terminal: self
                    .terminal
                    .as_ref()
                    .is_some_and(|terminal| terminal.is_held_by(self.group)),
            },
            ChildState::Continued => Event::CommandContinued,
            ChildState::Unchanged => return None,
        })
    }

    /// Look at the command: exited, stopped, continued, or nothing new.
    fn child_state(&self) -> ChildState {
        // WNOWAIT: an exited child is left for `reap`, with its status.
        let peek = WaitPidFlag::WEXITED
            | WaitPidFlag::WSTOPPED
            | WaitPidFlag::WCONTINUED
            | WaitPidFlag::WNOHANG
            | WaitPidFlag::WNOWAIT;
        // A stop or a continue is consumed, or it is reported again and again.
        let consume = |flag| {
            let _ = waitid(Id::Pid(self.child), flag | WaitPidFlag::WNOHANG);
        };
        match waitid(Id::Pid(self.child), peek) {
            Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) => ChildState::Exited,
            // A death by a real-time signal, which nix has no Signal for:
            // `reap` reads it raw.
            Err(Errno::EINVAL) => ChildState::Exited,
            Ok(WaitStatus::Stopped(..)) => {
                consume(WaitPidFlag::WSTOPPED);
                ChildState::Stopped
            }
            Ok(WaitStatus::Continued(..)) => {
                consume(WaitPidFlag::WCONTINUED);
                ChildState::Continued
            }
            _ => ChildState::Unchanged,
        }
    }

    /// Wait for the command and reap it: how it ended. Reaped before the
    /// group is emptied: the group's id is the sentinel's pid, which stays
    /// ours whatever else is reaped, and a reaped command is no longer a
    /// member.
    fn reap(&self) -> Ending {
        // Not ours to wait for (ECHILD): it is gone, how is unknown.
        let status = crate::supervisor::reap(self.child, false).ok().flatten();
        status
            .and_then(Ending::of)
            .unwrap_or(Ending::Killed(libc::SIGKILL))
    }

    /// elect died while the command ran, and nothing of the command's group
    /// can run any more: end the session, so that the next holder need not
    /// wait for the lease to expire. The order goes to a copy of elect
    /// through a memory file (never argv or the environment): this process
    /// becomes `elect __elect-release FD`. Returns only if there is nothing
    /// to do, or it cannot be done.
    fn end_the_session(&mut self, end: Ending) {
        let Some(order) = self.lock.release_order.take() else {
            return;
        };
        let status = match end {
            Ending::Exited(code) => status_arg(Some(code), None),
            Ending::Killed(sig) => status_arg(None, Some(sig)),
        };
        // The file store's lock ends with these: the releaser must not
        // hold it on.
        self.lock.held.clear();
        let handed = || -> std::io::Result<OwnedFd> {
            let fd = nix::sys::memfd::memfd_create(c"elect-release", MFdFlags::empty())?;
            let mut file = std::fs::File::from(fd);
            file.write_all(&order)?;
            file.seek(std::io::SeekFrom::Start(0))?;
            Ok(OwnedFd::from(file))
        };
        let fd = match handed() {
            Ok(fd) => fd,
            Err(e) => {
                eprintln!("elect: guard: cannot hand over the lease to release: {e}");
                return;
            }
        };
        let error = Command::new("/proc/self/exe")
            .arg0("elect")
            .arg(RELEASE_ARG)
            .arg(fd.as_raw_fd().to_string())
            .arg(self.elect.as_raw().to_string())
            .arg(status)
            .exec();
        eprintln!("elect: guard: cannot release the lease: {error}");
    }
}

/// Start the command as the leader of a new process group, with the
/// lock's token and variables, the default signal dispositions and an empty
/// signal mask: in the process forked while elect waited, or, if that one
/// is gone, in a new one. Once it returns, the group exists and holds the
/// terminal if `interactive`: the process did both before its exec.
/// `None` if the command was not started because `stop_at` (the lease's
/// deadline minus the grace) had passed by the moment of its exec.
fn start_command(
    orders: &Orders,
    lock: &HandedOver,
    stop_at: Instant,
    interactive: bool,
    launch: std::io::Result<Launch>,
    group: &Sentinel,
) -> std::io::Result<Option<Pid>> {
    let go = |launch: Launch| launch.go(lock.token, stop_at, &lock.env, &lock.held, interactive);
    if let Ok(launch) = launch {
        match go(launch)? {
            Went::Started(pid) => return Ok(Some(pid)),
            Went::Late => return Ok(None),
            Went::Gone => {}
        }
    }
    match go(Launch::fork(orders)?.join(group)?)? {
        Went::Started(pid) => Ok(Some(pid)),
        Went::Late => Ok(None),
        Went::Gone => Err(std::io::Error::other(
            "the command's process died before its start",
        )),
    }
}
