//! A session on Kubernetes: its id, the Leases it holds, and the
//! renewals that keep them, in client-go's `leaderelection` protocol.
//!
//! The holder's identity is the host's name and the session's id, so that
//! no two sessions share one: client-go takes a Lease at once from a holder of
//! its own identity. A renewal is one PUT of the Lease as last written
//! (client-go's optimistic fast path); a 409 is read again, and the Lease
//! is still ours only if it still names our identity. A waiter takes a
//! Lease someone holds only once it has seen it unchanged for its
//! `leaseDurationSeconds` on its own clock
//! ([`Observed`](crate::store::observed::Observed)): `renewTime` is
//! another host's wall clock and is never compared. It waits by a watch on
//! the Lease, so a release wakes it at once. A release names the waiter to
//! take the Lease next ([`lease::NEXT`], the oldest by the waiters'
//! records), and the others let it for
//! [`NAMED_FIRST`](crate::store::observed::NAMED_FIRST): without, every
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
//!
//! Here are the tenure, its renewals and its release; `wait.rs` is a
//! contender's take and its wait on one watch, `waiters.rs` the waiter
//! records and who is named next, `judge.rs` the holder's watch of its
//! Lease.

mod judge;
mod wait;
mod waiters;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::Notify;

use super::api::Api;
use super::lease::{self, Lease};
use crate::clock::Instant;
use crate::log;
use crate::store::Token;
use crate::store::rewind::Mark;
use crate::store::{Boxed, Checkpoint, HolderRecord, Lock, Renewal, Renewer, Session, StoreError};
use waiters::Waiting;

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
            // The first look (and take, if the Lease is free) is the join:
            // bounded as every call until queued is, and retried by the caller.
            let lock = wait::KubeLock::join(self.shared.clone(), lock, &record).await?;
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
