//! The turn's phases on tokio's paused clock (which is elect's clock in
//! unit tests, `clock::Instant`), against a real `file:` store in a
//! directory of the test's own. The handover and the command need the
//! guard, a process of its own: the integration tests run those.

use std::ffi::OsString;
use std::time::Duration;

use super::{Turn, TurnEnd};
use crate::clock::Instant;
use crate::exit::Outcome;
use crate::reach::Reach;
use crate::run::job::Job;
use crate::run::queue::Queued;
use crate::run::signals::Signals;
use crate::store::{Store, Token};

/// A job as `elect run` would check it, on a `file:` store in `dir`.
fn job(dir: &std::path::Path, lock: &str, more: &[&str]) -> Job {
    let store = format!("file:{}", dir.display());
    let mut args: Vec<OsString> = ["elect", "run", "--lock", lock, "--store", &store]
        .iter()
        .map(OsString::from)
        .collect();
    args.extend(more.iter().map(OsString::from));
    args.extend(["--", "true"].iter().map(OsString::from));
    let cli = crate::usage::parse(&args).unwrap_or_else(|_| panic!("{args:?} parses"));
    let crate::cli::Command::Run(run) = cli.command else {
        panic!("not a run");
    };
    match Job::check(run) {
        Ok(job) => job,
        Err(failure) => panic!("{}", failure.message),
    }
}

/// A directory of the test's own, as the file store wants it (mode 0700).
fn directory(name: &str) -> std::path::PathBuf {
    use std::os::unix::fs::DirBuilderExt;
    let dir = std::env::temp_dir().join(format!("elect-turn-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .expect("a directory");
    dir
}

async fn open(job: &Job) -> Box<dyn Store> {
    match job
        .location
        .open(job.timing.renew_every(), job.connect_timeout)
        .await
    {
        Ok(store) => store,
        Err(e) => panic!("open: {e}"),
    }
}

fn turn<'j>(job: &'j Job, store: &'j dyn Store, signals: &'j mut Signals) -> Turn<'j> {
    let reach = Reach::new(&job.location, job.connect_timeout);
    Turn::begin(job, store, signals, None, reach, Instant::now())
}

/// How waiting ended: the token, or why not.
fn token(queued: &Queued<'_>) -> Result<Token, &'static str> {
    match queued {
        Queued::First(won) => Ok(won.token),
        Queued::Busy(Outcome::Exit(75)) => Err("busy"),
        Queued::Busy(_) => Err("busy with another outcome"),
        Queued::Again(_) => Err("again"),
        Queued::Done(_) => Err("done"),
    }
}

/// Connect, queue, and say how waiting ended; then let go.
macro_rules! queue {
    ($turn:expr, $job:expr, |$queued:ident| $then:expr) => {{
        let session = match $turn.connect().await {
            Ok(session) => session,
            Err(_) => panic!("no session"),
        };
        let mut keeper =
            crate::lease::Keeper::start(&*session, $job.timing, $job.standing.tally.clone());
        let $queued = $turn.queue(&*session, &mut keeper).await;
        let result = $then;
        drop($queued);
        drop(keeper);
        session.release().await.expect("released");
        result
    }};
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn each_turn_that_wins_has_a_higher_token() {
    let dir = directory("tokens");
    let job = job(&dir, "nightly", &[]);
    let store = open(&job).await;
    let mut signals = Signals::new().expect("signals");
    let mut last = 0;
    for _ in 0..3 {
        let mut turn = turn(&job, &*store, &mut signals);
        let won = queue!(turn, job, |queued| token(&queued));
        let won = won.expect("a free lock is ours").get();
        assert!(won > last, "token {won} after {last}");
        last = won;
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Behind a holder, a turn gives up when `--wait` has passed on its clock:
/// at once with `-n`.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_turn_behind_a_holder_gives_up_when_wait_has_passed() {
    let dir = directory("wait");
    for (wait, after) in [(&["--wait", "30s"][..], 30), (&["-n"][..], 0)] {
        let holder = job(&dir, "nightly", &[]);
        let waiter = job(&dir, "nightly", wait);
        let store = open(&holder).await;
        let (mut one, mut two) = (
            Signals::new().expect("signals"),
            Signals::new().expect("signals"),
        );
        let mut holding = turn(&holder, &*store, &mut one);
        queue!(holding, holder, |held| {
            assert!(token(&held).is_ok());
            let from = Instant::now();
            let mut waiting = turn(&waiter, &*store, &mut two);
            let waited = queue!(waiting, waiter, |queued| token(&queued));
            assert_eq!(waited, Err("busy"), "{wait:?}");
            assert_eq!(
                Instant::now().since(from),
                Duration::from_secs(after),
                "{wait:?}"
            );
            // It never held the lock.
            assert!(!waiter.standing.holding());
        });
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_turn_whose_command_never_started_ends_as_lost() {
    assert!(matches!(TurnEnd::NotStarted.outcome(76), Outcome::Exit(76)));
    assert!(matches!(
        TurnEnd::Lost {
            why: String::new(),
            asked: false
        }
        .outcome(9),
        Outcome::Exit(9)
    ));
}

/// What the history says of a turn follows from how it ended alone.
#[test]
fn a_tenure_s_verdict_follows_from_how_the_turn_ended() {
    use super::Skip;
    use crate::history::Verdict;
    use crate::run::chronicle::finish;
    use crate::supervisor::Ending;
    use nix::sys::signal::Signal;

    let dir = directory("verdicts");
    let job = job(&dir, "nightly", &[]);
    let verdict = |end: TurnEnd| {
        let mut tenure = job.tenure(std::time::SystemTime::now(), None, None);
        finish(&mut tenure, &end);
        assert!(tenure.ended.is_some());
        (tenure.outcome, tenure.exit_code, tenure.signal, tenure.why)
    };
    let lost = |asked| TurnEnd::Lost {
        why: "revoked".into(),
        asked,
    };
    let why = |s: &str| Some(s.to_string());
    assert_eq!(
        verdict(TurnEnd::Ended(Ending::Exited(0))),
        (Verdict::Succeeded, Some(0), None, None)
    );
    assert_eq!(
        verdict(TurnEnd::Ended(Ending::Exited(3))),
        (Verdict::Failed, Some(3), None, None)
    );
    assert_eq!(
        verdict(TurnEnd::Ended(Ending::Killed(15))),
        (Verdict::Killed, None, Some(15), None)
    );
    assert_eq!(
        verdict(lost(false)),
        (Verdict::Lost, None, None, why("revoked"))
    );
    assert_eq!(
        verdict(lost(true)),
        (Verdict::Broken, None, None, why("revoked"))
    );
    assert_eq!(
        verdict(TurnEnd::NotStarted),
        (
            Verdict::Lost,
            None,
            None,
            why("lost as the command was about to start")
        )
    );
    assert_eq!(
        verdict(TurnEnd::Outlived(Signal::SIGTERM)),
        (
            Verdict::Killed,
            None,
            Some(9),
            why("it did not end within --grace of SIGTERM")
        )
    );
    assert_eq!(
        verdict(TurnEnd::Skipped(Outcome::Exit(75), Skip::Busy)),
        (Verdict::Busy, None, None, None)
    );
    let done = Skip::DoneBefore {
        by: "a@h ran it at noon".into(),
        ended: None,
    };
    assert_eq!(
        verdict(TurnEnd::Skipped(Outcome::Exit(0), done)),
        (Verdict::DoneBefore, None, None, why("a@h ran it at noon"))
    );
    // elect's own outcome, for the one that has none of the command's.
    assert!(matches!(
        TurnEnd::Outlived(Signal::SIGTERM).outcome(1),
        Outcome::Raise(15)
    ));
    let _ = std::fs::remove_dir_all(dir);
}
