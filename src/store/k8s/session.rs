//! A session on Kubernetes: its id, the Leases it holds, and the
//! renewals that keep them, in client-go's `leaderelection` protocol.
//!
//! The holder's identity is the host's name and the session's id, so that
//! no two sessions share one: client-go takes a Lease at once from a holder of
//! its own identity. A renewal is one PUT of the Lease as last written
//! (client-go's optimistic fast path); a 409 is read again, and the Lease
//! is still ours only if it still names our identity. A waiter takes a
//! Lease someone holds only once it has seen it unchanged for its
//! `leaseDurationSeconds` on its own clock ([`Observed`]): `renewTime` is
//! another host's wall clock and is never compared. It waits by a watch on
//! the Lease, so a release wakes it at once. A release names the waiter to
//! take the Lease next ([`lease::NEXT`], the oldest by the waiters'
//! records), and the others let it for [`NAMED_FIRST`]: without, every
//! waiter PUT at each release, one won, and the rest read and watched
//! again, in no order.
//!
//! A holder owns its Lease: it watches every change of it, and tells its
//! own writes by the `resourceVersion` their answers gave (an event of one
//! costs it nothing more). Anyone else's write is judged at once: a
//! deletion, or another `holderIdentity`, ends the tenure as a revoked
//! lease does; a break request asks it to let go; a `leaseDurationSeconds`
//! not its own (an edit by hand, a GitOps sync) is written back at once by a
//! renewal, before a waiter counting the shorter duration could take it.
//! Every renewal writes the holder's whole spec, as client-go's do.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::sync::Notify;

use super::api::Api;
use super::lease::{self, Lease};
use super::records::{self, Waiter};
use crate::clock::{Instant, sleep_until};
use crate::log;
use crate::store::Token;
use crate::store::observed::{NAMED_FIRST, Observed};
use crate::store::retry::Backoff;
use crate::store::rewind::{Floor, Mark};
use crate::store::{
    Boxed, Checkpoint, ErrorKind, HolderRecord, Lock, Loss, Renewal, Renewer, Session, StoreError,
    Turn,
};

/// A new session id: 64 random bits, in hex.
pub fn session_id() -> String {
    crate::store::ids::hex(&crate::store::ids::random::<8>())
}

/// The `holderIdentity` of a session: the host, then the session's id.
pub fn identity(session: &str) -> String {
    let host = nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "elect".into());
    format!("{host}_{session}")
}

/// The session id in a `holderIdentity` elect wrote.
pub fn session_of(identity: &str) -> Option<&str> {
    let (_, id) = identity.rsplit_once('_')?;
    (id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit())).then_some(id)
}

/// One of our waiter records, as last written.
#[derive(Clone)]
pub struct Waiting {
    lock: String,
    /// The Lease of the lock.
    object: String,
    waiter: Waiter,
    /// When that write was sent, and when the next is due.
    written: Instant,
    every: Duration,
}

/// What a session and its renewers share.
pub struct Shared {
    pub api: Rc<Api>,
    /// The session id, as `ELECT_LEASE_ID` shows it.
    pub id: String,
    pub identity: String,
    /// `leaseDurationSeconds`.
    pub seconds: u64,
    /// The Leases we hold, by object name, as last written.
    pub held: RefCell<BTreeMap<String, Lease>>,
    /// Our waiter records, by their ConfigMap's name.
    pub waiting: RefCell<BTreeMap<String, Waiting>>,
    /// Requests to let go seen by renewals, by object name.
    asked: RefCell<BTreeMap<String, String>>,
    news: Notify,
    /// The store's [`Mark`]: the highest resource version seen of its
    /// Leases. A take's version, the token, must lie above it.
    mark: Mark,
}

impl Shared {
    fn ns(&self) -> &str {
        &self.api.conn.namespace
    }

    /// Whether `lease` asks its holder to let go, and why.
    fn asks(&self, lease: &Lease) -> Option<String> {
        if let Some(why) = lease.annotation(lease::BREAK) {
            return Some(format!("{why} asked it to let go"));
        }
        match lease.preferred() {
            Some(p) if p != self.identity => Some(format!(
                "the Lease's preferredHolder is {p}: asked to let go"
            )),
            _ => None,
        }
    }

    /// Keep `lease`, as one of our writes answered, for the Lease `name`
    /// we hold: unless let go meanwhile, or a later write of ours (a
    /// renewal and a re-assertion may cross) is kept already.
    fn keep(&self, name: &str, lease: Lease) {
        let mut held = self.held.borrow_mut();
        let Some(kept) = held.get(name) else {
            return;
        };
        let newer = match (
            lease::parse_version(lease.version()),
            lease::parse_version(kept.version()),
        ) {
            (Ok(new), Ok(old)) => new > old,
            _ => true,
        };
        if newer {
            held.insert(name.to_string(), lease);
        }
    }

    /// A renewal of the Lease `name`, held as `lease`: its whole spec, ours.
    /// `Ok(None)`: not ours any more.
    async fn renew_one(&self, name: &str, lease: Lease) -> Result<Option<Lease>, StoreError> {
        let (identity, seconds) = (self.identity.clone(), self.seconds);
        let renew = move |l: &mut Lease| l.renew_as(&identity, seconds);
        self.write_ours(name, lease, &renew).await
    }

    /// PUT `lease`, our holder's, with its version; on a conflict read it
    /// again, and write again while it is still ours. `change` makes the
    /// write from what was read. `Ok(None)`: not ours (any more).
    async fn write_ours(
        &self,
        name: &str,
        mut lease: Lease,
        change: &dyn Fn(&mut Lease),
    ) -> Result<Option<Lease>, StoreError> {
        let path = lease::path(self.ns(), name);
        let token = lease.annotation(lease::TOKEN).map(String::from);
        for _ in 0..5 {
            let mut next = lease.clone();
            // Ours, so the token is the one we took it with, as pinned.
            match &token {
                Some(token) if next.annotation(lease::TOKEN).is_none() => {
                    next.set_annotation(lease::TOKEN, token);
                }
                _ => next.pin_token(),
            }
            change(&mut next);
            let reply = self.api.request("PUT", &path, Some(&next.0)).await?;
            match reply.status {
                200 => return Ok(Some(Lease(reply.body))),
                404 => return Ok(None),
                409 => {
                    let read = self.api.request("GET", &path, None).await?;
                    match read.status {
                        200 => lease = Lease(read.body),
                        404 => return Ok(None),
                        _ => return Err(self.api.refusal("get", name, &read)),
                    }
                    if lease.holder() != self.identity {
                        return Ok(None);
                    }
                }
                _ => return Err(self.api.refusal("update", name, &reply)),
            }
        }
        Err(StoreError::unavailable(format!(
            "{}: Lease {name} kept changing under its holder's writes",
            self.api.shown()
        )))
    }

    /// Record that we wait for `lock`, whose Lease is `object`: a key of
    /// our own in its records, renewed while we wait, so that the waiting
    /// are seen in the store and a release can name the oldest to take the
    /// Lease next (its `renewed` tells a live one from one whose elect
    /// died: shown, and the order of a wake-up, never who holds it). It
    /// only has to show a live waiter: it is renewed once a TTL, or less
    /// often when many wait ([`records::renew_every`]), not with every
    /// renewal. A ConfigMap too full to take it leaves us waiting unlisted.
    async fn enter(&self, lock: &str, object: &str) -> Result<(), StoreError> {
        let name = records::name(object);
        let ttl = Duration::from_secs(self.seconds);
        let waiting = Waiting {
            lock: lock.to_string(),
            object: object.to_string(),
            waiter: Waiter::new(&self.identity, ttl),
            written: Instant::now(),
            every: ttl,
        };
        let data = self.waiter_data(&waiting.waiter);
        // Counted as ours before it is sent: a write whose reply is lost
        // may still have been made, and leaving must remove it then too.
        self.waiting.borrow_mut().insert(name.clone(), waiting);
        let written = records::merge(&self.api, self.ns(), (lock, object, &name), data, true).await;
        match written {
            Ok(map) => {
                self.written(&name, map.as_ref(), lock);
                Ok(())
            }
            Err(e) if e.kind == ErrorKind::Config => {
                log::verbose(format_args!("waiting for lock {lock} unlisted: {e}"));
                self.waiting.borrow_mut().remove(&name);
                Ok(())
            }
            // Unanswered, it may have been written: still ours to remove.
            Err(e) if e.kind == ErrorKind::Unavailable => Err(e),
            Err(e) => {
                self.waiting.borrow_mut().remove(&name);
                Err(e)
            }
        }
    }

    /// Our key in a records' ConfigMap, holding `waiter`.
    fn waiter_data(&self, waiter: &Waiter) -> Map<String, Value> {
        let value = serde_json::to_string(waiter).map_or(Value::Null, Value::from);
        Map::from_iter([(records::waiter_key(&self.id), value)])
    }

    /// Our waiter record in the ConfigMap `name` (of `lock`) was written
    /// and the ConfigMap came back as `map`: renew it next as the waiters
    /// and the ConfigMap now stand.
    fn written(&self, name: &str, map: Option<&Value>, lock: &str) {
        let Some(map) = map else { return };
        let waiters = records::waiters(map, lock).count();
        let every = records::renew_every(
            Duration::from_secs(self.seconds),
            waiters,
            records::size(map),
        );
        if let Some(waiting) = self.waiting.borrow_mut().get_mut(name) {
            waiting.every = every;
        }
    }

    /// No longer waiting for the lock whose object is `object`.
    async fn leave_queue(&self, object: &str) {
        let name = records::name(object);
        let Some(waiting) = self.waiting.borrow_mut().remove(&name) else {
            return;
        };
        if let Err(e) = self.remove_waiter(&name, &waiting).await {
            log::verbose(format_args!("removing our waiter record from {name}: {e}"));
        }
    }

    /// Remove our key from the ConfigMap `name`: tried again when
    /// unanswered, since a record left behind looks like a live waiter
    /// for a while.
    async fn remove_waiter(&self, name: &str, waiting: &Waiting) -> Result<(), StoreError> {
        let patch = json!({ "data": { records::waiter_key(&self.id): null } });
        let path = records::path(self.ns(), name);
        let reply = self
            .api
            .request_patiently("PATCH", &path, Some(&patch))
            .await?;
        match reply.status {
            200 | 404 => Ok(()),
            _ => Err(self.api.refusal_of(
                super::api::CONFIGMAPS,
                "patch",
                &format!("{name} (lock {})", waiting.lock),
                &reply,
            )),
        }
    }

    /// Renew those of our waiter records due; one whose ConfigMap is gone
    /// is let be. `Ok(true)`: the API server answered a write.
    async fn renew_waiting(&self) -> Result<bool, StoreError> {
        let due: Vec<(String, Waiting)> = self
            .waiting
            .borrow()
            .iter()
            .filter(|(_, w)| w.written.elapsed() >= w.every)
            .map(|(n, w)| (n.clone(), w.clone()))
            .collect();
        let mut answered = false;
        for (
            name,
            Waiting {
                lock,
                object,
                mut waiter,
                every,
                ..
            },
        ) in due
        {
            waiter.renew(every);
            let at = Instant::now();
            let data = self.waiter_data(&waiter);
            let merged =
                records::merge(&self.api, self.ns(), (&lock, &object, &name), data, false).await;
            let map = match merged {
                Ok(map) => map,
                // A ConfigMap grown too full to take the key again: wait on
                // unlisted, as a waiter it never took.
                Err(e) if e.kind == ErrorKind::Config => {
                    log::verbose(format_args!("waiting for lock {lock} unlisted: {e}"));
                    self.waiting.borrow_mut().remove(&name);
                    answered = true;
                    continue;
                }
                Err(e) => return Err(e),
            };
            answered = true;
            // Unless left meanwhile.
            if let Some(w) = self.waiting.borrow_mut().get_mut(&name) {
                w.waiter = waiter;
                w.written = at;
            }
            self.written(&name, map.as_ref(), &lock);
        }
        Ok(answered)
    }

    /// A renewal that wrote nothing must still be answered, or a session
    /// that only waits would count as renewed while the API server is out
    /// of reach: one read of a Lease of this session's name, from the API
    /// server's cache (`resourceVersion=0`), found or not.
    async fn answers(&self) -> Result<(), StoreError> {
        let name = lease::record_name("elect", &self.id);
        let path = format!("{}?resourceVersion=0", lease::path(self.ns(), &name));
        let reply = self.api.request("GET", &path, None).await?;
        match reply.status {
            200 | 404 => Ok(()),
            _ => Err(self.api.refusal("get", &name, &reply)),
        }
    }

    /// Let go of the Lease `name`, held as `lease`, naming the waiter to
    /// take it next.
    async fn let_go(&self, name: &str, lease: Lease) -> Result<(), StoreError> {
        let lock = lease.lock().to_string();
        let next = self.next_of(name, &lock).await;
        let let_go = |l: &mut Lease| l.let_go_to(next.as_deref());
        self.write_ours(name, lease, &let_go).await.map(drop)
    }

    /// The waiter of lock `lock` (its object `object`) to take it next:
    /// the one whose record is the oldest by its `since` among those
    /// renewed within half their lifetime (each is renewed within a
    /// quarter, so a waiter that died is passed over within two of its
    /// renewal periods). Read from the API server's cache: a name a moment
    /// old costs at most [`NAMED_FIRST`]. The order is by the waiters'
    /// wall clocks, so a skewed one makes it unfair, and it never decides
    /// who holds the lock. `None` when nobody waits or the read is not
    /// answered: then every waiter may take it at once.
    async fn next_of(&self, object: &str, lock: &str) -> Option<String> {
        let name = records::name(object);
        let path = format!("{}?resourceVersion=0", records::path(self.ns(), &name));
        let map = match self.api.request("GET", &path, None).await {
            Ok(reply) if reply.status == 200 => reply.body,
            Ok(reply) if reply.status == 404 => return None,
            Ok(reply) => {
                let e = self
                    .api
                    .refusal_of(super::api::CONFIGMAPS, "get", &name, &reply);
                log::verbose(format_args!("naming the next holder of lock {lock}: {e}"));
                return None;
            }
            Err(e) => {
                log::verbose(format_args!("naming the next holder of lock {lock}: {e}"));
                return None;
            }
        };
        records::waiters(&map, lock)
            .filter(|(_, w)| w.identity != self.identity)
            .filter(|(_, w)| w.left_by_wall_clock() > Duration::from_secs(w.seconds) / 2)
            .min_by_key(|(key, w)| (w.since(), key.to_string()))
            .map(|(_, w)| w.identity)
    }
}

pub struct KubeSession {
    pub shared: Rc<Shared>,
    granted_at: Instant,
}

impl KubeSession {
    pub fn new(api: Rc<Api>, mark: Mark, ttl: Duration) -> KubeSession {
        // Whole seconds, at least what was asked; elect's own deadline
        // counts from the smaller of the two.
        let seconds = (ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0)).max(1);
        let id = session_id();
        KubeSession {
            shared: Rc::new(Shared {
                api,
                identity: identity(&id),
                id,
                seconds,
                held: RefCell::default(),
                waiting: RefCell::default(),
                asked: RefCell::default(),
                news: Notify::new(),
                mark,
            }),
            granted_at: Instant::now(),
        }
    }
}

impl Session for KubeSession {
    fn id(&self) -> String {
        self.shared.id.clone()
    }

    fn ttl(&self) -> Option<Duration> {
        Some(Duration::from_secs(self.shared.seconds))
    }

    fn granted_at(&self) -> Instant {
        self.granted_at
    }

    fn renewer(&self) -> Box<dyn Renewer> {
        Box::new(KubeRenewer {
            shared: self.shared.clone(),
        })
    }

    fn join(
        &self,
        lock: String,
        record: HolderRecord,
    ) -> Boxed<'_, Result<Box<dyn Lock + '_>, StoreError>> {
        Box::pin(async move {
            let lock = KubeLock {
                shared: self.shared.clone(),
                name: lease::object_name(&lock),
                record: record.acquired_now().to_json(),
                lock,
                observed: RefCell::new(Observed::new()),
                first: RefCell::new(None),
            };
            // The first look (and take, if the Lease is free) is the join:
            // bounded as every call until queued is, and retried by the caller.
            let first = lock.attempt(None).await?;
            *lock.first.borrow_mut() = Some(first);
            let lock: Box<dyn Lock + '_> = Box::new(lock);
            Ok(lock)
        })
    }

    fn release(&self) -> Boxed<'_, Result<(), StoreError>> {
        Box::pin(async move {
            // Before: no renewal may count them lost once they are let go.
            let held = std::mem::take(&mut *self.shared.held.borrow_mut());
            let waiting = std::mem::take(&mut *self.shared.waiting.borrow_mut());
            let deletes = waiting
                .iter()
                .map(|(name, w)| self.shared.remove_waiter(name, w));
            let lets_go = async {
                for (name, lease) in held {
                    self.shared.let_go(&name, lease).await?;
                }
                Ok::<(), StoreError>(())
            };
            let (let_go, _) = tokio::join!(lets_go, in_turn(deletes));
            let_go
        })
    }
}

/// Renews every Lease of the session, one PUT each.
struct KubeRenewer {
    shared: Rc<Shared>,
}

impl Renewer for KubeRenewer {
    fn renew(&mut self) -> Boxed<'_, Result<Renewal, StoreError>> {
        Box::pin(async move {
            let shared = &self.shared;
            let held: Vec<(String, Lease)> = shared
                .held
                .borrow()
                .iter()
                .map(|(n, l)| (n.clone(), l.clone()))
                .collect();
            // A held Lease written is the renewal's answer; without one, a
            // waiter record's write is, or else a read.
            let wrote = !held.is_empty();
            for (name, lease) in held {
                let written = shared.renew_one(&name, lease).await?;
                // Let go meanwhile: not ours to judge.
                if !shared.held.borrow().contains_key(&name) {
                    continue;
                }
                match written {
                    Some(lease) => {
                        if let Some(why) = shared.asks(&lease) {
                            shared.asked.borrow_mut().insert(name.clone(), why);
                            shared.news.notify_waiters();
                        }
                        shared.keep(&name, lease);
                    }
                    None => {
                        return Ok(Renewal::Gone(format!(
                            "the Lease {name} was taken over or deleted"
                        )));
                    }
                }
            }
            match shared.renew_waiting().await {
                Ok(true) => {}
                Ok(false) if !wrote => shared.answers().await?,
                Ok(false) => {}
                Err(e) if wrote => log::verbose(format_args!("renewing the waiter records: {e}")),
                Err(e) => return Err(e),
            }
            Ok(Renewal::Alive(Duration::from_secs(shared.seconds)))
        })
    }

    fn reset(&mut self) {
        self.shared.api.reset();
    }
}

/// How the API server's counter is named in messages.
const VERSION: &str = "the API server's resource version";

/// How soon a watch the API server refused is asked for again.
const WATCH_REFUSED_AGAIN: Duration = Duration::from_millis(500);
/// How soon a watch the API server ended (its timeout) or that broke is
/// opened again.
const WATCH_ENDED_AGAIN: Duration = Duration::from_millis(50);

/// How to restore the API server's etcd without going back.
const BUMP: &str = "restore its etcd with `etcdutl snapshot restore --bump-revision 1000000000 \
     --mark-compacted`, as Kubernetes' own restore guide asks, to keep tokens rising";

/// A contender for one Lease.
struct KubeLock {
    shared: Rc<Shared>,
    lock: String,
    /// The Lease's object name.
    name: String,
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
    fn ns(&self) -> &str {
        self.shared.ns()
    }

    fn api(&self) -> &Api {
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
            Some(Some(lease)) => super::api::Reply {
                status: 200,
                body: lease.0,
            },
            Some(None) => super::api::Reply {
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
        let mut watch: Option<super::api::Watch> = None;
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
                Err(e) if e.kind == ErrorKind::Unavailable => {
                    log::verbose(format_args!("could not try for lock {}: {e}", self.lock));
                    self.api().reset();
                    watch = None;
                    let wake = Instant::now() + backoff.pause();
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
                    match e.kind {
                        ErrorKind::Unavailable => entered = false,
                        _ => return Err(e),
                    }
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
                        let nap = Instant::now() + WATCH_REFUSED_AGAIN;
                        sleep_until(wake.map_or(nap, |w| w.min(nap))).await;
                        continue;
                    }
                }
            }
            let sleep = async {
                match wake {
                    Some(at) => sleep_until(at + Duration::from_millis(1)).await,
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

    /// While we hold the Lease: a break request or its end, as the watch
    /// of every change of it tells it or a renewal finds it.
    async fn watch_ours(&self) -> Loss {
        let asked = async {
            loop {
                let news = self.shared.news.notified();
                if let Some(why) = self.shared.asked.borrow().get(&self.name) {
                    return Loss::Asked(why.clone());
                }
                news.await;
            }
        };
        let watched = async {
            let held = self
                .shared
                .held
                .borrow()
                .get(&self.name)
                .map(|l| l.version().to_string());
            let Some(mut version) = held else {
                return std::future::pending().await;
            };
            loop {
                let path = lease::watch(self.ns(), &self.name, &version);
                let mut watch = match self.api().watch(&path).await {
                    Ok(watch) => watch,
                    Err(e) => {
                        log::verbose(format_args!("cannot watch lock {}: {e}", self.lock));
                        tokio::time::sleep(WATCH_REFUSED_AGAIN).await;
                        continue;
                    }
                };
                while let Some(event) = watch.next().await {
                    let seen = match event["type"].as_str().unwrap_or("") {
                        "ADDED" | "MODIFIED" => Some(Lease(event["object"].clone())),
                        "DELETED" => None,
                        // Too old a version: a look, and a watch from it.
                        "ERROR" => {
                            let path = lease::path(self.ns(), &self.name);
                            match self.api().request("GET", &path, None).await {
                                Ok(r) if r.status == 200 => Some(Lease(r.body)),
                                Ok(r) if r.status == 404 => None,
                                Ok(r) => {
                                    let e = self.api().refusal("get", &self.name, &r);
                                    log::verbose(format_args!(
                                        "looking at lock {}: {e}",
                                        self.lock
                                    ));
                                    break;
                                }
                                Err(e) => {
                                    log::verbose(format_args!(
                                        "looking at lock {}: {e}",
                                        self.lock
                                    ));
                                    break;
                                }
                            }
                        }
                        // A bookmark.
                        _ => continue,
                    };
                    match self.judge(seen).await {
                        Ok(seen) => version = seen,
                        Err(loss) => return loss,
                    }
                }
                // Ended by the server (its timeout) or broken: again, soon.
                tokio::time::sleep(WATCH_ENDED_AGAIN).await;
            }
        };
        tokio::select! {
            loss = asked => loss,
            loss = watched => loss,
        }
    }

    /// The Lease we hold as its watch or a look found it (`None`: deleted).
    /// A write of our own (its version the one our write's answer gave) is
    /// let be; anyone else's that deleted it or named another holder ends
    /// the tenure, one that asks us to let go asks, and one that left it
    /// ours with a `leaseDurationSeconds` not ours is written back at once.
    /// `Ok`: the version to watch from.
    async fn judge(&self, seen: Option<Lease>) -> Result<String, Loss> {
        let Some(lease) = seen else {
            return Err(Loss::Gone(format!(
                "the Lease {} was deleted by another writer",
                self.name
            )));
        };
        let version = lease.version().to_string();
        let ours = self
            .shared
            .held
            .borrow()
            .get(&self.name)
            .map(|held| held.version() == version);
        // Let go meanwhile, or our own write: nothing to judge.
        if ours != Some(false) {
            return Ok(version);
        }
        if lease.holder() != self.shared.identity {
            return Err(Loss::Gone(format!(
                "the Lease {} was taken over by {}",
                self.name,
                match lease.holder() {
                    "" => "no one (let go from outside)",
                    other => other,
                }
            )));
        }
        if let Some(why) = self.shared.asks(&lease) {
            return Err(Loss::Asked(why));
        }
        let seconds = lease.0["spec"]["leaseDurationSeconds"].as_u64();
        if seconds == Some(self.shared.seconds) {
            return Ok(version);
        }
        let shown = seconds.map_or_else(|| "none".to_string(), |s| format!("{s} s"));
        match self.shared.renew_one(&self.name, lease).await {
            Ok(Some(written)) => {
                log::warn(format_args!(
                    "another writer set the Lease {}'s leaseDurationSeconds to {shown}: \
                     written back to its holder's {} s",
                    self.name, self.shared.seconds
                ));
                let version = written.version().to_string();
                self.shared.keep(&self.name, written);
                Ok(version)
            }
            Ok(None) => Err(Loss::Gone(format!(
                "the Lease {} was taken over or deleted",
                self.name
            ))),
            // The renewals go on, and find it as it is.
            Err(e) => {
                log::verbose(format_args!(
                    "writing back the Lease {}'s leaseDurationSeconds: {e}",
                    self.name
                ));
                Ok(version)
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

/// The checkpoint kept in `lease`, if any.
pub fn checkpoint_of(lease: &Lease) -> Option<Checkpoint> {
    Checkpoint::from_json(lease.annotation(lease::CHECKPOINT)?.as_bytes())
}

/// The holder `lease` names as elect's [`crate::store::Holder`].
pub fn holder_of(lease: &Lease) -> Option<crate::store::Holder> {
    let identity = lease.holder();
    if !lease.live_by_wall_clock() {
        return None;
    }
    let record = lease
        .annotation(lease::HOLDER)
        .and_then(|r| HolderRecord::from_json(r.as_bytes()));
    let token = lease.holder_token();
    Some(crate::store::Holder {
        key: identity.to_string(),
        token: Token::new(token),
        lease: record.as_ref().and(session_of(identity)).map(String::from),
        record,
        ttl_left: Some(lease.left_by_wall_clock()),
    })
}

/// Run every future of `all`, one after another.
async fn in_turn<F: std::future::Future>(all: impl Iterator<Item = F>) -> Vec<F::Output> {
    let mut out = Vec::new();
    for f in all.collect::<Vec<_>>() {
        out.push(f.await);
    }
    out
}

/// A Lease read back from the list of a namespace.
pub fn leases_of(body: &Value) -> Vec<Lease> {
    body["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|item| Lease(item.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_session_has_an_identity_of_its_own() {
        let (a, b) = (session_id(), session_id());
        assert_ne!(a, b);
        let id = identity(&a);
        assert_eq!(session_of(&id), Some(a.as_str()));
        assert_eq!(session_of("client-go-1"), None);
    }
}
