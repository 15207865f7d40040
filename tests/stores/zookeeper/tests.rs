//! The ZooKeeper store beyond the behaviour suite (tests/suites/behaviour.rs):
//! elect and Apache Curator's InterProcessMutex exclude each other both
//! ways, tokens (czxids) keep rising when the lock's parent node is removed
//! and made again, a partitioned holder stops before its session can
//! expire (also one cut off together with the follower it reaches, and
//! the overlap that leaves at its worst moment, within its bound), a lost
//! create reply leaves no ghost node, and bad input.
//!
//! First, the test ZooKeeper and Curator themselves
//! ([`super::server`], [`super::curator`]), before any store
//! test leans on them: a server takes and gives back a node, an ensemble
//! elects a new leader when its leader is killed and takes the old one back
//! as it restarts, and Curator's lock holds, refuses a second taker and
//! lets go.

use crate::stores::zookeeper::{Curator, Ensemble, ZooKeeper};
use crate::suites::StoreUnderTest;
use crate::support;

use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

use support::proxy::{Mode, Proxy};
use support::ticker::{Ticks, group_alive, group_members};
use support::{Running, SECOND, TempDir, assert_outcome, elect, elect_run, hold};

/// Three servers each, with 100 ms ticks, on two cores: one ensemble at a
/// time (beside another, a waiter once never got its turn within 30 s).
fn one_ensemble_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[test]
fn the_test_servers_start() {
    let started = Instant::now();
    let zk = ZooKeeper::start();
    eprintln!("one server: {:?}", started.elapsed());
    let version = zk.version(0).expect("srvr names the version");
    eprintln!("ZooKeeper {version}");
    assert!(version.starts_with("3."), "{version}");
    assert_eq!(zk.mode(0).as_deref(), Some("standalone"));
    assert!(zk.url().starts_with("zk://127.0.0.1:"), "{}", zk.url());
    assert!(!zk.exists("/smoke"));
    assert_eq!(zk.children("/smoke"), Vec::<String>::new());
    zk.create("/smoke/a", b"one", true);
    zk.create("/smoke/b", b"", false);
    assert_eq!(zk.children("/smoke"), ["a", "b"]);
    assert_eq!(zk.data("/smoke/a").as_deref(), Some(&b"one"[..]));
    assert_eq!(zk.data("/smoke/none"), None);
    let a = zk.czxid("/smoke/a").expect("a czxid");
    let b = zk.czxid("/smoke/b").expect("a czxid");
    assert!(0 < a && a < b, "czxids {a} {b}");
    zk.delete("/smoke/b");
    assert_eq!(zk.children("/smoke"), ["a"]);
    zk.delete_all("/smoke");
    assert!(!zk.exists("/smoke"));
    drop(zk);

    let started = Instant::now();
    let _one = one_ensemble_at_a_time();
    let mut zk = ZooKeeper::ensemble(3);
    eprintln!("three servers: {:?}", started.elapsed());
    let leader = zk.wait_leader();
    zk.create("/smoke/before", b"", true);
    zk.kill(leader);
    let killed = Instant::now();
    let new = zk.wait_leader();
    eprintln!("a new leader: {:?}", killed.elapsed());
    assert_ne!(new, leader);
    assert!(zk.exists("/smoke/before"));
    zk.restart(leader);
    let restarted = Instant::now();
    zk.wait_ready();
    eprintln!("the old leader back: {:?}", restarted.elapsed());
    assert_eq!(zk.mode(leader).as_deref(), Some("follower"));
    assert_eq!(zk.leader(), Some(new));

    let started = Instant::now();
    let mut first = Curator::spawn(&zk.connect_string(), "/locks/smoke", None);
    let versions = first.expect_line("versions ", 30 * SECOND);
    eprintln!("Curator: {versions}");
    first.expect_line("held", 30 * SECOND);
    eprintln!("Curator holds (javac included): {:?}", started.elapsed());
    let started = Instant::now();
    let mut second = Curator::spawn(&zk.connect_string(), "/locks/smoke", Some(500));
    second.expect_line("busy", 10 * SECOND);
    assert_eq!(second.wait_code(10 * SECOND), 3);
    eprintln!("Curator busy after 500 ms: {:?}", started.elapsed());
    assert_eq!(zk.children("/locks/smoke").len(), 1);
    first.send_line("");
    first.expect_line("released", 10 * SECOND);
    assert_eq!(first.wait_code(10 * SECOND), 0);
    assert_eq!(zk.children("/locks/smoke"), Vec::<String>::new());
}

/// elect and Curator's InterProcessMutex on the same path exclude each
/// other, both ways; `elect status` shows Curator's holder (no record, a
/// token all the same).
#[test]
fn elect_and_curator_exclude_each_other_both_ways() {
    let zk = ZooKeeper::start();
    let url = zk.url();

    // Curator holds: elect waits, then goes once Curator lets go.
    let mut curator = Curator::spawn(&zk.connect_string(), "/interop", None);
    curator.expect_line("held", 30 * SECOND);
    let out = elect_run(&url, "interop", &["-n"], "echo ran")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(75),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not written by elect"), "{err}");
    let (code, shown) = support::inspect::status(&url, "interop", true);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&shown).unwrap();
    assert!(
        v["holder"].is_null() && v["token"].as_u64() > Some(0),
        "{shown}"
    );
    let mut waiting = Running::spawn(elect_run(&url, "interop", &[], "echo ran $ELECT_TOKEN"));
    wait_queued(&zk, "/interop", 2);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(waiting.try_line(), None, "elect waits while Curator holds");
    curator.send_line("go");
    curator.expect_line("released", 10 * SECOND);
    assert!(
        waiting
            .expect_line("ran", 10 * SECOND)
            .parse::<u64>()
            .unwrap()
            > 0
    );
    assert_eq!(waiting.wait_code(10 * SECOND), 0);

    // elect holds: Curator gives up after half a second; then takes it.
    let (mut holder, _) = hold(&url, "interop", &[]);
    let mut refused = Curator::spawn(&zk.connect_string(), "/interop", Some(500));
    refused.expect_line("busy", 30 * SECOND);
    wait_queued(&zk, "/interop", 1);
    let mut curator = Curator::spawn(&zk.connect_string(), "/interop", None);
    wait_queued(&zk, "/interop", 2);
    holder.send_line("done");
    assert_eq!(holder.wait_code(10 * SECOND), 0);
    curator.expect_line("held", 30 * SECOND);
    curator.send_line("go");
    curator.expect_line("released", 10 * SECOND);
    eprintln!("Curator and elect excluded each other both ways on /interop");
}

/// Wait until `path` has `n` nodes queued (the holder's among them), at
/// most 30 s (Curator's first start compiles it).
fn wait_queued(zk: &ZooKeeper, path: &str, n: usize) {
    support::eventually(&format!("{n} queued at {path}"), 30 * SECOND, || {
        let queued = zk.children(path);
        match queued.len() == n {
            true => Ok(()),
            false => Err(format!("{queued:?} queued")),
        }
    })
}

/// The token is the node's czxid: it rises when the lock's parent node is
/// removed and made again, where the sequence number starts over.
#[test]
fn tokens_keep_rising_after_the_parent_node_is_made_again() {
    let zk = ZooKeeper::start();
    let run = || {
        let out = elect_run(&zk.url(), "jobs/x", &[], "echo $ELECT_TOKEN $ELECT_KEY")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let (token, key) = text.trim().split_once(' ').unwrap();
        (token.parse::<u64>().unwrap(), key.to_string())
    };
    let (first, first_key) = run();
    let (second, _) = run();
    zk.delete_all("/jobs/x");
    let (third, third_key) = run();
    eprintln!(
        "tokens {first}, {second}, then {third} after /jobs/x was made again ({first_key} -> {third_key})"
    );
    assert!(first < second && second < third);
    assert!(
        first_key.ends_with("lock-0000000000") && third_key.ends_with("lock-0000000000"),
        "the sequence started over: {first_key}, {third_key}"
    );
}

/// A holder cut off from ZooKeeper, silently or loudly, stops its command
/// before its session can expire; the next holder starts after it, on one
/// monotonic clock; nothing of the old command's group is left.
#[test]
fn a_partitioned_holder_stops_before_its_session_can_expire() {
    let zk = ZooKeeper::start();
    let dir = TempDir::new("zk-partition");
    for (mode, name) in [(Mode::Blackhole, "blackhole"), (Mode::Reset, "reset")] {
        std::fs::create_dir_all(dir.join(name)).unwrap();
        let ticks = Ticks::new(&dir.join(name));
        let proxy = Proxy::start(&zk.endpoint(0));
        let via = format!("zk://127.0.0.1:{}", proxy.port);
        let lock = format!("cut-{name}");
        let ticking = |url: &str, label: &str| {
            let mut command = elect_run(url, &lock, &["--ttl", "2s"], &ticks.script(label, false));
            command.process_group(0);
            Running::spawn(command)
        };
        let mut a = ticking(&via, "A");
        a.expect_line("token", 10 * SECOND);
        let a_group: i32 = a.expect_line("pgid", 10 * SECOND).parse().unwrap();
        ticks.first("A", 10 * SECOND);
        let mut b = ticking(&zk.url(), "B");
        wait_queued(&zk, &format!("/{lock}"), 2);
        let cut = support::ticker::monotonic_ns();
        proxy.set(mode);
        ticks.assert_handed_over_after_cut(&format!("{name}, TTL 2s"), cut, a_group);
        assert_eq!(a.wait_code(15 * SECOND), 76, "{name}: {:?}", a.stderr_seen);
        b.signal(libc::SIGTERM);
        b.wait(10 * SECOND);
    }
}

/// A holder whose elect reaches only one follower, cut off together with
/// that follower from the rest of the ensemble: the follower goes on
/// answering its reads for syncLimit × tickTime (1 s here) after it lost
/// the leader, while the leader, with the third server, expires the session
/// and hands the lock to a waiter connected to them. The holder's command
/// must be gone before the waiter's starts (on one monotonic clock), with
/// nothing of its group left, and the new token higher; it ignores SIGTERM,
/// so that what is measured is elect's deadline, not the grace before it.
/// At TTL 1 s and 1.5 s (sessions of 10 and 15 ticks, as negotiated), three
/// runs each, cut at different moments of the renewal cycle.
#[test]
fn a_holder_cut_off_with_its_follower_stops_before_the_leader_expires_its_session() {
    let _one = one_ensemble_at_a_time();
    let mut zk = ZooKeeper::ensemble_with_links(3);
    let dir = TempDir::new("zk-follower-cut");
    let mut failures = Vec::new();
    for (ttl, timeout_ms) in [("1s", 1000), ("1.5s", 1500)] {
        let allowed = Ensemble::cut_off_with_its_member_overlap(Duration::from_millis(timeout_ms))
            .as_secs_f64()
            * 1e3;
        for run in 0..3u64 {
            zk.wait_ready();
            let leader = zk.wait_leader();
            let follower = (0..3).find(|&i| i != leader).unwrap();
            let rest: Vec<String> = (0..3)
                .filter(|&i| i != follower)
                .map(|i| zk.endpoint(i))
                .collect();
            let lock = format!("isolated-{}-{run}", ttl.replace('.', "_"));
            let run_dir = dir.join(&lock);
            std::fs::create_dir_all(&run_dir).unwrap();
            let ticks = Ticks::new(&run_dir);
            let ticking = |url: String, label: &str, ignore_term: bool| {
                let script = ticks.script(label, ignore_term);
                let mut command = elect_run(&url, &lock, &["--ttl", ttl], &script);
                command.process_group(0);
                Running::spawn(command)
            };
            let mut a = ticking(format!("zk://{}", zk.endpoint(follower)), "A", true);
            let a_token: u64 = a.expect_line("token", 15 * SECOND).parse().unwrap();
            let a_group: i32 = a.expect_line("pgid", 10 * SECOND).parse().unwrap();
            ticks.first("A", 10 * SECOND);
            // The session's timeout as the follower negotiated it: the TTL.
            let cons = zk.four_letter(follower, "cons").unwrap_or_default();
            assert!(
                cons.contains(&format!("to={timeout_ms},")),
                "TTL {ttl}: {cons}"
            );
            let mut b = ticking(format!("zk://{}", rest.join(",")), "B", false);
            wait_queued(&zk, &format!("/{lock}"), 2);
            // At another moment of A's renewal cycle each run.
            std::thread::sleep(Duration::from_millis(200 + 111 * run));
            let cut = support::ticker::monotonic_ns();
            zk.isolate(follower);
            let overlap = ticks.overlap_ms("A", a_group, "B");
            let b_token: u64 = b.expect_line("token", 10 * SECOND).parse().unwrap();
            let (last_a, first_b) = (ticks.last("A").unwrap(), ticks.first("B", SECOND));
            let left = group_members(a_group);
            let code = a.wait_code(15 * SECOND);
            eprintln!(
                "TTL {ttl}, run {run}: A's last tick {:.0} ms after the cut, B's first {:.0} ms \
                 after; overlap {overlap:.1} ms; tokens {a_token} then {b_token}; A's elect \
                 exited {code}",
                (last_a - cut) as f64 / 1e6,
                (first_b - cut) as f64 / 1e6,
            );
            // As the store declares it: none.
            if overlap >= allowed {
                failures.push(format!(
                    "TTL {ttl}, run {run}: A ran {overlap:.1} ms beside B (allowed: under \
                     {allowed:.0})"
                ));
            }
            if !left.is_empty() {
                failures.push(format!("TTL {ttl}, run {run}: A's group left {left:?}"));
            }
            if b_token <= a_token {
                failures.push(format!(
                    "TTL {ttl}, run {run}: token {b_token} after {a_token}"
                ));
            }
            if code != 76 {
                failures.push(format!("TTL {ttl}, run {run}: A exited {code}, not 76"));
            }
            b.signal(libc::SIGTERM);
            b.wait(10 * SECOND);
            zk.heal(follower);
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The moments of a renewal at which a holder whose elect reaches one
/// follower is cut off together with it from the rest of the ensemble: at
/// once after the answer of a renewal's second `sync`, before the
/// follower's next answer to the leader's ping can tell the leader of that
/// one, and at once after its first. The leader counts the session from the
/// first `sync` of the last renewal both of whose answers passed, no
/// earlier: the old command, ignoring SIGTERM, ends before the next one
/// starts (on one monotonic clock), with nothing of its group left. At
/// TTL 2 s, three runs at each moment.
#[test]
fn a_holder_cut_off_with_its_follower_just_after_a_renewal_stops_before_the_leader_expires_it() {
    let ttl = Duration::from_secs(2);
    let allowed = Ensemble::cut_off_with_its_member_overlap(ttl).as_secs_f64() * 1e3;
    let _one = one_ensemble_at_a_time();
    let mut zk = ZooKeeper::ensemble_with_links(3);
    let dir = TempDir::new("zk-follower-moment");
    let mut failures = Vec::new();
    for run in 0..6 {
        // A renewal's second sync follows its first's answer by a quarter
        // of the shortest session (50 ms here); its first, the second's
        // answer by a third of the TTL, less that.
        let second = run % 2 == 0;
        let moment = match second {
            true => "its second sync's answer",
            false => "its first sync's answer",
        };
        zk.wait_ready();
        let leader = zk.wait_leader();
        let follower = (0..3).find(|&i| i != leader).unwrap();
        let rest: Vec<String> = (0..3)
            .filter(|&i| i != follower)
            .map(|i| zk.endpoint(i))
            .collect();
        let (cutter, sync_answers) = crate::stores::zookeeper::tell_sync_answers();
        let proxy = Proxy::cutting(&zk.endpoint(follower), cutter);
        let lock = format!("moment-{run}");
        let run_dir = dir.join(&lock);
        std::fs::create_dir_all(&run_dir).unwrap();
        let ticks = Ticks::new(&run_dir);
        let ticking = |url: String, label: &str, ignore_term: bool| {
            let script = ticks.script(label, ignore_term);
            let mut command = elect_run(&url, &lock, &["--ttl", "2s"], &script);
            command.process_group(0);
            Running::spawn(command)
        };
        let mut a = ticking(format!("zk://127.0.0.1:{}", proxy.port), "A", true);
        a.expect_line("token", 15 * SECOND);
        let a_group: i32 = a.expect_line("pgid", 10 * SECOND).parse().unwrap();
        ticks.first("A", 10 * SECOND);
        let mut b = ticking(format!("zk://{}", rest.join(",")), "B", false);
        wait_queued(&zk, &format!("/{lock}"), 2);
        // A few renewals into the tenure, with the client's own pings
        // between them; then the moment's answer.
        while sync_answers.try_recv().is_ok() {}
        let mut last = sync_answers
            .recv_timeout(ttl)
            .expect("a renewal every TTL/3");
        let mut seen = 1;
        loop {
            let at = sync_answers
                .recv_timeout(ttl)
                .expect("a renewal every TTL/3");
            let gap = at - last;
            last = at;
            seen += 1;
            if seen >= 4 && (gap < ttl / 6) == second {
                break;
            }
            assert!(seen < 12, "run {run}: no {moment} among {seen} answers");
        }
        zk.isolate(follower);
        let overlap = ticks.overlap_ms("A", a_group, "B");
        let left = group_members(a_group);
        eprintln!("run {run}, cut after {moment}: overlap {overlap:.1} ms");
        if overlap >= allowed {
            failures.push(format!(
                "run {run}, cut after {moment}: A ran {overlap:.1} ms beside B"
            ));
        }
        if !left.is_empty() {
            failures.push(format!("run {run}: A's group left {left:?}"));
        }
        a.wait(15 * SECOND);
        b.signal(libc::SIGTERM);
        b.wait(10 * SECOND);
        zk.heal(follower);
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Bad input: one line naming the problem, the documented exit code, the
/// command never run, nothing left in ZooKeeper.
#[test]
fn bad_input_gets_one_line_and_leaves_nothing() {
    let zk = ZooKeeper::start();
    let port = zk.endpoint(0).rsplit_once(':').unwrap().1.to_string();
    let nothing_listens = support::tools::free_port();
    let cases: Vec<(&str, String, Vec<String>, i32, &str)> = vec![
        (
            "TLS without its CA",
            format!("zks://127.0.0.1:{port}"),
            vec![],
            78,
            "needs --cacert",
        ),
        (
            "a bad port",
            format!("zk://127.0.0.1:{port}x"),
            vec![],
            78,
            "bad port",
        ),
        (
            "an option in the URL",
            format!("zk://127.0.0.1:{port}?x=y"),
            vec![],
            78,
            "unknown option 'x': ZooKeeper's URL takes none",
        ),
        (
            "a chroot that does not exist",
            format!("zk://127.0.0.1:{port}/no/such/chroot"),
            vec![],
            78,
            "does not exist",
        ),
        (
            "an unreachable ensemble",
            format!("zk://127.0.0.1:{nothing_listens}"),
            vec!["--connect-timeout".into(), "1s".into()],
            69,
            "cannot reach",
        ),
        (
            "a session longer than the servers allow",
            zk.url(),
            vec!["--ttl".into(), "90s".into()],
            78,
            "maxSessionTimeout",
        ),
        (
            "a user without its password",
            format!("zk://alice@127.0.0.1:{port}"),
            vec![],
            78,
            "needs a password",
        ),
    ];
    for (what, url, flags, code, says) in cases {
        let mut command = elect();
        command
            .args(["run", "--store", &url, "--lock", "bad"])
            .args(&flags)
            .args(["--", "echo", "ran"]);
        assert_outcome(what, &command.output().unwrap(), code, says);
    }
    // A holder's key that is no node's path (relative, as another store's
    // keys are): a usage error that says what a key is, before ZooKeeper
    // is asked, from `checkpoint put` and `check` alike.
    for key in ["bad/_c_0-lock-0000000000", "/bad//x", "/bad/.."] {
        for command in [
            &["checkpoint", "put", "7"][..],
            &["check", "--token", "1", "--json"][..],
        ] {
            let out = elect()
                .args(command)
                .args(["--store", &zk.url(), "--lock", "bad", "--holder-key", key])
                .env("ELECT_TOKEN", "1")
                .output()
                .unwrap();
            assert_outcome(
                &format!("{command:?} --holder-key {key}"),
                &out,
                64,
                &format!(
                    "the holder's key '{key}' is no ZooKeeper node: a key is the path of \
                     the holder's node, /LOCK/_c_UUID-lock-SEQ"
                ),
            );
        }
    }
    assert_eq!(zk.children("/"), ["zookeeper"], "nothing was created");
}

/// ZooKeeper's default tick (2 s: sessions of 4 s at least) makes a
/// renewal wait 1 s between its two syncs. A `--ttl` whose renewal cannot
/// be answered in time is refused at once, naming what would do, before
/// anything is left in the store; one shorter than the servers' session
/// (the difference spares the wait) and one long enough keep the lease.
#[test]
fn a_ttl_too_short_for_the_servers_tick_is_refused_at_once() {
    let zk = ZooKeeper::start_with("tickTime=2000\nminSessionTimeout=4000\n");
    let url = zk.url();
    for (ttl, shown) in [("3s", "3s"), ("3.2s", "3s 200ms")] {
        let started = Instant::now();
        let out = elect_run(&url, "ticks", &["--ttl", ttl], "echo ran")
            .output()
            .unwrap();
        assert_outcome(ttl, &out, 78, "or more, or shorten --grace");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(
            said.contains(&format!("--ttl {shown} ")) && said.contains("to 3s 400ms or more"),
            "{said}"
        );
        assert!(started.elapsed() < 3 * SECOND, "{:?}", started.elapsed());
    }
    assert_eq!(zk.children("/"), ["zookeeper"], "nothing was left");
    // Each long enough for a few renewals.
    for (ttl, runs) in [("2.5s", "sleep 2.5"), ("3.5s", "sleep 3.5")] {
        let out = elect_run(&url, "ticks", &["--ttl", ttl], runs)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "--ttl {ttl}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// On a three-server ensemble: the leader killed, then a follower: the lock
/// holds while a quorum lives (two of three, then, with the old leader
/// back, again); quorum lost: the command is stopped before the session
/// could expire, and no other holder runs meanwhile.
#[test]
fn the_lock_holds_while_a_quorum_lives_and_the_command_stops_in_time_when_it_does_not() {
    let _one = one_ensemble_at_a_time();
    let mut zk = ZooKeeper::ensemble(3);
    let dir = TempDir::new("zk-quorum");
    let ticks = Ticks::new(&dir.0);
    let mut command = elect_run(
        &zk.url(),
        "quorum",
        &["--ttl", "5s"],
        &ticks.script("A", false),
    );
    command.process_group(0);
    let mut a = Running::spawn(command);
    a.expect_line("token", 15 * SECOND);
    let a_group: i32 = a.expect_line("pgid", 10 * SECOND).parse().unwrap();
    ticks.first("A", 10 * SECOND);

    let leader = zk.wait_leader();
    zk.kill(leader);
    let new_leader = zk.wait_leader();
    eprintln!("killed the leader {leader}; {new_leader} leads");
    std::thread::sleep(Duration::from_secs(6));
    assert!(
        group_alive(a_group),
        "the lock held through the leader's death"
    );
    assert_eq!(a.try_wait_code(), None);
    zk.restart(leader);
    zk.wait_ready();
    let follower = (0..3).find(|&i| i != zk.wait_leader()).unwrap();
    zk.kill(follower);
    std::thread::sleep(Duration::from_secs(6));
    assert!(group_alive(a_group), "the lock held with two of three");

    // Quorum lost: only one server left.
    let leader = zk.wait_leader();
    let lost_at = support::ticker::monotonic_ns();
    zk.kill(leader);
    let code = a.wait_code(15 * SECOND);
    let last = ticks.last("A").unwrap();
    eprintln!(
        "quorum lost: A's command's last tick {:.0} ms after, elect exited {code}",
        (last - lost_at) as f64 / 1e6
    );
    assert_eq!(code, 76, "{:?}", a.stderr_seen);
    assert!(!group_alive(a_group), "{:?}", group_members(a_group));
    assert!(
        last - lost_at < 5_000_000_000,
        "stopped within the session timeout (5 s)"
    );
}

/// `mntr`'s count of packets the server received.
fn packets_received(zk: &ZooKeeper) -> u64 {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(zk.endpoint(0)).unwrap();
    stream.write_all(b"mntr").unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("zk_packets_received"))
        .map(|v| v.trim().parse().unwrap())
        .expect("mntr gives zk_packets_received")
}

/// Each release wakes one waiter: the requests per handover stay the same
/// with 10 waiters and with 100 (a herd woken at once would cost one
/// request per waiter at every handover).
#[test]
fn a_release_wakes_one_waiter_whatever_the_queue() {
    let zk = ZooKeeper::start();
    let mut per_handover = Vec::new();
    for waiters in [10usize, 100] {
        let lock = format!("herd-{waiters}");
        let ttl = ["--ttl", "60s"];
        let (mut holder, _) = hold(&zk.url(), &lock, &ttl);
        let mut queued: Vec<Running> = (0..waiters)
            .map(|_| Running::spawn(elect_run(&zk.url(), &lock, &ttl, "true")))
            .collect();
        let give_up = Instant::now() + 60 * SECOND;
        while zk.children(&format!("/{lock}")).len() < waiters + 1 {
            assert!(Instant::now() < give_up, "{waiters} waiters queued");
            std::thread::sleep(Duration::from_millis(50));
        }
        let before = packets_received(&zk);
        let started = Instant::now();
        holder.send_line("done");
        assert_eq!(holder.wait_code(10 * SECOND), 0);
        for waiter in &mut queued {
            assert_eq!(waiter.wait_code(60 * SECOND), 0);
        }
        let took = started.elapsed();
        // Less this test's own look (one connection, one request).
        let requests = (packets_received(&zk) - before) as f64 / waiters as f64;
        eprintln!(
            "{waiters} waiters: {requests:.1} requests per handover, {:.1} ms per handover",
            took.as_secs_f64() * 1e3 / waiters as f64
        );
        per_handover.push(requests);
    }
    assert!(
        per_handover[1] <= per_handover[0] * 1.3 + 1.0,
        "requests per handover grow with the queue: {per_handover:?}"
    );
}

/// Digest authentication: a chroot that only alice may use; with her
/// password elect takes the lock, with another it is refused (69, one
/// line) and leaves nothing behind.
#[test]
fn digest_authentication_opens_a_protected_chroot_and_a_wrong_password_is_refused() {
    use zookeeper_client::{Acls, Client, CreateMode};
    let zk = ZooKeeper::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let alice = Client::connector()
            .with_auth("digest", b"alice:right")
            .connect(&zk.connect_string())
            .await
            .unwrap();
        alice
            .create(
                "/secure",
                b"",
                &CreateMode::Persistent.with_acls(Acls::creator_all()),
            )
            .await
            .unwrap();
    });
    let dir = TempDir::new("zk-auth");
    let url = format!("{}/secure", zk.url());
    for (password, code, says) in [("wrong", 78, "no permission"), ("right", 0, "ran")] {
        let file = dir.join(password);
        std::fs::write(&file, format!("{password}\n")).unwrap();
        let out = elect()
            .args([
                "run", "--store", &url, "--lock", "jobs/x", "--user", "alice",
            ])
            .arg("--password-file")
            .arg(&file)
            .args(["--", "echo", "ran"])
            .output()
            .unwrap();
        assert_outcome(&format!("password {password}"), &out, code, says);
    }
    // An elect inside the command reaches the chroot as its elect did.
    support::inspect::reached_from_inside_the_command(
        &url,
        "jobs/inside",
        (&dir.0, &["--user", "alice", "--password-file", "right"]),
        &[],
        "right",
    );
}

/// A create whose reply was lost is found again by its protected name, so
/// no ghost node is left to block the queue. First, for certain: the proxy
/// cuts the connection instead of forwarding the server's reply to the
/// create of the lock's node (the reply carried the create's zxid, so the
/// node was made), and the elect that never heard of it finds that node
/// again (its token is that zxid) and runs. Then connections cut at moments
/// spread over connecting, creating the lock node and releasing it. After
/// every run the lock has no node, and the next run takes it without
/// waiting.
#[test]
fn a_lost_create_reply_leaves_no_ghost_node() {
    let zk = ZooKeeper::start();
    let (cutter, cut_reply) = crate::stores::zookeeper::cut_the_reply_to_a_create("-lock-");
    let proxy = Proxy::cutting(&zk.endpoint(0), cutter);
    let via = format!("zk://127.0.0.1:{}", proxy.port);
    let ghost_run = |script: &str| {
        let mut command = elect_run(&via, "ghost", &["-n", "-v", "--ttl", "10s"], script);
        command.env("ELECT_CONNECT_TIMEOUT", "5s");
        Running::spawn(command)
    };

    let mut elect = ghost_run("echo token $ELECT_TOKEN");
    let token: i64 = elect.expect_line("token", 20 * SECOND).parse().unwrap();
    let code = elect.wait_code(20 * SECOND);
    let said = elect.drain_stderr();
    assert_eq!(proxy.cut(), 1, "one connection cut: {said}");
    let made = cut_reply
        .lock()
        .unwrap()
        .expect("the reply to a create was cut");
    assert_eq!(
        token, made,
        "the node made by the lost create holds: {said}"
    );
    assert_eq!(code, 0, "{said}");
    assert!(said.contains("found our node"), "{said}");
    let left = zk.children("/ghost");
    assert!(left.is_empty(), "a ghost node is left: {left:?}; {said}");

    let mut found_again = 0;
    const RUNS: u64 = 60;
    for run in 0..RUNS {
        let mut elect = ghost_run("true");
        // Somewhere in connecting, creating and releasing.
        std::thread::sleep(Duration::from_millis(5 + run));
        proxy.set(Mode::Reset);
        std::thread::sleep(Duration::from_millis(20));
        proxy.set(Mode::Forward);
        let code = elect.wait_code(20 * SECOND);
        let said = elect.drain_stderr();
        if said.contains("found our node") {
            found_again += 1;
        }
        // A cut of 20 ms is nothing to a 10 s session: every run goes on.
        assert_eq!(code, 0, "run {run}: {said}");
        let left = zk.children("/ghost");
        assert!(
            left.is_empty(),
            "run {run}: a ghost node is left: {left:?}; {said}"
        );
    }
    eprintln!(
        "a create's reply cut (zxid {made:#x}): its node found again; then {RUNS} runs cut 5 \
         to {} ms after their start, all done: {found_again} found their node again after a \
         lost create reply, no ghost left",
        4 + RUNS
    );
}

/// TLS: `zks://` with the CA and a client certificate takes the lock; a
/// server certificate from another CA, or no client certificate where the
/// server wants one, is refused in one line; certificates without TLS are
/// refused before anything is sent.
#[test]
fn tls_with_client_certificates() {
    let certs = support::certs::generate("zk-tls");
    let zk = ZooKeeper::start_tls(&certs);
    let path = |p: &std::path::Path| p.display().to_string();
    let client = vec![
        "--cacert".to_string(),
        path(&certs.ca),
        "--cert".into(),
        path(&certs.client_cert),
        "--key".into(),
        path(&certs.client_key),
    ];
    let cases: Vec<(&str, String, Vec<String>, i32, &str)> = vec![
        (
            "the CA and a client certificate",
            zk.tls_url(),
            client.clone(),
            0,
            "ran",
        ),
        (
            "another CA",
            zk.tls_url(),
            vec![
                "--cacert".into(),
                path(&certs.other_ca),
                "--cert".into(),
                path(&certs.client_cert),
                "--key".into(),
                path(&certs.client_key),
            ],
            69,
            "--cacert signed",
        ),
        (
            "no client certificate",
            zk.tls_url(),
            vec!["--cacert".into(), path(&certs.ca)],
            69,
            "client certificate",
        ),
        ("certificates without TLS", zk.url(), client, 78, "zks://"),
    ];
    for (what, url, flags, code, says) in cases {
        let out = elect()
            .args([
                "run",
                "--store",
                &url,
                "--lock",
                "tls",
                "--connect-timeout",
                "2s",
            ])
            .args(&flags)
            .args(["--", "sh", "-c", "echo ran $ELECT_TOKEN"])
            .output()
            .unwrap();
        assert_outcome(what, &out, code, says);
    }
}
