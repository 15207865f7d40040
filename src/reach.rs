//! Reaching the store: every call before the lock is held (connecting, the
//! lease grant, joining the queue, the shard count; and each look of
//! `status`, `list`, `check`, `checkpoint`) is bounded by one
//! `--connect-timeout`, whatever the store does. A store that accepts a
//! connection and never answers, or a server of another kind at the
//! address, would otherwise keep elect waiting for ever: its client
//! library waits on a reply that never comes, or retries an error that
//! will not pass. The stores keep their own retries inside the bound.
//!
//! When the first contact has gone unanswered for a moment, a probe
//! ([`crate::store::probe`]) looks at what is at the address: a refused
//! port (or a Unix socket that is not there, or refuses) or a server of
//! another kind is reported at once, a silent one at the bound, each in
//! one line that names what was found.
//!
//! `elect run` also races every such call against a terminating signal
//! (`run/reaching.rs`); the other commands die of one by its default action.

use std::future::Future;
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::clock::{Instant, show, sleep_until};
use crate::store::probe::{self, Findings, Heard};
use crate::store::{Location, StoreError};

/// How long the first contact may go unanswered before the probe looks:
/// longer than a healthy store takes, so that it is spared the probe.
const PROBE_AFTER: Duration = Duration::from_millis(250);

/// When the probe has nothing to add (the server there is the kind
/// expected, or speaks TLS), the store's own word at the end of its own
/// patience says more than elect could ("does it accept this client
/// certificate?"): so long it may come after the bound.
const STORE_LAST_WORD: Duration = Duration::from_millis(500);

/// The pauses between tries of a store waited for ([`Reach::again`]), or
/// of one that refused for load without saying for how long.
const FIRST_PAUSE: Duration = Duration::from_millis(50);
const MAX_PAUSE: Duration = Duration::from_secs(1);

/// One bound over the calls that reach a store, and the probe's findings.
pub struct Reach {
    /// The store, as shown.
    shown: String,
    bound: Duration,
    started: Instant,
    until: Instant,
    /// On its way, until its findings are in.
    probe: Option<JoinHandle<Findings>>,
    found: Option<Findings>,
    reached: bool,
    /// Whether a store that cannot be reached is waited for within the
    /// bound ([`Reach::again`]).
    patient: bool,
    /// The pause before the next try.
    pauses: crate::backoff::Backoff,
    /// The store's last refusal for load, if it refused: what the line
    /// that says elect gave up names.
    crowded: Option<String>,
}

impl Reach {
    /// The bound starts now.
    pub fn new(location: &Location, bound: Duration) -> Reach {
        let started = Instant::now();
        let until = started + bound;
        let probe = location.contact().map(|contact| {
            tokio::spawn(async move {
                tokio::time::sleep(PROBE_AFTER).await;
                probe::probe(&contact, until).await
            })
        });
        Reach {
            shown: location.shown(),
            bound,
            started,
            until,
            probe,
            found: None,
            reached: false,
            patient: false,
            pauses: crate::backoff::Backoff::new(FIRST_PAUSE, MAX_PAUSE),
            crowded: None,
        }
    }

    /// The bound of a new session after an outage cost our place in the
    /// queue: the store was there, and one that cannot be reached yet is
    /// most likely on its way back (a restart: etcd 3.5 and later close
    /// their port at once on SIGTERM, then take a second or two to end), so
    /// it is tried again until the bound, with no probe to give up at once.
    pub fn again(location: &Location, bound: Duration) -> Reach {
        let started = Instant::now();
        Reach {
            shown: location.shown(),
            bound,
            started,
            until: started + bound,
            probe: None,
            found: None,
            reached: false,
            patient: true,
            pauses: crate::backoff::Backoff::new(FIRST_PAUSE, MAX_PAUSE),
            crowded: None,
        }
    }

    /// After `e`: how long to pause before trying again, if the bound has
    /// time left for it and the store is worth it: one that refused for
    /// load always, after what it asked for and at a moment of this
    /// elect's own (a fleet's cron starts a thousand at one minute: they
    /// come back spread out, not together again); one that cannot be
    /// reached if it is waited for.
    pub fn try_again(&mut self, e: &StoreError) -> Option<Duration> {
        use crate::store::ErrorKind;
        let left = self.until.remaining();
        if left.is_zero() {
            return None;
        }
        let pause = match e.kind {
            ErrorKind::Crowded { .. } => {
                self.crowded = Some(e.message.clone());
                e.pause(&mut self.pauses)
            }
            ErrorKind::Unavailable if self.patient => self.pauses.pause(),
            _ => return None,
        };
        Some(pause.min(left))
    }

    /// Whether the bound has passed: a call now would give up at once.
    pub fn spent(&self) -> bool {
        self.until.remaining().is_zero()
    }

    /// The store answered what it had to: no probe is needed any more.
    pub fn reached(&mut self) {
        self.reached = true;
        if let Some(probe) = self.probe.take() {
            probe.abort();
        }
    }

    /// Whether [`Reach::reached`] was called.
    pub fn was_reached(&self) -> bool {
        self.reached
    }

    /// `call`, within what is left of the bound; `waiting_for` names what
    /// it waits for ("a lease"), for the line that says elect gave up.
    pub async fn bounded<T>(
        &mut self,
        waiting_for: &str,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        if self.until.remaining().is_zero() {
            return Err(self.gave_up(waiting_for));
        }
        tokio::pin!(call);
        loop {
            let give_up = match self.found.as_ref().is_some_and(Findings::says_more) {
                true => self.until,
                false => self.until + STORE_LAST_WORD,
            };
            let probing = async {
                match self.probe.as_mut() {
                    Some(probe) if self.found.is_none() => probe.await.ok(),
                    _ => std::future::pending().await,
                }
            };
            let event = tokio::select! {
                result = &mut call => Event::Answered(result),
                () = sleep_until(give_up) => Event::GaveUp,
                found = probing => Event::Found(found),
            };
            match event {
                Event::Answered(Ok(value)) => return Ok(value),
                Event::Answered(Err(e)) => return Err(self.explained(e, waiting_for)),
                Event::GaveUp => return Err(self.gave_up(waiting_for)),
                Event::Found(found) => {
                    self.probe = None;
                    let Some(found) = found else { continue };
                    if found.is_final() {
                        return Err(self.told(&found));
                    }
                    self.found = Some(found);
                }
            }
        }
    }

    /// [`Reach::bounded`], for a call whose answer proves the store is
    /// there (a read): once it is in, no probe is needed.
    pub async fn answered<T>(
        &mut self,
        waiting_for: &str,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let answer = self.bounded(waiting_for, call).await;
        if answer.is_ok() {
            self.reached();
        }
        answer
    }

    /// The store's own error, or what the probe found where that says more.
    fn explained(&self, e: StoreError, waiting_for: &str) -> StoreError {
        match &self.found {
            Some(found) if e.kind == crate::store::ErrorKind::Unavailable && found.says_more() => {
                match found.is_final() {
                    true => self.told(found),
                    false => self.waited(self.started.elapsed(), waiting_for),
                }
            }
            _ => e,
        }
    }

    /// The probe's findings as the one line.
    fn told(&self, found: &Findings) -> StoreError {
        if let Some(errno) = found.local() {
            return StoreError::out_of_descriptors(errno);
        }
        let other = found
            .heard
            .iter()
            .any(|(_, h)| matches!(h, Heard::Like(_) | Heard::Garbage));
        StoreError::unavailable(match other {
            true => format!("{}: {found}", self.shown),
            false => format!(
                "cannot reach {}: {found}; is {} running there? (--store, ELECT_STORE)",
                self.shown, found.expects
            ),
        })
    }

    fn gave_up(&self, waiting_for: &str) -> StoreError {
        self.waited(self.bound, waiting_for)
    }

    /// elect waited `waited` for `waiting_for`, and why none came: what
    /// the probe found, or the store's last refusal for load.
    fn waited(&self, waited: Duration, waiting_for: &str) -> StoreError {
        let found = match (&self.found, &self.crowded) {
            (Some(found), _) => format!(": {found}"),
            (None, Some(refused)) => format!(", refused for load: {refused}"),
            (None, None) => String::new(),
        };
        // Whole seconds where there are any: the bound as given.
        let waited = match waited.as_secs() {
            0 => waited,
            secs => Duration::from_secs(secs),
        };
        StoreError::unavailable(format!(
            "gave up after {} waiting for {waiting_for} from {}{found}",
            show(waited),
            self.shown
        ))
    }
}

impl Drop for Reach {
    fn drop(&mut self) {
        self.reached();
    }
}

enum Event<T> {
    Answered(Result<T, StoreError>),
    GaveUp,
    /// The probe's findings; `None` if it failed.
    Found(Option<Findings>),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{ErrorKind, Settings};

    fn directory() -> Location {
        Location::parse("file:/nonexistent-for-reach", &Settings::default()).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_that_never_ends_gives_up_at_the_bound_saying_what_it_waited_for() {
        let mut reach = Reach::new(&directory(), Duration::from_secs(10));
        let started = Instant::now();
        let never = std::future::pending::<Result<(), StoreError>>();
        let e = reach.bounded("a lease", never).await.unwrap_err();
        // Nothing to add from a probe: the store's own word may come just after.
        let waited = started.elapsed();
        assert!(waited >= Duration::from_secs(10), "{waited:?}");
        assert!(waited <= Duration::from_secs(10) + STORE_LAST_WORD + Duration::from_millis(100));
        assert_eq!(e.kind, ErrorKind::Unavailable);
        assert_eq!(
            e.message,
            "gave up after 10s waiting for a lease from file:/nonexistent-for-reach"
        );
        // The bound is spent: a later call gives up at once.
        let answered = async { Ok::<_, StoreError>(()) };
        assert!(
            reach
                .bounded("a place in the queue", answered)
                .await
                .is_err()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_in_time_and_the_stores_own_error_pass_unchanged() {
        let mut reach = Reach::new(&directory(), Duration::from_secs(10));
        let late = async {
            tokio::time::sleep(Duration::from_secs(9)).await;
            Ok::<_, StoreError>(7)
        };
        assert_eq!(reach.bounded("a lease", late).await.unwrap(), 7);
        let refused = async { Err::<(), _>(StoreError::unavailable("refused us: no")) };
        let e = reach.bounded("a lease", refused).await.unwrap_err();
        assert_eq!(e.message, "refused us: no");
        reach.reached();
        assert!(reach.was_reached());
    }

    #[tokio::test(start_paused = true)]
    async fn a_store_waited_for_is_tried_again_until_the_bound_and_only_when_unreachable() {
        let mut reach = Reach::again(&directory(), Duration::from_secs(3));
        let down = StoreError::unavailable("nothing listens there");
        let mut pauses = Vec::new();
        while let Some(pause) = reach.try_again(&down) {
            pauses.push(pause.as_millis());
            tokio::time::sleep(pause).await;
        }
        assert_eq!(pauses, [50, 100, 200, 400, 800, 1000, 450]);
        let mut reach = Reach::again(&directory(), Duration::from_secs(3));
        assert_eq!(reach.try_again(&StoreError::config("wrong password")), None);
        let mut first = Reach::new(&directory(), Duration::from_secs(3));
        assert_eq!(first.try_again(&down), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_store_that_refused_for_load_is_tried_again_as_asked_and_named_at_the_bound() {
        let refused = "the API server refused GET /x for load (429 Too Many Requests)";
        let crowded = StoreError::crowded(refused, Some(Duration::from_secs(1)));
        // Not a bound that waits for a store on its way back: still tried.
        let mut reach = Reach::new(&directory(), Duration::from_secs(3));
        let started = Instant::now();
        let mut pauses = Vec::new();
        while let Some(pause) = reach.try_again(&crowded) {
            pauses.push(pause);
            tokio::time::sleep(pause).await;
        }
        assert_eq!(started.elapsed(), Duration::from_secs(3));
        let (last, asked) = pauses.split_last().unwrap();
        assert!(!asked.is_empty(), "{pauses:?}");
        for pause in asked {
            let ms = pause.as_millis();
            assert!((1000..=1500).contains(&ms), "{pauses:?}");
        }
        assert!(*last <= Duration::from_millis(1500), "{pauses:?}");
        let never = std::future::pending::<Result<(), StoreError>>();
        let e = reach.bounded("a lease", never).await.unwrap_err();
        assert_eq!(
            e.message,
            format!(
                "gave up after 3s waiting for a lease from file:/nonexistent-for-reach, \
                 refused for load: {refused}"
            )
        );
    }
}
