//! Under a low open-file limit (a tight container, systemd's
//! `LimitNOFILE=`), elect runs or says why in one line and exits 71 at
//! once: never an abort, never the store's fault (69), never a wait for
//! `--connect-timeout`, and nothing left behind in the store.

use crate::support;

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use support::{Etcd, Running, SECOND, TempDir, elect, elect_run, hold, until};

/// The limit elect needs, with stdin, stdout and stderr open (README).
const NEEDED: u64 = 32;

/// `command` under an open-file limit of `soft` (hard `hard`), with only
/// stdin, stdout and stderr open, so that what the limit leaves elect is
/// the same wherever the tests run.
fn limited(command: &mut Command, soft: u64, hard: u64) -> &mut Command {
    // SAFETY: between fork and exec only setrlimit and close_range, system
    // calls that are async-signal-safe; their failure fails the spawn.
    unsafe {
        command.pre_exec(move || {
            let limit = libc::rlimit {
                rlim_cur: soft,
                rlim_max: hard,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // Whatever the tests inherited closes at the exec.
            let (first, last) = (3 as libc::c_uint, libc::c_uint::MAX);
            let flags = libc::CLOSE_RANGE_CLOEXEC as libc::c_uint;
            if libc::syscall(libc::SYS_close_range, first, last, flags) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// Run elect with `args` under the limit; its output and how long it took.
fn run_limited(args: &[&str], soft: u64, hard: u64) -> (Output, Duration) {
    let started = Instant::now();
    let out = limited(elect().args(args).stdin(Stdio::null()), soft, hard)
        .output()
        .unwrap();
    (out, started.elapsed())
}

/// A failure as the README promises it: exit 71 at once, one line that
/// names the limit and how to raise it, no abort. Else what was wrong.
fn too_low(out: &Output, took: Duration, limit: u64) -> Result<(), String> {
    let said = String::from_utf8_lossy(&out.stderr);
    let first = said.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let wrong = |why: String| Err(format!("{why}: {first}"));
    if let Some(sig) = out.status.signal() {
        return wrong(format!("killed by signal {sig}"));
    }
    if said.contains("panicked") {
        return wrong(format!("panicked, exit {:?}", out.status.code()));
    }
    if out.status.code() != Some(71) {
        return wrong(format!("exit {:?}, not 71", out.status.code()));
    }
    if said.lines().count() != 1 {
        return wrong(format!("{} lines, not one", said.lines().count()));
    }
    if !said.contains(&format!("the open-file limit (ulimit -n) of {limit} "))
        || !said.contains("raise it (ulimit -n, systemd LimitNOFILE=)")
    {
        return wrong("not the limit's line".into());
    }
    if !out.stdout.is_empty() {
        return wrong("the command ran".into());
    }
    if took >= 2 * SECOND {
        return wrong(format!("took {took:?}"));
    }
    Ok(())
}

fn assert_too_low(what: &str, out: &Output, took: Duration, limit: u64) {
    if let Err(wrong) = too_low(out, took, limit) {
        panic!("{what}: {wrong}");
    }
}

/// Nothing half-written in the store's directory.
fn assert_no_leftovers(dir: &TempDir) {
    let names: Vec<String> = std::fs::read_dir(&dir.0)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !names
            .iter()
            .any(|n| n.ends_with(".tmp") || n.ends_with(".new")),
        "{names:?}"
    );
}

/// The lock is free: a run that does not wait takes it at once.
fn assert_free(store: &str, lock: &str) {
    let started = Instant::now();
    let out = elect_run(store, lock, &["--wait", "0"], "echo ran")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ran\n");
    assert!(started.elapsed() < 2 * SECOND, "{:?}", started.elapsed());
}

#[test]
fn under_any_open_file_limit_a_run_works_or_exits_71_in_one_line() {
    let dir = TempDir::new("nofile-every-limit");
    let store = dir.url();
    // Every limit is tried, and every one that went wrong is told.
    let mut wrong = Vec::new();
    for n in 3..=40 {
        let args = ["run", "--store", &store, "--lock", "x", "--", "true"];
        let (out, took) = run_limited(&args, n, n);
        let said = String::from_utf8_lossy(&out.stderr);
        eprintln!(
            "ulimit -n {n}: {:?} in {took:?}: {}",
            out.status,
            said.trim()
        );
        let judged = match n < NEEDED {
            true => too_low(&out, took, n).and_then(|()| {
                match said.contains(&format!("it needs at least {NEEDED};")) {
                    true => Ok(()),
                    false => Err(format!("no need of {NEEDED} said: {said}")),
                }
            }),
            false if out.status.code() == Some(0) && said.is_empty() => Ok(()),
            false => Err(format!("{:?}: {said}", out.status)),
        };
        if let Err(why) = judged {
            wrong.push(format!("ulimit -n {n}: {why}"));
        }
        assert_no_leftovers(&dir);
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert_free(&store, "x");
    // Every other command alike.
    let commands: [&[&str]; 4] = [
        &["status", "--lock", "x"],
        &["list"],
        &["history", "--lock", "x"],
        &["break", "--lock", "x", "--yes"],
    ];
    for command in commands {
        let mut args = command.to_vec();
        args.extend(["--store", &store]);
        let (out, took) = run_limited(&args, 8, 8);
        assert_too_low(&format!("{command:?}"), &out, took, 8);
    }
}

#[test]
fn a_soft_limit_too_low_is_raised_and_the_command_gets_it_back() {
    let dir = TempDir::new("nofile-raised");
    let store = dir.url();
    // Also through the reaper, which starts a copy of elect.
    for extra in [&[][..], &["--subreaper"]] {
        let mut args = vec!["run", "--store", &store, "--lock", "x"];
        args.extend(extra);
        args.extend(["--", "sh", "-c", "ulimit -n; ulimit -Hn"]);
        let (out, took) = run_limited(&args, 8, 4096);
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{extra:?}: {said}");
        assert!(said.is_empty(), "{extra:?}: {said}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "8\n4096\n",
            "{extra:?}"
        );
        assert!(took < 2 * SECOND, "{extra:?}: took {took:?}");
    }
    // A hard limit too low for what is needed is said as such.
    let args = ["run", "--store", &store, "--lock", "x", "--", "true"];
    let (out, took) = run_limited(&args, 8, 20);
    assert_too_low("hard limit 20", &out, took, 8);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("(at most 20: ulimit -Hn)"), "{said}");
    assert_no_leftovers(&dir);
}

#[test]
fn descriptors_taken_from_a_waiting_run_end_it_with_71_at_once() {
    let dir = TempDir::new("nofile-waiter");
    let store = dir.url();
    let (mut holder, _) = hold(&store, "x", &[]);
    let mut waiter = Running::spawn(elect_run(&store, "x", &["--wait", "30s"], "echo ran"));
    until("the waiter queues", 10 * SECOND, || {
        let (_, out) = support::inspect::status(&store, "x", true);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["waiting"].as_u64() == Some(1)
    });
    // No descriptor more for it, as if its limit were lowered under it.
    let none = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: prlimit reads the struct given and writes none.
    let set = unsafe {
        libc::prlimit(
            waiter.pid(),
            libc::RLIMIT_NOFILE,
            &none,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(set, 0, "{}", std::io::Error::last_os_error());
    let released = Instant::now();
    holder.send_line("done");
    assert_eq!(holder.wait_code(10 * SECOND), 0);
    let code = waiter.wait_code(10 * SECOND);
    let took = released.elapsed();
    let said = waiter.drain_stderr();
    eprintln!("the waiter: exit {code} {took:?} after the release: {said}");
    assert_eq!(code, 71, "{said}");
    assert!(took < 2 * SECOND, "took {took:?}");
    assert_eq!(
        waiter.stderr_seen.len(),
        1,
        "one line: {:?}",
        waiter.stderr_seen
    );
    assert!(said.contains("ran out of descriptors"), "{said}");
    assert!(said.contains("LimitNOFILE="), "{said}");
    assert!(waiter.try_line().is_none(), "the command ran");
    assert_no_leftovers(&dir);
    assert_free(&store, "x");
}

#[test]
fn on_etcd_a_limit_too_low_is_71_at_once_never_69() {
    let etcd = Etcd::start();
    let store = etcd.url();
    for n in [3, 8, 9, 12, 16, 24, NEEDED - 1] {
        let args = ["run", "--store", &store, "--lock", "x", "--", "true"];
        let (out, took) = run_limited(&args, n, n);
        assert_too_low(&format!("etcd, ulimit -n {n}"), &out, took, n);
        let args = ["status", "--store", &store, "--lock", "x"];
        let (out, took) = run_limited(&args, n, n);
        assert_too_low(&format!("etcd status, ulimit -n {n}"), &out, took, n);
    }
    for n in [NEEDED, 40] {
        let args = ["run", "--store", &store, "--lock", "x", "--", "true"];
        let (out, _) = run_limited(&args, n, n);
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "etcd, ulimit -n {n}: {said}");
    }
    assert_free(&store, "x");
}
