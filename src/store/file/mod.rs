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

mod counter;
mod lock;

use std::fmt;
use std::fs::{File, TryLockError};
use std::io::{ErrorKind as IoKind, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::kind::{About, Kind, Target};
use super::{
    Boxed, Check, Checkpoint, Fence, HISTORY, Holder, HolderRecord, LockStatus, Owner, Put, Record,
    Session, Store, StoreError, Versioned,
};
use crate::clock::Instant;
use counter::{Corrupt, Counter};
use lock::FileSession;

/// `file:DIR`, `file:///DIR`, or `file` alone for the per-user default;
/// `?network-fs=ok` accepts a network filesystem.
pub const KIND: Kind = Kind {
    name: "file",
    forms: &["file:DIR"],
    claims: |url| url == "file" || url.starts_with("file:"),
    parse: |url, settings| {
        settings.refuse_security("file:")?;
        let rest = url.strip_prefix("file").unwrap_or_default();
        FileTarget::parse(rest.strip_prefix(':').unwrap_or(rest))
            .map(|t| Box::new(t) as Box<dyn Target>)
            .map_err(|e| StoreError::config(format!("store URL '{url}': {e}")))
    },
    from_env: || None,
    // The lock ends with its descriptors, which the guard closes first:
    // there is nothing to end, only the store to give back.
    release: |order, _within| {
        let target: Result<FileTarget, _> = serde_json::from_slice(order);
        Box::pin(async move {
            let target =
                target.map_err(|e| StoreError::config(format!("a bad release order: {e}")))?;
            let store = FileStore::open(&target.dir, target.network_fs_ok)?;
            Ok(Box::new(store) as Box<dyn Store>)
        })
    },
    about: About {
        title: "file",
        help: "file:DIR for locks on this host only (\"file\" alone: /var/lib/elect for root, else \
               $XDG_STATE_HOME/elect, or ~/.local/state/elect without it)",
        readme: "`file:DIR` (`file` alone: `/var/lib/elect` for root, else `$XDG_STATE_HOME/elect`, or `~/.local/state/elect` without it)",
        schemes: &["file:"],
        reads: &[],
        secrets: &[],
        key: "the lock file",
        lease_id: "the pid (decimal) of the elect that holds the lock",
    },
};

/// A directory on this host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileTarget {
    dir: PathBuf,
    network_fs_ok: bool,
}

impl FileTarget {
    fn parse(rest: &str) -> Result<Self, String> {
        let (path, query) = match rest.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (rest, None),
        };
        let network_fs_ok = match query {
            None => false,
            Some("network-fs=ok") => true,
            Some(other) => {
                return Err(format!(
                    "unknown option '{other}'; the only one is network-fs=ok"
                ));
            }
        };
        let path = match path.strip_prefix("//") {
            Some(abs) if abs.starts_with('/') => abs,
            Some(_) => return Err("expected file:/DIR or file:///DIR".into()),
            None => path,
        };
        if path.chars().any(char::is_control) {
            return Err("the directory name contains control characters".into());
        }
        let dir = match path {
            "" => default_dir()?,
            "~" => home()?,
            _ if path.starts_with("~/") => home()?.join(&path[2..]),
            _ if path.starts_with('~') => {
                return Err("'~user' is not expanded; give the directory in full".into());
            }
            // The command gets ELECT_STORE: it must mean the same place
            // from wherever the command runs.
            _ => std::path::absolute(path).map_err(|e| e.to_string())?,
        };
        Ok(FileTarget { dir, network_fs_ok })
    }
}

impl fmt::Display for FileTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "file:{}", self.dir.display())?;
        if self.network_fs_ok {
            f.write_str("?network-fs=ok")?;
        }
        Ok(())
    }
}

impl Target for FileTarget {
    fn check_lock_name(&self, name: &str) -> Result<(), String> {
        check_name(name)
    }

    fn open(
        &self,
        _ping_timeout: Duration,
        _connect_timeout: Duration,
    ) -> Boxed<'_, Result<Box<dyn Store>, StoreError>> {
        let opened = FileStore::open(&self.dir, self.network_fs_ok);
        Box::pin(async move { opened.map(|store| Box::new(store) as Box<dyn Store>) })
    }

    fn release_order(&self, _id: &str) -> Option<Vec<u8>> {
        serde_json::to_vec(self).ok()
    }
}

/// How a lock file put in place by `elect break` starts: the holder of the
/// file it replaced was asked to let go. Any other replacement or removal
/// ends its lease at once.
const BREAK_REQUEST: &str = "elect break";

/// Longest file name most filesystems allow.
const NAME_MAX: usize = 255;
/// The longest suffix elect adds to a lock's file name.
const LONGEST_SUFFIX: &str = ".holder.tmp";

/// The file-name stem for a lock name. Lock names are checked to contain
/// only `[A-Za-z0-9._/-]` and no `.`/`..` segments, so this cannot escape.
pub fn stem(lock: &str) -> String {
    lock.replace('/', "%2F")
}

/// Store-specific limits on lock names.
pub fn check_name(lock: &str) -> Result<(), String> {
    let len = stem(lock).len() + LONGEST_SUFFIX.len();
    if len > NAME_MAX {
        return Err(format!(
            "the lock name '{lock}' is too long for a file store: its file names would be {len} bytes; the limit is {NAME_MAX}"
        ));
    }
    Ok(())
}

/// The per-user state directory for a bare `--store file`. Not /run or
/// /tmp: the token counters must survive reboots.
pub fn default_dir() -> Result<PathBuf, String> {
    if nix::unistd::geteuid().is_root() {
        return Ok(PathBuf::from("/var/lib/elect"));
    }
    if let Some(state) = std::env::var_os("XDG_STATE_HOME").filter(|s| Path::new(s).is_absolute()) {
        return Ok(PathBuf::from(state).join("elect"));
    }
    match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        Some(home) => Ok(PathBuf::from(home).join(".local/state/elect")),
        None => Err(
            "--store file: neither XDG_STATE_HOME nor HOME is set; give a directory: file:/path"
                .into(),
        ),
    }
}

/// `$HOME`, for `file:~/DIR`.
fn home() -> Result<PathBuf, String> {
    std::env::var_os("HOME")
        .filter(|h| Path::new(h).is_absolute())
        .map(PathBuf::from)
        .ok_or_else(|| "'~' needs HOME set to an absolute path".to_string())
}

/// Filesystems whose locks are leases without fencing, by statfs magic.
pub fn network_filesystem(magic: i64) -> Option<&'static str> {
    Some(match magic {
        0x6969 => "NFS",
        0x517B => "SMB",
        0xFF53_4D42 => "CIFS",
        0xFE53_4D42 => "SMB2",
        0x00C3_6400 => "CephFS",
        0x6573_5546 => "FUSE (sshfs, s3fs and the like)",
        0x5346_414F => "AFS",
        0x0102_1997 => "9P",
        0x0116_1970 => "GFS2",
        0x7461_636F => "OCFS2",
        0x0BD0_0BD0 => "Lustre",
        0x4750_4653 => "GPFS",
        0x564C => "NCP",
        _ => return None,
    })
}

pub struct FileStore {
    dir: Dir,
    network_fs_ok: bool,
}

/// The store directory and the file operations in it.
#[derive(Clone)]
struct Dir(PathBuf);

impl FileStore {
    /// The store in `dir`, checked if it exists. Only a session creates a
    /// missing directory: `status` or `list` on a mistyped path must not.
    pub fn open(dir: &Path, network_fs_ok: bool) -> Result<Self, StoreError> {
        let store = FileStore {
            dir: Dir(dir.to_path_buf()),
            network_fs_ok,
        };
        if dir.exists() {
            store.check_dir()?;
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

    /// Create the directory (0700) if it is missing, and check it.
    fn create_dir(&self) -> Result<(), StoreError> {
        let dir = &self.dir.0;
        if !dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| {
                    StoreError::config(format!(
                        "cannot create the store directory {}: {e}",
                        dir.display()
                    ))
                })?;
        }
        self.check_dir()
    }

    /// Is the directory safe to lock in?
    fn check_dir(&self) -> Result<(), StoreError> {
        let dir = &self.dir.0;
        let shown = dir.display();
        let meta = std::fs::metadata(dir)
            .map_err(|e| StoreError::config(format!("store directory {shown}: {e}")))?;
        if !meta.is_dir() {
            return Err(StoreError::config(format!(
                "store path {shown} is not a directory"
            )));
        }
        if meta.permissions().mode() & 0o002 != 0 {
            return Err(StoreError::config(format!(
                "store directory {shown} is writable by everyone, so anyone could take or fake a lock; \
                 use a directory of your own (mode 0700, or 0770 for a group)"
            )));
        }
        let fs = nix::sys::statfs::statfs(dir)
            .map_err(|e| StoreError::config(format!("store directory {shown}: {e}")))?;
        if let Some(kind) = network_filesystem(fs.filesystem_type().0 as i64)
            && !self.network_fs_ok
        {
            return Err(StoreError::config(format!(
                "store directory {shown} is on {kind}, where file locks are leases without fencing; \
                 use a local directory, or etcd, or add ?network-fs=ok to the URL if you accept that"
            )));
        }
        Ok(())
    }
}

impl Store for FileStore {
    fn open_session(
        &self,
        ttl: Duration,
        _within: Duration,
    ) -> Boxed<'_, Result<Box<dyn Session + '_>, StoreError>> {
        let created = self.create_dir();
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
        token: u64,
    ) -> Boxed<'a, Result<Check, StoreError>> {
        Box::pin(async move { self.read_check(lock, key, token) })
    }

    fn begin_break<'a>(
        &'a self,
        lock: &'a str,
        holder: &'a Holder,
        _ask: bool,
    ) -> Boxed<'a, Result<Option<Box<dyn super::Breaking + 'a>>, StoreError>> {
        let begun = self.replace_lock_file(lock, holder);
        Box::pin(async move { Ok(begun?.map(|b| Box::new(b) as Box<dyn super::Breaking + 'a>)) })
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

    fn checkpoint<'a>(
        &'a self,
        lock: &'a str,
    ) -> Boxed<'a, Result<Option<Checkpoint>, StoreError>> {
        Box::pin(async move { self.existing()?.checkpoint(&stem(lock)) })
    }

    fn shards<'a>(
        &'a self,
        lock: &'a str,
        count: Option<u32>,
    ) -> Boxed<'a, Result<Option<u32>, StoreError>> {
        Box::pin(async move {
            if count.is_some() {
                self.create_dir()?;
            }
            self.existing()?.shards(&stem(lock), count)
        })
    }

    fn owners<'a>(&'a self, locks: &'a [String]) -> Boxed<'a, Result<Vec<Owner>, StoreError>> {
        Box::pin(async move {
            let dir = self.existing()?;
            locks
                .iter()
                .map(|lock| {
                    Ok(Owner {
                        held: dir.status(lock)?.holder.is_some(),
                        last: read_nofollow(&dir.path(&stem(lock), ".last")).ok(),
                    })
                })
                .collect()
        })
    }

    fn put_checkpoint<'a>(
        &'a self,
        lock: &'a str,
        key: &'a str,
        checkpoint: &'a Checkpoint,
    ) -> Boxed<'a, Result<Put, StoreError>> {
        Box::pin(async move { self.existing()?.put_checkpoint(lock, key, checkpoint) })
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
        Box::pin(async move { self.existing()?.put_record(lock, record, value, fence) })
    }

    fn delete_record<'a>(
        &'a self,
        lock: &'a str,
        record: Record<'a>,
    ) -> Boxed<'a, Result<(), StoreError>> {
        Box::pin(async move { self.existing()?.delete_record(lock, record) })
    }

    fn tenures<'a>(
        &'a self,
        lock: &'a str,
        values: bool,
    ) -> Boxed<'a, Result<Vec<(String, String)>, StoreError>> {
        Box::pin(async move { self.existing()?.tenures(lock, values) })
    }
}

impl FileStore {
    fn read_list(&self, prefix: &str) -> Result<Vec<LockStatus>, StoreError> {
        let dir = self.existing()?;
        let entries = std::fs::read_dir(&dir.0)
            .map_err(|e| StoreError::config(format!("cannot list {}: {e}", dir.0.display())))?;
        let mut locks: Vec<String> = entries
            .flatten()
            .filter_map(|e| {
                e.file_name()
                    .to_str()?
                    .strip_suffix(".lock")
                    .map(|s| s.replace("%2F", "/"))
            })
            .filter(|lock| lock.starts_with(prefix) && super::is_lock_or_shard(lock))
            .collect();
        locks.sort();
        locks.iter().map(|lock| self.dir.status(lock)).collect()
    }

    fn read_check(&self, lock: &str, key: &str, token: u64) -> Result<Check, StoreError> {
        let stem = stem(lock);
        let counter = self.existing()?.counter(&stem)?;
        if counter > token {
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
    fn replace_lock_file(
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
        let fail =
            |e: std::io::Error| StoreError::config(format!("cannot break {}: {e}", path.display()));
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
            new: std::cell::RefCell::new(Some(new)),
            holder_record: dir.path(&stem, ".holder"),
            shown: path.display().to_string(),
        }))
    }
}

/// A break begun: the old lock file, and the new one we hold in its place
/// until the old holder is gone or its tenure is ended.
struct FileBreaking {
    old: File,
    new: std::cell::RefCell<Option<File>>,
    holder_record: PathBuf,
    shown: String,
}

impl super::Breaking for FileBreaking {
    /// Once we hold the old file's lock too, nobody runs under it any more.
    /// Waiters on the old file may get it before us, find it replaced and
    /// move on to the new one.
    fn ended(&self) -> Boxed<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let fail =
                |e: std::io::Error| StoreError::config(format!("cannot break {}: {e}", self.shown));
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

/// What the holder record file says.
#[derive(Serialize, Deserialize)]
struct FileHolder {
    #[serde(flatten)]
    record: HolderRecord,
    token: u64,
}

impl Dir {
    fn path(&self, stem: &str, suffix: &str) -> PathBuf {
        self.0.join(format!("{stem}{suffix}"))
    }

    /// Mode for new files: what the directory grants its owner and group,
    /// never more, never to others.
    fn file_mode(&self) -> u32 {
        let dir_mode = std::fs::metadata(&self.0).map_or(0o700, |m| m.permissions().mode());
        (dir_mode & 0o660) | 0o600
    }

    /// A file that must not exist yet (no symlink can stand in for it).
    fn create_new(&self, path: &Path) -> std::io::Result<File> {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(self.file_mode())
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
    }

    fn open_lock(&self, path: &Path) -> std::io::Result<File> {
        let open = |write: bool| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(write)
                .create(write)
                .mode(self.file_mode())
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(path)
        };
        // flock works on a read-only descriptor: enough for a lock file that
        // another user of a group-shared directory created.
        open(true).or_else(|e| {
            if e.kind() == IoKind::PermissionDenied {
                open(false)
            } else {
                Err(e)
            }
        })
    }

    /// Write `content` to `stem+suffix` by a new file and a rename.
    fn replace(
        &self,
        stem: &str,
        suffix: &str,
        content: &[u8],
        durable: bool,
    ) -> std::io::Result<()> {
        let target = self.path(stem, suffix);
        let tmp = self.path(stem, &format!("{suffix}.tmp"));
        match std::fs::remove_file(&tmp) {
            Err(e) if e.kind() != IoKind::NotFound => return Err(e),
            _ => {}
        }
        let mut file = self.create_new(&tmp)?;
        file.write_all(content)?;
        if durable {
            file.sync_all()?;
        }
        std::fs::rename(&tmp, &target)?;
        if durable {
            File::open(&self.0)?.sync_all()?;
        }
        Ok(())
    }

    /// The number of shards recorded in `stem.shards`; with `count`,
    /// recorded first unless one is: written aside and linked into place,
    /// so that of two first runs one wins and nobody reads half a file.
    fn shards(&self, stem: &str, count: Option<u32>) -> Result<Option<u32>, StoreError> {
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
    fn put_checkpoint(
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

    /// The token counter of `stem`, under its flock (which every new token
    /// takes too), and the last token it handed out; `None` if the lock
    /// never had a holder.
    fn locked_counter(&self, stem: &str) -> Result<Option<(File, u64)>, StoreError> {
        let path = self.path(stem, ".token");
        let fail = |e: std::io::Error| {
            StoreError::config(format!("token counter {}: {e}", path.display()))
        };
        let mut counter = loop {
            let file = match open_nofollow(&path) {
                Ok(file) => file,
                Err(e) if e.kind() == IoKind::NotFound => return Ok(None),
                Err(e) => return Err(fail(e)),
            };
            file.lock().map_err(fail)?;
            // Replaced meanwhile (a counter rewritten in the new layout):
            // the lock that counts is the new file's.
            let ours = file.metadata().map_err(fail)?;
            match std::fs::symlink_metadata(&path) {
                Ok(now) if now.ino() == ours.ino() && now.dev() == ours.dev() => break file,
                _ => continue,
            }
        };
        match counter::parse(&counter::read(&mut counter).map_err(fail)?) {
            Ok(Counter::Slots(n) | Counter::Line(n)) => Ok(Some((counter, n))),
            Err(Corrupt(what)) => Err(StoreError::config(format!(
                "token counter {} is corrupt ({what})",
                path.display()
            ))),
        }
    }

    /// A record's file: beside the lock's, a slot's `/` spelled as in a stem.
    fn record_suffix(record: Record<'_>) -> String {
        record.suffix().replace('/', "%2F")
    }

    fn record(&self, lock: &str, record: Record<'_>) -> Result<Option<Versioned>, StoreError> {
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
    fn put_record(
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

    fn delete_record(&self, lock: &str, record: Record<'_>) -> Result<(), StoreError> {
        let path = self.path(&stem(lock), &Dir::record_suffix(record));
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != IoKind::NotFound => {
                Err(StoreError::config(format!("{}: {e}", path.display())))
            }
            _ => Ok(()),
        }
    }

    fn tenures(&self, lock: &str, values: bool) -> Result<Vec<(String, String)>, StoreError> {
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

    /// The next token for `stem`, durable before it is returned, under the
    /// counter's flock (see [`Dir::put_checkpoint`]).
    fn next_token(&self, stem: &str) -> Result<u64, StoreError> {
        let path = self.path(stem, ".token");
        let fail = |e: std::io::Error| {
            StoreError::config(format!("token counter {}: {e}", path.display()))
        };
        let open = || {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&path)
        };
        let mut file = match open() {
            Err(e) if e.kind() == IoKind::NotFound => {
                self.replace(stem, ".token", &counter::fresh(0), true)
                    .map_err(fail)?;
                open().map_err(fail)?
            }
            opened => opened.map_err(fail)?,
        };
        file.lock().map_err(fail)?;
        let last = match counter::parse(&counter::read(&mut file).map_err(fail)?) {
            Ok(Counter::Slots(last)) => last,
            Ok(Counter::Line(last)) => {
                self.replace(stem, ".token", &counter::fresh(last), true)
                    .map_err(fail)?;
                file = open().map_err(fail)?;
                file.lock().map_err(fail)?;
                last
            }
            Err(Corrupt(what)) => {
                return Err(StoreError::config(format!(
                    "token counter {} is corrupt ({what}); refusing to hand out a token that might repeat",
                    path.display()
                )));
            }
        };
        counter::advance(&mut file, last).map_err(fail)
    }
}

impl Dir {
    /// The last token handed out for `stem`, 0 if none.
    fn counter(&self, stem: &str) -> Result<u64, StoreError> {
        let path = self.path(stem, ".token");
        let mut bytes = Vec::new();
        let read = open_nofollow(&path).and_then(|mut f| f.read_to_end(&mut bytes));
        match read {
            Ok(_) => match counter::parse(&bytes) {
                Ok(Counter::Slots(n) | Counter::Line(n)) => Ok(n),
                Err(Corrupt(what)) => Err(StoreError::config(format!(
                    "token counter {} is corrupt ({what})",
                    path.display()
                ))),
            },
            Err(e) if e.kind() == IoKind::NotFound => Ok(0),
            Err(e) => Err(StoreError::config(format!(
                "token counter {}: {e}",
                path.display()
            ))),
        }
    }

    /// Held or free, by trying the lock; the record says by whom.
    fn status(&self, lock: &str) -> Result<LockStatus, StoreError> {
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
                return Err(StoreError::config(format!(
                    "lock file {}: {e}",
                    path.display()
                )));
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
                token,
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

/// Open for reading, never through a symlink planted in the directory.
fn open_nofollow(path: &Path) -> std::io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

fn read_nofollow(path: &Path) -> std::io::Result<String> {
    let mut text = String::new();
    open_nofollow(path)?.read_to_string(&mut text)?;
    Ok(text)
}

/// A record's version: FNV-1a of its bytes (a file has no revision).
fn version_of(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::kind::Settings;

    #[test]
    fn store_urls() {
        let parse = |url: &str| {
            assert!((KIND.claims)(url), "{url}");
            (KIND.parse)(url, &Settings::default()).map(|t| t.to_string())
        };
        assert_eq!(parse("file:/var/x").unwrap(), "file:/var/x");
        assert_eq!(parse("file:///var/x").unwrap(), "file:/var/x");
        assert_eq!(
            parse("file:/mnt/n?network-fs=ok").unwrap(),
            "file:/mnt/n?network-fs=ok"
        );
        assert!(parse("file:/x?nfs=yes").is_err());
        assert!(parse("file://host/x").is_err());
        assert!(parse("file").unwrap().starts_with("file:/"));
        assert!(!(KIND.claims)("etcd://a:1") && !(KIND.claims)("files:/x"));
    }

    #[test]
    fn lock_names_map_to_file_names_that_stay_in_the_directory() {
        assert_eq!(stem("nightly"), "nightly");
        assert_eq!(stem("jobs/nightly"), "jobs%2Fnightly");
        assert_eq!(stem("/locks/x"), "%2Flocks%2Fx");
        assert!(!stem("a/b/c").contains('/'));
        assert!(check_name(&"x".repeat(200)).is_ok());
        assert!(check_name("x/".repeat(90).trim_end_matches('/')).is_err());
    }

    #[test]
    fn network_filesystems_are_recognised() {
        assert_eq!(network_filesystem(0x6969), Some("NFS"));
        assert!(network_filesystem(0xFF53_4D42).is_some());
        assert!(network_filesystem(0xEF53).is_none(), "ext4 is local");
        assert!(network_filesystem(0x0102_1994).is_none(), "tmpfs is local");
        assert!(network_filesystem(0x5846_5342).is_none(), "xfs is local");
    }
}
