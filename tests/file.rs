//! `elect run --store file:DIR`: the single-host store, with the same
//! behaviour as etcd wherever it applies.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::time::Instant;

use support::{Death, Running, SECOND, TempDir, alive, elect, elect_run, hold, ms, now_ns};

#[test]
fn tokens_increase_across_runs_and_the_counter_is_kept_on_disk() {
    let dir = TempDir::new("file-tokens");
    let mut tokens = Vec::new();
    for _ in 0..3 {
        let out = elect_run(&dir.url(), "nightly", &[], "echo $ELECT_TOKEN $ELECT_KEY")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.stderr.is_empty());
        let line = String::from_utf8(out.stdout).unwrap();
        let (token, key) = line.trim().split_once(' ').unwrap();
        assert_eq!(key, dir.join("nightly.lock").to_str().unwrap());
        tokens.push(token.parse::<u64>().unwrap());
    }
    assert_eq!(tokens, [1, 2, 3]);
    assert_eq!(
        std::fs::read_to_string(dir.join("nightly.token")).unwrap(),
        "3\n"
    );
    let mode = |name: &str| {
        std::fs::metadata(dir.join(name))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(
        mode("nightly.lock"),
        0o600,
        "files never get more than the directory grants"
    );
    assert_eq!(mode("nightly.token"), 0o600);
}

#[test]
fn concurrent_contenders_take_turns_with_rising_tokens() {
    let dir = TempDir::new("file-turns");
    let script = r#"echo "run $ELECT_TOKEN $(date +%s%N)"; sleep 0.2; echo "done $(date +%s%N)""#;
    let mut contenders: Vec<Running> = (0..3)
        .map(|_| Running::spawn(elect_run(&dir.url(), "turns", &[], script)))
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
        assert!(
            pair[0].2 < pair[1].2,
            "tokens must rise in the order of turns: {runs:?}"
        );
    }
}

#[test]
fn a_held_lock_makes_others_exit_75_with_the_holder_named() {
    let dir = TempDir::new("file-busy");
    let (mut holder, token) = hold(&dir.url(), "busy", &["--identity", "first"]);
    let out = elect_run(&dir.url(), "busy", &["-n"], "echo ran")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("held by first") && err.contains(&format!("token {token}")),
        "{err}"
    );

    let started = Instant::now();
    let out = elect_run(
        &dir.url(),
        "busy",
        &["--wait", "1s", "--busy-exit-code", "9"],
        "echo ran",
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(9));
    assert!(
        started.elapsed() >= SECOND && started.elapsed() < 5 * SECOND,
        "{:?}",
        started.elapsed()
    );

    holder.send_line("done");
    assert_eq!(holder.wait_code(10 * SECOND), 0);
    let out = elect_run(&dir.url(), "busy", &["-n"], "echo $ELECT_TOKEN")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        (token + 1).to_string()
    );
}

#[test]
fn a_stale_holder_record_is_not_believed() {
    let dir = TempDir::new("file-stale");
    std::fs::write(
        dir.join("stale.holder"),
        r#"{"identity":"ghost","hostname":"h","pid":1,"command":["x"],"started":"2020-01-01T00:00:00Z","token":7}"#,
    )
    .unwrap();
    let out = elect_run(&dir.url(), "stale", &["-n"], "echo ran")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ran");
}

#[test]
fn signals_are_forwarded_and_the_status_passes_through() {
    let dir = TempDir::new("file-signals");
    let script = r#"trap 'echo got USR1' USR1; trap 'exit 4' TERM; echo ready; while :; do sleep 0.01; done"#;
    let mut holder = Running::spawn(elect_run(&dir.url(), "sig", &[], script));
    holder.expect_line("ready", 10 * SECOND);
    holder.signal(libc::SIGUSR1);
    holder.expect_line("got USR1", 5 * SECOND);
    holder.signal(libc::SIGTERM);
    assert_eq!(holder.wait_code(10 * SECOND), 4);
    let out = elect_run(&dir.url(), "sig", &[], "kill -TERM $$")
        .output()
        .unwrap();
    assert_eq!(out.status.signal(), Some(libc::SIGTERM));
}

#[test]
fn sigkill_of_the_holder_hands_over_at_once_after_its_children_are_gone() {
    let dir = TempDir::new("file-kill");
    let script = r#"sleep 1000 & echo "grandchild $!"; echo "child $$ $ELECT_TOKEN"; wait"#;
    let mut holder = Running::spawn(elect_run(&dir.url(), "kill", &[], script));
    let grandchild = holder
        .expect_line("grandchild", 10 * SECOND)
        .parse()
        .unwrap();
    let child = holder.expect_line("child", 10 * SECOND);
    let (child, token) = child.split_once(' ').unwrap();
    let (child, token): (i32, u64) = (child.parse().unwrap(), token.parse().unwrap());
    let deaths = [Death::watch(child), Death::watch(grandchild)];

    let mut next = Running::spawn(elect_run(
        &dir.url(),
        "kill",
        &[],
        r#"echo "start $(date +%s%N) $ELECT_TOKEN""#,
    ));
    // The waiter is blocked in flock(2) once its elect has a thread named for it.
    find_thread(next.pid(), "elect-flock");

    let killed_at = now_ns();
    holder.signal(libc::SIGKILL);
    let start = next.expect_line("start", 10 * SECOND);
    let (started_at, next_token) = start.split_once(' ').unwrap();
    let (started_at, next_token): (i128, u64) =
        (started_at.parse().unwrap(), next_token.parse().unwrap());
    let gone = deaths.iter().map(|d| d.at(5 * SECOND)).max().unwrap();
    assert!(!alive(child) && !alive(grandchild));
    assert!(
        started_at > gone,
        "the next holder started before the old group was dead"
    );
    assert_eq!(next_token, token + 1);
    eprintln!(
        "file store, SIGKILL of the holder: old group gone after {:.1} ms, next child started {:.1} ms after the kill",
        ms(gone - killed_at),
        ms(started_at - killed_at)
    );
    assert_eq!(next.wait_code(10 * SECOND), 0);
}

/// Wait until process `pid` has a thread called `name`.
fn find_thread(pid: i32, name: &str) {
    let give_up = Instant::now() + 10 * SECOND;
    loop {
        let found = std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .flatten()
            .any(|task| {
                std::fs::read_to_string(task.path().join("comm"))
                    .is_ok_and(|comm| comm.trim() == name)
            });
        if found {
            return;
        }
        assert!(Instant::now() < give_up, "no thread {name} in {pid}");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[test]
fn a_removed_or_replaced_lock_file_is_a_lost_lease() {
    let dir = TempDir::new("file-removed");
    for how in ["remove", "replace"] {
        let script = r#"trap 'echo term; exit 0' TERM; echo ready; while :; do sleep 0.01; done"#;
        // Renewals, which look at the lock file, come every TTL/3.
        let mut holder = Running::spawn(elect_run(&dir.url(), how, &["--ttl", "3s"], script));
        holder.expect_line("ready", 10 * SECOND);
        let lock = dir.join(&format!("{how}.lock"));
        if how == "remove" {
            std::fs::remove_file(&lock).unwrap();
        } else {
            let other = dir.join("other");
            std::fs::write(&other, "").unwrap();
            std::fs::rename(&other, &lock).unwrap();
        }
        holder.expect_line("term", 5 * SECOND);
        assert_eq!(holder.wait_code(10 * SECOND), 76, "{how}");
        assert!(
            holder.stderr_seen.join("\n").contains("lost the lease"),
            "{how}"
        );
    }
}

#[test]
fn tokens_survive_a_crash_between_increment_and_exec() {
    let dir = TempDir::new("file-crash");
    // What a holder that died after writing the new counter but before its
    // rename (or before its command started) leaves behind.
    std::fs::write(dir.join("crash.token"), "41\n").unwrap();
    std::fs::write(dir.join("crash.token.tmp"), "42\n").unwrap();
    std::fs::write(dir.join("crash.holder"), "{}").unwrap();
    let out = elect_run(&dir.url(), "crash", &[], "echo $ELECT_TOKEN")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let token: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert!(token > 41, "a token was handed out twice: {token}");

    // A counter that cannot be read is never silently restarted at 1.
    std::fs::write(dir.join("crash.token"), "garbage").unwrap();
    let out = elect_run(&dir.url(), "crash", &[], "echo ran")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("corrupt"));
}

#[test]
fn lock_names_stay_inside_the_directory() {
    let dir = TempDir::new("file-names");
    for bad in ["../escape", "a/../b", "a//b", "a b", "a\nb", "./x"] {
        let out = elect_run(&dir.url(), bad, &[], "echo ran")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(64), "{bad:?}");
        assert!(out.stdout.is_empty());
    }
    let long = vec!["x"; 100].join("/");
    let out = elect_run(&dir.url(), &long, &[], "echo ran")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64), "too long once '/' is encoded");

    let out = elect_run(&dir.url(), "/etc/passwd", &[], "echo ran")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(dir.join("%2Fetc%2Fpasswd.lock").exists());
    let names: Vec<String> = std::fs::read_dir(&dir.0)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(
        names.iter().all(|n| n.starts_with("%2Fetc%2Fpasswd.")),
        "{names:?}"
    );
}

#[test]
fn unsafe_directories_and_planted_symlinks_are_refused() {
    let open = TempDir::new("file-open");
    std::fs::set_permissions(&open.0, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = elect_run(&open.url(), "x", &[], "echo ran")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78));
    assert!(String::from_utf8_lossy(&out.stderr).contains("writable by everyone"));

    let dir = TempDir::new("file-symlink");
    let target = dir.join("target");
    std::fs::write(&target, "precious").unwrap();
    std::os::unix::fs::symlink(&target, dir.join("planted.lock")).unwrap();
    let out = elect_run(&dir.url(), "planted", &[], "echo ran")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(78),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty());
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious");

    let made = TempDir::new("file-made");
    let fresh = made.join("a/b");
    let out = elect_run(&format!("file:{}", fresh.display()), "x", &[], "true")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        std::fs::metadata(&fresh).unwrap().permissions().mode() & 0o777,
        0o700
    );
}

#[test]
fn a_command_that_cannot_run_leaves_no_lock_behind() {
    let dir = TempDir::new("file-noexec");
    let out = elect()
        .args([
            "run",
            "--store",
            &dir.url(),
            "--lock",
            "n",
            "--",
            "no-such-command-anywhere",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
    assert_eq!(
        std::fs::read_dir(&dir.0).unwrap().count(),
        0,
        "nothing was created"
    );
}

#[test]
fn ctrl_c_while_waiting_gives_up_at_once() {
    let dir = TempDir::new("file-ctrl-c");
    let (mut holder, _) = hold(&dir.url(), "q", &[]);
    let mut waiter = Running::spawn(elect_run(&dir.url(), "q", &[], "echo ran"));
    find_thread(waiter.pid(), "elect-flock");
    waiter.signal(libc::SIGINT);
    assert_eq!(waiter.wait(5 * SECOND).signal(), Some(libc::SIGINT));
    holder.send_line("done");
    assert_eq!(holder.wait_code(10 * SECOND), 0);
}
