//! Terminals: a process on a pseudo-terminal that the test plays.

use std::io::Write;
use std::os::fd::FromRawFd;
use std::process::{Child, Command, ExitStatus};
use std::sync::mpsc::{Receiver, channel};
use std::thread;
use std::time::{Duration, Instant};

/// A process on a new pseudo-terminal, as if started from an interactive
/// shell: it leads a session whose controlling terminal is the pty, and its
/// group has the foreground. The test plays the terminal through the master.
pub struct Pty {
    pub master: std::fs::File,
    pub child: Child,
    output: Receiver<u8>,
    /// Everything read from the terminal so far.
    pub seen: String,
}

impl Pty {
    pub fn spawn(mut command: Command) -> Pty {
        use std::os::unix::process::CommandExt;
        let (mut master, mut slave) = (-1, -1);
        let size = libc::winsize {
            ws_row: 24,
            ws_col: 200,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: openpty fills two descriptors that we then own.
        let r = unsafe {
            libc::openpty(
                &mut master,
                &mut slave,
                std::ptr::null_mut(),
                std::ptr::null(),
                &size,
            )
        };
        assert_eq!(r, 0, "openpty: {}", std::io::Error::last_os_error());
        // SAFETY: openpty gave us both, open and owned by nothing else.
        let master = unsafe { std::fs::File::from_raw_fd(master) };
        // SAFETY: as above.
        let slave = unsafe { std::fs::File::from_raw_fd(slave) };
        command
            .stdin(slave.try_clone().unwrap())
            .stdout(slave.try_clone().unwrap())
            .stderr(slave.try_clone().unwrap());
        // SAFETY: setsid and ioctl are async-signal-safe.
        unsafe {
            command.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn().expect("spawn on the pty");
        drop(slave);
        let mut reader = master.try_clone().unwrap();
        let (tx, rx) = channel();
        thread::spawn(move || {
            use std::io::Read;
            let mut buf = [0u8; 1024];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 || buf[..n].iter().any(|b| tx.send(*b).is_err()) {
                    break;
                }
            }
        });
        Pty {
            master,
            child,
            output: rx,
            seen: String::new(),
        }
    }

    /// Type `bytes` on the terminal.
    pub fn type_in(&mut self, bytes: &[u8]) {
        self.master.write_all(bytes).unwrap();
        self.master.flush().unwrap();
    }

    /// Wait until the terminal has shown `text`; return what followed it.
    pub fn expect(&mut self, text: &str, within: Duration) -> String {
        let give_up = Instant::now() + within;
        loop {
            if let Some(at) = self.seen.find(text) {
                return self.seen[at + text.len()..].to_string();
            }
            let left = give_up.saturating_duration_since(Instant::now());
            match self.output.recv_timeout(left) {
                Ok(b) => self.seen.push(b as char),
                Err(_) => panic!(
                    "the terminal never showed {text:?}; it showed {:?}",
                    self.seen
                ),
            }
        }
    }

    /// Wait for a whole line that starts with `prefix`; return the rest of it.
    pub fn expect_line(&mut self, prefix: &str, within: Duration) -> String {
        let give_up = Instant::now() + within;
        loop {
            let found = self.seen.split('\n').rev().skip(1).find_map(|line| {
                let line = line.trim_end_matches('\r');
                line.find(prefix)
                    .map(|at| line[at + prefix.len()..].to_string())
            });
            if let Some(rest) = found {
                return rest;
            }
            let left = give_up.saturating_duration_since(Instant::now());
            match self.output.recv_timeout(left) {
                Ok(b) => self.seen.push(b as char),
                Err(_) => panic!(
                    "the terminal never showed a line with {prefix:?}; it showed {:?}",
                    self.seen
                ),
            }
        }
    }

    /// The process group that has the terminal's foreground.
    pub fn foreground(&self) -> i32 {
        use std::os::fd::AsRawFd;
        // SAFETY: TIOCGPGRP on the master reports the slave's foreground group.
        unsafe { libc::tcgetpgrp(self.master.as_raw_fd()) }
    }

    /// The terminal's local modes (ICANON, ECHO, ...).
    pub fn local_modes(&self) -> libc::tcflag_t {
        use std::os::fd::AsRawFd;
        // SAFETY: termios is plain integers; all zeroes is a valid value.
        let mut t: libc::termios = unsafe { std::mem::zeroed() };
        assert_eq!(
            // SAFETY: tcgetattr fills the termios struct it is given.
            unsafe { libc::tcgetattr(self.master.as_raw_fd(), &mut t) },
            0
        );
        t.c_lflag
    }

    pub fn wait(&mut self, within: Duration) -> ExitStatus {
        let give_up = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < give_up,
                "still running after {within:?}; the terminal showed {:?}",
                self.seen
            );
            thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Pty {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
