//! The single-host store `file:`: exclusion by an open-file-description
//! lock, fencing tokens from a durable counter.
//!
//! For each lock NAME the directory holds three files:
//!
//! - `NAME.lock`, locked with flock(2). The lock belongs to the open file
//!   description, so it is shared by elect and its guard and ends when both
//!   have closed it: if elect is killed, the lock is held until the guard
//!   has killed the command's group. (Classic fcntl locks would be dropped
//!   when any descriptor of the file is closed anywhere in the process.) The
//!   file is never unlinked or replaced: a new inode would be a second lock.
//! - `NAME.token`, the last token handed out, written in place under the
//!   lock and synced BEFORE the command sees the token, so tokens never
//!   repeat, also across crashes and reboots ([`counter`]).
//! - `NAME.holder`, who holds the lock (JSON). A crashed holder's record
//!   stays behind; it is believed only while the lock is actually held.
//!
//! A `/` in a lock name becomes `%2F` in the file names. The lock never
//! expires by time; it is lost only if someone removes or replaces the lock
//! file or its directory, which the holder looks for every second. elect
//! keeps a deadline of `--ttl` all the same (its renewals are its own, and
//! answered at once), so that the guard stops the command of an elect that
//! stopped answering, as on every store.
//!
//! [`target`] says where the directory is, [`dir`] does every file
//! operation in it, [`lock`] holds one lock file under a session,
//! [`counter`] hands out the tokens, [`records`] keeps what lives beside a
//! lock's file, and [`inspect`] looks from outside; the [`Store`] impl here
//! only delegates.

mod counter;
mod dir;
mod inspect;
mod lock;
mod records;
mod target;

use std::path::Path;
use std::time::Duration;

use super::{
    Boxed, Breaking, Check, Fence, Holder, LockStatus, Put, Record, Session, Store, StoreError,
    Versioned,
};
use crate::clock::Instant;
use crate::store::Token;
use dir::Dir;
pub use dir::check_name;
#[cfg(test)]
pub use dir::stem;
use lock::FileSession;
pub use target::KIND;

/// The lock files in one directory of this host.
pub struct FileStore {
    dir: Dir,
    network_fs_ok: bool,
}

impl FileStore {
    /// The store in `dir`, checked if it exists. Only a session creates a
    /// missing directory: `status` or `list` on a mistyped path must not.
    pub fn open(dir: &Path, network_fs_ok: bool) -> Result<Self, StoreError> {
        let store = FileStore {
            dir: Dir(dir.to_path_buf()),
            network_fs_ok,
        };
        if dir.exists() {
            store.dir.check(network_fs_ok)?;
        }
        Ok(store)
    }

    /// The directory must exist to be read: say so rather than report
    /// every lock free.
    fn existing(&self) -> Result<&Dir, StoreError> {
        match self.dir.0.exists() {
            true => Ok(&self.dir),
            false => Err(StoreError::config(format!(
                "the store directory {} does not exist (elect run creates it); check --store",
                self.dir.0.display()
            ))),
        }
    }
}

impl Store for FileStore {
    fn open_session(
        &self,
        ttl: Duration,
        _within: Duration,
    ) -> Boxed<'_, Result<Box<dyn Session + '_>, StoreError>> {
        let created = self.dir.create(self.network_fs_ok);
        let session: Box<dyn Session> = Box::new(FileSession {
            dir: self.dir.clone(),
            ttl,
            granted_at: Instant::now(),
        });
        Box::pin(async move { created.map(|()| session) })
    }

    fn status<'a>(&'a self, lock: &'a str) -> Boxed<'a, Result<LockStatus, StoreError>> {
        Box::pin(async move { self.existing()?.status(lock) })
    }

    fn list<'a>(&'a self, prefix: &'a str) -> Boxed<'a, Result<Vec<LockStatus>, StoreError>> {
        Box::pin(async move { self.read_list(prefix) })
    }

    fn check<'a>(
        &'a self,
        lock: &'a str,
        key: &'a str,
        token: Token,
    ) -> Boxed<'a, Result<Check, StoreError>> {
        Box::pin(async move { self.read_check(lock, key, token) })
    }

    fn begin_break<'a>(
        &'a self,
        lock: &'a str,
        holder: &'a Holder,
        _ask: bool,
    ) -> Boxed<'a, Result<Option<Box<dyn Breaking + 'a>>, StoreError>> {
        let begun = self.replace_lock_file(lock, holder);
        Box::pin(async move { Ok(begun?.map(|b| Box::new(b) as Box<dyn Breaking + 'a>)) })
    }

    /// Only elect's own `--ttl`, recorded by the holder: a file lock does
    /// not expire.
    fn lease_ttl<'a>(
        &'a self,
        _lock: &'a str,
        _holder: &'a Holder,
    ) -> Boxed<'a, Result<Option<Duration>, StoreError>> {
        Box::pin(async { Ok(None) })
    }

    fn record<'a>(
        &'a self,
        lock: &'a str,
        record: Record<'a>,
    ) -> Boxed<'a, Result<Option<Versioned>, StoreError>> {
        Box::pin(async move { self.existing()?.record(lock, record) })
    }

    fn put_record<'a>(
        &'a self,
        lock: &'a str,
        record: Record<'a>,
        value: &'a str,
        fence: Fence<'a>,
    ) -> Boxed<'a, Result<Put, StoreError>> {
        Box::pin(async move {
            // A record that must be new may be the directory's first (a
            // lock's shard count, recorded before any holder).
            let dir = match (self.existing(), fence) {
                (Err(_), Fence::Version(None)) => {
                    self.dir.create(self.network_fs_ok)?;
                    &self.dir
                }
                (dir, _) => dir?,
            };
            dir.put_record(lock, record, value, fence)
        })
    }

    fn delete_record<'a>(
        &'a self,
        lock: &'a str,
        record: Record<'a>,
    ) -> Boxed<'a, Result<(), StoreError>> {
        Box::pin(async move { self.existing()?.delete_record(lock, record) })
    }

    fn recorded<'a>(&'a self, prefix: &'a str) -> Boxed<'a, Result<Vec<String>, StoreError>> {
        Box::pin(async move { self.existing()?.recorded(prefix) })
    }

    fn tenures<'a>(
        &'a self,
        lock: &'a str,
        values: bool,
    ) -> Boxed<'a, Result<Vec<(String, String)>, StoreError>> {
        Box::pin(async move { self.existing()?.tenures(lock, values) })
    }
}
