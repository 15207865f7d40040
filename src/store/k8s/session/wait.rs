//! A contender for one Lease: a look and a take, and the wait between
//! them on one watch of the Lease, judged from its events, so that a
//! renewal costs a waiter no request and a release wakes it at once.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use serde_json::Value;

use super::{Shared, checkpoint_of};
use crate::clock::{Instant, sleep_until};
use crate::log;
use crate::store::k8s::api::{self, Api};
use crate::store::k8s::lease::{self, Lease};
use crate::store::observed::{NAMED_FIRST, Observed};
use crate::store::retry::Backoff;
use crate::store::rewind::Floor;
use crate::store::{
    Boxed, Checkpoint, ErrorKind, HolderRecord, Lock, Loss, StoreError, Token, Turn,
};

/// How the API server's counter is named in messages.
const VERSION: &str = "the API server's resource version";

/// How soon a watch the API server refused is asked for again.
const WATCH_REFUSED_AGAIN: Duration = Duration::from_millis(500);

/// How soon a watch refused with `e` is asked for again: once the API
/// server's `Retry-After` has passed, if it refused for load.
pub(super) fn watch_again(e: &StoreError) -> Duration {
    match e.kind {
        ErrorKind::Crowded {
            again_after: Some(asked),
        } => crate::backoff::at_least(asked).max(WATCH_REFUSED_AGAIN),
        _ => WATCH_REFUSED_AGAIN,
    }
}

/// How far past the instant the Lease ripens a waiter wakes: the look
/// that follows then finds it ripe, never a hair short.
const PAST_RIPE: Duration = Duration::from_millis(1);

/// How to restore the API server's etcd without going back.
const BUMP: &str = "restore its etcd with `etcdutl snapshot restore --bump-revision 1000000000 \
     --mark-compacted`, as Kubernetes' own restore guide asks, to keep tokens rising";

/// A contender for one Lease.
pub(super) struct KubeLock {
    pub(super) shared: Rc<Shared>,
    pub(super) lock: String,
    /// The Lease's object name.
    pub(super) name: String,
    record: String,
    observed: RefCell<Observed<String>>,
    /// What the join's look came to, for the first turn.
    first: RefCell<Option<Attempt>>,
}

/// What one look at the Lease came to.
enum Attempt {
    /// Ours, by the write sent at this instant.
    Ours(u64, Instant),
    /// Someone else's (or a race lost): watch from this version, and look
    /// again by this instant at the latest.
    Busy(Option<String>, Option<Instant>),
}

impl KubeLock {
    /// A contender for `lock`, after its first look (and take, if the
    /// Lease is free).
    pub(super) async fn join(
        shared: Rc<Shared>,
        lock: String,
        record: &HolderRecord,
    ) -> Result<KubeLock, StoreError> {
        let lock = KubeLock {
            shared,
            name: lease::object_name(&lock),
            record: record.acquired_now().to_json(),
            lock,
            observed: RefCell::new(Observed::new()),
            first: RefCell::new(None),
        };
        let first = lock.attempt(None).await?;
        *lock.first.borrow_mut() = Some(first);
        Ok(lock)
    }

    pub(super) fn ns(&self) -> &str {
        self.shared.ns()
    }

    pub(super) fn api(&self) -> &Api {
        &self.shared.api
    }

    /// Ours now: remember the Lease as written, its token pinned for the
    /// next write to record (a renewal, mostly: no write of its own).
    ///
    /// A token at or below a version seen before the take was asked for
    /// (`floor`) is one the API server's etcd handed out already: it was
    /// restored from an older snapshot without `--bump-revision`. The
    /// Lease is kept, as any other held one, until the session ends, and
    /// the take fails with the rewind.
    fn won(&self, mut lease: Lease, sent: Instant, floor: Floor) -> Result<Attempt, StoreError> {
        let token = lease.token()?;
        lease.pin_token();
        self.shared
            .held
            .borrow_mut()
            .insert(self.name.clone(), lease);
        if let Err(rewound) = self.shared.mark.token(floor, token) {
            return Err(rewound.error(VERSION, &self.lock, BUMP));
        }
        Ok(Attempt::Ours(token, sent))
    }

    /// One look at the Lease, and a take if it may be taken: by a read, or
    /// from what a watch just told of it (`seen`, `None` once deleted).
    async fn attempt(&self, seen: Option<Option<Lease>>) -> Result<Attempt, StoreError> {
        let path = lease::path(self.ns(), &self.name);
        let read = match seen {
            Some(Some(lease)) => api::Reply {
                status: 200,
                body: lease.0,
            },
            Some(None) => api::Reply {
                status: 404,
                body: Value::Null,
            },
            None => self.api().request_patiently("GET", &path, None).await?,
        };
        let answered = Instant::now();
        let seconds = self.shared.seconds;
        // Everything read is in the past of the take that may follow.
        if read.status == 200
            && let Some(version) = read.body["metadata"]["resourceVersion"]
                .as_str()
                .and_then(|v| v.parse().ok())
        {
            self.shared.mark.saw(version);
        }
        let floor = self.shared.mark.floor();
        match read.status {
            404 => {
                let new = Lease::new(
                    &self.name,
                    &self.lock,
                    &self.shared.identity,
                    seconds,
                    &self.record,
                );
                let sent = Instant::now();
                let reply = self
                    .api()
                    .request("POST", &lease::leases(self.ns()), Some(&new.0))
                    .await?;
                match reply.status {
                    201 | 200 => self.won(Lease(reply.body), sent, floor),
                    409 => Ok(Attempt::Busy(None, None)),
                    _ => Err(self.api().refusal("create", &self.name, &reply)),
                }
            }
            200 => {
                let lease = Lease(read.body);
                lease.check_of(&self.lock)?;
                let holder = lease.holder();
                // Let go, and to us or to nobody in particular.
                let free = holder.is_empty() && lease.named_other(&self.shared.identity).is_none();
                let version = lease.version().to_string();
                if !holder.is_empty() {
                    let ttl = Duration::from_secs(lease.seconds());
                    self.observed.borrow_mut().saw(version, ttl, answered);
                } else if !free {
                    self.observed
                        .borrow_mut()
                        .saw(version, NAMED_FIRST, answered);
                } else {
                    self.observed.borrow_mut().forget();
                }
                let ripe = self
                    .observed
                    .borrow()
                    .ripe(Instant::now())
                    .is_some_and(|v| v == lease.version());
                if !(free || ripe) {
                    let at = self.observed.borrow().ripe_at();
                    return Ok(Attempt::Busy(Some(lease.version().to_string()), at));
                }
                let mut next = lease.clone();
                next.take(&self.lock, &self.shared.identity, seconds, &self.record);
                let sent = Instant::now();
                let reply = self.api().request("PUT", &path, Some(&next.0)).await?;
                match reply.status {
                    200 => self.won(Lease(reply.body), sent, floor),
                    409 | 404 => Ok(Attempt::Busy(None, None)),
                    _ => Err(self.api().refusal("update", &self.name, &reply)),
                }
            }
            _ => Err(self.api().refusal("get", &self.name, &read)),
        }
    }

    async fn wait(&self, until: Option<Instant>) -> Result<Turn, StoreError> {
        let mut backoff = Backoff::STORE;
        let mut entered = false;
        // One watch for the whole wait: each change comes on it with the
        // Lease as it now is, so a renewal costs a waiter no request.
        let mut watch: Option<api::Watch> = None;
        let mut seen: Option<Option<Lease>> = None;
        loop {
            let joined = self.first.borrow_mut().take();
            let attempt = match joined {
                Some(attempt) => Ok(attempt),
                None => self.attempt(seen.take()).await,
            };
            let (version, ripe_at) = match attempt {
                Ok(Attempt::Ours(token, sent)) => {
                    return Ok(Turn::First {
                        token: Token::new(token),
                        taken: Some(sent),
                    });
                }
                Ok(Attempt::Busy(version, at)) => {
                    backoff.reset();
                    (version, at)
                }
                Err(e) if e.passing() => {
                    log::verbose(format_args!("could not try for lock {}: {e}", self.lock));
                    self.api().reset();
                    watch = None;
                    let wake = Instant::now() + e.pause(&mut backoff);
                    sleep_until(until.map_or(wake, |u| u.min(wake))).await;
                    if until.is_some_and(|u| u.remaining().is_zero()) {
                        return Ok(Turn::Busy);
                    }
                    continue;
                }
                Err(e) => return Err(e),
            };
            if until.is_some_and(|u| u.remaining().is_zero()) {
                return Ok(Turn::Busy);
            }
            let Some(version) = version else {
                // A race lost: read again.
                watch = None;
                continue;
            };
            if !entered {
                entered = true;
                if let Err(e) = self.shared.enter(&self.lock, &self.name).await {
                    if !e.passing() {
                        return Err(e);
                    }
                    entered = false;
                    // Not at once: the look and the entry again would
                    // come back as fast as the API server refused them.
                    log::verbose(format_args!(
                        "could not enter lock {}'s queue: {e}",
                        self.lock
                    ));
                    let wake = Instant::now() + e.pause(&mut backoff);
                    sleep_until(until.map_or(wake, |u| u.min(wake))).await;
                }
                continue;
            }
            let wake = match (ripe_at, until) {
                (Some(r), Some(u)) => Some(r.min(u)),
                (r, u) => r.or(u),
            };
            if watch.is_none() {
                let path = lease::watch(self.ns(), &self.name, &version);
                match self.api().watch(&path).await {
                    Ok(opened) => watch = Some(opened),
                    Err(e) => {
                        log::verbose(format_args!("cannot watch lock {}: {e}", self.lock));
                        let nap = Instant::now() + watch_again(&e);
                        sleep_until(wake.map_or(nap, |w| w.min(nap))).await;
                        continue;
                    }
                }
            }
            let sleep = async {
                match wake {
                    Some(at) => sleep_until(at + PAST_RIPE).await,
                    None => std::future::pending().await,
                }
            };
            let event = async {
                match watch.as_mut() {
                    Some(w) => w.next().await,
                    None => None,
                }
            };
            tokio::select! {
                () = sleep => {}
                event = event => match event {
                    Some(e) if matches!(e["type"].as_str(), Some("ADDED" | "MODIFIED")) => {
                        seen = Some(Some(Lease(e["object"].clone())));
                    }
                    Some(e) if e["type"] == "DELETED" => seen = Some(None),
                    // Bookmarks and the like: look again, by a read.
                    Some(_) => {}
                    // Ended (its timeout, a too old version, a break):
                    // read again and watch anew.
                    None => watch = None,
                },
            }
        }
    }
}

impl Lock for KubeLock {
    fn key(&self) -> &str {
        &self.shared.identity
    }

    fn rank(&self) -> u64 {
        0
    }

    fn wait_turn(&self, until: Option<Instant>) -> Boxed<'_, Result<Turn, StoreError>> {
        Box::pin(self.wait(until))
    }

    fn lost(&self) -> Boxed<'_, Loss> {
        Box::pin(self.watch_ours())
    }

    fn acquired(&self) -> Boxed<'_, ()> {
        Box::pin(async move {
            self.shared.leave_queue(&self.name).await;
        })
    }

    fn checkpoint(&self) -> Boxed<'_, Result<Option<Checkpoint>, StoreError>> {
        Box::pin(async move {
            // As the write that took the Lease found it.
            let held = self.shared.held.borrow().get(&self.name).cloned();
            Ok(held.as_ref().and_then(checkpoint_of))
        })
    }

    fn leave(&self) -> Boxed<'_, Result<(), StoreError>> {
        Box::pin(async move {
            self.shared.leave_queue(&self.name).await;
            let lease = self.shared.held.borrow_mut().remove(&self.name);
            match lease {
                Some(lease) => self.shared.let_go(&self.name, lease).await,
                None => Ok(()),
            }
        })
    }
}
