//! Trying a store again, alike on every store: a request that failed in a
//! way that may pass (nothing listens yet, a member without a leader, a
//! server starting up) is sent again after a pause that doubles, until it
//! is answered, refused, or the caller's bound has passed; and each attempt
//! has a bound of its own, so that one that hangs (a connection that died
//! silently, a request caught in a leader change) is sent again instead of
//! using up the whole bound.
//!
//! What is worth another try is each store's to say (its client's errors);
//! how often and how long is said here, once.

use std::future::Future;
use std::time::Duration;

use crate::clock::{Instant, sleep_until};
use crate::log;

pub use crate::backoff::Backoff;

/// How long one attempt may wait for its answer within `bound`: a third of
/// it, at least a second ([`retry`] gives none beyond the bound). Three attempts fit,
/// so one that hangs leaves time for two more; a second leaves a
/// round trip and a TLS handshake on a busy machine time to finish. A
/// request that reached an etcd member just as its leader died is answered
/// only after etcd's own request timeout (5 s plus two election timeouts),
/// long after a new leader could have taken it; sent again, it is.
pub fn attempt_within(bound: Duration) -> Duration {
    (bound / 3).max(Duration::from_secs(1))
}

/// How a retried operation ended without an answer.
#[derive(Debug, PartialEq, Eq)]
pub enum GaveUp<E> {
    /// An attempt failed in a way another try would not fix: its error.
    Refused(E),
    /// The bound passed; the error of the last attempt that failed with
    /// one (`None`: every attempt went unanswered).
    Bound(Option<E>),
}

/// Whether a failed attempt is worth another, as its store says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Worth {
    /// No: another try would not change the answer.
    No,
    /// Yes, after a pause of [`retry`]'s own.
    Yes,
    /// Yes, but the store refused for load and asked for this pause first
    /// (`Retry-After`).
    After(Duration),
}

impl Worth {
    /// What `e` is worth, by its kind alone: refused for load, after the
    /// pause the store asked for; unreachable, after one of ours.
    pub fn of(e: &crate::store::StoreError) -> Worth {
        use crate::store::ErrorKind;
        match e.kind {
            ErrorKind::Crowded {
                again_after: Some(asked),
            } => Worth::After(asked),
            ErrorKind::Crowded { again_after: None } | ErrorKind::Unavailable => Worth::Yes,
            _ => Worth::No,
        }
    }
}

/// Run `op` until it succeeds, fails with an error that `worth_retrying`
/// says no to, or `bound` has passed. Each attempt is given `attempt` at
/// most (no more than what is left of the bound; [`attempt_within`] unless
/// the store says why not); one that fails is tried again after a
/// [`Backoff::STORE`] pause, jittered (a fleet's elects turned away
/// together, at a server's connection limit, come back spread out), or
/// after the pause the store asked for, jittered upward
/// ([`crate::backoff::at_least`]), and within the bound; one that goes
/// unanswered at once. `what` names the request in the verbose log.
pub async fn retry<T, E, F, Fut>(
    what: &str,
    bound: Duration,
    attempt: Duration,
    mut op: F,
    mut worth_retrying: impl FnMut(&E) -> Worth,
) -> Result<T, GaveUp<E>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let give_up = Instant::now() + bound;
    let mut backoff = Backoff::STORE;
    let mut last = None;
    loop {
        let left = give_up.remaining();
        if left.is_zero() {
            return Err(GaveUp::Bound(last));
        }
        match tokio::time::timeout(left.min(attempt), op()).await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(e)) => {
                let pause = match worth_retrying(&e) {
                    Worth::No => return Err(GaveUp::Refused(e)),
                    Worth::Yes => backoff.jittered(),
                    Worth::After(asked) => crate::backoff::at_least(asked),
                };
                last = Some(e);
                sleep_until((Instant::now() + pause).min(give_up)).await;
            }
            Err(_) if !give_up.remaining().is_zero() => {
                log::verbose(format_args!(
                    "{what} unanswered after {}, sending it again",
                    crate::clock::show(attempt)
                ));
            }
            Err(_) => {}
        }
    }
}

/// A failed attempt to connect to a database server, sorted alike for the
/// stores whose client makes its own connections (PostgreSQL, MySQL): each
/// store says what its client's error means, this says what elect tells.
pub struct ConnectFailure {
    pub text: String,
    /// May pass if tried again: nothing listens yet, a server starting.
    pub passing: bool,
    /// Turned away at the server's connection limit (`max_connections`,
    /// a role's or account's own): passing, and said so at the end.
    pub crowded: bool,
    /// The TLS handshake refused, as every store says it.
    pub tls: Option<crate::store::tls::Refused>,
    /// The user's to fix: no such database.
    pub config: bool,
    /// The account's credentials or rights refused.
    pub refused: bool,
    /// A descriptor could not be had on this machine (the errno, EMFILE or
    /// ENFILE): never passing, and not the store's doing.
    pub local: Option<i32>,
}

/// How a store's client sorted a failed connection attempt, for
/// [`ConnectFailure::new`].
pub struct Sorted {
    pub tls: Option<crate::store::tls::Refused>,
    pub config: bool,
    pub refused: bool,
    pub crowded: bool,
    /// The client's own word: may pass if tried again.
    pub passing: bool,
}

impl ConnectFailure {
    /// `error` as its store sorted it: a descriptor short on this machine
    /// is found in its chain, and what TLS refused, the user's, the
    /// account's or the machine's never passes. Where the server asked for
    /// a password and none was given (`asked_password` without one),
    /// `hint` says where one goes.
    pub fn new(
        error: &(dyn std::error::Error + 'static),
        text: String,
        sorted: Sorted,
        asked_password: bool,
        hint: impl FnOnce(String) -> String,
    ) -> ConnectFailure {
        let Sorted {
            tls,
            config,
            refused,
            crowded,
            passing,
        } = sorted;
        let local = crate::descriptors::in_chain(error);
        ConnectFailure {
            text: if asked_password { hint(text) } else { text },
            passing: passing && !config && tls.is_none() && !refused && local.is_none(),
            crowded,
            tls,
            config,
            refused,
            local,
        }
    }

    /// Whether another attempt is worth it: [`ConnectFailure::passing`].
    pub fn worth(&self) -> Worth {
        match self.passing {
            true => Worth::Yes,
            false => Worth::No,
        }
    }

    /// What to tell once connecting to `shown` was given up on, `within`
    /// the bound.
    pub fn gave_up(
        gave_up: GaveUp<ConnectFailure>,
        shown: &str,
        within: Duration,
    ) -> crate::store::StoreError {
        use crate::store::StoreError;
        let failure = match gave_up {
            GaveUp::Refused(failure) | GaveUp::Bound(Some(failure)) => failure,
            GaveUp::Bound(None) => {
                return StoreError::unavailable(format!(
                    "cannot reach {shown} within {}: no answer",
                    crate::clock::show(within)
                ));
            }
        };
        if let Some(errno) = failure.local {
            return StoreError::out_of_descriptors(errno);
        }
        if let Some(refused) = &failure.tls {
            return refused.error(shown);
        }
        match (failure.config, failure.passing) {
            (true, _) => StoreError::config(format!("{shown}: {}", failure.text)),
            (false, false) if failure.refused => {
                StoreError::denied(format!("{shown} refused us: {}", failure.text))
            }
            (false, false) => {
                StoreError::unavailable(format!("{shown} refused us: {}", failure.text))
            }
            (false, true) if failure.crowded => StoreError::unavailable(format!(
                "{shown} turned elect's connections away at its connection limit for {}: {}",
                crate::clock::show(within),
                failure.text
            )),
            (false, true) => StoreError::unavailable(format!(
                "cannot reach {shown} within {}: {}",
                crate::clock::show(within),
                failure.text
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_pause_doubles_up_to_its_most_and_starts_again_after_a_reset() {
        let mut b = Backoff::STORE;
        let pauses: Vec<u128> = (0..7).map(|_| b.pause().as_millis()).collect();
        assert_eq!(pauses, [25, 50, 100, 200, 400, 500, 500]);
        b.reset();
        assert_eq!(b.pause(), 25 * MS);
    }

    #[test]
    fn an_attempt_gets_a_third_of_the_bound_at_least_a_second() {
        assert_eq!(attempt_within(Duration::from_secs(10)), 10_000 * MS / 3);
        assert_eq!(
            attempt_within(Duration::from_secs(2)),
            Duration::from_secs(1)
        );
        assert_eq!(attempt_within(300 * MS), Duration::from_secs(1));
    }

    /// What the retry of these answers returned, and when each attempt
    /// started (ms).
    async fn run(
        bound: Duration,
        answers: Vec<Result<u32, &'static str>>,
        worth: fn(&&'static str) -> Worth,
    ) -> (Result<u32, GaveUp<&'static str>>, Vec<u128>) {
        let started = Instant::now();
        let at = RefCell::new(Vec::new());
        let answers = RefCell::new(answers.into_iter());
        let got = retry(
            "test",
            bound,
            attempt_within(bound),
            || {
                at.borrow_mut()
                    .push(Instant::now().since(started).as_millis());
                let next = answers.borrow_mut().next();
                async move {
                    match next {
                        Some(answer) => answer,
                        // Out of answers: hang, as a dead connection does.
                        None => std::future::pending().await,
                    }
                }
            },
            worth,
        )
        .await;
        (got, at.into_inner())
    }

    /// Each gap between attempts `at` (ms) is in the second half of its
    /// pause: none longer, none shorter than half.
    fn jittered(at: &[u128], pauses: &[u128]) {
        assert_eq!(at.len(), pauses.len() + 1, "{at:?}");
        for (gap, pause) in at.windows(2).map(|w| w[1] - w[0]).zip(pauses) {
            assert!(
                (pause / 2..=*pause).contains(&gap),
                "{at:?} after pauses {pauses:?}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_that_may_pass_is_tried_again_after_each_pause() {
        let (got, at) = run(
            Duration::from_secs(10),
            vec![Err("busy"), Err("busy"), Err("busy"), Ok(7)],
            |_| Worth::Yes,
        )
        .await;
        assert_eq!(got, Ok(7));
        jittered(&at, &[25, 50, 100]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusal_is_returned_at_once() {
        let (got, at) = run(
            Duration::from_secs(10),
            vec![Err("busy"), Err("no"), Ok(7)],
            |e| match *e {
                "no" => Worth::No,
                _ => Worth::Yes,
            },
        )
        .await;
        assert_eq!(got, Err(GaveUp::Refused("no")));
        jittered(&at, &[25]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusal_for_load_is_tried_again_no_sooner_than_asked_within_the_bound() {
        let asked = |_: &&'static str| Worth::After(Duration::from_secs(1));
        let (got, at) = run(Duration::from_secs(10), vec![Err("429"), Ok(7)], asked).await;
        assert_eq!(got, Ok(7));
        assert!((1000..=1500).contains(&(at[1] - at[0])), "{at:?}");
        // Asked to wait past the bound: no try before it, and the refusal
        // is what is said at the bound.
        let started = Instant::now();
        let later = |_: &&'static str| Worth::After(Duration::from_secs(5));
        let (got, at) = run(Duration::from_secs(2), vec![Err("429"), Ok(7)], later).await;
        assert_eq!(got, Err(GaveUp::Bound(Some("429"))));
        assert_eq!(at, [0]);
        assert_eq!(Instant::now().since(started), Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn an_attempt_that_hangs_is_sent_again_and_the_bound_is_kept() {
        // The first fails, the rest hang: each hung attempt is given a
        // third of the bound, then sent again at once; the last ends at the
        // bound, with the last error seen.
        let started = Instant::now();
        let (got, at) = run(Duration::from_secs(6), vec![Err("busy")], |_| Worth::Yes).await;
        assert_eq!(got, Err(GaveUp::Bound(Some("busy"))));
        assert_eq!(at.len(), 4, "{at:?}");
        jittered(&at[..2], &[25]);
        assert_eq!([at[2] - at[1], at[3] - at[2]], [2000, 2000], "{at:?}");
        assert_eq!(Instant::now().since(started), Duration::from_secs(6));
    }

    #[tokio::test(start_paused = true)]
    async fn failures_until_the_bound_give_up_at_the_bound_with_the_last_error() {
        let started = Instant::now();
        let answers = (0..100).map(|_| Err("busy")).collect();
        let (got, at) = run(Duration::from_secs(2), answers, |_| Worth::Yes).await;
        assert_eq!(got, Err(GaveUp::Bound(Some("busy"))));
        assert_eq!(Instant::now().since(started), Duration::from_secs(2));
        // 25, 50, 100, 200, 400 ms, then 500 ms, each jittered.
        let pauses = [
            25, 50, 100, 200, 400, 500, 500, 500, 500, 500, 500, 500, 500, 500,
        ];
        jittered(&at, &pauses[..at.len() - 1]);
        assert!(*at.last().unwrap() < 2000, "{at:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn unanswered_until_the_bound_is_no_error_of_its_own() {
        let (got, at) = run(Duration::from_millis(300), vec![], |_| Worth::Yes).await;
        assert_eq!(got, Err(GaveUp::Bound(None)));
        assert_eq!(at, [0]);
    }
}
