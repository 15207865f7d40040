//! Under a low open-file limit (a tight container, systemd's
//! `LimitNOFILE=`), elect runs or says why in one line and exits 71 at
//! once: never an abort, never the store's fault (69), never a wait for
//! `--connect-timeout`, and nothing left behind in the store. On every
//! store, in `tests/suites/every_fault.rs`; here, on `file:`, every limit from 3
//! to 40 and every subcommand, and a soft limit raised for elect and
//! given back to the command.

use crate::support;

use std::process::Stdio;
use std::time::Instant;

use support::limits::{NEEDED, assert_too_low, run_limited, too_low};
use support::{SECOND, TempDir, elect_run};

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
