//! Kubernetes: each lock a `coordination.k8s.io/v1` Lease, taken, renewed
//! and let go as client-go's `leaderelection` does, so that elect and a
//! client-go program on one Lease exclude each other; the token is the
//! `resourceVersion` of the write that took it.
//!
//! `config.rs` finds the API server and the credentials (a pod's service
//! account, else a kubeconfig), `api.rs` speaks HTTP to it, `lease.rs` is
//! the Lease object and the names of elect's, `session.rs` the session, its
//! renewals and the wait for a Lease, `records.rs` the ConfigMap of a
//! lock's history and waiters, `inspect.rs` status, list and break; here
//! are the store and the records.
//!
//! A lock's checkpoint, shard count, last holder, last success and slots
//! done are annotations of its own Lease, each written by a PUT of the
//! version whose holder was checked; its history and waiters are a
//! ConfigMap beside it, a key a tenure or a waiter.

mod api;
mod config;
mod exec;
mod greeting;
mod inspect;
mod lease;
mod records;
mod session;
mod tokens;

use std::cell::RefCell;
use std::fmt;
use std::rc::Rc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use api::{Api, CONFIGMAPS};
use config::{Conn, Url};
use lease::Lease;

use crate::store::Token;
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
    greeting: Some(&greeting::GREETING),
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
        key: "the Lease's `holderIdentity`, `<host>_<session id>`",
        lease_id: "the holder's session id (16 hex digits, fresh for each `elect run`)",
        cacert: None,
        user: None,
        store_variable: None,
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
            expects: &greeting::GREETING,
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
    /// The records' ConfigMaps found absent by this store's last look: the
    /// next write to one creates it at once, where it would first patch.
    absent: RefCell<std::collections::BTreeSet<String>>,
}

/// What is not on this store yet, refused by name.
impl Kube {
    fn new(conn: Conn, within: Duration) -> Result<Kube, StoreError> {
        Ok(Kube {
            api: Rc::new(Api::new(conn, within)?),
            mark: crate::store::rewind::Mark::default(),
            absent: RefCell::default(),
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
                let ours = current.as_ref().is_some_and(|h| {
                    h.key == holder && (h.token == token || h.token == Token::new(0))
                });
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

    /// The records' ConfigMap of `lock`, if there is one: read afresh with
    /// `fresh` (for a write that depends on it), else perhaps sharing a
    /// read on its way.
    async fn read_records(&self, lock: &str, fresh: bool) -> Result<Option<Value>, StoreError> {
        let name = records::name(&lease::object_name(lock));
        let path = records::path(self.ns(), &name);
        let reply = match fresh {
            true => self.api.request("GET", &path, None).await?,
            false => self.api.request_patiently("GET", &path, None).await?,
        };
        match reply.status {
            200 => {
                self.absent.borrow_mut().remove(&name);
                match records::lock_of(&reply.body) {
                    Some(other) if other != lock => Err(StoreError::config(format!(
                        "lock {lock} maps to ConfigMap {name}, which is lock {other}'s records: \
                         rename one of them"
                    ))),
                    _ => Ok(Some(reply.body)),
                }
            }
            404 => {
                self.absent.borrow_mut().insert(name);
                Ok(None)
            }
            _ => Err(self.api.refusal_of(CONFIGMAPS, "get", &name, &reply)),
        }
    }

    /// Write tenure `id` of `lock` into its history if `fence` holds: with
    /// none, a merge patch of its one key, which no other write conflicts
    /// with; only where none is, after a read that finds none, a merge patch
    /// carrying the `resourceVersion` read (a 409: read again); only as
    /// read, one carrying that version.
    async fn put_tenure(
        &self,
        lock: &str,
        id: &str,
        value: &str,
        fence: Fence<'_>,
    ) -> Result<Put, StoreError> {
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
        let name = records::name(&object);
        let path = records::path(self.ns(), &name);
        let key = records::key(id);
        let stale = || {
            Ok(Put::Stale(format!(
                "the record {}{id} of lock {lock} changed meanwhile",
                crate::store::HISTORY
            )))
        };
        // A lock's first tenure creates the ConfigMap at once: known absent
        // by the last look, or by one on its way (the trim's), whose answer
        // costs no request.
        if version.is_none() && self.api.reading(&path) {
            self.read_records(lock, false).await?;
        }
        let mut create = version.is_none() && self.absent.borrow().contains(&name);
        loop {
            if create {
                let data = Map::from_iter([(key.clone(), Value::from(value))]);
                if self.create_records(lock, &object, &name, data).await? {
                    return Ok(Put::Stored);
                }
                create = false;
            }
            let precondition = match version {
                None => None,
                Some(Some(v)) => Some(v.to_string()),
                Some(None) => match self.read_records(lock, true).await? {
                    Some(map) if map["data"][&key].is_string() => return stale(),
                    Some(map) => Some(
                        map["metadata"]["resourceVersion"]
                            .as_str()
                            .unwrap_or("")
                            .to_string(),
                    ),
                    None => {
                        create = true;
                        continue;
                    }
                },
            };
            let mut patch = json!({ "data": { &key: value } });
            if let Some(version) = precondition {
                patch["metadata"] = json!({ "resourceVersion": version });
            }
            let reply = self.api.request("PATCH", &path, Some(&patch)).await?;
            match reply.status {
                200 => return Ok(Put::Stored),
                404 | 409 if matches!(version, Some(Some(_))) => return stale(),
                404 => create = true,
                409 => {}
                _ => return Err(self.api.refusal_of(CONFIGMAPS, "patch", &name, &reply)),
            }
        }
    }

    /// Create `lock`'s records `name` with `data`; `false` if they exist.
    async fn create_records(
        &self,
        lock: &str,
        object: &str,
        name: &str,
        data: Map<String, Value>,
    ) -> Result<bool, StoreError> {
        let made = records::create(&self.api, self.ns(), (lock, object, name), &data).await?;
        self.absent.borrow_mut().remove(name);
        Ok(made.is_some())
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

    /// The Lease alone, not the waiters' records beside it.
    fn holder<'a>(&'a self, lock: &'a str) -> Boxed<'a, Result<Option<Holder>, StoreError>> {
        Box::pin(async move { Ok(self.read(lock).await?.as_ref().and_then(session::holder_of)) })
    }

    fn list<'a>(&'a self, prefix: &'a str) -> Boxed<'a, Result<Vec<LockStatus>, StoreError>> {
        Box::pin(self.list_held(prefix))
    }

    fn begin_break<'a>(
        &'a self,
        lock: &'a str,
        holder: &'a Holder,
        ask: bool,
    ) -> Boxed<'a, Result<Option<Box<dyn Breaking + 'a>>, StoreError>> {
        Box::pin(self.begin(lock, holder, ask))
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
            let key = match (record, lease::annotation_of(record)) {
                (_, Some(key)) => key,
                (Record::Tenure(id), None) => {
                    let Some(map) = self.read_records(lock, false).await? else {
                        return Ok(None);
                    };
                    let Some(value) = map["data"][records::key(id)].as_str() else {
                        return Ok(None);
                    };
                    // The ConfigMap's version: a write fenced by it finds
                    // the whole history as read.
                    let version = map["metadata"]["resourceVersion"].as_str().unwrap_or("");
                    return Ok(Some(Versioned {
                        value: value.to_string(),
                        version: lease::parse_version(version)?,
                    }));
                }
                (_, None) => return Ok(None),
            };
            let found = self.read(lock).await?;
            Ok(found.and_then(|l| {
                Some(Versioned {
                    value: l.annotation(&key)?.to_string(),
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
            match (record, lease::annotation_of(record)) {
                (_, Some(key)) => self.put_annotation(lock, &key, Some(value), fence).await,
                (Record::Tenure(id), None) => self.put_tenure(lock, id, value, fence).await,
                (_, None) => Ok(Put::Stale(format!(
                    "lock {lock} has no place for the record {}",
                    record.suffix()
                ))),
            }
        })
    }

    fn delete_record<'a>(
        &'a self,
        lock: &'a str,
        record: Record<'a>,
    ) -> Boxed<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let id = match (record, lease::annotation_of(record)) {
                (_, Some(key)) => {
                    return self
                        .put_annotation(lock, &key, None, Fence::Any)
                        .await
                        .map(drop);
                }
                (Record::Tenure(id), None) => id,
                (_, None) => return Ok(()),
            };
            let name = records::name(&lease::object_name(lock));
            let patch = json!({ "data": { records::key(id): null } });
            let reply = self
                .api
                .request("PATCH", &records::path(self.ns(), &name), Some(&patch))
                .await?;
            match reply.status {
                200 | 404 => Ok(()),
                _ => Err(self.api.refusal_of(CONFIGMAPS, "patch", &name, &reply)),
            }
        })
    }

    fn recorded<'a>(&'a self, prefix: &'a str) -> Boxed<'a, Result<Vec<String>, StoreError>> {
        Box::pin(async move {
            let reply = self
                .api
                .request_patiently("GET", &records::all(self.ns()), None)
                .await?;
            if reply.status != 200 {
                return Err(self
                    .api
                    .refusal_of(CONFIGMAPS, "list", "configmaps", &reply));
            }
            let mut locks: Vec<String> = reply.body["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|map| records::entries(map).next().is_some())
                .filter_map(records::lock_of)
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
            let found = self.read_records(lock, false).await?;
            Ok(found
                .iter()
                .flat_map(records::entries)
                .map(|(id, value)| {
                    let value = match values {
                        true => value.to_string(),
                        false => String::new(),
                    };
                    (id.clone(), value)
                })
                .collect())
        })
    }
}
