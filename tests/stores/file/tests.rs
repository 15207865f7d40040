//! What only the single-host store `file:DIR` does: lock names stay inside
//! the directory, unsafe directories and planted symlinks are refused, the
//! token counter is kept on disk and survives a crash between increment
//! and exec, and a kill at any system call on the way, a stale holder
//! record is not believed. What every store does
//! is in tests/suites/behaviour.rs.

use crate::support;

use std::os::unix::fs::PermissionsExt;

use support::{TempDir, elect_run};

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
    // Two slots, written in turn: 3 in one, 2 in the other.
    let counter = std::fs::read_to_string(dir.join("nightly.token")).unwrap();
    let values: Vec<u64> = counter
        .lines()
        .map(|line| line.split_whitespace().next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(values, [2, 3], "{counter:?}");
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

    // A crash while the next token was being written tears the slot it was
    // going into (the one of the token before last); that token was never
    // handed out. The last one handed out is still in the other slot, so
    // the next is higher than every token seen.
    let counter = std::fs::read(dir.join("crash.token")).unwrap();
    assert_eq!(counter.len(), 64, "two slots of 32 bytes");
    let mut torn = counter.clone();
    let slot = ((token + 1) % 2) as usize * 32;
    torn[slot..slot + 10].copy_from_slice(b"9999999999");
    std::fs::write(dir.join("crash.token"), &torn).unwrap();
    let out = elect_run(&dir.url(), "crash", &[], "echo $ELECT_TOKEN")
        .output()
        .unwrap();
    let again: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert_eq!(again, token + 1, "after a torn write");

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
fn read_only_commands_leave_no_directory_behind() {
    let parent = TempDir::new("file-missing");
    let missing = parent.join("mistyped/dir");
    let store = format!("file:{}", missing.display());
    let commands: [&[&str]; 3] = [
        &["status", "--lock", "x"],
        &["list"],
        &["check", "--lock", "x", "--holder-key", "k", "--token", "1"],
    ];
    for command in commands {
        let out = support::elect()
            .args(command)
            .args(["--store", &store])
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(78), "{command:?}: {said}");
        assert!(said.contains("does not exist"), "{command:?}: {said}");
        assert!(
            !missing.exists(),
            "{command:?} created {}",
            missing.display()
        );
    }
    // `run` creates it.
    let out = elect_run(&store, "x", &[], "true").output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(missing.is_dir());
}

#[test]
fn home_and_relative_store_paths_reach_the_command_absolute() {
    let home = TempDir::new("file-home");
    let out = elect_run("file:~/locks", "x", &[], "echo $ELECT_STORE")
        .env("HOME", &home.0)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(shown, format!("file:{}", home.join("locks").display()));
    assert!(home.join("locks").is_dir());

    let out = elect_run("file:rel", "x", &[], "echo $ELECT_STORE")
        .current_dir(&home.0)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(shown, format!("file:{}", home.join("rel").display()));
}

/// elect killed (SIGKILL, by strace's fault injection) on entering each
/// system call on its way to a token and back: before the counter's
/// write, between the write and its fdatasync, after it, at the holder
/// record, at the release. Whatever step it dies at, no token is ever seen
/// twice, and the next elect's token is higher than every token seen.
/// (A kill leaves an unsynced write in the page cache, where power loss
/// would lose it: then the token written was never handed out, because
/// the command starts only after the sync.)
#[test]
fn a_kill_at_any_step_never_hands_out_a_token_twice() {
    let strace = support::tools::tool("ELECT_TEST_STRACE", "strace", "strace");
    let dir = TempDir::new("file-kill-steps");
    let mut seen: Vec<u64> = Vec::new();
    let mut take = |out: &std::process::Output, what: &str| {
        let text = String::from_utf8_lossy(&out.stdout);
        if let Ok(token) = text.trim().parse::<u64>() {
            assert!(
                seen.iter().all(|&t| t < token),
                "{what}: token {token} after {seen:?}"
            );
            seen.push(token);
        }
    };
    let mut killed = Vec::new();
    for call in [
        "openat",
        "flock",
        "read",
        "lseek",
        "write",
        "fdatasync",
        "rename",
        "unlink",
        "close",
    ] {
        for when in 1..=200 {
            let out = std::process::Command::new(&strace)
                // Only the calls elect makes: not ld.so's search of the
                // directories cargo adds for the tests.
                .env_remove("LD_LIBRARY_PATH")
                .args(["-qq", "-o", "/dev/null", "-e", &format!("trace={call}")])
                .arg("-e")
                .arg(format!("inject={call}:signal=KILL:when={when}"))
                .arg(env!("CARGO_BIN_EXE_elect"))
                .args(["run", "--store", &dir.url(), "--lock", "steps", "--"])
                .args(["sh", "-c", "echo $ELECT_TOKEN"])
                .output()
                .unwrap();
            take(&out, &format!("killed at {call} #{when}"));
            let clean = elect_run(&dir.url(), "steps", &[], "echo $ELECT_TOKEN")
                .output()
                .unwrap();
            assert!(
                clean.status.success(),
                "after a kill at {call} #{when}: {}",
                String::from_utf8_lossy(&clean.stderr)
            );
            take(&clean, &format!("the run after a kill at {call} #{when}"));
            if out.status.success() {
                // Fewer calls than `when`: nothing was killed.
                break;
            }
            killed.push(format!("{call} #{when}"));
        }
    }
    // The steps that matter were among them: before and after the sync.
    for step in ["write #1", "fdatasync #1", "rename #1", "unlink #1"] {
        assert!(
            killed.iter().any(|k| k == step),
            "no kill at {step}: {killed:?}"
        );
    }
    assert!(seen.len() > killed.len(), "tokens seen: {seen:?}");
}

/// A full disk (a tmpfs of 64 KiB, in a mount namespace of the test's
/// own), with room for no page, one or two: every write elect makes there
/// (the token counter, the holder record, a checkpoint, the history)
/// either lands whole or fails, and a failed one leaves no half-written
/// file behind; a run that cannot take the lock says why in one line.
#[test]
fn a_full_disk_leaves_nothing_half_written() {
    let elect = support::elect().get_program().to_owned();
    for room in [0, 1, 2] {
        let dir = TempDir::new(&format!("file-full-{room}"));
        let store = dir.0.join("locks");
        std::fs::create_dir(&store).unwrap();
        let s = store.display();
        let e = elect.display();
        // The pages left free: fill the disk, then remove `room` pages.
        let script = format!(
            "mount -t tmpfs -o size=64k,mode=0700 none {s} || exit 99; \
             for i in 1 2; do head -c 4096 /dev/zero > {s}/room$i; done; \
             head -c 1048576 /dev/zero > {s}/fill 2>/dev/null; \
             for i in $(seq 1 {room}); do rm {s}/room$i; done; \
             {e} run --store file:{s} --lock full -- {e} checkpoint put x; \
             echo \"run $?\" >&2; \
             {e} run --store file:{s} --lock full -- true; echo \"again $?\" >&2; \
             ls -a {s} >&2"
        );
        let out = std::process::Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c", &script])
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr).into_owned();
        eprintln!("{room} pages free:\n{said}");
        assert_eq!(out.status.code(), Some(0), "{said}");
        let listed: Vec<&str> = said
            .lines()
            .skip_while(|l| !l.starts_with("again "))
            .skip(1)
            .collect();
        assert!(!listed.is_empty(), "{said}");
        for name in &listed {
            assert!(!name.ends_with(".tmp"), "{name} left behind:\n{said}");
        }
        // With no room at all, the run fails at its first write, in one line.
        if room == 0 {
            let first: Vec<&str> = said
                .lines()
                .take_while(|l| !l.starts_with("run "))
                .collect();
            assert_eq!(first.len(), 1, "{said}");
            assert!(first[0].contains("No space left on device"), "{said}");
        }
    }
}

/// `-v` shows the lifecycle, one line a step of it, without timings; the
/// benchmarks' step timings come only with ELECT_TIMELINE=1.
#[test]
fn verbose_shows_the_lifecycle_and_timings_only_when_asked() {
    let dir = TempDir::new("file-verbose");
    let said = |timeline: Option<&str>| {
        let mut c = elect_run(&dir.url(), "v", &["-v"], "true");
        if let Some(value) = timeline {
            c.env("ELECT_TIMELINE", value);
        }
        let out = c.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let lifecycle = said(None);
    assert!(lifecycle.contains("acquired lock v"), "{lifecycle}");
    assert!(!lifecycle.contains(" step +"), "{lifecycle}");
    assert!(!said(Some("0")).contains(" step +"));
    let timed = said(Some("1"));
    assert!(
        timed.contains(" step +") && timed.contains("acquired lock v"),
        "{timed}"
    );
}
