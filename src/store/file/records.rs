//! Where the file store keeps the records beside a lock's file (who holds
//! it, its checkpoint, its number of shards, a shard's last holder, its
//! tenures, the others), and how it writes them; what they mean is
//! [`crate::store::records`]'.
//!
//! Each is a file `STEM.SUFFIX` beside `STEM.lock`, replaced whole by a
//! rename; a write fenced by a holder is made under the token counter's
//! flock, which every new token takes too, so that the check of the fence
//! and the rename are one step.

use std::io::{ErrorKind as IoKind, Write};

use serde::{Deserialize, Serialize};

use super::dir::{Dir, read_nofollow, stem};
use crate::store::Token;
use crate::store::{Checkpoint, Fence, HISTORY, HolderRecord, Put, Record, StoreError, Versioned};

/// What the holder record file says.
#[derive(Serialize, Deserialize)]
pub(super) struct FileHolder {
    #[serde(flatten)]
    pub(super) record: HolderRecord,
    pub(super) token: u64,
}

impl Dir {
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
            Err(e) => Err(StoreError::config_io(
                &e,
                format!("checkpoint {}: {e}", path.display()),
            )),
        }
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
            Err(e) => Err(StoreError::config_io(
                &e,
                format!("{}: {e}", path.display()),
            )),
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
        // The history is an account, not a promise: a crash may cost its
        // last entry, never a record that work was done.
        let durable = !matches!(record, Record::Tenure(_));
        if let Fence::Version(None) = fence {
            return self.create_record(&stem, &suffix, value, durable);
        }
        let Some((_counter, last)) = self.locked_counter(&stem)? else {
            return Ok(Put::Stale(format!("lock {lock} never had a holder")));
        };
        match fence {
            Fence::Version(None) => {}
            Fence::Holder { key, token } => {
                if key != self.path(&stem, ".lock").display().to_string() {
                    return Ok(Put::Stale(format!("{key} is not the lock file of {lock}")));
                }
                if Token::new(last) != token {
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
        self.replace(&stem, &suffix, value.as_bytes(), durable)
            .map_err(|e| {
                StoreError::config_io(&e, format!("{}: {e}", self.path(&stem, &suffix).display()))
            })?;
        Ok(Put::Stored)
    }

    /// Write a record that must not exist yet (a lock's first shard
    /// count, before it ever had a holder): aside, then linked into place,
    /// so that of two writers one wins and nobody reads half a file.
    fn create_record(
        &self,
        stem: &str,
        suffix: &str,
        value: &str,
        durable: bool,
    ) -> Result<Put, StoreError> {
        let path = self.path(stem, suffix);
        let fail =
            |e: std::io::Error| StoreError::config_io(&e, format!("{}: {e}", path.display()));
        let tmp = self.path(stem, &format!("{suffix}.{}.tmp", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        let mut file = self.create_new(&tmp).map_err(fail)?;
        let written = file
            .write_all(value.as_bytes())
            .and_then(|()| match durable {
                true => file.sync_all(),
                false => Ok(()),
            });
        if let Err(e) = written {
            // A full disk, say: nothing half-written is left behind.
            let _ = std::fs::remove_file(&tmp);
            return Err(fail(e));
        }
        let linked = std::fs::hard_link(&tmp, &path);
        let _ = std::fs::remove_file(&tmp);
        match linked {
            Ok(()) => Ok(Put::Stored),
            Err(e) if e.kind() == IoKind::AlreadyExists => Ok(Put::Stale(format!(
                "{} was written meanwhile",
                path.display()
            ))),
            Err(e) => Err(fail(e)),
        }
    }

    pub(super) fn delete_record(&self, lock: &str, record: Record<'_>) -> Result<(), StoreError> {
        let path = self.path(&stem(lock), &Dir::record_suffix(record));
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != IoKind::NotFound => Err(StoreError::config_io(
                &e,
                format!("{}: {e}", path.display()),
            )),
            _ => Ok(()),
        }
    }

    /// The locks under `prefix` with a history: a `NAME.history%2FID` file
    /// names one (`/` in NAME spelled `%2F` too).
    pub(super) fn recorded(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        let history = HISTORY.replace('/', "%2F");
        let fail =
            |e: std::io::Error| StoreError::config_io(&e, format!("{}: {e}", self.0.display()));
        let mut locks = Vec::new();
        for entry in std::fs::read_dir(&self.0).map_err(fail)? {
            let name = entry.map_err(fail)?.file_name();
            let Some((head, _)) = name.to_str().and_then(|n| n.split_once(&history)) else {
                continue;
            };
            let lock = head.replace("%2F", "/");
            if lock.starts_with(prefix) {
                locks.push(lock);
            }
        }
        locks.sort();
        locks.dedup();
        Ok(locks)
    }

    pub(super) fn tenures(
        &self,
        lock: &str,
        values: bool,
    ) -> Result<Vec<(String, String)>, StoreError> {
        let prefix = format!("{}{}", stem(lock), HISTORY.replace('/', "%2F"));
        let fail =
            |e: std::io::Error| StoreError::config_io(&e, format!("{}: {e}", self.0.display()));
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
