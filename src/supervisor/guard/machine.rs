//! What the guard does next: a pure function of where it stands, what it
//! just observed and the time on its clock, with no system call in it.
//!
//! The guard's loop ([`super`]) waits for the next event (a message from
//! elect, a change in the command, its timer), asks [`Rules::step`] what
//! follows, and performs the actions it gets back, in order; an action that
//! waits (reaping the command, emptying its group) yields the next event.
//! The decisions that keep the lease safe (when the command gets its signal,
//! when SIGKILL, that a stop is final, that a command stopped with elect's
//! job is never resumed past its deadline, that the session is released
//! only once none of the group can run) are here, where they are tested on
//! made-up instants.

use std::time::Duration;

use nix::sys::signal::Signal;

use crate::clock::Instant;
use crate::supervisor::Ending;
use crate::supervisor::protocol::{Message, Stop};

/// How the command is stopped, as the guard was told at its start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rules {
    /// The command's signal: at the deadline minus the grace, or when elect
    /// says stop.
    pub signal: Signal,
    /// How long the command has between its signal and SIGKILL.
    pub grace: Duration,
}

/// Where the guard stands in the command's life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// The lock is ours and the command not started yet; renewals move the
    /// deadline on.
    Starting { deadline: Instant },
    /// elect said stop, or went away, before the command started: it never
    /// will.
    CalledOff,
    /// The command runs under the lease: its signal is due at the deadline
    /// minus the grace.
    Running {
        deadline: Instant,
        job_state: JobState,
    },
    /// Its signal went out; SIGKILL is due at this instant, never after the
    /// deadline. Final: no renewal un-stops it.
    Stopping { kill_at: Instant },
    /// SIGKILL went out; waiting for the command to end.
    Killed,
    /// The command ended, or is made to: what was left of its group is
    /// killed, and the command is being reaped.
    Reaping { then: Then },
    /// The command was reaped, ending so; its group is killed until none of
    /// it can run.
    Emptying { end: Ending, then: Then },
    /// Nothing left to do.
    Over,
}

/// The command under the lease, as job control left it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobState {
    /// Not stopped, as far as its last SIGCHLD said.
    Going,
    /// Stopped, though not with elect's job (a signal to its group, or a
    /// stop while it had no terminal): left so. At the deadline it gets its
    /// signal, and SIGCONT to act on it, as a running one does.
    Stopped,
    /// Suspended with elect's job (sent SIGTSTP), but not seen stopped: it
    /// may ignore the signal, or someone continued it.
    Suspending,
    /// Stopped with elect's job: continued when elect is, or, if the
    /// deadline passes first, killed without being resumed.
    Suspended,
}

impl JobState {
    fn of(stopped: bool, suspended: bool) -> JobState {
        match (stopped, suspended) {
            (false, false) => JobState::Going,
            (true, false) => JobState::Stopped,
            (false, true) => JobState::Suspending,
            (true, true) => JobState::Suspended,
        }
    }

    /// Its last SIGCHLD said it stopped.
    fn stopped(self) -> bool {
        matches!(self, JobState::Stopped | JobState::Suspended)
    }

    /// It was stopped with elect's job, which is not continued yet.
    fn suspended(self) -> bool {
        matches!(self, JobState::Suspending | JobState::Suspended)
    }
}

/// What follows once none of the command's group can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Then {
    /// Report how the command ended and exit: elect then releases the lock.
    Exit,
    /// elect is gone: report (to nobody, most likely), then end its
    /// session from here, so that the next holder need not wait for the
    /// lease to expire.
    Release,
}

impl Ending {
    /// What elect is told.
    pub fn report(self) -> Message {
        match self {
            Ending::Exited(code) => Message::Exited(code),
            Ending::Killed(sig) => Message::Killed(sig),
        }
    }
}

/// What the guard observed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// The clock was looked at: on each turn of the watch, so also when the
    /// timer set for [`State::alarm`] fired.
    Clock,
    /// All that elect sent before the command's start is in: start it, or
    /// not.
    Ready,
    /// elect: a renewal made the lease safe until this instant.
    Renewed(Instant),
    /// elect: the lease is lost; stop the command, with SIGKILL after at
    /// most this grace.
    Stop(Duration),
    /// elect: pass this signal on to the command.
    Forward(Signal),
    /// elect: its job was stopped (Ctrl-Z, SIGTSTP); the command stops too.
    Suspend,
    /// elect: its job was continued (`fg`, `bg`, SIGCONT); so is the
    /// command.
    Resume,
    /// elect's end of the socket closed: nobody keeps the lease.
    ElectGone,
    /// The command stopped; `had_terminal`: its group was the terminal's
    /// foreground (Ctrl-Z, or it read the terminal from the background).
    CommandStopped { had_terminal: bool },
    /// The command was continued.
    CommandContinued,
    /// The command, the group's leader, exited; not reaped yet.
    CommandExited,
    /// The guard can no longer keep the deadline (its timer or its poll
    /// failed).
    Blind,
    /// The command was reaped, ending so.
    Reaped(Ending),
    /// None of the command's group can run any more.
    GroupEmpty,
}

/// What the guard does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Start the command, unless `stop_at` has passed by its exec.
    Start {
        stop_at: Instant,
    },
    /// The command must not run at all (the lease may be gone): give the
    /// terminal back to elect's job, tell elect, exit.
    LeaveUnstarted,
    /// Signal the command's group, and the command if it left the group.
    Signal(Signal),
    /// The command stopped with the terminal: keep its modes, put ours
    /// back, and give elect's job the foreground.
    TakeTerminal,
    /// Stop elect's job (SIGSTOP), so that its shell gets the prompt back.
    StopJob,
    /// If elect's job has the terminal (`fg`, not `bg`), give it to the
    /// command's group with the command's modes; if that worked and
    /// `and_continue`, SIGCONT the command.
    GiveTerminal {
        and_continue: bool,
    },
    /// SIGKILL what is left of the group (the command, unreaped, is still
    /// a member).
    KillGroup,
    /// If the command's group has the terminal, give it back to elect's job
    /// with the modes it had before the command.
    RestoreTerminal,
    /// Wait for the command and reap it: yields [`Event::Reaped`].
    Reap,
    /// SIGKILL the group until none of it can run: yields
    /// [`Event::GroupEmpty`].
    KillUntilNoneCanRun,
    /// The sentinel's watch is over.
    DismissSentinel,
    /// Tell elect.
    Report(Message),
    /// Ending the session from here, in a copy of elect (an exec): returns
    /// only if there is nothing to end, or it cannot be done.
    Release(Ending),
    Exit,
}

impl State {
    /// The next instant the clock must be looked at, if any.
    pub fn alarm(self, rules: &Rules) -> Option<Instant> {
        match self {
            State::Running { deadline, .. } => Some(deadline - rules.grace),
            State::Stopping { kill_at } => Some(kill_at),
            _ => None,
        }
    }
}

impl Rules {
    /// Where `event`, observed at `now`, leaves the guard, and what it does.
    pub fn step(&self, state: State, event: Event, now: Instant) -> (State, Vec<Action>) {
        use Action as A;
        use Event as E;
        use State as S;
        let finish = [A::KillGroup, A::RestoreTerminal, A::Reap];
        let kill_then_finish = [
            A::Signal(Signal::SIGKILL),
            A::KillGroup,
            A::RestoreTerminal,
            A::Reap,
        ];
        match (state, event) {
            // Before the start: only what decides whether it happens.
            (S::Starting { deadline }, E::Renewed(at)) => (
                S::Starting {
                    deadline: deadline.max(at),
                },
                vec![],
            ),
            (S::Starting { .. }, E::Stop(_) | E::ElectGone) => (S::CalledOff, vec![]),
            (S::Starting { deadline }, E::Ready) if now < deadline - self.grace => (
                S::Running {
                    deadline,
                    job_state: JobState::Going,
                },
                vec![A::Start {
                    stop_at: deadline - self.grace,
                }],
            ),
            (S::Starting { .. } | S::CalledOff, E::Ready) => (S::Over, vec![A::LeaveUnstarted]),
            (S::Starting { .. } | S::CalledOff, _) => (state, vec![]),

            // The deadline.
            (
                S::Running {
                    deadline,
                    job_state,
                },
                E::Clock,
            ) if now >= deadline - self.grace => {
                if job_state == JobState::Suspended {
                    // Stopped with elect's job: never resume a command whose
                    // lease may be gone.
                    let why = Message::Stopping(Stop::ExpiredWhileStopped);
                    (S::Killed, vec![A::Report(why), A::Signal(Signal::SIGKILL)])
                } else {
                    let (stopping, mut actions) = self.begin_stop(deadline, now, self.grace);
                    actions.insert(0, A::Report(Message::Stopping(Stop::Deadline)));
                    (stopping, actions)
                }
            }
            (S::Stopping { kill_at }, E::Clock) if now >= kill_at => {
                (S::Killed, vec![A::Signal(Signal::SIGKILL)])
            }
            (
                S::Running {
                    deadline,
                    job_state,
                },
                E::Renewed(at),
            ) => (
                S::Running {
                    deadline: deadline.max(at),
                    job_state,
                },
                vec![],
            ),
            (S::Running { deadline, .. }, E::Stop(grace)) => {
                self.begin_stop(deadline, now, grace.min(self.grace))
            }

            // Job control, under the lease.
            (
                S::Running {
                    deadline,
                    job_state,
                },
                E::Suspend,
            ) => (
                S::Running {
                    deadline,
                    job_state: JobState::of(job_state.stopped(), true),
                },
                vec![A::Signal(Signal::SIGTSTP)],
            ),
            (
                S::Running {
                    deadline,
                    job_state,
                },
                E::Resume,
            ) => {
                let mut actions = Vec::new();
                if job_state.stopped() {
                    actions.push(A::GiveTerminal {
                        and_continue: !job_state.suspended(),
                    });
                }
                if job_state.suspended() {
                    actions.push(A::Signal(Signal::SIGCONT));
                }
                let job_state = JobState::of(job_state.stopped(), false);
                (
                    S::Running {
                        deadline,
                        job_state,
                    },
                    actions,
                )
            }
            (
                S::Running {
                    deadline,
                    job_state,
                },
                E::CommandStopped { had_terminal },
            ) => (
                S::Running {
                    deadline,
                    job_state: JobState::of(true, job_state.suspended() || had_terminal),
                },
                Self::stopped_with(had_terminal),
            ),
            (
                S::Running {
                    deadline,
                    job_state,
                },
                E::CommandContinued,
            ) => (
                S::Running {
                    deadline,
                    job_state: JobState::of(false, job_state.suspended()),
                },
                vec![],
            ),

            // While the command may run, in any phase of its stop.
            (S::Running { .. } | S::Stopping { .. } | S::Killed, event) => match event {
                E::Forward(sig) => (state, vec![A::Signal(sig)]),
                E::CommandStopped { had_terminal } => (state, Self::stopped_with(had_terminal)),
                E::CommandExited => (S::Reaping { then: Then::Exit }, finish.to_vec()),
                E::Blind => (S::Reaping { then: Then::Exit }, kill_then_finish.to_vec()),
                // Nothing may outlive elect.
                E::ElectGone => (
                    S::Reaping {
                        then: Then::Release,
                    },
                    kill_then_finish.to_vec(),
                ),
                _ => (state, vec![]),
            },

            // The end: reaped first, then none of the group left to run,
            // and only then the lock may go.
            (S::Reaping { then }, E::Reaped(end)) => {
                (S::Emptying { end, then }, vec![A::KillUntilNoneCanRun])
            }
            (S::Emptying { end, then }, E::GroupEmpty) => {
                let mut actions = vec![A::DismissSentinel, A::Report(end.report())];
                if then == Then::Release {
                    actions.push(A::Release(end));
                }
                actions.push(A::Exit);
                (S::Over, actions)
            }
            (S::Reaping { .. } | S::Emptying { .. } | S::Over, _) => (state, vec![]),
        }
    }

    /// The command's signal now, SIGCONT (a stopped process cannot act on
    /// it), and SIGKILL due after `grace`, never after the deadline.
    fn begin_stop(&self, deadline: Instant, now: Instant, grace: Duration) -> (State, Vec<Action>) {
        (
            State::Stopping {
                kill_at: (now + grace).min(deadline),
            },
            vec![Action::Signal(self.signal), Action::Signal(Signal::SIGCONT)],
        )
    }

    /// The command stopped: if it had the terminal, stop elect's job too so
    /// that the shell gets its prompt back; otherwise someone stopped it on
    /// purpose: leave it. The guard stays awake either way.
    fn stopped_with(had_terminal: bool) -> Vec<Action> {
        match had_terminal {
            true => vec![Action::TakeTerminal, Action::StopJob],
            false => vec![],
        }
    }
}

#[cfg(test)]
mod tests;
