//! Kubernetes: each lock a `coordination.k8s.io/v1` Lease, taken, renewed
//! and let go as client-go's `leaderelection` does, so that elect and a
//! client-go program on one Lease exclude each other; the token is the
//! `resourceVersion` of the write that took it.
//!
//! `config.rs` finds the API server and the credentials (a pod's service
//! account, else a kubeconfig), `api.rs` speaks HTTP to it, `lease.rs` is
//! the Lease object and the names of elect's, `session.rs` the tenure, its
//! renewals and the wait for a Lease; here are status, list, break and the
//! history's records (a Lease each, labelled with its lock's).
//!
//! A lock's checkpoint, shard count, last holder, last success and slots
//! done are annotations of its own Lease, each written by a PUT of the
//! version whose holder was checked; its history is a Lease a tenure.

mod api;
mod config;
mod exec;
mod lease;
mod session;
mod tokens;

use std::cell::RefCell;
use std::fmt;
use std::rc::Rc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::json;

use api::Api;
use config::{Conn, Url};
use lease::Lease;

use crate::log;
use crate::store::kind::{About, Kind, Settings, Target};
use crate::store::{
    Boxed, Breaking, Fence, Holder, LockStatus, Put, Record, Session, Store, StoreError, Versioned,
    probe,
};

pub const KIND: Kind = Kind {
    name: "k8s",
    forms: &["k8s:[NAMESPACE][?context=CONTEXT]"],
    claims: |url| url.to_ascii_lowercase().starts_with("k8s:"),
    parse: |url, settings| Ok(Box::new(KubeTarget::parse(url, settings)?)),
    from_env: || None,
    release: |order, within| {
        let order: Result<ReleaseOrder, _> = serde_json::from_slice(order);
        Box::pin(async move {
            let order =
                order.map_err(|e| StoreError::config(format!("a bad release order: {e}")))?;
            let store = Kube::new(order.conn, within)?;
            store.release_identity(&order.identity).await?;
            Ok(Box::new(store) as Box<dyn Store>)
        })
    },
    about: About {
        title: "Kubernetes",
        help: "k8s:[NAMESPACE][?context=CONTEXT] (a Lease each lock; in a pod, its service account)",
        reference: "`k8s:[NAMESPACE][?context=CONTEXT]`: a Lease each lock (see [Kubernetes](stores/kubernetes.md))",
        schemes: &["k8s:"],
        reads: &[
            (
                "KUBECONFIG",
                "the kubeconfig files for a k8s: store, merged as kubectl merges them (else ~/.kube/config).",
            ),
            (
                "KUBERNETES_SERVICE_HOST, KUBERNETES_SERVICE_PORT",
                "in a pod, the API server of a k8s: store (with the pod's service account token, CA and namespace).",
            ),
        ],
        secrets: &[],
        key: "the Lease's `holderIdentity`, `<host>_<tenure>`",
        lease_id: "the holder's tenure id (16 hex digits, fresh for each `elect run`)",
    },
};

/// What the guard needs to end a session of an elect that died.
#[derive(Serialize, Deserialize)]
struct ReleaseOrder {
    conn: Conn,
    identity: String,
}

/// A `k8s:` URL, resolved.
#[derive(Clone)]
pub struct KubeTarget {
    url: Url,
    conn: Conn,
}

impl fmt::Debug for KubeTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KubeTarget({} at {})", self.url, self.conn.server)
    }
}

impl fmt::Display for KubeTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.url.fmt(f)
    }
}

impl KubeTarget {
    fn parse(url: &str, settings: &Settings) -> Result<KubeTarget, StoreError> {
        settings.refuse_security("k8s")?;
        let url = Url::parse(url)?;
        let conn = config::resolve(&url, &|name| std::env::var(name).ok())?;
        Ok(KubeTarget { url, conn })
    }
}

impl Target for KubeTarget {
    fn shown(&self) -> String {
        self.conn.shown.clone()
    }

    fn release_order(&self, id: &str) -> Option<Vec<u8>> {
        serde_json::to_vec(&ReleaseOrder {
            conn: self.conn.clone(),
            identity: session::identity(id),
        })
        .ok()
    }

    fn open(
        &self,
        _ping_timeout: Duration,
        connect_timeout: Duration,
    ) -> Boxed<'_, Result<Box<dyn Store>, StoreError>> {
        Box::pin(async move {
            let store: Box<dyn Store> = Box::new(Kube::new(self.conn.clone(), connect_timeout)?);
            Ok(store)
        })
    }

    fn contact(&self) -> Option<probe::Contact> {
        let rest = self.conn.server.strip_prefix("https://")?;
        let rest = rest.trim_end_matches('/');
        let address = match rest.rsplit_once(':') {
            Some((_, port)) if port.bytes().all(|b| b.is_ascii_digit()) => rest.to_string(),
            _ => format!("{rest}:443"),
        };
        // Not `tls`: a look in plain HTTP tells a TLS server that answers
        // it as Go's do from any other, which a TLS greeting would not.
        Some(probe::Contact {
            expects: probe::Server::Kubernetes,
            tls: false,
            addresses: vec![address],
        })
    }
}

/// A connected Kubernetes store: the API server, one namespace.
pub struct Kube {
    api: Rc<Api>,
    /// The highest resource version this process has seen of its Leases
    /// ([`crate::store::rewind`]), for every session.
    mark: crate::store::rewind::Mark,
    /// The history records this store made: written over by a PUT. Any
    /// other is created at once, and read and written over only if there.
    made: RefCell<std::collections::BTreeSet<String>>,
}

/// What is not on this store yet, refused by name.
impl Kube {
    fn new(conn: Conn, within: Duration) -> Result<Kube, StoreError> {
        Ok(Kube {
            api: Rc::new(Api::new(conn, within)?),
            mark: crate::store::rewind::Mark::default(),
            made: RefCell::default(),
        })
    }

    fn ns(&self) -> &str {
        &self.api.conn.namespace
    }

    /// The Lease of `lock`, if there is one.
    async fn read(&self, lock: &str) -> Result<Option<Lease>, StoreError> {
        let name = lease::object_name(lock);
        let reply = self
            .api
            .request_patiently("GET", &lease::path(self.ns(), &name), None)
            .await?;
        match reply.status {
            200 => {
                let lease = Lease(reply.body);
                lease.check_of(lock)?;
                Ok(Some(lease))
            }
            404 => Ok(None),
            _ => Err(self.api.refusal("get", &name, &reply)),
        }
    }

    async fn read_status(&self, lock: &str) -> Result<LockStatus, StoreError> {
        let (lease, waiting) = tokio::join!(self.read(lock), self.waiting(lock));
        Ok(LockStatus {
            lock: lock.to_string(),
            holder: lease?.as_ref().and_then(session::holder_of),
            waiting: waiting?,
            ranks: Vec::new(),
        })
    }

    /// How many wait for `lock`, by their records that live.
    async fn waiting(&self, lock: &str) -> Result<usize, StoreError> {
        let selector = lease::waiters_selector(&lease::object_name(lock));
        let found = self.all(Some(&selector)).await?;
        Ok(found
            .iter()
            .filter(|l| l.annotation(lease::LOCK) == Some(lock) && l.live_by_wall_clock())
            .count())
    }

    /// Every Lease of the namespace, with labels `selector` if given.
    async fn all(&self, selector: Option<&str>) -> Result<Vec<Lease>, StoreError> {
        let mut path = lease::leases(self.ns());
        if let Some(selector) = selector {
            path = format!("{path}?labelSelector={selector}");
        }
        let reply = self.api.request_patiently("GET", &path, None).await?;
        match reply.status {
            200 => Ok(session::leases_of(&reply.body)),
            _ => Err(self.api.refusal("list", "leases", &reply)),
        }
    }

    /// End the tenure of an elect that died: let go of every Lease that
    /// names its identity.
    async fn release_identity(&self, identity: &str) -> Result<(), StoreError> {
        for lease in self.all(None).await? {
            if lease.holder() != identity {
                continue;
            }
            let name = lease.name().to_string();
            self.write_while(&name, lease, &|l| l.holder() == identity, &Lease::let_go)
                .await?;
        }
        Ok(())
    }

    /// PUT `change` of the Lease `name` while `still` holds of it, reading
    /// it again on a conflict. `false`: it no longer held.
    async fn write_while(
        &self,
        name: &str,
        mut lease: Lease,
        still: &dyn Fn(&Lease) -> bool,
        change: &dyn Fn(&mut Lease),
    ) -> Result<bool, StoreError> {
        let path = lease::path(self.ns(), name);
        loop {
            if !still(&lease) {
                return Ok(false);
            }
            let mut next = lease.clone();
            next.pin_token();
            change(&mut next);
            let reply = self.api.request("PUT", &path, Some(&next.0)).await?;
            match reply.status {
                200 => return Ok(true),
                404 => return Ok(false),
                409 => {
                    let read = self.api.request("GET", &path, None).await?;
                    match read.status {
                        200 => lease = Lease(read.body),
                        404 => return Ok(false),
                        _ => return Err(self.api.refusal("get", name, &read)),
                    }
                }
                _ => return Err(self.api.refusal("update", name, &reply)),
            }
        }
    }

    /// Set (or with `None` remove) the annotation `key` of `lock`'s Lease
    /// if `fence` holds, by a PUT of the version that was checked: the
    /// check and the write are one step.
    async fn put_annotation(
        &self,
        lock: &str,
        key: &str,
        value: Option<&str>,
        fence: Fence<'_>,
    ) -> Result<Put, StoreError> {
        loop {
            let found = self.read(lock).await?;
            if let Fence::Holder { key: holder, token } = fence {
                let current = found.as_ref().and_then(session::holder_of);
                let ours = current
                    .as_ref()
                    .is_some_and(|h| h.key == holder && (h.token == token || h.token == 0));
                if !ours {
                    return Ok(Put::Stale(match current {
                        Some(h) => format!("lock {lock} is held by {h} now, not by token {token}"),
                        None => format!("lock {lock} is free: token {token} no longer holds it"),
                    }));
                }
            }
            if let Fence::Version(v) = fence {
                let read = match &found {
                    Some(l) if l.annotation(key).is_some() => Some(l.token()?),
                    _ => None,
                };
                if read != v {
                    return Ok(Put::Stale(format!(
                        "{key} of lock {lock} changed meanwhile"
                    )));
                }
            }
            let reply = match (found, value) {
                (None, None) => return Ok(Put::Stored),
                (Some(mut l), _) => {
                    l.pin_token();
                    match value {
                        Some(value) => l.set_annotation(key, value),
                        None => l.remove_annotation(key),
                    }
                    let name = l.name().to_string();
                    self.api
                        .request("PUT", &lease::path(self.ns(), &name), Some(&l.0))
                        .await?
                }
                (None, Some(value)) => {
                    let mut l = Lease::new(&lease::object_name(lock), lock, "", 1, "");
                    l.remove_annotation(lease::HOLDER);
                    l.set_annotation(key, value);
                    self.api
                        .request("POST", &lease::leases(self.ns()), Some(&l.0))
                        .await?
                }
            };
            match reply.status {
                200 | 201 => return Ok(Put::Stored),
                409 => continue,
                413 | 422 => {
                    return Err(StoreError::config(format!(
                        "{}: the Lease of lock {lock} cannot take {key}: {}",
                        self.api.shown(),
                        reply.message()
                    )));
                }
                _ => return Err(self.api.refusal("update", lock, &reply)),
            }
        }
    }

    /// The history record `record` of `lock`: its object and, if it
    /// exists, the object as read.
    async fn read_record(
        &self,
        lock: &str,
        record: Record<'_>,
    ) -> Result<(String, Option<Lease>), StoreError> {
        let name = lease::record_name(&lease::object_name(lock), &record.suffix());
        let reply = self
            .api
            .request("GET", &lease::path(self.ns(), &name), None)
            .await?;
        match reply.status {
            200 => Ok((name, Some(Lease(reply.body)))),
            404 => Ok((name, None)),
            _ => Err(self.api.refusal("get", &name, &reply)),
        }
    }
}

/// A break begun on one holder's tenure.
struct KubeBreaking<'a> {
    store: &'a Kube,
    lock: &'a str,
    identity: String,
    /// How long the holder [`Self::end`] wrote keeps the Lease.
    kept_out: std::cell::Cell<Option<Duration>>,
}

impl Breaking for KubeBreaking<'_> {
    /// Its elect sees the request through its watch, stops the command
    /// within its grace and lets go.
    fn ended(&self) -> Boxed<'_, Result<(), StoreError>> {
        Box::pin(async move {
            loop {
                match self.store.read(self.lock).await {
                    Ok(lease) if lease.as_ref().map(Lease::holder) != Some(&self.identity) => {
                        return Ok(());
                    }
                    Ok(_) => {}
                    Err(e) => log::verbose(format_args!("looking at lock {}: {e}", self.lock)),
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    }

    /// Write a holder that is no one's ([`lease::BROKEN`]). elect's holder
    /// sees its Lease taken over at once, through its watch, so the next in
    /// line may take it a second later. Any other holder (a client-go
    /// program) sees it on its next renewal, but stops leading only once
    /// its renewals have failed for its `RenewDeadline`, which client-go
    /// keeps below its `LeaseDuration`: that is the Lease's duration, so
    /// the holder written keeps it that long, and the next in line takes it
    /// only after seeing it unchanged for it.
    fn end(&self) -> Boxed<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let Some(lease) = self.store.read(self.lock).await? else {
                return Ok(());
            };
            let name = lease.name().to_string();
            let identity = self.identity.clone();
            let written = self
                .store
                .write_while(
                    &name,
                    lease,
                    &|l| l.holder() == identity,
                    &|l: &mut Lease| {
                        let lock = l.lock().to_string();
                        let seconds = match l.held_by_elect() {
                            true => 1,
                            false => l.seconds(),
                        };
                        self.kept_out
                            .set((seconds > 1).then(|| Duration::from_secs(seconds)));
                        l.let_go();
                        l.take(&lock, lease::BROKEN, seconds, "");
                        l.remove_annotation(lease::HOLDER);
                        l.set_label(lease::BREAK, "forced");
                    },
                )
                .await?;
            if !written {
                self.kept_out.set(None);
            }
            Ok(())
        })
    }

    fn keeps_next_out(&self) -> Option<Duration> {
        self.kept_out.get()
    }
}

impl Store for Kube {
    fn open_session(
        &self,
        ttl: Duration,
        _within: Duration,
    ) -> Boxed<'_, Result<Box<dyn Session + '_>, StoreError>> {
        Box::pin(async move {
            let session: Box<dyn Session + '_> = Box::new(session::KubeSession::new(
                self.api.clone(),
                self.mark.clone(),
                ttl,
            ));
            Ok(session)
        })
    }

    fn status<'a>(&'a self, lock: &'a str) -> Boxed<'a, Result<LockStatus, StoreError>> {
        Box::pin(self.read_status(lock))
    }

    fn list<'a>(&'a self, prefix: &'a str) -> Boxed<'a, Result<Vec<LockStatus>, StoreError>> {
        Box::pin(async move {
            let mut found: Vec<LockStatus> = self
                .all(None)
                .await?
                .iter()
                .filter(|l| l.annotation(lease::RECORD).is_none())
                .filter(|l| !l.0["metadata"]["labels"][lease::WAITERS_OF].is_string())
                .filter(|l| l.lock().starts_with(prefix))
                .filter_map(|l| {
                    let holder = session::holder_of(l)?;
                    Some(LockStatus {
                        lock: l.lock().to_string(),
                        holder: Some(holder),
                        waiting: 0,
                        ranks: Vec::new(),
                    })
                })
                .collect();
            found.sort_by(|a, b| a.lock.cmp(&b.lock));
            Ok(found)
        })
    }

    fn begin_break<'a>(
        &'a self,
        lock: &'a str,
        holder: &'a Holder,
        ask: bool,
    ) -> Boxed<'a, Result<Option<Box<dyn Breaking + 'a>>, StoreError>> {
        Box::pin(async move {
            let identity = holder.key.clone();
            let Some(lease) = self.read(lock).await? else {
                return Ok(None);
            };
            if lease.holder() != identity {
                return Ok(None);
            }
            if ask && holder.record.is_some() {
                let request = crate::store::holder::break_request();
                let name = lease.name().to_string();
                let asked = self
                    .write_while(&name, lease, &|l| l.holder() == identity, &|l| {
                        l.ask_to_let_go(&request)
                    })
                    .await?;
                if !asked {
                    return Ok(None);
                }
            }
            let breaking: Box<dyn Breaking + 'a> = Box::new(KubeBreaking {
                store: self,
                lock,
                identity,
                kept_out: std::cell::Cell::new(None),
            });
            Ok(Some(breaking))
        })
    }

    fn lease_ttl<'a>(
        &'a self,
        lock: &'a str,
        _holder: &'a Holder,
    ) -> Boxed<'a, Result<Option<Duration>, StoreError>> {
        Box::pin(async move {
            let lease = self.read(lock).await?;
            Ok(lease.map(|l| Duration::from_secs(l.seconds())))
        })
    }

    fn record<'a>(
        &'a self,
        lock: &'a str,
        record: Record<'a>,
    ) -> Boxed<'a, Result<Option<Versioned>, StoreError>> {
        Box::pin(async move {
            if let Some(key) = lease::annotation_of(record) {
                let found = self.read(lock).await?;
                return Ok(found.and_then(|l| {
                    Some(Versioned {
                        value: l.annotation(&key)?.to_string(),
                        version: l.token().ok()?,
                    })
                }));
            }
            let (_, found) = self.read_record(lock, record).await?;
            Ok(found.and_then(|l| {
                Some(Versioned {
                    value: l.annotation(lease::VALUE)?.to_string(),
                    version: l.token().ok()?,
                })
            }))
        })
    }

    fn put_record<'a>(
        &'a self,
        lock: &'a str,
        record: Record<'a>,
        value: &'a str,
        fence: Fence<'a>,
    ) -> Boxed<'a, Result<Put, StoreError>> {
        Box::pin(async move {
            if let Some(key) = lease::annotation_of(record) {
                return self.put_annotation(lock, &key, Some(value), fence).await;
            }
            let version = match fence {
                Fence::Holder { token, .. } => {
                    return Ok(Put::Stale(format!(
                        "token {token}: a history record is not written fenced by a holder"
                    )));
                }
                Fence::Version(v) => Some(v),
                Fence::Any => None,
            };
            let object = lease::object_name(lock);
            let suffix = record.suffix();
            let new = |name: &str| {
                let mut new = Lease(json!({
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {
                        "name": name,
                        "labels": { lease::RECORDS_OF: lease::records_label(&object) },
                    },
                    "spec": {},
                }));
                new.set_annotation(lease::LOCK, lock);
                new.set_annotation(lease::RECORD, &suffix);
                new.set_annotation(lease::VALUE, value);
                new
            };
            let name = lease::record_name(&object, &suffix);
            // A record is mostly new (a tenure's, ended): one create, no read.
            if version.is_none_or(|v| v.is_none()) && !self.made.borrow().contains(&name) {
                let reply = self
                    .api
                    .request("POST", &lease::leases(self.ns()), Some(&new(&name).0))
                    .await?;
                match reply.status {
                    200 | 201 => {
                        self.made.borrow_mut().insert(name);
                        return Ok(Put::Stored);
                    }
                    409 if version.is_some() => {
                        return Ok(Put::Stale(format!(
                            "the record {suffix} of lock {lock} changed meanwhile"
                        )));
                    }
                    409 => {}
                    _ => return Err(self.api.refusal("write", &name, &reply)),
                }
            }
            loop {
                let (name, found) = self.read_record(lock, record).await?;
                let read = match &found {
                    Some(l) => Some(l.token()?),
                    None => None,
                };
                if version.is_some_and(|v| v != read) {
                    return Ok(Put::Stale(format!(
                        "the record {suffix} of lock {lock} changed meanwhile"
                    )));
                }
                let next = match found.clone() {
                    Some(mut next) => {
                        next.set_annotation(lease::LOCK, lock);
                        next.set_annotation(lease::RECORD, &suffix);
                        next.set_annotation(lease::VALUE, value);
                        next
                    }
                    None => new(&name),
                };
                let reply = match found {
                    Some(_) => {
                        self.api
                            .request("PUT", &lease::path(self.ns(), &name), Some(&next.0))
                            .await?
                    }
                    None => {
                        self.api
                            .request("POST", &lease::leases(self.ns()), Some(&next.0))
                            .await?
                    }
                };
                match reply.status {
                    200 | 201 => {
                        self.made.borrow_mut().insert(name);
                        return Ok(Put::Stored);
                    }
                    409 if version.is_some() => {
                        return Ok(Put::Stale(format!(
                            "the record {suffix} of lock {lock} changed meanwhile"
                        )));
                    }
                    409 => continue,
                    _ => return Err(self.api.refusal("write", &name, &reply)),
                }
            }
        })
    }

    fn delete_record<'a>(
        &'a self,
        lock: &'a str,
        record: Record<'a>,
    ) -> Boxed<'a, Result<(), StoreError>> {
        Box::pin(async move {
            if let Some(key) = lease::annotation_of(record) {
                return self
                    .put_annotation(lock, &key, None, Fence::Any)
                    .await
                    .map(drop);
            }
            let name = lease::record_name(&lease::object_name(lock), &record.suffix());
            let reply = self
                .api
                .request("DELETE", &lease::path(self.ns(), &name), None)
                .await?;
            match reply.status {
                200 | 202 | 404 => Ok(()),
                _ => Err(self.api.refusal("delete", &name, &reply)),
            }
        })
    }

    fn recorded<'a>(&'a self, prefix: &'a str) -> Boxed<'a, Result<Vec<String>, StoreError>> {
        Box::pin(async move {
            let mut locks: Vec<String> = self
                .all(Some(lease::RECORDS_OF))
                .await?
                .iter()
                .filter(|l| {
                    l.annotation(lease::RECORD)
                        .is_some_and(|r| r.starts_with(crate::store::HISTORY))
                })
                .filter_map(|l| l.annotation(lease::LOCK))
                .filter(|lock| lock.starts_with(prefix))
                .map(str::to_string)
                .collect();
            locks.sort();
            locks.dedup();
            Ok(locks)
        })
    }

    fn tenures<'a>(
        &'a self,
        lock: &'a str,
        values: bool,
    ) -> Boxed<'a, Result<Vec<(String, String)>, StoreError>> {
        Box::pin(async move {
            let label = lease::records_label(&lease::object_name(lock));
            let selector = format!("{}%3D{label}", lease::RECORDS_OF);
            let found = self.all(Some(&selector)).await?;
            Ok(found
                .iter()
                .filter(|l| l.annotation(lease::LOCK) == Some(lock))
                .filter_map(|l| {
                    let id = l
                        .annotation(lease::RECORD)?
                        .strip_prefix(crate::store::HISTORY)?;
                    let value = match values {
                        true => l.annotation(lease::VALUE).unwrap_or("").to_string(),
                        false => String::new(),
                    };
                    Some((id.to_string(), value))
                })
                .collect())
        })
    }
}
