//! The guard's work at a command's end, as the system calls show it: the
//! group's id is its sentinel's pid, so once the command is reaped one
//! kill(2) of the group says whether anything of it is left; `/proc` is
//! looked through only when something is. (That the lock passes only once
//! nothing of the group can run is checked on every store in
//! tests/suites/behaviour.rs.)

use crate::support;

use std::process::Command;

use support::TempDir;

/// Whether `line` of strace's output opens a `/proc/PID/stat` file.
fn reads_a_proc_stat(line: &str) -> bool {
    line.contains("openat(")
        && line.split("\"/proc/").skip(1).any(|rest| {
            rest.split_once("/stat\"")
                .is_some_and(|(pid, _)| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
        })
}

/// `elect run` under `strace -f`, tracing `calls`; what it printed, and
/// its trace.
fn traced(dir: &TempDir, calls: &str, command: &[&str]) -> (String, String) {
    let strace = support::tools::tool("ELECT_TEST_STRACE", "strace", "strace");
    let log = dir.join("strace.log");
    let out = Command::new(&strace)
        .env_remove("LD_LIBRARY_PATH")
        .args(["-f", "-qq", "-o"])
        .arg(&log)
        .args(["-e", &format!("trace={calls}")])
        .arg(env!("CARGO_BIN_EXE_elect"))
        .args(["run", "--store", &dir.url(), "--lock", "end", "--"])
        .args(command)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        std::fs::read_to_string(&log).unwrap(),
    )
}

/// A command that left nothing in its group: its end costs the guard no
/// look through /proc (a read of every process's stat file on the machine,
/// about a millisecond per hundred processes), only a kill(2) of the group
/// that fails with ESRCH.
#[test]
fn a_command_that_left_nothing_behind_ends_without_a_look_through_proc() {
    let dir = TempDir::new("guard-end-empty");
    let (_, trace) = traced(&dir, "openat,kill", &["true"]);
    let stats = trace.lines().filter(|l| reads_a_proc_stat(l)).count();
    assert_eq!(stats, 0, "/proc/PID/stat files read: {stats}\n{trace}");
    assert!(
        trace
            .lines()
            .any(|l| l.contains("kill(-") && l.contains("SIGKILL)") && l.contains("= -1 ESRCH")),
        "no kill of the group that found it empty:\n{trace}"
    );
}

/// A command that left a process in its group: the guard looks through
/// /proc for what of it can still run, and elect ends only once nothing
/// of it can.
#[test]
fn a_command_that_left_a_process_behind_has_its_group_looked_through() {
    let dir = TempDir::new("guard-end-left");
    let (printed, trace) = traced(&dir, "openat,kill", &["sh", "-c", "sleep 60 & echo $!"]);
    assert!(
        trace.lines().any(reads_a_proc_stat),
        "the group was not looked through:\n{trace}"
    );
    let left: i32 = printed.trim().parse().unwrap();
    let state = std::fs::read_to_string(format!("/proc/{left}/stat")).unwrap_or_default();
    let state = state.rsplit_once(") ").map_or("", |(_, rest)| &rest[..1]);
    assert!(
        matches!(state, "" | "Z" | "X"),
        "the process left behind ({left}) can still run: {state}"
    );
}
