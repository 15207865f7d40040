//! Running elect under a low open-file limit (a tight container,
//! systemd's `LimitNOFILE=`), and what it must then do: exit 71 at once in
//! one line that names the limit.

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::{SECOND, elect};

/// The limit elect needs, with stdin, stdout and stderr open (README).
pub const NEEDED: u64 = 32;

/// `command` under an open-file limit of `soft` (hard `hard`), with only
/// stdin, stdout and stderr open, so that what the limit leaves elect is
/// the same wherever the tests run.
pub fn limited(command: &mut Command, soft: u64, hard: u64) -> &mut Command {
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
pub fn run_limited(args: &[&str], soft: u64, hard: u64) -> (Output, Duration) {
    let started = Instant::now();
    let out = limited(elect().args(args).stdin(Stdio::null()), soft, hard)
        .output()
        .unwrap();
    (out, started.elapsed())
}

/// A failure as the README promises it: exit 71 at once, one line that
/// names the limit and how to raise it, no abort. Else what was wrong.
pub fn too_low(out: &Output, took: Duration, limit: u64) -> Result<(), String> {
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

pub fn assert_too_low(what: &str, out: &Output, took: Duration, limit: u64) {
    if let Err(wrong) = too_low(out, took, limit) {
        panic!("{what}: {wrong}");
    }
}
