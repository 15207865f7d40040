//! What every store must do, written once and run against each store:
//! etcd, PostgreSQL, MariaDB (the MySQL store), ZooKeeper and Kubernetes
//! (real servers the test starts) and `file:` (a directory).
//!
//! A store takes part through [`StoreUnderTest`] (`suites/mod.rs`): how
//! to start it, how to look into it without elect, how to end a holder's
//! lease from outside, and where stores legitimately differ (what a key
//! looks like, how soon an outside end is noticed, whether tokens come from
//! a counter). Each scenario becomes one test per store, `etcd::NAME`,
//! `file::NAME` and so on. Adding a store is one impl of the trait (in
//! `tests/stores/STORE/under_test.rs`) and one line in `stores!` at the end
//! of this file.
//!
//! What only one store does is tested beside it, in its folder:
//! tests/stores/{etcd,postgres,mysql,zookeeper,k8s,file}/.

use crate::stores::etcd::Etcd;
use crate::stores::file::FileStore;
use crate::stores::k8s::KubeStore;
use crate::stores::postgres::Postgres;
use crate::stores::zookeeper::ZooKeeper;
use crate::suites::{Held, StoreUnderTest, assert_rising, other_servers, wait_contenders};
use crate::support;
use crate::support::process::signal;

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::time::{Duration, Instant};

use crate::stores::mysql::MariaDb;
use serde_json::{Value, json};
use support::contender::children;
use support::endpoint::{NotifySocket, Prometheus, code, get};
use support::inspect::{check, holder_and_waiter, status};
use support::silent::{Listener, Manner, UNRESOLVED, refused};
use support::ticker::{Left, Ticks, group_alive, group_members};
use support::tools::free_port;
use support::{
    Death, Running, SECOND, TempDir, alive, elect, elect_run, eventually, hold, ms, now_ns, until,
};

fn stdout_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn tokens_rise_across_holders_and_processes<S: StoreUnderTest>() {
    let store = S::start("tokens");
    // One process after another, with other writes to the store between.
    let mut tokens = Vec::new();
    for _ in 0..4 {
        let out = elect_run(&store.url(), "rising", &[], "echo $ELECT_TOKEN")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr_of(&out));
        assert!(out.stderr.is_empty(), "{}", stderr_of(&out));
        tokens.push(stdout_of(&out).parse::<u64>().unwrap());
        store.unrelated_write();
    }
    assert!(tokens[0] > 0);
    assert_rising::<S>(&tokens, "consecutive holders");
    assert_eq!(
        store.contenders("rising"),
        0,
        "every holder released the lock"
    );

    // Contenders started at once take turns, and tokens rise in their order.
    let script = r#"echo "run $ELECT_TOKEN $(date +%s%N)"; sleep 0.2; echo "done $(date +%s%N)""#;
    let mut contenders: Vec<Running> = (0..3)
        .map(|_| Running::spawn(elect_run(&store.url(), "rising", &[], script)))
        .collect();
    let mut runs = Vec::new();
    for c in &mut contenders {
        let run = c.expect_line("run", 10 * SECOND);
        let (token, start) = run.split_once(' ').unwrap();
        let end: i128 = c.expect_line("done", 10 * SECOND).parse().unwrap();
        runs.push((
            start.parse::<i128>().unwrap(),
            end,
            token.parse::<u64>().unwrap(),
        ));
        assert_eq!(c.wait_code(10 * SECOND), 0);
    }
    runs.sort();
    for pair in runs.windows(2) {
        assert!(pair[0].1 < pair[1].0, "two holders ran at once: {runs:?}");
    }
    tokens.extend(runs.iter().map(|r| r.2));
    assert_rising::<S>(&tokens, "holders in turn");
}

fn a_busy_lock_exits_75_or_the_busy_exit_code<S: StoreUnderTest>() {
    let store = S::start("busy");
    let url = store.url();
    for _ in 0..5 {
        let out = elect_run(&url, "busy", &["--no-wait"], "echo ran")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
        assert_eq!(stdout_of(&out), "ran", "a free lock runs the command");
    }

    let (mut holder, token) = hold(&url, "busy", &["--identity", "first"]);
    let out = elect_run(&url, "busy", &["--no-wait"], "echo ran")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75));
    assert!(out.stdout.is_empty(), "the command must not run");
    let err = stderr_of(&out);
    assert!(
        err.contains("held by first")
            && err.contains(&format!("token {token}"))
            && err.contains("the command was not run (exit 75)"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    // With --once-per, the first look reads the lock and the record of
    // the last success together (one request where the store can): it
    // finds the holder without falling back on the queue.
    let out = elect_run(&url, "busy", &["-n", "-v", "--once-per", "1h"], "echo ran")
        .output()
        .unwrap();
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(75), "{err}");
    assert!(
        err.contains("held by first") && !err.contains("could not look"),
        "{err}"
    );

    // Two give up after waiting a second, side by side: one with the usual
    // code, one with its own.
    let gave_up: Vec<(Running, i32)> = [(&[][..], 75), (&["--busy-exit-code", "9"][..], 9)]
        .into_iter()
        .map(|(extra, code)| {
            let mut args = vec!["--wait", "1s"];
            args.extend(extra);
            (
                Running::spawn(elect_run(&url, "busy", &args, "echo ran")),
                code,
            )
        })
        .collect();
    for (mut waiter, code) in gave_up {
        assert_eq!(waiter.wait_code(10 * SECOND), code);
        let said = waiter.stderr_to_end(SECOND);
        assert!(
            said.contains(&format!("the command was not run (exit {code})")),
            "{said}"
        );
        let waited = waiter.started.elapsed();
        assert!(waited >= SECOND && waited < 5 * SECOND, "waited {waited:?}");
        eprintln!("--wait 1s gave up after {waited:?}");
        assert_eq!(
            waiter.next_line(5 * SECOND),
            None,
            "the command must not run"
        );
    }

    let out = elect_run(&url, "busy", &["-n", "-q", "--busy-exit-code", "3"], "true")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(out.stderr.is_empty(), "-q silences the busy message");

    assert_eq!(
        store.contenders("busy"),
        1,
        "those who gave up left the queue"
    );
    holder.send_line("done");
    assert_eq!(holder.wait_code(10 * SECOND), 0);
    let out = elect_run(&url, "busy", &["-n"], "echo $ELECT_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let next: u64 = stdout_of(&out).parse().unwrap();
    // With a counter: those who gave up took no token.
    assert_rising::<S>(&[token, next], "the holder, then the next");
}

fn signals_are_forwarded_and_exit_codes_pass_through<S: StoreUnderTest>() {
    let store = S::start("signals");
    let script = r#"trap 'echo got USR1' USR1; trap 'echo got HUP' HUP; trap 'echo got TERM; exit 3' TERM; echo ready; while :; do sleep 0.01; done"#;
    let mut holder = Running::spawn(elect_run(&store.url(), "sig", &[], script));
    holder.expect_line("ready", 10 * SECOND);
    holder.signal(libc::SIGUSR1);
    holder.expect_line("got USR1", 5 * SECOND);
    holder.signal(libc::SIGHUP);
    holder.expect_line("got HUP", 5 * SECOND);
    holder.signal(libc::SIGTERM);
    holder.expect_line("got TERM", 5 * SECOND);
    assert_eq!(holder.wait_code(10 * SECOND), 3);
    assert_eq!(store.contenders("sig"), 0, "released");

    let out = elect_run(&store.url(), "sig", &[], "exit 7")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7));
}

/// A stop from outside (systemd's or a container runtime's SIGTERM) is
/// bounded by --grace: a command that ignores it is SIGKILLed, the lock
/// passes once its group is gone, and elect dies by the SIGTERM it was
/// given, as a stop it was asked for.
fn a_stop_from_outside_is_bounded_by_the_grace<S: StoreUnderTest>() {
    let store = S::start("bounded-stop");
    let dir = TempDir::new(&format!("{}-bounded-stop", S::NAME));
    let ticks = Ticks::new(&dir.0);
    let grace = ["--grace", "1s"];
    let mut a = Running::spawn(elect_run(
        &store.url(),
        "stop",
        &grace,
        &ticks.script("A", true),
    ));
    let group: i32 = a.expect_line("pgid", 10 * SECOND).parse().unwrap();
    ticks.first("A", 10 * SECOND);
    let b = Running::spawn(elect_run(
        &store.url(),
        "stop",
        &grace,
        &ticks.script("B", false),
    ));
    wait_contenders(&store, "stop", 2);
    let told = Instant::now();
    let told_ns = support::ticker::monotonic_ns();
    a.signal(libc::SIGTERM);
    let status = a.wait(10 * SECOND);
    let ended = told.elapsed();
    let b_first = ticks.first("B", 10 * SECOND);
    let overlap = ticks.overlap_ms("A", group, "B");
    eprintln!(
        "{}: SIGTERM to elect, whose command ignores it, --grace 1s: elect ended {} ms after, \
         {status:?}; the next holder's command started {:.0} ms after the SIGTERM; overlap \
         with it {overlap:.1} ms",
        S::NAME,
        ended.as_millis(),
        ms(b_first - told_ns)
    );
    assert!(b_first > 0);
    assert!(
        ended < Duration::from_millis(2500),
        "the stop took {ended:?}"
    );
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{:?}", a.stderr_seen);
    assert!(!group_alive(group), "the command's group outlived the stop");
    assert!(overlap < 0.0, "A's command ran {overlap:.1} ms beside B's");
    a.drain_stderr();
    assert!(
        a.stderr_seen
            .iter()
            .any(|l| l.contains("did not end within --grace 1s of SIGTERM")),
        "{:?}",
        a.stderr_seen
    );
    b.signal(libc::SIGTERM);
}

fn a_child_killed_by_a_signal_kills_elect_by_the_same_signal<S: StoreUnderTest>() {
    let store = S::start("killed");
    let mut holder = Running::spawn(elect_run(
        &store.url(),
        "int",
        &[],
        "echo ready; exec sleep 1000",
    ));
    holder.expect_line("ready", 10 * SECOND);
    holder.signal(libc::SIGINT);
    let status = holder.wait(10 * SECOND);
    assert_eq!(status.signal(), Some(libc::SIGINT), "{status:?}");

    // A real-time signal too, which nix has no name for: the guard once
    // never saw such an end, and elect waited on for ever.
    for sig in [libc::SIGKILL, libc::SIGTERM, libc::SIGRTMIN() + 1] {
        let mut run = Running::spawn(elect_run(
            &store.url(),
            "int",
            &[],
            &format!("kill -{sig} $$"),
        ));
        let status = run.wait(10 * SECOND);
        assert_eq!(status.signal(), Some(sig), "{status:?}");
    }
    assert_eq!(store.contenders("int"), 0, "released");
}

fn a_clean_exit_hands_over_in_milliseconds<S: StoreUnderTest>() {
    let store = S::start("handover");
    let (mut first, _) = hold(&store.url(), "handover", &["--ttl", "10s"]);
    let mut second = Running::spawn(elect_run(
        &store.url(),
        "handover",
        &["--ttl", "10s"],
        r#"echo "start $(date +%s%N)""#,
    ));
    wait_contenders(&store, "handover", 2);
    first.send_line("done");
    let ended: i128 = first.expect_line("end", 10 * SECOND).parse().unwrap();
    let started: i128 = second.expect_line("start", 10 * SECOND).parse().unwrap();
    assert_eq!(first.wait_code(10 * SECOND), 0);
    assert_eq!(second.wait_code(10 * SECOND), 0);
    let handover = started - ended;
    eprintln!(
        "{}: handover after a clean exit: {:.1} ms",
        S::NAME,
        ms(handover)
    );
    assert!(handover > 0);
    assert!(
        handover < 2_000_000_000,
        "handover took {:.1} ms: waited for the TTL?",
        ms(handover)
    );
}

fn sigkill_of_elect_leaves_no_orphans_and_the_next_holder_proceeds<S: StoreUnderTest>() {
    let store = S::start("sigkill");
    let script = r#"sleep 1000 & echo "grandchild $!"; echo "child $$ $ELECT_TOKEN"; wait"#;
    let mut holder = Running::spawn(elect_run(&store.url(), "oom", &["--ttl", "2s"], script));
    let grandchild = holder
        .expect_line("grandchild", 10 * SECOND)
        .parse()
        .unwrap();
    let child = holder.expect_line("child", 10 * SECOND);
    let (child, token) = child.split_once(' ').unwrap();
    let (child, token): (i32, u64) = (child.parse().unwrap(), token.parse().unwrap());
    let deaths = [Death::watch(child), Death::watch(grandchild)];

    let mut next = Running::spawn(elect_run(
        &store.url(),
        "oom",
        &["--ttl", "2s", "--wait", "10s"],
        r#"echo "start $(date +%s%N) $ELECT_TOKEN""#,
    ));
    wait_contenders(&store, "oom", 2);

    let killed_at = now_ns();
    holder.signal(libc::SIGKILL);
    let gone = deaths.iter().map(|d| d.at(5 * SECOND)).max().unwrap();
    assert!(!alive(child) && !alive(grandchild));
    assert!(
        gone - killed_at < 1_000_000_000,
        "the command's group took {:.1} ms to die",
        ms(gone - killed_at)
    );

    let start = next.expect_line("start", 15 * SECOND);
    let (started_at, next_token) = start.split_once(' ').unwrap();
    let (started_at, next_token): (i128, u64) =
        (started_at.parse().unwrap(), next_token.parse().unwrap());
    eprintln!(
        "{}: SIGKILL of elect: its group gone after {:.1} ms, the next command started after {:.1} ms",
        S::NAME,
        ms(gone - killed_at),
        ms(started_at - killed_at)
    );
    assert!(
        started_at > gone,
        "the next holder started before the old group was dead"
    );
    // The guard ends the session once the group is dead: a crashed elect
    // costs a handover, not a TTL.
    let after = Duration::from_nanos((started_at - killed_at) as u64);
    assert!(
        after < SECOND,
        "the next holder started {after:?} after the kill: it waited for the lease"
    );
    assert_rising::<S>(&[token, next_token], "the killed holder, then the next");
    assert_eq!(next.wait_code(10 * SECOND), 0);
    // What the guard says names the elect that died, not its new parent.
    let said = holder.drain_stderr();
    assert!(
        said.contains(&format!("elect (pid {}) died", holder.pid()))
            || (S::held_by_the_commands_descriptors() && !said.contains("died")),
        "{said}"
    );
}

fn an_outside_end_of_the_lease_stops_the_command_with_76<S: StoreUnderTest>() {
    let store = S::start("outside");
    let url = store.url();
    let ttl = 3 * SECOND;
    // For each way: a command that stops on SIGTERM.
    let polite = r#"trap 'echo "term $(date +%s%N)"; exit 0' TERM; echo "held $$ $ELECT_TOKEN $ELECT_LEASE_ID $ELECT_KEY"; while :; do sleep 0.01; done"#;
    // And one that notes SIGTERM and carries on: the lease is gone, another
    // holder may already run, so it gets 100 ms before SIGKILL, not its
    // grace (1 s).
    let stubborn = r#"trap 'echo "term $(date +%s%N)"' TERM; echo "held $$ $ELECT_TOKEN $ELECT_LEASE_ID $ELECT_KEY"; while :; do sleep 0.01; done"#;
    let mut cases: Vec<(&str, String, bool)> = S::OUTSIDE_ENDS
        .iter()
        .enumerate()
        .map(|(i, how)| (*how, format!("gone{i}"), false))
        .collect();
    cases.push((S::OUTSIDE_ENDS[0], "stubborn".into(), true));

    let mut holders = Vec::new();
    for (how, lock, ignores_term) in &cases {
        let script = if *ignores_term { stubborn } else { polite };
        let mut holder = Running::spawn(elect_run(
            &url,
            lock,
            &["--ttl", "3s", "--grace", "1s"],
            script,
        ));
        let line = holder.expect_line("held", 10 * SECOND);
        let mut fields = line.splitn(4, ' ');
        let child = Death::watch(fields.next().unwrap().parse().unwrap());
        let token: u64 = fields.next().unwrap().parse().unwrap();
        let held = Held {
            lease: fields.next().unwrap().into(),
            key: fields.next().unwrap().into(),
        };
        let (code, err) = check(&url, lock, &held.key, token);
        assert_eq!(code, 0, "{how}: {err}");
        holders.push((holder, held, token, child));
    }

    let mut ended_at = Vec::new();
    for ((how, lock, _), (_, held, _, _)) in cases.iter().zip(&holders) {
        ended_at.push(now_ns());
        store.end_lease_from_outside(lock, held, how);
    }

    let within = S::notices_outside_end_within(ttl);
    for (((how, lock, ignores_term), (mut holder, held, token, child)), ended_at) in
        cases.into_iter().zip(holders).zip(ended_at)
    {
        let termed_at: i128 = holder.expect_line("term", 10 * SECOND).parse().unwrap();
        let died_at = child.at(10 * SECOND);
        eprintln!(
            "{}, {how}{}: the command's SIGTERM after {:.1} ms, its end after {:.1} ms",
            S::NAME,
            if ignores_term {
                ", SIGTERM ignored"
            } else {
                ""
            },
            ms(termed_at - ended_at),
            ms(died_at - ended_at)
        );
        assert!(
            termed_at - ended_at < within.as_nanos() as i128,
            "{how}: SIGTERM {:.1} ms after the end; expected within {within:?}",
            ms(termed_at - ended_at)
        );
        if ignores_term {
            // The shell notes the signal after its current 10 ms sleep.
            let killed_after = died_at - termed_at;
            assert!(
                (50_000_000..900_000_000).contains(&killed_after),
                "{how}: SIGKILL {:.1} ms after SIGTERM; expected about 100 ms",
                ms(killed_after)
            );
            assert!(died_at - ended_at >= 90_000_000);
        }
        assert_eq!(holder.wait_code(10 * SECOND), 76, "{how}");
        let said = holder.stderr_seen.join("\n");
        assert!(
            said.contains(&format!(
                "lost the lease on lock {lock} at {}",
                store.shown()
            )),
            "{how}: {said}"
        );
        let (code, err) = check(&url, &lock, &held.key, token);
        assert_eq!(code, 1, "{how}: the holder is no more");
        assert!(err.contains("free"), "{how}: {err}");
    }
}

/// A lock never seen whose name is close to one held is most likely that
/// one mistyped: status says which; not for a lock that was used, nor for
/// a name close to none.
fn status_of_a_mistyped_lock_names_the_close_one<S: StoreUnderTest>() {
    let under_test = S::start("mistyped");
    let store = &under_test.url();
    let (_holder, _) = hold(store, "nightly-report", &[]);
    let (code, out) = status(store, "nightly-reprot", false);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.ends_with(": free; did you mean nightly-report?\n"),
        "{out}"
    );
    assert_eq!(out.lines().count(), 1, "{out}");
    let (code, out) = status(store, "weekly-backup", false);
    assert_eq!(code, 1, "{out}");
    assert!(out.ends_with(": free\n"), "{out}");
    // Used, so no mistake, however close.
    let out = elect_run(store, "nightly-reports", &[], "true")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr_of(&out));
    let (code, out) = status(store, "nightly-reports", false);
    assert_eq!(code, 1, "{out}");
    assert!(!out.contains("did you mean"), "{out}");
}

fn wait_for_waiters(store: &str, lock: &str, n: u64) {
    support::eventually(&format!("{n} waiters for {lock}"), 10 * SECOND, || {
        let (_, out) = status(store, lock, true);
        let v: Value = serde_json::from_str(&out).unwrap();
        match v["waiting"] == n {
            true => Ok(()),
            false => Err(out),
        }
    })
}

fn status_check_and_break_agree<S: StoreUnderTest>() {
    let under_test = S::start("inspect");
    let store = &under_test.url();
    let lock = "report";
    let (code, out) = status(store, lock, false);
    assert_eq!(code, 1, "a free lock: {out}");
    assert!(out.contains(": free"), "{out}");

    let (mut holder, mut waiter, key, token) = holder_and_waiter(store, lock);
    wait_for_waiters(store, lock, 1);

    let (code, out) = status(store, lock, false);
    assert_eq!(code, 0);
    for text in [
        "held",
        "nightly-1",
        &format!("token:    {token}"),
        &key,
        "waiting:  1",
        "read _line",
    ] {
        assert!(out.contains(text), "{text} missing in\n{out}");
    }
    let (code, out) = status(store, lock, true);
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["lock"], lock);
    assert_eq!(v["held"], true);
    assert_eq!(v["token"], token);
    assert_eq!(v["key"], key.as_str());
    assert_eq!(v["holder"]["identity"], "nightly-1");
    assert_eq!(v["holder"]["command"][0], "sh");
    assert_eq!(v["waiting"], 1);
    assert!(v["holder"]["pid"].is_u64() && v["holder"]["since"].is_string());

    let out = elect()
        .args(["list", "--store", store, "--json"])
        .output()
        .unwrap();
    let all: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(all.as_array().unwrap().len(), 1, "{all}");
    assert_eq!(all[0]["lock"], lock);

    let (code, err) = check(store, lock, &key, token);
    assert_eq!(code, 0, "{err}");
    assert!(err.is_empty());
    let (code, _) = check(store, lock, &key, token - 1);
    assert_eq!(code, 1, "a wrong token is not the holder");

    // A break that names another token refuses and changes nothing.
    let out = elect()
        .args([
            "break", "--store", store, "--lock", lock, "--yes", "--token",
        ])
        .arg((token + 100).to_string())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = stderr_of(&out);
    assert!(
        err.contains("nothing broken") && !err.contains("asking"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert_eq!(status(store, lock, true).0, 0);

    let out = elect()
        .args([
            "break", "--store", store, "--lock", lock, "--yes", "--token",
        ])
        .arg(token.to_string())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(
        holder.wait_code(10 * SECOND),
        76,
        "the holder's elect saw the loss"
    );
    waiter.expect_line("ran", 10 * SECOND);
    assert_eq!(waiter.wait_code(10 * SECOND), 0);
    let (code, err) = check(store, lock, &key, token);
    assert_eq!(code, 1);
    assert!(err.contains("not the holder"), "{err}");
}

fn commands_that_cannot_run_exit_126_or_127_and_leave_nothing_behind<S: StoreUnderTest>() {
    let store = S::start("noexec");
    let dir = TempDir::new(&format!("{}-noexec-commands", S::NAME));
    let plain = dir.join("plain-file");
    std::fs::write(&plain, "#!/bin/sh\n").unwrap();
    let cases: [(&str, i32); 4] = [
        ("no-such-command-anywhere", 127),
        ("/no/such/path", 127),
        (dir.0.to_str().unwrap(), 126),
        (plain.to_str().unwrap(), 126),
    ];
    for (command, code) in cases {
        let out = elect()
            .args(["run", "--store", &store.url(), "--lock", "noexec", "--"])
            .arg(command)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(code), "{command}");
        let err = stderr_of(&out);
        assert!(err.contains(command) && err.lines().count() == 1, "{err}");
    }
    store.assert_empty();
}

/// An elect run inside the command of lock `outer` for the same lock on the
/// same store would wait for its own parent forever: refused at once with
/// 78, naming the lock; the same lock on another store, or another lock,
/// runs.
fn a_nested_run_of_the_same_lock_is_refused<S: StoreUnderTest>() {
    let store = S::start("nested");
    let url = store.url();
    let elect_bin = env!("CARGO_BIN_EXE_elect");
    let other = TempDir::new(&format!("{}-nested-other", S::NAME));
    let cases = [
        (format!("{elect_bin} run --lock outer -- echo inner"), 78),
        (format!("{elect_bin} run --lock other -- echo inner"), 0),
        (
            format!(
                "{elect_bin} run --store {} --lock outer -- echo inner",
                other.url()
            ),
            0,
        ),
    ];
    for (script, code) in cases {
        let started = Instant::now();
        let out = elect_run(&url, "outer", &[], &script).output().unwrap();
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(code), "{script}: {err}");
        assert!(started.elapsed() < 5 * SECOND, "{script}: {err}");
        match code {
            0 => assert_eq!(stdout_of(&out), "inner", "{script}: {err}"),
            _ => assert!(
                err.lines().count() == 1
                    && err.contains("lock outer")
                    && err.contains("wait for itself"),
                "{script}: {err}"
            ),
        }
    }
}

/// A lock's own records (`NAME.checkpoint`, `.shards`, `.last`) and its
/// shards (`NAME/shard-K`) are never a lock of their own, nor under one:
/// every command refuses such a name with 64 before it touches the store.
fn reserved_lock_names_exit_64_and_leave_nothing_behind<S: StoreUnderTest>() {
    let store = S::start("reserved");
    let url = store.url();
    for name in [
        "x.checkpoint",
        "x.shards",
        "x.last",
        "x/shard-0",
        "x.last/y",
        "x/shard-3/y",
    ] {
        let mut runs = vec![
            ("run", elect_run(&url, name, &[], "echo ran")),
            ("status", elect()),
            ("break", elect()),
            ("check", elect()),
        ];
        runs[1].1.args(["status", "--store", &url, "--lock", name]);
        runs[2]
            .1
            .args(["break", "--store", &url, "--lock", name, "--yes"]);
        runs[3].1.args([
            "check",
            "--store",
            &url,
            "--lock",
            name,
            "--holder-key",
            "k",
            "--token",
            "1",
        ]);
        let mut outs: Vec<(&str, std::process::Output)> = runs
            .into_iter()
            .map(|(what, mut c)| (what, c.output().unwrap()))
            .collect();
        outs.push((
            "checkpoint put",
            checkpoint_cmd(&url, name, Some(("k", 1)), &["put", "7"]),
        ));
        for (what, out) in outs {
            let err = stderr_of(&out);
            assert_eq!(out.status.code(), Some(64), "{what} --lock {name}: {err}");
            assert!(out.stdout.is_empty(), "{what} --lock {name}: nothing ran");
            assert!(
                err.contains(&format!("'{name}' is reserved")) && err.lines().count() == 1,
                "{what} --lock {name}: one line that names the reserved name: {err}"
            );
        }
    }
    store.assert_empty();
}

/// `elect break` on a holder whose elect, or whose guard, is frozen
/// (SIGSTOP): one that cannot answer. The break waits at most the holder's
/// TTL, by when its command is dead, then ends its tenure; the next holder
/// never runs beside the old command.
fn a_break_of_a_frozen_holder_ends_within_its_ttl_and_never_overlaps<S: StoreUnderTest>() {
    let store = S::start("frozen-break");
    let url = store.url();
    let ttl = 2 * SECOND;
    let extra = ["--ttl", "2s", "--grace", "500ms"];
    for frozen in ["elect", "its guard"] {
        let lock = format!("frozen-{}", frozen.len());
        let dir = TempDir::new(&format!("{}-frozen-{}", S::NAME, frozen.len()));
        let ticks = Ticks::new(&dir.0);
        let mut command = elect_run(&url, &lock, &extra, &ticks.script("A", true));
        // Its own job, as a shell would start it: the stop hits no one else.
        command.process_group(0);
        let mut a = Running::spawn(command);
        let a_group: i32 = a.expect_line("pgid", 10 * SECOND).parse().unwrap();
        ticks.first("A", 10 * SECOND);
        let mut b = Running::spawn(elect_run(&url, &lock, &extra, &ticks.script("B", true)));
        wait_contenders(&store, &lock, 2);
        let target = match frozen {
            "elect" => a.pid(),
            _ => *children(a.pid()).first().expect("elect has its guard"),
        };
        signal(target, libc::SIGSTOP);
        let began = Instant::now();
        let out = elect()
            .args(["break", "--store", &url, "--lock", &lock, "--yes"])
            .output()
            .unwrap();
        let took = began.elapsed();
        let overlap = ticks.overlap_ms("A", a_group, "B");
        eprintln!(
            "{}, break with {frozen} frozen: took {took:?}, exit {:?}; A's last tick {overlap:.1} ms after B's first",
            S::NAME,
            out.status.code()
        );
        assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
        assert!(
            took < ttl + 2 * SECOND,
            "{frozen} frozen: break took {took:?}, longer than the TTL"
        );
        assert!(
            overlap < 0.0,
            "{frozen} frozen: A's command ran {overlap:.1} ms beside B's"
        );
        assert!(!group_alive(a_group), "{:?}", group_members(a_group));
        signal(target, libc::SIGCONT);
        a.wait(10 * SECOND);
        b.signal(libc::SIGKILL);
        b.wait(10 * SECOND);
    }
}

/// `elect break` of a holder whose elect, guard and command were all
/// SIGKILLed: nobody is there to stop anything. Where its lease outlives
/// it, the break says the lease expired (`--json` outcome `expired`, or
/// `revoked` where the break ends the tenure itself once the holder could
/// have expired), never that the holder stopped its command; where the
/// lock dies with its processes, it is free.
fn a_break_of_a_dead_holder_says_nobody_let_go<S: StoreUnderTest>() {
    let store = S::start("dead-break");
    let url = store.url();
    let command = elect_run(&url, "dead", &["--ttl", "2s"], support::process::HOLD);
    let mut holder = Running::spawn(command);
    holder.expect_line("token", 10 * SECOND);
    let elect_pid = holder.pid();
    let guard = support::find_child(elect_pid, support::GUARD);
    let sh = support::find_child(guard, "sh");
    // Stopped first, so that none of them can let go as the others die.
    for pid in [elect_pid, guard, sh] {
        signal(pid, libc::SIGSTOP);
    }
    // The command first: the guard's death wakes its sentinel, which would
    // kill the command's group before this could.
    for pid in [sh, guard, elect_pid] {
        signal(pid, libc::SIGKILL);
    }
    holder.wait(5 * SECOND);
    let out = elect()
        .args([
            "break", "--store", &url, "--lock", "dead", "--yes", "--json",
        ])
        .output()
        .unwrap();
    let said = stderr_of(&out);
    let json: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let outcome = json["outcome"].as_str().unwrap_or_default().to_string();
    eprintln!("{}, break of a dead holder: {outcome}: {said}", S::NAME);
    assert_ne!(outcome, "stopped", "{said}");
    assert!(!said.contains("stopped its command"), "{said}");
    match outcome.as_str() {
        "expired" => {
            assert_eq!(out.status.code(), Some(0), "{said}");
            assert!(said.contains("expired"), "{said}");
        }
        "revoked" => assert_eq!(out.status.code(), Some(0), "{said}"),
        "free" => assert_eq!(out.status.code(), Some(1), "{said}"),
        _ => panic!("{}: outcome {outcome:?}: {said}", S::NAME),
    }
}

fn ctrl_c_while_waiting_leaves_the_queue_at_once<S: StoreUnderTest>() {
    let store = S::start("ctrl-c");
    let (mut holder, _) = hold(&store.url(), "queue", &[]);
    let mut waiter = Running::spawn(elect_run(&store.url(), "queue", &[], "echo ran"));
    wait_contenders(&store, "queue", 2);
    waiter.signal(libc::SIGINT);
    let status = waiter.wait(5 * SECOND);
    assert_eq!(status.signal(), Some(libc::SIGINT));
    assert_eq!(store.contenders("queue"), 1, "the waiter left the queue");
    assert_eq!(waiter.next_line(5 * SECOND), None, "the command never ran");
    holder.send_line("done");
    assert_eq!(holder.wait_code(10 * SECOND), 0);
}

fn the_child_sees_its_lock_token_and_store_and_no_secrets<S: StoreUnderTest>() {
    let store = S::start("env");
    let mut command = elect_run(&store.url(), "env-check", &["--identity", "batch-7"], "env");
    command
        .env("ELECT_TOKEN", "inherited")
        .env("ELECT_PASSWORD", "hunter2");
    let mut child = Running::spawn(command);
    let mut env = std::collections::HashMap::new();
    while let Some(line) = child.next_line(10 * SECOND) {
        if let Some((name, value)) = line.split_once('=') {
            env.insert(name.to_string(), value.to_string());
        }
    }
    assert_eq!(child.wait_code(10 * SECOND), 0, "{:?}", child.stderr_seen);
    assert!(
        child.stderr_seen.is_empty(),
        "a good run prints nothing of elect's own: {:?}",
        child.stderr_seen
    );
    let var = |name: &str| {
        env.get(name)
            .unwrap_or_else(|| panic!("{name} missing in {env:?}"))
            .as_str()
    };
    let token: u64 = var("ELECT_TOKEN")
        .parse()
        .expect("ELECT_TOKEN is a decimal number");
    assert!(token > 0);
    assert_eq!(var("ELECT_LOCK"), "env-check");
    assert_eq!(var("ELECT_IDENTITY"), "batch-7");
    assert_eq!(var("ELECT_STORE"), store.url());
    let lease = var("ELECT_LEASE_ID");
    assert!(
        S::lease_id_fits(lease, child.pid()),
        "ELECT_LEASE_ID {lease}"
    );
    let key = var("ELECT_KEY");
    assert!(store.key_fits("env-check", lease, key), "ELECT_KEY {key}");
    assert!(
        !env.contains_key("ELECT_PASSWORD"),
        "secrets never reach the child"
    );
    assert!(
        env.values().all(|v| !v.contains("hunter2")),
        "the password reached the child: {env:?}"
    );
}

fn the_child_starts_with_default_signal_handling_whatever_elect_inherited<S: StoreUnderTest>() {
    use std::os::unix::process::CommandExt;
    let store = S::start("sigmask");
    let mut command = elect();
    command
        .args(["run", "--store", &store.url(), "--lock", "sigmask", "--"])
        .args(["grep", "-E", "^Sig(Blk|Ign)", "/proc/self/status"]);
    // SAFETY: signal and sigprocmask are async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            libc::signal(libc::SIGALRM, libc::SIG_IGN);
            libc::signal(libc::SIGTSTP, libc::SIG_IGN);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGTERM);
            libc::sigaddset(&mut set, libc::SIGCHLD);
            libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            Ok(())
        });
    }
    let out = command.output().unwrap();
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n"
    );
}

/// `elect checkpoint` from outside a holder, with a holder's variables.
fn checkpoint_cmd(
    store: &str,
    lock: &str,
    held: Option<(&str, u64)>,
    args: &[&str],
) -> std::process::Output {
    let mut c = elect();
    c.arg("checkpoint")
        .args(args)
        .env("ELECT_STORE", store)
        .env("ELECT_LOCK", lock);
    if let Some((key, token)) = held {
        c.env("ELECT_KEY", key)
            .env("ELECT_TOKEN", token.to_string());
    }
    c.output().unwrap()
}

fn checkpoints_are_fenced_and_reach_the_next_holder<S: StoreUnderTest>() {
    let under_test = S::start("checkpoint");
    let store = &under_test.url();
    let lock = "resume";
    let out = checkpoint_cmd(store, lock, None, &["get"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "no checkpoint yet: {}",
        stderr_of(&out)
    );
    assert!(out.stdout.is_empty());

    // A commits twice (an argument, then stdin) and stays.
    let script = r#"echo "start ${ELECT_CHECKPOINT:-none}"; echo "key $ELECT_KEY"; echo "token $ELECT_TOKEN"; "$ELECT_BIN" checkpoint put 10 && echo 20 | "$ELECT_BIN" checkpoint put && echo stored; read _line"#;
    let mut command = elect_run(store, lock, &["--ttl", "3s"], script);
    command.env("ELECT_BIN", env!("CARGO_BIN_EXE_elect"));
    let mut a = Running::spawn(command);
    assert_eq!(a.expect_line("start", 10 * SECOND), "none");
    let a_key = a.expect_line("key", 10 * SECOND);
    let a_token: u64 = a.expect_line("token", 10 * SECOND).parse().unwrap();
    a.expect_line("stored", 10 * SECOND);
    let out = checkpoint_cmd(store, lock, None, &["get"]);
    assert_eq!(stdout_of(&out), "20");
    let out = checkpoint_cmd(store, lock, None, &["get", "--json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (v["value"].as_str(), v["token"].as_u64()),
        (Some("20"), Some(a_token))
    );
    let (_, shown) = status(store, lock, true);
    let v: Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(v["checkpoint"]["token"], a_token, "{shown}");
    a.send_line("done");
    assert_eq!(a.wait_code(10 * SECOND), 0);

    // B starts from A's last checkpoint, and holds.
    let script = r#"echo "start ${ELECT_CHECKPOINT:-none}"; echo "key $ELECT_KEY"; echo "token $ELECT_TOKEN"; read _line"#;
    let mut b = Running::spawn(elect_run(store, lock, &["--ttl", "3s"], script));
    assert_eq!(b.expect_line("start", 10 * SECOND), "20");
    let b_key = b.expect_line("key", 10 * SECOND);
    let b_token: u64 = b.expect_line("token", 10 * SECOND).parse().unwrap();

    // A, stale, cannot write over B's lock; the value stays.
    let out = checkpoint_cmd(store, lock, Some((&a_key, a_token)), &["put", "99"]);
    assert_eq!(out.status.code(), Some(76), "{}", stderr_of(&out));
    let err = stderr_of(&out);
    assert!(
        err.contains(&b_token.to_string()) && err.lines().count() == 1,
        "names B's token {b_token}: {err}"
    );
    let out = checkpoint_cmd(
        store,
        lock,
        Some((&a_key, a_token)),
        &["put", "99", "--json"],
    );
    assert_eq!(out.status.code(), Some(76), "{}", stderr_of(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (
            v["stored"].as_bool(),
            v["token"].as_u64(),
            v["bytes"].as_u64()
        ),
        (Some(false), Some(a_token), Some(2)),
        "{v}"
    );
    assert!(v["why"].as_str().is_some(), "{v}");
    assert_eq!(
        stdout_of(&checkpoint_cmd(store, lock, None, &["get"])),
        "20"
    );

    // The holder's key with a token that is not its own: refused too.
    for wrong in [a_token, b_token + 1] {
        let out = checkpoint_cmd(store, lock, Some((&b_key, wrong)), &["put", "98"]);
        assert_eq!(
            out.status.code(),
            Some(76),
            "B's key, token {wrong}: {}",
            stderr_of(&out)
        );
    }
    assert_eq!(
        stdout_of(&checkpoint_cmd(store, lock, None, &["get"])),
        "20"
    );

    // Too large: refused before the store is asked.
    let big = "x".repeat(64 * 1024 + 1);
    let out = checkpoint_cmd(store, lock, Some((&b_key, b_token)), &["put", &big]);
    assert_eq!(out.status.code(), Some(64), "{}", stderr_of(&out));
    assert!(stderr_of(&out).contains("64 KiB"));

    let out = checkpoint_cmd(store, lock, Some((&b_key, b_token)), &["put", "30"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    b.send_line("done");
    assert_eq!(b.wait_code(10 * SECOND), 0);
    let out = elect_run(store, lock, &[], "echo \"start $ELECT_CHECKPOINT\"")
        .output()
        .unwrap();
    assert_eq!(stdout_of(&out), "start 30", "{}", stderr_of(&out));
}

/// `elect status --json` of a sharded lock: the token of each shard's
/// holder, `None` where a shard is free.
fn shard_tokens(store: &str, lock: &str) -> Vec<Option<u64>> {
    recorded_shard_tokens(store, lock).unwrap_or_else(|out| panic!("not sharded: {out}"))
}

/// As `shard_tokens`, or the status itself while no instance has recorded
/// the lock's shard count yet.
fn recorded_shard_tokens(store: &str, lock: &str) -> Result<Vec<Option<u64>>, String> {
    let (_, out) = status(store, lock, true);
    let v: Value = serde_json::from_str(&out).unwrap();
    let Some(shards) = v["shard"].as_array() else {
        return Err(out);
    };
    let tokens: Vec<Option<u64>> = shards.iter().map(|s| s["token"].as_u64()).collect();
    // `held` is a bool, as for any lock; the count is beside it.
    let held = tokens.iter().flatten().count();
    assert_eq!(v["held"], Value::Bool(held > 0), "{out}");
    assert_eq!(v["held_shards"], held, "{out}");
    Ok(tokens)
}

/// Wait until `held` shards of `lock` are held; their tokens. The lock is
/// sharded once the first instance to reach the store has recorded the count.
fn wait_shards_held(store: &str, lock: &str, held: usize) -> Vec<Option<u64>> {
    let give_up = Instant::now() + 20 * SECOND;
    loop {
        let tokens = recorded_shard_tokens(store, lock);
        if let Ok(tokens) = &tokens
            && tokens.iter().flatten().count() == held
        {
            return tokens.clone();
        }
        assert!(Instant::now() < give_up, "{held} shards held? {tokens:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Three instances for each of eight shards: each shard gets one owner,
/// each owner its own ELECT_SHARD; when an owner ends (a clean exit, or
/// SIGKILL of its elect) a standby takes that shard, with a higher token
/// for that shard only; standbys wait in every queue and leave the others.
fn each_shard_gets_one_owner_and_a_standby_takes_over<S: StoreUnderTest>() {
    const SHARDS: u32 = 8;
    let under_test = S::start("shards");
    let store = &under_test.url();
    let lock = "tenants";
    let script = r#"echo "shard $ELECT_SHARD $ELECT_SHARDS $ELECT_TOKEN"; read _line"#;
    let ttl = S::crowd_ttl_secs();
    let ttl_flag = format!("{ttl}s");
    let flags = ["--shards", "8", "--ttl", &ttl_flag];
    let mut instances: Vec<Running> = (0..3 * SHARDS)
        .map(|i| {
            let id = format!("instance-{i}");
            let mut args = flags.to_vec();
            args.extend(["--identity", &id]);
            Running::spawn(elect_run(store, lock, &args, script))
        })
        .collect();
    wait_shards_held(store, lock, SHARDS as usize);
    // Each owner said which shard it has.
    let mut owner_of: Vec<Option<(usize, u64)>> = vec![None; SHARDS as usize];
    let give_up = Instant::now() + 10 * SECOND;
    while owner_of.iter().any(Option::is_none) {
        assert!(Instant::now() < give_up, "owners {owner_of:?}");
        for i in 0..instances.len() {
            if let Some(line) = instances[i].try_line() {
                let fields: Vec<u64> = line
                    .split_whitespace()
                    .skip(1)
                    .map(|f| f.parse().unwrap())
                    .collect();
                let (shard, shards, token) = (fields[0] as usize, fields[1], fields[2]);
                assert_eq!(shards, u64::from(SHARDS));
                // A second owner only after the first lost the shard (on
                // two busy cores a renewal can come too late) and stopped
                // its command: never two at once, and the token rose.
                if let Some((earlier, earlier_token)) = owner_of[shard] {
                    let code = instances[earlier].wait_code(Duration::from_secs(2 * ttl));
                    assert_eq!(code, 76, "shard {shard} has two owners");
                    assert!(
                        token > earlier_token,
                        "shard {shard}: token {token} after {earlier_token}"
                    );
                    eprintln!(
                        "{}: instance {earlier} lost shard {shard}; instance {i} took it over",
                        S::NAME
                    );
                }
                owner_of[shard] = Some((i, token));
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // Settled: the store names the same owners, one per shard.
    let tokens = shard_tokens(store, lock);
    for (shard, owner) in owner_of.iter().enumerate() {
        assert_eq!(
            tokens[shard],
            owner.map(|(_, t)| t),
            "shard {shard}'s token"
        );
    }
    let owner_of: Vec<usize> = owner_of.into_iter().map(|o| o.unwrap().0).collect();
    eprintln!(
        "{}: {} instances, {SHARDS} shards: owners (instance per shard) {owner_of:?}, tokens {:?}",
        S::NAME,
        instances.len(),
        tokens.iter().map(|t| t.unwrap()).collect::<Vec<_>>()
    );

    // A clean exit: a standby takes that shard at once.
    let before = shard_tokens(store, lock);
    let ended_at = now_ns();
    let owner = owner_of[0];
    instances[owner].send_line("done");
    assert_eq!(instances[owner].wait_code(10 * SECOND), 0);
    let after = wait_new_owner(store, lock, 0, &before);
    eprintln!(
        "{}: shard 0 changed hands {:.0} ms after a clean exit, token {:?} -> {:?}",
        S::NAME,
        ms(after - ended_at),
        before[0],
        shard_tokens(store, lock)[0]
    );
    assert!(
        after - ended_at < 2_000_000_000,
        "a standby took shard 0 late"
    );

    // SIGKILL of an owner's elect: within the TTL.
    let tokens = shard_tokens(store, lock);
    let killed_at = now_ns();
    let owner = owner_of[1];
    instances[owner].signal(libc::SIGKILL);
    instances[owner].wait(10 * SECOND);
    let after = wait_new_owner(store, lock, 1, &tokens);
    eprintln!(
        "{}: shard 1 changed hands {:.0} ms after SIGKILL of its elect, token {:?} -> {:?}",
        S::NAME,
        ms(after - killed_at),
        tokens[1],
        shard_tokens(store, lock)[1]
    );
    assert!(
        after - killed_at < (i128::from(ttl) + 1) * 1_000_000_000,
        "within the TTL ({ttl} s)"
    );
    for mut instance in instances {
        if instance.try_wait_code().is_none() {
            instance.signal(libc::SIGTERM);
            instance.wait(10 * SECOND);
        }
    }
}

/// Wait until shard `k` of `lock` has a holder with a higher token than in
/// `before`, every other shard's token unchanged; when it did.
fn wait_new_owner(store: &str, lock: &str, k: usize, before: &[Option<u64>]) -> i128 {
    let give_up = Instant::now() + 15 * SECOND;
    loop {
        let now = shard_tokens(store, lock);
        if let (Some(new), Some(old)) = (now[k], before[k])
            && new > old
        {
            let at = now_ns();
            for (j, (n, b)) in now.iter().zip(before).enumerate() {
                if j != k {
                    assert_eq!(
                        n, b,
                        "shard {j}'s token changed when shard {k} changed hands"
                    );
                }
            }
            return at;
        }
        assert!(Instant::now() < give_up, "shard {k}: {before:?} -> {now:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The number of shards is recorded on first use: another is refused (78);
/// `--prefer-shard` is taken when free; a standby that gives up leaves no
/// queue entry behind in any shard.
fn shard_counts_preferences_and_giving_up<S: StoreUnderTest>() {
    let under_test = S::start("shard-rules");
    let store = &under_test.url();
    let lock = "parts";
    let out = elect_run(
        store,
        lock,
        &["--shards", "4", "--prefer-shard", "2"],
        "echo shard $ELECT_SHARD",
    )
    .output()
    .unwrap();
    assert_eq!(stdout_of(&out), "shard 2", "{}", stderr_of(&out));
    // Without a preference, this identity goes back to the shard it held.
    let out = elect_run(store, lock, &["--shards", "4"], "echo shard $ELECT_SHARD")
        .output()
        .unwrap();
    assert_eq!(stdout_of(&out), "shard 2", "sticky: {}", stderr_of(&out));
    let out = elect_run(store, lock, &["--shards", "3"], "echo ran")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78), "{}", stderr_of(&out));
    let err = stderr_of(&out);
    assert!(
        err.contains("4 shards") && err.contains("--shards 3") && err.lines().count() == 1,
        "{err}"
    );
    assert!(out.stdout.is_empty());
    // Without --shards, a run would wait behind the shards' holders, and a
    // break without --shard would end none of them: both refused, at once.
    let unsharded = [
        (elect_run(store, lock, &[], "echo ran"), "--shards 4"),
        (
            {
                let mut c = elect();
                c.args(["break", "--store", store, "--lock", lock, "--yes"]);
                c
            },
            "--shard K (0 to 3)",
        ),
    ];
    for (mut command, says) in unsharded {
        let started = Instant::now();
        let out = command.output().unwrap();
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(78), "{err}");
        assert!(
            err.contains("4 shards") && err.contains(says) && err.lines().count() == 1,
            "{err}"
        );
        assert!(out.stdout.is_empty());
        assert!(started.elapsed() < 3 * SECOND, "{err}");
    }

    // All four held, each owner checks its own shard from inside; a fifth
    // waits a second in every queue, then gives up.
    let script = r#""$ELECT_BIN" check && echo "shard $ELECT_SHARD"; read _line"#;
    let mut owners: Vec<Running> = (0..4)
        .map(|_| {
            let mut command = elect_run(store, lock, &["--shards", "4", "--ttl", "3s"], script);
            command.env("ELECT_BIN", env!("CARGO_BIN_EXE_elect"));
            Running::spawn(command)
        })
        .collect();
    let mut shards: Vec<String> = owners
        .iter_mut()
        .map(|o| o.expect_line("shard", 10 * SECOND))
        .collect();
    let owner_of_3 = shards.iter().position(|s| s == "3").unwrap();
    shards.sort();
    assert_eq!(shards, ["0", "1", "2", "3"]);
    let out = elect_run(store, lock, &["--shards", "4", "--wait", "1s"], "echo ran")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75), "{}", stderr_of(&out));
    for k in 0..4 {
        assert_eq!(
            S::shard_contenders(&under_test, &format!("{lock}/shard-{k}")),
            1,
            "the one that gave up left shard {k}'s queue"
        );
    }
    // One shard broken: its owner stops, the others hold on.
    let out = elect()
        .args([
            "break", "--store", store, "--lock", lock, "--shard", "3", "--yes",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert_eq!(owners[owner_of_3].wait_code(10 * SECOND), 76);
    assert_eq!(shard_tokens(store, lock).iter().flatten().count(), 3);
    for (i, mut owner) in owners.into_iter().enumerate() {
        if i != owner_of_3 {
            owner.send_line("done");
            assert_eq!(owner.wait_code(10 * SECOND), 0);
        }
    }
}

/// A checkpoint outlives a break of its writer and a restart of the store.
fn checkpoints_survive_a_break_and_a_store_restart<S: StoreUnderTest>() {
    let mut under_test = S::start("checkpoint-kept");
    let store = &under_test.url();
    let lock = "kept";
    let script = r#""$ELECT_BIN" checkpoint put 7 && echo stored; read _line"#;
    let mut command = elect_run(store, lock, &["--ttl", "3s"], script);
    command.env("ELECT_BIN", env!("CARGO_BIN_EXE_elect"));
    let mut holder = Running::spawn(command);
    holder.expect_line("stored", 10 * SECOND);
    let out = elect()
        .args(["break", "--store", store, "--lock", lock, "--yes"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert_eq!(holder.wait_code(10 * SECOND), 76);
    assert_eq!(stdout_of(&checkpoint_cmd(store, lock, None, &["get"])), "7");
    under_test.restart();
    assert_eq!(stdout_of(&checkpoint_cmd(store, lock, None, &["get"])), "7");
    let out = elect_run(store, lock, &[], "echo \"start $ELECT_CHECKPOINT\"")
        .output()
        .unwrap();
    assert_eq!(stdout_of(&out), "start 7", "{}", stderr_of(&out));
}

/// Where no store of this kind answers, elect gives up with 69 within the
/// default --connect-timeout (10 s, and at most a second more), in one line
/// that names what it met there; a refused connection at once; a
/// terminating signal ends it at once, by that signal. All at once, side by
/// side, with the default settings.
fn a_store_that_never_answers_is_given_up_on_in_time<S: StoreUnderTest>() {
    // `file:` is a directory: there is no address to go unanswered.
    if !S::HAS_ENDPOINT {
        return;
    }
    let bound = 11 * SECOND;
    let silent = Listener::start(Manner::Silent);
    let closing = Listener::start(Manner::Closing);
    let garbage = Listener::start(Manner::Garbage);
    let http = Listener::start(Manner::Http);
    let others = other_servers::<S>();
    let not = |like: &str| format!("this is not {}: it answered like {like}", S::SPEAKS);
    let unresolved = format!("{UNRESOLVED}:2379");
    let mut cases: Vec<(String, String, Duration, Vec<String>)> = vec![
        (
            "a silent listener".into(),
            S::url_at(&silent.host_port()),
            bound,
            vec![
                "accepted the connection and never answered".into(),
                "10s".into(),
            ],
        ),
        (
            "a listener that closes at once".into(),
            S::url_at(&closing.host_port()),
            bound,
            vec!["closed the connection without a word".into()],
        ),
        (
            "a listener that sends garbage".into(),
            S::url_at(&garbage.host_port()),
            bound,
            vec![
                format!("this is not {}", S::SPEAKS),
                "no protocol elect knows".into(),
            ],
        ),
        (
            "an HTTP/1 server".into(),
            S::url_at(&http.host_port()),
            bound,
            vec![not("an HTTP server")],
        ),
        (
            "a refused port".into(),
            S::url_at(&refused()),
            SECOND,
            vec!["connection refused".into()],
        ),
        (
            "a host name that does not resolve".into(),
            S::url_at(&unresolved),
            bound,
            vec![UNRESOLVED.into(), "resolve".into()],
        ),
    ];
    for other in &others {
        cases.push((
            format!("{} at {}", other.name, other.host_port),
            S::url_at(&other.host_port),
            bound,
            vec![not(other.name)],
        ));
    }
    let watched = |elect: Running| {
        let death = Death::watch(elect.pid());
        (elect, death, now_ns())
    };
    let mut gave_up: Vec<_> = cases
        .into_iter()
        .map(|(what, url, within, says)| {
            let elect = Running::spawn(elect_run(&url, "unanswered", &[], "echo ran"));
            (what, watched(elect), within, says)
        })
        .collect();
    // The other commands share the bound.
    let inspect = [
        (
            "elect status at a silent listener",
            vec!["status", "--lock", "unanswered"],
            silent.host_port(),
            "accepted the connection and never answered",
        ),
        (
            "elect list at an HTTP/1 server",
            vec!["list"],
            http.host_port(),
            "it answered like an HTTP server",
        ),
    ];
    for (what, args, at, says) in inspect {
        let mut command = elect();
        command.args(args).args(["--store", &S::url_at(&at)]);
        let run = watched(Running::spawn(command));
        gave_up.push((what.to_string(), run, bound, vec![says.to_string()]));
    }
    let url = S::url_at(&silent.host_port());
    let mut verbose = watched(Running::spawn(elect_run(
        &url,
        "unanswered",
        &["-v"],
        "echo ran",
    )));
    let mut signalled: Vec<_> = [
        (libc::SIGQUIT, 1000),
        (libc::SIGINT, 1200),
        (libc::SIGTERM, 1500),
        (libc::SIGHUP, 1800),
    ]
    .into_iter()
    .map(|(sig, after)| {
        let elect = Running::spawn(elect_run(&url, "unanswered", &[], "echo ran"));
        (sig, Duration::from_millis(after), watched(elect))
    })
    .collect();

    // Each signal in turn, sent while elect still waits.
    let mut sent = Vec::new();
    for (sig, after, (elect, _, _)) in &mut signalled {
        std::thread::sleep((elect.started + *after).saturating_duration_since(Instant::now()));
        sent.push((elect.try_wait_code().is_none(), now_ns()));
        elect.signal(*sig);
    }

    // Every outcome first, the figures shown, then the judgement. Until
    // `give_up`, then what still runs is killed.
    let give_up = Instant::now() + bound + 2 * SECOND;
    let ended = |(elect, death, started): &mut (Running, Death, i128)| {
        let died = death.within(give_up.saturating_duration_since(Instant::now()));
        let status = match died {
            Some(_) => elect.child.wait().ok(),
            None => None,
        };
        // Let the reader threads catch up with the last lines.
        std::thread::sleep(Duration::from_millis(20));
        let took = died.map(|at| Duration::from_nanos((at - *started) as u64));
        (status, took, died)
    };
    let mut failures = Vec::new();
    for ((sig, after, run), (still, sent)) in signalled.iter_mut().zip(sent) {
        let (status, _, died) = ended(run);
        let took = died.map(|at| Duration::from_nanos((at - sent) as u64));
        eprintln!(
            "signal {sig} at {after:?}: {} after {took:?}",
            shown(&status)
        );
        if !(still && status.and_then(|s| s.signal()) == Some(*sig) && took < Some(SECOND)) {
            failures.push(format!(
                "signal {sig} sent {after:?} in: {} after {took:?} (running when sent: {still}); stderr: {}",
                shown(&status),
                run.0.drain_stderr()
            ));
        }
    }
    for (what, run, within, says) in &mut gave_up {
        let (status, took, _) = ended(run);
        let elect = &mut run.0;
        let stderr = elect.drain_stderr();
        eprintln!("{what}: {} after {took:?}: {stderr}", shown(&status));
        let lines = stderr.lines().count();
        let said = says.iter().all(|w| stderr.contains(w.as_str()));
        let ran = elect.try_line().is_some();
        if status.and_then(|s| s.code()) != Some(69)
            || took.is_none_or(|t| t > *within)
            || lines != 1
            || !said
            || ran
        {
            failures.push(format!(
                "{what}: {} after {took:?} (69 within {within:?} expected, one line saying {says:?}, the command not run); stderr: {stderr}",
                shown(&status)
            ));
        }
    }
    let (status, took, _) = ended(&mut verbose);
    let stderr = verbose.0.drain_stderr();
    eprintln!("a silent listener, -v: {} after {took:?}", shown(&status));
    if status.and_then(|s| s.code()) != Some(69)
        || took.is_none_or(|t| t > bound)
        || ["granted", "released", "revoke"]
            .iter()
            .any(|claim| stderr.to_lowercase().contains(claim))
    {
        failures.push(format!(
            "a silent listener, -v: {} after {took:?} (69, no line claiming a grant, a release \
             or a lease to revoke); stderr: {stderr}",
            shown(&status)
        ));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn shown(status: &Option<std::process::ExitStatus>) -> String {
    match status {
        None => "still running".into(),
        Some(s) => match (s.code(), s.signal()) {
            (Some(code), _) => format!("exit {code}"),
            (_, Some(sig)) => format!("killed by signal {sig}"),
            _ => format!("{s:?}"),
        },
    }
}

/// When the command's leader exits, what it left in its group is killed,
/// and the lock passes only once none of it can run: a grandchild that
/// ticks on, one that ignores SIGTERM, one that is stopped, each holding
/// memory the kernel takes a while to free as it dies.
fn the_lock_passes_only_once_nothing_of_the_ended_commands_group_can_run<S: StoreUnderTest>() {
    let store = S::start("group-gone");
    let dir = TempDir::new(&format!("{}-group-gone", S::NAME));
    let ticks = Ticks::new(&dir.0);
    for (i, left) in [Left::Ticking, Left::IgnoringTerm, Left::Stopped]
        .into_iter()
        .enumerate()
    {
        let lock = format!("left{i}");
        let (old, new) = (format!("A{i}"), format!("B{i}"));
        let mut a = Running::spawn(elect_run(
            &store.url(),
            &lock,
            &["--ttl", "3s"],
            &ticks.script_leaving(&old, left, 512),
        ));
        let group: i32 = a.expect_line("pgid", 10 * SECOND).parse().unwrap();
        a.expect_line("ready", 20 * SECOND);
        let mut b = Running::spawn(elect_run(
            &store.url(),
            &lock,
            &["--ttl", "3s"],
            &ticks.script_looking(&new, group),
        ));
        wait_contenders(&store, &lock, 2);
        a.send_line("go");
        let left_at_start = b.expect_line("left", 20 * SECOND);
        let overlap = ticks.overlap_ms(&old, group, &new);
        eprintln!(
            "{}: {left:?}: the next holder found {left_at_start:?} of the old group; overlap {overlap:.1} ms",
            S::NAME
        );
        assert!(overlap < 0.0, "{left:?}: A ran {overlap:.1} ms beside B");
        assert!(
            left_at_start.starts_with("0"),
            "{left:?}: the next holder started while the old group could still run: {left_at_start}"
        );
        assert!(!support::ticker::group_alive(group));
        assert_eq!(a.wait_code(10 * SECOND), 0, "{:?}", a.stderr_seen);
        assert_eq!(b.wait_code(10 * SECOND), 0, "{:?}", b.stderr_seen);
    }
}

/// `elect run` in a session of its own, as a service manager or `setsid`
/// starts it: `pkill -s SID` then reaches it and nothing of other tests.
fn in_a_session(mut command: std::process::Command) -> Running {
    use std::os::unix::process::CommandExt;
    // SAFETY: setsid(2) is async-signal-safe; nothing else runs before the exec.
    unsafe {
        command.pre_exec(|| match libc::setsid() {
            -1 => Err(std::io::Error::last_os_error()),
            _ => Ok(()),
        });
    }
    Running::spawn(command)
}

/// A holder A, in a session of its own, whose command ticks from a
/// grandchild, and a waiter B: A's elect, its session, its command's group
/// and token, and B.
fn holder_in_a_session_and_waiter<S: StoreUnderTest>(
    store: &S,
    lock: &str,
    ticks: &Ticks,
) -> (Running, i32, u64, Running) {
    let extra = ["--ttl", "2s"];
    let mut a = in_a_session(elect_run(
        &store.url(),
        lock,
        &extra,
        &ticks.script("A", false),
    ));
    let token = a.expect_line("token", 10 * SECOND).parse().unwrap();
    let group = a.expect_line("pgid", 10 * SECOND).parse().unwrap();
    ticks.first("A", 10 * SECOND);
    let b = Running::spawn(elect_run(
        &store.url(),
        lock,
        &extra,
        &ticks.script("B", false),
    ));
    wait_contenders(store, lock, 2);
    (a, group, token, b)
}

/// `pkill -9 elect` matches every process whose name contains `elect`;
/// here only in the holder's session. elect dies; its guard is not called
/// elect, so it lives on to kill the command's group, and the lock passes
/// only after that.
fn pkill_9_elect_leaves_the_guard_to_stop_the_command_first<S: StoreUnderTest>() {
    let store = S::start("pkill");
    let dir = TempDir::new(&format!("{}-pkill", S::NAME));
    let ticks = Ticks::new(&dir.0);
    let (mut a, group, a_token, mut b) = holder_in_a_session_and_waiter(&store, "pk", &ticks);
    let killed_at = support::ticker::monotonic_ns();
    let pkill = std::process::Command::new("pkill")
        .args(["-9", "-s", &a.pid().to_string(), "elect"])
        .status()
        .expect("pkill: install Debian's procps package");
    assert!(pkill.success(), "pkill found no elect: {pkill:?}");
    let b_token: u64 = b.expect_line("token", 15 * SECOND).parse().unwrap();
    let overlap = ticks.overlap_ms("A", group, "B");
    let after = (ticks.first("B", SECOND) - killed_at) as f64 / 1e6;
    eprintln!(
        "{}: pkill -9 elect: B started {after:.0} ms after; A's last tick {overlap:.1} ms after B's first; A's group left: {:?}",
        S::NAME,
        support::ticker::group_members(group),
    );
    assert!(overlap < 0.0, "A's command ran {overlap:.1} ms beside B's");
    assert!(
        !support::ticker::group_alive(group),
        "A's command outlived its elect: {:?}",
        support::ticker::group_members(group)
    );
    assert!(a.wait(5 * SECOND).signal() == Some(libc::SIGKILL));
    assert_rising::<S>(&[a_token, b_token], "the killed holder, then the next");
    b.signal(libc::SIGTERM);
    b.wait(10 * SECOND);
}

/// SIGKILL `pids` as if at one instant: each is stopped first, so that none
/// acts on another's death before its own.
fn kill_at_once(pids: &[i32]) {
    for sig in [libc::SIGSTOP, libc::SIGKILL] {
        for &pid in pids {
            // SAFETY: plain kill(2) of our child and of its descendants.
            assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
        }
    }
}

/// elect and its guard SIGKILLed together: the command's own process dies
/// by its parent-death signal, and the guard's sentinel, whose pid the
/// command's group bears, kills the rest of it. The lock passes only after
/// that.
fn sigkill_of_elect_and_its_guard_together_leaves_nothing_running<S: StoreUnderTest>() {
    let store = S::start("elect-and-guard");
    let dir = TempDir::new(&format!("{}-elect-and-guard", S::NAME));
    let ticks = Ticks::new(&dir.0);
    let (a, group, a_token, mut b) = holder_in_a_session_and_waiter(&store, "both", &ticks);
    let guard = support::find_child(a.pid(), support::GUARD);
    let killed_at = support::ticker::monotonic_ns();
    kill_at_once(&[a.pid(), guard]);
    let give_up = Instant::now() + SECOND;
    while support::ticker::group_alive(group) {
        assert!(
            Instant::now() < give_up,
            "A's command outlived its elect and its guard: {:?}",
            support::ticker::group_members(group)
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let gone = (support::ticker::monotonic_ns() - killed_at) as f64 / 1e6;
    let b_token: u64 = b.expect_line("token", 15 * SECOND).parse().unwrap();
    let overlap = ticks.overlap_ms("A", group, "B");
    let after = (ticks.first("B", SECOND) - killed_at) as f64 / 1e6;
    eprintln!(
        "{}: SIGKILL of elect and its guard, TTL 2s: A's group gone within {gone:.0} ms, B started {after:.0} ms after the kill; overlap {overlap:.1} ms",
        S::NAME
    );
    assert!(overlap < 0.0, "A's command ran {overlap:.1} ms beside B's");
    assert_rising::<S>(&[a_token, b_token], "the killed holder, then the next");
    b.signal(libc::SIGTERM);
    b.wait(10 * SECOND);
}

/// elect, its guard and the guard's sentinel SIGKILLed, the command's group
/// left alive (its leader dies by its parent-death signal, the grandchild
/// does not). Where the lock lives in a descriptor the command's processes
/// share, it cannot pass while any of them lives. Elsewhere the lease
/// expires after its TTL and the grandchild runs on beside the next holder:
/// measured.
fn sigkill_of_every_watcher_of_the_command<S: StoreUnderTest>() {
    let store = S::start("every-watcher");
    let dir = TempDir::new(&format!("{}-every-watcher", S::NAME));
    let ticks = Ticks::new(&dir.0);
    let (a, group, _, mut b) = holder_in_a_session_and_waiter(&store, "all", &ticks);
    let guard = support::find_child(a.pid(), support::GUARD);
    let sentinel = support::find_child(guard, support::SENTINEL);
    let killed_at = support::ticker::monotonic_ns();
    kill_at_once(&[sentinel, a.pid(), guard]);
    let kill_group = || {
        // SAFETY: plain killpg(2) of the group A's command leads.
        unsafe { libc::killpg(group, libc::SIGKILL) };
    };
    if S::held_by_the_commands_descriptors() {
        // Two TTLs: the lock stays with A's command's group while any of
        // it lives (under load its grandchild is at times gone by then, and
        // the lock with it: then B may go ahead, and A ticks no more).
        let watch_until = Instant::now() + 4 * SECOND;
        while Instant::now() < watch_until {
            if ticks.last("B").is_some() {
                assert!(
                    !support::ticker::group_alive(group),
                    "the lock passed while A's command's group lived"
                );
                let overlap = ticks.overlap_ms("A", group, "B");
                eprintln!(
                    "{}: SIGKILL of elect, guard and sentinel: A's command's group was gone, and the lock with it; overlap {overlap:.1} ms",
                    S::NAME
                );
                assert!(overlap < 0.0, "A's command ran {overlap:.1} ms beside B's");
                b.signal(libc::SIGTERM);
                b.wait(10 * SECOND);
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(support::ticker::group_alive(group), "A's grandchild died");
        let ended_at = support::ticker::monotonic_ns();
        kill_group();
        let overlap = ticks.overlap_ms("A", group, "B");
        let after = (ticks.first("B", SECOND) - ended_at) as f64 / 1e6;
        eprintln!(
            "{}: SIGKILL of elect, guard and sentinel: the lock stayed with the command's group; B started {after:.1} ms after it ended; overlap {overlap:.1} ms",
            S::NAME
        );
        assert!(overlap < 0.0, "A's command ran {overlap:.1} ms beside B's");
    } else {
        let first_b = ticks.first("B", 15 * SECOND);
        let a_alive = support::ticker::group_alive(group);
        let after = (first_b - killed_at) as f64 / 1e6;
        kill_group();
        let overlap = ticks.overlap_ms("A", group, "B");
        eprintln!(
            "{}: SIGKILL of elect, guard and sentinel, TTL 2s: B started {after:.0} ms after, A's grandchild {}; it ticked {overlap:.1} ms beside B until the test killed it",
            S::NAME,
            if a_alive { "still running" } else { "gone" },
        );
        assert!(after < 4000.0, "the lease outlived its TTL: {after:.0} ms");
    }
    assert!(!support::ticker::group_alive(group));
    b.signal(libc::SIGTERM);
    b.wait(10 * SECOND);
}

/// `elect history --json` of `lock`: its tenures, oldest first.
fn history(store: &str, lock: &str, extra: &[&str]) -> Vec<Value> {
    let out = elect()
        .args(["history", "--store", store, "--lock", lock, "--json"])
        .args(extra)
        .output()
        .unwrap();
    match out.status.code() {
        Some(0) => stdout_of(&out)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect(),
        Some(1) => Vec::new(),
        _ => panic!("elect history: {}", stderr_of(&out)),
    }
}

/// Until `lock`'s history has an entry for `token` with `outcome`; that entry.
fn wait_history(store: &str, lock: &str, token: u64, outcome: &str) -> Value {
    let give_up = Instant::now() + 10 * SECOND;
    loop {
        let entries = history(store, lock, &[]);
        if let Some(e) = entries
            .iter()
            .find(|e| e["token"] == token && e["outcome"] == outcome)
        {
            return e.clone();
        }
        assert!(
            Instant::now() < give_up,
            "no {outcome} entry for token {token}: {entries:#?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Cron on a fleet: many hosts start the same `-n -q --once-per` line at
/// once. Exactly one runs the job; every other exits with its documented
/// code (0: done already, 75: busy) and says nothing; and no skipped host
/// leaves a record: the history holds the one run.
fn a_herd_on_one_once_per_lock_runs_the_job_once<S: StoreUnderTest>() {
    const HOSTS: usize = 20;
    let store = S::start("herd");
    let url = store.url();
    let script = r#"echo "ran $ELECT_TOKEN"; sleep 0.5"#;
    let hosts: Vec<_> = (0..HOSTS)
        .map(|i| {
            let identity = format!("host-{i}");
            let args = ["-n", "-q", "--once-per", "1h", "--identity", &identity];
            let mut c = elect_run(&url, "nightly", &args, script);
            c.stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            c.spawn().unwrap()
        })
        .collect();
    let outs: Vec<_> = hosts
        .into_iter()
        .map(|h| h.wait_with_output().unwrap())
        .collect();
    let ran = outs.iter().filter(|o| !o.stdout.is_empty()).count();
    assert_eq!(ran, 1, "the job ran {ran} times");
    for out in &outs {
        let code = out.status.code();
        assert!(
            matches!(code, Some(0 | 75)),
            "exit {code:?}: {}",
            stderr_of(out)
        );
        assert!(out.stderr.is_empty(), "with -q: {}", stderr_of(out));
    }
    let entries = history(&url, "nightly", &[]);
    let outcomes: Vec<&str> = entries
        .iter()
        .map(|e| e["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["succeeded"], "{entries:#?}");
}

/// Hosts that start 0.5 s apart run a 0.3 s job once between them: the
/// later ones find it done and say who did it; a failed run counts for
/// nothing.
fn once_per_runs_a_job_once_across_hosts<S: StoreUnderTest>() {
    let store = S::start("once");
    let url = store.url();
    let script = r#"echo "ran $ELECT_TOKEN"; sleep 0.3"#;
    let mut hosts = Vec::new();
    for name in ["host-a", "host-b", "host-c"] {
        let mut c = elect_run(
            &url,
            "nightly",
            &["--once-per", "1h", "--identity", name],
            script,
        );
        c.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        hosts.push(c.spawn().unwrap());
        if name == "host-a" {
            // Its clock is the earliest: it takes the lock first, however
            // long a loaded store takes to answer its first requests.
            support::eventually("host-a holding nightly, or done", 20 * SECOND, || {
                let (_, held) = status(&url, "nightly", true);
                match held.contains("host-a") || !history(&url, "nightly", &[]).is_empty() {
                    true => Ok(()),
                    false => Err(held),
                }
            });
        }
        // The scenario: cron on three hosts whose clocks differ by 0.5 s.
        std::thread::sleep(Duration::from_millis(500));
    }
    let outs: Vec<_> = hosts
        .into_iter()
        .map(|h| h.wait_with_output().unwrap())
        .collect();
    for out in &outs {
        assert_eq!(out.status.code(), Some(0), "{}", stderr_of(out));
    }
    let ran: Vec<&std::process::Output> = outs.iter().filter(|o| !o.stdout.is_empty()).collect();
    assert_eq!(ran.len(), 1, "the job ran {} times", ran.len());
    let token = stdout_of(ran[0]).trim_start_matches("ran ").to_string();
    assert_eq!(
        stdout_of(&outs[0]),
        format!("ran {token}"),
        "the first host ran it"
    );
    for out in &outs[1..] {
        let said = stderr_of(out);
        assert_eq!(said.lines().count(), 1, "{said}");
        assert!(
            said.contains("done already")
                && said.contains("host-a")
                && said.contains(&format!("token {token}")),
            "{said}"
        );
    }
    let entries = history(&url, "nightly", &[]);
    let outcomes: Vec<&str> = entries
        .iter()
        .map(|e| e["outcome"].as_str().unwrap())
        .collect();
    // The hosts that skipped left no record of their own.
    assert_eq!(outcomes, ["succeeded"], "{entries:#?}");
    // status: the run that did the work.
    let (code, out) = status(&url, "nightly", true);
    assert_eq!(code, 1, "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (&v["last"]["identity"], &v["last"]["outcome"]),
        (&json!("host-a"), &json!("succeeded")),
        "{v:#}"
    );
    let (_, out) = status(&url, "nightly", false);
    let line = |label: &str| {
        out.lines()
            .find(|l| l.trim_start().starts_with(label))
            .map(str::to_string)
    };
    assert!(
        line("last run:").is_some_and(|l| l.contains("host-a") && l.contains("succeeded")),
        "{out}"
    );
    assert!(line("skipped").is_none(), "{out}");

    // A failure records nothing: the next host runs it; the one after skips.
    let run = |name: &str, script: &str| {
        elect_run(
            &url,
            "weekly",
            &["--once-per", "1h", "--identity", name],
            script,
        )
        .output()
        .unwrap()
    };
    let failed = run("host-a", "echo ran; exit 3");
    assert_eq!(
        (failed.status.code(), stdout_of(&failed).as_str()),
        (Some(3), "ran")
    );
    let second = run("host-b", "echo ran");
    assert_eq!(
        (second.status.code(), stdout_of(&second).as_str()),
        (Some(0), "ran")
    );
    let third = run("host-c", "echo ran");
    assert_eq!(third.status.code(), Some(0));
    assert!(third.stdout.is_empty(), "the third host ran it again");
    assert!(
        stderr_of(&third).contains("host-b"),
        "{}",
        stderr_of(&third)
    );
}

/// The guide's retry of a failed night: hosts that wait (`--wait`, not
/// `-n`) with `--once-per` run the job again after a failure, and once
/// after a success.
fn a_failed_night_is_run_again_by_a_host_that_waits<S: StoreUnderTest>() {
    let store = S::start("retried");
    let url = store.url();
    let dir = TempDir::new(&format!("retried-{}", S::NAME));
    let marker = dir.join("failed-once");
    // Fails the first time, succeeds after; slow enough that the others queue.
    let script = format!(
        "sleep 0.3; if [ -e {m} ]; then echo ran; else touch {m}; echo failed; exit 3; fi",
        m = marker.display()
    );
    let hosts: Vec<_> = ["host-a", "host-b", "host-c"]
        .iter()
        .map(|name| {
            let mut c = elect_run(
                &url,
                "nightly",
                &[
                    "--wait",
                    "20s",
                    "-q",
                    "--once-per",
                    "1h",
                    "--identity",
                    name,
                ],
                &script,
            );
            c.stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            c.spawn().unwrap()
        })
        .collect();
    let outs: Vec<_> = hosts
        .into_iter()
        .map(|h| h.wait_with_output().unwrap())
        .collect();
    let mut said: Vec<(Option<i32>, String)> = outs
        .iter()
        .map(|o| (o.status.code(), stdout_of(o)))
        .collect();
    said.sort();
    assert_eq!(
        said,
        [
            (Some(0), String::new()),
            (Some(0), "ran".to_string()),
            (Some(3), "failed".to_string())
        ],
        "{:?}",
        outs.iter().map(stderr_of).collect::<Vec<_>>()
    );
    for out in &outs {
        assert!(out.stderr.is_empty(), "with -q: {}", stderr_of(out));
    }
    let mut outcomes: Vec<String> = history(&url, "nightly", &[])
        .iter()
        .map(|e| e["outcome"].as_str().unwrap().to_string())
        .collect();
    outcomes.sort();
    // The host that found it done left no record.
    assert_eq!(outcomes, ["failed", "succeeded"]);
}

/// `elect list` is the inventory of the jobs run at a store: the locks
/// held, and the free ones that have a history, each with its last run.
fn list_names_every_lock_run_there_with_its_last_run<S: StoreUnderTest>() {
    let store = S::start("inventory");
    let url = store.url();
    let ran = |lock: &str, script: &str| {
        elect_run(&url, lock, &["--identity", "inventory"], script)
            .output()
            .unwrap()
            .status
            .code()
    };
    assert_eq!(ran("inv/done", "true"), Some(0));
    assert_eq!(ran("inv/failed", "exit 3"), Some(3));
    let (mut holder, token) = hold(&url, "inv/held", &["--identity", "holding"]);
    let out = elect()
        .args(["list", "--json", "--prefix", "inv/", "--store", &url])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let all: Value = serde_json::from_slice(&out.stdout).unwrap();
    let got: Vec<(&str, bool, &str)> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["lock"].as_str().unwrap(),
                l["held"].as_bool().unwrap(),
                l["last"]["outcome"].as_str().unwrap_or("-"),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("inv/done", false, "succeeded"),
            ("inv/failed", false, "failed"),
            ("inv/held", true, "-"),
        ],
        "{all:#}"
    );
    assert_eq!(all[2]["token"], token);
    let out = elect()
        .args(["list", "--prefix", "inv/", "--store", &url])
        .output()
        .unwrap();
    let text = stdout_of(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(
        lines[0].starts_with("inv/done\tfree\t0 waiting\tlast run: inventory on ")
            && lines[0].ends_with(": succeeded"),
        "{text}"
    );
    assert!(lines[1].ends_with(": failed with exit code 3"), "{text}");
    assert!(lines[2].starts_with("inv/held\theld by holding"), "{text}");
    holder.send_line("done");
    assert_eq!(holder.wait_code(10 * SECOND), 0);
}

/// A slot done is never run again, a new one is, and --done-exit-code
/// tells "done before" apart.
fn a_slot_done_is_not_run_again<S: StoreUnderTest>() {
    let store = S::start("slot");
    let url = store.url();
    let run = |slot: &str, extra: &[&str]| {
        let mut args = vec!["--slot", slot];
        args.extend(extra);
        elect_run(&url, "billing", &args, "echo ran")
            .output()
            .unwrap()
    };
    let first = run("2026-11", &[]);
    assert_eq!(
        (first.status.code(), stdout_of(&first).as_str()),
        (Some(0), "ran")
    );
    for extra in [&[][..], &["--done-exit-code", "3"][..]] {
        let again = run("2026-11", extra);
        let code = if extra.is_empty() { 0 } else { 3 };
        assert_eq!(again.status.code(), Some(code), "{}", stderr_of(&again));
        assert!(again.stdout.is_empty(), "slot 2026-11 ran twice");
        assert!(
            stderr_of(&again).contains("slot 2026-11"),
            "{}",
            stderr_of(&again)
        );
    }
    let next = run("2026-12", &[]);
    assert_eq!(
        (next.status.code(), stdout_of(&next).as_str()),
        (Some(0), "ran")
    );
    let bad = run("2026/12", &[]);
    assert_eq!(bad.status.code(), Some(64), "{}", stderr_of(&bad));
    assert_eq!(stderr_of(&bad).lines().count(), 1);
    let slots: Vec<Value> = history(&url, "billing", &[])
        .into_iter()
        .map(|e| e["slot"].clone())
        .collect();
    // The runs that found the slot done left no record.
    assert_eq!(slots, ["2026-11", "2026-12"]);

    // With --shards, each shard's slot is its own.
    let on_shard = |k: &str| {
        let args = ["--shards", "2", "--prefer-shard", k, "--slot", "2026-11"];
        elect_run(&url, "sharded", &args, "echo ran $ELECT_SHARD")
            .output()
            .unwrap()
    };
    for (k, ran) in [("0", "ran 0"), ("0", ""), ("1", "ran 1"), ("1", "")] {
        let out = on_shard(k);
        assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
        assert_eq!(stdout_of(&out), ran, "shard {k}: {}", stderr_of(&out));
        if !ran.is_empty() {
            assert!(out.stderr.is_empty(), "shard {k}: {}", stderr_of(&out));
        }
    }
}

/// Every way a tenure ends is in the lock's history, with its token and
/// identity; the history keeps its bound; status names the last holder.
fn the_history_records_how_each_tenure_ended<S: StoreUnderTest>() {
    let store = S::start("history");
    let url = store.url();
    let lock = "hist";
    let token_of = |out: &std::process::Output| -> u64 { stdout_of(out).parse().unwrap() };
    let run = |identity: &str, script: &str| {
        elect_run(&url, lock, &["--identity", identity], script)
            .output()
            .unwrap()
    };
    let ok = run("h-ok", "echo $ELECT_TOKEN");
    let failed = run("h-fail", "echo $ELECT_TOKEN; exit 3");
    let killed = run("h-kill", "echo $ELECT_TOKEN; kill -TERM $$");
    assert_eq!(killed.status.signal(), Some(libc::SIGTERM));

    // Lost: the lease ended from outside.
    let watched =
        r#"echo "held $ELECT_TOKEN $ELECT_LEASE_ID $ELECT_KEY"; while :; do sleep 0.01; done"#;
    let mut lost = Running::spawn(elect_run(
        &url,
        lock,
        &["--identity", "h-lost", "--ttl", "3s"],
        watched,
    ));
    let line = lost.expect_line("held", 10 * SECOND);
    let mut fields = line.splitn(3, ' ');
    let lost_token: u64 = fields.next().unwrap().parse().unwrap();
    let held = Held {
        lease: fields.next().unwrap().into(),
        key: fields.next().unwrap().into(),
    };
    store.end_lease_from_outside(lock, &held, S::OUTSIDE_ENDS[0]);
    assert_eq!(lost.wait_code(10 * SECOND), 76);

    // Broken.
    let (mut broken, broken_token) = hold(&url, lock, &["--identity", "h-broken"]);
    let out = elect()
        .args(["break", "--store", &url, "--lock", lock, "--yes"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(broken.wait_code(10 * SECOND), 76);

    // Busy, beside a holder that then ends well: the busy run leaves no
    // record of its own.
    let (mut holder, holder_token) = hold(&url, lock, &["--identity", "h-hold"]);
    let busy = elect_run(&url, lock, &["-n", "--identity", "h-busy"], "echo ran")
        .output()
        .unwrap();
    assert_eq!(busy.status.code(), Some(75));
    holder.send_line("");
    assert_eq!(holder.wait_code(10 * SECOND), 0);

    // elect SIGKILLed: recorded as running once its command ran a second;
    // then its guard stops the command, releases the lease, and records
    // how the tenure ended, with the command's status.
    let (mut doomed, doomed_token) = hold(&url, lock, &["--identity", "h-doomed"]);
    wait_history(&url, lock, doomed_token, "running");
    doomed.signal(libc::SIGKILL);
    doomed.wait(10 * SECOND);
    wait_history(&url, lock, doomed_token, "elect-died");
    assert_eq!(status(&url, lock, false).0, 1, "the lock stayed held");

    let want = [
        (Some(token_of(&ok)), "h-ok", "succeeded"),
        (Some(token_of(&failed)), "h-fail", "failed"),
        (Some(token_of(&killed)), "h-kill", "killed"),
        (Some(lost_token), "h-lost", "lost"),
        (Some(broken_token), "h-broken", "broken"),
        (Some(holder_token), "h-hold", "succeeded"),
        (Some(doomed_token), "h-doomed", "elect-died"),
    ];
    let mut entries = history(&url, lock, &[]);
    entries.sort_by_key(|e| e["identity"] == "h-doomed");
    let got: Vec<(Option<u64>, &str, &str)> = entries
        .iter()
        .map(|e| {
            (
                e["token"].as_u64(),
                e["identity"].as_str().unwrap(),
                e["outcome"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, want, "{entries:#?}");
    assert_eq!(entries[1]["exit_code"], 3);
    assert_eq!(entries[2]["signal"], libc::SIGTERM);
    assert_eq!(entries[6]["signal"], libc::SIGKILL, "{:#?}", entries[6]);
    assert!(
        entries[3]["why"].as_str().is_some_and(|w| !w.is_empty()),
        "{:#?}",
        entries[3]
    );
    for e in &entries {
        assert_eq!(e["lock"], lock);
        assert!(
            e["pid"].as_u64().is_some() && e["host"].is_string(),
            "{e:#}"
        );
        assert!(e["ended"].is_string(), "{e:#}");
    }
    assert_eq!(history(&url, lock, &["--since", "1h"]).len(), want.len());

    // status of the free lock: the last tenure that ended.
    let (code, out) = status(&url, lock, true);
    assert_eq!(code, 1);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["last"]["token"], doomed_token, "{v:#}");
    let (_, out) = status(&url, lock, false);
    assert!(
        out.contains("last run:") && out.contains("h-doomed"),
        "{out}"
    );

    // Bounded: the last N.
    for _ in 0..3 {
        let out = elect_run(&url, lock, &["--history", "2"], "true")
            .output()
            .unwrap();
        assert!(out.status.success());
    }
    assert_eq!(history(&url, lock, &[]).len(), 2);
}

/// The history is written off the way from the lock to the command: a store
/// slow to answer (reached through a proxy that delays each way by 100 ms,
/// where the store has a link) starts the command no later with the
/// history kept than without it.
fn the_history_never_delays_the_commands_start<S: StoreUnderTest>() {
    let store = S::start("history-slow");
    let proxy = S::HAS_LINK.then(|| support::proxy::Proxy::start(&store.link()));
    let url = match &proxy {
        Some(proxy) => store.url_through(proxy.port),
        None => store.url(),
    };
    if let Some(proxy) = &proxy {
        proxy.set(support::proxy::Mode::Delay(Duration::from_millis(100)));
    }
    let start_after = |keep: &str| -> i128 {
        let spawned = now_ns();
        let out = elect_run(&url, "slow", &["--history", keep], "date +%s%N")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr_of(&out));
        assert!(out.stderr.is_empty(), "{}", stderr_of(&out));
        stdout_of(&out).parse::<i128>().unwrap() - spawned
    };
    // In turns, and the quickest of each: what else may slow a run (the
    // previous holder's release still on its way: a round trip) comes and
    // goes, while a write on the way to the command would slow every run.
    let (mut with, mut without) = (i128::MAX, i128::MAX);
    for _ in 0..5 {
        with = with.min(start_after("100"));
        without = without.min(start_after("0"));
    }
    eprintln!(
        "{}: the command started {:.1} ms after elect with the history kept, {:.1} ms without (the quickest of 5 each)",
        S::NAME,
        ms(with),
        ms(without)
    );
    assert!(
        with - without < 100_000_000,
        "the history delayed the start by {:.1} ms",
        ms(with - without)
    );
    assert_eq!(history(&url, "slow", &[]).len(), 5);
}

/// `promtool check metrics` of `text`: Prometheus's own parser and linter.
fn promtool_accepts(text: &str) {
    use std::io::Write;
    let mut check = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (Debian's prometheus package; scripts/test installs it)");
    check
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = check.wait_with_output().unwrap();
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool: {}{}\n{text}",
        stdout_of(&out),
        stderr_of(&out)
    );
}

/// docs/cron.md's metric table names the metrics elect writes, and its
/// alert is a rule Prometheus takes.
fn the_guide_tells_these_metrics_and_its_alert_parses(dir: &TempDir) {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/cron.md")).unwrap();
    let part = &readme[readme.find("**Metrics for cron.**").unwrap()..];
    let table: Vec<&str> = part
        .lines()
        .skip_while(|l| !l.starts_with("| metric |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| l.split('`').nth(1).unwrap())
        .collect();
    let text = std::fs::read_to_string(dir.join("elect.prom")).unwrap();
    let mut written: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    // Written once a success is known.
    written.push("elect_last_success_timestamp_seconds");
    written.sort();
    let mut told = table.clone();
    told.sort();
    assert_eq!(told, written, "docs/cron.md's metric table");
    let rules = part
        .split("```yaml\n")
        .nth(1)
        .unwrap()
        .split("```")
        .next()
        .unwrap();
    let file = dir.join("rules.yml");
    std::fs::write(&file, rules).unwrap();
    let out = std::process::Command::new("promtool")
        .args(["check", "rules"])
        .arg(&file)
        .output()
        .expect("promtool (Debian's prometheus package)");
    assert!(
        out.status.success(),
        "{}{}",
        stdout_of(&out),
        stderr_of(&out)
    );
    std::fs::remove_file(&file).unwrap();
}

/// The metrics file is Prometheus's text format, whole at every read; the
/// hook sees how the run ended, and neither changes elect's exit code.
fn a_run_reports_by_metrics_file_and_hook<S: StoreUnderTest>() {
    let store = S::start("report");
    let url = store.url();
    let dir = TempDir::new(&format!("report-{}", S::NAME));
    let metrics = dir.join("elect.prom");
    let hook_out = dir.join("hook");
    let hook = format!(
        r#"printf '%s %s %s %s %s\n' "$ELECT_OUTCOME" "$ELECT_EXIT_CODE" "$ELECT_TOKEN" "$ELECT_DURATION_MS" "$ELECT_LOCK" > {}; exit 9"#,
        hook_out.display()
    );
    let metrics_arg = metrics.display().to_string();
    let run = |script: &str, extra: &[&str]| {
        let mut args = vec!["--metrics-file", &metrics_arg, "--on-end", &hook];
        args.extend(extra);
        elect_run(&url, "report", &args, script).output().unwrap()
    };
    // While it runs: held, with its token.
    let out = run(
        &format!("cat {metrics_arg}; echo token=$ELECT_TOKEN; sleep 0.2; exit 3"),
        &[],
    );
    assert_eq!(out.status.code(), Some(3), "the hook's 9 is not elect's");
    let seen = stdout_of(&out);
    let token = seen.rsplit("token=").next().unwrap().to_string();
    assert!(
        seen.contains("elect_lock_held{lock=\"report\"} 1"),
        "{seen}"
    );
    assert!(
        seen.contains(&format!("elect_lock_token{{lock=\"report\"}} {token}")),
        "{seen}"
    );
    let warned = stderr_of(&out);
    assert_eq!(warned.lines().count(), 1, "{warned}");
    assert!(warned.contains("--on-end exited with 9"), "{warned}");
    let hooked = std::fs::read_to_string(&hook_out).unwrap();
    let fields: Vec<&str> = hooked.split_whitespace().collect();
    assert_eq!(fields[..3], ["failed", "3", token.as_str()], "{hooked}");
    assert!(fields[3].parse::<u64>().unwrap() >= 200, "{hooked}");
    assert_eq!(fields[4], "report");
    let text = std::fs::read_to_string(&metrics).unwrap();
    promtool_accepts(&text);
    for line in [
        "elect_lock_held{lock=\"report\"} 0",
        "elect_exit_code{lock=\"report\"} 3",
        "elect_outcome{lock=\"report\",outcome=\"failed\"} 1",
    ] {
        assert!(text.contains(line), "{line} missing in\n{text}");
    }
    assert!(!text.contains("elect_last_success"), "{text}");
    the_guide_tells_these_metrics_and_its_alert_parses(&dir);

    // A busy run reports too, and the last success is remembered.
    let ok = run("true", &[]);
    assert_eq!(ok.status.code(), Some(0));
    let (mut holder, _) = hold(&url, "report", &[]);
    let busy = run("true", &["-n"]);
    assert_eq!(busy.status.code(), Some(75));
    holder.send_line("");
    assert_eq!(holder.wait_code(10 * SECOND), 0);
    let text = std::fs::read_to_string(&metrics).unwrap();
    promtool_accepts(&text);
    assert!(
        text.contains("outcome=\"busy\"} 1")
            && text.contains("elect_last_success_timestamp_seconds"),
        "{text}"
    );
    assert!(
        std::fs::read_to_string(&hook_out)
            .unwrap()
            .starts_with("busy  ")
    );

    // Never half-written: a reader all through ten runs sees whole files.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (stop, metrics) = (stop.clone(), metrics.clone());
        std::thread::spawn(move || {
            let mut reads = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let text = std::fs::read_to_string(&metrics).unwrap();
                assert!(
                    text.ends_with("outcome=\"elect-died\"} 0\n")
                        || text.ends_with("outcome=\"elect-died\"} 1\n"),
                    "half a file: {text}"
                );
                reads += 1;
            }
            reads
        })
    };
    for _ in 0..10 {
        assert!(run("true", &[]).status.success());
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(reader.join().unwrap() > 10);
    let leftovers: Vec<_> = std::fs::read_dir(&dir.0)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        leftovers.len(),
        2,
        "no temporary file is left: {leftovers:?}"
    );
}

/// The value of the one series of `metric` on a `/metrics` page.
fn metric(page: &str, series: &str) -> f64 {
    page.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("{series} missing in\n{page}"))
        .parse()
        .unwrap()
}

/// docs/operations.md's table of the endpoint's metrics names what `/metrics`
/// serves, as its metrics-file table names what the file holds.
fn the_guide_tells_the_endpoints_metrics(page: &str, store: &str) {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md"))
            .unwrap();
    let part = &readme[readme.find("**Metrics endpoint.**").unwrap()..];
    let mut told: Vec<&str> = part
        .lines()
        .skip_while(|l| !l.starts_with("| metric |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| l.split('`').nth(1).unwrap())
        .collect();
    let mut served: Vec<&str> = page
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    told.sort();
    served.sort();
    assert_eq!(
        told, served,
        "docs/operations.md's table of the endpoint's metrics"
    );
    let rules = part
        .split("```yaml\n")
        .nth(1)
        .unwrap()
        .split("```")
        .next()
        .unwrap();
    let dir = TempDir::new(&format!("endpoint-rules-{store}"));
    let file = dir.join("rules.yml");
    std::fs::write(&file, rules).unwrap();
    let out = std::process::Command::new("promtool")
        .args(["check", "rules"])
        .arg(&file)
        .output()
        .expect("promtool (Debian's prometheus package)");
    assert!(
        out.status.success(),
        "{}{}",
        stdout_of(&out),
        stderr_of(&out)
    );
}

/// `--listen`: `/readyz` is 200 on the holder only and flips within a
/// renewal interval of a handover; `/livez` is 200 on both; `/metrics`
/// is Prometheus's format, as promtool parses it and a real Prometheus
/// scrapes it.
fn the_endpoint_tells_the_holder_from_a_waiter<S: StoreUnderTest>() {
    let store = S::start("endpoint");
    let url = store.url();
    let (pa, pb) = (free_port(), free_port());
    let (a_listen, b_listen) = (format!(":{pa}"), format!("127.0.0.1:{pb}"));
    // A fails its command when told, and rejoins: then it waits behind B.
    let script = r#"echo "token $ELECT_TOKEN"; read _line; exit 1"#;
    let mut a = Running::spawn(elect_run(
        &url,
        "served",
        &["--listen", &a_listen, "--rejoin=always"],
        script,
    ));
    let token: u64 = a.expect_line("token", 10 * SECOND).parse().unwrap();
    let mut b = Running::spawn(elect_run(&url, "served", &["--listen", &b_listen], script));
    wait_contenders(&store, "served", 2);
    until("the holder's /readyz 200", 10 * SECOND, || {
        code(pa, "/readyz") == 200
    });
    until("the waiter's /readyz 503", 10 * SECOND, || {
        code(pb, "/readyz") == 503
    });
    assert_eq!(code(pa, "/livez"), 200);
    assert_eq!(code(pb, "/livez"), 200);
    assert_eq!(code(pa, "/"), 404);
    let (status, page) = get(pa, "/metrics").unwrap();
    assert_eq!(status, 200, "{page}");
    promtool_accepts(&page);
    the_guide_tells_the_endpoints_metrics(&page, S::NAME);
    assert_eq!(metric(&page, "elect_lock_held{lock=\"served\"}"), 1.0);
    assert_eq!(
        metric(&page, "elect_lock_token{lock=\"served\"}"),
        token as f64
    );
    assert_eq!(
        metric(&page, "elect_acquisitions_total{lock=\"served\"}"),
        1.0
    );
    let (_, waiting) = get(pb, "/metrics").unwrap();
    promtool_accepts(&waiting);
    assert_eq!(metric(&waiting, "elect_lock_held{lock=\"served\"}"), 0.0);
    assert_eq!(metric(&waiting, "elect_lock_token{lock=\"served\"}"), 0.0);

    let prometheus = Prometheus::start(S::NAME, &[pa, pb]);
    let (ia, ib) = (format!("127.0.0.1:{pa}"), format!("127.0.0.1:{pb}"));
    let held_through_prometheus = |a_held: f64, b_held: f64| {
        let want = vec![(ia.clone(), a_held), (ib.clone(), b_held)];
        eventually(
            "elect_lock_held of both as Prometheus has it",
            20 * SECOND,
            || {
                let mut seen = prometheus.query("elect_lock_held")?;
                seen.sort_by(|x, y| x.0.cmp(&y.0));
                let mut want = want.clone();
                want.sort_by(|x, y| x.0.cmp(&y.0));
                match seen == want {
                    true => Ok(()),
                    false => Err(format!("{seen:?}")),
                }
            },
        )
    };
    held_through_prometheus(1.0, 0.0);

    // The handover: within a renewal interval (TTL/3, 5 s) each side flips.
    a.send_line("");
    let told = Instant::now();
    until(
        "the new holder's /readyz 200 within a renewal interval",
        5 * SECOND,
        || code(pb, "/readyz") == 200,
    );
    let flipped = told.elapsed();
    until(
        "the old holder's /readyz 503 within a renewal interval",
        5 * SECOND,
        || code(pa, "/readyz") == 503,
    );
    eprintln!(
        "{}: /readyz of the waiter 200 {} ms after the holder's command was told to end",
        S::NAME,
        flipped.as_millis()
    );
    b.expect_line("token", 10 * SECOND);
    held_through_prometheus(0.0, 1.0);

    // B ends; A takes the lock again and starts its command anew.
    b.send_line("");
    assert_eq!(b.wait_code(10 * SECOND), 1);
    a.expect_line("token", 10 * SECOND);
    // The command may print before its guard's word of the start reaches elect.
    let again = eventually("A's second start in its metrics", 5 * SECOND, || {
        let (_, again) = get(pa, "/metrics").ok_or("no answer")?;
        match metric(&again, "elect_command_restarts_total{lock=\"served\"}") {
            1.0 => Ok(again),
            n => Err(format!("{n} restarts")),
        }
    });
    assert_eq!(
        metric(&again, "elect_acquisitions_total{lock=\"served\"}"),
        2.0
    );
    assert!(metric(&again, "elect_waiting_seconds_total{lock=\"served\"}") > 0.0);
    a.signal(libc::SIGTERM);
    a.wait(10 * SECOND);
    assert_eq!(code(pa, "/readyz"), 0, "the endpoint ends with elect");
}

/// `/livez` fails once the store has been out of reach past the lease's
/// deadline, and passes again once a new lease is confirmed.
fn livez_fails_while_the_store_is_unreachable_past_the_deadline<S: StoreUnderTest>() {
    let store = S::start("livez");
    let port = free_port();
    let listen = port.to_string();
    let ttl = 3 * SECOND;
    let (mut holder, _) = hold(
        &store.url(),
        "live",
        &["--listen", &listen, "--ttl", "3s", "--rejoin"],
    );
    until("/livez 200", 10 * SECOND, || code(port, "/livez") == 200);
    let renewals = || {
        let (_, page) = get(port, "/metrics").unwrap();
        metric(&page, "elect_renewals_total{lock=\"live\"}")
    };
    if !S::HAS_SERVER {
        // A directory is never out of reach: the renewals go on, and elect
        // stays live.
        let before = renewals();
        until("a renewal", 2 * ttl, || renewals() > before);
        assert_eq!(code(port, "/livez"), 200);
        holder.send_line("");
        assert_eq!(holder.wait_code(10 * SECOND), 0);
        return;
    }
    let before = renewals();
    until("a renewal", 2 * ttl, || renewals() > before);
    store.pause_server();
    let paused = Instant::now();
    until("/livez 503 while the store is paused", 10 * SECOND, || {
        code(port, "/livez") == 503
    });
    let failed = paused.elapsed();
    let (_, said) = get(port, "/livez").unwrap();
    let (_, page) = get(port, "/metrics").unwrap();
    store.resume_server();
    eprintln!(
        "{}: /livez 503 {} ms after the store was paused (TTL 3 s): {said}",
        S::NAME,
        failed.as_millis()
    );
    // The last renewal before the pause was sent at most TTL/3 before it:
    // the deadline (its send time + TTL − 110 ms) is 1.89 s to 2.89 s on.
    assert!(
        failed >= Duration::from_millis(1850),
        "failed {failed:?} after the pause: before the deadline"
    );
    assert!(
        failed < ttl + SECOND,
        "failed only {failed:?} after the pause"
    );
    assert!(said.contains("deadline"), "{said}");
    assert!(metric(&page, "elect_renewal_failures_total{lock=\"live\"}") > 0.0);
    assert_eq!(
        metric(&page, "elect_losses_total{lock=\"live\",cause=\"expired\"}"),
        1.0,
        "{page}"
    );
    assert_eq!(metric(&page, "elect_lock_held{lock=\"live\"}"), 0.0);
    // Past the deadline, if only by a microsecond, which shows as -0.000.
    let remaining = metric(&page, "elect_lease_remaining_seconds{lock=\"live\"}");
    assert!(remaining.is_sign_negative(), "{remaining}");
    until(
        "/livez 200 again once the store is back",
        30 * SECOND,
        || code(port, "/livez") == 200,
    );
    holder.expect_line("token", 30 * SECOND);
    holder.send_line("");
    assert_eq!(holder.wait_code(10 * SECOND), 0);
}

/// `--listen` on a port already in use, or a value that is no address:
/// one line, its exit code, and nothing in the store.
fn a_listen_port_in_use_exits_78_and_leaves_nothing_in_the_store<S: StoreUnderTest>() {
    let store = S::start("listen-in-use");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let out = elect_run(
        &store.url(),
        "listen",
        &["--listen", &port.to_string()],
        "echo ran",
    )
    .output()
    .unwrap();
    support::assert_outcome(
        "a port in use",
        &out,
        78,
        &format!("cannot listen on 127.0.0.1:{port} (--listen)"),
    );
    for bad in ["host:80", ":99999", "1.2.3.4"] {
        let out = elect_run(&store.url(), "listen", &["--listen", bad], "echo ran")
            .output()
            .unwrap();
        support::assert_outcome(bad, &out, 64, "--listen");
    }
    store.assert_empty();
}

/// `NOTIFY_SOCKET`: READY once queued, the STATUS a person reads, the
/// watchdog fed while renewals are confirmed, STOPPING on the way out; the
/// command sees none of systemd's variables.
fn systemd_hears_ready_status_watchdog_and_stopping<S: StoreUnderTest>() {
    let store = S::start("notify");
    let url = store.url();
    let (mut a, _) = hold(&url, "notified", &["--identity", "host-a"]);
    let socket = NotifySocket::bind(S::NAME);
    let mut waiter = elect_run(
        &url,
        "notified",
        &["--identity", "host-b"],
        r#"echo "token $ELECT_TOKEN ${NOTIFY_SOCKET:-unset} ${WATCHDOG_USEC:-unset}"; read _line"#,
    );
    waiter
        .env("NOTIFY_SOCKET", &socket.path)
        .env("WATCHDOG_USEC", "400000");
    let mut b = Running::spawn(waiter);
    socket.wait_for("READY=1", 10 * SECOND);
    socket.wait_for(
        "STATUS=waiting for lock notified, held by host-a since ",
        10 * SECOND,
    );
    assert!(
        !socket.lines().iter().any(|l| l == "WATCHDOG=1") || {
            let lines = socket.lines();
            let ready = lines.iter().position(|l| l == "READY=1").unwrap();
            lines.iter().position(|l| l == "WATCHDOG=1").unwrap() > ready
        },
        "the watchdog is fed from READY on: {:?}",
        socket.lines()
    );
    a.send_line("");
    assert_eq!(a.wait_code(10 * SECOND), 0);
    let seen = b.expect_line("token", 10 * SECOND);
    let fields: Vec<&str> = seen.split(' ').collect();
    assert_eq!(fields[1..], ["unset", "unset"], "the command's environment");
    socket.wait_for(
        &format!("STATUS=holding lock notified (token {}) since ", fields[0]),
        10 * SECOND,
    );
    until("the watchdog fed every 200 ms", 5 * SECOND, || {
        let lines = socket.lines();
        let holding = lines
            .iter()
            .position(|l| l.starts_with("STATUS=holding"))
            .unwrap();
        lines[holding..]
            .iter()
            .filter(|l| *l == "WATCHDOG=1")
            .count()
            >= 3
    });
    b.signal(libc::SIGTERM);
    b.wait(10 * SECOND);
    let lines = socket.lines();
    eprintln!("{}: {lines:?}", S::NAME);
    let at = |line: &str| lines.iter().position(|l| l.starts_with(line));
    // (A status may come before READY=1: connecting.)
    let (ready, waiting, holding, stopping) = (
        at("READY=1").unwrap(),
        at("STATUS=waiting").unwrap(),
        at("STATUS=holding").unwrap(),
        at("STOPPING=1").expect("STOPPING=1"),
    );
    let pings: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i] == "WATCHDOG=1")
        .collect();
    assert!(
        ready < waiting
            && waiting < holding
            && pings.iter().any(|&i| i > holding)
            && pings.iter().all(|&i| ready < i && i < stopping),
        "{lines:?}"
    );
    assert!(
        lines[stopping..]
            .iter()
            .all(|l| l.starts_with("STATUS=") || l == "STOPPING=1"),
        "nothing but a status after STOPPING=1: {lines:?}"
    );
    assert_eq!(lines.iter().filter(|l| *l == "READY=1").count(), 1);

    // The abstract form, `@NAME`.
    let abstract_socket = NotifySocket::bind_abstract(S::NAME);
    let mut run = elect_run(&url, "notified", &[], "true");
    run.env("NOTIFY_SOCKET", &abstract_socket.path);
    assert!(run.output().unwrap().status.success());
    abstract_socket.wait_for("STOPPING=1", 5 * SECOND);
    let lines = abstract_socket.lines();
    let at = |line: &str| lines.iter().position(|l| l == line);
    let ready = at("READY=1").unwrap_or_else(|| panic!("no READY=1: {lines:?}"));
    let stopping = at("STOPPING=1").unwrap_or_else(|| panic!("no STOPPING=1: {lines:?}"));
    assert!(ready < stopping, "{lines:?}");

    // Behind a reaper (--subreaper), systemd watches the reaper, whose pid
    // WATCHDOG_PID names: elect feeds the watchdog for it.
    let reaped = NotifySocket::bind(&format!("{}-reaped", S::NAME));
    let mut sh = std::process::Command::new("sh");
    // elect's environment as the tests give it (a store's settings).
    for (name, value) in elect().get_envs() {
        match value {
            Some(value) => sh.env(name, value),
            None => sh.env_remove(name),
        };
    }
    let out = sh
        .args([
            "-c",
            r#"WATCHDOG_PID=$$ exec "$0" run --subreaper --store "$1" --lock notified -- sleep 1"#,
            env!("CARGO_BIN_EXE_elect"),
            &url,
        ])
        .env("NOTIFY_SOCKET", &reaped.path)
        .env("WATCHDOG_USEC", "200000")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr_of(&out));
    reaped.wait_for("WATCHDOG=1", 5 * SECOND);
}

/// One module per store, one #[test] in it per scenario.
macro_rules! stores {
    ($($store:ident: $type:ty),* $(,)?) => {
        $(stores!(@one $store, $type, [
            tokens_rise_across_holders_and_processes,
            a_busy_lock_exits_75_or_the_busy_exit_code,
            signals_are_forwarded_and_exit_codes_pass_through,
            a_stop_from_outside_is_bounded_by_the_grace,
            a_child_killed_by_a_signal_kills_elect_by_the_same_signal,
            a_clean_exit_hands_over_in_milliseconds,
            sigkill_of_elect_leaves_no_orphans_and_the_next_holder_proceeds,
            an_outside_end_of_the_lease_stops_the_command_with_76,
            status_check_and_break_agree,
            status_of_a_mistyped_lock_names_the_close_one,
            commands_that_cannot_run_exit_126_or_127_and_leave_nothing_behind,
            reserved_lock_names_exit_64_and_leave_nothing_behind,
            a_nested_run_of_the_same_lock_is_refused,
            a_break_of_a_frozen_holder_ends_within_its_ttl_and_never_overlaps,
            a_break_of_a_dead_holder_says_nobody_let_go,
            ctrl_c_while_waiting_leaves_the_queue_at_once,
            the_child_sees_its_lock_token_and_store_and_no_secrets,
            the_child_starts_with_default_signal_handling_whatever_elect_inherited,
            checkpoints_are_fenced_and_reach_the_next_holder,
            checkpoints_survive_a_break_and_a_store_restart,
            each_shard_gets_one_owner_and_a_standby_takes_over,
            shard_counts_preferences_and_giving_up,
            a_store_that_never_answers_is_given_up_on_in_time,
            the_lock_passes_only_once_nothing_of_the_ended_commands_group_can_run,
            pkill_9_elect_leaves_the_guard_to_stop_the_command_first,
            sigkill_of_elect_and_its_guard_together_leaves_nothing_running,
            sigkill_of_every_watcher_of_the_command,
            once_per_runs_a_job_once_across_hosts,
            a_herd_on_one_once_per_lock_runs_the_job_once,
            list_names_every_lock_run_there_with_its_last_run,
            a_failed_night_is_run_again_by_a_host_that_waits,
            a_slot_done_is_not_run_again,
            the_history_records_how_each_tenure_ended,
            a_run_reports_by_metrics_file_and_hook,
            the_history_never_delays_the_commands_start,
            the_endpoint_tells_the_holder_from_a_waiter,
            livez_fails_while_the_store_is_unreachable_past_the_deadline,
            a_listen_port_in_use_exits_78_and_leaves_nothing_in_the_store,
            systemd_hears_ready_status_watchdog_and_stopping,
        ]);)*
    };
    (@one $store:ident, $type:ty, [$($scenario:ident),* $(,)?]) => {
        mod $store {
            use super::*;
            $(
                #[test]
                fn $scenario() {
                    super::$scenario::<$type>();
                }
            )*
        }
    };
}

stores! {
    etcd: Etcd,
    file: FileStore,
    k8s: KubeStore,
    mariadb: MariaDb,
    postgres: Postgres,
    zookeeper: ZooKeeper,
}
