//! The plan of an `elect run`: everything it needs, checked before the
//! store is touched, and what it tells the store, the guard and the
//! history about itself. It never changes once made.

use std::time::{Duration, SystemTime};

use nix::sys::signal::Signal;

use super::command;
use super::inner;
use super::notify;
use super::standing::{Standing, Step};
use crate::cli::{Rejoin, RunArgs, Wait};
use crate::exit::Failure;
use crate::history::{self, Once, Tenure, Verdict};
use crate::lease::Timing;
use crate::log;
use crate::store::{HolderRecord, Location, LockName, MAX_SHARDS, Token};
use crate::supervisor::Plan;
use crate::timeline;

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

/// Everything `elect run` needs, checked.
pub(super) struct Job {
    pub(super) lock: LockName,
    /// `--shards`: how many, and the one to prefer.
    pub(super) shards: Option<u32>,
    pub(super) prefer_shard: Option<u32>,
    pub(super) location: Location,
    pub(super) timing: Timing,
    pub(super) wait: Wait,
    pub(super) signal: Signal,
    pub(super) busy_code: u8,
    pub(super) lost_code: u8,
    /// `--once-per` or `--slot`, and the exit code when the work was done.
    pub(super) once: Option<Once>,
    pub(super) done_code: u8,
    /// `--history`: how many tenures the lock's history keeps.
    pub(super) keep_history: usize,
    /// `--metrics-file` and `--on-end`.
    pub(super) reports: crate::report::Reports,
    pub(super) identity: String,
    pub(super) connect_timeout: Duration,
    pub(super) rejoin: Option<Rejoin>,
    pub(super) command: Vec<std::ffi::OsString>,
    /// What an elect inside the command needs to reach the store.
    pub(super) inner: inner::ForTheCommand,
    /// `--listen`.
    pub(super) listen: Option<std::net::SocketAddr>,
    /// Where the run stands, for the endpoint and systemd.
    pub(super) standing: Standing,
    /// systemd is told who holds the lock a waiter waits for.
    pub(super) look_at_holder: bool,
}

impl Job {
    pub(super) fn check(args: RunArgs) -> Result<Job, Failure> {
        let timing = Timing::new(args.ttl, args.grace).map_err(Failure::usage)?;
        let wait = args.wait();
        if args
            .identity
            .as_deref()
            .is_some_and(|i| i.is_empty() || i.chars().any(char::is_control))
        {
            return Err(Failure::usage(
                "--identity must be non-empty text without control characters",
            ));
        }
        command::check_command(&args.command[0])?;
        let settings = args.store.settings();
        let location = Location::from_settings(&settings)?;
        let lock = location.lock_name(&args.lock).map_err(Failure::usage)?;
        nested(&lock, &location)?;
        if let Some(n) = args.shards {
            if !(1..=MAX_SHARDS).contains(&n) {
                return Err(Failure::usage(format!(
                    "--shards {n} is out of range: 1 to {MAX_SHARDS}"
                )));
            }
            if let Some(k) = args.prefer_shard.filter(|k| *k >= n) {
                return Err(Failure::usage(format!(
                    "--prefer-shard {k} is not a shard of {n}: 0 to {}",
                    n - 1
                )));
            }
            location
                .check_shard_names(&lock, n)
                .map_err(Failure::usage)?;
        }
        let once = match (args.once_per, &args.slot) {
            (Some(window), _) if window.is_zero() => {
                return Err(Failure::usage("--once-per must be longer than zero"));
            }
            (Some(window), _) => Some(Once::Per(window)),
            (None, Some(key)) => {
                crate::store::check_slot(key).map_err(Failure::usage)?;
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

    pub(super) fn record(&self) -> HolderRecord {
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

    /// How to run the command; what names the holder (its key, its
    /// lease) and the token come when the lock is ours.
    pub(super) fn plan(&self) -> Plan {
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

    /// The name the lock, or its shard `shard`, is held under.
    pub(super) fn held_name(&self, shard: Option<u32>) -> String {
        shard.map_or_else(|| self.lock.to_string(), |k| self.lock.shard(k).to_string())
    }

    /// A turn's entry in the lock's history, as it begins: the lock held
    /// with `token`, or an attempt that never held it.
    pub(super) fn tenure(
        &self,
        queued: SystemTime,
        shard: Option<u32>,
        token: Option<Token>,
    ) -> Tenure {
        Tenure {
            lock: self.held_name(shard),
            shard,
            token,
            identity: self.identity.clone(),
            host: hostname(),
            pid: std::process::id(),
            queued: history::timestamp(queued),
            started: None,
            ended: None,
            outcome: Verdict::Running,
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

    /// Tell those who watch the run (where it stands, the log) that a turn
    /// went on to `step`.
    pub(super) fn observe(&self, step: Step) {
        match &step {
            Step::Acquired { shard, token } => {
                log::context("token", token.get());
                if let Some(k) = shard {
                    log::context("shard", *k);
                }
                let what = match shard {
                    Some(k) => format!("shard {k} of lock {}", self.lock),
                    None => format!("lock {}", self.lock),
                };
                log::event(
                    log::Level::Verbose,
                    "acquired",
                    format_args!("acquired {what} with token {token}"),
                );
            }
            Step::Released(true) => {
                timeline::step("lease released");
                log::event(
                    log::Level::Verbose,
                    "released",
                    format_args!("released lock {}", self.lock),
                );
            }
            _ => {}
        }
        self.standing.observe(step);
    }
}

pub(super) fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "unknown".into())
}
