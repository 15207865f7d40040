//! A lock file held under a session that has no lease: the lock lives in
//! an open file description (flock(2), through `std::fs::File::lock`), and
//! ends only when every descriptor of it is closed, elect's and its guard's.

use std::cell::{Cell, RefCell};
use std::fs::{File, TryLockError};
use std::io::ErrorKind as IoKind;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::os::unix::thread::JoinHandleExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::dir::{Dir, read_nofollow, stem};
use super::inspect::BREAK_REQUEST;
use super::records::FileHolder;
use crate::clock::Instant;
use crate::log;
use crate::store::Token;
use crate::store::rewind::Mark;
use crate::store::{
    Boxed, Checkpoint, HolderRecord, Lock, Loss, Renewal, Renewer, Session, StoreError, Turn,
};

/// What a waiter that found its token counter gone back is told to do.
const KEEP_COUNTERS: &str = "put a backup of the directory back only with the live `.token` \
     files kept (a counter must never go back), or remove nothing but the `.lock` files";

/// How often a held lock file is looked at: someone may remove or replace
/// it (`elect break` does). A stat each second costs nothing; an inotify
/// instance would cost milliseconds at every exit.
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// Why the lock file we hold is no longer the one at the lock's path.
#[derive(Debug, thiserror::Error)]
enum Moved {
    /// Our own descriptor's file cannot be looked at.
    #[error("{0}")]
    Ours(std::io::Error),
    #[error("the lock file {} was replaced", .0.display())]
    Replaced(PathBuf),
    #[error("the lock file {} was removed", .0.display())]
    Removed(PathBuf),
    /// The path cannot be looked at, as the system says.
    #[error("the lock file {}: {error}", path.display())]
    Unseen {
        path: PathBuf,
        error: std::io::Error,
    },
}

/// A session of the file store: no lease, nothing to renew; the locks end
/// when their files are closed.
pub struct FileSession {
    pub(super) dir: Dir,
    /// `--ttl`: a file lock does not expire, but elect keeps its deadline
    /// all the same, so that its guard stops the command of an elect that
    /// stopped answering (frozen, say) and `elect break` can bound its wait.
    pub(super) ttl: Duration,
    pub(super) granted_at: Instant,
}

impl Session for FileSession {
    fn id(&self) -> String {
        std::process::id().to_string()
    }

    fn ttl(&self) -> Option<Duration> {
        Some(self.ttl)
    }

    fn granted_at(&self) -> Instant {
        self.granted_at
    }

    fn renewer(&self) -> Box<dyn Renewer> {
        Box::new(Unexpiring(self.ttl))
    }

    fn join(
        &self,
        lock: String,
        record: HolderRecord,
    ) -> Boxed<'_, Result<Box<dyn Lock + '_>, StoreError>> {
        let joined = FileLock::open(&self.dir, &lock, record);
        Box::pin(async move {
            let lock: Box<dyn Lock + '_> = Box::new(joined?);
            Ok(lock)
        })
    }

    fn release(&self) -> Boxed<'_, Result<(), StoreError>> {
        // The locks end as their files close (see FileLock's Drop).
        Box::pin(async { Ok(()) })
    }
}

/// How a wait for the lock file's lock ended.
enum Waited {
    Locked(std::io::Result<()>),
    Busy,
    /// The file was removed or replaced, and why.
    Moved(Moved),
}

/// Nothing expires: a renewal always finds the lease alive, for its TTL
/// from now. It is elect's own proof of life, answered at once.
struct Unexpiring(Duration);

impl Renewer for Unexpiring {
    fn renew(&mut self) -> Boxed<'_, Result<Renewal, StoreError>> {
        let ttl = self.0;
        Box::pin(async move { Ok(Renewal::Alive(ttl)) })
    }

    fn reset(&mut self) {}
}

/// The open lock file of one lock.
pub struct FileLock {
    dir: Dir,
    /// Replaced by a fresh open if the file at `path` was replaced while we waited.
    file: RefCell<File>,
    path: PathBuf,
    key: String,
    lock: String,
    stem: String,
    record: HolderRecord,
    held: Cell<bool>,
    /// The highest token this waiter has seen the counter at: a directory
    /// put back from a backup takes its counter back with it.
    mark: Mark,
}

impl FileLock {
    fn open(dir: &Dir, lock: &str, record: HolderRecord) -> Result<FileLock, StoreError> {
        let stem = stem(lock);
        let path = dir.path(&stem, ".lock");
        let file = dir.open_lock(&path).map_err(|e| {
            StoreError::config_io(
                &e,
                format!("cannot open the lock file {}: {e}", path.display()),
            )
        })?;
        Ok(FileLock {
            dir: dir.clone(),
            file: RefCell::new(file),
            key: path.display().to_string(),
            path,
            lock: lock.to_string(),
            stem,
            record,
            held: Cell::new(false),
            mark: Mark::default(),
        })
    }

    /// Is the file we hold still the one at the lock's path?
    fn still_in_place(&self) -> Result<(), Moved> {
        let ours = self.file.borrow().metadata().map_err(Moved::Ours)?;
        match std::fs::symlink_metadata(&self.path) {
            Ok(now) if now.dev() == ours.dev() && now.ino() == ours.ino() && ours.nlink() > 0 => {
                Ok(())
            }
            Ok(_) => Err(Moved::Replaced(self.path.clone())),
            Err(e) if e.kind() == IoKind::NotFound => Err(Moved::Removed(self.path.clone())),
            Err(error) => Err(Moved::Unseen {
                path: self.path.clone(),
                error,
            }),
        }
    }

    async fn wait(&self, until: Option<Instant>) -> Result<Turn, StoreError> {
        let locked =
            |e: std::io::Error| StoreError::config_io(&e, format!("cannot lock {}: {e}", self.key));
        loop {
            let ours = match self.file.borrow().try_lock() {
                Ok(()) => true,
                Err(TryLockError::WouldBlock) => false,
                Err(TryLockError::Error(e)) => return Err(locked(e)),
            };
            if !ours {
                if until.is_some_and(|at| at.remaining().is_zero()) {
                    return Ok(Turn::Busy);
                }
                // The holder's token, or one above: ours must be higher.
                if let Ok(last) = self.dir.counter(&self.stem) {
                    self.mark.saw(last);
                }
                log::verbose(format_args!("waiting for the lock on {}", self.key));
                let file = self.file.borrow().try_clone().map_err(locked)?;
                let forever = crate::clock::Instant::FAR_FUTURE;
                // A file replaced while we wait (elect break) is looked for
                // too: its old holder may never let go of the old one.
                let waited = tokio::select! {
                    r = lock_blocking(file) => Waited::Locked(r),
                    () = crate::clock::sleep_until(until.unwrap_or(forever)) => Waited::Busy,
                    why = self.moved() => Waited::Moved(why),
                };
                match waited {
                    Waited::Busy => return Ok(Turn::Busy),
                    Waited::Locked(r) => r.map_err(locked)?,
                    Waited::Moved(why) => {
                        log::verbose(format_args!("{why}; opening it again"));
                        let file = self.dir.open_lock(&self.path).map_err(locked)?;
                        *self.file.borrow_mut() = file;
                        continue;
                    }
                }
            }
            // Locked. But if the file was removed or replaced meanwhile, we
            // hold a lock on an inode nobody else will ever open: start over.
            if let Err(why) = self.still_in_place() {
                log::verbose(format_args!("{why}; opening it again"));
                // Let go of the old file's lock at once: whoever replaced
                // the file (elect break) waits for it.
                let _ = self.file.borrow().unlock();
                let file = self.dir.open_lock(&self.path).map_err(locked)?;
                *self.file.borrow_mut() = file;
                continue;
            }
            let floor = self.mark.floor();
            let token = self.dir.next_token(&self.stem)?;
            // The counter as it was before this take: below what was seen.
            if let Err(rewound) = self.mark.read(floor, token - 1) {
                let _ = self.file.borrow().unlock();
                let counter = format!(
                    "the token counter {}",
                    self.dir.path(&self.stem, ".token").display()
                );
                return Err(rewound.error(&counter, &self.lock, KEEP_COUNTERS));
            }
            let holder = crate::store::to_json(&FileHolder {
                record: self.record.acquired_now(),
                token,
            })
            .into_bytes();
            if let Err(e) = self.dir.replace(&self.stem, ".holder", &holder, false) {
                log::verbose(format_args!("could not write the holder record: {e}"));
            }
            // Who held this shard last: an instance prefers its own shard
            // when it starts again.
            if self.record.shard.is_some() {
                let identity = self.record.identity.as_bytes();
                if let Err(e) = self.dir.replace(&self.stem, ".last", identity, false) {
                    log::verbose(format_args!("could not record the shard's holder: {e}"));
                }
            }
            self.held.set(true);
            return Ok(Turn::First {
                token: Token::new(token),
                taken: None,
            });
        }
    }

    /// Look at the lock file every [`LOOK_EVERY`] until it is no longer the
    /// one we have open; why.
    async fn moved(&self) -> Moved {
        loop {
            tokio::time::sleep(LOOK_EVERY).await;
            if let Err(why) = self.still_in_place() {
                return why;
            }
        }
    }

    /// Look at the lock file every [`LOOK_EVERY`] until it is no longer ours.
    async fn watch(&self) -> Loss {
        let why = self.moved().await;
        match read_nofollow(&self.path) {
            Ok(text) if text.starts_with(BREAK_REQUEST) => {
                Loss::Asked(format!("{} asked it to let go", text.trim()))
            }
            _ => Loss::Gone(why.to_string()),
        }
    }
}

impl Lock for FileLock {
    fn key(&self) -> &str {
        &self.key
    }

    fn rank(&self) -> u64 {
        0
    }

    fn wait_turn(&self, until: Option<Instant>) -> Boxed<'_, Result<Turn, StoreError>> {
        Box::pin(self.wait(until))
    }

    fn lost(&self) -> Boxed<'_, Loss> {
        Box::pin(self.watch())
    }

    fn leave(&self) -> Boxed<'_, Result<(), StoreError>> {
        self.let_go();
        Box::pin(async { Ok(()) })
    }

    fn checkpoint(&self) -> Boxed<'_, Result<Option<Checkpoint>, StoreError>> {
        Box::pin(async move { self.dir.checkpoint(&self.stem) })
    }

    fn hold_fds(&self) -> std::io::Result<Vec<OwnedFd>> {
        // A duplicate shares the open file description, and with it the lock.
        Ok(vec![OwnedFd::from(self.file.borrow().try_clone()?)])
    }
}

impl FileLock {
    /// Remove our holder record and let go of the lock (the guard's copy
    /// of the descriptor keeps it until the command's group is dead).
    fn let_go(&self) {
        self.forget_record();
        let _ = self.file.borrow().unlock();
    }

    /// Remove our holder record, if we hold the lock and its file is ours.
    fn forget_record(&self) {
        if self.held.replace(false) && self.still_in_place().is_ok() {
            let _ = std::fs::remove_file(self.dir.path(&self.stem, ".holder"));
        }
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        // Only the record: closing our descriptor is what lets the lock go,
        // once the guard has closed its copy too.
        self.forget_record();
    }
}

/// Wait for the lock in a thread of its own: flock(2) blocks, and the kernel
/// wakes exactly one waiter's call when the lock is free, with no polling.
/// `file` is a duplicate of our descriptor, i.e. the same open file
/// description, so the lock it gets is ours.
///
/// A wait given up (dropped: `--wait` ran out, or another shard was won)
/// stops the thread, so that no forgotten waiter stays queued in the
/// kernel: it is interrupted with [`WAKE_SIGNAL`] until it has gone.
pub(super) async fn lock_blocking(file: File) -> std::io::Result<()> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let given_up = Arc::new(AtomicBool::new(false));
    let stop = given_up.clone();
    install_wake_handler();
    let thread = std::thread::Builder::new()
        .name("elect-flock".into())
        .spawn(move || {
            let result = loop {
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                // flock(2) with LOCK_EX, once: std does not try again on
                // EINTR, which is how a wait given up is woken.
                match file.lock() {
                    Ok(()) => break Ok(()),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => break Err(e),
                }
            };
            let _ = tx.send(result);
        })?;
    let waiting = Waiting {
        thread: Some(thread),
        given_up,
    };
    let result = rx
        .await
        .unwrap_or_else(|_| Err(std::io::Error::other("the waiting thread died")));
    drop(waiting);
    result
}

/// The signal that interrupts a waiting thread's flock(2).
fn wake_signal() -> i32 {
    libc::SIGRTMIN()
}

/// A handler that does nothing, installed without SA_RESTART: its only
/// effect is that a blocked flock(2) returns EINTR.
fn install_wake_handler() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        extern "C" fn wake(_: libc::c_int) {}
        // SAFETY: a zeroed sigaction with a handler that does nothing is
        // valid; sigaction(2) has no safe wrapper for a plain function.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = wake as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut action.sa_mask);
            if libc::sigaction(wake_signal(), &action, std::ptr::null_mut()) != 0 {
                crate::log::verbose(format_args!(
                    "cannot install the flock wake-up handler: {}",
                    std::io::Error::last_os_error()
                ));
            }
        }
    });
}

/// A waiting thread, stopped when given up.
struct Waiting {
    thread: Option<std::thread::JoinHandle<()>>,
    given_up: Arc<AtomicBool>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        if thread.is_finished() {
            return;
        }
        self.given_up.store(true, Ordering::SeqCst);
        // Interrupt it until it is gone: a signal sent just before it
        // entered flock(2) would be missed. From a thread of its own, so
        // that giving up never waits.
        let target = thread.as_pthread_t();
        let _ = std::thread::Builder::new()
            .name("elect-unflock".into())
            .spawn(move || {
                while !thread.is_finished() {
                    // SAFETY: the thread is alive (not finished, not joined),
                    // so its pthread_t is valid.
                    unsafe { libc::pthread_kill(target, wake_signal()) };
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
            });
    }
}
