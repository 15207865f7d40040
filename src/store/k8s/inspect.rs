//! Status, list and break on Kubernetes: what a look at a lock's Lease
//! and its waiters' records shows, and the writes that end a tenure from
//! outside it (a break, the release of an elect that died), each a PUT of
//! the version whose holder was checked.

use std::cell::Cell;
use std::time::Duration;

use super::lease::{self, Lease};
use super::{Kube, records, session};
use crate::store::{Boxed, Breaking, Holder, LockStatus, StoreError};

impl Kube {
    pub(super) async fn read_status(&self, lock: &str) -> Result<LockStatus, StoreError> {
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
        let found = self.read_records(lock, false).await?;
        Ok(found.as_ref().map_or(0, |map| {
            records::waiters(map, lock)
                .filter(|(_, w)| !w.left_by_wall_clock().is_zero())
                .count()
        }))
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
    pub(super) async fn release_identity(&self, identity: &str) -> Result<(), StoreError> {
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

    /// The locks held whose names start with `prefix`, by name.
    pub(super) async fn list_held(&self, prefix: &str) -> Result<Vec<LockStatus>, StoreError> {
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
    }

    /// Begin a break of `holder`'s tenure of `lock`, asking it first to
    /// let go with `ask`. `None`: it no longer holds it.
    pub(super) async fn begin<'a>(
        &'a self,
        lock: &'a str,
        holder: &'a Holder,
        ask: bool,
    ) -> Result<Option<Box<dyn Breaking + 'a>>, StoreError> {
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
            kept_out: Cell::new(None),
        });
        Ok(Some(breaking))
    }
}

/// A break begun on one holder's tenure.
struct KubeBreaking<'a> {
    store: &'a Kube,
    lock: &'a str,
    identity: String,
    /// How long the holder [`Self::end`] wrote keeps the Lease.
    kept_out: Cell<Option<Duration>>,
}

impl Breaking for KubeBreaking<'_> {
    fn lock(&self) -> &str {
        self.lock
    }

    /// Its elect sees the request through its watch, stops the command
    /// within its grace and lets go.
    fn held(&self) -> Boxed<'_, Result<bool, StoreError>> {
        Box::pin(async move {
            let lease = self.store.read(self.lock).await?;
            Ok(lease.as_ref().map(Lease::holder) == Some(&self.identity))
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
