use super::*;

const S: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(1);

/// Seconds on a made-up boot clock.
fn at(secs: f64) -> Instant {
    Instant::from_nanos(1_000_000_000_000) + Duration::from_secs_f64(secs)
}

/// TERM with a grace of 3 s.
const RULES: Rules = Rules {
    signal: Signal::SIGTERM,
    grace: Duration::from_secs(3),
};

/// Under a lease until 10 s.
fn running() -> State {
    State::Running {
        deadline: at(10.0),
        job_state: JobState::Going,
    }
}

/// Step through `events`, each at its instant: the state at the end and
/// every action on the way.
fn steps(mut state: State, events: &[(Event, Instant)]) -> (State, Vec<Action>) {
    let mut all = Vec::new();
    for &(event, now) in events {
        let (next, actions) = RULES.step(state, event, now);
        state = next;
        all.extend(actions);
    }
    (state, all)
}

/// The end, from the command's exit (or its being killed) on.
fn the_end(end: Ending, then: Then) -> Vec<Action> {
    let mut actions = vec![
        Action::KillUntilNoneCanRun,
        Action::DismissSentinel,
        Action::Report(end.report()),
    ];
    if then == Then::Release {
        actions.push(Action::Release(end));
    }
    actions.push(Action::Exit);
    actions
}

#[test]
fn a_command_that_exits_has_its_group_killed_reaped_and_emptied_before_the_report() {
    let (state, actions) = steps(
        running(),
        &[
            (Event::Clock, at(1.0)),
            (Event::CommandExited, at(2.0)),
            (Event::Reaped(Ending::Exited(3)), at(2.0)),
            (Event::GroupEmpty, at(2.1)),
        ],
    );
    let mut expected = vec![Action::KillGroup, Action::RestoreTerminal, Action::Reap];
    expected.extend(the_end(Ending::Exited(3), Then::Exit));
    assert_eq!((state, actions), (State::Over, expected));
}

#[test]
fn the_deadline_brings_the_signal_then_sigkill_after_the_grace_then_the_report() {
    let mut state = running();
    assert_eq!(state.alarm(&RULES), Some(at(7.0)));
    let (next, actions) = RULES.step(state, Event::Clock, at(7.0) - MS);
    assert_eq!(
        (next, actions),
        (state, vec![]),
        "not before the deadline minus the grace"
    );
    let (next, actions) = RULES.step(state, Event::Clock, at(7.0));
    assert_eq!(
        actions,
        [
            Action::Report(Message::Stopping(Stop::Deadline)),
            Action::Signal(Signal::SIGTERM),
            Action::Signal(Signal::SIGCONT),
        ]
    );
    assert_eq!(next, State::Stopping { kill_at: at(10.0) });
    assert_eq!(next.alarm(&RULES), Some(at(10.0)));
    state = next;
    let (next, actions) = RULES.step(state, Event::Clock, at(10.0) - MS);
    assert_eq!(
        (next, actions),
        (state, vec![]),
        "SIGKILL not before the grace is over"
    );
    let (state, actions) = RULES.step(state, Event::Clock, at(10.0));
    assert_eq!(
        (state, actions),
        (State::Killed, vec![Action::Signal(Signal::SIGKILL)])
    );
    assert_eq!(state.alarm(&RULES), None);
    let (state, actions) = steps(
        state,
        &[
            (Event::CommandExited, at(10.01)),
            (Event::Reaped(Ending::Killed(9)), at(10.01)),
            (Event::GroupEmpty, at(10.02)),
        ],
    );
    let mut expected = vec![Action::KillGroup, Action::RestoreTerminal, Action::Reap];
    expected.extend(the_end(Ending::Killed(9), Then::Exit));
    assert_eq!((state, actions), (State::Over, expected));
}

#[test]
fn a_late_clock_still_kills_by_the_deadline() {
    // The guard woke 2 s after the deadline minus the grace (a loaded
    // machine): SIGKILL at the deadline, 1 s later, not 3.
    let (state, _) = RULES.step(running(), Event::Clock, at(9.0));
    assert_eq!(state, State::Stopping { kill_at: at(10.0) });
}

#[test]
fn a_renewal_moves_the_deadline_on_and_never_back_and_not_once_the_stop_began() {
    let (state, actions) = steps(
        running(),
        &[
            (Event::Renewed(at(20.0)), at(5.0)),
            // A renewal sent earlier, answered later.
            (Event::Renewed(at(15.0)), at(5.5)),
            (Event::Clock, at(7.0)),
        ],
    );
    assert_eq!(actions, []);
    assert_eq!(state.alarm(&RULES), Some(at(17.0)));
    let (state, _) = RULES.step(state, Event::Clock, at(17.0));
    assert_eq!(state, State::Stopping { kill_at: at(20.0) });
    let (state, actions) = RULES.step(state, Event::Renewed(at(40.0)), at(18.0));
    assert_eq!(
        (state, actions),
        (State::Stopping { kill_at: at(20.0) }, vec![])
    );
}

#[test]
fn elect_dying_while_the_command_runs_kills_it_and_releases_only_once_none_of_it_can_run() {
    let (state, actions) = RULES.step(running(), Event::ElectGone, at(4.0));
    assert_eq!(
        state,
        State::Reaping {
            then: Then::Release
        }
    );
    assert_eq!(
        actions,
        [
            Action::Signal(Signal::SIGKILL),
            Action::KillGroup,
            Action::RestoreTerminal,
            Action::Reap,
        ]
    );
    // Nothing from the clock or elect while it is reaped.
    for event in [
        Event::Clock,
        Event::Renewed(at(30.0)),
        Event::Forward(Signal::SIGHUP),
    ] {
        assert_eq!(RULES.step(state, event, at(11.0)), (state, vec![]));
    }
    let (state, actions) = RULES.step(state, Event::Reaped(Ending::Killed(9)), at(4.1));
    assert_eq!(
        actions,
        [Action::KillUntilNoneCanRun],
        "no release before the group is empty"
    );
    let (state, actions) = RULES.step(state, Event::GroupEmpty, at(4.2));
    assert_eq!(
        (state, &actions[..]),
        (State::Over, &the_end(Ending::Killed(9), Then::Release)[1..])
    );
    // From any phase of a stop, too.
    for state in [State::Stopping { kill_at: at(9.0) }, State::Killed] {
        let (state, actions) = RULES.step(state, Event::ElectGone, at(8.0));
        assert_eq!(
            state,
            State::Reaping {
                then: Then::Release
            }
        );
        assert_eq!(actions[0], Action::Signal(Signal::SIGKILL));
    }
}

#[test]
fn the_command_is_not_started_once_the_deadline_minus_the_grace_has_passed() {
    let starting = State::Starting { deadline: at(10.0) };
    assert_eq!(
        RULES.step(starting, Event::Ready, at(7.0) - MS),
        (running(), vec![Action::Start { stop_at: at(7.0) }])
    );
    assert_eq!(
        RULES.step(starting, Event::Ready, at(7.0)),
        (State::Over, vec![Action::LeaveUnstarted])
    );
    // A renewal that came in while the guard was on its way counts.
    let (state, actions) = steps(
        starting,
        &[(Event::Renewed(at(20.0)), at(6.0)), (Event::Ready, at(8.0))],
    );
    assert_eq!(actions, [Action::Start { stop_at: at(17.0) }]);
    assert_eq!(state.alarm(&RULES), Some(at(17.0)));
    // So does the word that the lease is lost, or elect's end.
    for gone in [Event::Stop(S), Event::ElectGone] {
        let (state, actions) = steps(
            starting,
            &[
                (gone, at(1.0)),
                (Event::Renewed(at(30.0)), at(1.0)),
                (Event::Ready, at(1.0)),
            ],
        );
        assert_eq!(
            (state, actions),
            (State::Over, vec![Action::LeaveUnstarted])
        );
    }
    // And nothing else reaches a command that is not there.
    for event in [Event::Forward(Signal::SIGINT), Event::Suspend, Event::Clock] {
        assert_eq!(RULES.step(starting, event, at(9.0)), (starting, vec![]));
    }
}

#[test]
fn a_stop_from_elect_signals_now_and_kills_after_its_grace_capped_by_ours_and_the_deadline() {
    let signal_now = vec![
        Action::Signal(Signal::SIGTERM),
        Action::Signal(Signal::SIGCONT),
    ];
    for (grace, now, kill_at) in [
        (100 * MS, 5.0, 5.1),
        // No longer than the grace the guard was given.
        (10 * S, 5.0, 8.0),
        // Never after the deadline.
        (3 * S, 9.0, 10.0),
    ] {
        let (state, actions) = RULES.step(running(), Event::Stop(grace), at(now));
        assert_eq!(actions, signal_now, "and no report: elect knows why");
        assert_eq!(
            state,
            State::Stopping {
                kill_at: at(kill_at)
            }
        );
    }
    // A stop is final, and begins once.
    let stopping = State::Stopping { kill_at: at(5.1) };
    for event in [
        Event::Stop(S),
        Event::Renewed(at(60.0)),
        Event::Suspend,
        Event::Resume,
        Event::Clock,
    ] {
        assert_eq!(RULES.step(stopping, event, at(5.05)), (stopping, vec![]));
    }
    // A signal elect passes on still reaches it.
    assert_eq!(
        RULES.step(stopping, Event::Forward(Signal::SIGINT), at(5.05)),
        (stopping, vec![Action::Signal(Signal::SIGINT)])
    );
}

#[test]
fn a_command_stopped_with_elects_job_is_killed_past_its_deadline_without_being_resumed() {
    // Ctrl-Z: the command stops with the terminal; the guard takes it
    // back and stops elect's job.
    let (state, actions) = RULES.step(
        running(),
        Event::CommandStopped { had_terminal: true },
        at(2.0),
    );
    assert_eq!(actions, [Action::TakeTerminal, Action::StopJob]);
    assert_eq!(
        state,
        State::Running {
            deadline: at(10.0),
            job_state: JobState::Suspended
        }
    );
    let (state, actions) = RULES.step(state, Event::Clock, at(7.0));
    assert_eq!(
        (state, actions),
        (
            State::Killed,
            vec![
                Action::Report(Message::Stopping(Stop::ExpiredWhileStopped)),
                Action::Signal(Signal::SIGKILL),
            ]
        )
    );
    // elect stopped by SIGTSTP: the command is sent SIGTSTP, and once it
    // has stopped, the same.
    let (state, actions) = steps(
        running(),
        &[
            (Event::Suspend, at(2.0)),
            (
                Event::CommandStopped {
                    had_terminal: false,
                },
                at(2.0),
            ),
        ],
    );
    assert_eq!(actions, [Action::Signal(Signal::SIGTSTP)]);
    let (state, actions) = RULES.step(state, Event::Clock, at(7.5));
    assert_eq!(state, State::Killed);
    assert!(!actions.contains(&Action::Signal(Signal::SIGCONT)));
}

#[test]
fn a_command_stopped_otherwise_gets_its_signal_and_sigcont_at_the_deadline() {
    for events in [
        // Someone stopped its group on purpose.
        &[(
            Event::CommandStopped {
                had_terminal: false,
            },
            at(2.0),
        )][..],
        // Told to stop with elect's job, it ignored SIGTSTP.
        &[(Event::Suspend, at(2.0))],
        // Stopped with elect's job, then continued by someone.
        &[
            (Event::Suspend, at(2.0)),
            (
                Event::CommandStopped {
                    had_terminal: false,
                },
                at(2.0),
            ),
            (Event::CommandContinued, at(3.0)),
        ],
    ] {
        let (state, _) = steps(running(), events);
        let (state, actions) = RULES.step(state, Event::Clock, at(7.0));
        assert_eq!(state, State::Stopping { kill_at: at(10.0) }, "{events:?}");
        assert_eq!(
            actions[1..],
            [
                Action::Signal(Signal::SIGTERM),
                Action::Signal(Signal::SIGCONT)
            ]
        );
    }
}

#[test]
fn elect_continued_continues_the_command_and_hands_it_the_terminal_if_it_was_stopped() {
    let with = |job_state| State::Running {
        deadline: at(10.0),
        job_state,
    };
    let hand_back = |and_continue| Action::GiveTerminal { and_continue };
    let sigcont = Action::Signal(Signal::SIGCONT);
    for (job_state, actions, after) in [
        // `fg` after Ctrl-Z: the terminal back (if the job has it), then
        // SIGCONT; the command counts as stopped until its SIGCHLD says
        // otherwise.
        (
            JobState::Suspended,
            vec![hand_back(false), sigcont],
            JobState::Stopped,
        ),
        (JobState::Suspending, vec![sigcont], JobState::Going),
        // Stopped, not with the job: continued only with the terminal.
        (JobState::Stopped, vec![hand_back(true)], JobState::Stopped),
        (JobState::Going, vec![], JobState::Going),
    ] {
        assert_eq!(
            RULES.step(with(job_state), Event::Resume, at(3.0)),
            (with(after), actions),
            "{job_state:?}"
        );
    }
    assert_eq!(
        RULES.step(with(JobState::Stopped), Event::CommandContinued, at(3.0)),
        (with(JobState::Going), vec![])
    );
}

#[test]
fn a_stop_with_the_terminal_during_the_stop_still_gives_the_shell_its_prompt() {
    for state in [State::Stopping { kill_at: at(9.0) }, State::Killed] {
        assert_eq!(
            RULES.step(state, Event::CommandStopped { had_terminal: true }, at(8.0)),
            (state, vec![Action::TakeTerminal, Action::StopJob])
        );
        assert_eq!(
            RULES.step(
                state,
                Event::CommandStopped {
                    had_terminal: false
                },
                at(8.0)
            ),
            (state, vec![])
        );
    }
}

#[test]
fn a_guard_that_cannot_keep_the_deadline_kills_the_command_and_reports() {
    let (state, actions) = steps(
        running(),
        &[
            (Event::Blind, at(1.0)),
            (Event::Reaped(Ending::Killed(9)), at(1.0)),
            (Event::GroupEmpty, at(1.0)),
        ],
    );
    let mut expected = vec![
        Action::Signal(Signal::SIGKILL),
        Action::KillGroup,
        Action::RestoreTerminal,
        Action::Reap,
    ];
    expected.extend(the_end(Ending::Killed(9), Then::Exit));
    assert_eq!((state, actions), (State::Over, expected));
}

/// What an event drawn from a number makes, at `now`.
fn drawn(kind: u8, amount: u64, now: Instant) -> Event {
    let span = Duration::from_millis(amount);
    match kind % 12 {
        0 => Event::Clock,
        1 => Event::Renewed(now + span),
        2 => Event::Stop(span),
        3 => Event::Forward(Signal::SIGHUP),
        4 => Event::Suspend,
        5 => Event::Resume,
        6 => Event::CommandStopped { had_terminal: true },
        7 => Event::CommandStopped {
            had_terminal: false,
        },
        8 => Event::CommandContinued,
        9 => Event::CommandExited,
        10 => Event::ElectGone,
        _ => Event::Blind,
    }
}

proptest::proptest! {
    #![proptest_config(crate::fuzz::config())]

    /// Whatever elect, the command and the clock do, in any order: the
    /// command never starts or runs past the deadline minus the grace
    /// the guard last saw, SIGKILL is never due after the deadline, a
    /// command stopped with elect's job is never continued past it, and
    /// the session is released only after the command was reaped and
    /// none of its group can run, and only once elect is gone.
    #[test]
    fn the_deadline_holds_whatever_happens(
        before in proptest::collection::vec((0u8..3, 0u64..20_000), 0..4),
        after in proptest::collection::vec((0u8..12, 0u64..4_000), 0..40),
    ) {
        let mut now = at(0.0);
        let mut deadline = at(10.0);
        let mut state = State::Starting { deadline };
        let mut called_off = false;
        // Before the start: renewals, a stop, elect's end.
        for &(kind, amount) in &before {
            let event = match kind {
                0 => Event::Renewed(now + Duration::from_millis(amount)),
                1 => Event::Stop(Duration::from_millis(amount)),
                _ => Event::ElectGone,
            };
            if let Event::Renewed(at) = event {
                deadline = deadline.max(at);
            }
            called_off |= !matches!(event, Event::Renewed(_));
            let actions;
            (state, actions) = RULES.step(state, event, now);
            proptest::prop_assert!(actions.is_empty());
        }
        // The start comes a while after the handover.
        now = now + Duration::from_millis(after.first().map_or(0, |&(_, a)| a) * 2);
        let (next, actions) = RULES.step(state, Event::Ready, now);
        state = next;
        if called_off || now >= deadline - RULES.grace {
            proptest::prop_assert_eq!(
                (state, actions),
                (State::Over, vec![Action::LeaveUnstarted])
            );
            return Ok(());
        }
        let stop_at = deadline - RULES.grace;
        proptest::prop_assert_eq!(actions, vec![Action::Start { stop_at }]);

        let mut elect_gone = false;
        let mut done: Vec<Action> = Vec::new();
        let mut queue: std::collections::VecDeque<Event> = after
            .iter()
            .map(|&(kind, amount)| drawn(kind, amount, now))
            .collect();
        // Whatever happened, the command ends in the end.
        queue.push_back(Event::CommandExited);
        let mut steps = after.iter().map(|&(_, amount)| amount).chain(std::iter::repeat(0));
        let mut on_time = after.iter().map(|&(_, amount)| amount % 3 != 0).cycle();
        while let Some(event) = queue.pop_front() {
            // Time moves on between the events of the world; what an
            // action yields comes at once.
            if !matches!(event, Event::Reaped(_) | Event::GroupEmpty) {
                now = now + Duration::from_millis(steps.next().unwrap_or(0) / 4);
            }
            // The loop looks at the clock before it waits, and wakes at
            // the alarm: on time, or late (a loaded machine).
            let yielded = matches!(event, Event::Reaped(_) | Event::GroupEmpty);
            let event = match state.alarm(&RULES) {
                Some(alarm) if alarm <= now && !yielded => {
                    queue.push_front(event);
                    if on_time.next().unwrap_or(true) {
                        now = alarm;
                    }
                    Event::Clock
                }
                _ => event,
            };
            if let (State::Running { .. }, Event::Renewed(at)) = (state, event) {
                deadline = deadline.max(at);
            }
            let watching = matches!(
                state,
                State::Running { .. } | State::Stopping { .. } | State::Killed
            );
            elect_gone |= watching && event == Event::ElectGone;
            let before = state;
            let (next, actions) = RULES.step(state, event, now);
            state = next;
            proptest::prop_assert!(
                !done.contains(&Action::Exit) || actions.is_empty(),
                "nothing after the exit"
            );
            match state {
                State::Running { .. } => {
                    let stop_at = deadline - RULES.grace;
                    proptest::prop_assert_eq!(state.alarm(&RULES), Some(stop_at));
                    if event == Event::Clock {
                        proptest::prop_assert!(now < stop_at, "running past its stop");
                    }
                }
                State::Stopping { kill_at } => {
                    proptest::prop_assert!(kill_at <= deadline, "SIGKILL after the deadline");
                    if event == Event::Clock {
                        proptest::prop_assert!(now < kill_at);
                    }
                }
                _ => {}
            }
            if let State::Running { job_state: JobState::Suspended, .. } = before
                && event == Event::Clock
                && now >= deadline - RULES.grace
            {
                proptest::prop_assert_eq!(state, State::Killed);
                let resumed = actions.contains(&Action::Signal(Signal::SIGCONT));
                proptest::prop_assert!(!resumed, "resumed past its deadline");
            }
            for &action in &actions {
                match action {
                    Action::Reap => queue.push_front(Event::Reaped(Ending::Exited(0))),
                    Action::KillUntilNoneCanRun => queue.push_front(Event::GroupEmpty),
                    Action::Release(_) => {
                        proptest::prop_assert!(elect_gone, "released with elect alive");
                        proptest::prop_assert!(done.contains(&Action::Reap));
                        proptest::prop_assert!(done.contains(&Action::KillUntilNoneCanRun));
                    }
                    _ => {}
                }
                done.push(action);
            }
        }
        proptest::prop_assert_eq!(state, State::Over);
        proptest::prop_assert_eq!(done.last(), Some(&Action::Exit));
        proptest::prop_assert_eq!(done.contains(&Action::Release(Ending::Exited(0))), elect_gone);
    }
}
