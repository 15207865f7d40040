//! The records kept beside a lock's file: who holds it, its checkpoint,
//! its number of shards, a shard's last holder, its tenures and the other
//! side records.
//!
//! Each is a file `STEM.SUFFIX` beside `STEM.lock`, replaced whole by a
//! rename; a write fenced by a holder is made under the token counter's
//! flock, which every new token takes too, so that the check of the fence
//! and the rename are one step.

use std::io::{ErrorKind as IoKind, Write};

use serde::{Deserialize, Serialize};

use super::dir::{Dir, read_nofollow, stem};
use crate::store::{
    Checkpoint, Fence, HISTORY, HolderRecord, Owner, Put, Record, StoreError, Versioned,
};

/// What the holder record file says.
#[derive(Serialize, Deserialize)]
pub(super) struct FileHolder {
    #[serde(flatten)]
    pub(super) record: HolderRecord,
    pub(super) token: u64,
}

impl Dir {
    /// Whether each of `locks` is held, and who held it last.
    pub(super) fn owners(&self, locks: &[String]) -> Result<Vec<Owner>, StoreError> {
        locks
            .iter()
            .map(|lock| {
                Ok(Owner {
                    held: self.status(lock)?.holder.is_some(),
                    last: read_nofollow(&self.path(&stem(lock), ".last")).ok(),
                })
            })
            .collect()
    }

    /// The number of shards recorded in `stem.shards`; with `count`,
    /// recorded first unless one is: written aside and linked into place,
    /// so that of two first runs one wins and nobody reads half a file.
    pub(super) fn shards(&self, stem: &str, count: Option<u32>) -> Result<Option<u32>, StoreError> {
        let path = self.path(stem, ".shards");
        let fail = |e: std::io::Error| StoreError::config(format!("{}: {e}", path.display()));
        if let Some(n) = count {
            let tmp = self.path(stem, &format!(".shards.{}", std::process::id()));
            let _ = std::fs::remove_file(&tmp);
            let mut file = self.create_new(&tmp).map_err(fail)?;
            file.write_all(format!("{n}\n").as_bytes()).map_err(fail)?;
            file.sync_all().map_err(fail)?;
            let linked = std::fs::hard_link(&tmp, &path);
            let _ = std::fs::remove_file(&tmp);
            match linked {
                Ok(()) => return Ok(Some(n)),
                Err(e) if e.kind() == IoKind::AlreadyExists => {}
                Err(e) => return Err(fail(e)),
            }
        }
        match read_nofollow(&path) {
            Ok(text) => text.trim().parse().map(Some).map_err(|_| {
                StoreError::config(format!(
                    "{} does not hold a number of shards",
                    path.display()
                ))
            }),
            Err(e) if e.kind() == IoKind::NotFound => Ok(None),
            Err(e) => Err(fail(e)),
        }
    }

    /// The checkpoint of `stem`, if any.
    pub(super) fn checkpoint(&self, stem: &str) -> Result<Option<Checkpoint>, StoreError> {
        let path = self.path(stem, ".checkpoint");
        match read_nofollow(&path) {
            Ok(text) => Checkpoint::from_json(text.as_bytes())
                .map(Some)
                .ok_or_else(|| {
                    StoreError::config(format!("checkpoint {} is corrupt", path.display()))
                }),
            Err(e) if e.kind() == IoKind::NotFound => Ok(None),
            Err(e) => Err(StoreError::config(format!(
                "checkpoint {}: {e}",
                path.display()
            ))),
        }
    }

    /// Write the checkpoint of `lock` if no token after the writer's was
    /// handed out: under the counter's own flock, which every new token
    /// takes too, so that the check and the rename are one step.
    pub(super) fn put_checkpoint(
        &self,
        lock: &str,
        key: &str,
        checkpoint: &Checkpoint,
    ) -> Result<Put, StoreError> {
        let stem = stem(lock);
        if key != self.path(&stem, ".lock").display().to_string() {
            return Ok(Put::Stale(format!("{key} is not the lock file of {lock}")));
        }
        let Some((_counter, last)) = self.locked_counter(&stem)? else {
            return Ok(Put::Stale(format!("lock {lock} never had a holder")));
        };
        if last != checkpoint.token {
            return Ok(Put::Stale(format!(
                "a later holder of lock {lock} got token {last}"
            )));
        }
        self.replace(&stem, ".checkpoint", checkpoint.to_json().as_bytes(), true)
            .map_err(|e| {
                StoreError::config(format!(
                    "checkpoint {}: {e}",
                    self.path(&stem, ".checkpoint").display()
                ))
            })?;
        Ok(Put::Stored)
    }

    /// A record's file: beside the lock's, a slot's `/` spelled as in a stem.
    fn record_suffix(record: Record<'_>) -> String {
        record.suffix().replace('/', "%2F")
    }

    pub(super) fn record(
        &self,
        lock: &str,
        record: Record<'_>,
    ) -> Result<Option<Versioned>, StoreError> {
        let path = self.path(&stem(lock), &Dir::record_suffix(record));
        match read_nofollow(&path) {
            Ok(value) => Ok(Some(Versioned {
                version: version_of(value.as_bytes()),
                value,
            })),
            Err(e) if e.kind() == IoKind::NotFound => Ok(None),
            Err(e) => Err(StoreError::config(format!("{}: {e}", path.display()))),
        }
    }

    /// Write a record under the lock's counter flock, so that the check of
    /// `fence` and the rename are one step.
    pub(super) fn put_record(
        &self,
        lock: &str,
        record: Record<'_>,
        value: &str,
        fence: Fence<'_>,
    ) -> Result<Put, StoreError> {
        let stem = stem(lock);
        let suffix = Dir::record_suffix(record);
        let Some((_counter, last)) = self.locked_counter(&stem)? else {
            return Ok(Put::Stale(format!("lock {lock} never had a holder")));
        };
        match fence {
            Fence::Holder { key, token } => {
                if key != self.path(&stem, ".lock").display().to_string() {
                    return Ok(Put::Stale(format!("{key} is not the lock file of {lock}")));
                }
                if last != token {
                    return Ok(Put::Stale(format!(
                        "a later holder of lock {lock} got token {last}"
                    )));
                }
            }
            Fence::Version(version) => {
                let now = self.record(lock, record)?.map(|r| r.version);
                if now != version {
                    return Ok(Put::Stale(format!(
                        "{} changed meanwhile",
                        self.path(&stem, &suffix).display()
                    )));
                }
            }
            Fence::Any => {}
        }
        // The history is an account, not a promise: a crash may cost its
        // last entry, never a record that work was done.
        let durable = !matches!(record, Record::Tenure(_));
        self.replace(&stem, &suffix, value.as_bytes(), durable)
            .map_err(|e| {
                StoreError::config(format!("{}: {e}", self.path(&stem, &suffix).display()))
            })?;
        Ok(Put::Stored)
    }

    pub(super) fn delete_record(&self, lock: &str, record: Record<'_>) -> Result<(), StoreError> {
        let path = self.path(&stem(lock), &Dir::record_suffix(record));
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != IoKind::NotFound => {
                Err(StoreError::config(format!("{}: {e}", path.display())))
            }
            _ => Ok(()),
        }
    }

    pub(super) fn tenures(
        &self,
        lock: &str,
        values: bool,
    ) -> Result<Vec<(String, String)>, StoreError> {
        let prefix = format!("{}{}", stem(lock), HISTORY.replace('/', "%2F"));
        let fail = |e: std::io::Error| StoreError::config(format!("{}: {e}", self.0.display()));
        let mut found = Vec::new();
        for entry in std::fs::read_dir(&self.0).map_err(fail)? {
            let name = entry.map_err(fail)?.file_name();
            let Some(id) = name.to_str().and_then(|n| n.strip_prefix(&prefix)) else {
                continue;
            };
            if id.ends_with(".tmp") {
                continue;
            }
            let value = match values {
                true => match read_nofollow(&self.0.join(&name)) {
                    Ok(value) => value,
                    // Trimmed meanwhile.
                    Err(e) if e.kind() == IoKind::NotFound => continue,
                    Err(e) => return Err(fail(e)),
                },
                false => String::new(),
            };
            found.push((id.to_string(), value));
        }
        Ok(found)
    }
}

/// A record's version: FNV-1a of its bytes (a file has no revision).
fn version_of(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}
