//! A real PostgreSQL, and a real PgBouncer in front of it, each on a free
//! loopback port in its own temp dir, for the PostgreSQL store: its SQL,
//! its transactions and its sessions are what is under test, so only the
//! real server says whether they hold. A server restart (`fast`: every
//! session ended; `immediate`: a crash, and recovery) is a fault the store
//! must live through, and a bouncer pooling by transaction keeps no session
//! state between transactions (PgBouncer 1.18, Debian bookworm's, does not
//! even keep prepared statements).
//!
//! The server is PostgreSQL's own programs from Debian's postgresql package
//! (`/usr/lib/postgresql/VERSION/bin`, off the PATH; ELECT_TEST_PG_BINDIR
//! names another directory), and /usr/sbin/pgbouncer (or ELECT_TEST_PGBOUNCER).
//! initdb, postgres and pgbouncer refuse to run as root: when the tests are
//! root they run as the Debian user `postgres`, set as the process's user
//! (not through `runuser`, so that the child the tests hold, and kill, is
//! the server itself), in directories that user owns.
//!
//! Every server has a role `elect` (password [`PASSWORD`]) owning a
//! database `elect`, and a role `reader` (password [`READER_PASSWORD`]) that
//! may connect to it and owns nothing, so cannot create a schema or a table.
//! Over TCP a password is required (scram-sha-256); over the unix socket
//! anyone is trusted, which is how [`Postgres::psql`] looks in as the
//! superuser `postgres`, and how PgBouncer reaches the server.
//!
//! initdb and the roles are made once per test binary, in a template that
//! each server copies (0.1 s instead of 1 s). A directory, with the
//! server's log, is kept when a test panics.

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::support::clock;
use crate::support::tools::{free_port, which};

/// The role `elect`'s password.
pub const PASSWORD: &str = "elect-secret";
/// The role `reader`'s password.
pub const READER_PASSWORD: &str = "reader-secret";

/// How long a server may take to start (crash recovery included) or stop.
const READY_WITHIN: Duration = Duration::from_secs(30);
/// Starts on other ports when one is taken meanwhile.
const ATTEMPTS: usize = 5;

/// The directory of PostgreSQL's server programs: ELECT_TEST_PG_BINDIR,
/// else Debian's newest `/usr/lib/postgresql/VERSION/bin`, else initdb's
/// directory on the PATH.
fn bindir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        if let Some(dir) = std::env::var_os("ELECT_TEST_PG_BINDIR") {
            return PathBuf::from(dir);
        }
        let mut debian: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let version = e.file_name().to_str()?.parse().ok()?;
                let bin = e.path().join("bin");
                bin.join("initdb").is_file().then_some((version, bin))
            })
            .collect();
        debian.sort();
        if let Some((_, bin)) = debian.pop() {
            return bin;
        }
        match which("initdb") {
            Some(initdb) => initdb.parent().unwrap().to_path_buf(),
            None => panic!(
                "PostgreSQL's server programs (initdb, pg_ctl, postgres) not found: \
                 install Debian's postgresql package (apt-get install postgresql), \
                 or set ELECT_TEST_PG_BINDIR to their directory"
            ),
        }
    })
}

/// PostgreSQL's program `name`, from [`bindir`].
fn pg_bin(name: &str) -> PathBuf {
    let path = bindir().join(name);
    assert!(
        path.is_file(),
        "{} not found: install Debian's postgresql package (apt-get install postgresql)",
        path.display()
    );
    path
}

fn pgbouncer_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("ELECT_TEST_PGBOUNCER") {
        return PathBuf::from(path);
    }
    // In /usr/sbin, which a user's PATH may lack.
    let sbin = PathBuf::from("/usr/sbin/pgbouncer");
    which("pgbouncer")
        .or_else(|| sbin.is_file().then_some(sbin))
        .unwrap_or_else(|| {
            panic!(
                "`pgbouncer` not found: install Debian's pgbouncer package \
                 (apt-get install pgbouncer), or set ELECT_TEST_PGBOUNCER to its path"
            )
        })
}

/// The uid and gid the servers run as: the user `postgres` when the tests
/// run as root, None (the tests' own user) otherwise.
fn server_user() -> Option<(u32, u32)> {
    static USER: OnceLock<Option<(u32, u32)>> = OnceLock::new();
    *USER.get_or_init(|| {
        if !nix::unistd::geteuid().is_root() {
            return None;
        }
        let user = nix::unistd::User::from_name("postgres")
            .ok()
            .flatten()
            .unwrap_or_else(|| {
                panic!(
                    "the tests run as root and PostgreSQL refuses to, but there is no user \
                     `postgres` to run it as: install Debian's postgresql package \
                     (apt-get install postgresql), which makes one"
                )
            });
        Some((user.uid.as_raw(), user.gid.as_raw()))
    })
}

/// Hand `path` to the server user.
fn give_to_server(path: &Path) {
    if let Some((uid, gid)) = server_user() {
        std::os::unix::fs::chown(path, Some(uid), Some(gid))
            .unwrap_or_else(|e| panic!("chown {}: {e}", path.display()));
    }
}

/// A fresh directory (mode 0700) for a server, owned by the server user.
fn server_dir(kind: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("elect-test-{kind}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::DirBuilder::new().mode(0o700).create(&dir).unwrap();
    give_to_server(&dir);
    dir
}

/// Write a file the server reads, owned by the server user, mode 0600.
fn write_for_server(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
    give_to_server(path);
}

fn append(path: &Path, text: &str) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    f.write_all(text.as_bytes()).unwrap();
}

/// A value for postgresql.conf, quoted.
fn conf_str(s: &Path) -> String {
    format!("'{}'", s.display().to_string().replace('\'', "''"))
}

/// No PG* variable of the tests' environment (PGHOST, PGPASSWORD,
/// PGOPTIONS...) steers a client; messages in English.
fn clean_env(c: &mut Command) -> &mut Command {
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(|n| n.starts_with("PG")) {
            c.env_remove(name);
        }
    }
    c.env("LC_ALL", "C").env("PGCONNECT_TIMEOUT", "5")
}

/// `program` as the server user, in `dir`, with a clean environment.
fn as_server(program: &Path, dir: &Path) -> Command {
    let mut c = Command::new(program);
    if let Some((uid, gid)) = server_user() {
        c.uid(uid).gid(gid);
    }
    clean_env(&mut c);
    c.current_dir(dir).env("HOME", dir).stdin(Stdio::null());
    c
}

fn run(mut c: Command) -> Output {
    c.output()
        .unwrap_or_else(|e| panic!("cannot run {:?}: {e}", c.get_program()))
}

fn stderr(out: &Output) -> String {
    let mut s = String::from_utf8_lossy(&out.stderr).trim().to_string();
    if s.is_empty() {
        s = String::from_utf8_lossy(&out.stdout).trim().to_string();
    }
    s
}

/// The end of a log, for a message.
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// `psql` to `url` (which may carry a password:
/// `postgresql://USER:PASSWORD@127.0.0.1:PORT/DB`) as the tests' own user:
/// the trimmed unaligned rows, or psql's complaint.
pub fn psql_url(url: &str, sql: &str) -> Result<String, String> {
    let mut c = Command::new(pg_bin("psql"));
    clean_env(&mut c);
    c.args([
        "-X",
        "-q",
        "-At",
        "-v",
        "ON_ERROR_STOP=1",
        "-d",
        url,
        "-c",
        sql,
    ])
    .stdin(Stdio::null());
    printed(c)
}

/// What psql printed, or its complaint.
fn printed(c: Command) -> Result<String, String> {
    let out = run(c);
    match out.status.success() {
        true => Ok(String::from_utf8_lossy(&out.stdout).trim().to_string()),
        false => Err(stderr(&out)),
    }
}

/// psql at `url` LISTENing on `channel` while `SELECT pg_sleep(secs)`
/// runs, then `SELECT 'slept'`: what it printed, each notification it
/// heard included (psql prints them after each command).
pub fn listen_url(url: &str, channel: &str, secs: u32) -> Result<String, String> {
    let mut c = Command::new(pg_bin("psql"));
    clean_env(&mut c);
    c.args(["-X", "-At", "-v", "ON_ERROR_STOP=1", "-d", url])
        .args(["-c", &format!("LISTEN {channel}")])
        .args(["-c", &format!("SELECT pg_sleep({secs})")])
        .args(["-c", "SELECT 'slept'"])
        .stdin(Stdio::null());
    printed(c)
}

/// Settings for every test server, on top of initdb's.
const SETTINGS: &str = "
# elect's tests
listen_addresses = '127.0.0.1'
max_connections = 200
shared_buffers = 16MB
fsync = off
synchronous_commit = off
full_page_writes = off
";

const HBA: &str = "\
# elect's tests: anyone over the unix socket, a password over TCP.
local all all trust
host all all 127.0.0.1/32 scram-sha-256
";

/// A data directory with the roles and the database `elect`, stopped
/// cleanly, made once per test binary and copied by every [`Postgres`];
/// removed when the test binary exits.
fn template() -> &'static Path {
    static TEMPLATE: OnceLock<PathBuf> = OnceLock::new();
    extern "C" fn remove_template() {
        if let Some(dir) = TEMPLATE.get() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
    TEMPLATE.get_or_init(|| {
        let dir = server_dir("pg-template");
        let data = dir.join("data");
        let mut initdb = as_server(&pg_bin("initdb"), &dir);
        initdb
            .arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "-A", "trust", "--no-sync"])
            .args(["--locale=C", "--encoding=UTF8"]);
        let out = run(initdb);
        assert!(out.status.success(), "initdb: {}", stderr(&out));
        append(&data.join("postgresql.conf"), SETTINGS);
        write_for_server(&data.join("pg_hba.conf"), HBA);
        // Up on its socket only, for the roles.
        let mut pg = Postgres {
            port: 5432,
            dir: dir.clone(),
            env: Vec::new(),
            clock: None,
            standby: None,
        };
        pg.configure();
        append(&data.join("postgresql.conf"), "listen_addresses = ''\n");
        if let Err(e) = pg.pg_ctl_start() {
            panic!("the template PostgreSQL did not start: {e}");
        }
        pg.psql_in(
            "postgres",
            &format!(
                "create role elect login password '{PASSWORD}';
                 create role reader login password '{READER_PASSWORD}';
                 create database elect owner elect;"
            ),
        );
        // Connecting to `elect` is for its owner and `reader` alone, and
        // nobody else may create anything in it.
        pg.psql(
            "revoke all on database elect from public;
             grant connect on database elect to reader;
             revoke create on schema public from public;",
        );
        pg.stop("fast");
        // The copies listen on TCP.
        append(
            &data.join("postgresql.conf"),
            "listen_addresses = '127.0.0.1'\n",
        );
        std::mem::forget(pg);
        // SAFETY: registers a plain function to run at exit.
        unsafe { libc::atexit(remove_template) };
        dir
    })
}

/// A PostgreSQL server of its own, up on `127.0.0.1:port()` and a unix
/// socket in `socket_dir()`; stopped (immediately) and removed on drop.
pub struct Postgres {
    port: u16,
    /// Holds `data/`, the socket and `postgres.log`.
    dir: PathBuf,
    /// The server's environment beyond the usual.
    env: Vec<(String, String)>,
    /// The file faketime reads the server's clock offset from, if skewed.
    clock: Option<PathBuf>,
    /// An asynchronous standby of this server and the proxy its WAL
    /// streams through ([`Postgres::add_a_standby`]).
    standby: Option<Box<(Postgres, crate::support::proxy::Proxy)>>,
}

impl Postgres {
    /// A server of the template's, on a free port. Starts again on another
    /// port if the port is taken meanwhile.
    pub fn start() -> Postgres {
        Postgres::start_with(Vec::new())
    }

    /// A server whose wall clock is `offset` (faketime's form: `+1d`,
    /// `-2h`) away from the machine's: libfaketime preloaded into it, the
    /// offset read from a file on every look at the clock, so that
    /// [`Self::step_clock`] moves it while the server runs (in every
    /// backend, forked before or after). Its monotonic clock is left alone.
    pub fn start_skewed(offset: &str) -> Postgres {
        let (clock, env) = clock::skewed_clock("pg", offset);
        let mut pg = Postgres::start_with(env);
        pg.clock = Some(clock);
        pg
    }

    /// Step the wall clock of a [`Self::start_skewed`] server to `offset`
    /// from the machine's (faketime's form: `+1h`, `-1d`, `+0`); returns
    /// once the server's `clock_timestamp()` shows it.
    pub fn step_clock(&self, offset: &str) {
        let clock = self.clock.as_ref().expect("a server of start_skewed");
        clock::step_clock(clock, offset, || self.clock_skew());
    }

    /// How far the server's `clock_timestamp()` is from the machine's wall
    /// clock, in seconds.
    pub fn clock_skew(&self) -> f64 {
        let db: f64 = self
            .psql("SELECT extract(epoch FROM clock_timestamp())")
            .parse()
            .unwrap();
        let here = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        db - here
    }

    fn start_with(env: Vec<(String, String)>) -> Postgres {
        let template = template();
        let dir = server_dir("pg");
        let out = run({
            let mut cp = Command::new("cp");
            cp.arg("-a")
                .arg(template.join("data"))
                .arg(dir.join("data"));
            cp
        });
        assert!(out.status.success(), "cp -a: {}", stderr(&out));
        let mut pg = Postgres {
            port: 0,
            dir,
            env,
            clock: None,
            standby: None,
        };
        for attempt in 1..=ATTEMPTS {
            pg.port = free_port();
            pg.configure();
            match pg.pg_ctl_start() {
                Ok(()) => return pg,
                // The directory, with the log, stays: dropped while panicking.
                Err(e) if attempt == ATTEMPTS => panic!("PostgreSQL did not start: {e}"),
                Err(_) => continue,
            }
        }
        unreachable!()
    }

    /// The socket directory and the port, in postgresql.conf (the last
    /// setting of a name wins), so that a start again keeps them.
    fn configure(&mut self) {
        append(
            &self.data().join("postgresql.conf"),
            &format!(
                "unix_socket_directories = {}\nport = {}\n",
                conf_str(&self.dir),
                self.port
            ),
        );
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn log(&self) -> PathBuf {
        self.dir.join("postgres.log")
    }

    /// The server's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(self.log()).unwrap_or_default()
    }

    fn pg_ctl(&self, args: &[&str]) -> Command {
        let mut c = as_server(&pg_bin("pg_ctl"), &self.dir);
        c.args(args).arg("-D").arg(self.data()).args([
            "-s",
            "-w",
            "-t",
            &READY_WITHIN.as_secs().to_string(),
        ]);
        c
    }

    /// `pg_ctl start`, waiting until the server takes connections.
    fn pg_ctl_start(&self) -> Result<(), String> {
        let mut c = self.pg_ctl(&["start"]);
        c.arg("-l")
            .arg(self.log())
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        let out = run(c);
        match out.status.success() {
            true => Ok(()),
            false => Err(format!(
                "{}\n{}:\n{}",
                stderr(&out),
                self.log().display(),
                tail(&self.log())
            )),
        }
    }

    /// `postgres://elect@127.0.0.1:PORT/elect`: no password in it.
    pub fn url(&self) -> String {
        format!("postgres://elect@127.0.0.1:{}/elect", self.port)
    }

    /// [`Self::url`] as `user` with `password` in it, for [`psql_url`].
    pub fn url_as(&self, user: &str, password: &str) -> String {
        format!(
            "postgresql://{user}:{password}@127.0.0.1:{}/elect",
            self.port
        )
    }

    /// The server over its unix socket, where role `elect` needs no
    /// password, in the form elect shows it (the directory percent-encoded).
    pub fn socket_url(&self) -> String {
        let dir: String = self
            .dir
            .display()
            .to_string()
            .bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect();
        format!("postgres://elect@{dir}:{}/elect", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Where the server's unix socket is (`.s.PGSQL.PORT`).
    pub fn socket_dir(&self) -> PathBuf {
        self.dir.clone()
    }

    /// The role `elect`'s password.
    pub fn password(&self) -> &str {
        PASSWORD
    }

    /// The postmaster's pid, while the server is up.
    pub fn pid(&self) -> i32 {
        let pidfile = std::fs::read_to_string(self.data().join("postmaster.pid"))
            .expect("PostgreSQL is not running");
        pidfile.lines().next().unwrap().trim().parse().unwrap()
    }

    fn try_psql_in(&self, db: &str, sql: &str) -> Result<String, String> {
        let mut c = as_server(&pg_bin("psql"), &self.dir);
        c.args(["-X", "-q", "-At", "-v", "ON_ERROR_STOP=1"])
            .arg("-h")
            .arg(&self.dir)
            .args(["-p", &self.port.to_string(), "-U", "postgres", "-d", db])
            // From stdin, so that each statement is one transaction.
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().unwrap_or_else(|e| panic!("cannot run psql: {e}"));
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().unwrap();
            stdin.write_all(sql.as_bytes()).unwrap();
        }
        let out = child.wait_with_output().unwrap();
        match out.status.success() {
            true => Ok(String::from_utf8_lossy(&out.stdout).trim().to_string()),
            false => Err(stderr(&out)),
        }
    }

    fn psql_in(&self, db: &str, sql: &str) -> String {
        self.try_psql_in(db, sql)
            .unwrap_or_else(|e| panic!("psql {sql:?}: {e}"))
    }

    /// `sql` as the superuser `postgres`, over the unix socket, in the
    /// database `elect`: the trimmed unaligned rows, or psql's complaint.
    /// Statements run one by one, each its own transaction.
    pub fn try_psql(&self, sql: &str) -> Result<String, String> {
        self.try_psql_in("elect", sql)
    }

    /// [`Self::try_psql`], panicking with psql's complaint.
    pub fn psql(&self, sql: &str) -> String {
        self.psql_in("elect", sql)
    }

    /// `pg_ctl stop -m MODE`: `smart` (waits for every session to end),
    /// `fast` (ends them) or `immediate` (a crash: the next start
    /// recovers). Returns when the server is down.
    pub fn stop(&self, mode: &str) {
        let out = run(self.pg_ctl(&["stop", "-m", mode]));
        assert!(
            out.status.success(),
            "pg_ctl stop -m {mode}: {}\n{}",
            stderr(&out),
            tail(&self.log())
        );
    }

    /// Start the stopped server again, on its data, port and socket;
    /// returns when it takes connections.
    pub fn start_again(&self) {
        if let Err(e) = self.pg_ctl_start() {
            panic!("PostgreSQL did not start again: {e}");
        }
    }

    /// Serve TLS with `certs`' server certificate. Role `elect` may still
    /// connect in the clear; role `certified` (password [`PASSWORD`]) only
    /// over TLS with a client certificate that `certs`' CA signed.
    /// Restarts the server.
    pub fn enable_tls(&self, certs: &crate::support::certs::Certs) {
        for (from, to) in [
            (&certs.server_cert, "server.crt"),
            (&certs.server_key, "server.key"),
            (&certs.ca, "ca.crt"),
        ] {
            write_for_server(
                &self.data().join(to),
                &std::fs::read_to_string(from).unwrap(),
            );
        }
        append(
            &self.data().join("postgresql.conf"),
            "ssl = on
ssl_cert_file = 'server.crt'
ssl_key_file = 'server.key'
ssl_ca_file = 'ca.crt'
",
        );
        let hba = self.data().join("pg_hba.conf");
        let rest = std::fs::read_to_string(&hba).unwrap();
        write_for_server(
            &hba,
            &format!(
                "hostssl all certified 127.0.0.1/32 scram-sha-256 clientcert=verify-ca
\
                 host all certified 127.0.0.1/32 reject
{rest}"
            ),
        );
        self.psql(&format!(
            "CREATE ROLE certified LOGIN PASSWORD '{PASSWORD}'; \
             GRANT CONNECT ON DATABASE elect TO certified; \
             GRANT CREATE ON DATABASE elect TO certified"
        ));
        self.restart("fast");
    }

    /// A hot standby of this server: its data copied by `pg_basebackup -R`
    /// (which writes `standby.signal` and `primary_conninfo`), on a port of
    /// its own, replaying the primary's WAL over streaming replication and
    /// answering reads only. Returns when it takes connections.
    pub fn start_standby(&self) -> Postgres {
        let hba = self.data().join("pg_hba.conf");
        let rest = std::fs::read_to_string(&hba).unwrap();
        if !rest.contains("local replication") {
            write_for_server(&hba, &format!("{rest}local replication all trust\n"));
            self.psql("SELECT pg_reload_conf()");
        }
        let dir = server_dir("pg-standby");
        let mut backup = as_server(&pg_bin("pg_basebackup"), &dir);
        backup
            .arg("-D")
            .arg(dir.join("data"))
            .arg("-h")
            .arg(&self.dir)
            .args(["-p", &self.port.to_string(), "-U", "postgres", "-R"])
            .args(["-X", "stream", "--no-sync", "-c", "fast"]);
        let out = run(backup);
        assert!(out.status.success(), "pg_basebackup: {}", stderr(&out));
        let mut standby = Postgres {
            port: 0,
            dir,
            env: Vec::new(),
            clock: None,
            standby: None,
        };
        append(
            &standby.data().join("postgresql.conf"),
            "hot_standby = on\n",
        );
        for attempt in 1..=ATTEMPTS {
            standby.port = free_port();
            standby.configure();
            match standby.pg_ctl_start() {
                Ok(()) => break,
                Err(e) if attempt == ATTEMPTS => panic!("the standby did not start: {e}"),
                Err(_) => continue,
            }
        }
        assert_eq!(standby.psql("SELECT pg_is_in_recovery()"), "t");
        standby
    }

    /// Wait until this standby has replayed everything `primary` has
    /// written so far.
    pub fn catch_up(&self, primary: &Postgres) {
        let wanted = primary.psql("SELECT pg_current_wal_lsn()");
        let give_up = Instant::now() + READY_WITHIN;
        loop {
            let caught = self.psql(&format!(
                "SELECT pg_last_wal_replay_lsn() >= '{wanted}'::pg_lsn"
            ));
            if caught == "t" {
                return;
            }
            assert!(
                Instant::now() < give_up,
                "the standby never replayed up to {wanted}:\n{}",
                tail(&self.log())
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Make this standby stream the primary's WAL over TCP through a
    /// fault proxy (returned), which a test can blackhole: then nothing the
    /// primary writes reaches the standby, as with a lagging asynchronous
    /// standby. Returns once the standby streams through it.
    pub fn stream_through_a_proxy(&self, primary: &Postgres) -> crate::support::proxy::Proxy {
        let hba = primary.data().join("pg_hba.conf");
        let rest = std::fs::read_to_string(&hba).unwrap();
        if !rest.contains("host replication all 127.0.0.1/32 trust") {
            write_for_server(
                &hba,
                &format!("{rest}host replication all 127.0.0.1/32 trust\n"),
            );
            primary.psql("SELECT pg_reload_conf()");
        }
        let proxy = crate::support::proxy::Proxy::start(&format!("127.0.0.1:{}", primary.port));
        self.psql(&format!(
            "ALTER SYSTEM SET primary_conninfo = 'host=127.0.0.1 port={} user=postgres'",
            proxy.port
        ));
        self.psql("SELECT pg_reload_conf()");
        let give_up = Instant::now() + READY_WITHIN;
        let through = format!("{}", proxy.port);
        while self.psql("SELECT sender_port FROM pg_stat_wal_receiver WHERE status = 'streaming'")
            != through
        {
            assert!(
                Instant::now() < give_up,
                "the standby does not stream through the proxy:\n{}",
                tail(&self.log())
            );
            thread::sleep(Duration::from_millis(20));
        }
        proxy
    }

    /// Promote this standby (`pg_ctl promote`): it starts a new timeline
    /// and takes writes. Returns when it does.
    pub fn promote(&self) {
        let out = run(self.pg_ctl(&["promote"]));
        assert!(out.status.success(), "pg_ctl promote: {}", stderr(&out));
        assert_eq!(self.psql("SELECT pg_is_in_recovery()"), "f");
    }

    /// Give this server an asynchronous standby, its WAL streaming
    /// through a fault proxy.
    pub fn add_a_standby(&mut self) {
        let standby = self.start_standby();
        let link = standby.stream_through_a_proxy(self);
        self.standby = Some(Box::new((standby, link)));
    }

    fn standby(&self) -> &(Postgres, crate::support::proxy::Proxy) {
        self.standby.as_deref().expect("a standby: add_a_standby")
    }

    /// Once the standby has everything written so far, nothing more
    /// reaches it, as with an asynchronous standby that lags.
    pub fn lag_the_standby(&self) {
        let (standby, link) = self.standby();
        standby.catch_up(self);
        link.set(crate::support::proxy::Mode::Blackhole);
    }

    /// This server crashes (an immediate stop) and its standby is promoted;
    /// returns once the standby takes writes.
    pub fn fail_over(&self) {
        self.stop("immediate");
        self.standby().0.promote();
    }

    /// A URL of this server and its standby, which reaches whichever of
    /// the two takes writes (as an HA set-up's clients are given).
    pub fn url_of_both(&self) -> String {
        format!(
            "postgres://elect:{PASSWORD}@127.0.0.1:{},127.0.0.1:{}/elect\
             ?target_session_attrs=read-write",
            self.port,
            self.standby().0.port
        )
    }

    /// [`Self::stop`] with `mode`, then [`Self::start_again`].
    pub fn restart(&self, mode: &str) {
        self.stop(mode);
        self.start_again();
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // Fails if the server is down already: nothing to do then.
        let _ = self.pg_ctl(&["stop", "-m", "immediate"]).output();
        if let Some(clock) = &self.clock {
            let _ = std::fs::remove_file(clock);
        }
        if thread::panicking() {
            eprintln!("PostgreSQL's directory kept: {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A PgBouncer in front of a [`Postgres`], on `127.0.0.1:port()`, serving
/// the database `elect` to the roles `elect` and `reader` with their
/// passwords (scram-sha-256), and reaching the server over its unix
/// socket. Killed and removed on drop.
pub struct PgBouncer {
    port: u16,
    /// Holds pgbouncer.ini, userlist.txt and pgbouncer.log.
    dir: PathBuf,
    process: Child,
}

impl PgBouncer {
    /// Pooling by `pool_mode` (`session`, `transaction` or `statement`);
    /// returns once a query goes through it. Starts again on another port
    /// if the port is taken meanwhile.
    pub fn start(pg: &Postgres, pool_mode: &str) -> PgBouncer {
        let pgbouncer = pgbouncer_bin();
        let dir = server_dir("pgbouncer");
        write_for_server(
            &dir.join("userlist.txt"),
            &format!("\"elect\" \"{PASSWORD}\"\n\"reader\" \"{READER_PASSWORD}\"\n"),
        );
        for attempt in 1..=ATTEMPTS {
            let port = free_port();
            let ini = dir.join("pgbouncer.ini");
            write_for_server(
                &ini,
                &format!(
                    "[databases]
elect = host={socket} port={pg_port} dbname=elect

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir = {dir}
pool_mode = {pool_mode}
auth_type = scram-sha-256
auth_file = {dir}/userlist.txt
max_client_conn = 200
default_pool_size = 20
logfile = {dir}/pgbouncer.log
; A server that restarts is logged in to again within a second, not 15.
server_login_retry = 1
; Sent by some drivers; harmless to drop.
ignore_startup_parameters = extra_float_digits
",
                    socket = pg.socket_dir().display(),
                    pg_port = pg.port(),
                    dir = dir.display(),
                ),
            );
            // What it says before its log is open.
            let early = std::fs::File::create(dir.join("pgbouncer.stderr")).unwrap();
            let mut process = as_server(&pgbouncer, &dir)
                .arg(&ini)
                .stdout(Stdio::null())
                .stderr(early)
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {}: {e}", pgbouncer.display()));
            match PgBouncer::ready(&mut process, &dir, port) {
                Ok(()) => return PgBouncer { port, dir, process },
                Err(e) => {
                    let _ = process.kill();
                    let _ = process.wait();
                    // The directory, with the log, stays.
                    if attempt == ATTEMPTS {
                        panic!("PgBouncer did not start: {e}\n(in {})", dir.display());
                    }
                }
            }
        }
        unreachable!()
    }

    /// Poll with a query until one goes through; Err if it exits.
    fn ready(process: &mut Child, dir: &Path, port: u16) -> Result<(), String> {
        let give_up = Instant::now() + READY_WITHIN;
        let url = format!("postgresql://elect:{PASSWORD}@127.0.0.1:{port}/elect");
        loop {
            if let Ok(Some(status)) = process.try_wait() {
                return Err(format!(
                    "pgbouncer exited ({status}):\n{}\n{}",
                    tail(&dir.join("pgbouncer.stderr")),
                    tail(&dir.join("pgbouncer.log"))
                ));
            }
            let answer = psql_url(&url, "select 1");
            if answer.as_deref() == Ok("1") {
                return Ok(());
            }
            if Instant::now() >= give_up {
                return Err(format!(
                    "no query through pgbouncer within {READY_WITHIN:?} ({answer:?}):\n{}",
                    tail(&dir.join("pgbouncer.log"))
                ));
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// `postgres://elect@127.0.0.1:PORT/elect`: no password in it.
    pub fn url(&self) -> String {
        format!("postgres://elect@127.0.0.1:{}/elect", self.port)
    }

    /// [`Self::url`] as `user` with `password` in it, for [`psql_url`].
    pub fn url_as(&self, user: &str, password: &str) -> String {
        format!(
            "postgresql://{user}:{password}@127.0.0.1:{}/elect",
            self.port
        )
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn pid(&self) -> i32 {
        self.process.id() as i32
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
        if thread::panicking() {
            eprintln!("PgBouncer's directory kept: {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
