//! Looking at locks from outside, and breaking them: what `elect status`,
//! `list`, `check` and `break` ask of a file store.
//!
//! A lock file's flock is the only proof of a holder: the holder record
//! is believed only while the lock is held, and a break can only put a new
//! lock file in place of the old one, which its holder notices.

use std::cell::RefCell;
use std::fs::{File, TryLockError};
use std::io::{ErrorKind as IoKind, Write};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use super::FileStore;
use super::dir::{Dir, open_nofollow, read_nofollow, stem};
use super::lock;
use super::records::FileHolder;
use crate::store::Token;
use crate::store::{Boxed, Breaking, Check, Holder, LockStatus, StoreError, is_lock_or_shard};

/// How a lock file put in place by `elect break` starts: the holder of the
/// file it replaced was asked to let go. Any other replacement or removal
/// ends its lease at once.
pub(super) const BREAK_REQUEST: &str = "elect break";

impl FileStore {
    pub(super) fn read_list(&self, prefix: &str) -> Result<Vec<LockStatus>, StoreError> {
        let dir = self.existing()?;
        let entries = std::fs::read_dir(&dir.0).map_err(|e| {
            StoreError::config_io(&e, format!("cannot list {}: {e}", dir.0.display()))
        })?;
        let mut locks: Vec<String> = entries
            .flatten()
            .filter_map(|e| {
                e.file_name()
                    .to_str()?
                    .strip_suffix(".lock")
                    .map(|s| s.replace("%2F", "/"))
            })
            .filter(|lock| lock.starts_with(prefix) && is_lock_or_shard(lock))
            .collect();
        locks.sort();
        locks.iter().map(|lock| self.dir.status(lock)).collect()
    }

    pub(super) fn read_check(
        &self,
        lock: &str,
        key: &str,
        token: Token,
    ) -> Result<Check, StoreError> {
        let stem = stem(lock);
        let counter = self.existing()?.counter(&stem)?;
        if Token::new(counter) > token {
            return Ok(Check::NotHolder(format!(
                "a later holder of lock {lock} got token {counter}"
            )));
        }
        Ok(match self.dir.status(lock)?.holder {
            None => Check::NotHolder(format!("lock {lock} is free")),
            Some(h) if h.token == token && h.key == key => Check::Holder,
            Some(h) => Check::NotHolder(format!("the lock is held by {h}")),
        })
    }

    /// Put a new lock file, locked by us, in place of the old one, with
    /// the request to let go in it: a file lock cannot be taken from its
    /// holder. The holder's next look at its lock file (every second) finds
    /// the replacement and stops its command; newcomers queue on the new
    /// file behind us. `None` if `holder` no longer holds the lock.
    pub(super) fn replace_lock_file(
        &self,
        lock: &str,
        holder: &Holder,
    ) -> Result<Option<FileBreaking>, StoreError> {
        let dir = self.existing()?;
        if dir
            .status(lock)?
            .holder
            .is_none_or(|h| h.token != holder.token)
        {
            return Ok(None);
        }
        let stem = stem(lock);
        let path = dir.path(&stem, ".lock");
        let fail = |e: std::io::Error| {
            StoreError::config_io(&e, format!("cannot break {}: {e}", path.display()))
        };
        let old = open_nofollow(&path).map_err(fail)?;
        let fresh = dir.path(&stem, ".lock.new");
        let _ = std::fs::remove_file(&fresh);
        let new = dir.create_new(&fresh).map_err(fail)?;
        match new.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(fail(std::io::Error::other("someone else is breaking it")));
            }
            Err(TryLockError::Error(e)) => return Err(fail(e)),
        }
        let request = format!(
            "{BREAK_REQUEST} (pid {}) at {}\n",
            std::process::id(),
            humantime::format_rfc3339_seconds(std::time::SystemTime::now())
        );
        (&new).write_all(request.as_bytes()).map_err(fail)?;
        std::fs::rename(&fresh, &path).map_err(fail)?;
        Ok(Some(FileBreaking {
            old,
            new: RefCell::new(Some(new)),
            holder_record: dir.path(&stem, ".holder"),
            shown: path.display().to_string(),
        }))
    }
}

/// A break begun: the old lock file, and the new one we hold in its place
/// until the old holder is gone or its tenure is ended.
pub(super) struct FileBreaking {
    old: File,
    new: RefCell<Option<File>>,
    holder_record: PathBuf,
    shown: String,
}

impl Breaking for FileBreaking {
    /// Once we hold the old file's lock too, nobody runs under it any more.
    /// Waiters on the old file may get it before us, find it replaced and
    /// move on to the new one.
    fn ended(&self) -> Boxed<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let fail = |e: std::io::Error| {
                StoreError::config_io(&e, format!("cannot break {}: {e}", self.shown))
            };
            let old = self.old.try_clone().map_err(fail)?;
            lock::lock_blocking(old).await.map_err(fail)?;
            let _ = std::fs::remove_file(&self.holder_record);
            self.new.borrow_mut().take();
            Ok(())
        })
    }

    /// Let the next in line have the new file, while the old holder may
    /// still run under the old one until its elect notices.
    fn end(&self) -> Boxed<'_, Result<(), StoreError>> {
        self.new.borrow_mut().take();
        Box::pin(async { Ok(()) })
    }
}

impl Dir {
    /// Held or free, by trying the lock; the record says by whom.
    pub(super) fn status(&self, lock: &str) -> Result<LockStatus, StoreError> {
        let stem = stem(lock);
        let path = self.path(&stem, ".lock");
        let free = LockStatus {
            lock: lock.to_string(),
            holder: None,
            waiting: 0,
            ranks: Vec::new(),
        };
        let probe = match open_nofollow(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == IoKind::NotFound => return Ok(free),
            Err(e) => {
                return Err(StoreError::config_io(
                    &e,
                    format!("lock file {}: {e}", path.display()),
                ));
            }
        };
        let waiting = probe
            .metadata()
            .map_or(0, |m| blocked_waiters(m.dev(), m.ino()));
        // The record alone proves nothing: a crashed holder leaves it behind.
        if probe.try_lock_shared().is_ok() {
            return Ok(LockStatus { waiting, ..free });
        }
        let record = read_nofollow(&self.path(&stem, ".holder"))
            .ok()
            .and_then(|text| serde_json::from_str::<FileHolder>(&text).ok());
        let token = match &record {
            Some(r) => r.token,
            None => self.counter(&stem)?,
        };
        Ok(LockStatus {
            lock: lock.to_string(),
            holder: Some(Holder {
                key: path.display().to_string(),
                token: Token::new(token),
                lease: record.as_ref().map(|r| r.record.pid.to_string()),
                record: record.map(|r| r.record),
                ttl_left: None,
            }),
            waiting,
            ranks: Vec::new(),
        })
    }
}

/// Processes blocked in flock(2) on the file `dev`/`ino`, from /proc/locks.
fn blocked_waiters(dev: u64, ino: u64) -> usize {
    let id = format!("{:02x}:{:02x}:{ino}", libc::major(dev), libc::minor(dev));
    std::fs::read_to_string("/proc/locks").map_or(0, |locks| {
        locks
            .lines()
            .filter(|line| {
                line.contains(" -> ") && line.split_whitespace().any(|field| field == id)
            })
            .count()
    })
}
