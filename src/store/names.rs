//! Lock names and slot keys, alike on every store: what a user may name a
//! lock or a `--slot`, and the names of a lock's shards.

use std::fmt;
use std::ops::Deref;

use super::records::RECORD_SUFFIXES;

/// Why a name cannot be a lock's, a `--slot`'s or a holder's key: each a
/// one-line usage error, said as the user typed the name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("the lock name is empty")]
    Empty,
    #[error("the lock name is {len} bytes long; the limit is {max}")]
    TooLong { len: usize, max: usize },
    /// `shown` as typed, its controls escaped; `what` the first character
    /// no store takes.
    #[error(
        "the lock name '{shown}' contains {what}; use ASCII letters, digits, '.', '_', '-' and '/'"
    )]
    Character { shown: String, what: String },
    #[error("the lock name '{name}' has an empty segment")]
    EmptySegment { name: String },
    #[error("the lock name '{name}' has a '{segment}' segment")]
    DotSegment { name: String, segment: String },
    #[error(
        "the lock name '{name}' is reserved: a segment ending in '{suffix}' names a lock's record; choose another name"
    )]
    Record { name: String, suffix: &'static str },
    #[error(
        "the lock name '{name}' is reserved: '{segment}' names a shard; use --shard with the lock's own name"
    )]
    Shard { name: String, segment: String },
    /// A store's own limit on the length of what it makes of a name.
    #[error(
        "the lock name '{name}' is too long for {store}: its {what} would be {len} bytes; the limit is {max}"
    )]
    TooLongFor {
        name: String,
        store: &'static str,
        what: &'static str,
        len: usize,
        max: usize,
    },
    /// A holder's key that could be no holder's on the store: `key` as
    /// typed (escaped), `expected` what the store's keys are.
    #[error("the holder's key '{key}' is no {expected}")]
    HolderKey { key: String, expected: &'static str },
    #[error("--slot is empty: name the period, e.g. --slot \"$(date +%F)\"")]
    SlotEmpty,
    #[error("--slot is {len} bytes long; the limit is {max}")]
    SlotTooLong { len: usize, max: usize },
    #[error("--slot '{0}' is not a name")]
    SlotDots(String),
    /// The key escaped as typed, and the first character no slot takes.
    #[error("--slot '{key}' holds {c:?}: a slot takes letters, digits and . _ - :")]
    SlotCharacter { key: String, c: char },
}

/// A lock's name as checked for the store it is on: made only by
/// [`super::Location::lock_name`], so that a name that reaches a store has
/// passed the rules of every store ([`check_lock_name`]) and its own. It
/// reads as the `str` it is.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LockName(String);

impl LockName {
    /// `name`, checked by the caller.
    pub(super) fn checked(name: &str) -> LockName {
        LockName(name.to_string())
    }

    /// Shard `k` of this lock: a lock of its own under its name.
    pub fn shard(&self, k: u32) -> LockName {
        LockName(shard_lock(&self.0, k))
    }
}

impl Deref for LockName {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Lock names: segments of `[A-Za-z0-9._-]` separated by `/`, optionally
/// starting with `/` as etcd keys often do; no empty, `.` or `..` segments.
/// The name is used as a key prefix in every store, so it must mean the same
/// thing everywhere and never escape its place. Nor may it be, or sit under,
/// another lock's record or shard (a ZooKeeper container at `/x.checkpoint`
/// would be reaped with the checkpoint of `x` in it): no segment ends in a
/// record's suffix or is a shard's (`shard-K`).
pub fn check_lock_name(name: &str) -> Result<(), NameError> {
    check_syntax(name)?;
    let body = name.strip_prefix('/').unwrap_or(name);
    for segment in body.split('/') {
        if let Some(suffix) = RECORD_SUFFIXES.iter().find(|s| segment.ends_with(*s)) {
            return Err(NameError::Record {
                name: name.into(),
                suffix,
            });
        }
        if shard_segment(segment) {
            return Err(NameError::Shard {
                name: name.into(),
                segment: segment.into(),
            });
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
fn check_syntax(name: &str) -> Result<(), NameError> {
    const MAX: usize = 200;
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if name.len() > MAX {
        return Err(NameError::TooLong {
            len: name.len(),
            max: MAX,
        });
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
        return Err(NameError::Character { shown, what });
    }
    let body = name.strip_prefix('/').unwrap_or(name);
    for segment in body.split('/') {
        match segment {
            "" => return Err(NameError::EmptySegment { name: name.into() }),
            "." | ".." => {
                return Err(NameError::DotSegment {
                    name: name.into(),
                    segment: segment.into(),
                });
            }
            _ => {}
        }
    }
    Ok(())
}

/// The most shards a lock may have.
pub const MAX_SHARDS: u32 = 1024;

/// The lock of shard `k` of `lock`: an independent lock under its name.
pub fn shard_lock(lock: &str, k: u32) -> String {
    format!("{lock}/shard-{k}")
}

/// A `--slot` key: `[A-Za-z0-9._:-]`, at most 100 bytes, not `.` or `..`;
/// it names a record in every store (an etcd key, a ZooKeeper node, a file).
pub fn check_slot(key: &str) -> Result<(), NameError> {
    const MAX: usize = 100;
    if key.is_empty() {
        return Err(NameError::SlotEmpty);
    }
    if key.len() > MAX {
        return Err(NameError::SlotTooLong {
            len: key.len(),
            max: MAX,
        });
    }
    if key == "." || key == ".." {
        return Err(NameError::SlotDots(key.into()));
    }
    match key
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':')))
    {
        Some(c) => Err(NameError::SlotCharacter {
            key: key.escape_default().to_string(),
            c,
        }),
        None => Ok(()),
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
            let err = check_lock_name(reserved).unwrap_err().to_string();
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
        let err = check_lock_name("überweisung").unwrap_err().to_string();
        assert!(err.contains("'überweisung' contains 'ü'"), "{err}");
        let err = check_lock_name("a\nb").unwrap_err().to_string();
        assert!(err.contains("'a\\nb'") && !err.contains('\n'), "{err}");
    }
}
