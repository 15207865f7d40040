//! Processes: elect as a process, its output as lines, deaths watched
//! through pidfds, and the process tree read from /proc.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::thread;
use std::time::{Duration, Instant};

use super::clock::{SECOND, now_ns};

/// The name of elect's guard process (and of the command's process while it
/// waits for the lock), as /proc/PID/comm shows it.
pub const GUARD: &str = "lease-guard";

/// The name of the guard's sentinel, whose pid is the command's process group id.
pub const SENTINEL: &str = "lease-sentinel";

/// `elect` with a clean environment for the store settings.
pub fn elect() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_elect"));
    c.env_remove("ELECT_STORE").env_remove("ETCDCTL_ENDPOINTS");
    // The servers of the k8s: store's tests, each a context.
    match crate::stores::k8s::kubeconfig() {
        Some(path) => c.env("KUBECONFIG", path),
        None => c.env_remove("KUBECONFIG"),
    };
    c
}

/// `elect run --store URL --lock LOCK [extra...] -- sh -c SCRIPT`
pub fn elect_run(store: &str, lock: &str, extra: &[&str], script: &str) -> Command {
    let mut c = elect();
    c.args(["run", "--store", store, "--lock", lock])
        .args(extra)
        .args(["--", "sh", "-c", script]);
    c
}

/// How a run of elect ended, against what a table of cases expects: exit
/// `code`, and `says` in its output; a failure is one line on stderr and
/// never ran the command.
pub fn assert_outcome(what: &str, out: &std::process::Output, code: i32, says: &str) {
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    eprintln!(
        "{what}: exit {:?}: {}{}",
        out.status.code(),
        stdout.trim(),
        stderr.trim()
    );
    assert_eq!(out.status.code(), Some(code), "{what}: {stderr}");
    assert!(
        stdout.contains(says) || stderr.contains(says),
        "{what}: {stdout}{stderr} lacks {says:?}"
    );
    if code != 0 {
        assert!(stdout.is_empty(), "{what}: the command ran");
        assert_eq!(stderr.lines().count(), 1, "{what}: {stderr}");
    }
}

/// A running process whose stdout and stderr lines arrive on channels.
pub struct Running {
    pub child: Child,
    pub stdin: Option<ChildStdin>,
    stdout: Receiver<String>,
    stderr: Receiver<String>,
    pub stderr_seen: Vec<String>,
    pub started: Instant,
}

fn lines(reader: impl std::io::Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = channel();
    thread::spawn(move || {
        for line in BufReader::new(reader).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

impl Running {
    pub fn spawn(mut command: Command) -> Running {
        let started = Instant::now();
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        let stdout = lines(child.stdout.take().unwrap());
        let stderr = lines(child.stderr.take().unwrap());
        let stdin = child.stdin.take();
        Running {
            child,
            stdin,
            stdout,
            stderr,
            stderr_seen: Vec::new(),
            started,
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// The next stdout line starting with `prefix`, with the prefix removed.
    pub fn expect_line(&mut self, prefix: &str, within: Duration) -> String {
        let give_up = Instant::now() + within;
        loop {
            let left = give_up.saturating_duration_since(Instant::now());
            match self.stdout.recv_timeout(left) {
                Ok(line) => {
                    if let Some(rest) = line.strip_prefix(prefix) {
                        return rest.trim().to_string();
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    self.drain_stderr();
                    panic!(
                        "no line '{prefix}…' within {within:?}; stderr: {:?}",
                        self.stderr_seen
                    )
                }
                Err(RecvTimeoutError::Disconnected) => {
                    self.drain_stderr();
                    panic!(
                        "stdout closed before '{prefix}…'; stderr: {:?}",
                        self.stderr_seen
                    )
                }
            }
        }
    }

    /// The next stdout line within `within`; `None` on timeout or end of output.
    pub fn next_line(&mut self, within: Duration) -> Option<String> {
        self.stdout.recv_timeout(within).ok()
    }

    /// A stdout line if one is there now.
    pub fn try_line(&mut self) -> Option<String> {
        self.stdout.try_recv().ok()
    }

    /// Wait for a stderr line containing `text`.
    pub fn expect_stderr(&mut self, text: &str, within: Duration) -> String {
        let give_up = Instant::now() + within;
        loop {
            let left = give_up.saturating_duration_since(Instant::now());
            match self.stderr.recv_timeout(left) {
                Ok(line) => {
                    self.stderr_seen.push(line.clone());
                    if line.contains(text) {
                        return line;
                    }
                }
                Err(_) => panic!(
                    "no stderr line with '{text}' within {within:?}; saw {:?}",
                    self.stderr_seen
                ),
            }
        }
    }

    /// Every stderr line to its end (the process and whatever shared its
    /// stderr gone), at most `within`; all seen so far.
    pub fn stderr_to_end(&mut self, within: Duration) -> String {
        let give_up = Instant::now() + within;
        loop {
            let left = give_up.saturating_duration_since(Instant::now());
            match self.stderr.recv_timeout(left) {
                Ok(line) => self.stderr_seen.push(line),
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    panic!(
                        "stderr not closed within {within:?}; saw {:?}",
                        self.stderr_seen
                    )
                }
            }
        }
        self.stderr_seen.join("\n")
    }

    pub fn drain_stderr(&mut self) -> String {
        while let Ok(line) = self.stderr.try_recv() {
            self.stderr_seen.push(line);
        }
        self.stderr_seen.join("\n")
    }

    pub fn send_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: plain kill(2).
        assert_eq!(unsafe { libc::kill(self.pid(), sig) }, 0);
    }

    /// Wait for exit; panic (after killing it) if it takes longer than `within`.
    pub fn wait(&mut self, within: Duration) -> ExitStatus {
        let give_up = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                // Let the reader threads catch up with the last lines.
                thread::sleep(Duration::from_millis(20));
                self.drain_stderr();
                return status;
            }
            if Instant::now() >= give_up {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "still running after {within:?}; stderr: {}",
                    self.drain_stderr()
                );
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// The exit code if it has ended, without waiting.
    pub fn try_wait_code(&mut self) -> Option<i32> {
        let status = self.child.try_wait().unwrap()?;
        Some(status.code().unwrap_or(-1))
    }

    pub fn wait_code(&mut self, within: Duration) -> i32 {
        let status = self.wait(within);
        status.code().unwrap_or_else(|| {
            panic!(
                "killed by signal {:?}; stderr: {:?}",
                status.signal(),
                self.stderr_seen
            )
        })
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Watches a process that is not our child and records when it dies.
pub struct Death {
    rx: Receiver<i128>,
    pub pid: i32,
}

impl Death {
    pub fn watch(pid: i32) -> Death {
        // SAFETY: plain syscall; we own the returned descriptor.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        assert!(fd >= 0, "pidfd_open({pid}) failed: is it still alive?");
        // SAFETY: a new descriptor, ours alone.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        let (tx, rx) = channel();
        thread::spawn(move || {
            use std::os::fd::AsRawFd;
            let mut pfd = libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            loop {
                // SAFETY: one valid pollfd.
                let r = unsafe { libc::poll(&mut pfd, 1, -1) };
                if r > 0 {
                    break;
                }
            }
            let _ = tx.send(now_ns());
        });
        Death { rx, pid }
    }

    /// When it died (wall clock ns), if it did within `within`.
    pub fn within(&self, within: Duration) -> Option<i128> {
        self.rx.recv_timeout(within).ok()
    }

    /// When it died (wall clock ns), waiting up to `within`.
    pub fn at(&self, within: Duration) -> i128 {
        self.rx
            .recv_timeout(within)
            .unwrap_or_else(|_| panic!("process {} still alive after {within:?}", self.pid))
    }
}

/// Running or stopped, not a zombie and not gone.
pub fn alive(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the parenthesized command name.
    let state = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.trim_start().chars().next());
    !matches!(state, Some(Some('Z' | 'X')))
}

/// A child that says it holds the lock, then waits for a line on stdin.
pub const HOLD: &str = r#"echo "token $ELECT_TOKEN"; read _line; echo "end $(date +%s%N)""#;

/// Start a holder of `lock` on `store` and wait until its child runs.
pub fn hold(store: &str, lock: &str, extra: &[&str]) -> (Running, u64) {
    let mut holder = Running::spawn(elect_run(store, lock, extra, HOLD));
    let token = holder.expect_line("token", 10 * SECOND).parse().unwrap();
    (holder, token)
}

/// The pid of the process named `name` below `ancestor` (elect → guard → command).
pub fn find_child(ancestor: i32, name: &str) -> i32 {
    let give_up = Instant::now() + 5 * SECOND;
    loop {
        let mut frontier = vec![ancestor];
        while let Some(pid) = frontier.pop() {
            // Any thread may have forked it (elect starts its guard from one
            // of its own).
            let children: String = std::fs::read_dir(format!("/proc/{pid}/task"))
                .into_iter()
                .flatten()
                .flatten()
                .map(|task| {
                    std::fs::read_to_string(task.path().join("children")).unwrap_or_default()
                })
                .collect::<Vec<_>>()
                .join(" ");
            for child in children
                .split_whitespace()
                .filter_map(|c| c.parse::<i32>().ok())
            {
                let comm =
                    std::fs::read_to_string(format!("/proc/{child}/comm")).unwrap_or_default();
                if comm.trim() == name {
                    return child;
                }
                frontier.push(child);
            }
        }
        assert!(Instant::now() < give_up, "no {name} below {ancestor}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The process group of `pid`, if it exists (a command's is its sentinel's
/// pid, not its own).
pub fn pgid(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(2)?
        .parse()
        .ok()
}

/// The state letter of a process (R, S, T, Z, ...), if it exists.
pub fn state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Send `sig` to the process `pid`.
pub fn signal(pid: i32, sig: i32) {
    // SAFETY: plain kill(2).
    let r = unsafe { libc::kill(pid, sig) };
    assert_eq!(
        r,
        0,
        "signal {sig} to {pid}: {}",
        std::io::Error::last_os_error()
    );
}

/// SIGTERM to `pid`, and wait until it is gone (or a zombie) for at most
/// 30 s; SIGKILL then.
pub fn terminate(pid: i32) {
    signal(pid, libc::SIGTERM);
    let give_up = Instant::now() + 30 * SECOND;
    while alive(pid) && Instant::now() < give_up {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `sig` to `root`, then to each of its children.
pub fn signal_tree(root: i32, sig: i32) {
    signal(root, sig);
    let children =
        std::fs::read_to_string(format!("/proc/{root}/task/{root}/children")).unwrap_or_default();
    for child in children.split_whitespace().filter_map(|c| c.parse().ok()) {
        // One that ended meanwhile is no matter.
        // SAFETY: plain kill(2).
        unsafe { libc::kill(child, sig) };
    }
}
