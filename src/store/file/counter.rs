//! A lock's token counter, `NAME.token`: durable before a token is handed
//! out, for one write and one `fdatasync` per token.
//!
//! The file holds two slots of 32 bytes, each a line `COUNTER CHECKSUM`.
//! Token N is written into slot N % 2, in place, and synced; the other slot
//! still holds N − 1. A write torn by a crash can spoil only the slot it
//! was writing, whose token was never handed out (the command starts only
//! after the sync): a reader takes the larger of the valid slots, so tokens
//! never repeat. A file of the older layout (one line, `N`) is read as it
//! is and rewritten in the new one, atomically. A file that is neither is
//! corrupt: never a silent restart at 1.
//!
//! The counter's flock is taken for every new token, and also for every
//! write fenced by a holder's token ([`super::records`]), so that no token
//! can be handed out between such a write's check and its rename.

use std::fs::File;
use std::io::{ErrorKind as IoKind, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};

use super::dir::{Dir, open_nofollow};
use crate::store::StoreError;

/// The length of one slot.
const SLOT: usize = 32;

/// What a counter file holds.
#[derive(Debug, PartialEq, Eq)]
pub enum Counter {
    /// Two slots; the last token handed out.
    Slots(u64),
    /// The older layout, to be rewritten; the last token handed out.
    Line(u64),
}

/// Why a counter file cannot be trusted.
#[derive(Debug, PartialEq, Eq)]
pub struct Corrupt(pub String);

/// A checksum of a counter's value: a torn or stray write is caught.
fn checksum(n: u64) -> u32 {
    // FNV-1a over the value's bytes.
    let mut hash: u32 = 0x811c_9dc5;
    for byte in n.to_le_bytes() {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash
}

/// One slot holding `n`.
pub fn slot(n: u64) -> [u8; SLOT] {
    let mut out = [b' '; SLOT];
    let text = format!("{n:020} {:08x}", checksum(n));
    out[..text.len()].copy_from_slice(text.as_bytes());
    out[SLOT - 1] = b'\n';
    out
}

fn read_slot(bytes: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(bytes).ok()?.trim_end();
    let (n, sum) = text.split_once(' ')?;
    let n: u64 = n.parse().ok()?;
    (u32::from_str_radix(sum, 16).ok()? == checksum(n)).then_some(n)
}

/// What `bytes`, a counter file's content, says.
pub fn parse(bytes: &[u8]) -> Result<Counter, Corrupt> {
    if bytes.len() == 2 * SLOT {
        let (a, b) = bytes.split_at(SLOT);
        return match (read_slot(a), read_slot(b)) {
            (None, None) => Err(Corrupt("neither slot is valid".into())),
            (a, b) => Ok(Counter::Slots(a.max(b).unwrap_or(0))),
        };
    }
    let text = String::from_utf8_lossy(bytes);
    match text.trim().parse::<u64>() {
        Ok(n) if text.ends_with('\n') => Ok(Counter::Line(n)),
        _ => Err(Corrupt(format!("{:?}", text.trim()))),
    }
}

/// The content of a fresh counter file whose last token was `n`.
pub fn fresh(n: u64) -> Vec<u8> {
    [slot(n), slot(n)].concat()
}

/// Hand out the token after `last` from the open counter `file`: write it
/// into its slot and sync, before anyone sees it.
pub fn advance(file: &mut File, last: u64) -> std::io::Result<u64> {
    let next = last + 1;
    file.seek(SeekFrom::Start((next % 2) * SLOT as u64))?;
    file.write_all(&slot(next))?;
    file.sync_data()?;
    Ok(next)
}

/// Read the whole of an open counter file.
pub fn read(file: &mut File) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::with_capacity(2 * SLOT);
    file.seek(SeekFrom::Start(0))?;
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

impl Dir {
    /// The next token for `stem`, durable before it is returned, under the
    /// counter's flock (see [`Dir::put_checkpoint`]).
    pub(super) fn next_token(&self, stem: &str) -> Result<u64, StoreError> {
        let path = self.path(stem, ".token");
        let fail = |e: std::io::Error| {
            StoreError::config_io(&e, format!("token counter {}: {e}", path.display()))
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
                self.replace(stem, ".token", &fresh(0), true)
                    .map_err(fail)?;
                open().map_err(fail)?
            }
            opened => opened.map_err(fail)?,
        };
        file.lock().map_err(fail)?;
        let last = match parse(&read(&mut file).map_err(fail)?) {
            Ok(Counter::Slots(last)) => last,
            Ok(Counter::Line(last)) => {
                self.replace(stem, ".token", &fresh(last), true)
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
        advance(&mut file, last).map_err(fail)
    }

    /// The token counter of `stem`, under its flock (which every new token
    /// takes too), and the last token it handed out; `None` if the lock
    /// never had a holder.
    pub(super) fn locked_counter(&self, stem: &str) -> Result<Option<(File, u64)>, StoreError> {
        let path = self.path(stem, ".token");
        let fail = |e: std::io::Error| {
            StoreError::config_io(&e, format!("token counter {}: {e}", path.display()))
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
        match parse(&read(&mut counter).map_err(fail)?) {
            Ok(Counter::Slots(n) | Counter::Line(n)) => Ok(Some((counter, n))),
            Err(Corrupt(what)) => Err(StoreError::config(format!(
                "token counter {} is corrupt ({what})",
                path.display()
            ))),
        }
    }

    /// The last token handed out for `stem`, 0 if none.
    pub(super) fn counter(&self, stem: &str) -> Result<u64, StoreError> {
        let path = self.path(stem, ".token");
        let mut bytes = Vec::new();
        let read = open_nofollow(&path).and_then(|mut f| f.read_to_end(&mut bytes));
        match read {
            Ok(_) => match parse(&bytes) {
                Ok(Counter::Slots(n) | Counter::Line(n)) => Ok(n),
                Err(Corrupt(what)) => Err(StoreError::config(format!(
                    "token counter {} is corrupt ({what})",
                    path.display()
                ))),
            },
            Err(e) if e.kind() == IoKind::NotFound => Ok(0),
            Err(e) => Err(StoreError::config_io(
                &e,
                format!("token counter {}: {e}", path.display()),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_larger_valid_slot_wins_and_a_torn_one_is_ignored() {
        let both = [slot(41), slot(42)].concat();
        assert_eq!(parse(&both), Ok(Counter::Slots(42)));
        let swapped = [slot(43), slot(42)].concat();
        assert_eq!(parse(&swapped), Ok(Counter::Slots(43)));
        // A crash in the middle of writing 43 over slot 1's 41.
        let mut torn = [slot(43), slot(42)].concat();
        torn[5..20].copy_from_slice(&slot(41)[5..20]);
        assert_eq!(parse(&torn), Ok(Counter::Slots(42)));
        // Zeros where a write had not yet landed.
        let mut zeroed = [slot(43), slot(42)].concat();
        zeroed[..SLOT].fill(0);
        assert_eq!(parse(&zeroed), Ok(Counter::Slots(42)));
        assert_eq!(parse(&fresh(0)), Ok(Counter::Slots(0)));
    }

    #[test]
    fn the_older_layout_is_read_and_anything_else_is_corrupt() {
        assert_eq!(parse(b"41\n"), Ok(Counter::Line(41)));
        assert!(parse(b"garbage").is_err());
        assert!(parse(b"").is_err(), "an empty file is not a fresh counter");
        assert!(parse(&[b'x'; 2 * SLOT]).is_err());
        assert!(parse(b"4").is_err(), "a line cut short");
    }
}
