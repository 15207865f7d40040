//! A real MariaDB (Debian's `mariadb-server`, `/usr/sbin/mariadbd`, or
//! ELECT_TEST_MARIADBD), each on a free loopback port and a Unix socket in
//! its own temp dir, for the MySQL store: its SQL and InnoDB's locking are
//! what is under test, so only the real server says whether they hold.
//!
//! mariadbd refuses to run as root: when the tests are root it runs as
//! the Debian user `mysql`, set as the process's user, in directories that
//! user owns. Every server has an account `elect` (password [`PASSWORD`]
//! over TCP; none, or [`ANY_PASSWORD`], over the socket) with every right on the database
//! `elect`, and an account `reader` (password [`READER_PASSWORD`]) that may
//! read and write there but create nothing. The data directory is made
//! once per test binary by `mariadb-install-db`, in a template each server
//! copies. A directory, with the server's log, is kept when a test panics.

use std::os::unix::fs::DirBuilderExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::support::clock;
use crate::support::tools::free_port;

/// The account `elect`'s password over TCP.
pub const PASSWORD: &str = "elect-secret";
/// A password the socket account takes as well as none: the behaviour
/// suite hands elect this one in ELECT_PASSWORD to see that the command
/// never gets it, and PostgreSQL's socket takes any.
pub const ANY_PASSWORD: &str = "hunter2";
/// The account `reader`'s password.
pub const READER_PASSWORD: &str = "reader-secret";

const READY_WITHIN: Duration = Duration::from_secs(60);
const ATTEMPTS: usize = 5;

fn mariadbd() -> PathBuf {
    let path = std::env::var_os("ELECT_TEST_MARIADBD")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/sbin/mariadbd"));
    assert!(
        path.is_file(),
        "{} not found: install Debian's mariadb-server package (apt-get install mariadb-server), \
         or set ELECT_TEST_MARIADBD",
        path.display()
    );
    path
}

fn client() -> PathBuf {
    let path = PathBuf::from("/usr/bin/mariadb");
    assert!(
        path.is_file(),
        "/usr/bin/mariadb not found: install Debian's mariadb-client package \
         (apt-get install mariadb-client)"
    );
    path
}

/// The uid and gid the server runs as: `mysql` when the tests run as root.
fn server_user() -> Option<(u32, u32)> {
    static USER: OnceLock<Option<(u32, u32)>> = OnceLock::new();
    *USER.get_or_init(|| {
        if !nix::unistd::geteuid().is_root() {
            return None;
        }
        let user = nix::unistd::User::from_name("mysql")
            .ok()
            .flatten()
            .unwrap_or_else(|| {
                panic!(
                    "the tests run as root and mariadbd refuses to, but there is no user `mysql` \
                     to run it as: install Debian's mariadb-server package"
                )
            });
        Some((user.uid.as_raw(), user.gid.as_raw()))
    })
}

fn give_to_server(path: &Path) {
    if let Some((uid, gid)) = server_user() {
        std::os::unix::fs::chown(path, Some(uid), Some(gid))
            .unwrap_or_else(|e| panic!("chown {}: {e}", path.display()));
    }
}

fn server_dir(kind: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("elect-test-{kind}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::DirBuilder::new().mode(0o700).create(&dir).unwrap();
    give_to_server(&dir);
    dir
}

fn as_server(program: &Path) -> Command {
    let mut c = Command::new(program);
    if let Some((uid, gid)) = server_user() {
        c.uid(uid).gid(gid);
    }
    c.env_remove("MYSQL_PWD")
        .env_remove("MYSQL_HOST")
        .env_remove("MYSQL_TCP_PORT")
        .env_remove("MYSQL_UNIX_PORT")
        .env("LC_ALL", "C")
        .stdin(Stdio::null());
    c
}

fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// Small and quick: a test server keeps little and need not survive a
/// power cut.
const SETTINGS: &[&str] = &[
    "--innodb-log-file-size=8M",
    "--innodb-buffer-pool-size=16M",
    "--innodb-flush-log-at-trx-commit=2",
    "--skip-name-resolve",
    "--max-connections=400",
    "--skip-log-bin",
    "--performance-schema=OFF",
    "--loose-innodb-use-native-aio=0",
];

/// The data directory with the accounts and the database, stopped,
/// copied by every [`MariaDb`]; removed when the test binary exits.
fn template() -> &'static Path {
    static TEMPLATE: OnceLock<PathBuf> = OnceLock::new();
    extern "C" fn remove_template() {
        if let Some(dir) = TEMPLATE.get() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
    TEMPLATE.get_or_init(|| {
        let dir = server_dir("mariadb-template");
        let data = dir.join("data");
        let out = as_server(Path::new("/usr/bin/mariadb-install-db"))
            .arg("--no-defaults")
            .arg("--auth-root-authentication-method=normal")
            .arg(format!("--datadir={}", data.display()))
            .args(["--skip-test-db", "--skip-name-resolve"])
            .args(SETTINGS)
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run mariadb-install-db ({e}): install Debian's mariadb-server package"
                )
            });
        assert!(
            out.status.success(),
            "mariadb-install-db: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut db = MariaDb {
            port: 0,
            dir: dir.clone(),
            process: None,
            env: Vec::new(),
            clock: None,
            args: Vec::new(),
            standby: None,
            crowd: Vec::new(),
        };
        db.start_on_free_port();
        db.try_sql_in(
            None,
            &format!(
                "CREATE DATABASE elect;
             CREATE USER 'elect'@'%' IDENTIFIED BY '{PASSWORD}';
             CREATE USER 'elect'@'localhost' IDENTIFIED VIA mysql_native_password USING '' \
               OR mysql_native_password USING PASSWORD('{ANY_PASSWORD}');
             GRANT ALL ON elect.* TO 'elect'@'%';
             GRANT ALL ON elect.* TO 'elect'@'localhost';
             CREATE USER 'reader'@'%' IDENTIFIED BY '{READER_PASSWORD}';
             GRANT SELECT, INSERT, UPDATE, DELETE ON elect.* TO 'reader'@'%';"
            ),
        )
        .unwrap_or_else(|e| panic!("the accounts: {e}"));
        db.stop();
        std::mem::forget(db);
        // SAFETY: registers a plain function to run at exit.
        unsafe { libc::atexit(remove_template) };
        dir
    })
}

/// A MariaDB server of its own, up on `127.0.0.1:port()` and the socket
/// `socket()`; killed and removed on drop.
pub struct MariaDb {
    port: u16,
    /// Holds `data/`, the socket and `mariadb.log`.
    dir: PathBuf,
    process: Option<Child>,
    /// The server's environment beyond the usual (faketime's).
    env: Vec<(String, String)>,
    /// The file faketime reads the server's clock offset from, if skewed.
    clock: Option<PathBuf>,
    /// Server options beyond [`SETTINGS`] (TLS's).
    args: Vec<String>,
    /// An asynchronous replica of this server ([`MariaDb::add_a_standby`]).
    standby: Option<Box<Standby>>,
    /// Clients that hold the last connections the server allows
    /// ([`MariaDb::reach_the_connection_limit`]).
    crowd: Vec<Child>,
}

/// An asynchronous replica, for a failover.
struct Standby {
    server: MariaDb,
    /// Its replication link to the primary, through a fault proxy.
    link: crate::support::proxy::Proxy,
    /// The address clients are given (a virtual IP's part), moved to the
    /// replica in a failover.
    address: crate::support::proxy::Proxy,
}

/// The replication account's name and password.
const REPLICATION: &str = "replication";

impl MariaDb {
    /// A server of the template's, on a free port.
    pub fn start() -> MariaDb {
        MariaDb::start_with(Vec::new())
    }

    pub fn start_with(env: Vec<(String, String)>) -> MariaDb {
        MariaDb::start_with_args(env, Vec::new())
    }

    /// A server of the template's with `args` beyond [`SETTINGS`] (a
    /// later one of the same option wins).
    pub fn start_with_args(env: Vec<(String, String)>, args: Vec<String>) -> MariaDb {
        let template = template();
        let dir = server_dir("mariadb");
        let out = Command::new("cp")
            .arg("-a")
            .arg(template.join("data"))
            .arg(&dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cp: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut db = MariaDb {
            port: 0,
            dir,
            process: None,
            env,
            clock: None,
            args,
            standby: None,
            crowd: Vec::new(),
        };
        db.start_on_free_port();
        db
    }

    /// A server whose wall clock is `offset` (faketime's form) away from
    /// the machine's, which [`Self::step_clock`] moves while it runs:
    /// libfaketime preloaded, reading its offset from a file on every look
    /// at the clock. Its monotonic clock is left alone.
    pub fn start_skewed(offset: &str) -> MariaDb {
        let (clock, env) = clock::skewed_clock("mariadb", offset);
        let mut db = MariaDb::start_with(env);
        db.clock = Some(clock);
        db
    }

    /// Step the wall clock of a [`Self::start_skewed`] server to `offset`;
    /// returns once the server's `UTC_TIMESTAMP(6)` shows it.
    pub fn step_clock(&self, offset: &str) {
        let clock = self.clock.as_ref().expect("a server of start_skewed");
        clock::step_clock(clock, offset, || self.clock_skew());
    }

    /// How far the server's `UTC_TIMESTAMP(6)` is from the machine's wall
    /// clock, in seconds.
    pub fn clock_skew(&self) -> f64 {
        let db: f64 = self.sql("SELECT UNIX_TIMESTAMP(NOW(6))").parse().unwrap();
        let here = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        db - here
    }

    fn log(&self) -> PathBuf {
        self.dir.join("mariadb.log")
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.join("mysqld.sock")
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn pid(&self) -> i32 {
        self.process.as_ref().expect("MariaDB is not running").id() as i32
    }

    fn start_on_free_port(&mut self) {
        for attempt in 1..=ATTEMPTS {
            self.port = free_port();
            match self.start_again_or() {
                Ok(()) => return,
                Err(e) if attempt == ATTEMPTS => panic!("MariaDB did not start: {e}"),
                Err(_) => {}
            }
        }
    }

    /// Start the stopped server on its data, port and socket.
    fn start_again_or(&mut self) -> Result<(), String> {
        let _ = std::fs::remove_file(self.socket());
        let mut c = as_server(&mariadbd());
        c.arg("--no-defaults")
            .arg(format!("--datadir={}", self.dir.join("data").display()))
            .arg(format!("--port={}", self.port))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--socket={}", self.socket().display()))
            .arg(format!(
                "--pid-file={}",
                self.dir.join("mariadb.pid").display()
            ))
            .arg(format!("--log-error={}", self.log().display()))
            .args(SETTINGS)
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = c
            .spawn()
            .map_err(|e| format!("cannot start mariadbd: {e}"))?;
        let give_up = Instant::now() + READY_WITHIN;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!(
                    "mariadbd exited ({status}):\n{}",
                    tail(&self.log())
                ));
            }
            if self.try_sql_in(None, "SELECT 1").as_deref() == Ok("1") {
                self.process = Some(child);
                return Ok(());
            }
            if Instant::now() >= give_up {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "not up within {READY_WITHIN:?}:\n{}",
                    tail(&self.log())
                ));
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Start the stopped server again; returns when it answers.
    pub fn start_again(&mut self) {
        if let Err(e) = self.start_again_or() {
            panic!("MariaDB did not start again: {e}");
        }
    }

    /// `sql` as root over the socket, in database `elect` once it exists:
    /// the rows tab-separated, or the client's complaint.
    pub fn try_sql(&self, sql: &str) -> Result<String, String> {
        self.try_sql_in(Some("elect"), sql)
    }

    /// [`Self::try_sql`] in database `db`, or none.
    fn try_sql_in(&self, db: Option<&str>, sql: &str) -> Result<String, String> {
        let mut c = Command::new(client());
        c.env_remove("MYSQL_PWD")
            .arg("--no-defaults")
            .arg(format!("--socket={}", self.socket().display()))
            .args(["-uroot", "-N", "-B", "--connect-timeout=5"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().map_err(|e| format!("cannot run mariadb: {e}"))?;
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().unwrap();
            let db = db.map_or(String::new(), |db| format!("USE {db};\n"));
            let _ = stdin.write_all(format!("{db}{sql}").as_bytes());
        }
        let out = child.wait_with_output().map_err(|e| e.to_string())?;
        match out.status.success() {
            true => Ok(String::from_utf8_lossy(&out.stdout).trim().to_string()),
            false => Err(String::from_utf8_lossy(&out.stderr).trim().to_string()),
        }
    }

    pub fn sql(&self, sql: &str) -> String {
        self.try_sql(sql)
            .unwrap_or_else(|e| panic!("mariadb {sql:?}: {e}"))
    }

    /// A clean shutdown (every session ended); returns when it is down.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.process.take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let _ = child.wait();
        }
    }

    /// A crash: SIGKILL, and InnoDB's recovery at the next start.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.process.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// `fast` (a clean shutdown) or `immediate` (a crash), then start.
    pub fn restart(&mut self, how: &str) {
        match how {
            "fast" => self.stop(),
            _ => self.kill(),
        }
        self.start_again();
    }

    /// Serve TLS with `certs`' server certificate. Account `elect` may
    /// still connect in the clear; account `certified` (password
    /// [`PASSWORD`]) only over TLS with a client certificate that `certs`'
    /// CA signed. Restarts the server.
    pub fn enable_tls(&mut self, certs: &crate::support::certs::Certs) {
        let mut args = Vec::new();
        for (from, to, option) in [
            (&certs.server_cert, "server.crt", "--ssl-cert"),
            (&certs.server_key, "server.key", "--ssl-key"),
            (&certs.ca, "ca.crt", "--ssl-ca"),
        ] {
            let path = self.dir.join(to);
            std::fs::copy(from, &path).unwrap();
            give_to_server(&path);
            args.push(format!("{option}={}", path.display()));
        }
        self.sql(&format!(
            "CREATE USER 'certified'@'%' IDENTIFIED BY '{PASSWORD}' REQUIRE X509; \
             GRANT ALL ON elect.* TO 'certified'@'%'"
        ));
        self.args = args;
        self.restart("fast");
    }

    /// Give this server an asynchronous replica (GTID replication, its
    /// link through a fault proxy) and an address for clients that a
    /// failover moves to the replica. Restarts this server with a binary
    /// log; call it before anything is written.
    pub fn add_a_standby(&mut self) {
        self.stop();
        self.args.extend(
            [
                "--log-bin=mariadb-bin",
                "--server-id=1",
                "--binlog-format=ROW",
            ]
            .map(String::from),
        );
        self.start_again();
        self.sql(&format!(
            "CREATE USER '{REPLICATION}'@'%' IDENTIFIED BY '{REPLICATION}'; \
             GRANT REPLICATION SLAVE ON *.* TO '{REPLICATION}'@'%'"
        ));
        let server = MariaDb::start_with_args(Vec::new(), vec!["--server-id=2".to_string()]);
        let here = format!("127.0.0.1:{}", self.port);
        let link = crate::support::proxy::Proxy::start(&here);
        server.sql(&format!(
            "CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = {}, \
             MASTER_USER = '{REPLICATION}', MASTER_PASSWORD = '{REPLICATION}', \
             MASTER_USE_GTID = slave_pos, MASTER_CONNECT_RETRY = 1; START SLAVE",
            link.port
        ));
        let address = crate::support::proxy::Proxy::start(&here);
        self.standby = Some(Box::new(Standby {
            server,
            link,
            address,
        }));
    }

    fn standby(&self) -> &Standby {
        self.standby.as_deref().expect("a standby: add_a_standby")
    }

    /// Once the replica has everything written so far, nothing more
    /// reaches it, as with an asynchronous replica that lags.
    pub fn lag_the_standby(&self) {
        let standby = self.standby();
        let written = self.sql("SELECT @@gtid_binlog_pos");
        let waited = standby
            .server
            .sql(&format!("SELECT MASTER_GTID_WAIT('{written}', 10)"));
        assert_eq!(
            waited,
            "0",
            "the replica never applied {written}:\n{}",
            tail(&standby.server.log())
        );
        standby.link.set(crate::support::proxy::Mode::Blackhole);
    }

    /// This server crashes (SIGKILL), its replica is made the primary
    /// (replication stopped and forgotten), and the clients' address moves
    /// to it; returns once it takes writes there.
    pub fn fail_over(&mut self) {
        self.kill();
        let standby = self.standby();
        standby.link.set(crate::support::proxy::Mode::Reset);
        standby.server.sql("STOP SLAVE; RESET SLAVE ALL");
        standby
            .address
            .retarget(&format!("127.0.0.1:{}", standby.server.port));
    }

    /// Make every commit wait for a semi-synchronous replica's
    /// acknowledgement, for an hour, with none connected: the server
    /// restarted with a binary log (which semi-sync needs).
    pub fn lose_the_semi_synchronous_replica(&mut self) {
        self.stop();
        self.args
            .extend(["--log-bin=mariadb-bin", "--server-id=1"].map(String::from));
        self.start_again();
        self.sql(
            "SET GLOBAL rpl_semi_sync_master_enabled = ON; \
             SET GLOBAL rpl_semi_sync_master_timeout = 3600000; \
             SET GLOBAL rpl_semi_sync_master_wait_no_slave = ON",
        );
    }

    /// Let account `elect` (over the socket) have one connection and
    /// hold it: every other is turned away with 1226, its
    /// `MAX_USER_CONNECTIONS` reached, as a DBA's limit does (the server's
    /// own `max_connections`, 1040, is told alike; MariaDB takes no fewer
    /// than 10, and root's looks would race for the last).
    pub fn reach_the_connection_limit(&mut self) {
        self.sql("ALTER USER 'elect'@'localhost' WITH MAX_USER_CONNECTIONS 1");
        let member = Command::new(client())
            .arg("--no-defaults")
            .arg(format!("--socket={}", self.socket().display()))
            .args(["-uelect", "-e", "SELECT SLEEP(3600)"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.crowd.push(member);
        let give_up = Instant::now() + READY_WITHIN;
        while self.sql("SELECT count(*) FROM information_schema.processlist WHERE user = 'elect'")
            != "1"
        {
            assert!(Instant::now() < give_up, "the connection was never held");
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// The limit back as it was, and the crowd gone.
    pub fn lift_the_connection_limit(&mut self) {
        self.sql("ALTER USER 'elect'@'localhost' WITH MAX_USER_CONNECTIONS 0");
        for mut member in self.crowd.drain(..) {
            let _ = member.kill();
            let _ = member.wait();
        }
    }

    /// The TCP URL of account `elect` at the clients' address, which
    /// reaches this server until a failover, its replica after.
    pub fn url_of_both(&self) -> String {
        format!(
            "mysql://elect:{PASSWORD}@127.0.0.1:{}/elect?ssl-mode=DISABLED",
            self.standby().address.port
        )
    }

    /// The socket URL of account `elect`, which needs no password there.
    pub fn socket_url(&self) -> String {
        format!(
            "mysql://elect@localhost/elect?socket={}",
            encode(&self.socket().display().to_string())
        )
    }
}

fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        for mut member in self.crowd.drain(..) {
            let _ = member.kill();
            let _ = member.wait();
        }
        self.kill();
        if let Some(clock) = &self.clock {
            let _ = std::fs::remove_file(clock);
        }
        if thread::panicking() {
            eprintln!("MariaDB's directory kept: {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
