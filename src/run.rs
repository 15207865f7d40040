//! `elect run`: take the lock, run the command while the lease holds, and
//! stop it before the lease could pass to anyone else.
//!
//! The order of events:
//! 1. check everything that can be checked without the store (the lock
//!    name, the timing, the command), so bad input leaves no trace there;
//! 2. grant a lease and renew it from then on, also while queued;
//! 3. queue under the lock and wait for our turn, or for `--wait` to pass,
//!    or for a signal that says stop waiting;
//! 4. start the command under the supervisor and feed it each new deadline;
//! 5. when the command ends, revoke the lease so the next waiter starts at once.

use std::ffi::OsStr;
use std::io::{IsTerminal, Write};
use std::os::fd::AsFd;
use std::path::Path;
use std::pin::Pin;
use std::time::{Duration, SystemTime};

use nix::sys::signal::Signal;
use nix::unistd::AccessFlags;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

use crate::cli::{Rejoin, RunArgs, Wait};
use crate::clock::Instant;
use crate::clock::show;
use crate::exit::{Code, Failure, Outcome};
use crate::lease::{self, Timing};
use crate::log;
use crate::store::{
    ErrorKind, HolderRecord, Lease, Location, LockStatus, Loss, Store, StoreError, Ticket, Turn,
    with_store,
};
use crate::supervisor::{Ending, Event, Plan, Prepared, SpawnError, Stop, Supervisor};

/// Variables that may carry secrets and never reach the command.
const SECRET_VARIABLES: &[&str] = &["ELECT_PASSWORD", "ETCDCTL_PASSWORD", "ETCDCTL_USER"];

/// How long to try to revoke the lease on the way out; if the store cannot
/// be reached, the lease expires on its own.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(2);

/// Everything `elect run` needs, checked.
struct Job {
    lock: String,
    location: Location,
    timing: Timing,
    wait: Wait,
    signal: Signal,
    busy_code: u8,
    lost_code: u8,
    identity: String,
    connect_timeout: Duration,
    rejoin: Option<Rejoin>,
    command: Vec<std::ffi::OsString>,
}

pub async fn run(args: RunArgs) -> Outcome {
    let job = match Job::check(args) {
        Ok(job) => job,
        Err(failure) => return failure.into(),
    };
    let mut signals = match Signals::new() {
        Ok(s) => s,
        Err(e) => return Failure::software(format!("cannot handle signals: {e}")).into(),
    };
    // Pings wait as long as a renewal can: no round trip longer than the
    // renewal interval can keep the lease anyway.
    match job
        .location
        .open(job.timing.renew_every(), job.connect_timeout)
        .await
    {
        Ok(opened) => with_store!(opened, store => job.run_on(&store, &mut signals).await),
        Err(e) => job.store_failed(e),
    }
}

impl Job {
    fn check(args: RunArgs) -> Result<Job, Failure> {
        let usage = |m: String| Failure::usage(m);
        let timing = Timing::new(args.ttl, args.grace).map_err(usage)?;
        if args.store.connect_timeout.is_zero() {
            return Err(usage("--connect-timeout must be longer than zero".into()));
        }
        let wait = args.wait();
        if args
            .identity
            .as_deref()
            .is_some_and(|i| i.is_empty() || i.chars().any(char::is_control))
        {
            return Err(usage(
                "--identity must be non-empty text without control characters".into(),
            ));
        }
        check_command(&args.command[0])?;
        let location = Location::from_args(&args.store).map_err(Failure::from)?;
        location.check_lock_name(&args.lock).map_err(usage)?;
        let identity = args.identity.clone().unwrap_or_else(hostname);
        Ok(Job {
            lock: args.lock,
            location,
            timing,
            wait,
            signal: args.signal,
            busy_code: args.busy_exit_code,
            lost_code: args.lost_exit_code,
            identity,
            connect_timeout: args.store.connect_timeout,
            rejoin: args.rejoin,
            command: args.command,
        })
    }

    fn store_failed(&self, e: StoreError) -> Outcome {
        Failure::from(e)
            .about(format_args!("lock {}", self.lock))
            .into()
    }

    fn record(&self) -> HolderRecord {
        HolderRecord {
            identity: self.identity.clone(),
            hostname: hostname(),
            pid: std::process::id(),
            command: self
                .command
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
            started: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
            grace_ms: u64::try_from(self.timing.grace().as_millis()).ok(),
            break_request: None,
        }
    }

    /// Run, and with `--rejoin`, go back to the queue after a loss (or a
    /// failure, with `--rejoin=always`) and run a new command with a new token.
    async fn run_on<S: Store>(&self, store: &S, signals: &mut Signals) -> Outcome {
        const FIRST_BACKOFF: Duration = Duration::from_secs(1);
        const MAX_BACKOFF: Duration = Duration::from_secs(60);
        let mut backoff = FIRST_BACKOFF;
        loop {
            let started = Instant::now();
            let end = self.take_turn(store, signals).await;
            let why = match (&end, self.rejoin) {
                (TurnEnd::Lost, Some(_)) => "the lease was lost".to_string(),
                (TurnEnd::Ended(Ending::Exited(code)), Some(Rejoin::Always)) if *code != 0 => {
                    format!("the command exited with {code}")
                }
                (TurnEnd::Ended(Ending::Killed(sig)), Some(Rejoin::Always)) => {
                    format!("the command was killed by {sig}")
                }
                _ => return end.outcome(self.lost_code),
            };
            // A long, healthy turn earns a fresh start.
            if Instant::now().since(started) > MAX_BACKOFF {
                backoff = FIRST_BACKOFF;
            }
            log::notice(format_args!(
                "{why}; rejoining the queue for lock {} in {}",
                self.lock,
                show(backoff)
            ));
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                sig = signals.terminating() => return Outcome::Raise(sig),
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// One turn: queue, hold, run the command, release.
    async fn take_turn<S: Store>(&self, store: &S, signals: &mut Signals) -> TurnEnd {
        let give_up = match self.wait {
            Wait::Forever => None,
            Wait::For(d) => Some(Instant::now() + d),
        };
        // Queue; if the lease is lost while queued (a long partition), queue again.
        let (acquired, guard, mut keep, deadline) = loop {
            let granted = tokio::select! {
                granted = store.grant(self.timing.ttl(), self.connect_timeout) => granted,
                sig = signals.terminating() => return TurnEnd::Done(Outcome::Raise(sig)),
            };
            let lease = match granted {
                Ok(lease) => lease,
                Err(e) => return TurnEnd::Done(self.store_failed(e)),
            };
            let (timing, first_deadline) = match lease.ttl() {
                Some(ttl) => {
                    let timing = self.timing.granted(ttl);
                    (timing, timing.deadline(lease.granted_at(), ttl))
                }
                None => (self.timing, lease::NEVER),
            };
            let (deadline_tx, deadline) = watch::channel(first_deadline);
            let renewers = [lease.renewer(), lease.renewer()];
            let granted_at = lease.granted_at();
            let keeping =
                async move { lease::keep(renewers, timing, granted_at, &deadline_tx).await };
            let mut keep: Pin<Box<dyn Future<Output = Loss>>> = Box::pin(keeping);
            match self.queue(store, &lease, &mut keep, give_up, signals).await {
                Queued::First(ticket, token, guard) => {
                    break (
                        Acquired {
                            lease,
                            ticket,
                            token,
                        },
                        guard,
                        keep,
                        deadline,
                    );
                }
                Queued::Again(reason) => {
                    log::verbose(format_args!(
                        "lost our place in the queue ({reason}); queueing again"
                    ));
                    // Patiently: after an outage the old lease may live on
                    // (a restarted etcd renews every lease), and our new key
                    // would queue behind the old one for a whole TTL.
                    if let Err(e) = lease.release().await {
                        log::verbose(format_args!(
                            "could not revoke the old lease ({e}); it will expire"
                        ));
                    }
                }
                Queued::Done(outcome) => {
                    release(&lease).await;
                    return TurnEnd::Done(outcome);
                }
            }
        };
        log::verbose(format_args!(
            "acquired lock {} with token {}",
            self.lock, acquired.token
        ));
        let end = self
            .hold(&acquired, guard, &mut keep, deadline, signals)
            .await;
        drop(keep);
        release(&acquired.lease).await;
        log::verbose(format_args!("released lock {}", self.lock));
        end
    }

    /// How to run the command under `lease` and `ticket`; the token comes
    /// when the lock is ours.
    fn plan<L: Lease>(&self, lease: &L, ticket: &Ticket) -> Plan {
        Plan {
            command: self.command.clone(),
            set_env: vec![
                ("ELECT_LOCK".into(), self.lock.clone()),
                ("ELECT_KEY".into(), ticket.key.clone()),
                ("ELECT_LEASE_ID".into(), lease.id()),
                ("ELECT_IDENTITY".into(), self.identity.clone()),
                ("ELECT_STORE".into(), self.location.to_string()),
            ],
            remove_env: SECRET_VARIABLES.iter().map(|s| s.to_string()).collect(),
            signal: self.signal,
            grace: self.timing.grace(),
        }
    }

    /// Join the queue and wait for our turn.
    async fn queue<S: Store>(
        &self,
        store: &S,
        lease: &S::Lease,
        keep: &mut Pin<Box<dyn Future<Output = Loss> + '_>>,
        give_up: Option<Instant>,
        signals: &mut Signals,
    ) -> Queued {
        let record = self.record();
        let ticket = tokio::select! {
            ticket = lease.enqueue(&self.lock, &record) => ticket,
            loss = keep.as_mut() => return Queued::Again(loss.to_string()),
            sig = signals.terminating() => return Queued::Done(Outcome::Raise(sig)),
        };
        let ticket = match ticket {
            Ok(t) => t,
            Err(e) => return Queued::Done(self.store_failed(e)),
        };
        // The guard starts now, while we wait, so that a handover need not
        // wait for it.
        let guard = match Supervisor::prepare(self.plan(lease, &ticket)) {
            Ok(guard) => guard,
            Err(e) => {
                return Queued::Done(
                    Failure::software(format!("cannot start the guard: {e}")).into(),
                );
            }
        };
        let live = self.live_line(store, ticket.rank);
        tokio::select! {
            never = live => match never {},
            turn = lease.wait_turn(&self.lock, &ticket, give_up) => match turn {
                Ok(Turn::First(token)) => Queued::First(ticket, token, Box::new(guard)),
                Ok(Turn::Busy) => Queued::Done(self.busy(store).await),
                Err(e) if e.kind == ErrorKind::Gone => Queued::Again(e.message),
                Err(e) => Queued::Done(self.store_failed(e)),
            },
            loss = keep.as_mut() => Queued::Again(loss.to_string()),
            sig = signals.terminating() => Queued::Done(Outcome::Raise(sig)),
        }
    }

    /// While waiting, and only when stderr is a terminal: one line that says
    /// who holds the lock and how many are ahead, redrawn every second and
    /// erased when the wait ends (when this future is dropped).
    async fn live_line<S: Store>(&self, store: &S, rank: u64) -> std::convert::Infallible {
        if !(log::notices_shown() && std::io::stderr().is_terminal()) {
            return std::future::pending().await;
        }
        let line = LiveLine::default();
        loop {
            if let Ok(Ok(status)) =
                tokio::time::timeout(RELEASE_TIMEOUT, store.status(&self.lock)).await
            {
                // Most important first: the line is cut at the terminal's width.
                let holder = match &status.holder {
                    Some(h) => match &h.record {
                        Some(r) => format!(
                            "held with token {} by {} since {} (pid {} on {})",
                            h.token, r.identity, r.started, r.pid, r.hostname
                        ),
                        None => format!("held with token {} by {}", h.token, h.key),
                    },
                    None => "changing hands".into(),
                };
                let ahead = if status.ranks.is_empty() {
                    format!("{} waiting", status.waiting)
                } else {
                    format!(
                        "{} ahead",
                        status.ranks.iter().filter(|r| **r < rank).count()
                    )
                };
                line.show(&format!(
                    "elect: waiting for lock {}, {ahead}: {holder}",
                    self.lock
                ));
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    async fn busy<S: Store>(&self, store: &S) -> Outcome {
        let waited = match self.wait {
            Wait::For(d) if !d.is_zero() => format!("; gave up after {}", show(d)),
            _ => String::new(),
        };
        match tokio::time::timeout(RELEASE_TIMEOUT, store.status(&self.lock)).await {
            Ok(Ok(LockStatus {
                holder: Some(holder),
                ..
            })) => {
                log::notice(format_args!(
                    "lock {} is held by {holder}{waited}",
                    self.lock
                ));
            }
            _ => log::notice(format_args!(
                "lock {} is held by someone else{waited}",
                self.lock
            )),
        }
        Outcome::Exit(self.busy_code)
    }

    /// Run the command while the lease holds.
    async fn hold<L: Lease>(
        &self,
        acquired: &Acquired<L>,
        guard: Box<Prepared>,
        keep: &mut Pin<Box<dyn Future<Output = Loss> + '_>>,
        mut deadline: watch::Receiver<Instant>,
        signals: &mut Signals,
    ) -> TurnEnd {
        let Acquired {
            lease,
            ticket,
            token,
        } = acquired;
        let held = match lease.hold_fds() {
            Ok(fds) => fds,
            Err(e) => {
                let failure = Failure::software(format!("cannot hand the lock to the guard: {e}"));
                return TurnEnd::Done(failure.into());
            }
        };
        let held: Vec<_> = held.iter().map(|fd| fd.as_fd()).collect();
        let started = guard
            .start(*token, *deadline.borrow_and_update(), &held)
            .await;
        let mut child = match started {
            Ok(child) => child,
            Err(SpawnError::Exec(errno)) => return TurnEnd::Done(self.exec_failure(errno).into()),
            Err(SpawnError::Guard(e)) => {
                let failure = Failure::software(format!("cannot start the command: {e}"));
                return TurnEnd::Done(failure.into());
            }
        };
        log::verbose(format_args!("started the command as pid {}", child.pid()));
        let lost_watch = lease.lost(ticket);
        tokio::pin!(lost_watch);
        let mut lost = false;
        let mut renewing = true;
        let mut told_to_stop = false;
        // elect's own kill at the deadline, in case the guard cannot (stopped).
        let mut backstop = true;
        let ending = loop {
            let deadline_now = *deadline.borrow();
            tokio::select! {
                // The guard's word first: after a stop, its report of what it
                // did is waiting, and the backstop below is due too.
                biased;
                event = child.event() => match event {
                    Event::Ended(ending) => break ending,
                    Event::Stopping(Stop::Deadline) => {
                        self.lose(&mut lost, "no renewal was confirmed in time", self.timing.grace());
                    }
                    Event::Stopping(Stop::ExpiredWhileStopped) => {
                        self.lose(&mut lost, "the lease ran out while elect and the command were stopped; \
                            the command was not resumed", Duration::ZERO);
                    }
                    Event::GuardLost => return self.guard_lost(child).await,
                },
                loss = keep.as_mut(), if renewing => {
                    renewing = false;
                    // An expiry is the guard's to act on (it keeps the same
                    // deadline and says why it stops); a store's word is ours.
                    if let Some(grace) = self.grace_after(&loss)
                        && self.lose(&mut lost, &loss, grace)
                    {
                        child.stop(grace).await;
                    }
                },
                loss = &mut lost_watch, if !lost => {
                    let grace = self.grace_after(&loss).unwrap_or(self.timing.grace());
                    if self.lose(&mut lost, &loss, grace) {
                        child.stop(grace).await;
                    }
                },
                Ok(()) = deadline.changed(), if !lost => {
                    let at = *deadline.borrow_and_update();
                    child.extend(at).await;
                },
                () = crate::clock::sleep_until(deadline_now), if backstop => {
                    // The guard kills at this instant too, unless it is
                    // stopped: then nobody else would.
                    backstop = false;
                    self.lose(&mut lost, "no renewal was confirmed in time", Duration::ZERO);
                    child.kill_now();
                },
                sig = signals.any() => match sig {
                    Signal::SIGTSTP => {
                        // Stop with the command, as a job would: the guard
                        // stays awake and still enforces the deadline.
                        child.suspend().await;
                        stop_self();
                    }
                    Signal::SIGCONT => child.resume().await,
                    sig => {
                        told_to_stop |= Signals::is_terminating(sig);
                        child.forward(sig).await;
                    }
                }
            }
        };
        child.reap().await;
        match (lost, told_to_stop) {
            (true, _) => TurnEnd::Lost,
            // Whoever told elect to stop meant it: never rejoin after that.
            (false, true) => TurnEnd::Done(TurnEnd::Ended(ending).outcome(self.lost_code)),
            (false, false) => TurnEnd::Ended(ending),
        }
    }

    /// How long the command may take to stop after `loss`; `None` if the
    /// guard acts on it by itself (an expiry: it keeps the same deadline).
    fn grace_after(&self, loss: &Loss) -> Option<Duration> {
        match loss {
            Loss::Asked(_) => Some(self.timing.grace()),
            // Another holder may already run.
            Loss::Gone(_) => Some(self.timing.grace().min(lease::GONE_GRACE)),
            Loss::Expired { .. } => None,
        }
    }

    /// The guard died (it never exits before the command's group is gone,
    /// so it was killed). Its parent-death signal killed the command, but
    /// not what the command started: kill the whole group here, see it
    /// gone, and only then let the lock go.
    async fn guard_lost(&self, child: Supervisor) -> TurnEnd {
        let pgid = child.pid();
        crate::supervisor::kill_group(pgid).await;
        let how = match child.reap().await {
            Some(status) => describe_status(status),
            None => "ended".to_string(),
        };
        let failure = Failure::new(
            Code::GuardLost,
            format!(
                "the guard process {how}; killed the command's process group {pgid} \
                 and released lock {}; exiting {}",
                self.lock,
                Code::GuardLost.value()
            ),
        );
        TurnEnd::Done(failure.into())
    }

    /// Record the first loss and say so once. True if this was the first.
    fn lose(&self, lost: &mut bool, loss: impl std::fmt::Display, grace: Duration) -> bool {
        if *lost {
            return false;
        }
        let then = match self.rejoin {
            Some(_) => "then rejoining the queue".to_string(),
            None => format!("exiting {}", self.lost_code),
        };
        let stopping = match grace.is_zero() {
            true => "the command was killed".to_string(),
            false => format!(
                "stopping the command with {}, SIGKILL within {}",
                self.signal,
                show(grace)
            ),
        };
        log::error(format_args!(
            "lost the lease on lock {} at {}: {loss}; {stopping}; {then}",
            self.lock, self.location,
        ));
        *lost = true;
        true
    }

    fn exec_failure(&self, errno: i32) -> Failure {
        let name = self.command[0].to_string_lossy();
        let error = std::io::Error::from_raw_os_error(errno);
        let code = if errno == libc::ENOENT {
            Code::NotFound
        } else {
            Code::CannotExecute
        };
        Failure::new(code, format!("cannot run {name}: {error}"))
    }
}

/// A lock that is ours.
struct Acquired<L> {
    lease: L,
    ticket: Ticket,
    token: u64,
}

/// The live waiting line on a terminal; erased on drop.
#[derive(Default)]
struct LiveLine {
    shown: std::cell::Cell<bool>,
}

impl LiveLine {
    fn show(&self, text: &str) {
        // Never wider than the terminal: a wrapped line cannot be erased.
        let width = terminal_width().unwrap_or(80).saturating_sub(1);
        let text: String = text.chars().take(width).collect();
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[K{text}");
        let _ = err.flush();
        self.shown.set(true);
    }
}

impl Drop for LiveLine {
    fn drop(&mut self) {
        if self.shown.get() {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[K");
            let _ = err.flush();
        }
    }
}

fn terminal_width() -> Option<usize> {
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ fills a winsize struct.
    let ok = unsafe { libc::ioctl(libc::STDERR_FILENO, libc::TIOCGWINSZ, &mut size) } == 0;
    (ok && size.ws_col > 0).then_some(usize::from(size.ws_col))
}

/// How a turn ended.
enum TurnEnd {
    /// The lease was lost and elect stopped the command.
    Lost,
    /// The command ended on its own.
    Ended(Ending),
    /// Anything else: this is how elect ends.
    Done(Outcome),
}

impl TurnEnd {
    fn outcome(self, lost_code: u8) -> Outcome {
        match self {
            TurnEnd::Lost => Outcome::Exit(lost_code),
            TurnEnd::Ended(Ending::Exited(code)) => {
                Outcome::Exit(u8::try_from(code & 0xff).unwrap_or(1))
            }
            TurnEnd::Ended(Ending::Killed(sig)) => Outcome::Raise(sig),
            TurnEnd::Done(outcome) => outcome,
        }
    }
}

enum Queued {
    First(Ticket, u64, Box<Prepared>),
    /// Our place was lost before our turn came; queue again.
    Again(String),
    Done(Outcome),
}

async fn release<L: Lease>(lease: &L) {
    match tokio::time::timeout(RELEASE_TIMEOUT, lease.release()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => log::verbose(format_args!(
            "could not revoke the lease ({e}); it will expire"
        )),
        Err(_) => log::verbose(format_args!(
            "could not revoke the lease in time; it will expire"
        )),
    }
}

/// Find COMMAND as exec would, to fail before touching the store.
fn check_command(command: &OsStr) -> Result<(), Failure> {
    let name = command.to_string_lossy();
    if command.is_empty() {
        return Err(Failure::new(Code::Usage, "the command is empty"));
    }
    let executable = |p: &Path| nix::unistd::access(p, AccessFlags::X_OK).is_ok();
    if name.contains('/') {
        let path = Path::new(command);
        return match path.metadata() {
            Err(_) => Err(Failure::new(
                Code::NotFound,
                format!("cannot run {name}: no such file"),
            )),
            Ok(m) if m.is_dir() => Err(Failure::new(
                Code::CannotExecute,
                format!("cannot run {name}: it is a directory"),
            )),
            Ok(_) if !executable(path) => Err(Failure::new(
                Code::CannotExecute,
                format!("cannot run {name}: not executable"),
            )),
            Ok(_) => Ok(()),
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    let mut found_unusable = false;
    for dir in std::env::split_paths(&path) {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".").to_path_buf()
        } else {
            dir
        };
        let candidate = dir.join(command);
        match candidate.metadata() {
            Ok(m) if m.is_file() && executable(&candidate) => return Ok(()),
            Ok(_) => found_unusable = true,
            Err(_) => {}
        }
    }
    if found_unusable {
        Err(Failure::new(
            Code::CannotExecute,
            format!("cannot run {name}: not executable"),
        ))
    } else {
        Err(Failure::new(
            Code::NotFound,
            format!("cannot run {name}: command not found"),
        ))
    }
}

fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "unknown".into())
}

/// Stop elect as SIGTSTP would have, had it not been caught; return when
/// continued.
fn stop_self() {
    // Only elect: the rest of its job got the signal from whoever sent it.
    let _ = nix::sys::signal::kill(nix::unistd::Pid::this(), Signal::SIGSTOP);
}

/// How a process ended, in words: "was killed by SIGKILL", "exited with 3".
fn describe_status(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with {code}"),
        (None, Some(n)) => match Signal::try_from(n) {
            Ok(sig) => format!("was killed by {sig}"),
            Err(_) => format!("was killed by signal {n}"),
        },
        _ => "ended".to_string(),
    }
}

/// The signals elect handles. Installed before anything else, so a Ctrl-C
/// while connecting or waiting is never lost.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    quit: tokio::signal::unix::Signal,
    usr1: tokio::signal::unix::Signal,
    usr2: tokio::signal::unix::Signal,
    winch: tokio::signal::unix::Signal,
    tstp: tokio::signal::unix::Signal,
    cont: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> std::io::Result<Self> {
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
            quit: signal(SignalKind::quit())?,
            usr1: signal(SignalKind::user_defined1())?,
            usr2: signal(SignalKind::user_defined2())?,
            winch: signal(SignalKind::window_change())?,
            tstp: signal(SignalKind::from_raw(libc::SIGTSTP))?,
            cont: signal(SignalKind::from_raw(libc::SIGCONT))?,
        })
    }

    /// The next signal to act on: to pass on to the command, or SIGTSTP
    /// and SIGCONT of job control.
    async fn any(&mut self) -> Signal {
        tokio::select! {
            _ = self.term.recv() => Signal::SIGTERM,
            _ = self.int.recv() => Signal::SIGINT,
            _ = self.hup.recv() => Signal::SIGHUP,
            _ = self.quit.recv() => Signal::SIGQUIT,
            _ = self.usr1.recv() => Signal::SIGUSR1,
            _ = self.usr2.recv() => Signal::SIGUSR2,
            _ = self.winch.recv() => Signal::SIGWINCH,
            _ = self.tstp.recv() => Signal::SIGTSTP,
            _ = self.cont.recv() => Signal::SIGCONT,
        }
    }

    fn is_terminating(sig: Signal) -> bool {
        matches!(
            sig,
            Signal::SIGTERM | Signal::SIGINT | Signal::SIGHUP | Signal::SIGQUIT
        )
    }

    /// The next signal that means "stop" while there is no command to pass it to.
    async fn terminating(&mut self) -> Signal {
        loop {
            let sig = self.any().await;
            if sig == Signal::SIGTSTP {
                stop_self();
            }
            if matches!(
                sig,
                Signal::SIGTERM | Signal::SIGINT | Signal::SIGHUP | Signal::SIGQUIT
            ) {
                log::verbose(format_args!("{sig} received; leaving the queue"));
                return sig;
            }
        }
    }
}
