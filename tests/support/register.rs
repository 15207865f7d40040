//! A fenced register: the resource the lock protects, as the README asks
//! resources to behave. It takes write(token, value), accepts it if the
//! token is at least the highest it has accepted (one holder writes many
//! times with one token), rejects it otherwise, and logs every request.
//!
//! The children that elect runs are shell loops (`WRITER`), and Debian's sh
//! (dash) cannot open sockets; so the register listens on a FIFO. Each
//! request is one `printf` of one short line, and writes to a pipe below
//! PIPE_BUF are atomic, so lines from concurrent writers never interleave.
//! The register keeps the FIFO open for writing itself, so it never sees
//! end-of-file between writers and a writer's open never blocks.
//!
//! A request line is `write LABEL TOKEN PID SEQ START_NS`; the first line of
//! each child (SEQ 0) carries the child's start time and counts as the
//! grant. On a grant the register opens a pidfd on the child to learn when
//! it dies, and notes which older children are still alive at that moment.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use super::history::{History, What};
use super::{TempDir, now_ns};

/// The environment variable that tells a writer where the register is.
pub const ENV: &str = "ELECT_TEST_REGISTER";
/// The environment variable with the writer's name in the history.
pub const LABEL_ENV: &str = "ELECT_TEST_WRITER";

/// The child elect runs: write to the register with `ELECT_TOKEN` every
/// `interval` (a `sleep` argument), forever. The sleep comes after the
/// write, so a writer stopped and continued in its sleep writes first thing.
pub fn writer(interval: &str) -> String {
    format!(
        r#"seq=0
now=$(date +%s%N)
while :; do
  printf 'write %s %s %s %s %s\n' "${LABEL_ENV}" "$ELECT_TOKEN" $$ $seq $now >"${ENV}"
  seq=$((seq + 1)); now=-
  sleep {interval}
done"#
    )
}

/// A child of the lock that the register has seen.
struct Child {
    token: u64,
    pidfd: Option<Arc<OwnedFd>>,
}

struct State {
    highest: Option<u64>,
    children: HashMap<i32, Child>,
}

pub struct Register {
    pub path: PathBuf,
    history: Arc<History>,
    state: Arc<Mutex<State>>,
    quit: File,
    reader: Option<thread::JoinHandle<()>>,
    _dir: TempDir,
}

impl Register {
    pub fn start(history: Arc<History>) -> Register {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = TempDir::new(&format!(
            "register-{}",
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let path = dir.join("register");
        let c_path = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo with a valid C string.
        let r = unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) };
        assert_eq!(r, 0, "mkfifo: {}", std::io::Error::last_os_error());
        // Read and write: never EOF, never a blocked open on either side.
        let fifo = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let quit = fifo.try_clone().unwrap();
        let state = Arc::new(Mutex::new(State {
            highest: None,
            children: HashMap::new(),
        }));
        let reader = {
            let (history, state) = (history.clone(), state.clone());
            thread::spawn(move || serve(fifo, &history, &state))
        };
        Register {
            path,
            history,
            state,
            quit,
            reader: Some(reader),
            _dir: dir,
        }
    }

    /// Whether the register has seen this child's first line.
    pub fn knows(&self, pid: i32) -> bool {
        self.state.lock().unwrap().children.contains_key(&pid)
    }

    /// The children seen so far that are still alive, with their tokens.
    pub fn alive(&self) -> Vec<(i32, u64)> {
        let state = self.state.lock().unwrap();
        state
            .children
            .iter()
            .filter(|(_, c)| c.pidfd.as_ref().is_some_and(|fd| !exited(fd)))
            .map(|(&pid, c)| (pid, c.token))
            .collect()
    }

    /// Every child the register has seen.
    pub fn children(&self) -> Vec<i32> {
        self.state
            .lock()
            .unwrap()
            .children
            .keys()
            .copied()
            .collect()
    }

    pub fn highest(&self) -> Option<u64> {
        self.state.lock().unwrap().highest
    }

    /// Poll the history until `found` matches a write that arrived after
    /// `since`; panic after `within`.
    pub fn wait_write(
        &self,
        since: i128,
        within: Duration,
        what: &str,
        found: impl Fn(&What) -> bool,
    ) -> What {
        let what = format!("the register's {what}");
        super::eventually(&what, within, || {
            self.history
                .events()
                .into_iter()
                .find(|e| e.at > since && matches!(e.what, What::Write { .. }) && found(&e.what))
                .map(|e| e.what)
                .ok_or_else(|| "no such write".to_string())
        })
    }
}

fn serve(fifo: File, history: &Arc<History>, state: &Mutex<State>) {
    for line in BufReader::new(fifo).lines() {
        let Ok(line) = line else { break };
        let at = now_ns();
        let fields: Vec<&str> = line.split_whitespace().collect();
        let parsed = match fields.as_slice() {
            ["quit"] => break,
            ["write", label, token, pid, seq, start] => (|| {
                Some((
                    label.to_string(),
                    token.parse::<u64>().ok()?,
                    pid.parse::<i32>().ok()?,
                    seq.parse::<u64>().ok()?,
                    start.parse::<i128>().ok(),
                ))
            })(),
            _ => None,
        };
        let Some((label, token, pid, seq, start)) = parsed else {
            history.note(format!("register: malformed request {line:?}"));
            continue;
        };
        let mut st = state.lock().unwrap();
        if seq == 0 {
            let older_alive = st
                .children
                .iter()
                .filter(|(_, c)| c.token < token && c.pidfd.as_ref().is_some_and(|fd| !exited(fd)))
                .map(|(&p, _)| p)
                .collect();
            history.log_at(
                start.unwrap_or(at),
                What::Grant {
                    label: label.clone(),
                    token,
                    pid,
                    older_alive,
                },
            );
            let pidfd = watch_death(pid, history, at);
            st.children.insert(pid, Child { token, pidfd });
        }
        let highest = st.highest.unwrap_or(0);
        let accepted = st.highest.is_none_or(|h| token >= h);
        if accepted {
            st.highest = Some(highest.max(token));
        }
        history.log_at(
            at,
            What::Write {
                label,
                token,
                pid,
                seq,
                accepted,
                highest,
            },
        );
    }
}

/// Whether the process behind a pidfd has exited (zombies included).
fn exited(pidfd: &OwnedFd) -> bool {
    let mut pfd = libc::pollfd {
        fd: pidfd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no waiting.
    unsafe { libc::poll(&mut pfd, 1, 0) > 0 }
}

/// Watch `pid` die on a thread of its own; log the death. If it is gone
/// already, log that it died by `seen` at the latest.
fn watch_death(pid: i32, history: &Arc<History>, seen: i128) -> Option<Arc<OwnedFd>> {
    // SAFETY: plain syscall; we own the returned descriptor.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        history.log_at(seen, What::Death { pid, exact: false });
        return None;
    }
    // SAFETY: a new descriptor, ours alone.
    let fd = Arc::new(unsafe { OwnedFd::from_raw_fd(fd as i32) });
    let watched = fd.clone();
    let history = history.clone();
    thread::spawn(move || {
        let mut pfd = libc::pollfd {
            fd: watched.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        while unsafe { libc::poll(&mut pfd, 1, -1) } <= 0 {}
        history.log(What::Death { pid, exact: true });
    });
    Some(fd)
}

impl Drop for Register {
    fn drop(&mut self) {
        // Nothing a test started may outlive it: kill every writer's group.
        for (pid, child) in self.state.lock().unwrap().children.iter() {
            if child.pidfd.as_ref().is_some_and(|fd| !exited(fd)) {
                // SAFETY: plain kill(2) of a group we know is a writer's.
                unsafe { libc::killpg(*pid, libc::SIGKILL) };
            }
        }
        let _ = self.quit.write_all(b"quit\n");
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}
