//! What every store records and reports about a lock: the lock names all
//! stores accept, the holder record elect writes beside each lease, and what
//! `status`, `check` and `break` find.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Token;

/// What a store keeps of a lock beside its queue, named after the lock:
/// `NAME.checkpoint`, `NAME.shards`, `NAME.last`, and the [`Record`]s.
pub const RECORD_SUFFIXES: [&str; 6] = [
    ".checkpoint",
    ".shards",
    ".last",
    ".done",
    ".slots",
    ".history",
];

/// A record elect keeps beside a lock alike on every store: what they
/// mean and the rules for writing them are [`super::records`]' and
/// [`crate::history`]'s; where each lives is its store's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record<'a> {
    /// The progress a holder committed ([`Checkpoint`] as JSON), written
    /// fenced by its token.
    Checkpoint,
    /// The number of shards of a sharded lock, written once, by the first.
    Shards,
    /// The identity of the last holder of a shard.
    Last,
    /// The last run that succeeded.
    Done,
    /// Each `--slot` done.
    Slot(&'a str),
    /// One tenure in the lock's history, by its id ([`crate::history`]).
    Tenure(&'a str),
}

impl Record<'_> {
    /// Its name beside the lock's: `.checkpoint`, `.shards`, `.last`,
    /// `.done`, `.slots/KEY`, `.history/ID`.
    pub fn suffix(&self) -> String {
        match self {
            Record::Checkpoint => ".checkpoint".into(),
            Record::Shards => ".shards".into(),
            Record::Last => ".last".into(),
            Record::Done => ".done".into(),
            Record::Slot(key) => format!(".slots/{key}"),
            Record::Tenure(id) => format!("{HISTORY}{id}"),
        }
    }
}

/// Where a lock's history lives beside it: one record per tenure under it.
pub const HISTORY: &str = ".history/";

/// A `--slot` key: `[A-Za-z0-9._:-]`, at most 100 bytes, not `.` or `..`;
/// it names a record in every store (an etcd key, a ZooKeeper node, a file).
/// `value` as JSON: what elect writes of its own records, plain data of
/// strings, numbers and lists, which always serializes.
pub fn to_json(value: &impl Serialize) -> String {
    #[allow(
        clippy::expect_used,
        reason = "serde_json fails only on maps with non-string keys or a failing Serialize impl; these records have neither"
    )]
    serde_json::to_string(value).expect("a record of plain data serializes")
}

pub fn check_slot(key: &str) -> Result<(), String> {
    const MAX: usize = 100;
    if key.is_empty() {
        return Err("--slot is empty: name the period, e.g. --slot \"$(date +%F)\"".into());
    }
    if key.len() > MAX {
        return Err(format!(
            "--slot is {} bytes long; the limit is {MAX}",
            key.len()
        ));
    }
    if key == "." || key == ".." {
        return Err(format!("--slot '{key}' is not a name"));
    }
    match key
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':')))
    {
        Some(c) => Err(format!(
            "--slot '{}' holds {:?}: a slot takes letters, digits and . _ - :",
            key.escape_default(),
            c
        )),
        None => Ok(()),
    }
}

/// Lock names: segments of `[A-Za-z0-9._-]` separated by `/`, optionally
/// starting with `/` as etcd keys often do; no empty, `.` or `..` segments.
/// The name is used as a key prefix in every store, so it must mean the same
/// thing everywhere and never escape its place. Nor may it be, or sit under,
/// another lock's record or shard (a ZooKeeper container at `/x.checkpoint`
/// would be reaped with the checkpoint of `x` in it): no segment ends in a
/// record's suffix or is a shard's (`shard-K`).
pub fn check_lock_name(name: &str) -> Result<(), String> {
    check_syntax(name)?;
    let body = name.strip_prefix('/').unwrap_or(name);
    for segment in body.split('/') {
        if let Some(suffix) = RECORD_SUFFIXES.iter().find(|s| segment.ends_with(*s)) {
            return Err(format!(
                "the lock name '{name}' is reserved: a segment ending in '{suffix}' names a lock's record; choose another name"
            ));
        }
        if shard_segment(segment) {
            return Err(format!(
                "the lock name '{name}' is reserved: '{segment}' names a shard; use --shard with the lock's own name"
            ));
        }
    }
    Ok(())
}

/// A lock as elect names it: one a user may name, or a shard of one.
pub fn is_lock_or_shard(name: &str) -> bool {
    match name.rsplit_once('/') {
        Some((lock, last)) if shard_segment(last) => check_lock_name(lock).is_ok(),
        _ => check_lock_name(name).is_ok(),
    }
}

/// `shard-K`, as [`shard_lock`] names shard K.
fn shard_segment(segment: &str) -> bool {
    segment
        .strip_prefix("shard-")
        .is_some_and(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()))
}

/// The characters and segments every store can take.
fn check_syntax(name: &str) -> Result<(), String> {
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
        // As typed, letters of any script included; only what would break
        // the line (controls) is escaped.
        let shown: String = name
            .chars()
            .map(|c| match c.is_control() {
                true => c.escape_default().to_string(),
                false => c.to_string(),
            })
            .collect();
        let what = match c.is_control() {
            true => format!("the control character {}", c.escape_default()),
            false => format!("'{c}'"),
        };
        return Err(format!(
            "the lock name '{shown}' contains {what}; use ASCII letters, digits, '.', '_', '-' and '/'"
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
    /// When it got the lock, RFC 3339 UTC, where the store has recorded it
    /// (etcd records it a second after, off the path to the command).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acquired: Option<String>,
    /// The holder's `--grace`, in ms: how long its command may run on
    /// after its lease was ended by force.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_ms: Option<u64>,
    /// The holder's `--ttl`, in ms: by then after its last renewal its
    /// command is dead, whether or not its elect answers (`elect break`
    /// waits that long at most).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// Set by `elect break`: who asked the holder to let go, and when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub break_request: Option<String>,
    /// For a shard of a lock run with `--shards`: which one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<u32>,
}

impl HolderRecord {
    /// Since when it holds the lock: when it got it, if recorded, else when
    /// it joined the queue.
    pub fn since(&self) -> &str {
        self.acquired.as_deref().unwrap_or(&self.started)
    }

    /// The record of a holder that got the lock now.
    pub fn acquired_now(&self) -> HolderRecord {
        HolderRecord {
            acquired: Some(
                humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            ),
            ..self.clone()
        }
    }

    pub fn to_json(&self) -> String {
        to_json(self)
    }

    /// Whether this holder's elect ran on this host and its process is
    /// gone (a pid reused since passes for alive).
    pub fn gone_from_this_host(&self) -> bool {
        let here = nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok());
        let Ok(pid) = i32::try_from(self.pid) else {
            return false;
        };
        here.as_deref() == Some(self.hostname.as_str())
            && pid > 0
            && nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None)
                == Err(nix::errno::Errno::ESRCH)
    }

    /// A record read back from the store, or `None` if another tool wrote it.
    pub fn from_json(bytes: &[u8]) -> Option<Self> {
        serde_json::from_slice(bytes).ok()
    }
}

/// The most shards a lock may have.
pub const MAX_SHARDS: u32 = 1024;

/// The lock of shard `k` of `lock`: an independent lock under its name.
pub fn shard_lock(lock: &str, k: u32) -> String {
    format!("{lock}/shard-{k}")
}

/// What a store knows of one shard before an instance picks one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Owner {
    /// Someone holds it now.
    pub held: bool,
    /// The identity of its last holder, where the store keeps it.
    pub last: Option<String>,
}

/// The largest checkpoint a store keeps: a checkpoint is a position to
/// resume from (an offset, a key, a little JSON), not the work's data.
pub const CHECKPOINT_MAX: usize = 64 * 1024;

/// The largest checkpoint handed to the command in `ELECT_CHECKPOINT`; a
/// larger one is read with `elect checkpoint get`.
pub const CHECKPOINT_IN_ENV_MAX: usize = 4096;

/// The progress a holder committed for the next one to resume from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub value: String,
    /// The token of the holder that wrote it.
    pub token: Token,
    /// When it was written, RFC 3339 UTC.
    pub at: String,
}

impl Checkpoint {
    /// A checkpoint written now by the holder of `token`.
    pub fn now(value: String, token: Token) -> Checkpoint {
        Checkpoint {
            value,
            token,
            at: humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
        }
    }

    pub fn to_json(&self) -> String {
        to_json(self)
    }

    pub fn from_json(bytes: &[u8]) -> Option<Self> {
        serde_json::from_slice(bytes).ok()
    }
}

/// What `elect checkpoint put` found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Put {
    Stored,
    /// The caller no longer holds the lock, and why (naming the newer token).
    Stale(String),
}

/// What `elect break` writes into a holder's record: who asks, and when.
pub fn break_request() -> String {
    format!(
        "elect break from {} (pid {}) at {}",
        nix::unistd::gethostname()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_default(),
        std::process::id(),
        humantime::format_rfc3339_seconds(std::time::SystemTime::now())
    )
}

/// The current holder of a lock, as seen by anyone.
#[derive(Clone, Debug)]
pub struct Holder {
    pub key: String,
    pub token: Token,
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

impl Check {
    /// Whether the holder of `key` with `token` is `holder`, the holder of
    /// `lock` by an up-to-date read.
    pub fn of(lock: &str, key: &str, token: Token, holder: Option<Holder>) -> Check {
        match holder {
            Some(h) if h.key == key && h.token == token => Check::Holder,
            Some(h) if h.key == key => Check::NotHolder(format!(
                "{key} holds the lock with token {}, not {token}",
                h.token
            )),
            Some(h) => Check::NotHolder(format!("the lock is held by {h}")),
            None => Check::NotHolder(format!("lock {lock} is free; {key} is gone")),
        }
    }
}

/// What `elect break` did.
#[derive(Clone, Debug)]
pub enum Broken {
    /// The holder stopped its command and let go, this long after it was asked.
    Stopped { holder: Holder, after: Duration },
    /// Nobody let go: the holder's lease ran out, this long after it was
    /// asked (its elect was gone, or frozen, and its guard stopped the
    /// command at its deadline).
    Expired { holder: Holder, after: Duration },
    /// The holder's lease was ended while its command may still run; the
    /// next in line kept out this long, if the store does.
    Forced {
        holder: Holder,
        why: Forced,
        kept_out: Option<Duration>,
    },
    /// Nobody held the lock.
    Free,
    /// The holder is not the one with the expected token.
    Changed(Holder),
}

/// Why `elect break` ended a lease without waiting for its holder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forced {
    /// `--force`.
    ForceFlag,
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
                r.identity,
                r.pid,
                r.hostname,
                r.since(),
                self.token
            ),
            None => write!(
                f,
                "{} (not written by elect, token {})",
                self.key, self.token
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        for reserved in [
            "x.checkpoint",
            "x.shards",
            "x.last",
            "x/shard-0",
            "/a/x.last/b",
            "x/shard-12/y",
        ] {
            let err = check_lock_name(reserved).unwrap_err();
            assert!(err.contains("is reserved"), "{reserved}: {err}");
        }
        for fine in [
            "x.checkpoints",
            "last",
            "x/shard",
            "x/shard-a",
            "x/shards-0",
        ] {
            assert!(check_lock_name(fine).is_ok(), "{fine}");
        }
        assert!(is_lock_or_shard("x/shard-3") && is_lock_or_shard("x"));
        assert!(!is_lock_or_shard("x/shard-3/shard-1") && !is_lock_or_shard("x.last"));
        let err = check_lock_name("überweisung").unwrap_err();
        assert!(err.contains("'überweisung' contains 'ü'"), "{err}");
        let err = check_lock_name("a\nb").unwrap_err();
        assert!(err.contains("'a\\nb'") && !err.contains('\n'), "{err}");
    }
    #[test]
    fn holder_record_round_trip() {
        let r = HolderRecord {
            identity: "web-1 \"primary\"".into(),
            hostname: "web-1".into(),
            pid: 42,
            command: vec!["sh".into(), "-c".into(), "echo\n".into()],
            started: "2026-01-01T00:00:00Z".into(),
            acquired: None,
            grace_ms: Some(5000),
            ttl_ms: Some(15000),
            break_request: None,
            shard: Some(3),
        };
        assert_eq!(HolderRecord::from_json(r.to_json().as_bytes()), Some(r));
        assert_eq!(HolderRecord::from_json(b""), None);
    }
}
