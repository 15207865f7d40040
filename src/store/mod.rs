//! Coordination stores, behind one small boundary.
//!
//! A store knows how to grant a lease, queue a holder under a lock, say when
//! that holder is first in line, renew the lease and notice its loss. It knows
//! nothing of children, signals or deadlines: [`crate::lease`] turns renewals
//! into a deadline, and [`crate::supervisor`] enforces it. Adding a store is
//! one module here and one arm in [`Location::parse`].

pub mod etcd;
pub mod file;
mod target;

pub use target::EtcdTarget;

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::clock::Instant;

/// Where the lock lives, parsed from `--store`: the one switch between stores.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// An etcd cluster.
    Etcd(EtcdTarget),
    /// A directory on this host.
    File { dir: PathBuf, network_fs_ok: bool },
}

pub const DEFAULT_STORE: &str = "etcd://127.0.0.1:2379";

impl Location {
    /// Choose the store from `--store`/`ELECT_STORE`, else from
    /// `ETCDCTL_ENDPOINTS`, else the local default.
    pub fn choose(
        store: Option<&str>,
        etcdctl_endpoints: Option<&str>,
    ) -> Result<Self, StoreError> {
        match (store, etcdctl_endpoints) {
            (Some(url), _) => Location::parse(url),
            (None, Some(list)) if !list.trim().is_empty() => EtcdTarget::parse(list, false)
                .map(Location::Etcd)
                .map_err(|e| StoreError::config(format!("ETCDCTL_ENDPOINTS: {e}"))),
            (None, _) => Location::parse(DEFAULT_STORE),
        }
    }

    /// The store that `--store` and the environment choose, with the
    /// certificates and credentials to reach it (read now, so that a bad
    /// file is reported before anything touches the store).
    pub fn from_args(args: &crate::cli::StoreArgs) -> Result<Self, StoreError> {
        let etcdctl = std::env::var("ETCDCTL_ENDPOINTS").ok();
        let mut location = Location::choose(args.store.as_deref(), etcdctl.as_deref())?;
        if let Location::Etcd(target) = &mut location {
            target.secure(args)?;
        }
        Ok(location)
    }

    /// Connect to the store. `ping_timeout` is how long a connection may
    /// leave a keep-alive ping unanswered: longer than the slowest round
    /// trip the caller can work with.
    pub async fn open(
        &self,
        ping_timeout: Duration,
        connect_timeout: Duration,
    ) -> Result<Opened, StoreError> {
        Ok(match self {
            Location::Etcd(target) => Opened::Etcd(Box::new(
                etcd::Etcd::connect(target, ping_timeout, connect_timeout).await?,
            )),
            Location::File { dir, network_fs_ok } => {
                Opened::File(file::FileStore::open(dir, *network_fs_ok)?)
            }
        })
    }

    pub fn parse(url: &str) -> Result<Self, StoreError> {
        let url = url.trim();
        if url == "file" || url.starts_with("file:") {
            return Location::file(
                url.strip_prefix("file")
                    .unwrap_or_default()
                    .trim_start_matches(':'),
            )
            .map_err(|e| StoreError::config(format!("store URL '{url}': {e}")));
        }
        let (scheme, rest) = url.split_once("://").ok_or_else(|| {
            StoreError::config(format!(
                "store URL '{}' has no scheme; expected etcd://HOST:PORT",
                redact(url)
            ))
        })?;
        let tls = match scheme.to_ascii_lowercase().as_str() {
            "etcd" | "http" => false,
            "etcds" | "https" => true,
            other => {
                return Err(StoreError::config(format!(
                    "unknown store '{other}://' in '{}'; elect supports etcd://HOST:PORT, etcds://HOST:PORT and file:DIR",
                    redact(url)
                )));
            }
        };
        EtcdTarget::parse(rest, tls)
            .map(Location::Etcd)
            .map_err(|e| StoreError::config(format!("store URL '{}': {e}", redact(url))))
    }

    /// What follows `file:`: `/dir`, `///dir`, or nothing for the per-user
    /// default; `?network-fs=ok` accepts a network filesystem.
    fn file(rest: &str) -> Result<Self, String> {
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
        let dir = if path.is_empty() {
            file::default_dir()?
        } else {
            PathBuf::from(path)
        };
        Ok(Location::File { dir, network_fs_ok })
    }

    /// Check a lock name for this store.
    pub fn check_lock_name(&self, name: &str) -> Result<(), String> {
        check_lock_name(name)?;
        match self {
            Location::Etcd(_) => Ok(()),
            Location::File { .. } => file::check_name(name),
        }
    }
}

/// Validate one `host[:port]`, defaulting the port to etcd's 2379.
pub(crate) fn endpoint(item: &str) -> Result<String, String> {
    if item.is_empty() {
        return Err("empty endpoint".into());
    }
    if item.contains(['/', '?', '#', ' ']) || item.chars().any(char::is_control) {
        return Err(format!("'{item}' is not HOST:PORT"));
    }
    let (host, port) = if let Some(v6) = item.strip_prefix('[') {
        let (addr, after) = v6
            .split_once(']')
            .ok_or_else(|| format!("'{item}': unclosed '['"))?;
        (format!("[{addr}]"), after.strip_prefix(':'))
    } else {
        match item.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (item.to_string(), None),
        }
    };
    if host.is_empty() || host == "[]" {
        return Err(format!("'{item}' has no host"));
    }
    let port = match port {
        None => 2379,
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| format!("'{item}' has a bad port"))?,
    };
    Ok(format!("{host}:{port}"))
}

impl fmt::Display for Location {
    /// The store as shown to users and handed to the child: never with credentials.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Etcd(target) => {
                let scheme = if target.tls { "etcds" } else { "etcd" };
                write!(f, "{scheme}://{}", target.endpoints.join(","))
            }
            Location::File { dir, network_fs_ok } => {
                write!(f, "file:{}", dir.display())?;
                if *network_fs_ok {
                    f.write_str("?network-fs=ok")?;
                }
                Ok(())
            }
        }
    }
}

/// A URL with any `user:password@` removed, for error messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://***@{}", &url[..s], &url[at + 1..]),
        _ => url.to_string(),
    }
}

/// A connected store of any kind; [`with_store!`] runs generic code on it.
pub enum Opened {
    Etcd(Box<etcd::Etcd>),
    File(file::FileStore),
}

/// `with_store!(opened, store => expression)`: evaluate the expression with
/// `store` bound to the concrete store inside `opened`.
macro_rules! with_store {
    ($opened:expr, $store:ident => $body:expr) => {
        match $opened {
            $crate::store::Opened::Etcd(boxed) => {
                let $store = *boxed;
                $body
            }
            $crate::store::Opened::File($store) => $body,
        }
    };
}
pub(crate) use with_store;

/// Lock names: segments of `[A-Za-z0-9._-]` separated by `/`, optionally
/// starting with `/` as etcd keys often do; no empty, `.` or `..` segments.
/// The name is used as a key prefix in every store, so it must mean the same
/// thing everywhere and never escape its place.
pub fn check_lock_name(name: &str) -> Result<(), String> {
    const MAX: usize = 200;
    if name.is_empty() {
        return Err("the lock name is empty".into());
    }
    if name.len() > MAX {
        return Err(format!(
            "the lock name is {} bytes long; the limit is {MAX}",
            name.len()
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/')))
    {
        return Err(format!(
            "the lock name '{}' contains {c:?}; use letters, digits, '.', '_', '-' and '/'",
            name.escape_default()
        ));
    }
    let body = name.strip_prefix('/').unwrap_or(name);
    for segment in body.split('/') {
        match segment {
            "" => return Err(format!("the lock name '{name}' has an empty segment")),
            "." | ".." => return Err(format!("the lock name '{name}' has a '{segment}' segment")),
            _ => {}
        }
    }
    Ok(())
}

/// Who holds a lock, as recorded in the store beside the lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HolderRecord {
    pub identity: String,
    pub hostname: String,
    pub pid: u32,
    pub command: Vec<String>,
    /// When the holder joined the queue, RFC 3339 UTC.
    pub started: String,
    /// The holder's `--grace`, in ms: how long its command may run on
    /// after its lease was ended by force.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_ms: Option<u64>,
    /// Set by `elect break`: who asked the holder to let go, and when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub break_request: Option<String>,
}

impl HolderRecord {
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a holder record always serializes")
    }

    /// A record read back from the store, or `None` if another tool wrote it.
    pub fn from_json(bytes: &[u8]) -> Option<Self> {
        serde_json::from_slice(bytes).ok()
    }
}

/// A place in a lock's queue.
#[derive(Clone, Debug)]
pub struct Ticket {
    /// The store key that represents this holder (`ELECT_KEY`).
    pub key: String,
    /// The store's own record of the place (etcd: the key's create revision).
    pub rank: u64,
}

/// The current holder of a lock, as seen by anyone.
#[derive(Clone, Debug)]
pub struct Holder {
    pub key: String,
    pub token: u64,
    /// What elect recorded; `None` for holders of other tools (`etcdctl lock`).
    pub record: Option<HolderRecord>,
    /// The holder's lease, as in its `ELECT_LEASE_ID`.
    pub lease: Option<String>,
    /// Time left on the lease by the store's clock; `None` where leases do
    /// not expire by time.
    pub ttl_left: Option<Duration>,
}

/// A lock as seen from outside.
#[derive(Clone, Debug)]
pub struct LockStatus {
    pub lock: String,
    pub holder: Option<Holder>,
    /// How many wait behind the holder.
    pub waiting: usize,
    /// The waiters' places (etcd: create revisions), where the store orders them.
    pub ranks: Vec<u64>,
}

/// What `elect check` found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Check {
    /// The asker holds the lock with the token it was given.
    Holder,
    /// It does not, and why.
    NotHolder(String),
}

/// What `elect break` did.
#[derive(Clone, Debug)]
pub enum Broken {
    /// The holder stopped its command and let go, this long after it was asked.
    Stopped { holder: Holder, after: Duration },
    /// The holder's lease was ended while its command may still run.
    Forced { holder: Holder, why: Forced },
    /// Nobody held the lock.
    Free,
    /// The holder is not the one with the expected token.
    Changed(Holder),
}

/// Why `elect break` ended a lease without waiting for its holder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forced {
    /// `--force`.
    Asked,
    /// The holder did not let go within this long (it is not elect, or it
    /// does not answer); by then its lease could have expired anyway.
    NoAnswer(Duration),
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.record {
            Some(r) => write!(
                f,
                "{} (pid {} on {}, since {}, token {})",
                r.identity, r.pid, r.hostname, r.started, self.token
            ),
            None => write!(
                f,
                "{} (not written by elect, token {})",
                self.key, self.token
            ),
        }
    }
}

/// How waiting in the queue ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Turn {
    /// First in line: the lock is ours, with this fencing token, strictly
    /// greater than every earlier holder's.
    First(u64),
    /// Still behind someone when the wait ran out.
    Busy,
}

/// Why the lease is lost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Loss {
    /// Someone asked the holder to let go (`elect break`), for this reason.
    /// The lease is still good, so the command gets its whole grace.
    Asked(String),
    /// The store ended the lease, for this reason: another holder may
    /// already run, so the command gets little or no grace.
    Gone(String),
    /// No renewal was confirmed in time.
    Expired { last_confirmed: Instant },
}

impl std::fmt::Display for Loss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Loss::Asked(why) | Loss::Gone(why) => f.write_str(why),
            Loss::Expired { last_confirmed } => write!(
                f,
                "no renewal was confirmed in time (the last one was sent {} ago)",
                crate::clock::show(last_confirmed.elapsed())
            ),
        }
    }
}

/// What a renewal found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Renewal {
    /// The lease lives on; the store's time-to-live for it.
    Alive(Duration),
    /// The lock is still ours, and does not expire by time.
    Held,
    /// The lease is gone, and why.
    Gone(String),
    /// The lease is still good, but someone asked the holder to let go.
    Asked(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The store cannot be reached or refused the request.
    Unavailable,
    /// The store location or its settings are wrong.
    Config,
    /// Our lease or our key vanished.
    Gone,
}

#[derive(Clone, Debug)]
pub struct StoreError {
    pub kind: ErrorKind,
    pub message: String,
}

impl StoreError {
    pub fn unavailable(message: impl Into<String>) -> Self {
        StoreError {
            kind: ErrorKind::Unavailable,
            message: message.into(),
        }
    }
    pub fn config(message: impl Into<String>) -> Self {
        StoreError {
            kind: ErrorKind::Config,
            message: message.into(),
        }
    }
    pub fn gone(message: impl Into<String>) -> Self {
        StoreError {
            kind: ErrorKind::Gone,
            message: message.into(),
        }
    }
}

impl From<StoreError> for crate::exit::Failure {
    fn from(e: StoreError) -> Self {
        let code = match e.kind {
            ErrorKind::Config => crate::exit::Code::Config,
            ErrorKind::Unavailable | ErrorKind::Gone => crate::exit::Code::Unavailable,
        };
        crate::exit::Failure::new(code, e.message)
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// A connected store.
pub trait Store {
    type Lease: Lease;

    /// Grant a lease of at least `ttl`, retrying until `within` has passed.
    async fn grant(&self, ttl: Duration, within: Duration) -> Result<Self::Lease, StoreError>;

    /// Who holds `lock`, and how many wait, by an up-to-date read.
    async fn status(&self, lock: &str) -> Result<LockStatus, StoreError>;
    /// Every lock under `prefix` ("" for all) that has a holder or waiters.
    async fn list(&self, prefix: &str) -> Result<Vec<LockStatus>, StoreError>;
    /// Does the holder of `lock` still have `key` and `token`?
    async fn check(&self, lock: &str, key: &str, token: u64) -> Result<Check, StoreError>;
    /// Make the current holder let go, if its token is `token` (when given):
    /// ask its elect to stop its command and release, and wait until it has,
    /// at most until its lease could have expired anyway; then, or at once
    /// with `force`, end its lease.
    async fn break_lock(
        &self,
        lock: &str,
        token: Option<u64>,
        force: bool,
    ) -> Result<Broken, StoreError>;
}

/// A granted lease and what can be done under it.
pub trait Lease {
    type Renewer: Renewer;

    /// The lease as shown in `ELECT_LEASE_ID`.
    fn id(&self) -> String;
    /// The time-to-live the store granted; `None` if the lease does not
    /// expire by time (it ends when the holder releases it or dies).
    fn ttl(&self) -> Option<Duration>;
    /// When the grant request was sent: the lease is safe from then for `ttl`.
    fn granted_at(&self) -> Instant;
    /// A renewer with its own connection state.
    fn renewer(&self) -> Self::Renewer;
    /// Descriptors that hold the lock and that the guard must keep open until
    /// the command's process group is dead, so that a crash of elect cannot
    /// release the lock while its command still runs.
    fn hold_fds(&self) -> std::io::Result<Vec<std::os::fd::OwnedFd>> {
        Ok(Vec::new())
    }

    /// Join the queue of `lock` with this lease.
    async fn enqueue(&self, lock: &str, record: &HolderRecord) -> Result<Ticket, StoreError>;
    /// Wait until `ticket` is first in line and still there, or until
    /// `until` has passed, after at least one full look at the queue.
    /// Retries transient errors itself; fails with [`ErrorKind::Gone`] if
    /// the ticket vanished.
    async fn wait_turn(
        &self,
        lock: &str,
        ticket: &Ticket,
        until: Option<Instant>,
    ) -> Result<Turn, StoreError>;
    /// Return when the store says `ticket` is gone (deleted, revoked,
    /// expired: [`Loss::Gone`]) or asked to let go ([`Loss::Asked`]).
    async fn lost(&self, ticket: &Ticket) -> Loss;
    /// End the lease now, so that the next waiter goes ahead at once.
    async fn release(&self) -> Result<(), StoreError>;
}

/// Renews a lease, one request at a time. [`crate::lease::keep`] uses two,
/// so that a second request need not wait behind the first.
pub trait Renewer {
    /// Send one renewal and wait for its answer: only a request sent after
    /// this call began may answer it.
    async fn renew(&mut self) -> Result<Renewal, StoreError>;
    /// Forget any connection state: the next renewal goes out on a new
    /// stream, over another connection (another member's, where there are
    /// several), and no answer to an earlier request can reach it.
    fn reset(&mut self);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn etcd(eps: &[&str]) -> Location {
        Location::Etcd(EtcdTarget {
            endpoints: eps.iter().map(|s| s.to_string()).collect(),
            tls: false,
            ca: None,
            identity: None,
            user: None,
            password: None,
        })
    }

    #[test]
    fn store_urls() {
        assert_eq!(
            Location::parse("etcd://127.0.0.1:2379").unwrap(),
            etcd(&["127.0.0.1:2379"])
        );
        assert_eq!(
            Location::parse("etcd://a:1,b").unwrap(),
            etcd(&["a:1", "b:2379"])
        );
        assert_eq!(
            Location::parse("etcd://[::1]:23").unwrap(),
            etcd(&["[::1]:23"])
        );
        assert_eq!(
            Location::parse("etcd://a:1,b").unwrap().to_string(),
            "etcd://a:1,b:2379"
        );
        for bad in [
            "",
            "etcd://",
            "etcd://:1",
            "etcd://a:0",
            "etcd://a:x",
            "etcd://a,,b",
            "zk://a",
            "a:1",
        ] {
            let err = Location::parse(bad).unwrap_err();
            assert_eq!(err.kind, ErrorKind::Config, "{bad}");
        }
        let file = |dir: &str| Location::File {
            dir: dir.into(),
            network_fs_ok: false,
        };
        assert_eq!(Location::parse("file:/var/x").unwrap(), file("/var/x"));
        assert_eq!(Location::parse("file:///var/x").unwrap(), file("/var/x"));
        assert_eq!(
            Location::parse("file:/var/x").unwrap().to_string(),
            "file:/var/x"
        );
        assert_eq!(
            Location::parse("file:/mnt/n?network-fs=ok").unwrap(),
            Location::File {
                dir: "/mnt/n".into(),
                network_fs_ok: true
            }
        );
        assert!(Location::parse("file:/x?nfs=yes").is_err());
        assert!(Location::parse("file://host/x").is_err());
        assert!(matches!(
            Location::parse("file").unwrap(),
            Location::File { .. }
        ));
        let with_user = Location::parse("etcd://u:secret@a:1").unwrap();
        assert_eq!(
            with_user.to_string(),
            "etcd://a:1",
            "ELECT_STORE never carries credentials"
        );
        let err = Location::parse("etcd://u:secret@a:notaport").unwrap_err();
        assert!(!err.message.contains("secret"), "{}", err.message);
        assert_eq!(
            Location::parse("etcds://a:1").unwrap().to_string(),
            "etcds://a:1"
        );
    }

    #[test]
    fn store_choice_order() {
        assert_eq!(
            Location::choose(Some("etcd://a:1"), Some("b:2")).unwrap(),
            etcd(&["a:1"])
        );
        assert_eq!(
            Location::choose(None, Some("http://b:2,c:3")).unwrap(),
            etcd(&["b:2", "c:3"])
        );
        assert_eq!(
            Location::choose(None, None).unwrap(),
            etcd(&["127.0.0.1:2379"])
        );
    }

    #[test]
    fn lock_names() {
        for good in ["nightly", "db-maint", "a.b_c", "/locks/nightly", "jobs/x"] {
            assert!(check_lock_name(good).is_ok(), "{good}");
        }
        for bad in [
            "", "a b", "a//b", "a/", "/", "../x", "a/./b", "a\0b", "ä", "a\nb",
        ] {
            assert!(check_lock_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_lock_name(&"x".repeat(201)).is_err());
    }

    #[test]
    fn holder_record_round_trip() {
        let r = HolderRecord {
            identity: "web-1 \"primary\"".into(),
            hostname: "web-1".into(),
            pid: 42,
            command: vec!["sh".into(), "-c".into(), "echo\n".into()],
            started: "2026-01-01T00:00:00Z".into(),
            grace_ms: Some(5000),
            break_request: None,
        };
        assert_eq!(HolderRecord::from_json(r.to_json().as_bytes()), Some(r));
        assert_eq!(HolderRecord::from_json(b""), None);
    }
}
