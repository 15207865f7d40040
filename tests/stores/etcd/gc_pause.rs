//! The GC-pause story, with real processes: why a lease alone cannot keep
//! two holders apart, and how the fencing token keeps the resource safe.
//!
//! A holds the lock with token t and writes to a fenced register. A is
//! paused: elect, its guard and its command all stop, as in a long GC pause
//! or a stopped VM. Nobody renews A's lease; etcd expires it; B takes the
//! lock with t' > t and writes. A wakes up, still believing it holds the
//! lock, and writes with t: the register rejects it, because it has seen
//! t'. elect, once it runs again, sees that its lease ran out, kills its
//! command and exits 76.
//!
//! Run with `cargo test --test elect -- stores::etcd::gc_pause:: --nocapture` to read the story.

use crate::stores::etcd::Etcd;
use crate::support;

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use support::contender::{Contender, Sweep};
use support::history::{self, History, What};
use support::register::{self, Register};
use support::{SECOND, ms, now_ns};

/// A write to the register, as the story tells it.
fn told(w: &What) -> String {
    match w {
        What::Write {
            label,
            token,
            accepted: true,
            ..
        } => format!("ACCEPT {label} token={token}"),
        What::Write {
            label,
            token,
            accepted: false,
            highest,
            ..
        } => format!("REJECT {label} token={token} (highest seen {highest})"),
        other => other.to_string(),
    }
}

#[test]
fn a_paused_holder_wakes_up_to_a_rejected_write_and_exit_76() {
    let etcd = Etcd::start();
    let history = Arc::new(History::new());
    let register = Register::start(history.clone());
    let _sweep = Sweep(format!("{}={}", register::ENV, register.path.display()));
    let story = |line: String| {
        eprintln!("{} {line}", history.clock(now_ns()));
    };
    let is = |who: &'static str, accepted: bool| move |w: &What| matches!(w, What::Write { label, accepted: a, .. } if label == who && *a == accepted);

    // Writers write every 20 ms, and sleep between writes: a writer that is
    // stopped and continued writes first thing.
    let ttl = ["--ttl", "1s"];
    let mut a = Contender::spawn("A", &etcd.url(), "gc", &ttl, "0.02", &register, &history);
    let What::Write {
        token: t,
        pid: a_child,
        ..
    } = register.wait_write(0, 10 * SECOND, "first write from A", is("A", true))
    else {
        unreachable!()
    };
    story(format!(
        "A holds the lock with token {t}; its command (pid {a_child}) writes every 20 ms"
    ));
    let mut b = Contender::spawn("B", &etcd.url(), "gc", &ttl, "0.02", &register, &history);
    etcd.wait_keys("gc/", 2);
    let a_key = etcd.keys("gc/")[0].clone();
    story(format!("B waits for the lock; A's key is {a_key}"));
    let settled = now_ns();
    thread::sleep(Duration::from_millis(100)); // a few more of A's writes, for the story
    register.wait_write(settled, 5 * SECOND, "A's writes", is("A", true));

    // The pause: elect's group, its guard's and its command's.
    // The guard must be stopped too: awake, it would stop the command on
    // time, which is what it is for, and there would be no story.
    let paused_at = now_ns();
    a.signal_group(libc::SIGSTOP);
    // SAFETY: plain killpg(2) of a group our child leads.
    unsafe { libc::killpg(a_child, libc::SIGSTOP) };
    story("A is paused: SIGSTOP to A's elect and guard, and to its command's group".into());

    // Nobody renews A's lease: wait until etcd has deleted A's key.
    let give_up = Instant::now() + 10 * SECOND;
    while etcd.keys("gc/").contains(&a_key) {
        assert!(Instant::now() < give_up, "A's key outlived its lease");
        thread::sleep(Duration::from_millis(20));
    }
    story(format!(
        "A's lease expired: etcd deleted {a_key} {:.0} ms into the pause",
        ms(now_ns() - paused_at)
    ));
    let What::Write { token: t2, .. } =
        register.wait_write(paused_at, 10 * SECOND, "a write from B", is("B", true))
    else {
        unreachable!()
    };
    story(format!("B holds the lock with token {t2} and writes"));
    assert!(t2 > t, "B's token {t2} must exceed A's {t}");

    // A wakes up. Its command is continued before its elect and guard: in a
    // real pause nothing guarantees that elect acts before the command does
    // (a paused VM resumes everything at once), and the guard, continued
    // first, would kill the command within microseconds, so whether the
    // late write got in would be a race. Continuing the command first makes
    // the late write certain: the worst case, which the token must handle.
    let resumed_at = now_ns();
    // SAFETY: as above.
    unsafe { libc::killpg(a_child, libc::SIGCONT) };
    story("A's command is continued; it still believes it holds the lock".into());
    let late = register.wait_write(
        resumed_at,
        5 * SECOND,
        "A's late write",
        |w| matches!(w, What::Write { label, .. } if label == "A"),
    );
    story(format!("A's late write: {}", told(&late)));
    a.signal_group(libc::SIGCONT);
    story("A's elect and guard are continued".into());
    let continued_at = now_ns();
    let a_end = a.wait(10 * SECOND);
    let command_died = history
        .events()
        .into_iter()
        .find(|e| {
            e.what
                == (What::Death {
                    pid: a_child,
                    exact: true,
                })
        })
        .map(|e| e.at);
    for e in history.events() {
        if let What::Said { label, line } = &e.what
            && label == "A"
        {
            story(format!("A's elect says: {line}"));
        }
    }
    story(format!(
        "A's elect stopped its command {} ms after it was continued, and exited {} ms after: {a_end}",
        command_died.map_or("?".into(), |d| format!("{:.0}", ms(d - continued_at))),
        command_died.map_or("?".into(), |d| format!("{:.0}", ms(now_ns() - d)))
    ));
    let still_b = now_ns();
    register.wait_write(
        still_b,
        5 * SECOND,
        "B's writes after A's exit",
        is("B", true),
    );
    story("B still holds the lock and writes".into());
    b.signal(libc::SIGTERM);
    b.wait(10 * SECOND);

    // The register's log, runs of equal lines folded.
    let events = history.events();
    let writes: Vec<&What> = events
        .iter()
        .map(|e| &e.what)
        .filter(|w| matches!(w, What::Write { .. }))
        .collect();
    eprintln!("the register's log:");
    let mut i = 0;
    while i < writes.len() {
        let line = told(writes[i]);
        let run = writes[i..].iter().take_while(|w| told(w) == line).count();
        match run {
            1 => eprintln!("  {line}"),
            n => eprintln!("  {line}   ×{n}"),
        }
        i += run;
    }

    assert_eq!(
        late,
        What::Write {
            label: "A".into(),
            token: t,
            pid: a_child,
            seq: match &late {
                What::Write { seq, .. } => *seq,
                _ => unreachable!(),
            },
            accepted: false,
            highest: t2,
        },
        "A's late write must be rejected with B's token as the highest seen"
    );
    let first_b = events
        .iter()
        .find(|e| is("B", true)(&e.what))
        .map(|e| e.at)
        .unwrap();
    assert!(
        !events
            .iter()
            .any(|e| e.at > first_b && is("A", true)(&e.what)),
        "the register accepted a write from A after B's"
    );
    assert_eq!(a_end, "exit 76", "A's elect exits with the lost code");
    history::check_fencing(&events).unwrap();
    let left =
        support::contender::marked(&format!("{}={}", register::ENV, register.path.display()));
    assert!(left.is_empty(), "left running: {left:?}");
}
