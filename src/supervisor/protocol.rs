//! What elect and its guard process tell each other: the orders the guard
//! starts with, then messages over a Unix socket pair.
//!
//! Each message is 16 bytes: a tag and a value, in native byte order (both
//! ends are the same binary on the same machine).
//!
//! The guard and the command's process it forks ([`super::launch`]) both
//! read the orders, so they live here, where neither depends on the other.

use std::ffi::OsString;
use std::time::Duration;

use nix::sys::signal::Signal;

/// What the guard is told when it starts.
pub struct Orders {
    pub signal: Signal,
    pub grace: Duration,
    pub command: Vec<OsString>,
    /// Variables to set in the command's environment, over inherited ones
    /// (a guard started by exec has them in its own environment already).
    pub set_env: Vec<(String, String)>,
    /// Inherited variables the command must not see.
    pub remove_env: Vec<String>,
}

pub const SIZE: usize = 16;

/// The most descriptors that hold one lock (sent with [`Message::Token`]),
/// and the most any message carries (the handover's deadline carries 2).
pub const MAX_HELD: usize = 4;

/// elect → guard and guard → elect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Message {
    /// elect: a renewal made the lease safe until this boot-clock instant
    /// (ns). With the handover, it carries the two descriptors that later
    /// deadlines come by ([`super::deadline`]); after it, it is sent only
    /// when those fail.
    Deadline(u64),
    /// elect: the lease is lost; stop the child now, with SIGKILL after at
    /// most this grace (ns).
    Stop(u64),
    /// elect: forward this signal to the child's process group.
    Signal(i32),
    /// elect: the lock is ours; start the command with this fencing token.
    /// It carries the descriptors that hold the lock, if any (SCM_RIGHTS).
    Token(u64),
    /// elect: elect was told to stop (SIGTSTP); stop the command with it.
    Suspend,
    /// elect: elect was continued (`fg`, `bg`, SIGCONT); so is the command.
    Resume,
    /// elect: the next this many bytes are variables for the command's
    /// environment, `NAME=VALUE` each followed by a NUL.
    Env(u64),
    /// elect: the next this many bytes are the order that ends the session
    /// from another process, should elect die while the command runs.
    Order(u64),
    /// guard: the child runs with this pid, in this process group (the
    /// sentinel's pid).
    Started { pid: i32, group: i32 },
    /// guard: the child could not be started; the errno.
    SpawnFailed(i32),
    /// guard: the child was not started: elect said stop, or the deadline
    /// minus the grace had passed when the guard came to start it.
    NotStarted,
    /// guard: the stop has begun, for this reason.
    Stopping(Stop),
    /// guard: the child exited with this code.
    Exited(i32),
    /// guard: the child was killed by this signal.
    Killed(i32),
}

impl Message {
    pub fn stop(grace: Duration) -> Message {
        Message::Stop(u64::try_from(grace.as_nanos()).unwrap_or(u64::MAX))
    }

    pub fn encode(self) -> [u8; SIZE] {
        let (tag, value): (u64, u64) = match self {
            Message::Deadline(ns) => (1, ns),
            Message::Stop(grace) => (2, grace),
            Message::Signal(n) => (3, n as u64),
            Message::Started { pid, group } => {
                (4, u64::from(pid as u32) | u64::from(group as u32) << 32)
            }
            Message::SpawnFailed(errno) => (5, errno as u64),
            Message::Stopping(why) => (6, why as u64),
            Message::Exited(code) => (7, code as u64),
            Message::Killed(sig) => (8, sig as u64),
            Message::Token(token) => (9, token),
            Message::Suspend => (10, 0),
            Message::Resume => (11, 0),
            Message::Order(len) => (12, len),
            Message::Env(len) => (13, len),
            Message::NotStarted => (14, 0),
        };
        let mut out = [0u8; SIZE];
        out[..8].copy_from_slice(&tag.to_ne_bytes());
        out[8..].copy_from_slice(&value.to_ne_bytes());
        out
    }

    pub fn decode(bytes: &[u8; SIZE]) -> Option<Self> {
        let tag = u64::from_ne_bytes(bytes[..8].try_into().ok()?);
        let value = u64::from_ne_bytes(bytes[8..].try_into().ok()?);
        let small = value as i32;
        Some(match tag {
            1 => Message::Deadline(value),
            2 => Message::Stop(value),
            3 => Message::Signal(small),
            4 => Message::Started {
                pid: small,
                group: (value >> 32) as i32,
            },
            5 => Message::SpawnFailed(small),
            6 => Message::Stopping(if value == Stop::ExpiredWhileStopped as u64 {
                Stop::ExpiredWhileStopped
            } else {
                Stop::Deadline
            }),
            7 => Message::Exited(small),
            8 => Message::Killed(small),
            9 => Message::Token(value),
            10 => Message::Suspend,
            11 => Message::Resume,
            12 => Message::Order(value),
            13 => Message::Env(value),
            14 => Message::NotStarted,
            _ => return None,
        })
    }
}

/// Why the guard began to stop the command on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// The deadline passed without a renewal.
    Deadline = 0,
    /// The deadline passed while elect's job was stopped (Ctrl-Z, SIGTSTP):
    /// the stopped command is killed without being resumed.
    ExpiredWhileStopped = 1,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        for m in [
            Message::Deadline(u64::MAX - 1),
            Message::Stop(1_500_000_000),
            Message::Signal(15),
            Message::Started {
                pid: 4_194_304,
                group: 4_194_303,
            },
            Message::SpawnFailed(2),
            Message::Stopping(Stop::Deadline),
            Message::Stopping(Stop::ExpiredWhileStopped),
            Message::Exited(255),
            Message::Killed(9),
            Message::Token(u64::MAX),
            Message::Suspend,
            Message::Resume,
            Message::Order(4096),
            Message::Env(17),
            Message::NotStarted,
        ] {
            assert_eq!(Message::decode(&m.encode()), Some(m));
        }
        assert_eq!(Message::decode(&[0xff; SIZE]), None);
    }
}
