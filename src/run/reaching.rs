//! Reaching the store before the lock is held: every call bounded by
//! `--connect-timeout` ([`Reach`]), tried again only where the store
//! refused for load or the bound waits for a store on its way back, and
//! ended by a terminating signal.

use std::io::IsTerminal;
use std::time::Duration;

use super::Job;
use super::live::LiveLine;
use super::signals::Signals;
use crate::clock::show;
use crate::exit::{Failure, Outcome};
use crate::log;
use crate::reach::Reach;
use crate::store::{ErrorKind, StoreError};

impl Job {
    /// The store went back in time ([`crate::store::rewind`]): no token
    /// is taken from it. A holder of what it said before may run its
    /// command until its own deadline, within a TTL of now (its renewals
    /// are no longer confirmed): that is waited out before elect ends, so
    /// that a supervisor starting elect again at once cannot start a
    /// command beside it.
    pub(super) async fn rewound(&self, e: StoreError, signals: &mut Signals) -> Outcome {
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

    pub(super) fn store_failed(&self, e: StoreError) -> Outcome {
        Failure::from(e)
            .about(format_args!("lock {}", self.lock))
            .into()
    }

    /// A call to the store before the lock is held: within what is left of
    /// `--connect-timeout` ([`Reach`]), and ended by a terminating signal.
    /// A store that refused for load, or one that cannot be reached yet
    /// within a bound that waits for it ([`Reach::again`]), ends the call
    /// after a pause with `Err(None)`: try again.
    pub(super) async fn attempt<T>(
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

    /// When the store keeps us waiting for a lease (a second on), and only
    /// when stderr is a terminal: one line that says what elect waits for,
    /// erased when the wait ends (when this future is dropped).
    pub(super) async fn connecting_line(&self) -> std::convert::Infallible {
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
}
