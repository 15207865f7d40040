//! A turn's chronicle: its tenure in the lock's history, the metrics file
//! and the `--on-end` hook. It follows the turn's steps and takes the
//! verdict from how the turn ended; no phase writes the history or a
//! report. (The last success of `--once-per` is the holding phase's own:
//! it decides later runs, so it is written while the lock is ours.)
//!
//! The history never stands in the next holder's way: room is made (the
//! trim) once the lock is ours, beside the handover and the command; a
//! command that runs a second is written in as running; the end is written
//! beside the release, within its bound; the reports come after it.

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, SystemTime};

use nix::sys::signal::Signal;

use super::Job;
use super::standing::Step;
use super::turn::{Skip, TurnEnd};
use crate::clock::show;
use crate::exit::Outcome;
use crate::history::{self, Tenure, Verdict};
use crate::log;
use crate::store::{Boxed, Store, Token};
use crate::supervisor::Ending;

/// How long a command runs before its tenure is written into the history
/// as running: a short one is written once, when it ends.
const NOTE_RUNNING_AFTER: Duration = Duration::from_secs(1);

pub(super) struct Chronicle<'j> {
    job: &'j Job,
    store: &'j dyn Store,
    /// When the turn began.
    queued: SystemTime,
    /// The tenure, from the moment the lock is ours.
    tenure: Option<Tenure>,
    /// The command was handed the lock and has not started yet.
    handed: bool,
    /// Room in the history for the tenure, in the making, and whether it
    /// was made: the write at the end is then one request.
    trim: Option<Boxed<'j, ()>>,
    room: Rc<Cell<bool>>,
    /// The note of a command still running, due a second after its start.
    running: Option<Boxed<'j, ()>>,
}

impl<'j> Chronicle<'j> {
    pub fn new(job: &'j Job, store: &'j dyn Store) -> Chronicle<'j> {
        Chronicle {
            job,
            store,
            queued: SystemTime::now(),
            tenure: None,
            handed: false,
            trim: None,
            room: Rc::default(),
            running: None,
        }
    }

    /// Follow the turn to `step`: the lock ours begins the tenure and the
    /// trim, a command started arms its note as running.
    pub fn observe(&mut self, step: &Step) {
        match step {
            Step::Acquired { shard, token } => self.acquired(*shard, *token),
            Step::Started => self.started(),
            _ => {}
        }
    }

    fn acquired(&mut self, shard: Option<u32>, token: Token) {
        let tenure = self.job.tenure(self.queued, shard, Some(token));
        let keep = self.job.keep_history;
        let (store, lock, mine) = (self.store, tenure.lock.clone(), history::id(&tenure));
        let room = self.room.clone();
        room.set(false);
        self.trim = (keep > 0).then(|| {
            Box::pin(async move {
                let trimmed = history::trim(store, &lock, keep - 1, &mine).await;
                room.set(trimmed.is_ok());
            }) as Boxed<'j, ()>
        });
        self.tenure = Some(tenure);
    }

    fn started(&mut self) {
        let Some(tenure) = &mut self.tenure else {
            return;
        };
        self.handed = false;
        let keep = self.job.keep_history;
        if keep == 0 {
            return;
        }
        let (store, running) = (self.store, tenure.clone());
        self.running = Some(Box::pin(async move {
            tokio::time::sleep(NOTE_RUNNING_AFTER).await;
            history::note_or_warn(store, &running, keep, true).await;
        }));
    }

    /// The lock is being handed to the command: the tenure as it will
    /// run, for the guard's release order, and the metrics file says so
    /// before the command can look.
    pub fn starting(&mut self) -> &Tenure {
        let (job, queued) = (self.job, self.queued);
        let tenure = self
            .tenure
            .get_or_insert_with(|| job.tenure(queued, None, None));
        tenure.started = Some(history::timestamp(SystemTime::now()));
        self.handed = true;
        job.reports.started(tenure);
        tenure
    }

    /// The tenure, once the lock is ours.
    pub fn tenure(&self) -> Option<&Tenure> {
        self.tenure.as_ref()
    }

    /// The writes under way (the trim, the note as running), each driven
    /// to its end: a select arm beside the handover and the command that
    /// never ends, and never loses its place when another arm wins.
    pub async fn writes(&mut self) {
        tokio::join!(
            drive_to_end(&mut self.trim),
            drive_to_end(&mut self.running)
        );
        std::future::pending().await
    }

    /// The turn ended as `end`: its tenure into the history, beside the
    /// trim if that is still on its way, within `within` (a store that
    /// cannot take the release cannot take the history either). A skipped
    /// run writes nothing of its own.
    pub async fn close(&mut self, end: &TurnEnd, within: Duration) {
        self.running = None;
        let Some(tenure) = &mut self.tenure else {
            return;
        };
        if self.handed {
            tenure.started = None;
        }
        finish(tenure, end);
        if tenure.outcome.skipped() {
            return;
        }
        let (store, keep, tenure) = (self.store, self.job.keep_history, &*tenure);
        let (trim, room) = (&mut self.trim, &self.room);
        let noting = async {
            if trim.is_none() && !room.get() {
                history::note_or_warn(store, tenure, keep, false).await;
                return;
            }
            let ((), noted) = tokio::join!(
                drive_to_end(trim),
                history::note_or_warn(store, tenure, keep, true)
            );
            // The trim failed where the write went through: once more,
            // trimming as it writes (else its warning said it: one line
            // is enough).
            if noted && !room.get() {
                history::note_or_warn(store, tenure, keep, false).await;
            }
        };
        if tokio::time::timeout(within, noting).await.is_err() {
            log::warn(format_args!(
                "could not record the tenure in the history of lock {} within {}",
                tenure.lock,
                show(within)
            ));
        }
    }

    /// The metrics file and the hook, once the lock is let go.
    pub async fn report(&self, end: &TurnEnd) {
        if !self.job.reports.any() {
            return;
        }
        // Closed already, or a turn that never held the lock.
        let tenure = self.tenure.clone().unwrap_or_else(|| {
            let mut tenure = self.job.tenure(self.queued, None, None);
            finish(&mut tenure, end);
            tenure
        });
        self.job.reports.ended(&tenure).await;
    }
}

/// The tenure as the turn ended: its verdict follows from `end` alone.
pub(super) fn finish(tenure: &mut Tenure, end: &TurnEnd) {
    tenure.ended = Some(history::timestamp(SystemTime::now()));
    let exited = |tenure: &mut Tenure, code: i32| {
        tenure.exit_code = Some(code);
        tenure.outcome = match code {
            0 => Verdict::Succeeded,
            _ => Verdict::Failed,
        };
    };
    let killed = |tenure: &mut Tenure, sig: i32| {
        tenure.signal = Some(sig);
        tenure.outcome = Verdict::Killed;
    };
    match end {
        TurnEnd::Lost { why, asked } => {
            tenure.outcome = match asked {
                true => Verdict::Broken,
                false => Verdict::Lost,
            };
            tenure.why = Some(why.clone());
        }
        TurnEnd::NotStarted => {
            tenure.outcome = Verdict::Lost;
            tenure.why = Some("lost as the command was about to start".into());
        }
        TurnEnd::Outlived(sig) => {
            killed(tenure, Signal::SIGKILL as i32);
            tenure.why = Some(format!("it did not end within --grace of {sig}"));
        }
        TurnEnd::Skipped(_, Skip::Busy) => tenure.outcome = Verdict::Busy,
        TurnEnd::Skipped(_, Skip::DoneBefore { by, ended }) => {
            tenure.outcome = Verdict::DoneBefore;
            tenure.done_ended = *ended;
            tenure.why = Some(by.clone());
        }
        TurnEnd::Ended(Ending::Exited(code)) => exited(tenure, *code),
        TurnEnd::Ended(Ending::Killed(sig)) => killed(tenure, *sig),
        TurnEnd::Done(Outcome::Exit(code)) => exited(tenure, i32::from(*code)),
        TurnEnd::Done(Outcome::Raise(sig)) => killed(tenure, *sig),
        TurnEnd::Done(Outcome::Fail(failure)) => {
            tenure.outcome = Verdict::Error;
            tenure.why = Some(failure.message.clone());
        }
    }
}

/// Drive `work` to its end, if it has one left, and leave it done: polled
/// again after another select arm won, it goes on where it was.
async fn drive_to_end(work: &mut Option<Boxed<'_, ()>>) {
    if let Some(future) = work {
        future.await;
        *work = None;
    }
}
