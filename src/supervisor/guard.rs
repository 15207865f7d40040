//! The guard: a small synchronous process between elect and the command.
//!
//! elect forks the guard at its start, before it has a second thread (a
//! later turn of `--rejoin` execs elect again as the guard instead), and
//! the guard forks the command's process at once, which execs the command
//! when the lock is ours ([`super::launch`]). The guard exists for three
//! reasons:
//!
//! - If elect dies, even by SIGKILL, the guard sees its end of the socket
//!   close and kills the command's whole process group, grandchildren
//!   included. A parent-death signal alone reaches only the direct child;
//!   should the guard die with elect, its sentinel ([`super::sentinel`]),
//!   whose pid is the command's group id, kills the group.
//! - It enforces the lease deadline on its own, with a `CLOCK_BOOTTIME`
//!   timer: if elect is stopped, starved or stuck, the command still gets
//!   its signal at the deadline minus the grace and SIGKILL at the deadline.
//!   So that one job-control stop cannot freeze both, the guard leads a
//!   process group of its own: a SIGSTOP or SIGTSTP to elect's group (a
//!   shell's `kill -STOP %1`, Ctrl-Z) leaves the guard awake, and one to the
//!   guard's group leaves elect awake, which then kills the command's group
//!   at the deadline itself.
//! - It is single-threaded and owns the only wait on the command, so no
//!   runtime can steal the command's status, and the command's pid cannot be
//!   reused while the guard may still signal its group.
//!
//! What the guard does next is decided in one place, [`machine`]: a pure
//! function of where the command's life is, what was just observed and the
//! time. This file is the loop around it: wait for the next event (a
//! message from elect, the command's SIGCHLD, the timer set for the next
//! instant the state needs), step the machine, perform its actions with
//! their system calls.
//!
//! Around an interactive command it manages the terminal ([`terminal`]):
//! when stdin is a terminal and elect runs in its foreground, the command's
//! group gets the foreground (so it reads the terminal, and Ctrl-C reaches
//! it once); when the command is stopped (Ctrl-Z) the guard takes the
//! terminal back and stops elect's group, so the shell gets its prompt
//! back; when elect is continued (`fg`) it gives the terminal back to the
//! command and continues it; if the deadline passes meanwhile it kills the
//! stopped command without resuming it. When the command ends it gives the
//! terminal back with its modes as they were.
//!
//! The limit: a command that leaves its process group (setsid, double fork
//! into a new group) escapes.

mod machine;
mod orders;
mod terminal;

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::{ErrorKind, Read, Seek, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::Pid;

use nix::sys::memfd::MFdFlags;

use super::Ending;
use super::launch::{Launch, Went};
use super::protocol::{Message, Orders, SIZE};
use super::sentinel::Sentinel;
use crate::clock::{BootTimer, Instant};
use crate::disposition::Disposition;
use crate::release::status_arg;
use machine::{Action, Event, Rules, State};
use orders::{HandedOver, orders_in, read_latest_orders, wait_for_the_lock};
use terminal::Terminal;

/// The hidden first argument that turns elect into its guard.
pub const ARG: &str = "__lease-guard";

/// The guard's name, as `ps`, `top`, `pkill` and `killall` see it (and
/// its command line, as `ps` shows it and `pkill -f` matches it). Not
/// elect's: `pkill -9 elect`, which matches any name containing `elect`,
/// must leave the guard to kill the command's group and release the lock.
pub const NAME: &std::ffi::CStr = c"lease-guard";

/// The hidden first argument of the copy that ends the session of an elect
/// that died: `__elect-release ORDER_FD ELECT_PID`.
pub const RELEASE_ARG: &str = "__elect-release";

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

/// `__lease-guard FD SIGNAL GRACE_NS NOFILE -- COMMAND...`, where NOFILE
/// is the soft open-file limit elect was started with, for the command,
/// if elect raised its own (else `-`: see [`crate::descriptors`]).
pub fn args(socket: RawFd, signal: Signal, grace: Duration) -> Vec<OsString> {
    let given = crate::descriptors::given().map_or_else(|| "-".to_string(), |n| n.to_string());
    [
        ARG.to_string(),
        socket.to_string(),
        (signal as i32).to_string(),
        grace.as_nanos().to_string(),
        given,
        "--".to_string(),
    ]
    .into_iter()
    .map(OsString::from)
    .collect()
}

/// The socket, the orders, and the open-file limit elect was given.
fn parse(args: &[OsString]) -> Option<(RawFd, Orders, Option<u64>)> {
    let text = |i: usize| args.get(i)?.to_str();
    if text(0)? != ARG || text(5)? != "--" || args.len() < 7 {
        return None;
    }
    let orders = Orders {
        signal: Signal::try_from(text(2)?.parse::<i32>().ok()?).ok()?,
        grace: Duration::from_nanos(text(3)?.parse().ok()?),
        command: args[6..].to_vec(),
        set_env: Vec::new(),
        remove_env: Vec::new(),
    };
    let given = match text(4)? {
        "-" => None,
        n => Some(n.parse().ok()?),
    };
    Some((text(1)?.parse().ok()?, orders, given))
}

/// Run as the guard started by exec; `args` start with [`ARG`]. Never returns.
pub fn main(args: &[OsString]) -> ! {
    // Started as /proc/self/exe; be recognisable in ps and top.
    set_name(NAME);
    let Some((socket, orders, given)) = parse(args) else {
        eprintln!("elect: {ARG} is for elect's own use");
        std::process::exit(crate::exit::Code::Software.value().into());
    };
    // For the command, which gets the limit elect was started with.
    crate::descriptors::set_given(given);
    retitle();
    let socket = UnixStream::from(crate::descriptors::handed(socket));
    std::process::exit(serve(socket, orders))
}

/// Run as the guard in the child of elect's fork. Never returns: not even
/// a panic may unwind into the copy of elect's `main` above this frame.
pub fn forked(socket: OwnedFd, orders: Orders) -> ! {
    let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // A group of its own, as an exec'd guard's.
        if let Err(e) = nix::unistd::setpgid(Pid::from_raw(0), Pid::from_raw(0)) {
            eprintln!("elect: guard: setpgid: {e}");
            return crate::exit::Code::Software.value().into();
        }
        set_name(NAME);
        retitle();
        serve(UnixStream::from(socket), orders)
    }))
    .unwrap_or_else(|_| crate::exit::Code::Software.value().into());
    std::process::exit(code)
}

/// Wait for the lock, then run the command under watch; the exit code.
fn serve(socket: UnixStream, orders: Orders) -> i32 {
    // Neither the command nor its process waiting to become it may hold
    // our end of the socket: elect learns of our death by its closing.
    if let Err(e) = set_cloexec(socket.as_fd()) {
        eprintln!("elect: guard: {e}");
        return crate::exit::Code::Software.value().into();
    }
    // elect, by the pid it had: once it dies, our parent is another.
    let elect = nix::unistd::getppid();
    // Started while elect waits for the lock: fork the command's process
    // now, and wait for the word to go. It comes first, so that the first
    // child of the guard is it (the sentinel bears the guard's name until
    // it takes its own); then the sentinel, whose pid is the group's id.
    let launch = Launch::fork(&orders);
    let sentinel = Sentinel::fork();
    let launch = match &sentinel {
        Ok(group) => launch.and_then(|launch| launch.join(group)),
        Err(e) => Err(std::io::Error::from(*e)),
    };
    let Some(lock) = wait_for_the_lock(&socket) else {
        // elect gave up waiting (or died): nothing to start.
        return 0;
    };
    match Guard::start(socket, orders, lock, launch, sentinel, elect) {
        Ok(Some(mut guard)) => guard.run(),
        // elect was told the command did not start.
        Ok(None) => 0,
        Err(e) => {
            eprintln!("elect: guard: {e}");
            crate::exit::Code::Software.value().into()
        }
    }
}

/// What `ps` shows as the guard's command line: [`NAME`], written over its
/// argument strings (a forked guard's copy of elect's, an exec'd guard's
/// own), so that the guard is told apart from elect, `pkill -f elect`
/// passes it by, and it shows nothing elect's arguments carried (a password
/// in a store URL). Best effort.
fn retitle() {
    // The 48th and 49th fields of /proc/self/stat: where the kernel keeps
    // the argument strings it shows as /proc/self/cmdline.
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return;
    };
    let Some((_, after_name)) = stat.rsplit_once(')') else {
        return;
    };
    // Fields from the third (state) on; arg_start is field 48.
    let mut fields = after_name.split_whitespace().skip(45);
    let (Some(Ok(start)), Some(Ok(end))) = (
        fields.next().map(str::parse::<usize>),
        fields.next().map(str::parse::<usize>),
    ) else {
        return;
    };
    let Some(len) = end.checked_sub(start).filter(|&n| n > 0) else {
        return;
    };
    let title = NAME.to_bytes_with_nul();
    // SAFETY: [start, end) is this process's own argument area, mapped and
    // writable (it lies in the initial stack; after a fork, our private
    // copy); std copied the arguments out at the start, and nothing reads
    // the area again.
    let area = unsafe { std::slice::from_raw_parts_mut(start as *mut u8, len) };
    let n = title.len().min(len);
    area[..n].copy_from_slice(&title[..n]);
    area[n..].fill(0);
    area[len - 1] = 0;
}

struct Guard {
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
    fn start(
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
    fn run(&mut self) -> i32 {
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
                super::group::kill(self.group);
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
                super::group::kill_until_none_can_run(self.group);
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
        let status = super::reap(self.child, false).ok().flatten();
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

/// The name `ps` and `top` show for this process (best effort).
pub fn set_name(name: &std::ffi::CStr) {
    let _ = nix::sys::prctl::set_name(name);
}

fn set_cloexec(fd: BorrowedFd<'_>) -> std::io::Result<()> {
    use nix::fcntl::{F_SETFD, FdFlag, fcntl};
    fcntl(fd, F_SETFD(FdFlag::FD_CLOEXEC))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_round_trip() {
        let mut a = args(7, Signal::SIGINT, Duration::from_millis(1500));
        a.push("sh".into());
        a.push("-c".into());
        let (socket, o, given) = parse(&a).unwrap();
        assert_eq!(
            (socket, o.signal, o.grace, given),
            (7, Signal::SIGINT, Duration::from_millis(1500), None)
        );
        assert_eq!(o.command, vec![OsString::from("sh"), OsString::from("-c")]);
        assert!(parse(&a[..6]).is_none(), "a command is required");
        a[4] = "8".into();
        assert_eq!(parse(&a).unwrap().2, Some(8));
    }
}
