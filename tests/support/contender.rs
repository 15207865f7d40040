//! A contender: one `elect run` for the lock whose command is a register
//! writer, restarted by the supervisor when it exits, as systemd's
//! `Restart=always` would.
//!
//! elect is started as the leader of its own process group; its guard and
//! the command each lead one of their own. So "pause the process" (the
//! GC-pause case, or a VM that stops) is SIGSTOP to all three groups, and
//! "pause elect alone" is SIGSTOP to elect's pid, leaving the guard awake.
//!
//! Every contender's environment carries the register's path, which makes
//! everything it started findable in /proc: the orphan check and the
//! last-resort cleanup both look for that marker, so nothing survives a
//! test, not even after a panic.

use std::io::{BufRead, BufReader};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, ExitStatus, Stdio};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use super::elect;
use super::history::{History, What};
use super::register::{self, Register};

pub struct Contender {
    pub label: String,
    args: Vec<String>,
    script: String,
    register: String,
    history: Arc<History>,
    process: Option<Child>,
    /// elect's pid, which is also its process group.
    pub pid: i32,
}

impl Contender {
    /// `elect run --store STORE --lock LOCK EXTRA... -- sh -c WRITER`.
    pub fn spawn(
        label: &str,
        store: &str,
        lock: &str,
        extra: &[&str],
        interval: &str,
        register: &Register,
        history: &Arc<History>,
    ) -> Contender {
        let mut args: Vec<String> = ["run", "--store", store, "--lock", lock]
            .iter()
            .map(|s| s.to_string())
            .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut c = Contender {
            label: label.to_string(),
            args,
            script: register::writer(interval),
            register: register.path.to_string_lossy().into_owned(),
            history: history.clone(),
            process: None,
            pid: 0,
        };
        c.launch();
        c
    }

    fn launch(&mut self) {
        let mut command = elect();
        command
            .args(&self.args)
            .args(["--", "sh", "-c", &self.script])
            .env(register::ENV, &self.register)
            .env(register::LABEL_ENV, &self.label)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("spawn elect");
        self.pid = child.id() as i32;
        let stderr = child.stderr.take().unwrap();
        let (history, label) = (self.history.clone(), self.label.clone());
        thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                history.log(What::Said {
                    label: label.clone(),
                    line,
                });
            }
        });
        self.process = Some(child);
    }

    /// If elect has exited: how, in words (logged in the history).
    pub fn exited(&mut self) -> Option<String> {
        let status = self.process.as_mut()?.try_wait().unwrap()?;
        self.process = None;
        let status = describe(status);
        self.history.log(What::Exit {
            label: self.label.clone(),
            status: status.clone(),
        });
        Some(status)
    }

    pub fn running(&self) -> bool {
        self.process.is_some()
    }

    /// Start elect again after it exited.
    pub fn restart(&mut self) {
        assert!(self.process.is_none(), "{} is still running", self.label);
        self.launch();
    }

    /// Wait for elect to exit; kill it and panic after `within`.
    pub fn wait(&mut self, within: Duration) -> String {
        let give_up = Instant::now() + within;
        loop {
            if let Some(status) = self.exited() {
                return status;
            }
            if self.process.is_none() {
                return "already reaped".into();
            }
            if Instant::now() >= give_up {
                self.kill_all();
                panic!("{} elect still running after {within:?}", self.label);
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// The command elect is running (the writer's shell), if any.
    pub fn writer(&self) -> Option<i32> {
        self.process.as_ref()?;
        descendants(self.pid)
            .into_iter()
            .find(|&p| comm(p).as_deref() == Some("sh"))
    }

    /// kill(2) elect itself.
    pub fn signal(&self, sig: i32) {
        if self.process.is_some() {
            // SAFETY: plain kill(2) of our own child, not yet reaped.
            unsafe { libc::kill(self.pid, sig) };
        }
    }

    /// killpg(2) elect's group and its guard's: everything but the command.
    pub fn signal_group(&self, sig: i32) {
        if self.process.is_some() {
            // SAFETY: plain killpg(2) of the group our own child leads, and
            // of the groups its children (its guards) lead.
            unsafe { libc::killpg(self.pid, sig) };
            for guard in children(self.pid) {
                // SAFETY: as above.
                unsafe { libc::killpg(guard, sig) };
            }
        }
    }

    /// SIGKILL elect, its guard and its command's group.
    pub fn kill_all(&mut self) {
        if self.process.is_none() {
            return;
        }
        let below = descendants(self.pid);
        self.signal_group(libc::SIGKILL);
        for pid in below {
            // SAFETY: plain killpg(2)/kill(2); these are elect's descendants.
            unsafe {
                libc::killpg(pid, libc::SIGKILL);
                libc::kill(pid, libc::SIGKILL);
            }
        }
        if let Some(mut p) = self.process.take() {
            let _ = p.wait();
        }
    }
}

impl Drop for Contender {
    fn drop(&mut self) {
        self.kill_all();
    }
}

pub fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit {code}"),
        (None, Some(sig)) => format!("killed by {}", signal_name(sig)),
        _ => format!("{status}"),
    }
}

pub fn signal_name(sig: i32) -> String {
    match sig {
        libc::SIGKILL => "SIGKILL".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGSTOP => "SIGSTOP".into(),
        libc::SIGCONT => "SIGCONT".into(),
        n => format!("signal {n}"),
    }
}

/// The command name of a process.
pub fn comm(pid: i32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|c| c.trim().to_string())
}

/// The direct children of `pid`, of any of its threads: for elect, its
/// guards, each the leader of a process group of its own.
pub fn children(pid: i32) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .flat_map(|task| {
            std::fs::read_to_string(task.path().join("children"))
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|c| c.parse::<i32>().ok())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Every process below `pid`, children of any of its threads included.
pub fn descendants(pid: i32) -> Vec<i32> {
    let mut found = Vec::new();
    let mut frontier = vec![pid];
    while let Some(p) = frontier.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let children =
                std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            for child in children
                .split_whitespace()
                .filter_map(|c| c.parse::<i32>().ok())
            {
                found.push(child);
                frontier.push(child);
            }
        }
    }
    found
}

/// Processes (not zombies) whose environment contains `marker`.
pub fn marked(marker: &str) -> Vec<i32> {
    let needle = marker.as_bytes();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.windows(needle.len()).any(|w| w == needle))
                && super::alive(pid)
        })
        .collect()
}

/// Kills, on drop, every process carrying `marker` in its environment: the
/// last line of cleanup, after every other guard has had its turn.
pub struct Sweep(pub String);

impl Drop for Sweep {
    fn drop(&mut self) {
        for _round in 0..3 {
            let left = marked(&self.0);
            if left.is_empty() {
                return;
            }
            for pid in left {
                // SAFETY: plain kill(2) of a process this test started.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            thread::sleep(Duration::from_millis(20));
        }
    }
}
