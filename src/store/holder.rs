//! What every store reports about a lock's holder: the holder record elect
//! writes beside each lease, and what `status`, `check` and `break` find.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Token;
use super::records::to_json;

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

/// What a store knows of one shard before an instance picks one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Owner {
    /// Someone holds it now.
    pub held: bool,
    /// The identity of its last holder, where the store keeps it.
    pub last: Option<String>,
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
