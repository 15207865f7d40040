//! `elect run`: take the lock, run the command while the lease holds, and
//! stop it before the lease could pass to anyone else.
//!
//! The order of events:
//! 1. check everything that can be checked without the store (the lock
//!    name, the timing, the command), so bad input leaves no trace there;
//! 2. open a session (grant a lease) and renew it from then on, also while
//!    queued ([`crate::lease::Keeper`]);
//! 3. join the lock's queue, start the guard, and wait for our turn, or for
//!    `--wait` to pass, or for a signal that says stop waiting;
//! 4. start the command under the guard and feed it each new deadline
//!    ([`hold`]);
//! 5. when the command ends, release the session so the next waiter starts
//!    at once.

mod command;
pub(crate) mod endpoint;
mod hold;
mod inner;
mod live;
mod notify;
mod shards;
mod signals;
mod standing;

use std::io::IsTerminal;
use std::time::{Duration, SystemTime};

use nix::sys::signal::Signal;

use crate::cli::{Rejoin, RunArgs, Wait};
use crate::clock::{Instant, show};
use crate::exit::{Failure, Outcome};
use crate::history::{self, Ended, Once, Tenure};
use crate::lease::{Keeper, Kept, Timing};
use crate::log;
use crate::reach::Reach;
use crate::store::Token;
use crate::store::records;
use crate::store::{
    ErrorKind, HolderRecord, Location, Lock, LockName, LockStatus, MAX_SHARDS, Put, Session, Store,
    StoreError, Turn, first_turn,
};
use crate::supervisor::{Ending, Plan, Preparing, Supervisor};
use crate::timeline;
use endpoint::Endpoint;
use live::LiveLine;
use notify::Notifier;
use signals::Signals;
use standing::Standing;

/// elect's own variable that may carry a secret; each store names its own.
const OWN_SECRETS: &[&str] = &["ELECT_PASSWORD"];

/// What elect sets for the command only when it applies: never inherited.
/// And `--listen`'s variable: an elect inside the command would find the
/// port taken by this one.
const OWN_WHEN_SET: &[&str] = &[
    "ELECT_CHECKPOINT",
    "ELECT_SHARD",
    "ELECT_SHARDS",
    "ELECT_STORE_CREDENTIALS",
    "ELECT_LISTEN",
];

/// Refuse a run inside the command of an elect that holds this very lock
/// on this very store: it would wait for its own parent forever.
fn nested(lock: &str, location: &Location) -> Result<(), Failure> {
    let var = |name| std::env::var(name).ok();
    match (var("ELECT_KEY"), var("ELECT_LOCK"), var("ELECT_STORE")) {
        (Some(key), Some(held), Some(store))
            if held == lock && store.trim() == location.to_string() =>
        {
            Err(Failure::new(
                crate::exit::Code::Config,
                format!(
                    "lock {lock} at {} is held for this very command, by the elect \
                     run that started it (its key {key}): a run of it here would wait for \
                     itself forever; use another lock name",
                    location.shown()
                ),
            ))
        }
        _ => Ok(()),
    }
}

/// How long to try to revoke the lease on the way out; if the store cannot
/// be reached, the lease expires on its own.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(2);

/// The same, when elect ends before the store answered all it asked
/// (a signal, a store that never answers, a server of another kind): a
/// healthy store answers by then, and elect is not kept waiting again.
const UNANSWERED_RELEASE_TIMEOUT: Duration = Duration::from_millis(250);

/// Everything `elect run` needs, checked.
struct Job {
    lock: LockName,
    /// `--shards`: how many, and the one to prefer.
    shards: Option<u32>,
    prefer_shard: Option<u32>,
    location: Location,
    timing: Timing,
    wait: Wait,
    signal: Signal,
    busy_code: u8,
    lost_code: u8,
    /// `--once-per` or `--slot`, and the exit code when the work was done.
    once: Option<Once>,
    done_code: u8,
    /// `--history`: how many tenures the lock's history keeps.
    keep_history: usize,
    /// `--metrics-file` and `--on-end`.
    reports: crate::report::Reports,
    identity: String,
    connect_timeout: Duration,
    rejoin: Option<Rejoin>,
    command: Vec<std::ffi::OsString>,
    /// What an elect inside the command needs to reach the store.
    inner: inner::ForTheCommand,
    /// `--listen`.
    listen: Option<std::net::SocketAddr>,
    /// Where the run stands, for the endpoint and systemd.
    standing: Standing,
    /// systemd is told who holds the lock a waiter waits for.
    look_at_holder: bool,
}

/// `elect run`, checked, with the first turn's guard forked.
pub struct Ready {
    job: Job,
    guard: Preparing,
    endpoint: Option<Endpoint>,
}

/// Check the arguments and fork the first turn's guard. Called by `main`
/// before the runtime starts, while elect has one thread (see
/// [`Supervisor::fork`]).
pub fn prepare(args: RunArgs) -> Result<Ready, Outcome> {
    let job = Job::check(args).map_err(Outcome::from)?;
    timeline::step("arguments checked");
    // SAFETY: called before the runtime, or anything else, starts a thread.
    let guard = unsafe { Supervisor::fork(job.plan()) };
    // After the fork, which the guard would otherwise hold it open through.
    let endpoint = job.listen.map(Endpoint::bind).transpose()?;
    Ok(Ready {
        job,
        guard,
        endpoint,
    })
}

/// `elect run`, with the endpoint and systemd's notifications beside it
/// when asked for: both only read where the run stands.
pub async fn run(ready: Ready) -> Outcome {
    let Ready {
        job,
        guard,
        endpoint,
    } = ready;
    let notifier = Notifier::from_env();
    let mut said = String::new();
    let outcome = {
        let serving = async {
            match endpoint {
                Some(endpoint) => endpoint.serve(&job.standing).await,
                None => std::future::pending().await,
            }
        };
        let notifying = async {
            match &notifier {
                Some(notifier) => notifier.run(&job.standing, &mut said).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            outcome = job.reach_and_run(guard) => outcome,
            never = serving => match never {},
            never = notifying => match never {},
        }
    };
    if let Some(notifier) = &notifier {
        notifier.finish(&job.standing, &mut said);
    }
    outcome
}

impl Job {
    /// Connect to the store, and take turns there.
    async fn reach_and_run(&self, guard: Preparing) -> Outcome {
        let job = self;
        let mut guard = Some(guard);
        let mut signals = match Signals::new() {
            Ok(s) => s,
            Err(e) => {
                let other = || Failure::software(format!("cannot handle signals: {e}"));
                return crate::descriptors::or(&e, other).into();
            }
        };
        let mut reach = Reach::new(&job.location, job.connect_timeout);
        let open = job
            .location
            .open(job.timing.renew_every(), job.connect_timeout);
        match job
            .reaching(&mut reach, &mut signals, "a connection", open)
            .await
        {
            Ok(store) => {
                timeline::step("connected");
                let mut reach = Some(reach);
                let outcome = job
                    .run_on(&*store, &mut signals, &mut guard, &mut reach)
                    .await;
                timeline::step("exit");
                outcome
            }
            Err(outcome) => outcome,
        }
    }
}

impl Job {
    fn check(args: RunArgs) -> Result<Job, Failure> {
        let usage = |m: String| Failure::usage(m);
        let timing = Timing::new(args.ttl, args.grace).map_err(usage)?;
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
        command::check_command(&args.command[0])?;
        let settings = args.store.settings();
        let location = Location::from_settings(&settings)?;
        let lock = location.lock_name(&args.lock).map_err(usage)?;
        nested(&lock, &location)?;
        if let Some(n) = args.shards {
            if !(1..=MAX_SHARDS).contains(&n) {
                return Err(usage(format!(
                    "--shards {n} is out of range: 1 to {MAX_SHARDS}"
                )));
            }
            if let Some(k) = args.prefer_shard.filter(|k| *k >= n) {
                return Err(usage(format!(
                    "--prefer-shard {k} is not a shard of {n}: 0 to {}",
                    n - 1
                )));
            }
            location.check_shard_names(&lock, n).map_err(usage)?;
        }
        let once = match (args.once_per, &args.slot) {
            (Some(window), _) if window.is_zero() => {
                return Err(usage("--once-per must be longer than zero".into()));
            }
            (Some(window), _) => Some(Once::Per(window)),
            (None, Some(key)) => {
                crate::store::check_slot(key).map_err(usage)?;
                Some(Once::Slot(key.clone()))
            }
            (None, None) => None,
        };
        let identity = args.identity.clone().unwrap_or_else(hostname);
        log::context("lock", lock.to_string());
        log::context("identity", identity.clone());
        let inner = inner::for_the_command(&settings, &location).map_err(|e| {
            crate::descriptors::or(&e, || {
                Failure::software(format!(
                    "cannot hand the store's settings to the command: {e}"
                ))
            })
        })?;
        let standing = Standing::new(&lock, args.shards);
        Ok(Job {
            lock,
            shards: args.shards,
            prefer_shard: args.prefer_shard,
            location,
            timing,
            wait,
            signal: args.signal,
            busy_code: args.busy_exit_code,
            lost_code: args.lost_exit_code,
            once,
            done_code: args.done_exit_code,
            keep_history: args.history,
            reports: crate::report::Reports {
                metrics_file: args.metrics_file,
                on_end: args.on_end,
            },
            identity,
            connect_timeout: args.store.connect_timeout,
            rejoin: args.rejoin,
            command: args.command,
            inner,
            listen: args.listen,
            standing,
            look_at_holder: std::env::var_os("NOTIFY_SOCKET").is_some(),
        })
    }

    /// The store went back in time ([`crate::store::rewind`]): no token
    /// is taken from it. A holder of what it said before may run its
    /// command until its own deadline, within a TTL of now (its renewals
    /// are no longer confirmed): that is waited out before elect ends, so
    /// that a supervisor starting elect again at once cannot start a
    /// command beside it.
    async fn rewound(&self, e: StoreError, signals: &mut Signals) -> Outcome {
        log::verbose(format_args!(
            "{}; ending in {}, once any holder of its earlier state is stopped",
            e.message,
            show(self.timing.ttl())
        ));
        tokio::select! {
            () = tokio::time::sleep(self.timing.ttl()) => self.store_failed(e),
            sig = signals.terminating() => Outcome::Raise(sig as i32),
        }
    }

    fn store_failed(&self, e: StoreError) -> Outcome {
        Failure::from(e)
            .about(format_args!("lock {}", self.lock))
            .into()
    }

    /// A call to the store before the lock is held: within what is left of
    /// `--connect-timeout` ([`Reach`]), and ended by a terminating signal.
    async fn reaching<T>(
        &self,
        reach: &mut Reach,
        signals: &mut Signals,
        waiting_for: &str,
        call: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, Outcome> {
        self.attempt(reach, signals, waiting_for, call)
            .await
            .map_err(|outcome| {
                // Only a bound made to wait (Reach::again) tries again.
                outcome.unwrap_or_else(|| {
                    Failure::software("a call to the store was to be tried again").into()
                })
            })
    }

    /// [`Run::reaching`], except that within a bound that waits for the
    /// store ([`Reach::again`]) one that cannot be reached yet ends the
    /// call after a pause with `Err(None)`: try again.
    async fn attempt<T>(
        &self,
        reach: &mut Reach,
        signals: &mut Signals,
        waiting_for: &str,
        call: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, Option<Outcome>> {
        let result = tokio::select! {
            result = reach.bounded(waiting_for, call) => result,
            never = self.connecting_line() => match never {},
            sig = signals.terminating() => return Err(Some(Outcome::Raise(sig as i32))),
        };
        let e = match result {
            Ok(value) => return Ok(value),
            Err(e) => e,
        };
        if e.kind == ErrorKind::Rewound {
            return Err(Some(self.rewound(e, signals).await));
        }
        let Some(pause) = reach.try_again(&e) else {
            return Err(Some(self.store_failed(e)));
        };
        log::verbose(format_args!(
            "still waiting for {waiting_for} ({}); trying again in {}",
            e.message,
            show(pause)
        ));
        tokio::select! {
            () = tokio::time::sleep(pause) => Err(None),
            sig = signals.terminating() => Err(Some(Outcome::Raise(sig as i32))),
        }
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
            acquired: None,
            grace_ms: u64::try_from(self.timing.grace().as_millis()).ok(),
            ttl_ms: u64::try_from(self.timing.ttl().as_millis()).ok(),
            break_request: None,
            shard: None,
        }
    }

    /// Run, and with `--rejoin`, go back to the queue after a loss (or a
    /// failure, with `--rejoin=always`) and run a new command with a new token.
    /// `first_guard`: the guard forked at the start, for the first turn;
    /// `first_reach`: the bound that connecting began, for the first turn.
    async fn run_on(
        &self,
        store: &dyn Store,
        signals: &mut Signals,
        first_guard: &mut Option<Preparing>,
        first_reach: &mut Option<Reach>,
    ) -> Outcome {
        const FIRST_BACKOFF: Duration = Duration::from_secs(1);
        const MAX_BACKOFF: Duration = Duration::from_secs(60);
        let mut backoff = crate::backoff::Backoff::new(FIRST_BACKOFF, MAX_BACKOFF);
        // Kept across a turn whose command never started: it still waits.
        let mut wait_from: Option<Instant> = None;
        loop {
            let started = Instant::now();
            let guard = first_guard
                .take()
                .unwrap_or_else(|| Supervisor::prepare(self.plan()));
            let reach = match (first_reach.take(), wait_from) {
                (Some(reach), _) => reach,
                (None, Some(_)) => Reach::again(&self.location, self.connect_timeout),
                (None, None) => Reach::new(&self.location, self.connect_timeout),
            };
            let waited_from = *wait_from.get_or_insert(started);
            let end = self
                .take_turn(store, signals, guard, reach, waited_from)
                .await;
            if matches!(end, TurnEnd::NotStarted) {
                continue;
            }
            wait_from = None;
            let why = match (&end, self.rejoin) {
                (TurnEnd::Lost, Some(_)) => "the lease was lost".to_string(),
                (TurnEnd::Ended(ending), Some(Rejoin::Always)) if *ending != Ending::Exited(0) => {
                    format!("the command {ending}")
                }
                _ => return end.outcome(self.lost_code),
            };
            // A long, healthy turn earns a fresh start.
            if Instant::now().since(started) > MAX_BACKOFF {
                backoff.reset();
            }
            let pause = backoff.pause();
            log::notice(format_args!(
                "{why}; rejoining the queue for lock {} in {}",
                self.lock,
                show(pause)
            ));
            self.standing.rejoining(why);
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                sig = signals.terminating() => return Outcome::Raise(sig as i32),
            }
        }
    }

    /// One turn: a session, a place in the queue, the command, the release.
    /// If the lease is lost while queued (a long partition), queue again
    /// under a new one. Until queued, the store's answers are due within
    /// `reach`'s bound.
    async fn take_turn(
        &self,
        store: &dyn Store,
        signals: &mut Signals,
        guard: Preparing,
        mut reach: Reach,
        waited_from: Instant,
    ) -> TurnEnd {
        let give_up = match self.wait {
            Wait::Forever => None,
            Wait::For(d) => Some(waited_from + d),
        };
        // The guard is ready or on its way: a handover need not wait for it.
        let mut guard = Some(guard);
        let queued = SystemTime::now();
        self.standing.turn();
        // Room in the history for this turn's tenure, made from the moment
        // the lock is ours, beside the handover and the command and never
        // before them, so that the write at the end is one request.
        let room = std::cell::Cell::new(false);
        let mut trimming: Option<crate::store::Boxed<'_, ()>> = None;
        loop {
            // Queued once, lost since: a new session, due in a new bound
            // that waits for a store on its way back.
            if reach.was_reached() {
                reach = Reach::again(&self.location, self.connect_timeout);
            }
            let open = store.open_session(self.timing.ttl(), self.connect_timeout);
            let session = match self.attempt(&mut reach, signals, "a lease", open).await {
                Ok(session) => session,
                Err(Some(outcome)) => return TurnEnd::Done(outcome),
                Err(None) => continue,
            };
            if let Some(refused) = session
                .renewal_waits(self.timing.renew_every() + self.timing.margin())
                .and_then(|(waits, why)| self.timing.refuse_renewal_wait(waits, &why))
            {
                return TurnEnd::Done(Failure::new(crate::exit::Code::Config, refused).into());
            }
            // Not "granted": etcd's grant may still be on its way (it is
            // confirmed with the place in the queue).
            timeline::step("lease requested");
            let mut keeper = Keeper::start(&*session, self.timing, self.standing.tally.clone());
            let place = match self
                .queue(store, &*session, &mut keeper, give_up, signals, &mut reach)
                .await
            {
                Queued::First(won) => {
                    if let Some(sent) = won.taken {
                        keeper.taken(sent);
                    }
                    keeper.queued();
                    self.renewed_in_time(won, &mut keeper, signals).await
                }
                other => other,
            };
            let (end, guard_to_reap, mut tenure) = match place {
                Queued::First(won) => {
                    self.standing.acquired(won.shard, won.token);
                    log::context("token", won.token.get());
                    if let Some(k) = won.shard {
                        log::context("shard", k);
                    }
                    match won.shard {
                        Some(k) => log::event(
                            log::Level::Verbose,
                            "acquired",
                            format_args!(
                                "acquired shard {k} of lock {} with token {}",
                                self.lock, won.token
                            ),
                        ),
                        None => log::event(
                            log::Level::Verbose,
                            "acquired",
                            format_args!("acquired lock {} with token {}", self.lock, won.token),
                        ),
                    }
                    let Some(guard) = guard.take() else {
                        return TurnEnd::Done(Failure::software("a turn without its guard").into());
                    };
                    let mut tenure = self.tenure(queued, Some(&won));
                    let (keep, lock) = (self.keep_history, tenure.lock.clone());
                    let mine = history::id(&tenure);
                    let room = &room;
                    room.set(false);
                    trimming = (keep > 0).then(|| {
                        Box::pin(async move {
                            let trimmed = history::trim(store, &lock, keep - 1, &mine).await;
                            room.set(trimmed.is_ok());
                        }) as crate::store::Boxed<'_, ()>
                    });
                    let (end, guard) = self
                        .hold(
                            &won,
                            guard,
                            signals,
                            hold::Held {
                                store,
                                session: &*session,
                                keeper: &mut keeper,
                                tenure: &mut tenure,
                                trimming: &mut trimming,
                            },
                        )
                        .await;
                    // While the lock is still ours, fenced by its token.
                    if let (Some(once), TurnEnd::Ended(Ending::Exited(0))) = (&self.once, &end) {
                        self.record_success(store, once, &*won.lock, &mut tenure)
                            .await;
                    }
                    self.standing.let_go();
                    (end, guard, Some(tenure))
                }
                Queued::Again(reason) => {
                    let queued = reach.was_reached();
                    match queued {
                        true => log::verbose(format_args!(
                            "lost our place in the queue ({reason}); queueing again"
                        )),
                        false => log::verbose(format_args!(
                            "the lease was never confirmed ({reason}); asking for another"
                        )),
                    }
                    drop(keeper);
                    // Patiently once queued: after an outage the old lease
                    // may live on (a restarted etcd renews every lease), and
                    // our new key would queue behind the old one for a whole
                    // TTL. Before that, within the bound.
                    let revoke = async {
                        match queued {
                            true => session.release().await,
                            false => {
                                reach
                                    .bounded("the old session's end", session.release())
                                    .await
                            }
                        }
                    };
                    let revoked = tokio::select! {
                        revoked = revoke => revoked,
                        sig = signals.terminating() => return TurnEnd::Done(Outcome::Raise(sig as i32)),
                    };
                    match (revoked, reach.was_reached()) {
                        (Ok(()), _) => {}
                        (Err(e), true) => log::verbose(format_args!(
                            "could not revoke the old lease ({e}); it will expire"
                        )),
                        (Err(e), false) => log::verbose(format_args!(
                            "could not end the old session ({e}): a lease the store made meanwhile, \
                             if any, expires on its own"
                        )),
                    }
                    continue;
                }
                Queued::Busy(outcome) => {
                    let mut tenure = self.tenure(queued, None);
                    tenure.outcome = Ended::Busy;
                    (TurnEnd::Done(outcome), None, Some(tenure))
                }
                Queued::Done(outcome) => (TurnEnd::Done(outcome), None, None),
            };
            if let Some(tenure) = &mut tenure {
                finish(tenure, &end);
            }
            let reported = self.reports.any().then(|| {
                tenure.clone().unwrap_or_else(|| {
                    let mut tenure = self.tenure(queued, None);
                    finish(&mut tenure, &end);
                    tenure
                })
            });
            drop(keeper);
            // The command's group is gone: the guard exits while the lease
            // is released.
            let reaped = async {
                if let Some(guard) = guard_to_reap {
                    guard.reap().await;
                }
            };
            // A store that never answered is not waited for again, and a
            // signal before then is obeyed at once: the lease, if granted
            // at all, expires.
            let within = match reach.was_reached() {
                true => RELEASE_TIMEOUT,
                false => UNANSWERED_RELEASE_TIMEOUT,
            };
            // Beside the release, never before it (the history is not on
            // the way of the next holder), and within its bound: a store
            // that cannot take the release cannot take the history either.
            let noted = async {
                if let Some(tenure) = &tenure {
                    let noting = self.note_end(store, tenure, &mut trimming, &room);
                    if tokio::time::timeout(within, noting).await.is_err() {
                        log::warn(format_args!(
                            "could not record the tenure in the history of lock {} within {}",
                            tenure.lock,
                            show(within)
                        ));
                    }
                }
            };
            let (released, (), ()) = tokio::join!(
                release(&*session, &self.lock, within, reach.was_reached()),
                reaped,
                noted
            );
            self.standing.released();
            if let Some(tenure) = reported {
                self.reports.ended(&tenure).await;
            }
            // Said only of a release the store confirmed: `release` said
            // once what became of one it did not.
            if released && reach.was_reached() {
                timeline::step("lease released");
                log::event(
                    log::Level::Verbose,
                    "released",
                    format_args!("released lock {}", self.lock),
                );
            }
            return end;
        }
    }

    /// This turn's entry in the lock's history, as it begins: `won`, or
    /// an attempt that never held the lock.
    fn tenure(&self, queued: SystemTime, won: Option<&Won<'_>>) -> Tenure {
        let shard = won.and_then(|w| w.shard);
        Tenure {
            lock: shard.map_or_else(|| self.lock.to_string(), |k| self.lock.shard(k).to_string()),
            shard,
            token: won.map(|w| w.token),
            identity: self.identity.clone(),
            host: hostname(),
            pid: std::process::id(),
            queued: history::timestamp(queued),
            started: None,
            ended: None,
            outcome: Ended::Running,
            exit_code: None,
            signal: None,
            why: None,
            slot: match &self.once {
                Some(Once::Slot(key)) => Some(key.clone()),
                _ => None,
            },
            done_ended: None,
        }
    }

    /// `tenure` into the history as it ended: beside the trim begun while
    /// the command ran, if that is still on its way; once more after it,
    /// should the trim have failed (or never begun: a busy run) where the
    /// write went through (else its warning said it: one line is enough).
    async fn note_end(
        &self,
        store: &dyn Store,
        tenure: &Tenure,
        trimming: &mut Option<crate::store::Boxed<'_, ()>>,
        room: &std::cell::Cell<bool>,
    ) {
        let keep = self.keep_history;
        if trimming.is_none() && !room.get() {
            history::note_or_warn(store, tenure, keep, false).await;
            return;
        }
        let ((), noted) = tokio::join!(
            hold::drive_to_end(trimming),
            history::note_or_warn(store, tenure, keep, true)
        );
        if noted && !room.get() {
            history::note_or_warn(store, tenure, keep, false).await;
        }
    }

    /// The command succeeded: say so in the store while the lock is ours, so
    /// that no other host runs this period again.
    async fn record_success(
        &self,
        store: &dyn Store,
        once: &Once,
        lock: &dyn crate::store::Lock,
        tenure: &mut Tenure,
    ) {
        let mut done = tenure.clone();
        done.outcome = Ended::Succeeded;
        done.exit_code = Some(0);
        done.ended = Some(history::timestamp(SystemTime::now()));
        let recorded = tokio::time::timeout(
            self.connect_timeout,
            history::record_success(store, once, lock.key(), &done),
        )
        .await;
        let why = match recorded {
            Ok(Ok(Put::Stored)) => return,
            Ok(Ok(Put::Stale(why))) => why,
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {}", show(self.connect_timeout)),
        };
        log::warn(format_args!(
            "the command succeeded, but its success could not be recorded for lock {} ({why}): \
             another run may do this period's work again",
            tenure.lock
        ));
    }

    /// How to run the command; what names the holder (its key, its
    /// lease) and the token come when the lock is ours.
    fn plan(&self) -> Plan {
        let secrets = OWN_SECRETS.iter().chain(self.location.secret_variables());
        Plan {
            command: self.command.clone(),
            set_env: vec![
                ("ELECT_LOCK".into(), self.lock.to_string()),
                ("ELECT_IDENTITY".into(), self.identity.clone()),
                ("ELECT_STORE".into(), self.location.to_string()),
            ]
            .into_iter()
            .chain(self.inner.set_env.iter().cloned())
            .collect(),
            remove_env: secrets
                .chain(OWN_WHEN_SET)
                .chain(notify::VARIABLES)
                .map(|s| s.to_string())
                .collect(),
            signal: self.signal,
            grace: self.timing.grace(),
        }
    }

    /// Join the queue and wait for our turn.
    async fn queue<'s>(
        &self,
        store: &dyn Store,
        session: &'s dyn Session,
        keeper: &mut Keeper,
        give_up: Option<Instant>,
        signals: &mut Signals,
        reach: &mut Reach,
    ) -> Queued<'s> {
        if self.shards.is_some() {
            return self
                .queue_for_shards(store, session, keeper, give_up, signals, reach)
                .await;
        }
        let record = self.record();
        // Whether the lock is a sharded one's, asked beside the join: a
        // run without --shards would wait behind its shards' holders.
        let join_unsharded = async {
            let (joined, shards) = tokio::join!(
                session.join(self.lock.to_string(), record),
                records::shards(store, &self.lock, None)
            );
            let lock = joined?;
            match shards {
                Ok(None) => Ok(lock),
                Ok(Some(n)) => {
                    let _ = lock.leave().await;
                    Err(StoreError::config(format!(
                        "it is sharded: {n} shards are recorded for it, on its first use; \
                         run it with --shards {n}"
                    )))
                }
                // The look is a courtesy: a store that failed it (a
                // connection reset under the join, which the join itself
                // outlived) leaves the run as it was without it.
                Err(e) => {
                    log::verbose(format_args!("could not look for a shard count ({e})"));
                    Ok(lock)
                }
            }
        };
        let join = async {
            tokio::select! {
                joined = join_unsharded => joined.map(Ok),
                loss = keeper.lost() => Ok(Err(loss)),
            }
        };
        let lock = match self
            .attempt(reach, signals, "a place in the queue", join)
            .await
        {
            Ok(Ok(lock)) => lock,
            Ok(Err(loss)) => return Queued::Again(loss.to_string()),
            Err(Some(outcome)) => return Queued::Done(outcome),
            Err(None) => return Queued::Again("the store is not back yet".into()),
        };
        reach.reached();
        timeline::step("queued");
        keeper.queued();
        self.standing.queued();
        let rank = lock.rank();
        let mut locks = vec![lock];
        let turn = tokio::select! {
            never = self.live_line(store, rank) => match never {},
            never = self.look_at_holder(store) => match never {},
            turn = first_turn(&locks, give_up) => turn,
            loss = keeper.lost() => return Queued::Again(loss.to_string()),
            sig = signals.terminating() => return Queued::Done(Outcome::Raise(sig as i32)),
        };
        if let Ok((_, Turn::First { .. })) = turn {
            timeline::step("first in line");
        }
        match turn {
            Ok((i, Turn::First { token, taken })) => Queued::First(Won {
                lock: locks.swap_remove(i),
                token,
                taken,
                shard: None,
            }),
            Ok((_, Turn::Busy)) => Queued::Busy(self.busy(store).await),
            Err(e) if e.kind == ErrorKind::Gone => Queued::Again(e.message),
            Err(e) if e.kind == ErrorKind::Rewound => Queued::Done(self.rewound(e, signals).await),
            Err(e) => Queued::Done(self.store_failed(e)),
        }
    }

    /// The lock is won, but is the lease fresh enough to start the command
    /// under? Not while a renewal that was due is unconfirmed (a store just
    /// back from an outage, a waiter whose renewals failed meanwhile): the
    /// command would be stopped as it starts, and the run would end on a
    /// lost lease with the lock free for the taking. So wait for that
    /// renewal; should the lease be lost first, leave the lock and queue
    /// again under a new one, as a waiter does.
    async fn renewed_in_time<'s>(
        &self,
        won: Won<'s>,
        keeper: &mut Keeper,
        signals: &mut Signals,
    ) -> Queued<'s> {
        if !keeper.overdue() {
            return Queued::First(won);
        }
        log::verbose(format_args!(
            "won lock {} while a renewal of the lease is overdue: the command starts once \
             one is confirmed",
            self.lock
        ));
        while keeper.overdue() {
            tokio::select! {
                kept = keeper.next() => if let Kept::Lost(loss) = kept {
                    let _ = tokio::time::timeout(RELEASE_TIMEOUT, won.lock.leave()).await;
                    return Queued::Again(format!("{loss}, before the command started"));
                },
                sig = signals.terminating() => return Queued::Done(Outcome::Raise(sig as i32)),
            }
        }
        Queued::First(won)
    }

    /// When the store keeps us waiting for a lease (a second on), and only
    /// when stderr is a terminal: one line that says what elect waits for,
    /// erased when the wait ends (when this future is dropped).
    async fn connecting_line(&self) -> std::convert::Infallible {
        if log::notices_shown() && std::io::stderr().is_terminal() {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let line = LiveLine::default();
            line.show(&format!(
                "elect: connecting to {} for lock {}…",
                self.location.shown(),
                self.lock
            ));
            return std::future::pending().await;
        }
        std::future::pending().await
    }

    /// While waiting, and only when stderr is a terminal: one line that says
    /// who holds the lock and how many are ahead, redrawn every second and
    /// erased when the wait ends (when this future is dropped).
    async fn live_line(&self, store: &dyn Store, rank: u64) -> std::convert::Infallible {
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
                            h.token,
                            r.identity,
                            r.since(),
                            r.pid,
                            r.hostname
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

    /// While waiting, and only when systemd is told: who holds the lock,
    /// for its status line, looked at once and then every 10 s.
    async fn look_at_holder(&self, store: &dyn Store) -> std::convert::Infallible {
        if !self.look_at_holder {
            return std::future::pending().await;
        }
        loop {
            if let Ok(Ok(status)) =
                tokio::time::timeout(RELEASE_TIMEOUT, store.status(&self.lock)).await
                && let Some(holder) = standing::holder_line(&status)
            {
                self.standing.holder_seen(holder);
            }
            tokio::time::sleep(Duration::from_secs(10)).await;
        }
    }

    async fn busy(&self, store: &dyn Store) -> Outcome {
        let waited = match self.wait {
            Wait::For(d) if !d.is_zero() => format!("; gave up after {}", show(d)),
            _ => String::new(),
        };
        let code = self.busy_code;
        let not_run = format!("; the command was not run (exit {code})");
        match tokio::time::timeout(RELEASE_TIMEOUT, store.status(&self.lock)).await {
            Ok(Ok(LockStatus {
                holder: Some(holder),
                ..
            })) => {
                log::event(
                    log::Level::Normal,
                    "busy",
                    format_args!("lock {} is held by {holder}{waited}{not_run}", self.lock),
                );
            }
            _ => log::event(
                log::Level::Normal,
                "busy",
                format_args!(
                    "lock {} is held by someone else{waited}{not_run}",
                    self.lock
                ),
            ),
        }
        Outcome::Exit(code)
    }
}

/// The lock that came our turn.
pub struct Won<'s> {
    pub lock: Box<dyn Lock + 's>,
    /// Its fencing token.
    pub token: Token,
    /// See [`Turn::First`].
    pub taken: Option<Instant>,
    /// With `--shards`: which shard it is.
    pub shard: Option<u32>,
}

/// How a turn ended.
enum TurnEnd {
    /// The lease was lost and elect stopped the command.
    Lost,
    /// The lease was lost while the lock was being handed to the command,
    /// which never started: elect queues again, as a waiter would.
    NotStarted,
    /// The command ended on its own.
    Ended(Ending),
    /// Anything else: this is how elect ends.
    Done(Outcome),
}

impl TurnEnd {
    fn outcome(self, lost_code: u8) -> Outcome {
        match self {
            TurnEnd::Lost | TurnEnd::NotStarted => Outcome::Exit(lost_code),
            TurnEnd::Ended(Ending::Exited(code)) => {
                Outcome::Exit(u8::try_from(code & 0xff).unwrap_or(1))
            }
            TurnEnd::Ended(Ending::Killed(sig)) => Outcome::Raise(sig),
            TurnEnd::Done(outcome) => outcome,
        }
    }
}

/// How waiting in the queue ended.
enum Queued<'s> {
    /// The lock is ours, with this token.
    First(Won<'s>),
    /// Our place was lost before our turn came; queue again.
    Again(String),
    /// Someone else held the lock all the while (said already).
    Busy(Outcome),
    Done(Outcome),
}

/// The history entry of a turn that ended as `end`, unless the turn said
/// already (a lost lease, work done before).
fn finish(tenure: &mut Tenure, end: &TurnEnd) {
    tenure.ended = Some(history::timestamp(SystemTime::now()));
    if tenure.outcome != Ended::Running {
        return;
    }
    let exited = |tenure: &mut Tenure, code: i32| {
        tenure.exit_code = Some(code);
        tenure.outcome = match code {
            0 => Ended::Succeeded,
            _ => Ended::Failed,
        };
    };
    let killed = |tenure: &mut Tenure, sig: i32| {
        tenure.signal = Some(sig);
        tenure.outcome = Ended::Killed;
    };
    match end {
        TurnEnd::Lost | TurnEnd::NotStarted => tenure.outcome = Ended::Lost,
        TurnEnd::Ended(Ending::Exited(code)) => exited(tenure, *code),
        TurnEnd::Ended(Ending::Killed(sig)) => killed(tenure, *sig),
        TurnEnd::Done(Outcome::Exit(code)) => exited(tenure, i32::from(*code)),
        TurnEnd::Done(Outcome::Raise(sig)) => killed(tenure, *sig),
        TurnEnd::Done(Outcome::Fail(failure)) => {
            tenure.outcome = Ended::Error;
            tenure.why = Some(failure.message.clone());
        }
    }
}

/// End the session within `within`: whether the store confirmed it. If
/// not, says once (with `-v`) that the lease will expire instead.
async fn release(session: &dyn Session, lock: &str, within: Duration, reached: bool) -> bool {
    if within.is_zero() {
        return false;
    }
    let released = tokio::time::timeout(within, session.release()).await;
    // What is claimed of a lease the store may never have granted.
    match (released, reached) {
        (Ok(Ok(())), _) => return true,
        (_, false) => log::verbose(format_args!(
            "the store never answered: a lease it made meanwhile, if any, expires on its own"
        )),
        (Ok(Err(e)), true) => log::verbose(format_args!(
            "could not release lock {lock} ({e}); its lease will expire"
        )),
        (Err(_), true) => log::verbose(format_args!(
            "could not release lock {lock} within {}; its lease will expire",
            show(within)
        )),
    }
    false
}

fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "unknown".into())
}
