//! The holder's watch of its Lease: every change of it, its own writes
//! told by the `resourceVersion` their answers gave, anyone else's judged
//! at once.

use std::time::Duration;

use super::wait::{KubeLock, watch_again};
use crate::log;
use crate::store::Loss;
use crate::store::k8s::lease::{self, Lease};

/// How soon a watch the API server ended (its timeout) or that broke is
/// opened again.
const WATCH_ENDED_AGAIN: Duration = Duration::from_millis(50);

impl KubeLock {
    /// While we hold the Lease: a break request or its end, as the watch
    /// of every change of it tells it or a renewal finds it.
    pub(super) async fn watch_ours(&self) -> Loss {
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
                        tokio::time::sleep(watch_again(&e)).await;
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
