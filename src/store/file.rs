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
//! - `NAME.token`, the last token handed out, replaced atomically under the
//!   lock and fsynced with its directory BEFORE the command sees the token,
//!   so tokens never repeat, also across crashes and reboots.
//! - `NAME.holder`, who holds the lock (JSON). A crashed holder's record
//!   stays behind; it is believed only while the lock is actually held.
//!
//! A `/` in a lock name becomes `%2F` in the file names. The lock never
//! expires by time; it is lost only if someone removes or replaces the lock
//! file or its directory, which each renewal (every TTL/3) looks for.

use std::cell::RefCell;
use std::fs::File;
use std::io::{ErrorKind as IoKind, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{
    Broken, Check, Holder, HolderRecord, Lease, LockStatus, Loss, Renewal, Renewer, Store,
    StoreError, Ticket, Turn,
};
use crate::clock::Instant;
use crate::log;

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
}

/// The store directory and the file operations in it.
#[derive(Clone)]
struct Dir(PathBuf);

impl FileStore {
    /// Open (creating it 0700 if missing) the store directory and check
    /// that it is safe to lock in.
    pub fn open(dir: &Path, network_fs_ok: bool) -> Result<Self, StoreError> {
        let shown = dir.display();
        if !dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| {
                    StoreError::config(format!("cannot create the store directory {shown}: {e}"))
                })?;
        }
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
            && !network_fs_ok
        {
            return Err(StoreError::config(format!(
                "store directory {shown} is on {kind}, where file locks are leases without fencing; \
                 use a local directory, or etcd, or add ?network-fs=ok to the URL if you accept that"
            )));
        }
        Ok(FileStore {
            dir: Dir(dir.to_path_buf()),
        })
    }
}

impl Store for FileStore {
    type Lease = FileLease;

    async fn grant(&self, _ttl: Duration, _within: Duration) -> Result<FileLease, StoreError> {
        Ok(FileLease {
            dir: self.dir.clone(),
            granted_at: Instant::now(),
            state: Rc::new(RefCell::new(None)),
        })
    }

    async fn status(&self, lock: &str) -> Result<LockStatus, StoreError> {
        self.dir.status(lock)
    }

    async fn list(&self, prefix: &str) -> Result<Vec<LockStatus>, StoreError> {
        let entries = std::fs::read_dir(&self.dir.0).map_err(|e| {
            StoreError::config(format!("cannot list {}: {e}", self.dir.0.display()))
        })?;
        let mut locks: Vec<String> = entries
            .flatten()
            .filter_map(|e| {
                e.file_name()
                    .to_str()?
                    .strip_suffix(".lock")
                    .map(|s| s.replace("%2F", "/"))
            })
            .filter(|lock| lock.starts_with(prefix) && super::check_lock_name(lock).is_ok())
            .collect();
        locks.sort();
        locks.iter().map(|lock| self.dir.status(lock)).collect()
    }

    async fn check(&self, lock: &str, key: &str, token: u64) -> Result<Check, StoreError> {
        let stem = stem(lock);
        let counter = self.dir.counter(&stem)?;
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

    async fn break_lock(
        &self,
        lock: &str,
        token: Option<u64>,
        _force: bool,
    ) -> Result<Broken, StoreError> {
        let Some(holder) = self.dir.status(lock)?.holder else {
            return Ok(Broken::Free);
        };
        if token.is_some_and(|t| t != holder.token) {
            return Ok(Broken::Changed(holder));
        }
        // A file lock cannot be taken from its holder, so there is nothing
        // to force: put a new lock file, locked by us, in place of the old
        // one. The holder's next renewal sees the replacement, and in it who
        // asked, and stops its command; newcomers queue on the new file
        // behind us; we let go only once we hold the old file's lock too,
        // i.e. once the old holder is gone.
        let asked = Instant::now();
        let stem = stem(lock);
        let path = self.dir.path(&stem, ".lock");
        let fail =
            |e: std::io::Error| StoreError::config(format!("cannot break {}: {e}", path.display()));
        let old = open_nofollow(&path).map_err(fail)?;
        let fresh = self.dir.path(&stem, ".lock.new");
        let _ = std::fs::remove_file(&fresh);
        let new = self.dir.create_new(&fresh).map_err(fail)?;
        if !try_flock(new.as_raw_fd(), libc::LOCK_EX).map_err(fail)? {
            return Err(fail(std::io::Error::other("someone else is breaking it")));
        }
        let request = format!(
            "{BREAK_REQUEST} (pid {}) at {}\n",
            std::process::id(),
            humantime::format_rfc3339_seconds(std::time::SystemTime::now())
        );
        (&new).write_all(request.as_bytes()).map_err(fail)?;
        std::fs::rename(&fresh, &path).map_err(fail)?;
        // Waiters on the old file may get its lock before us, find it
        // replaced and move on to the new one; once we have it, nobody runs
        // under the old file any more.
        flock_blocking(old.as_raw_fd()).await.map_err(fail)?;
        let _ = std::fs::remove_file(self.dir.path(&stem, ".holder"));
        drop(new);
        Ok(Broken::Stopped {
            holder,
            after: asked.elapsed(),
        })
    }
}

/// The open lock file of this holder.
struct LockFile {
    file: File,
    path: PathBuf,
    stem: String,
    record: HolderRecord,
    held: bool,
}

impl LockFile {
    /// Is the file we hold still the one at the lock's path?
    fn still_in_place(&self) -> Result<(), String> {
        let ours = self.file.metadata().map_err(|e| e.to_string())?;
        match std::fs::symlink_metadata(&self.path) {
            Ok(now) if now.dev() == ours.dev() && now.ino() == ours.ino() && ours.nlink() > 0 => {
                Ok(())
            }
            Ok(_) => Err(format!(
                "the lock file {} was replaced",
                self.path.display()
            )),
            Err(e) if e.kind() == IoKind::NotFound => {
                Err(format!("the lock file {} was removed", self.path.display()))
            }
            Err(e) => Err(format!("the lock file {}: {e}", self.path.display())),
        }
    }
}

pub struct FileLease {
    dir: Dir,
    granted_at: Instant,
    state: Rc<RefCell<Option<LockFile>>>,
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

    /// The next token for `stem`, durable before it is returned.
    fn next_token(&self, stem: &str) -> Result<u64, StoreError> {
        let path = self.path(stem, ".token");
        let fail = |e: std::io::Error| {
            StoreError::config(format!("token counter {}: {e}", path.display()))
        };
        let previous = match read_nofollow(&path) {
            Ok(text) => text.trim().parse::<u64>().map_err(|_| {
                StoreError::config(format!(
                    "token counter {} is corrupt ({:?}); refusing to hand out a token that might repeat",
                    path.display(),
                    text.trim()
                ))
            })?,
            Err(e) if e.kind() == IoKind::NotFound => 0,
            Err(e) => return Err(fail(e)),
        };
        let next = previous + 1;
        self.replace(stem, ".token", format!("{next}\n").as_bytes(), true)
            .map_err(fail)?;
        Ok(next)
    }
}

impl Dir {
    /// The last token handed out for `stem`, 0 if none.
    fn counter(&self, stem: &str) -> Result<u64, StoreError> {
        let path = self.path(stem, ".token");
        match read_nofollow(&path) {
            Ok(text) => text.trim().parse().map_err(|_| {
                StoreError::config(format!("token counter {} is corrupt", path.display()))
            }),
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
        if try_flock(probe.as_raw_fd(), libc::LOCK_SH).unwrap_or(false) {
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

fn try_flock(fd: RawFd, operation: libc::c_int) -> std::io::Result<bool> {
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(fd, operation | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(e)
    }
}

/// Wait for the lock in a thread of its own: flock(2) blocks, and the kernel
/// wakes exactly one waiter's call when the lock is free, with no polling.
/// The thread locks a duplicate of our descriptor, i.e. the same open file
/// description, so the lock it gets is ours.
async fn flock_blocking(fd: RawFd) -> std::io::Result<()> {
    // SAFETY: fcntl(F_DUPFD_CLOEXEC) returns a new descriptor that we own.
    let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if dup < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let dup = unsafe { OwnedFd::from_raw_fd(dup) };
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("elect-flock".into())
        .spawn(move || {
            let result = loop {
                // SAFETY: flock on a descriptor this thread owns.
                if unsafe { libc::flock(dup.as_raw_fd(), libc::LOCK_EX) } == 0 {
                    break Ok(());
                }
                let e = std::io::Error::last_os_error();
                if e.kind() != IoKind::Interrupted {
                    break Err(e);
                }
            };
            let _ = tx.send(result);
        })?;
    rx.await
        .unwrap_or_else(|_| Err(std::io::Error::other("the waiting thread died")))
}

impl Lease for FileLease {
    type Renewer = FileRenewer;

    fn id(&self) -> String {
        std::process::id().to_string()
    }

    fn ttl(&self) -> Option<Duration> {
        None
    }

    fn granted_at(&self) -> Instant {
        self.granted_at
    }

    fn renewer(&self) -> FileRenewer {
        FileRenewer {
            state: self.state.clone(),
        }
    }

    fn hold_fds(&self) -> std::io::Result<Vec<OwnedFd>> {
        // A duplicate shares the open file description, and with it the lock.
        self.state
            .borrow()
            .iter()
            .map(|l| l.file.try_clone().map(OwnedFd::from))
            .collect()
    }

    async fn enqueue(&self, lock: &str, record: &HolderRecord) -> Result<Ticket, StoreError> {
        let stem = stem(lock);
        let path = self.dir.path(&stem, ".lock");
        let file = self.dir.open_lock(&path).map_err(|e| {
            StoreError::config(format!("cannot open the lock file {}: {e}", path.display()))
        })?;
        let key = path.display().to_string();
        *self.state.borrow_mut() = Some(LockFile {
            file,
            path,
            stem,
            record: record.clone(),
            held: false,
        });
        Ok(Ticket { key, rank: 0 })
    }

    async fn wait_turn(
        &self,
        _lock: &str,
        ticket: &Ticket,
        until: Option<Instant>,
    ) -> Result<Turn, StoreError> {
        let locked =
            |e: std::io::Error| StoreError::config(format!("cannot lock {}: {e}", ticket.key));
        loop {
            let fd = self
                .state
                .borrow()
                .as_ref()
                .expect("enqueued")
                .file
                .as_raw_fd();
            if !try_flock(fd, libc::LOCK_EX).map_err(locked)? {
                let remaining = until.map(Instant::remaining);
                if remaining.is_some_and(|r| r.is_zero()) {
                    return Ok(Turn::Busy);
                }
                log::verbose(format_args!("waiting for the lock on {}", ticket.key));
                let waited = match until {
                    None => Some(flock_blocking(fd).await),
                    Some(at) => tokio::select! {
                        r = flock_blocking(fd) => Some(r),
                        () = crate::clock::sleep_until(at) => None,
                    },
                };
                match waited {
                    None => return Ok(Turn::Busy),
                    Some(r) => r.map_err(locked)?,
                }
            }
            // Locked. But if the file was removed or replaced meanwhile, we
            // hold a lock on an inode nobody else will ever open: start over.
            let moved = self
                .state
                .borrow()
                .as_ref()
                .expect("enqueued")
                .still_in_place();
            if let Err(why) = moved {
                log::verbose(format_args!("{why}; opening it again"));
                // Let go of the old file's lock explicitly: a guard started
                // while we waited shares this open file description, and
                // whoever replaced the file (elect break) waits for it.
                // SAFETY: flock on a descriptor we own.
                unsafe { libc::flock(fd, libc::LOCK_UN) };
                let path = self.state.borrow().as_ref().expect("enqueued").path.clone();
                let file = self.dir.open_lock(&path).map_err(locked)?;
                self.state.borrow_mut().as_mut().expect("enqueued").file = file;
                continue;
            }
            let (stem, record) = {
                let state = self.state.borrow();
                let lock = state.as_ref().expect("enqueued");
                (lock.stem.clone(), lock.record.clone())
            };
            let token = self.dir.next_token(&stem)?;
            let holder = serde_json::to_vec(&FileHolder { record, token }).expect("serializable");
            if let Err(e) = self.dir.replace(&stem, ".holder", &holder, false) {
                log::verbose(format_args!("could not write the holder record: {e}"));
            }
            self.state.borrow_mut().as_mut().expect("enqueued").held = true;
            return Ok(Turn::First(token));
        }
    }

    async fn lost(&self, _ticket: &Ticket) -> Loss {
        // Each renewal checks that the lock file is still in place. (inotify
        // would notice sooner, but tearing an inotify instance down costs
        // milliseconds at every exit.)
        std::future::pending().await
    }

    async fn release(&self) -> Result<(), StoreError> {
        let Some(lock) = self.state.borrow_mut().take() else {
            return Ok(());
        };
        if lock.held && lock.still_in_place().is_ok() {
            let _ = std::fs::remove_file(self.dir.path(&lock.stem, ".holder"));
        }
        // Closing our descriptor releases the lock once the guard has closed its copy.
        drop(lock);
        Ok(())
    }
}

/// Renewing a file lock means checking that it is still in place.
pub struct FileRenewer {
    state: Rc<RefCell<Option<LockFile>>>,
}

impl Renewer for FileRenewer {
    async fn renew(&mut self) -> Result<Renewal, StoreError> {
        match self.state.borrow().as_ref() {
            Some(lock) if lock.held => match lock.still_in_place() {
                Ok(()) => Ok(Renewal::Held),
                Err(why) => match read_nofollow(&lock.path) {
                    Ok(text) if text.starts_with(BREAK_REQUEST) => Ok(Renewal::Asked(format!(
                        "{} asked it to let go",
                        text.trim()
                    ))),
                    _ => Ok(Renewal::Gone(why)),
                },
            },
            _ => Ok(Renewal::Held),
        }
    }

    fn reset(&mut self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

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
