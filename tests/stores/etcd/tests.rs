//! What only etcd does: `elect run` beside `etcdctl lock`, partitions
//! through a proxy, unreachable endpoints, a stopped child and a frozen
//! elect racing a lease that expires by time. What every store does is in
//! tests/suites/behaviour.rs; usage errors, which need no store, in
//! tests/process/usage.rs.

use crate::stores::etcd::{Etcd, EtcdOptions};
use crate::support;

use std::time::{Duration, Instant};

use support::proxy::{Mode, Proxy};
use support::{Death, Running, SECOND, elect, elect_run, find_child, ms, now_ns};

fn hold(etcd: &Etcd, lock: &str, extra: &[&str]) -> (Running, u64) {
    support::hold(&etcd.url(), lock, extra)
}

/// A request that reaches a member just as its leader stops answering is
/// answered only after etcd's own request timeout (5 s plus two election
/// timeouts): elect sends it again after a third of its patience, and once
/// the other members have a new leader, the lock is taken, well within
/// --connect-timeout.
#[test]
fn a_request_caught_in_a_leader_change_is_sent_again() {
    // A long election timeout keeps the members leaderless while elect's
    // first requests go out (a new leader comes 1 to 2 s after the pause),
    // and etcd's answer to them (5 s on) past elect's patience (4 s):
    // without a second attempt, elect would give up with 69.
    let etcd = Etcd::start_with(EtcdOptions {
        members: 3,
        heartbeat_ms: 100,
        election_ms: 1000,
        ..EtcdOptions::default()
    });
    let leader = etcd.wait_leader();
    let followers: Vec<String> = (0..3)
        .filter(|&i| i != leader)
        .map(|i| etcd.endpoints()[i].clone())
        .collect();
    etcd.pause(leader);
    let out = elect()
        .args([
            "-v",
            "run",
            "--connect-timeout",
            "6s",
            "--lock",
            "leader-change",
        ])
        .args(["--store", &format!("etcd://{}", followers.join(","))])
        .args(["--", "true"])
        .output()
        .unwrap();
    etcd.resume(leader);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("sending it again"), "{err}");
}

#[test]
fn etcdctl_lock_and_elect_exclude_each_other() {
    let etcd = Etcd::start();
    // etcdctl holds: elect must not get in. (etcdctl gives its command no stdin.)
    let release = std::env::temp_dir().join(format!("elect-test-release-{}", std::process::id()));
    let _ = std::fs::remove_file(&release);
    let script = format!(
        "echo held; while [ ! -e {} ]; do sleep 0.01; done",
        release.display()
    );
    let mut etcdctl = etcd.etcdctl_command();
    etcdctl.args(["lock", "shared", "--", "sh", "-c", &script]);
    let mut theirs = Running::spawn(etcdctl);
    theirs.expect_line("held", 10 * SECOND);
    let out = elect_run(&etcd.url(), "shared", &["-n"], "echo ran")
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
    std::fs::write(&release, "").unwrap();
    assert!(theirs.wait(10 * SECOND).success());
    std::fs::remove_file(&release).unwrap();

    // elect holds: etcdctl must queue behind it and run only after it.
    let (mut ours, _) = hold(&etcd, "shared", &[]);
    let mut etcdctl = etcd.etcdctl_command();
    etcdctl.args([
        "lock",
        "shared",
        "--",
        "sh",
        "-c",
        "echo start $(date +%s%N)",
    ]);
    let mut theirs = Running::spawn(etcdctl);
    etcd.wait_keys("shared/", 2);
    assert_eq!(
        theirs.try_line(),
        None,
        "etcdctl ran while elect held the lock"
    );
    ours.send_line("done");
    let our_end: i128 = ours.expect_line("end", 10 * SECOND).parse().unwrap();
    let their_start: i128 = theirs.expect_line("start", 10 * SECOND).parse().unwrap();
    assert!(
        their_start > our_end,
        "etcdctl started before elect's child ended"
    );
    assert_eq!(ours.wait_code(10 * SECOND), 0);
}

/// A sharded lock's records (the last holder of each shard, each shard's
/// checkpoint) lie beside the lock's prefix, not under it: once nobody
/// holds or waits, nothing is left under `NAME/`, and `etcdctl lock NAME`
/// takes the lock at once.
#[test]
fn a_sharded_locks_records_are_not_in_its_queue() {
    let etcd = Etcd::start();
    let elect_bin = env!("CARGO_BIN_EXE_elect");
    for _ in 0..2 {
        let out = elect_run(
            &etcd.url(),
            "parts",
            &["--shards", "2"],
            &format!("{elect_bin} checkpoint put done"),
        )
        .output()
        .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(
        etcd.keys("parts/"),
        Vec::<String>::new(),
        "left in the queue"
    );
    let mut etcdctl = etcd.etcdctl_command();
    etcdctl.args(["lock", "parts", "--", "echo", "ran"]);
    let mut theirs = Running::spawn(etcdctl);
    theirs.expect_line("ran", 5 * SECOND);
    assert!(theirs.wait(5 * SECOND).success());
}

/// etcd grants whole seconds: `-v` says so, and that elect counts the
/// `--ttl` it was given.
#[test]
fn a_ttl_of_part_of_a_second_is_counted_as_given_and_said_so() {
    let etcd = Etcd::start();
    let out = elect_run(&etcd.url(), "part", &["-v", "--ttl", "1500ms"], "true")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("granted for 2s (elect counts its --ttl of 1s 500ms)"),
        "{err}"
    );
}

/// docs/fencing.md's etcd fencing example runs as written, inside elect run:
/// the write lands while the holder's key is there.
#[test]
fn the_guides_etcd_fencing_example_runs_as_written() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/fencing.md")).unwrap();
    let from = readme
        .find("**etcd** as the resource")
        .expect("the example's heading");
    let block = &readme[from..];
    let start = block.find("```sh\n").unwrap() + "```sh\n".len();
    let example = &block[start..start + block[start..].find("```").unwrap()];
    let etcd = Etcd::start();
    let etcdctl = support::tools::tool("ELECT_TEST_ETCDCTL", "etcdctl", "etcd-client");
    let dir = etcdctl.parent().unwrap().display().to_string();
    let out = elect_run(&etcd.url(), "app", &[], example)
        .env("PATH", format!("{dir}:/usr/bin:/bin"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{example}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = etcd.etcdctl(&["get", "--print-value-only", "/app/state"]);
    assert_eq!(String::from_utf8_lossy(&got.stdout).trim(), "new value");
}

fn partition(mode: Mode) {
    let etcd = Etcd::start();
    let proxy = Proxy::start(&etcd.endpoint);
    let ttl = 3 * SECOND;
    let mut first = Running::spawn(elect_run(
        &proxy.url(),
        "part",
        &["--ttl", "3s"],
        r#"echo "token $ELECT_TOKEN"; exec sleep 1000"#,
    ));
    let first_token: u64 = first.expect_line("token", 10 * SECOND).parse().unwrap();
    let first_child = Death::watch(find_child(first.pid(), "sleep"));

    let mut second = Running::spawn(elect_run(
        &etcd.url(),
        "part",
        &["--wait", "30s"],
        r#"echo "start $(date +%s%N) $ELECT_TOKEN""#,
    ));
    etcd.wait_keys("part/", 2);

    let cut_at = now_ns();
    proxy.set(mode);

    let died_at = first_child.at(10 * SECOND);
    let start = second.expect_line("start", 20 * SECOND);
    let (started_at, second_token) = start.split_once(' ').unwrap();
    let (started_at, second_token): (i128, u64) =
        (started_at.parse().unwrap(), second_token.parse().unwrap());
    assert_eq!(
        first.wait_code(10 * SECOND),
        76,
        "the cut-off holder exits with the lost code"
    );
    assert_eq!(second.wait_code(10 * SECOND), 0);

    eprintln!(
        "partition ({mode:?}): first child died {:.0} ms after the cut; second child started {:.0} ms after that death",
        ms(died_at - cut_at),
        ms(started_at - died_at)
    );
    assert!(
        died_at < cut_at + ttl.as_nanos() as i128,
        "the child outlived the lease"
    );
    assert!(started_at > died_at, "two children of one lock ran at once");
    assert!(second_token > first_token);
}

#[test]
fn a_blackholed_holder_stops_its_child_before_the_next_one_starts() {
    partition(Mode::Blackhole);
}

#[test]
fn a_reset_holder_stops_its_child_before_the_next_one_starts() {
    partition(Mode::Reset);
}

#[test]
fn an_unreachable_store_exits_69_naming_the_endpoint() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("etcd://127.0.0.1:{port}");
    let out = elect()
        .args([
            "run",
            "--store",
            &url,
            "--lock",
            "x",
            "--connect-timeout",
            "1s",
            "--",
            "echo",
            "ran",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(69));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("127.0.0.1:{port}")) && err.lines().count() == 1,
        "{err}"
    );
}

#[test]
fn an_unreachable_endpoint_among_reachable_ones_is_skipped() {
    let etcd = Etcd::start();
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let store = format!("etcd://127.0.0.1:{dead},{}", etcd.endpoint);
    // Long patience: a run that waited on the dead endpoint at all (an
    // attempt is a third of it) would take seconds, not milliseconds.
    let args = ["--ttl", "2s", "--connect-timeout", "30s"];
    for _ in 0..5 {
        let started = std::time::Instant::now();
        let out = elect_run(&store, "multi", &args, "echo ran")
            .output()
            .unwrap();
        let took = started.elapsed();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!("a run beside a dead endpoint took {took:?}");
        assert!(took < 2 * SECOND, "the dead endpoint held it up: {took:?}");
    }
}

#[test]
fn a_stopped_child_is_continued_so_it_can_act_on_the_signal() {
    let etcd = Etcd::start();
    let script = r#"echo "lease $ELECT_LEASE_ID"; exec sleep 1000"#;
    let mut holder = Running::spawn(elect_run(
        &etcd.url(),
        "stopped",
        &["--ttl", "9s", "--grace", "4s"],
        script,
    ));
    let lease = holder.expect_line("lease", 10 * SECOND);
    let sleeper = find_child(holder.pid(), "sleep");
    let death = Death::watch(sleeper);
    // SAFETY: plain kill(2).
    assert_eq!(unsafe { libc::kill(sleeper, libc::SIGSTOP) }, 0);
    let revoked_at = now_ns();
    assert!(etcd.etcdctl(&["lease", "revoke", &lease]).status.success());
    let took = death.at(10 * SECOND) - revoked_at;
    assert_eq!(holder.wait_code(10 * SECOND), 76);
    eprintln!(
        "a stopped child died {:.1} ms after the revoke (grace 4s)",
        ms(took)
    );
    assert!(
        took < 2_000_000_000,
        "the stopped child only died of SIGKILL after the grace"
    );
}

#[test]
fn the_guard_stops_the_child_on_time_even_if_elect_is_frozen() {
    let etcd = Etcd::start();
    let ttl_ns = 2_000_000_000;
    let mut holder = Running::spawn(elect_run(
        &etcd.url(),
        "frozen",
        &["--ttl", "2s"],
        "echo ready; exec sleep 1000",
    ));
    holder.expect_line("ready", 10 * SECOND);
    let death = Death::watch(find_child(holder.pid(), "sleep"));
    let frozen_at = now_ns();
    holder.signal(libc::SIGSTOP);
    let died_at = death.at(10 * SECOND);
    eprintln!(
        "elect frozen: its child was stopped {:.0} ms later (TTL 2s)",
        ms(died_at - frozen_at)
    );
    assert!(
        died_at < frozen_at + ttl_ns,
        "the child outlived the lease while elect was frozen"
    );
    holder.signal(libc::SIGCONT);
    assert_eq!(holder.wait_code(10 * SECOND), 76);
}

/// A release the store never confirms (it froze just as the command
/// ended) is not said to be one: `-v` says once that the lease will
/// expire, and never "released lock".
#[test]
fn a_release_the_store_never_confirms_is_not_said_to_be_one() {
    let etcd = Etcd::start();
    let (mut holder, _) = hold(&etcd, "unconfirmed", &["-v", "--ttl", "30s"]);
    etcd.pause(0);
    holder.send_line("done");
    let code = holder.wait_code(20 * SECOND);
    etcd.resume(0);
    assert_eq!(code, 0);
    let said = holder.drain_stderr();
    assert_eq!(
        said.matches("could not release lock unconfirmed within 2s; its lease will expire")
            .count(),
        1,
        "{said}"
    );
    assert_eq!(said.matches("will expire").count(), 1, "{said}");
    assert!(!said.contains("released lock"), "{said}");
}

/// A standby waiting on every shard of a lock costs etcd one watch per
/// shard and no request while idle (lease keep-alives aside); when it wins
/// a shard it leaves the other queues, so each holds only its owner's key.
#[test]
fn a_waiter_on_every_shard_costs_only_its_watches_and_leaves_the_other_queues() {
    use crate::stores::etcd::http::Metrics;
    const SHARDS: usize = 8;
    let etcd = Etcd::start();
    let shards = SHARDS.to_string();
    let flags = ["--shards", shards.as_str(), "--ttl", "3s"];
    let script = r#"echo "shard $ELECT_SHARD"; read _line"#;
    let mut owners: Vec<(usize, Running)> = (0..SHARDS)
        .map(|_| {
            let mut owner = Running::spawn(elect_run(&etcd.url(), "parts", &flags, script));
            let shard = owner.expect_line("shard", 10 * SECOND).parse().unwrap();
            (shard, owner)
        })
        .collect();
    let scrape = || Metrics::scrape(&etcd.endpoint).unwrap();
    let requests = |m: &Metrics| {
        m.sum("grpc_server_msg_received_total", |labels| {
            !labels.contains("LeaseKeepAlive")
        })
    };
    let watchers = |m: &Metrics| m.sum("etcd_debugging_mvcc_watcher_total", |_| true);
    // The owners' acquisitions recorded (a second after each), settled.
    std::thread::sleep(Duration::from_millis(1500));
    let before = scrape();

    let mut standby = Running::spawn(elect_run(&etcd.url(), "parts", &flags, script));
    for k in 0..SHARDS {
        etcd.wait_keys(&format!("parts/shard-{k}/"), 2);
    }
    std::thread::sleep(Duration::from_millis(500));
    let waiting = scrape();
    std::thread::sleep(Duration::from_secs(3));
    let idle = scrape();
    let joined = requests(&waiting) - requests(&before);
    let while_idle = requests(&idle) - requests(&waiting);
    let watches = watchers(&idle) - watchers(&before);
    eprintln!(
        "a standby on {SHARDS} shards: {joined} requests to join, {watches} watches, \
         {while_idle} requests in 3 s idle (keep-alives aside)"
    );
    assert_eq!(watches as usize, SHARDS, "one watch per shard");
    assert_eq!(while_idle, 0.0, "nothing but keep-alives while idle");

    // Shard 5's owner ends: the standby takes shard 5 and leaves the rest.
    let (_, owner) = owners.iter_mut().find(|(k, _)| *k == 5).unwrap();
    owner.send_line("done");
    assert_eq!(owner.wait_code(10 * SECOND), 0);
    assert_eq!(standby.expect_line("shard", 10 * SECOND), "5");
    for k in 0..SHARDS {
        etcd.wait_keys(&format!("parts/shard-{k}/"), 1);
    }
    standby.send_line("done");
    assert_eq!(standby.wait_code(10 * SECOND), 0);
    for (k, mut owner) in owners.into_iter().filter(|(k, _)| *k != 5) {
        owner.send_line("done");
        assert_eq!(owner.wait_code(10 * SECOND), 0, "shard {k}");
    }
}

/// The guard forks the command's process while elect waits, and that
/// process execs only at the word to go: one killed while it waits is
/// forked again at the word, and one whose elect gives up leaves with it.
#[test]
fn the_command_process_forked_while_waiting_runs_only_with_the_lock() {
    let etcd = Etcd::start();
    let gone = |pid: i32, what: &str| {
        let give_up = std::time::Instant::now() + 5 * SECOND;
        while std::path::Path::new(&format!("/proc/{pid}")).exists() {
            assert!(
                std::time::Instant::now() < give_up,
                "{what} {pid} is still there"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    let (mut holder, token) = hold(&etcd, "early", &[]);
    let mut waiter = Running::spawn(elect_run(
        &etcd.url(),
        "early",
        &[],
        "echo \"ran $ELECT_TOKEN\"",
    ));
    let guard = find_child(waiter.pid(), support::GUARD);
    let early = find_child(guard, support::GUARD);
    // Waiting: still the guard's copy, in a process group of its own, whose
    // id is the pid of the guard's sentinel.
    let pid = nix::unistd::Pid::from_raw(early);
    let sentinel = nix::unistd::Pid::from_raw(find_child(guard, support::SENTINEL));
    assert_eq!(
        nix::unistd::getpgid(Some(pid)),
        Ok(sentinel),
        "the waiting process is in the group that bears the sentinel's pid"
    );
    assert_ne!(
        nix::unistd::getpgid(Some(sentinel)),
        Ok(sentinel),
        "the sentinel is no member of the command's group"
    );
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
    holder.send_line("done");
    assert_eq!(holder.wait_code(10 * SECOND), 0);
    let ran: u64 = waiter.expect_line("ran", 10 * SECOND).parse().unwrap();
    assert!(ran > token, "token {ran} after {token}");
    assert_eq!(waiter.wait_code(10 * SECOND), 0, "{:?}", waiter.stderr_seen);
    gone(early, "the killed waiting process");

    // An elect that gives up waiting takes its waiting process with it.
    let (mut holder, _) = hold(&etcd, "early", &[]);
    let mut waiter = Running::spawn(elect_run(
        &etcd.url(),
        "early",
        &["--wait", "2s"],
        "echo ran",
    ));
    let guard = find_child(waiter.pid(), support::GUARD);
    let early = find_child(guard, support::GUARD);
    assert_eq!(
        waiter.wait_code(10 * SECOND),
        75,
        "{:?}",
        waiter.stderr_seen
    );
    gone(early, "the waiting process of an elect that gave up");
    gone(guard, "the guard of an elect that gave up");
    holder.send_line("done");
    assert_eq!(holder.wait_code(10 * SECOND), 0);
}

/// A waiter whose lease lapsed while etcd was down (a restart slower than
/// its TTL: etcd 3.5 and later close their port at once on SIGTERM but take
/// a second or two to end) queues again once etcd is back, within
/// --connect-timeout, instead of giving up on the refused connection.
#[test]
fn a_waiter_queues_again_after_a_restart_longer_than_its_ttl() {
    let mut etcd = Etcd::start();
    let (mut a, _) = hold(&etcd, "restart", &["--ttl", "2s"]);
    let mut b = Running::spawn(elect_run(
        &etcd.url(),
        "restart",
        &["-v", "--ttl", "2s"],
        "echo \"token $ELECT_TOKEN\"",
    ));
    b.expect_stderr("waiting for", 10 * SECOND);
    etcd.kill(0);
    // Down past both leases, as elect counts them.
    b.expect_stderr("lost our place in the queue", 10 * SECOND);
    std::thread::sleep(Duration::from_millis(500));
    etcd.restart(0);
    etcd.wait_healthy();
    let back = std::time::Instant::now();
    b.expect_line("token", 10 * SECOND);
    let after = back.elapsed();
    eprintln!("the waiter held the lock {after:?} after etcd was back");
    // A pause between tries is a second at most, and the holder's old
    // lease, which a restarted etcd renews, lasts its TTL.
    assert!(after < 4 * SECOND, "{after:?}");
    assert_eq!(b.wait_code(10 * SECOND), 0, "{}", b.drain_stderr());
    assert_eq!(a.wait_code(10 * SECOND), 76);
}

/// `--listen` is bounded: a client that sends nothing is dropped within
/// 2 s and cannot keep others out for longer, even when more such clients
/// are open than are served at once (16); a head of 8 KiB without its end
/// is refused with 431, a malformed request line with 400, a method other than GET
/// or HEAD with 405.
#[test]
fn the_endpoint_drops_slow_clients_and_refuses_bad_requests() {
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use support::endpoint::{code, get};

    let etcd = Etcd::start();
    let port = support::tools::free_port();
    let (mut holder, _) = hold(&etcd, "bounded", &["--listen", &port.to_string()]);
    support::until("/readyz 200", 10 * SECOND, || code(port, "/readyz") == 200);
    let answer = |request: &[u8]| {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.set_read_timeout(Some(5 * SECOND)).unwrap();
        // The server may close before it has read all of a long head.
        let _ = stream.write_all(request);
        let mut reply = Vec::new();
        let _ = stream.read_to_end(&mut reply);
        String::from_utf8_lossy(&reply).into_owned()
    };
    // Exactly the bound, without its end: nothing is left unread, so the
    // answer is not lost to a reset.
    let mut huge = b"GET /metrics HTTP/1.1\r\nX-Pad: ".to_vec();
    huge.resize(8192, b'a');
    assert!(answer(&huge).starts_with("HTTP/1.1 431 "), "an 8 KiB head");
    assert!(answer(b"GET /readyz\r\n\r\n").starts_with("HTTP/1.1 400 "));
    assert!(answer(b"POST /readyz HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405 "));
    assert!(answer(b"GET /nothing HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404 "));

    // Twenty clients that connect and say nothing.
    let silent: Vec<TcpStream> = (0..20)
        .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    let asked = std::time::Instant::now();
    let (status, _) = get(port, "/readyz").expect("an answer behind the silent clients");
    let waited = asked.elapsed();
    assert_eq!(status, 200);
    assert!(waited < 3 * SECOND, "answered after {waited:?}");
    for mut stream in silent {
        stream.set_read_timeout(Some(5 * SECOND)).unwrap();
        let mut buf = [0u8; 16];
        // Closed by elect, unanswered: end of stream, not a timeout.
        assert_eq!(stream.read(&mut buf).unwrap(), 0);
    }
    eprintln!("an answer behind 20 silent clients after {waited:?}");
    holder.send_line("");
    assert_eq!(holder.wait_code(10 * SECOND), 0);
}

/// A hook that hangs is killed within its bound (the same for every store,
/// so tested once): the run's own status is kept, with one line saying so.
#[test]
fn an_on_end_hook_that_hangs_is_killed_within_its_bound() {
    let dir = support::TempDir::new("hook-hangs");
    let started = Instant::now();
    let out = elect_run(&dir.url(), "report", &["--on-end", "sleep 60"], "true")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(started.elapsed() < 13 * SECOND, "{:?}", started.elapsed());
    assert!(
        stderr.contains("--on-end did not end within 10s") && stderr.lines().count() == 1,
        "{stderr}"
    );
}

/// An etcd whose database reached its quota refuses every write at once
/// (the NOSPACE alarm): elect says so at once, with what to do, and exits
/// 69, rather than retrying for its whole --connect-timeout and then
/// blaming the link.
#[test]
fn a_full_etcd_is_said_at_once() {
    let etcd = Etcd::start_with(EtcdOptions {
        args: vec!["--quota-backend-bytes".into(), "1048576".into()],
        ..EtcdOptions::default()
    });
    // Under the kernel's limit of one argument (128 KiB).
    let value = "x".repeat(100 * 1024);
    let mut full = false;
    for k in 0..60 {
        let out = etcd.etcdctl(&["put", &format!("fill/{k}"), &value]);
        if String::from_utf8_lossy(&out.stderr).contains("database space exceeded") {
            full = true;
            break;
        }
    }
    assert!(full, "etcd's quota of 1 MiB was never reached");
    let started = Instant::now();
    let out = elect_run(
        &etcd.url(),
        "full",
        &["--connect-timeout", "10s"],
        "echo ran",
    )
    .output()
    .unwrap();
    let took = started.elapsed();
    support::assert_outcome("a full etcd", &out, 69, "etcdctl alarm disarm");
    assert!(took < 3 * SECOND, "a full etcd was said after {took:?}");
}
