//! The bearer token of an exec credential plugin or a token file, kept
//! ahead of need: a token is fetched again in the background before it
//! expires (an exec plugin's, once less than half its life or
//! [`REFRESH_AHEAD`] is left) or, from a file, once a minute (as client-go
//! reads a projected service-account token again), so that a request
//! never waits for a plugin while a token that lives is at hand. Only a
//! request with none waits, bounded. A 401 on a token fetches one afresh,
//! once (as client-go does).
//!
//! A fetch that fails while the token in hand lives is told and tried
//! again after a pause; the token in hand is used until it expires.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use super::exec::{Credential, Plugin};
use crate::clock::{Instant, show};
use crate::log;
use crate::store::retry::Backoff;
use crate::store::{Secret, StoreError};

/// How long before its expiry a plugin's token is fetched again, at most
/// (half its life, if shorter).
const REFRESH_AHEAD: Duration = Duration::from_secs(120);

/// How often a token file is read again.
const FILE_REREAD: Duration = Duration::from_secs(60);

/// The pauses after a fetch that failed, while a token lives: doubling
/// from the first to the most.
const FIRST_PAUSE: Duration = Duration::from_secs(1);
const MAX_PAUSE: Duration = Duration::from_secs(30);

/// Where tokens come from.
#[derive(Clone, Debug)]
pub enum Source {
    Exec(Plugin),
    File(PathBuf),
}

impl Source {
    async fn fetch(&self) -> Result<Credential, StoreError> {
        match self {
            Source::Exec(plugin) => plugin.run().await,
            Source::File(path) => {
                let path = path.clone();
                let read = tokio::task::spawn_blocking(move || {
                    std::fs::read_to_string(&path).map_err(|e| {
                        StoreError::config_io(
                            &e,
                            format!("cannot read the token file {}: {e}", path.display()),
                        )
                    })
                });
                let text = read
                    .await
                    .map_err(|e| StoreError::config(format!("reading the token file: {e}")))??;
                Ok(Credential {
                    token: Secret(text.trim().to_string()),
                    expires: None,
                })
            }
        }
    }

    /// What the source is, for messages.
    fn shown(&self) -> String {
        match self {
            Source::Exec(plugin) => format!(
                "the kubeconfig {}: the exec plugin {}",
                plugin.file,
                plugin.command.display()
            ),
            Source::File(path) => format!("the token file {}", path.display()),
        }
    }
}

/// A token in hand.
struct Kept {
    token: Secret,
    expires: Option<SystemTime>,
    /// When to fetch the next, ahead of need (`None`: only after a 401).
    refresh_at: Option<SystemTime>,
}

impl Kept {
    fn new(credential: Credential, source: &Source) -> Kept {
        let now = SystemTime::now();
        let refresh_at = match (source, credential.expires) {
            (Source::File(_), _) => Some(now + FILE_REREAD),
            (Source::Exec(_), None) => None,
            (Source::Exec(_), Some(expires)) => {
                let life = expires.duration_since(now).unwrap_or_default();
                Some(expires - (life / 2).min(REFRESH_AHEAD))
            }
        };
        Kept {
            token: credential.token,
            expires: credential.expires,
            refresh_at,
        }
    }

    fn lives(&self) -> bool {
        self.expires.is_none_or(|at| SystemTime::now() < at)
    }
}

struct State {
    kept: Option<Kept>,
    /// When the fetch on its way started.
    fetching: Option<Instant>,
    /// The outcome of the last fetch that ended.
    last: Option<Result<Secret, StoreError>>,
    /// After a fetch that failed: none starts ahead of need before this.
    pause_until: Option<Instant>,
    pause: Backoff,
    /// The token in hand expired while the fetch on its way ran: told.
    told: bool,
}

impl Default for State {
    fn default() -> State {
        State {
            kept: None,
            fetching: None,
            last: None,
            pause_until: None,
            pause: Backoff::new(FIRST_PAUSE, MAX_PAUSE),
            told: false,
        }
    }
}

impl State {
    fn due(&self) -> bool {
        let Some(kept) = &self.kept else {
            return true;
        };
        self.fetching.is_none()
            && kept.refresh_at.is_some_and(|at| at <= SystemTime::now())
            && self.pause_until.is_none_or(|at| at <= Instant::now())
    }
}

/// The tokens of one source, shared by every request to one API server.
pub struct Tokens {
    source: Arc<Source>,
    state: Arc<Mutex<State>>,
    /// Counts the fetches that ended.
    ended: Arc<tokio::sync::watch::Sender<u64>>,
}

impl Tokens {
    pub fn new(source: Source) -> Tokens {
        Tokens {
            source: Arc::new(source),
            state: Arc::default(),
            ended: Arc::new(tokio::sync::watch::Sender::new(0)),
        }
    }

    /// A token to send now: the one in hand while it lives (a fetch of the
    /// next started if due, never waited for); else, one fetched, waited
    /// for `within` at most.
    pub async fn token(&self, within: Duration) -> Result<Secret, StoreError> {
        let mut ended = self.ended.subscribe();
        let started = {
            let mut state = lock(&self.state);
            if let Some(kept) = state.kept.as_ref().filter(|k| k.lives()) {
                let token = kept.token.clone();
                if state.due() {
                    self.fetch(&mut state);
                }
                return Ok(token);
            }
            if let (Some(_), Some(started), false) = (&state.kept, state.fetching, state.told) {
                state.told = true;
                log::warn(format_args!(
                    "{} has run for {} without an answer, and the token in hand has expired: \
                     requests wait for it",
                    self.source.shown(),
                    show(started.elapsed())
                ));
            }
            self.fetch(&mut state)
        };
        self.wait(&mut ended, started, within).await
    }

    /// A token other than `refused`, which the API server answered 401:
    /// fetched afresh unless one came meanwhile, waited for `within` at most.
    pub async fn after_refusal(
        &self,
        refused: &Secret,
        within: Duration,
    ) -> Result<Secret, StoreError> {
        let mut ended = self.ended.subscribe();
        let started = {
            let mut state = lock(&self.state);
            if let Some(kept) = state.kept.as_ref().filter(|k| k.lives())
                && kept.token != *refused
            {
                return Ok(kept.token.clone());
            }
            state.kept = None;
            self.fetch(&mut state)
        };
        self.wait(&mut ended, started, within).await
    }

    /// Wait for the fetch that started at `started` to end.
    async fn wait(
        &self,
        ended: &mut tokio::sync::watch::Receiver<u64>,
        started: Instant,
        within: Duration,
    ) -> Result<Secret, StoreError> {
        match tokio::time::timeout(within, ended.changed()).await {
            Ok(_) => {
                let state = lock(&self.state);
                match &state.last {
                    Some(last) => last.clone(),
                    None => Err(StoreError::unavailable(format!(
                        "{}: gave no token",
                        self.source.shown()
                    ))),
                }
            }
            Err(_) => {
                // Whole seconds where there are any: the bound as given.
                let waited = match started.elapsed().as_secs() {
                    0 => started.elapsed(),
                    secs => Duration::from_secs(secs),
                };
                Err(StoreError::unavailable(format!(
                    "{} hangs: no token after {}",
                    self.source.shown(),
                    show(waited)
                )))
            }
        }
    }

    /// Start a fetch, unless one is on its way: when it started.
    fn fetch(&self, state: &mut State) -> Instant {
        if let Some(started) = state.fetching {
            return started;
        }
        let started = Instant::now();
        state.fetching = Some(started);
        let (source, shared, ended) = (self.source.clone(), self.state.clone(), self.ended.clone());
        tokio::spawn(async move {
            let fetched = source.fetch().await;
            let mut state = lock(&shared);
            state.fetching = None;
            state.told = false;
            match fetched {
                Ok(credential) => {
                    log::verbose(format_args!(
                        "{}: a token, in {}",
                        source.shown(),
                        show(started.elapsed())
                    ));
                    let kept = Kept::new(credential, &source);
                    state.last = Some(Ok(kept.token.clone()));
                    state.kept = Some(kept);
                    state.pause_until = None;
                    state.pause.reset();
                }
                Err(e) => {
                    let pause = state.pause.pause();
                    state.pause_until = Some(Instant::now() + pause);
                    let lives = state.kept.as_ref().filter(|k| k.lives()).map(|k| {
                        k.expires
                            .and_then(|at| at.duration_since(SystemTime::now()).ok())
                    });
                    match lives {
                        Some(left) => log::warn(format_args!(
                            "{}; the token in hand is used{}, and a new one fetched again in {}",
                            e.message,
                            match left {
                                Some(left) => format!(" for {} more", show(left)),
                                None => String::new(),
                            },
                            show(pause)
                        )),
                        None => log::verbose(format_args!("{}", e.message)),
                    }
                    state.last = Some(Err(e));
                }
            }
            drop(state);
            ended.send_modify(|n| *n += 1);
        });
        started
    }
}

/// The state, even if a holder of its lock panicked (it is never left
/// half-changed).
fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refresh_ahead(life: Duration) -> Duration {
        let plugin = Source::Exec(Plugin {
            api_version: "client.authentication.k8s.io/v1".into(),
            command: "p".into(),
            args: Vec::new(),
            env: Vec::new(),
            file: "k".into(),
        });
        let expires = SystemTime::now() + life;
        let kept = Kept::new(
            Credential {
                token: Secret("t".into()),
                expires: Some(expires),
            },
            &plugin,
        );
        expires.duration_since(kept.refresh_at.unwrap()).unwrap()
    }

    #[test]
    fn a_plugins_token_is_fetched_again_two_minutes_or_half_its_life_ahead() {
        let s = Duration::from_secs(1);
        // EKS: 14 minutes; GKE: an hour.
        assert_eq!(refresh_ahead(840 * s), 120 * s);
        assert_eq!(refresh_ahead(3600 * s), 120 * s);
        // A short life: half of it.
        let ahead = refresh_ahead(8 * s);
        assert!(
            ahead <= 4 * s && ahead > 3900 * Duration::from_millis(1),
            "{ahead:?}"
        );
    }
}
