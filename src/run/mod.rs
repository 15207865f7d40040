//! `elect run`: take the lock, run the command while the lease holds, and
//! stop it before the lease could pass to anyone else.
//!
//! A run is a plan ([`job`]: checked once, never changed) and turns. A
//! turn ([`turn`]) goes through its phases in order, each a method that
//! says where it goes next:
//! 1. connecting: a session (a lease), renewed from then on, also while
//!    queued ([`crate::lease::Keeper`]), every call bounded ([`reaching`]);
//! 2. queued: join the lock's queue and wait for our turn, for `--wait` to
//!    pass, or for a signal that says stop waiting ([`queue`], [`shards`]);
//!    a place lost before our turn queues again under a new session;
//! 3. handing over: the guard, forked ahead, starts the command with the
//!    token ([`handover`]);
//! 4. holding: each renewal moves the deadline on, a loss stops the
//!    command ([`hold`]);
//! 5. releasing: the session ends so the next waiter starts at once.
//!
//! Those who follow the run observe the turn's [`standing::Step`]s: where
//! it stands (`--listen`, systemd, the metrics), which never waits on the
//! store, and the turn's [`chronicle`] (the history, the metrics file and
//! the hook), whose verdict follows from how the turn ended. With
//! `--rejoin`, [`Job::run_on`] takes turn after turn.

mod chronicle;
mod command;
pub(crate) mod endpoint;
mod handover;
mod hold;
mod inner;
mod job;
mod live;
mod notify;
mod queue;
mod reaching;
mod shards;
mod signals;
mod standing;
mod turn;

use std::time::Duration;

use crate::cli::{Rejoin, RunArgs};
use crate::clock::{Instant, show};
use crate::exit::{Failure, Outcome};
use crate::log;
use crate::reach::Reach;
use crate::store::Store;
use crate::supervisor::{Ending, Preparing, Supervisor};
use crate::timeline;
use endpoint::Endpoint;
use job::Job;
use notify::Notifier;
use signals::Signals;
use standing::Step;
use turn::TurnEnd;

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
        let store = loop {
            let open = job
                .location
                .open(job.timing.renew_every(), job.connect_timeout);
            match job
                .attempt(&mut reach, &mut signals, "a connection", open)
                .await
            {
                Ok(store) => break store,
                Err(Some(outcome)) => return outcome,
                // Refused for load: again, within the bound.
                Err(None) => continue,
            }
        };
        timeline::step("connected");
        let mut reach = Some(reach);
        let outcome = job
            .run_on(&*store, &mut signals, &mut guard, &mut reach)
            .await;
        timeline::step("exit");
        outcome
    }
}

impl Job {
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
                (TurnEnd::Lost { .. }, Some(_)) => "the lease was lost".to_string(),
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
            self.observe(Step::Rejoining(why));
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                sig = signals.terminating() => return Outcome::Raise(sig as i32),
            }
        }
    }
}
