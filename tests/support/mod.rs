//! Test support: a real etcd started per test, elect as a process, a TCP
//! fault proxy, and process watching. No mocks.

#![allow(dead_code)]

pub mod certs;
pub mod cluster;
pub mod contender;
pub mod history;
pub mod nemesis;
pub mod proxy;
pub mod register;
pub mod ticker;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Nanoseconds since the epoch on the wall clock, as `date +%s%N` prints.
/// Every process in a test runs on this one machine, so these compare.
pub fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i128
}

pub fn ms(ns: i128) -> f64 {
    ns as f64 / 1e6
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| PathBuf::from(d).join(name))
        .find(|p| p.is_file())
}

fn tool(env: &str, name: &str, package: &str) -> PathBuf {
    if let Some(path) = std::env::var_os(env) {
        return PathBuf::from(path);
    }
    which(name).unwrap_or_else(|| {
        panic!(
            "`{name}` not found: install Debian's {package} package \
             (apt-get install {package}), or set {env} to its path"
        )
    })
}

/// A single-member etcd on free loopback ports, in its own temp dir, with
/// short heartbeat and election timeouts so that 1 s leases are allowed.
pub struct Etcd {
    process: Child,
    pub endpoint: String,
    dir: PathBuf,
    tls: Option<certs::Certs>,
    /// `root:PASSWORD` once authentication is enabled.
    root: Option<String>,
}

/// How to start a test etcd beyond the defaults.
#[derive(Default)]
pub struct EtcdOptions {
    /// Serve clients over TLS with these certificates, and require client certificates.
    pub tls: Option<certs::Certs>,
    /// More flags for etcd.
    pub args: Vec<String>,
}

impl Etcd {
    pub fn start() -> Etcd {
        Etcd::start_with(EtcdOptions::default())
    }

    pub fn start_with(options: EtcdOptions) -> Etcd {
        let etcd = tool("ELECT_TEST_ETCD", "etcd", "etcd-server");
        let scheme = if options.tls.is_some() {
            "https"
        } else {
            "http"
        };
        for _attempt in 0..5 {
            let (client, peer) = (free_port(), free_port());
            let dir = std::env::temp_dir()
                .join(format!("elect-test-etcd-{}-{client}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            let endpoint = format!("127.0.0.1:{client}");
            let peer_url = format!("http://127.0.0.1:{peer}");
            let log = std::fs::File::create(dir.join("etcd.log")).unwrap();
            let mut command = Command::new(&etcd);
            if let Some(tls) = &options.tls {
                command
                    .arg("--cert-file")
                    .arg(&tls.server_cert)
                    .arg("--key-file")
                    .arg(&tls.server_key)
                    .arg("--trusted-ca-file")
                    .arg(&tls.ca)
                    .arg("--client-cert-auth");
            }
            let process = command
                .args(&options.args)
                .args(["--name", "n1", "--data-dir"])
                .arg(dir.join("data"))
                .args(["--listen-client-urls", &format!("{scheme}://{endpoint}")])
                .args(["--advertise-client-urls", &format!("{scheme}://{endpoint}")])
                .args(["--listen-peer-urls", &peer_url])
                .args(["--initial-advertise-peer-urls", &peer_url])
                .args(["--initial-cluster", &format!("n1={peer_url}")])
                .args(["--heartbeat-interval", "10", "--election-timeout", "100"])
                .args(["--logger", "zap", "--log-level", "error"])
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {}: {e}", etcd.display()));
            let mut etcd = Etcd {
                process,
                endpoint,
                dir,
                tls: options.tls.clone(),
                root: None,
            };
            if etcd.wait_healthy() {
                return etcd;
            }
        }
        panic!(
            "etcd did not become healthy; see its log in {}",
            std::env::temp_dir().display()
        );
    }

    fn wait_healthy(&mut self) -> bool {
        let give_up = Instant::now() + Duration::from_secs(20);
        while Instant::now() < give_up {
            if let Ok(Some(_)) = self.process.try_wait() {
                return false; // e.g. a port taken meanwhile: try others
            }
            let ok = self.etcdctl(&["endpoint", "health"]).status.success();
            if ok {
                return true;
            }
            thread::sleep(Duration::from_millis(50));
        }
        false
    }

    pub fn pid(&self) -> i32 {
        self.process.id() as i32
    }

    pub fn url(&self) -> String {
        match self.tls {
            Some(_) => format!("etcds://{}", self.endpoint),
            None => format!("etcd://{}", self.endpoint),
        }
    }

    pub fn etcdctl_command(&self) -> Command {
        let mut c = Command::new(tool("ELECT_TEST_ETCDCTL", "etcdctl", "etcd-client"));
        c.env("ETCDCTL_API", "3")
            .args(["--endpoints", &self.endpoint, "--dial-timeout", "2s"]);
        if let Some(tls) = &self.tls {
            c.arg("--cacert")
                .arg(&tls.ca)
                .arg("--cert")
                .arg(&tls.client_cert)
                .arg("--key")
                .arg(&tls.client_key);
        }
        if let Some(root) = &self.root {
            c.args(["--user", root]);
        }
        c
    }

    /// Turn authentication on: a root user, and `user` with `password`
    /// allowed to read and write keys under `prefix` only.
    pub fn enable_auth(&mut self, user: &str, password: &str, prefix: &str) {
        let ok = |args: &[&str]| {
            let out = self.etcdctl(args);
            assert!(
                out.status.success(),
                "etcdctl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        ok(&["user", "add", "root:root-pw", "--interactive=false"]);
        ok(&["role", "add", "locks"]);
        ok(&[
            "role",
            "grant-permission",
            "locks",
            "--prefix=true",
            "readwrite",
            prefix,
        ]);
        ok(&[
            "user",
            "add",
            &format!("{user}:{password}"),
            "--interactive=false",
        ]);
        ok(&["user", "grant-role", user, "locks"]);
        ok(&["auth", "enable"]);
        self.root = Some("root:root-pw".into());
    }

    pub fn etcdctl(&self, args: &[&str]) -> Output {
        self.etcdctl_command().args(args).output().unwrap()
    }

    /// Keys under `prefix`, in create order.
    pub fn keys(&self, prefix: &str) -> Vec<String> {
        let out = self.etcdctl(&["get", "--prefix", "--keys-only", "--sort-by=CREATE", prefix]);
        assert!(
            out.status.success(),
            "etcdctl get: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect()
    }

    /// Poll until `prefix` has `n` keys: etcd has no "tell me when", short of a watch.
    pub fn wait_keys(&self, prefix: &str, n: usize) {
        let give_up = Instant::now() + Duration::from_secs(10);
        loop {
            let keys = self.keys(prefix);
            if keys.len() == n {
                return;
            }
            assert!(
                Instant::now() < give_up,
                "expected {n} keys under {prefix}, found {keys:?}"
            );
            thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `elect` with a clean environment for the store settings.
pub fn elect() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_elect"));
    c.env_remove("ELECT_STORE").env_remove("ETCDCTL_ENDPOINTS");
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

pub const SECOND: Duration = Duration::from_secs(1);

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
            let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
                .unwrap_or_default();
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

/// A private directory (mode 0700) removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        use std::os::unix::fs::DirBuilderExt;
        let path = std::env::temp_dir().join(format!("elect-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .unwrap();
        TempDir(path)
    }

    /// The store URL for this directory.
    pub fn url(&self) -> String {
        format!("file:{}", self.0.display())
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

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
        let master = unsafe { std::fs::File::from_raw_fd(master) };
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
        let mut t: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: tcgetattr fills a termios struct.
        assert_eq!(
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

/// The state letter of a process (R, S, T, Z, ...), if it exists.
pub fn state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}
