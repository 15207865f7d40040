//! A waiter's record: a key of its own in the lock's records, written on
//! entering the queue, renewed while it waits, removed on leaving; and the
//! release's choice of the oldest live one to take the Lease next.

use std::time::Duration;

use serde_json::{Map, Value, json};

use super::Shared;
use crate::clock::Instant;
use crate::log;
use crate::store::k8s::api;
use crate::store::k8s::records::{self, Waiter};
use crate::store::{ErrorKind, StoreError};

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

impl Shared {
    /// Record that we wait for `lock`, whose Lease is `object`: a key of
    /// our own in its records, renewed while we wait, so that the waiting
    /// are seen in the store and a release can name the oldest to take the
    /// Lease next (its `renewed` tells a live one from one whose elect
    /// died: shown, and the order of a wake-up, never who holds it). It
    /// only has to show a live waiter: it is renewed once a TTL, or less
    /// often when many wait ([`records::renew_every`]), not with every
    /// renewal. A ConfigMap too full to take it leaves us waiting unlisted.
    pub(super) async fn enter(&self, lock: &str, object: &str) -> Result<(), StoreError> {
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
    pub(super) async fn leave_queue(&self, object: &str) {
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
    pub(super) async fn remove_waiter(
        &self,
        name: &str,
        waiting: &Waiting,
    ) -> Result<(), StoreError> {
        let patch = json!({ "data": { records::waiter_key(&self.id): null } });
        let path = records::path(self.ns(), name);
        let reply = self
            .api
            .request_patiently("PATCH", &path, Some(&patch))
            .await?;
        match reply.status {
            200 | 404 => Ok(()),
            _ => Err(self.api.refusal_of(
                api::CONFIGMAPS,
                "patch",
                &format!("{name} (lock {})", waiting.lock),
                &reply,
            )),
        }
    }

    /// Renew those of our waiter records due; one whose ConfigMap is gone
    /// is let be. `Ok(true)`: the API server answered a write.
    pub(super) async fn renew_waiting(&self) -> Result<bool, StoreError> {
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

    /// The waiter of lock `lock` (its object `object`) to take it next:
    /// the one whose record is the oldest by its `since` among those
    /// renewed within half their lifetime (each is renewed within a
    /// quarter, so a waiter that died is passed over within two of its
    /// renewal periods). Read from the API server's cache: a name a moment
    /// old costs at most
    /// [`NAMED_FIRST`](crate::store::observed::NAMED_FIRST). The order is
    /// by the waiters' wall clocks, so a skewed one makes it unfair, and it
    /// never decides who holds the lock. `None` when nobody waits or the
    /// read is not answered: then every waiter may take it at once.
    pub(super) async fn next_of(&self, object: &str, lock: &str) -> Option<String> {
        let name = records::name(object);
        let path = format!("{}?resourceVersion=0", records::path(self.ns(), &name));
        let map = match self.api.request("GET", &path, None).await {
            Ok(reply) if reply.status == 200 => reply.body,
            Ok(reply) if reply.status == 404 => return None,
            Ok(reply) => {
                let e = self.api.refusal_of(api::CONFIGMAPS, "get", &name, &reply);
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
