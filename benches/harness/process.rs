//! The processes a benchmark starts. Each leads its own process group, so
//! that an `etcdctl lock` killed mid-run does not leave its command behind;
//! the group is killed when the handle is dropped (also while unwinding from
//! a panic), and every group still alive is killed if the harness itself is
//! interrupted.

use std::collections::BTreeSet;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::support::Running;

/// Process groups started and not yet killed, and other processes (etcd)
/// to kill if the harness is interrupted.
static GROUPS: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());
static OTHERS: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

fn register(pgid: i32) {
    GROUPS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(pgid);
}

fn kill_group(pgid: i32) {
    // SAFETY: plain kill(2) on a group we created.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
    GROUPS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&pgid);
}

/// Also kill `pid` if the harness is interrupted.
pub fn kill_on_interrupt(pid: i32) {
    OTHERS.lock().unwrap_or_else(|e| e.into_inner()).insert(pid);
}

/// On SIGINT, SIGTERM or SIGHUP: kill every group still registered, and the
/// registered processes, then exit as if killed by that signal.
pub fn clean_up_on_interrupt() {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
        .expect("cannot handle signals");
    std::thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            let groups: Vec<i32> = GROUPS
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .copied()
                .collect();
            for pgid in groups {
                kill_group(pgid);
            }
            for &pid in OTHERS.lock().unwrap_or_else(|e| e.into_inner()).iter() {
                // SAFETY: plain kill(2).
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            eprintln!("interrupted: killed every process the benchmarks started");
            std::process::exit(128 + sig);
        }
    });
}

fn own_group(command: &mut Command) -> &mut Command {
    command.process_group(0)
}

/// A quiet process (no output kept): spawned, waited for within a bound.
pub struct Quiet {
    child: Child,
    pidfd: OwnedFd,
    reaped: bool,
}

impl Quiet {
    pub fn spawn(command: Command) -> io::Result<Quiet> {
        Quiet::spawn_with_stderr(command, Stdio::null())
    }

    /// As [`Quiet::spawn`], its stderr to `stderr` (a file that says why
    /// it exited, if it does).
    pub fn spawn_with_stderr(mut command: Command, stderr: impl Into<Stdio>) -> io::Result<Quiet> {
        let child = own_group(&mut command)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()?;
        let pid = child.id() as i32;
        register(pid);
        // SAFETY: plain syscall; we own the returned descriptor.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            let e = io::Error::last_os_error();
            kill_group(pid);
            return Err(e);
        }
        // SAFETY: a new descriptor, ours alone.
        let pidfd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        Ok(Quiet {
            child,
            pidfd,
            reaped: false,
        })
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Wait for the exit, at most `within`; `None` if it is still running.
    /// Woken by the kernel at the exit (pidfd), so the time is exact.
    pub fn wait_within(&mut self, within: Duration) -> Option<ExitStatus> {
        let give_up = Instant::now() + within;
        loop {
            let left = give_up.saturating_duration_since(Instant::now());
            let mut pfd = libc::pollfd {
                fd: self.pidfd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = left.as_millis().min(i32::MAX as u128) as i32;
            // SAFETY: one valid pollfd.
            let r = unsafe { libc::poll(&mut pfd, 1, ms) };
            if r > 0 {
                let status = self.child.wait().ok()?;
                self.reaped = true;
                return Some(status);
            }
            if r == 0 || Instant::now() >= give_up {
                return None;
            }
        }
    }
}

impl Drop for Quiet {
    fn drop(&mut self) {
        kill_group(self.pid());
        if !self.reaped {
            let _ = self.child.wait();
        }
    }
}

/// A process whose stdout lines the benchmark reads (see [`Running`]).
pub struct Talking {
    pub running: Running,
    pgid: i32,
}

impl Talking {
    pub fn spawn(mut command: Command) -> Talking {
        own_group(&mut command);
        let running = Running::spawn(command);
        let pgid = running.pid();
        register(pgid);
        Talking { running, pgid }
    }

    pub fn pid(&self) -> i32 {
        self.pgid
    }

    /// The next stdout line starting with `prefix` (prefix removed), and when
    /// it arrived; `None` if none arrives within `within`.
    pub fn line(&mut self, prefix: &str, within: Duration) -> Option<(String, Instant)> {
        let give_up = Instant::now() + within;
        loop {
            let left = give_up.checked_duration_since(Instant::now())?;
            let line = self.running.next_line(left)?;
            let at = Instant::now();
            if let Some(rest) = line.strip_prefix(prefix) {
                return Some((rest.trim().to_string(), at));
            }
        }
    }

    /// SIGKILL this process only, not its group: a crash of the holder.
    pub fn crash(&self) {
        // SAFETY: plain kill(2).
        unsafe { libc::kill(self.pgid, libc::SIGKILL) };
    }

    pub fn stderr(&mut self) -> String {
        self.running.drain_stderr()
    }
}

impl Drop for Talking {
    fn drop(&mut self) {
        kill_group(self.pgid);
        // Running's own Drop reaps the process.
    }
}
