//! What a lock's runs leave in the store, the same on every store (each
//! keeps only [`Record`]s, written under a [`Fence`]): the last run that
//! succeeded, for `--once-per`; one record per slot done, for `--slot`;
//! and the history of tenures, for `elect history` and `elect status`.
//!
//! A lock makes runs exclusive; cron users want them once. So a run that
//! exits 0 records its success while it still holds the lock, fenced by its
//! token, and the next holder looks for it before it starts its command. A
//! failed run records nothing, so that another host may try.
//!
//! The history is one small record per tenure, named by when it queued,
//! so that a write costs the same however long the history; the oldest
//! beyond `keep` are deleted while a command runs. A write is never on the
//! way from the lock to the command, and its failure is a warning, never
//! the run's.

use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::log;
use crate::store::Token;
use crate::store::{Fence, Put, Record, Store, StoreError, Versioned};

/// How many tenures a lock's history keeps unless told otherwise.
pub const KEEP: usize = 100;

/// How long a history write may take before it is given up with a warning.
pub const WRITE_WITHIN: Duration = Duration::from_secs(5);

/// How a tenure (or an attempt at one) ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// The command runs (or its elect died before it could say).
    Running,
    /// The command exited 0.
    Succeeded,
    /// The command exited with another code.
    Failed,
    /// The command was killed by a signal.
    Killed,
    /// The lease was lost and the command stopped.
    Lost,
    /// `elect break` asked the holder to let go.
    Broken,
    /// A run of this period had succeeded already: the command was not run.
    DoneBefore,
    /// Someone else held the lock: the command was not run.
    Busy,
    /// elect failed (the guard died, the command could not start).
    Error,
    /// elect died while the command ran; its guard stopped the command and
    /// released the lease, and recorded this.
    ElectDied,
    /// Recorded as running, but no longer the holder, and no holder since:
    /// its elect recorded no end (the store out of its reach, or elect and
    /// its guard killed). Once a later tenure exists it reads as
    /// [`Verdict::Lost`]. Only ever read, never written.
    Unrecorded,
}

impl Verdict {
    /// A run that did not run the command: the history keeps no record
    /// of it, so that a fleet's skipped hosts cost the store nothing of
    /// their own.
    pub fn skipped(self) -> bool {
        matches!(self, Verdict::Busy | Verdict::DoneBefore)
    }

    pub fn name(self) -> &'static str {
        match self {
            Verdict::Running => "running",
            Verdict::Succeeded => "succeeded",
            Verdict::Failed => "failed",
            Verdict::Killed => "killed",
            Verdict::Lost => "lost",
            Verdict::Broken => "broken",
            Verdict::DoneBefore => "done-before",
            Verdict::Busy => "busy",
            Verdict::Error => "error",
            Verdict::ElectDied => "elect-died",
            Verdict::Unrecorded => "unrecorded",
        }
    }
}

/// One tenure, or one attempt that never held the lock (busy).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tenure {
    pub lock: String,
    pub shard: Option<u32>,
    /// `None` for a run that never held the lock.
    pub token: Option<Token>,
    pub identity: String,
    pub host: String,
    pub pid: u32,
    /// RFC 3339 UTC, milliseconds: when elect began to ask for the lock,
    /// when the command started, when the tenure ended.
    pub queued: String,
    pub started: Option<String>,
    pub ended: Option<String>,
    pub outcome: Verdict,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// Why, where the outcome alone does not say (a lost lease, an error).
    pub why: Option<String>,
    /// With `--slot`: the slot.
    pub slot: Option<String>,
    /// Of a run that found the work done: when the run that did it ended.
    #[serde(skip)]
    pub done_ended: Option<SystemTime>,
}

/// A wall-clock time as the records keep it.
pub fn timestamp(at: SystemTime) -> String {
    humantime::format_rfc3339_millis(at).to_string()
}

fn parse_time(text: &str) -> Option<SystemTime> {
    humantime::parse_rfc3339_weak(text.trim_end_matches('Z')).ok()
}

impl Tenure {
    /// When it started, or else when it queued.
    pub fn began(&self) -> Option<SystemTime> {
        parse_time(self.started.as_deref().unwrap_or(&self.queued))
    }

    /// When the command started, if it did.
    pub fn started_at(&self) -> Option<SystemTime> {
        self.started.as_deref().and_then(parse_time)
    }

    /// When the tenure ended, if it has.
    pub fn ended_at(&self) -> Option<SystemTime> {
        self.ended.as_deref().and_then(parse_time)
    }

    /// "IDENTITY on HOST with token T", as a line names a holder.
    pub fn who(&self) -> String {
        let mut who = match self.identity == self.host {
            true => self.identity.clone(),
            false => format!("{} on {}", self.identity, self.host),
        };
        if let Some(token) = self.token {
            who.push_str(&format!(" with token {token}"));
        }
        who
    }

    /// How it ended, in words: "succeeded", "failed with exit code 3".
    pub fn how(&self) -> String {
        let mut how = match (self.outcome, self.exit_code, self.signal) {
            (Verdict::Failed, Some(code), _) => format!("failed with exit code {code}"),
            (Verdict::Killed, _, Some(sig)) => {
                format!("killed by {}", crate::supervisor::signal_name(sig))
            }
            (outcome, _, _) => outcome.name().to_string(),
        };
        if let Some(why) = &self.why {
            how.push_str(&format!(" ({why})"));
        }
        how
    }
}

/// What makes a run unnecessary: a success within a window, or a slot done.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Once {
    Per(Duration),
    Slot(String),
}

impl Once {
    /// The record that says this period (or slot) is done.
    pub fn record(&self) -> Record<'_> {
        match self {
            Once::Per(_) => Record::Done,
            Once::Slot(key) => Record::Slot(key),
        }
    }
}

/// The run that makes this one unnecessary, if there is one: read by the
/// holder of `lock`, before its command starts.
pub async fn done_before(
    store: &dyn Store,
    lock: &str,
    once: &Once,
) -> Result<Option<Tenure>, StoreError> {
    let record = store.record(lock, once.record()).await?;
    Ok(done_in(record, lock, once))
}

/// [`done_before`], with the record of the last success (or slot) read.
pub fn done_in(record: Option<Versioned>, lock: &str, once: &Once) -> Option<Tenure> {
    let record = record?;
    let Ok(done) = serde_json::from_str::<Tenure>(&record.value) else {
        log::verbose(format_args!(
            "the record of lock {lock}'s last success is not elect's; ignoring it"
        ));
        return None;
    };
    match once {
        Once::Slot(_) => Some(done),
        // By this machine's wall clock against the runner's: the window
        // moves by the skew between the two (a start "in the future", by a
        // runner's clock ahead of ours, is within it).
        Once::Per(window) => done
            .began()
            .is_some_and(|began| within(began, SystemTime::now(), *window))
            .then_some(done),
    }
}

/// Whether a run that began at `began` is less than `window` before `now`;
/// one that began after `now` (by a clock ahead of ours) is.
fn within(began: SystemTime, now: SystemTime, window: Duration) -> bool {
    now.duration_since(began).unwrap_or_default() < window
}

/// Record `done`'s success, while its holder (`key`, its token) still
/// holds the lock.
pub async fn record_success(
    store: &dyn Store,
    once: &Once,
    key: &str,
    done: &Tenure,
) -> Result<Put, StoreError> {
    let token = done.token.unwrap_or(Token::new(0));
    let value = crate::store::to_json(done);
    store
        .put_record(
            &done.lock,
            once.record(),
            &value,
            Fence::Holder { key, token },
        )
        .await
}

/// The history of `lock`, oldest first (empty if none).
pub async fn read(store: &dyn Store, lock: &str) -> Result<Vec<Tenure>, StoreError> {
    let mut entries: Vec<Tenure> = store
        .tenures(lock, true)
        .await?
        .into_iter()
        .filter_map(|(_, value)| serde_json::from_str(&value).ok())
        .collect();
    entries.sort_by_key(Tenure::began);
    Ok(entries)
}

/// What `status` shows of a lock's past, knowing who holds it now (its
/// token, whose own tenure is left out): the last tenure that ran the
/// command. Runs that did not leave no record (a skipped host writes
/// nothing); a record one of an earlier version left is passed over.
pub async fn last_run(
    store: &dyn Store,
    lock: &str,
    holder: Option<Token>,
) -> Result<Option<Tenure>, StoreError> {
    let entries = as_of(read(store, lock).await?, holder);
    Ok(entries
        .into_iter()
        .rev()
        .filter(|t| t.token.is_none() || t.token != holder)
        .find(|t| t.started.is_some()))
}

/// `entries` as they stand, knowing who holds the lock now (`holder`'s
/// token). A "running" tenure below a later one's token, or the holder's,
/// was lost: the lock passed on, so its lease ran out or was ended, and
/// its elect, which records every other end, could not. One that no
/// longer holds the lock with none after it ended unrecorded (so far).
pub fn as_of(mut entries: Vec<Tenure>, holder: Option<Token>) -> Vec<Tenure> {
    let last = entries.iter().filter_map(|e| e.token).chain(holder).max();
    for e in &mut entries {
        if e.outcome != Verdict::Running || (e.token.is_some() && e.token == holder) {
            continue;
        }
        match (e.token, last) {
            (Some(token), Some(last)) if token < last => {
                e.outcome = Verdict::Lost;
                e.why = Some(LOST_UNRECORDED.into());
            }
            _ => {
                e.outcome = Verdict::Unrecorded;
                e.why = Some(UNRECORDED.into());
            }
        }
    }
    entries
}

/// Why a tenure recorded as running no longer holds the lock, with no
/// later holder yet.
const UNRECORDED: &str = "its elect recorded no end: the store was out of its reach as the \
                          tenure ended, or elect and its guard were killed";

/// Why a tenure recorded as running, with a later holder, was lost.
const LOST_UNRECORDED: &str = "its lease ran out before its elect could record how the tenure \
                               ended (the store out of its reach, or elect and its guard killed)";

/// The name of a tenure's record in its lock's history: its queue time
/// first, so that ids sort by time; then its host and pid, which tell two
/// elects apart. Made only by [`id`]; it reads as the `str` it is.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct TenureId(String);

impl std::ops::Deref for TenureId {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

/// The id of `tenure`'s record.
pub fn id(tenure: &Tenure) -> TenureId {
    let ms = parse_time(&tenure.queued)
        .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis());
    let host: String = tenure
        .host
        .chars()
        .take(64)
        .map(
            |c| match c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                true => c,
                false => '_',
            },
        )
        .collect();
    TenureId(format!("{ms:013}-{host}-{}", tenure.pid))
}

/// Delete the oldest tenures of `lock` other than `mine` (the id of the
/// tenure about to be written) until at most `leave` others are left. Its
/// own record is never counted, written before or after the listing.
pub async fn trim(
    store: &dyn Store,
    lock: &str,
    leave: usize,
    mine: &TenureId,
) -> Result<(), StoreError> {
    let mut ids: Vec<String> = store
        .tenures(lock, false)
        .await?
        .into_iter()
        .map(|(id, _)| id)
        .filter(|id| **id != **mine)
        .collect();
    if ids.len() <= leave {
        return Ok(());
    }
    ids.sort();
    for id in &ids[..ids.len() - leave] {
        store.delete_record(lock, Record::Tenure(id)).await?;
    }
    Ok(())
}

/// Write `tenure` into its lock's history, one record of its own, and with
/// `trimmed` false keep the last `keep` (with it true, room was made before,
/// while the command ran). A "running" one is written only where none is:
/// a late one never hides how the tenure ended.
pub async fn note(
    store: &dyn Store,
    tenure: &Tenure,
    keep: usize,
    trimmed: bool,
) -> Result<(), StoreError> {
    if keep == 0 {
        return Ok(());
    }
    let value = crate::store::to_json(tenure);
    let fence = match tenure.outcome {
        Verdict::Running => Fence::Version(None),
        _ => Fence::Any,
    };
    let mine = id(tenure);
    store
        .put_record(&tenure.lock, Record::Tenure(&mine), &value, fence)
        .await?;
    if !trimmed {
        trim(store, &tenure.lock, keep - 1, &mine).await?;
    }
    Ok(())
}

/// [`note`], bounded, and a warning instead of a failure: the history never
/// holds up or fails a run. Whether it was noted.
pub async fn note_or_warn(store: &dyn Store, tenure: &Tenure, keep: usize, trimmed: bool) -> bool {
    match tokio::time::timeout(WRITE_WITHIN, note(store, tenure, keep, trimmed)).await {
        Ok(Ok(())) => true,
        Ok(Err(e)) => {
            log::warn(format_args!(
                "could not record the tenure in the history of lock {}: {e}",
                tenure.lock
            ));
            false
        }
        Err(_) => {
            log::warn(format_args!(
                "could not record the tenure in the history of lock {} within {}",
                tenure.lock,
                crate::clock::show(WRITE_WITHIN)
            ));
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenure(pid: u32, outcome: Verdict) -> Tenure {
        Tenure {
            lock: "l".into(),
            shard: None,
            token: Some(Token::new(7)),
            identity: "a".into(),
            host: "h".into(),
            pid,
            queued: timestamp(SystemTime::UNIX_EPOCH),
            started: None,
            ended: None,
            outcome,
            exit_code: None,
            signal: None,
            why: None,
            slot: None,
            done_ended: None,
        }
    }

    #[test]
    fn a_tenure_says_who_and_how() {
        let mut t = tenure(1, Verdict::Failed);
        t.exit_code = Some(3);
        assert_eq!(t.who(), "a on h with token 7");
        assert_eq!(t.how(), "failed with exit code 3");
        t.outcome = Verdict::Killed;
        t.signal = Some(9);
        assert_eq!(t.how(), "killed by SIGKILL");
        let json = serde_json::to_value(&t).unwrap();
        assert_eq!(json["outcome"], "killed");
        assert_eq!(json["exit_code"], 3);
    }

    #[test]
    fn a_window_is_judged_by_our_clock_and_a_start_ahead_of_it_is_within() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let hour = Duration::from_secs(3600);
        assert!(within(now - hour / 2, now, hour));
        assert!(!within(now - hour, now, hour));
        assert!(within(now + hour, now, hour));
    }

    #[test]
    fn times_read_back() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_millis(1_764_600_000_123);
        let mut t = tenure(1, Verdict::Running);
        t.started = Some(timestamp(at));
        assert_eq!(t.began(), Some(at));
    }
}
