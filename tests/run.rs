//! `elect run` against a real etcd: tokens, exclusion, loss, partitions,
//! crashes, signals and exit codes.

mod support;

use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use support::proxy::{Mode, Proxy};
use support::{Death, Etcd, Running, SECOND, alive, elect, elect_run, find_child, ms, now_ns};

fn hold(etcd: &Etcd, lock: &str, extra: &[&str]) -> (Running, u64) {
    support::hold(&etcd.url(), lock, extra)
}

#[test]
fn the_child_sees_its_token_and_lock_in_the_environment() {
    let etcd = Etcd::start();
    let out = elect_run(
        &etcd.url(),
        "env-check",
        &["--identity", "batch-7"],
        "echo token=$ELECT_TOKEN lock=$ELECT_LOCK key=$ELECT_KEY lease=$ELECT_LEASE_ID id=$ELECT_IDENTITY store=$ELECT_STORE pw=${ELECT_PASSWORD-unset}",
    )
    .env("ELECT_TOKEN", "inherited")
    .env("ELECT_PASSWORD", "hunter2")
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "a good run prints nothing of elect's own: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = String::from_utf8(out.stdout).unwrap();
    let field = |name: &str| {
        line.split_whitespace()
            .find_map(|f| f.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("{name} missing in {line}"))
            .to_string()
    };
    let token: u64 = field("token")
        .parse()
        .expect("ELECT_TOKEN is a decimal number");
    let lease = field("lease");
    assert!(
        u64::from_str_radix(&lease, 16).is_ok(),
        "lease id in hex: {lease}"
    );
    assert_eq!(field("lock"), "env-check");
    assert_eq!(field("key"), format!("env-check/{lease}"));
    assert_eq!(field("id"), "batch-7");
    assert_eq!(field("store"), etcd.url());
    assert_eq!(field("pw"), "unset", "secrets never reach the child");
    assert!(token > 0);
}

#[test]
fn consecutive_holders_get_strictly_increasing_tokens() {
    let etcd = Etcd::start();
    let mut tokens = Vec::new();
    for _ in 0..4 {
        let out = elect_run(&etcd.url(), "rising", &[], "echo $ELECT_TOKEN")
            .output()
            .unwrap();
        assert!(out.status.success());
        tokens.push(
            String::from_utf8(out.stdout)
                .unwrap()
                .trim()
                .parse::<u64>()
                .unwrap(),
        );
        // Other writes to etcd in between must not matter.
        assert!(etcd.etcdctl(&["put", "unrelated", "x"]).status.success());
    }
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens must rise: {tokens:?}"
    );
    assert!(
        etcd.keys("rising/").is_empty(),
        "every holder released its key"
    );
}

#[test]
fn no_wait_on_a_free_lock_runs_the_command() {
    let etcd = Etcd::start();
    for _ in 0..5 {
        let out = elect_run(&etcd.url(), "free", &["--no-wait"], "echo ran")
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ran");
    }
}

#[test]
fn a_held_lock_makes_others_exit_75() {
    let etcd = Etcd::start();
    let (mut holder, token) = hold(&etcd, "busy", &["--identity", "first"]);

    let out = elect_run(&etcd.url(), "busy", &["--no-wait"], "echo ran")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75));
    assert!(out.stdout.is_empty(), "the command must not run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("held by first") && err.contains(&format!("token {token}")),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "one line: {err}");

    let started = Instant::now();
    let out = elect_run(&etcd.url(), "busy", &["--wait", "1s"], "echo ran")
        .output()
        .unwrap();
    let waited = started.elapsed();
    assert_eq!(out.status.code(), Some(75));
    assert!(waited >= SECOND && waited < 5 * SECOND, "waited {waited:?}");
    eprintln!("--wait 1s gave up after {waited:?}");

    let out = elect_run(
        &etcd.url(),
        "busy",
        &["-n", "-q", "--busy-exit-code", "3"],
        "true",
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(out.stderr.is_empty(), "-q silences the busy message");

    assert_eq!(
        etcd.keys("busy/").len(),
        1,
        "those who gave up left the queue"
    );
    holder.send_line("done");
    assert_eq!(holder.wait_code(10 * SECOND), 0);
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

#[test]
fn an_external_revoke_stops_the_child_at_once_and_exits_76() {
    let etcd = Etcd::start();
    let script = r#"trap 'echo term $(date +%s%N); exit 0' TERM; echo "lease $ELECT_LEASE_ID"; while :; do sleep 0.01; done"#;
    let mut holder = Running::spawn(elect_run(&etcd.url(), "revoked", &["--ttl", "5s"], script));
    let lease = holder.expect_line("lease", 10 * SECOND);
    let revoked_at = now_ns();
    assert!(etcd.etcdctl(&["lease", "revoke", &lease]).status.success());
    let termed_at: i128 = holder.expect_line("term", 5 * SECOND).parse().unwrap();
    assert_eq!(holder.wait_code(10 * SECOND), 76);
    let line = holder.stderr_seen.join("\n");
    assert!(
        line.contains("lost the lease on lock revoked") && line.contains(&etcd.url()),
        "{line}"
    );
    eprintln!(
        "external revoke → child's SIGTERM: {:.1} ms",
        ms(termed_at - revoked_at)
    );
    assert!(
        termed_at - revoked_at < 5 * 1_000_000_000 / 2,
        "signal came after the lease could have expired"
    );
}

#[test]
fn after_an_external_revoke_a_command_that_ignores_the_signal_is_killed_within_100ms() {
    let etcd = Etcd::start();
    let script = r#"trap '' TERM; echo "lease $ELECT_LEASE_ID"; exec sleep 1000"#;
    let mut holder = Running::spawn(elect_run(
        &etcd.url(),
        "stubborn",
        &["--ttl", "6s", "--grace", "1s"],
        script,
    ));
    let lease = holder.expect_line("lease", 10 * SECOND);
    let pid = find_child(holder.pid(), "sleep");
    let death = Death::watch(pid);
    let revoked_at = now_ns();
    assert!(etcd.etcdctl(&["lease", "revoke", &lease]).status.success());
    let died_at = death.at(10 * SECOND);
    assert_eq!(holder.wait_code(10 * SECOND), 76);
    let took = died_at - revoked_at;
    eprintln!(
        "revoke → SIGKILL of a child ignoring SIGTERM: {:.1} ms (grace 1s)",
        ms(took)
    );
    // The lease is gone: another holder may already run, so the command
    // gets 100 ms, not its grace; a break, which waits, gets the grace.
    assert!(
        (90_000_000..900_000_000).contains(&took),
        "SIGKILL {:.1} ms after the revoke; expected about 100 ms",
        ms(took)
    );
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
fn if_elect_is_killed_nothing_it_started_survives() {
    let etcd = Etcd::start();
    let script = r#"sleep 1000 & echo "grandchild $!"; echo "child $$"; wait"#;
    let mut holder = Running::spawn(elect_run(&etcd.url(), "oom", &["--ttl", "2s"], script));
    let grandchild = holder
        .expect_line("grandchild", 10 * SECOND)
        .parse()
        .unwrap();
    let child = holder.expect_line("child", 10 * SECOND).parse().unwrap();
    let (child_death, grandchild_death) = (Death::watch(child), Death::watch(grandchild));

    let killed_at = now_ns();
    holder.signal(libc::SIGKILL);
    let gone = child_death
        .at(5 * SECOND)
        .max(grandchild_death.at(5 * SECOND));
    eprintln!(
        "SIGKILL of elect → child and grandchild gone after {:.1} ms",
        ms(gone - killed_at)
    );
    assert!(!alive(child) && !alive(grandchild));
    assert!(
        gone - killed_at < 1_000_000_000,
        "took {:.1} ms",
        ms(gone - killed_at)
    );

    // The lease was not revoked: the next holder waits for it to expire.
    let started = Instant::now();
    let out = elect_run(&etcd.url(), "oom", &["--wait", "10s"], "echo ran")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        started.elapsed() > Duration::from_millis(500),
        "acquired before the old lease expired"
    );
}

#[test]
fn signals_are_forwarded_and_the_exit_status_passes_through() {
    let etcd = Etcd::start();
    let script = r#"trap 'echo got USR1' USR1; trap 'echo got HUP' HUP; trap 'echo got TERM; exit 3' TERM; echo ready; while :; do sleep 0.01; done"#;
    let mut holder = Running::spawn(elect_run(&etcd.url(), "sig", &[], script));
    holder.expect_line("ready", 10 * SECOND);
    holder.signal(libc::SIGUSR1);
    holder.expect_line("got USR1", 5 * SECOND);
    holder.signal(libc::SIGHUP);
    holder.expect_line("got HUP", 5 * SECOND);
    holder.signal(libc::SIGTERM);
    holder.expect_line("got TERM", 5 * SECOND);
    assert_eq!(holder.wait_code(10 * SECOND), 3);
    assert!(etcd.keys("sig/").is_empty());

    let out = elect_run(&etcd.url(), "sig", &[], "exit 7")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7));
}

#[test]
fn a_child_killed_by_a_signal_kills_elect_by_the_same_signal() {
    let etcd = Etcd::start();
    let mut holder = Running::spawn(elect_run(
        &etcd.url(),
        "int",
        &[],
        "echo ready; exec sleep 1000",
    ));
    holder.expect_line("ready", 10 * SECOND);
    holder.signal(libc::SIGINT);
    let status = holder.wait(10 * SECOND);
    assert_eq!(status.signal(), Some(libc::SIGINT), "{status:?}");

    let out = elect_run(&etcd.url(), "int", &[], "kill -KILL $$")
        .output()
        .unwrap();
    assert_eq!(out.status.signal(), Some(libc::SIGKILL));
    assert!(etcd.keys("int/").is_empty());
}

#[test]
fn commands_that_cannot_run_exit_126_or_127_and_leave_nothing_behind() {
    let etcd = Etcd::start();
    let dir = std::env::temp_dir().join(format!("elect-test-noexec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plain = dir.join("plain-file");
    std::fs::write(&plain, "#!/bin/sh\n").unwrap();
    let cases: [(&str, i32); 4] = [
        ("no-such-command-anywhere", 127),
        ("/no/such/path", 127),
        (dir.to_str().unwrap(), 126),
        (plain.to_str().unwrap(), 126),
    ];
    for (command, code) in cases {
        let out = elect()
            .args([
                "run",
                "--store",
                &etcd.url(),
                "--lock",
                "noexec",
                "--",
                command,
            ])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(code), "{command}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(command) && err.lines().count() == 1, "{err}");
    }
    assert!(etcd.keys("noexec/").is_empty());
    let leases = etcd.etcdctl(&["lease", "list"]);
    assert_eq!(
        String::from_utf8_lossy(&leases.stdout).trim(),
        "found 0 leases",
        "no lease was granted"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_clean_exit_hands_over_in_milliseconds() {
    let etcd = Etcd::start();
    let (mut first, _) = hold(&etcd, "handover", &["--ttl", "10s"]);
    let mut second = Running::spawn(elect_run(
        &etcd.url(),
        "handover",
        &["--ttl", "10s"],
        r#"echo "start $(date +%s%N)""#,
    ));
    etcd.wait_keys("handover/", 2);
    first.send_line("done");
    let ended: i128 = first.expect_line("end", 10 * SECOND).parse().unwrap();
    let started: i128 = second.expect_line("start", 10 * SECOND).parse().unwrap();
    assert_eq!(first.wait_code(10 * SECOND), 0);
    assert_eq!(second.wait_code(10 * SECOND), 0);
    let handover = started - ended;
    eprintln!("handover after a clean exit: {:.1} ms", ms(handover));
    assert!(handover > 0);
    assert!(
        handover < 2_000_000_000,
        "handover took {:.1} ms: waited for the TTL?",
        ms(handover)
    );
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
fn bad_input_is_a_usage_or_configuration_error() {
    let cases: &[(&[&str], i32, &str)] = &[
        (&["--lock", "a b"], 64, "lock name"),
        (&["--lock", ""], 64, "empty"),
        (&["--lock", "x", "--ttl", "0s"], 64, "too short"),
        (&["--lock", "x", "--ttl=-1s"], 64, "negative"),
        (&["--lock", "x", "--ttl", "15"], 64, "unit"),
        (
            &["--lock", "x", "--ttl", "3s", "--grace", "2s"],
            64,
            "does not fit",
        ),
        (&["--lock", "x", "--signal", "NOPE"], 64, "signal"),
        (
            &["--lock", "x", "--wait", "1s", "--no-wait"],
            64,
            "cannot be used",
        ),
        (&["--lock", "x", "--store", "zk://a:1"], 78, "unknown store"),
        (&["--lock", "x", "--store", "etcd://a:notaport"], 78, "port"),
    ];
    for (args, code, text) in cases {
        let out = elect()
            .arg("run")
            .args(*args)
            .args(["--", "true"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(*code), "{args:?}: {err}");
        assert!(err.contains(text), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
    }
    let out = elect().args(["run", "--lock", "x"]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(64),
        "a missing command is a usage error"
    );
}

#[test]
fn ctrl_c_while_waiting_leaves_the_queue_at_once() {
    let etcd = Etcd::start();
    let (mut holder, _) = hold(&etcd, "queue", &[]);
    let mut waiter = Running::spawn(elect_run(&etcd.url(), "queue", &[], "echo ran"));
    etcd.wait_keys("queue/", 2);
    waiter.signal(libc::SIGINT);
    let status = waiter.wait(5 * SECOND);
    assert_eq!(status.signal(), Some(libc::SIGINT));
    assert_eq!(etcd.keys("queue/").len(), 1, "the waiter's key is gone");
    holder.send_line("done");
    assert_eq!(holder.wait_code(10 * SECOND), 0);
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
    for _ in 0..5 {
        let out = elect_run(&store, "multi", &["--ttl", "2s"], "echo ran")
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn the_child_starts_with_default_signal_handling_whatever_elect_inherited() {
    use std::os::unix::process::CommandExt;
    let etcd = Etcd::start();
    let mut command = elect();
    command.args([
        "run",
        "--store",
        &etcd.url(),
        "--lock",
        "sigmask",
        "--",
        "grep",
        "-E",
        "^Sig(Blk|Ign)",
        "/proc/self/status",
    ]);
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
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        status,
        "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n"
    );
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

#[test]
fn usage_errors_say_what_to_type_in_one_line() {
    let cases: &[(&[&str], i32, &str)] = &[
        (
            &["run", "--lock", "x", "echo", "hi"],
            64,
            "put -- before the command: elect run --lock x -- echo hi",
        ),
        (
            &["run", "--lcok", "x", "--", "true"],
            64,
            "did you mean '--lock'?",
        ),
        (
            &["run", "--lock", "x", "--wait", "never", "--", "true"],
            64,
            "--wait never: to not wait at all, write 0 or use -n",
        ),
        (
            &["run", "--lock", "x", "--ttl", "25h", "--", "true"],
            64,
            "--ttl 25h: too long; the longest TTL is 24h",
        ),
        (
            &["run", "--lock", "x", "--rejoin", "always", "--", "true"],
            64,
            "--rejoin takes its value after '=': --rejoin=always",
        ),
        (
            &["run", "--lock", "überweisung", "--", "true"],
            64,
            "the lock name 'überweisung' contains 'ü'",
        ),
        (
            &[
                "run",
                "--lock",
                "x",
                "--store",
                "etcd:127.0.0.1:2379",
                "--",
                "true",
            ],
            78,
            "did you mean etcd://127.0.0.1:2379? The forms are etcd://",
        ),
        (
            &["run", "--lock", "x", "--store", "/tmp/x", "--", "true"],
            78,
            "did you mean file:/tmp/x?",
        ),
        (&["check"], 64, "elect check is for COMMAND under elect run"),
    ];
    for (args, code, text) in cases {
        let out = elect()
            .env_remove("ELECT_KEY")
            .env_remove("ELECT_TOKEN")
            .args(*args)
            .output()
            .unwrap();
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(*code), "{args:?}: {err}");
        assert!(err.contains(text), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(
            err.starts_with("elect: ") && !err.starts_with("elect: 20"),
            "a usage or configuration error has no timestamp: {err}"
        );
    }
    // Bare elect lists the commands, each with its line, and exits 64.
    let out = elect().output().unwrap();
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8(out.stderr).unwrap();
    for command in ["run ", "status ", "list ", "check ", "break "] {
        assert!(err.contains(&format!("  {command}")), "{err}");
    }
    assert!(err.contains("Take the lock"), "{err}");
}

#[test]
fn json_logs_cover_usage_errors_too() {
    for (args, env) in [
        (
            &["--log-format", "json", "run", "--lcok", "x", "--", "true"][..],
            None,
        ),
        (&["run", "--lock", "x", "echo", "hi"][..], Some("json")),
        (&[][..], Some("json")),
    ] {
        let mut c = elect();
        c.args(args);
        match env {
            Some(format) => c.env("ELECT_LOG_FORMAT", format),
            None => c.env_remove("ELECT_LOG_FORMAT"),
        };
        let out = c.output().unwrap();
        assert_eq!(out.status.code(), Some(64));
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{err}");
        let v: serde_json::Value =
            serde_json::from_str(&err).unwrap_or_else(|e| panic!("{e}: {err}"));
        assert_eq!(v["level"], "error", "{err}");
        assert!(v["message"].as_str().unwrap().contains("--"), "{err}");
    }
}

#[test]
fn every_run_option_comes_from_the_environment_too() {
    let dir = support::TempDir::new("run-env");
    let store = dir.url();
    // As in the README's Kubernetes example: the identity from the pod's name.
    let out = elect()
        .args([
            "run",
            "--lock",
            "env",
            "--",
            "sh",
            "-c",
            "echo id=$ELECT_IDENTITY",
        ])
        .env("ELECT_STORE", &store)
        .env("ELECT_IDENTITY", "compactor-7f9c")
        .env("ELECT_TTL", "3s")
        .env("ELECT_GRACE", "")
        .env("ELECT_SIGNAL", "INT")
        .env("ELECT_REJOIN", "always")
        .env("ELECT_CONNECT_TIMEOUT", "2s")
        .env("ELECT_QUIET", "yes")
        .env("ELECT_SUBREAPER", "off")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "id=compactor-7f9c"
    );

    // A held lock: ELECT_WAIT=0 gives up at once with ELECT_BUSY_EXIT_CODE,
    // and says so with a timestamp; ELECT_QUIET=1 says nothing.
    let (mut holder, _) = support::hold(&store, "env", &["--identity", "first"]);
    let busy = |extra: &[(&str, &str)]| {
        let mut c = elect_run(&store, "env", &[], "echo ran");
        c.env("ELECT_WAIT", "0").env("ELECT_BUSY_EXIT_CODE", "3");
        for (k, v) in extra {
            c.env(k, v);
        }
        c.output().unwrap()
    };
    let out = busy(&[]);
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("held by first"), "{err}");
    let stamp = err.strip_prefix("elect: ").unwrap_or_default();
    assert!(
        humantime::parse_rfc3339(stamp.split(' ').next().unwrap()).is_ok(),
        "a timestamp after 'elect: ': {err}"
    );
    let out = busy(&[("ELECT_QUIET", "1")]);
    assert_eq!(out.status.code(), Some(3));
    assert!(out.stderr.is_empty());
    // -v on the command line wins over ELECT_QUIET.
    let out = elect_run(&store, "env", &["-v"], "echo ran")
        .env("ELECT_WAIT", "0")
        .env("ELECT_QUIET", "true")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75));
    assert!(!out.stderr.is_empty());
    // -n wins over ELECT_WAIT.
    let started = Instant::now();
    let out = elect_run(&store, "env", &["-n"], "echo ran")
        .env("ELECT_WAIT", "forever")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75));
    assert!(started.elapsed() < 10 * SECOND);
    // A variable that is not understood is named in the error.
    for (variable, value) in [
        ("ELECT_QUIET", "maybe"),
        ("ELECT_TTL", "25h"),
        ("ELECT_WAIT", "never"),
    ] {
        let out = elect_run(&store, "env", &[], "echo ran")
            .env(variable, value)
            .output()
            .unwrap();
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(64), "{err}");
        assert!(err.contains(&format!("{variable}={value}: ")), "{err}");
    }
    holder.send_line("done");
    assert_eq!(holder.wait_code(10 * SECOND), 0);
}
