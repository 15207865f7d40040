//! Every store as the shared suites see it: [`StoreUnderTest`] says how to
//! start a store, look into it without elect, end a holder's lease from
//! outside, and where stores legitimately differ. `tests/behaviour.rs` and
//! `tests/every_fault.rs` run each of their scenarios against every impl.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::kube::Kube;
use super::mariadb::MariaDb;
use super::postgres::PASSWORD;
use super::{Etcd, PgBouncer, Postgres, SECOND, TempDir, ZooKeeper};

/// What a scenario knows of a holder whose lease it ends from outside: its
/// command's ELECT_LEASE_ID and ELECT_KEY.
pub struct Held {
    pub lease: String,
    pub key: String,
}

/// How elect reaches a store whose credentials come from a program
/// ([`StoreUnderTest::credentials_from`]).
pub struct Credentials {
    pub url: String,
    /// The environment that names the program.
    pub env: Vec<(String, String)>,
    pub program: PathBuf,
}

pub trait StoreUnderTest: Sized {
    /// The module of the store's tests; also a part of temp dir names.
    const NAME: &'static str;
    /// The ways to end a holder's lease from outside elect, by name.
    const OUTSIDE_ENDS: &'static [&'static str];
    /// Tokens come from a counter: each one handed out is one more than the
    /// last, for each lock.
    const CONSECUTIVE_TOKENS: bool;

    /// A new, empty store for `scenario` (a name unique in this binary).
    fn start(scenario: &str) -> Self;
    /// The `--store` URL.
    fn url(&self) -> String;
    /// How elect names the store in its messages: the URL, unless the
    /// store finds more once reached (a `k8s:` store's namespace).
    fn shown(&self) -> String {
        self.url()
    }
    /// How many contenders for `lock`, its holder and its waiters, the store
    /// has, as the store itself (not elect) tells.
    fn contenders(&self, lock: &str) -> usize;
    /// [`Self::contenders`], or why the store could not say now (a server
    /// busy with thousands of clients, say).
    fn try_contenders(&self, lock: &str) -> Result<usize, String> {
        Ok(self.contenders(lock))
    }
    /// A write to the store that is none of elect's business.
    fn unrelated_write(&self);
    /// Assert that the store holds nothing at all.
    fn assert_empty(&self);
    /// Whether `key` is what ELECT_KEY should be for a holder of `lock`
    /// whose ELECT_LEASE_ID is `lease`.
    fn key_fits(&self, lock: &str, lease: &str, key: &str) -> bool;
    /// Whether `lease` is what ELECT_LEASE_ID should be for a holder whose
    /// elect has the pid `elect`.
    fn lease_id_fits(lease: &str, elect: i32) -> bool;
    /// End the lease of `holder` of `lock` from outside elect, the way `how`
    /// (one of OUTSIDE_ENDS).
    fn end_lease_from_outside(&self, lock: &str, holder: &Held, how: &str);
    /// How long elect may take to notice an outside end, at this TTL.
    fn notices_outside_end_within(ttl: Duration) -> Duration;
    /// Stop the store and start it again, as a crash and a reboot would
    /// (a directory needs nothing).
    fn restart(&mut self);
    /// Contenders for a shard's lock, as for any lock.
    fn shard_contenders(&self, shard_lock: &str) -> usize {
        self.contenders(shard_lock)
    }

    // What the store can suffer, and how (tests/every_fault.rs); a
    // replicated store's members' faults at the end.

    /// The store can be restored from an older state of its own, as from
    /// an operator's backup: [`Self::save_state`], then
    /// [`Self::restore_state`].
    const RESTORES: bool = false;
    /// Save the store's state, as an operator's backup does.
    fn save_state(&mut self) {
        panic!("{}: no restore", Self::NAME)
    }
    /// Put back the state saved, as an operator restores a backup; with
    /// `bump`, the way the store's own tools keep its counters above those
    /// handed out since (etcd's `--bump-revision`). Waits until it serves.
    fn restore_state(&mut self, _bump: bool) {
        panic!("{}: no restore", Self::NAME)
    }
    /// The store's tools can restore it with its counters above those
    /// handed out since the backup.
    const RESTORES_ABOVE: bool = false;
    /// How long after a restored store serves again its holder's command
    /// may run on, at this TTL: until the holder's deadline, unless it
    /// learns sooner.
    fn restore_noticed_within(ttl: Duration) -> Duration {
        ttl
    }

    /// Its elects hear of a lock's changes on a connection of their own
    /// (PostgreSQL's LISTEN), which can be lost while the renewals' is not.
    const NOTIFIES: bool = false;
    /// How many of those connections the server has now.
    fn notification_connections(&self) -> usize {
        panic!("{}: no notification connections", Self::NAME)
    }
    /// End every one of them on the server's side, as a DBA's idle-session
    /// reaper does; how many it ended.
    fn end_notification_connections(&self) -> usize {
        panic!("{}: no notification connections", Self::NAME)
    }

    /// Its commits can be made to wait for a replica that never confirms
    /// them (PostgreSQL's synchronous standby, named but gone).
    const WAITS_FOR_A_STANDBY: bool = false;
    /// Name a synchronous standby that is not there: every commit waits.
    fn lose_the_synchronous_standby(&mut self) {
        panic!("{}: no synchronous standby", Self::NAME)
    }
    /// How many sessions wait on the server for that standby now.
    fn waiting_for_the_standby(&self) -> usize {
        panic!("{}: no synchronous standby", Self::NAME)
    }

    /// The store can fail over to an asynchronous standby that lacks the
    /// primary's last writes (PostgreSQL's streaming replication, the
    /// default of most HA set-ups).
    const FAILS_OVER: bool = false;
    /// Give the store a standby, before anything is written.
    fn add_a_standby(&mut self) {
        panic!("{}: no standby", Self::NAME)
    }
    /// Once the standby has everything written so far, nothing more
    /// reaches it.
    fn lag_the_standby(&self) {
        panic!("{}: no standby", Self::NAME)
    }
    /// The primary crashes and the standby is promoted; returns once it
    /// takes writes.
    fn fail_over(&mut self) {
        panic!("{}: no standby", Self::NAME)
    }
    /// A URL of both servers, which reaches whichever takes writes;
    /// [`Self::url`] reaches the primary alone.
    fn url_of_both(&self) -> String {
        panic!("{}: no standby", Self::NAME)
    }

    /// Its credentials can come from a program (Kubernetes' exec plugin,
    /// as `aws eks get-token` and `gke-gcloud-auth-plugin` give them),
    /// which may be slow, or hang.
    const FETCHES_CREDENTIALS: bool = false;
    /// How elect reaches the store with credentials from a program `NAME`
    /// in `dir` that runs the shell `body`, then gives a credential that
    /// lives `expires_in` seconds.
    fn credentials_from(
        &self,
        _dir: &TempDir,
        _name: &str,
        _body: &str,
        _expires_in: u64,
    ) -> Credentials {
        panic!("{}: no credential program", Self::NAME)
    }

    /// The store turns connections away beyond a limit (PostgreSQL's and
    /// MySQL's `max_connections`, a role's connection limit).
    const LIMITS_CONNECTIONS: bool = false;
    /// Let elect's account open no more connections.
    fn reach_the_connection_limit(&mut self) {
        panic!("{}: no connection limit", Self::NAME)
    }
    /// Lift the limit.
    fn lift_the_connection_limit(&mut self) {
        panic!("{}: no connection limit", Self::NAME)
    }

    /// A holder reaches the store over TCP, a link a fault proxy can cut,
    /// slow down or make lossy.
    const HAS_LINK: bool;
    /// The store is a server process that can be paused and restarted.
    const HAS_SERVER: bool;
    /// The store judges a lease's expiry by its own wall clock, which can
    /// step: [`Self::start_with_a_steppable_clock`] and
    /// [`Self::step_clock`] do it.
    const JUDGES_BY_ITS_CLOCK: bool;
    /// How many servers keep the store's data; 1: no replicas.
    const REPLICAS: usize;
    /// Where a holder's connection goes, `127.0.0.1:PORT`: what a fault
    /// proxy forwards to (HAS_LINK).
    fn link(&self) -> String {
        unreachable!("{} has no link of its own", Self::NAME)
    }
    /// The `--store` URL through a proxy on `127.0.0.1:port` that forwards
    /// to [`Self::link`], with whatever credentials it needs in it.
    fn url_through(&self, _port: u16) -> String {
        unreachable!("{} has no link of its own", Self::NAME)
    }
    /// SIGSTOP the store's server, every process of it: alive to TCP,
    /// answering nothing (HAS_SERVER).
    fn pause_server(&self) {
        unreachable!("{} has no server of its own", Self::NAME)
    }
    /// SIGCONT after [`Self::pause_server`].
    fn resume_server(&self) {
        unreachable!("{} has no server of its own", Self::NAME)
    }
    /// Stop the server and start it again, on its data and ports: `fast`
    /// (a clean shutdown that ends every session) or `immediate` (a crash,
    /// and recovery). Returns when it serves again.
    fn restart_server(&mut self, _how: &str) {
        unreachable!("{} has no server of its own", Self::NAME)
    }
    /// How long a `break --force` may leave the old command running beside
    /// the next holder's, as the README promises it.
    fn forced_break_overlap(ttl: Duration) -> Duration;
    /// The TTL, in seconds, of the scenario that runs 24 elects at once on
    /// one server (eight shards, three instances each): 3, or longer where
    /// each waiting elect costs the server more.
    fn crowd_ttl_secs() -> u64 {
        3
    }

    /// Whether the store is reached at a network address (`file:` is not).
    const HAS_ENDPOINT: bool = true;
    /// How elect names this kind of server ("this is not etcd").
    const SPEAKS: &'static str;
    /// A `--store` URL of this kind for the address `host_port`.
    fn url_at(host_port: &str) -> String;

    /// Whether the lock lives in a descriptor that the command's processes
    /// share: then it cannot pass while any of them lives, even with elect
    /// and its guard dead. Else it passes when the lease expires.
    fn held_by_the_commands_descriptors() -> bool {
        false
    }

    /// Others than elect may write a lock's record with the rights elect
    /// needs (an administrator's tool, a GitOps sync):
    /// [`Self::delete_record`] and [`Self::shorten_record`] do it.
    const HAS_FOREIGN_WRITERS: bool = false;

    /// Just after one of the renewals of `lock`'s holder (the longest time
    /// until its next), delete the lock's record as another writer would,
    /// with no lease of its own revoked.
    fn delete_record(&self, _lock: &str) {
        panic!("{}: not a fault of this store", Self::NAME)
    }

    /// Just after one of the renewals of `lock`'s holder, set the lease
    /// its record gives the holder to the least the store takes, the holder
    /// still named, as another writer would.
    fn shorten_record(&self, _lock: &str) {
        panic!("{}: not a fault of this store", Self::NAME)
    }

    /// A new store for `scenario` whose wall clock [`Self::step_clock`]
    /// can step while it runs.
    fn start_with_a_steppable_clock(_scenario: &str) -> Self {
        unreachable!("{} judges by no clock of its own", Self::NAME)
    }

    /// Just after one of the renewals of `lock`'s holder (the longest time
    /// until its next), step the store's wall clock to `offset` from the
    /// machine's (faketime's form: `+1h`, `-1d`); returns once the store's
    /// clock shows it.
    fn step_clock(&self, _lock: &str, _offset: &str) {
        unreachable!("{} judges by no clock of its own", Self::NAME)
    }

    // A replicated store's members (REPLICAS > 1), numbered from 0, and
    // their faults: the leader killed, a member killed, quorum lost, a
    // holder cut off together with the one member it reaches.

    /// The member that leads (the Raft or ZAB leader), once one does.
    fn leader(&self) -> usize {
        no_members::<Self>()
    }
    /// SIGKILL member `i`: a crash, no goodbye to its peers or clients.
    fn kill_member(&mut self, _i: usize) {
        no_members::<Self>()
    }
    /// Start member `i` again on its data and ports; do not wait.
    fn restart_member(&mut self, _i: usize) {
        no_members::<Self>()
    }
    /// Wait until every member that is up serves (which needs a quorum).
    fn wait_serving(&mut self) {
        no_members::<Self>()
    }
    /// Where a client's connection to member `i` ends: `127.0.0.1:PORT`.
    fn member_endpoint(&self, _i: usize) -> String {
        no_members::<Self>()
    }
    /// The `--store` URL of `members` alone.
    fn url_of(&self, _members: &[usize]) -> String {
        no_members::<Self>()
    }
    /// Cut member `i` off from every other member, silently (packets
    /// vanish); its clients still reach it.
    fn isolate_member(&self, _i: usize) {
        no_members::<Self>()
    }
    /// Undo [`Self::isolate_member`]; do not wait.
    fn heal_member(&self, _i: usize) {
        no_members::<Self>()
    }
    /// How long a holder cut off together with the one member it reaches
    /// may run on beside the next holder at `ttl`, as the README states it
    /// (zero: never).
    fn cut_off_with_its_member_overlap(_ttl: Duration) -> Duration {
        Duration::ZERO
    }
}

impl StoreUnderTest for Etcd {
    const NAME: &'static str = "etcd";
    const OUTSIDE_ENDS: &'static [&'static str] = &["revoke the lease", "delete the key"];
    /// Tokens are revisions of the whole store.
    const CONSECUTIVE_TOKENS: bool = false;

    fn start(_scenario: &str) -> Etcd {
        Etcd::start()
    }

    fn url(&self) -> String {
        Etcd::url(self)
    }

    fn contenders(&self, lock: &str) -> usize {
        self.keys(&format!("{lock}/")).len()
    }

    fn try_contenders(&self, lock: &str) -> Result<usize, String> {
        self.try_keys(&format!("{lock}/")).map(|keys| keys.len())
    }

    fn unrelated_write(&self) {
        assert!(self.etcdctl(&["put", "unrelated", "x"]).status.success());
    }

    fn assert_empty(&self) {
        assert_eq!(self.keys(""), Vec::<String>::new(), "no key was written");
        let leases = self.etcdctl(&["lease", "list"]);
        assert_eq!(
            String::from_utf8_lossy(&leases.stdout).trim(),
            "found 0 leases",
            "no lease was granted"
        );
    }

    fn key_fits(&self, lock: &str, lease: &str, key: &str) -> bool {
        key == format!("{lock}/{lease}")
    }

    /// The lease's id, in hex.
    fn lease_id_fits(lease: &str, _elect: i32) -> bool {
        u64::from_str_radix(lease, 16).is_ok()
    }

    fn end_lease_from_outside(&self, _lock: &str, holder: &Held, how: &str) {
        let out = match how {
            "revoke the lease" => self.etcdctl(&["lease", "revoke", &holder.lease]),
            "delete the key" => self.etcdctl(&["del", &holder.key]),
            _ => unreachable!("{how}"),
        };
        assert!(
            out.status.success(),
            "{how}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// At once, by a watch: well within the lease.
    fn notices_outside_end_within(ttl: Duration) -> Duration {
        ttl / 2
    }

    fn restart(&mut self) {
        self.kill(0);
        self.restart(0);
        self.wait_healthy();
    }

    const HAS_LINK: bool = true;
    const HAS_SERVER: bool = true;
    /// Leases are timed by the leader's monotonic clock.
    const JUDGES_BY_ITS_CLOCK: bool = false;
    const REPLICAS: usize = 1;

    fn link(&self) -> String {
        self.endpoint.clone()
    }

    fn url_through(&self, port: u16) -> String {
        format!("etcd://127.0.0.1:{port}")
    }

    fn pause_server(&self) {
        self.pause(0);
    }

    fn resume_server(&self) {
        self.resume(0);
    }

    /// `fast`: SIGTERM, which etcd takes as a clean shutdown; `immediate`: SIGKILL.
    fn restart_server(&mut self, how: &str) {
        if how == "fast" {
            terminate(self.pid());
        }
        self.kill(0);
        self.restart(0);
        self.wait_healthy();
    }

    /// 100 ms after its elect notices, by a watch: milliseconds, more on a
    /// busy machine or through a follower.
    fn forced_break_overlap(_ttl: Duration) -> Duration {
        Duration::from_millis(150)
    }

    const RESTORES: bool = true;
    const RESTORES_ABOVE: bool = true;

    /// Its key's watch breaks with the server, and the look that follows
    /// finds the key gone (or the revision gone back) once etcd serves.
    fn restore_noticed_within(_ttl: Duration) -> Duration {
        Duration::from_millis(300)
    }

    fn save_state(&mut self) {
        self.save_snapshot();
    }

    fn restore_state(&mut self, bump: bool) {
        self.restore_snapshot(bump);
    }

    const SPEAKS: &'static str = "etcd";

    fn url_at(host_port: &str) -> String {
        format!("etcd://{host_port}")
    }
}

/// The `file:` store in a directory of its own.
pub struct FileStore(pub TempDir);

impl FileStore {
    pub fn lock_file(&self, lock: &str) -> PathBuf {
        self.0.join(&format!("{}.lock", lock.replace('/', "%2F")))
    }

    /// Where [`StoreUnderTest::save_state`] keeps its copy.
    fn backup(&self) -> PathBuf {
        let mut name = self.0.0.clone().into_os_string();
        name.push(".backup");
        PathBuf::from(name)
    }
}

impl Drop for FileStore {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.backup());
    }
}

impl StoreUnderTest for FileStore {
    const NAME: &'static str = "file";
    const OUTSIDE_ENDS: &'static [&'static str] =
        &["remove the lock file", "replace the lock file"];
    const CONSECUTIVE_TOKENS: bool = true;

    fn start(scenario: &str) -> FileStore {
        FileStore(TempDir::new(&format!("file-{scenario}")))
    }

    fn url(&self) -> String {
        self.0.url()
    }

    /// The flock(2) locks on the lock file, held or waited for, from
    /// /proc/locks: elect and its guard share one.
    fn contenders(&self, lock: &str) -> usize {
        let Ok(meta) = std::fs::metadata(self.lock_file(lock)) else {
            return 0;
        };
        let (dev, ino) = (meta.dev(), meta.ino());
        let id = format!("{:02x}:{:02x}:{ino}", libc::major(dev), libc::minor(dev));
        std::fs::read_to_string("/proc/locks")
            .unwrap()
            .lines()
            .filter(|line| line.split_whitespace().any(|field| field == id))
            .count()
    }

    fn unrelated_write(&self) {
        std::fs::write(self.0.join("unrelated"), "x").unwrap();
        std::fs::remove_file(self.0.join("unrelated")).unwrap();
    }

    fn assert_empty(&self) {
        let names: Vec<_> = std::fs::read_dir(&self.0.0)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(names.is_empty(), "nothing was created: {names:?}");
    }

    /// The lock file.
    fn key_fits(&self, lock: &str, _lease: &str, key: &str) -> bool {
        key == self.lock_file(lock).display().to_string()
    }

    /// elect's pid.
    fn lease_id_fits(lease: &str, elect: i32) -> bool {
        lease == elect.to_string()
    }

    fn end_lease_from_outside(&self, lock: &str, _holder: &Held, how: &str) {
        let file = self.lock_file(lock);
        match how {
            "remove the lock file" => std::fs::remove_file(&file).unwrap(),
            "replace the lock file" => {
                let other = self.0.join(&format!("{lock}.other"));
                std::fs::write(&other, "").unwrap();
                std::fs::rename(&other, &file).unwrap();
            }
            _ => unreachable!("{how}"),
        }
    }

    /// At the next look at the lock file, which comes every second.
    fn notices_outside_end_within(_ttl: Duration) -> Duration {
        Duration::from_millis(1500)
    }

    fn restart(&mut self) {}

    /// A copy of the directory, as a backup (`cp -a`).
    const RESTORES: bool = true;

    fn save_state(&mut self) {
        let backup = self.backup();
        let _ = std::fs::remove_dir_all(&backup);
        let out = std::process::Command::new("cp")
            .arg("-a")
            .arg(&self.0.0)
            .arg(&backup)
            .output()
            .unwrap();
        assert!(out.status.success(), "cp: {out:?}");
    }

    /// Every file removed and the backup's copied in, as a restore into
    /// an emptied directory does: new files, the counters the backup's.
    fn restore_state(&mut self, _bump: bool) {
        for entry in std::fs::read_dir(&self.0.0).unwrap() {
            std::fs::remove_file(entry.unwrap().path()).unwrap();
        }
        let out = std::process::Command::new("cp")
            .arg("-a")
            .arg(format!("{}/.", self.backup().display()))
            .arg(&self.0.0)
            .output()
            .unwrap();
        assert!(out.status.success(), "cp: {out:?}");
    }

    /// The holder looks at its lock file once a second.
    fn restore_noticed_within(_ttl: Duration) -> Duration {
        Duration::from_millis(1500)
    }

    const HAS_LINK: bool = false;
    const HAS_SERVER: bool = false;
    /// flock(2): held while a descriptor is open, no clock at all.
    const JUDGES_BY_ITS_CLOCK: bool = false;
    const REPLICAS: usize = 1;

    /// The old holder's elect looks at its lock file every second.
    fn forced_break_overlap(_ttl: Duration) -> Duration {
        Duration::from_millis(1100)
    }

    /// A directory: nothing to connect to, nothing to go unanswered.
    const HAS_ENDPOINT: bool = false;
    const SPEAKS: &'static str = "";

    fn url_at(host_port: &str) -> String {
        unreachable!("the file store has no address: {host_port}")
    }

    /// The lock file's descriptor, which the command inherits.
    fn held_by_the_commands_descriptors() -> bool {
        true
    }
}

/// What a store of one server has not: members.
fn no_members<S: StoreUnderTest>() -> ! {
    unreachable!("{} keeps its data on one server: no members", S::NAME)
}

/// PostgreSQL, over its unix socket (no password needed there).
impl StoreUnderTest for Postgres {
    const NAME: &'static str = "postgres";
    /// Not by expiring the row: a row the database's clock calls expired is
    /// still its holder's until someone takes it (a step of that clock
    /// looks the same).
    const OUTSIDE_ENDS: &'static [&'static str] =
        &["take over the lease row", "free the lease row"];
    /// Each new holder gets the row's fence plus one.
    const CONSECUTIVE_TOKENS: bool = true;

    fn start(_scenario: &str) -> Postgres {
        Postgres::start()
    }

    fn url(&self) -> String {
        self.socket_url()
    }

    /// The live holder's row and the live waiters' rows.
    fn contenders(&self, lock: &str) -> usize {
        self.try_psql(&format!(
            "SELECT (SELECT count(*) FROM elect.lease WHERE name = '{lock}' \
               AND tenure IS NOT NULL AND expires_at > clock_timestamp()) \
             + (SELECT count(*) FROM elect.waiter WHERE name = '{lock}' \
               AND expires_at > clock_timestamp())"
        ))
        .map_or(0, |n| n.parse().unwrap())
    }

    fn unrelated_write(&self) {
        self.psql("CREATE TABLE IF NOT EXISTS unrelated (x int); INSERT INTO unrelated VALUES (1)");
    }

    /// Not even the schema was created.
    fn assert_empty(&self) {
        assert_eq!(
            self.psql("SELECT count(*) FROM pg_namespace WHERE nspname = 'elect'"),
            "0",
            "nothing was created"
        );
    }

    fn key_fits(&self, lock: &str, lease: &str, key: &str) -> bool {
        key == format!("{lock}/{lease}")
    }

    /// The tenure: 128 random bits in hex.
    fn lease_id_fits(lease: &str, _elect: i32) -> bool {
        lease.len() == 32 && u128::from_str_radix(lease, 16).is_ok()
    }

    fn end_lease_from_outside(&self, lock: &str, _holder: &Held, how: &str) {
        let change = match how {
            // By a taker that is gone at once: its row lapses.
            "take over the lease row" => {
                "tenure = 'outsider', fence = fence + 1, renewals = renewals + 1, \
                 expires_at = clock_timestamp() - interval '1 second'"
            }
            "free the lease row" => "tenure = NULL, holder = NULL, expires_at = '-infinity'",
            _ => unreachable!("{how}"),
        };
        self.psql(&format!(
            "UPDATE elect.lease SET {change} WHERE name = '{lock}'"
        ));
    }

    /// At the next renewal, which comes every TTL/3.
    fn notices_outside_end_within(ttl: Duration) -> Duration {
        ttl / 2
    }

    /// A crash (immediate shutdown) and recovery.
    fn restart(&mut self) {
        Postgres::restart(self, "immediate");
    }

    const HAS_LINK: bool = true;
    const HAS_SERVER: bool = true;
    /// Rows expire by `clock_timestamp()`, the server's wall clock.
    const JUDGES_BY_ITS_CLOCK: bool = true;
    const REPLICAS: usize = 1;

    fn link(&self) -> String {
        format!("127.0.0.1:{}", self.port())
    }

    fn url_through(&self, port: u16) -> String {
        format!("postgres://elect:{PASSWORD}@127.0.0.1:{port}/elect")
    }

    /// The postmaster first, so that it forks no backend meanwhile, then
    /// every process it started.
    fn pause_server(&self) {
        signal_tree(self.pid(), libc::SIGSTOP);
    }

    fn resume_server(&self) {
        signal_tree(self.pid(), libc::SIGCONT);
    }

    /// `pg_ctl stop -m fast` or `-m immediate`, and start.
    fn restart_server(&mut self, how: &str) {
        Postgres::restart(self, how);
    }

    /// Its elect sees the row end at once, by a NOTIFY; a holder that
    /// did not wait listens from 200 ms into its tenure, and looks then.
    fn forced_break_overlap(_ttl: Duration) -> Duration {
        Duration::from_millis(300)
    }

    const WAITS_FOR_A_STANDBY: bool = true;

    fn lose_the_synchronous_standby(&mut self) {
        self.psql("ALTER SYSTEM SET synchronous_standby_names = 'gone'");
        self.psql("SELECT pg_reload_conf()");
        // The reload reaches every backend at its next statement; this
        // session's own setting says it was read.
        let give_up = Instant::now() + 5 * SECOND;
        while self.psql("SHOW synchronous_standby_names").trim() != "gone" {
            assert!(Instant::now() < give_up, "the reload did not take");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn waiting_for_the_standby(&self) -> usize {
        let n = self.psql("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'");
        n.trim().parse().unwrap()
    }

    const FAILS_OVER: bool = true;

    fn add_a_standby(&mut self) {
        Postgres::add_a_standby(self);
    }

    fn lag_the_standby(&self) {
        Postgres::lag_the_standby(self);
    }

    fn fail_over(&mut self) {
        Postgres::fail_over(self);
    }

    fn url_of_both(&self) -> String {
        Postgres::url_of_both(self)
    }

    const LIMITS_CONNECTIONS: bool = true;

    /// A role's limit: the same refusal (53300) as `max_connections`,
    /// with no connections to hold open.
    fn reach_the_connection_limit(&mut self) {
        self.psql("ALTER ROLE elect CONNECTION LIMIT 0");
    }

    fn lift_the_connection_limit(&mut self) {
        self.psql("ALTER ROLE elect CONNECTION LIMIT -1");
    }

    const NOTIFIES: bool = true;

    fn notification_connections(&self) -> usize {
        let n = self.psql(
            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN %' \
             AND pid <> pg_backend_pid()",
        );
        n.trim().parse().unwrap()
    }

    fn end_notification_connections(&self) -> usize {
        let n = self.psql(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE query LIKE 'LISTEN %' AND pid <> pg_backend_pid()",
        );
        n.trim().parse().unwrap()
    }

    const SPEAKS: &'static str = "PostgreSQL";

    fn url_at(host_port: &str) -> String {
        format!("postgres://elect@{host_port}/elect")
    }

    /// libfaketime preloaded into the server, reading its offset from a file.
    fn start_with_a_steppable_clock(_scenario: &str) -> Postgres {
        let pg = Postgres::start_skewed("+0");
        assert!(pg.clock_skew().abs() < 60.0, "the clock is stepped already");
        pg
    }

    /// Just after the holder's row shows a new `renewed_at`.
    fn step_clock(&self, lock: &str, offset: &str) {
        let renewed_at = || {
            self.psql(&format!(
                "SELECT renewed_at FROM elect.lease WHERE name = '{lock}'"
            ))
        };
        let (before, give_up) = (renewed_at(), Instant::now() + 10 * SECOND);
        while renewed_at() == before {
            assert!(
                Instant::now() < give_up,
                "the holder of {lock} never renewed"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        Postgres::step_clock(self, offset);
    }
}

/// MariaDB, over its unix socket (no password needed there).
impl StoreUnderTest for MariaDb {
    const NAME: &'static str = "mariadb";
    /// Not by expiring the row: a row the database's clock calls expired is
    /// still its holder's until someone takes it.
    const OUTSIDE_ENDS: &'static [&'static str] =
        &["take over the lease row", "free the lease row"];
    /// Each new holder gets the row's fence plus one, or the database's
    /// clock in ms × 1024 if that is more.
    const CONSECUTIVE_TOKENS: bool = false;

    fn start(_scenario: &str) -> MariaDb {
        MariaDb::start()
    }

    const FAILS_OVER: bool = true;

    fn add_a_standby(&mut self) {
        MariaDb::add_a_standby(self);
    }

    fn lag_the_standby(&self) {
        MariaDb::lag_the_standby(self);
    }

    fn fail_over(&mut self) {
        MariaDb::fail_over(self);
    }

    fn url_of_both(&self) -> String {
        MariaDb::url_of_both(self)
    }

    /// Semi-synchronous replication (built into MariaDB), with no replica
    /// to acknowledge.
    const WAITS_FOR_A_STANDBY: bool = true;

    fn lose_the_synchronous_standby(&mut self) {
        MariaDb::lose_the_semi_synchronous_replica(self);
    }

    fn waiting_for_the_standby(&self) -> usize {
        let n = self.sql(
            "SELECT count(*) FROM information_schema.processlist \
             WHERE state LIKE '%semi-sync%'",
        );
        n.trim().parse().unwrap()
    }

    const LIMITS_CONNECTIONS: bool = true;

    fn reach_the_connection_limit(&mut self) {
        MariaDb::reach_the_connection_limit(self);
    }

    fn lift_the_connection_limit(&mut self) {
        MariaDb::lift_the_connection_limit(self);
    }

    fn url(&self) -> String {
        self.socket_url()
    }

    /// The live holder's row and the live waiters' rows.
    fn contenders(&self, lock: &str) -> usize {
        self.try_sql(&format!(
            "SELECT (SELECT count(*) FROM elect_lease WHERE name = '{lock}' \
               AND tenure IS NOT NULL AND expires_at > UTC_TIMESTAMP(6)) \
             + (SELECT count(*) FROM elect_waiter WHERE name = '{lock}' \
               AND expires_at > UTC_TIMESTAMP(6))"
        ))
        .map_or(0, |n| n.parse().unwrap())
    }

    fn unrelated_write(&self) {
        self.sql("CREATE TABLE IF NOT EXISTS unrelated (x int); INSERT INTO unrelated VALUES (1)");
    }

    /// Not even a table was created.
    fn assert_empty(&self) {
        assert_eq!(
            self.sql(
                "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'elect' \
                 AND table_name LIKE 'elect%'"
            ),
            "0",
            "nothing was created"
        );
    }

    fn key_fits(&self, lock: &str, lease: &str, key: &str) -> bool {
        key == format!("{lock}/{lease}")
    }

    /// The tenure: 128 random bits in hex.
    fn lease_id_fits(lease: &str, _elect: i32) -> bool {
        lease.len() == 32 && u128::from_str_radix(lease, 16).is_ok()
    }

    fn end_lease_from_outside(&self, lock: &str, _holder: &Held, how: &str) {
        let change = match how {
            // By a taker that is gone at once: its row lapses.
            "take over the lease row" => {
                "fence = fence + 1, renewals = renewals + 1, tenure = 'outsider', \
                 expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND"
            }
            "free the lease row" => {
                "tenure = NULL, holder = NULL, expires_at = '1000-01-01 00:00:00'"
            }
            _ => unreachable!("{how}"),
        };
        self.sql(&format!(
            "UPDATE elect_lease SET {change} WHERE name = '{lock}'"
        ));
    }

    /// At the next renewal, which comes every TTL/3.
    fn notices_outside_end_within(ttl: Duration) -> Duration {
        ttl / 2
    }

    /// A crash (SIGKILL) and InnoDB's recovery.
    fn restart(&mut self) {
        MariaDb::restart(self, "immediate");
    }

    const HAS_LINK: bool = true;
    const HAS_SERVER: bool = true;
    /// Rows expire by `UTC_TIMESTAMP(6)`, the server's wall clock.
    const JUDGES_BY_ITS_CLOCK: bool = true;
    const REPLICAS: usize = 1;

    fn link(&self) -> String {
        format!("127.0.0.1:{}", self.port())
    }

    fn url_through(&self, port: u16) -> String {
        format!(
            "mysql://elect:{}@127.0.0.1:{port}/elect?ssl-mode=DISABLED",
            super::mariadb::PASSWORD
        )
    }

    fn pause_server(&self) {
        signal_tree(self.pid(), libc::SIGSTOP);
    }

    fn resume_server(&self) {
        signal_tree(self.pid(), libc::SIGCONT);
    }

    fn restart_server(&mut self, how: &str) {
        MariaDb::restart(self, how);
    }

    /// Its elect sees the row end at its next renewal, every TTL/3.
    fn forced_break_overlap(ttl: Duration) -> Duration {
        ttl / 2
    }

    const SPEAKS: &'static str = "MySQL or MariaDB";

    fn url_at(host_port: &str) -> String {
        format!("mysql://elect@{host_port}/elect")
    }

    /// libfaketime preloaded into the server, reading its offset from a file.
    fn start_with_a_steppable_clock(_scenario: &str) -> MariaDb {
        let db = MariaDb::start_skewed("+0");
        assert!(db.clock_skew().abs() < 60.0, "the clock is stepped already");
        db
    }

    /// Just after the holder's row shows a new `renewed_at`.
    fn step_clock(&self, lock: &str, offset: &str) {
        let renewed_at = || {
            self.sql(&format!(
                "SELECT renewals FROM elect_lease WHERE name = '{lock}'"
            ))
        };
        let (before, give_up) = (renewed_at(), Instant::now() + 10 * SECOND);
        while renewed_at() == before {
            assert!(
                Instant::now() < give_up,
                "the holder of {lock} never renewed"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        MariaDb::step_clock(self, offset);
    }
}

/// ZooKeeper: one server.
impl StoreUnderTest for ZooKeeper {
    const NAME: &'static str = "zookeeper";
    const OUTSIDE_ENDS: &'static [&'static str] = &["delete the lock node"];
    /// Tokens are czxids: zxids of the whole ensemble.
    const CONSECUTIVE_TOKENS: bool = false;

    fn start(_scenario: &str) -> ZooKeeper {
        ZooKeeper::start()
    }

    fn url(&self) -> String {
        ZooKeeper::url(self)
    }

    /// The lock node's children of the recipe (`…lock-NNN`).
    fn contenders(&self, lock: &str) -> usize {
        self.children(&format!("/{}", lock.trim_start_matches('/')))
            .iter()
            .filter(|c| c.contains("lock-"))
            .count()
    }

    fn unrelated_write(&self) {
        self.create("/unrelated", b"x", true);
        self.delete("/unrelated");
    }

    fn assert_empty(&self) {
        assert_eq!(self.children("/"), ["zookeeper"], "no node was created");
    }

    /// `/<lock>/_c_<uuid>-lock-<seq>`, as Curator's protected mode names it.
    fn key_fits(&self, lock: &str, _lease: &str, key: &str) -> bool {
        key.strip_prefix(&format!("/{lock}/_c_"))
            .is_some_and(|rest| rest.len() == 36 + 16 && rest[36..].starts_with("-lock-"))
    }

    /// The session id, in hex.
    fn lease_id_fits(lease: &str, _elect: i32) -> bool {
        i64::from_str_radix(lease, 16).is_ok()
    }

    fn end_lease_from_outside(&self, _lock: &str, holder: &Held, how: &str) {
        match how {
            "delete the lock node" => self.delete(&holder.key),
            _ => unreachable!("{how}"),
        }
    }

    /// At once, by a watch on the node.
    fn notices_outside_end_within(ttl: Duration) -> Duration {
        ttl / 2
    }

    fn restart(&mut self) {
        self.kill(0);
        ZooKeeper::restart(self, 0);
        self.wait_ready();
    }

    const HAS_LINK: bool = true;
    const HAS_SERVER: bool = true;
    /// Sessions are timed by the server's monotonic clock.
    const JUDGES_BY_ITS_CLOCK: bool = false;
    const REPLICAS: usize = 1;

    fn link(&self) -> String {
        self.endpoint(0)
    }

    fn url_through(&self, port: u16) -> String {
        format!("zk://127.0.0.1:{port}")
    }

    fn pause_server(&self) {
        signal(self.pid(0), libc::SIGSTOP);
    }

    fn resume_server(&self) {
        signal(self.pid(0), libc::SIGCONT);
    }

    /// `fast`: SIGTERM, the JVM's orderly exit; `immediate`: SIGKILL.
    const RESTORES: bool = true;

    fn save_state(&mut self) {
        self.back_up();
    }

    /// From an older data directory; ZooKeeper has no way to restore above.
    /// (Its holder learns its session is gone when its client connects
    /// again, which may come after its deadline: the default bound, the TTL.)
    fn restore_state(&mut self, bump: bool) {
        assert!(!bump, "ZooKeeper restores only as it was");
        self.restore_backup();
    }

    fn restart_server(&mut self, how: &str) {
        if how == "fast" {
            terminate(self.pid(0));
        }
        self.kill(0);
        ZooKeeper::restart(self, 0);
        self.wait_ready();
    }

    /// Its elect sees the node go at once, by a watch.
    /// 100 ms after its elect notices, by a watch: milliseconds, more on a
    /// busy machine or through a follower.
    fn forced_break_overlap(_ttl: Duration) -> Duration {
        Duration::from_millis(150)
    }

    const SPEAKS: &'static str = "ZooKeeper";

    fn url_at(host_port: &str) -> String {
        format!("zk://{host_port}")
    }
}

/// Poll until the store has `n` contenders for `lock`.
pub fn wait_contenders<S: StoreUnderTest>(store: &S, lock: &str, n: usize) {
    let what = format!("{n} contenders for {lock}");
    super::eventually(&what, 10 * SECOND, || match store.contenders(lock) {
        found if found == n => Ok(()),
        found => Err(format!("found {found}")),
    })
}

/// Tokens rise; one by one if the store counts them.
pub fn assert_rising<S: StoreUnderTest>(tokens: &[u64], what: &str) {
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "{what}: tokens must rise: {tokens:?}"
    );
    if S::CONSECUTIVE_TOKENS {
        assert!(
            tokens.windows(2).all(|w| w[1] == w[0] + 1),
            "{what}: a counter hands out every token in turn: {tokens:?}"
        );
    }
}

/// PostgreSQL behind a PgBouncer that pools by transaction: no LISTEN, no
/// session state between statements; the server's faults are PostgreSQL's.
pub struct Pooled {
    // Dropped first: the bouncer before its server.
    pub bouncer: PgBouncer,
    pub pg: Postgres,
}

impl StoreUnderTest for Pooled {
    const NAME: &'static str = "pgbouncer";
    const OUTSIDE_ENDS: &'static [&'static str] = <Postgres as StoreUnderTest>::OUTSIDE_ENDS;
    const CONSECUTIVE_TOKENS: bool = true;

    fn start(scenario: &str) -> Pooled {
        let pg = <Postgres as StoreUnderTest>::start(scenario);
        Pooled {
            bouncer: PgBouncer::start(&pg, "transaction"),
            pg,
        }
    }

    const WAITS_FOR_A_STANDBY: bool = true;

    fn lose_the_synchronous_standby(&mut self) {
        self.pg.lose_the_synchronous_standby();
    }

    fn waiting_for_the_standby(&self) -> usize {
        self.pg.waiting_for_the_standby()
    }

    /// Through the bouncer, the password in the URL.
    fn url(&self) -> String {
        self.url_through(self.bouncer.port())
    }

    fn contenders(&self, lock: &str) -> usize {
        self.pg.contenders(lock)
    }

    fn unrelated_write(&self) {
        self.pg.unrelated_write();
    }

    fn assert_empty(&self) {
        self.pg.assert_empty();
    }

    fn key_fits(&self, lock: &str, lease: &str, key: &str) -> bool {
        self.pg.key_fits(lock, lease, key)
    }

    fn lease_id_fits(lease: &str, elect: i32) -> bool {
        Postgres::lease_id_fits(lease, elect)
    }

    fn end_lease_from_outside(&self, lock: &str, holder: &Held, how: &str) {
        self.pg.end_lease_from_outside(lock, holder, how);
    }

    /// At the next renewal, which comes every TTL/3: no NOTIFY through a pooler.
    fn notices_outside_end_within(ttl: Duration) -> Duration {
        ttl / 2
    }

    /// The server behind the bouncer crashes and recovers; the bouncer stays.
    fn restart(&mut self) {
        StoreUnderTest::restart(&mut self.pg);
    }

    const HAS_LINK: bool = true;
    const HAS_SERVER: bool = true;
    const JUDGES_BY_ITS_CLOCK: bool = true;
    const REPLICAS: usize = 1;

    fn link(&self) -> String {
        format!("127.0.0.1:{}", self.bouncer.port())
    }

    fn url_through(&self, port: u16) -> String {
        self.pg.url_through(port)
    }

    /// PostgreSQL behind the bouncer, which goes on taking connections.
    fn pause_server(&self) {
        self.pg.pause_server();
    }

    fn resume_server(&self) {
        self.pg.resume_server();
    }

    fn restart_server(&mut self, how: &str) {
        self.pg.restart_server(how);
    }

    /// Its elect learns at its next renewal, within TTL/3.
    fn forced_break_overlap(ttl: Duration) -> Duration {
        ttl / 3 + Duration::from_millis(100)
    }

    const SPEAKS: &'static str = "PostgreSQL";

    fn url_at(host_port: &str) -> String {
        <Postgres as StoreUnderTest>::url_at(host_port)
    }

    fn start_with_a_steppable_clock(scenario: &str) -> Pooled {
        let pg = Postgres::start_with_a_steppable_clock(scenario);
        Pooled {
            bouncer: PgBouncer::start(&pg, "transaction"),
            pg,
        }
    }

    fn step_clock(&self, lock: &str, offset: &str) {
        StoreUnderTest::step_clock(&self.pg, lock, offset);
    }
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
fn terminate(pid: i32) {
    signal(pid, libc::SIGTERM);
    let give_up = Instant::now() + 30 * SECOND;
    while super::alive(pid) && Instant::now() < give_up {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `sig` to `root`, then to each of its children.
fn signal_tree(root: i32, sig: i32) {
    signal(root, sig);
    let children =
        std::fs::read_to_string(format!("/proc/{root}/task/{root}/children")).unwrap_or_default();
    for child in children.split_whitespace().filter_map(|c| c.parse().ok()) {
        // One that ended meanwhile is no matter.
        // SAFETY: plain kill(2).
        unsafe { libc::kill(child, sig) };
    }
}

/// A real server of another kind than the one under test, and how elect
/// names what answered there.
pub struct OtherServer {
    /// As elect names it: "this is not etcd: it answered like `name`".
    pub name: &'static str,
    pub host_port: String,
    _running: Box<dyn std::any::Any>,
}

/// Every real store server but `S`'s own kind (PostgreSQL with a PgBouncer
/// in front of it too), started now: where a URL of kind `S` must not pass
/// for a store.
pub fn other_servers<S: StoreUnderTest>() -> Vec<OtherServer> {
    let mut others = Vec::new();
    if S::NAME != "etcd" {
        let etcd = Etcd::start();
        others.push(OtherServer {
            name: "etcd",
            host_port: etcd.endpoint.clone(),
            _running: Box::new(etcd),
        });
    }
    if S::NAME != "postgres" {
        let pg = Postgres::start();
        let bouncer = super::PgBouncer::start(&pg, "transaction");
        others.push(OtherServer {
            name: "PostgreSQL",
            host_port: format!("127.0.0.1:{}", bouncer.port()),
            _running: Box::new(bouncer),
        });
        others.push(OtherServer {
            name: "PostgreSQL",
            host_port: format!("127.0.0.1:{}", pg.port()),
            _running: Box::new(pg),
        });
    }
    if S::NAME != "mariadb" {
        let db = MariaDb::start();
        others.push(OtherServer {
            name: "MySQL or MariaDB",
            host_port: format!("127.0.0.1:{}", db.port()),
            _running: Box::new(db),
        });
    }
    if S::NAME != "zookeeper" {
        let zk = ZooKeeper::start();
        others.push(OtherServer {
            name: "ZooKeeper",
            host_port: zk.endpoint(0),
            _running: Box::new(zk),
        });
    }
    others
}

/// How many members the replicated set-ups have: the smallest quorum that
/// survives the loss of one.
pub const MEMBERS: usize = 3;

/// Member `i`'s `127.0.0.1:PORT` joined into a URL's list.
fn endpoints_of<S: StoreUnderTest>(store: &S, members: &[usize]) -> String {
    let endpoints: Vec<String> = members.iter().map(|&i| store.member_endpoint(i)).collect();
    endpoints.join(",")
}

/// etcd: a cluster of three members, each in a network namespace of its
/// own, so that one can be cut off from the others (`support/netns.rs`).
/// The whole store's faults (its link, its server paused or restarted) are
/// the single member's, `etcd::`; these are its members'.
pub struct EtcdCluster(pub Etcd);

impl StoreUnderTest for EtcdCluster {
    const NAME: &'static str = "etcd_cluster";
    const OUTSIDE_ENDS: &'static [&'static str] = <Etcd as StoreUnderTest>::OUTSIDE_ENDS;
    const CONSECUTIVE_TOKENS: bool = false;

    fn start(_scenario: &str) -> EtcdCluster {
        EtcdCluster(Etcd::start_with(super::EtcdOptions {
            members: MEMBERS,
            isolable: true,
            ..super::EtcdOptions::default()
        }))
    }

    fn url(&self) -> String {
        self.0.url()
    }

    fn contenders(&self, lock: &str) -> usize {
        self.0.contenders(lock)
    }

    fn unrelated_write(&self) {
        self.0.unrelated_write();
    }

    fn assert_empty(&self) {
        self.0.assert_empty();
    }

    fn key_fits(&self, lock: &str, lease: &str, key: &str) -> bool {
        self.0.key_fits(lock, lease, key)
    }

    fn lease_id_fits(lease: &str, elect: i32) -> bool {
        Etcd::lease_id_fits(lease, elect)
    }

    fn end_lease_from_outside(&self, lock: &str, holder: &Held, how: &str) {
        self.0.end_lease_from_outside(lock, holder, how);
    }

    fn notices_outside_end_within(ttl: Duration) -> Duration {
        Etcd::notices_outside_end_within(ttl)
    }

    /// Every member crashes and comes back.
    fn restart(&mut self) {
        for i in 0..MEMBERS {
            self.0.kill(i);
        }
        for i in 0..MEMBERS {
            self.0.restart(i);
        }
        self.0.wait_healthy();
    }

    const HAS_LINK: bool = false;
    const HAS_SERVER: bool = false;
    const JUDGES_BY_ITS_CLOCK: bool = false;
    const REPLICAS: usize = MEMBERS;

    fn forced_break_overlap(ttl: Duration) -> Duration {
        Etcd::forced_break_overlap(ttl)
    }

    const SPEAKS: &'static str = "etcd";

    fn url_at(host_port: &str) -> String {
        Etcd::url_at(host_port)
    }

    fn leader(&self) -> usize {
        self.0.wait_leader()
    }

    fn kill_member(&mut self, i: usize) {
        self.0.kill(i);
    }

    fn restart_member(&mut self, i: usize) {
        self.0.restart(i);
    }

    fn wait_serving(&mut self) {
        self.0.wait_healthy();
    }

    /// The proxy on the loopback into its namespace.
    fn member_endpoint(&self, i: usize) -> String {
        self.0.endpoints()[i].clone()
    }

    fn url_of(&self, members: &[usize]) -> String {
        format!("etcd://{}", endpoints_of(self, members))
    }

    /// On the bridge between the members' namespaces.
    fn isolate_member(&self, i: usize) {
        self.0.isolate(i);
    }

    fn heal_member(&self, i: usize) {
        self.0.heal(i);
    }

    /// A keep-alive is forwarded to the leader, which times the lease
    /// from when it arrives, after elect sent it: never.
    fn cut_off_with_its_member_overlap(_ttl: Duration) -> Duration {
        Duration::ZERO
    }
}

/// ZooKeeper: an ensemble of three servers, each reaching the others
/// through proxies that can cut it off (`ZooKeeper::ensemble_with_links`).
/// The whole store's faults are the single server's, `zookeeper::`; these
/// are its members'.
pub struct Ensemble(pub ZooKeeper);

impl StoreUnderTest for Ensemble {
    const NAME: &'static str = "zookeeper_ensemble";
    const OUTSIDE_ENDS: &'static [&'static str] = <ZooKeeper as StoreUnderTest>::OUTSIDE_ENDS;
    const CONSECUTIVE_TOKENS: bool = false;

    fn start(_scenario: &str) -> Ensemble {
        Ensemble(ZooKeeper::ensemble_with_links(MEMBERS))
    }

    fn url(&self) -> String {
        self.0.url()
    }

    fn contenders(&self, lock: &str) -> usize {
        self.0.contenders(lock)
    }

    fn unrelated_write(&self) {
        self.0.unrelated_write();
    }

    fn assert_empty(&self) {
        self.0.assert_empty();
    }

    fn key_fits(&self, lock: &str, lease: &str, key: &str) -> bool {
        self.0.key_fits(lock, lease, key)
    }

    fn lease_id_fits(lease: &str, elect: i32) -> bool {
        ZooKeeper::lease_id_fits(lease, elect)
    }

    fn end_lease_from_outside(&self, lock: &str, holder: &Held, how: &str) {
        self.0.end_lease_from_outside(lock, holder, how);
    }

    fn notices_outside_end_within(ttl: Duration) -> Duration {
        ZooKeeper::notices_outside_end_within(ttl)
    }

    /// Every server crashes and comes back.
    fn restart(&mut self) {
        for i in 0..MEMBERS {
            self.0.kill(i);
        }
        for i in 0..MEMBERS {
            ZooKeeper::restart(&mut self.0, i);
        }
        self.0.wait_ready();
    }

    const HAS_LINK: bool = false;
    const HAS_SERVER: bool = false;
    const JUDGES_BY_ITS_CLOCK: bool = false;
    const REPLICAS: usize = MEMBERS;

    fn forced_break_overlap(ttl: Duration) -> Duration {
        ZooKeeper::forced_break_overlap(ttl)
    }

    const SPEAKS: &'static str = "ZooKeeper";

    fn url_at(host_port: &str) -> String {
        ZooKeeper::url_at(host_port)
    }

    fn leader(&self) -> usize {
        self.0.wait_leader()
    }

    fn kill_member(&mut self, i: usize) {
        self.0.kill(i);
    }

    fn restart_member(&mut self, i: usize) {
        ZooKeeper::restart(&mut self.0, i);
    }

    fn wait_serving(&mut self) {
        self.0.wait_ready();
    }

    fn member_endpoint(&self, i: usize) -> String {
        self.0.endpoint(i)
    }

    fn url_of(&self, members: &[usize]) -> String {
        format!("zk://{}", endpoints_of(self, members))
    }

    /// By the proxies between the servers.
    fn isolate_member(&self, i: usize) {
        self.0.isolate(i);
    }

    fn heal_member(&self, i: usize) {
        self.0.heal(i);
    }
}

/// Kubernetes: a namespace of its own on the kube-apiserver the suites
/// share ([`super::kube::shared`]), or a server of its own for a scenario
/// that stops or restarts it.
pub struct KubeStore {
    server: KubeServer,
    pub namespace: String,
    context: String,
}

enum KubeServer {
    Shared(&'static Kube),
    Own(Box<Kube>),
}

impl KubeStore {
    pub fn kube(&self) -> &Kube {
        match &self.server {
            KubeServer::Shared(k) => k,
            KubeServer::Own(k) => k,
        }
    }

    fn own(&mut self) -> &mut Kube {
        match &mut self.server {
            KubeServer::Own(k) => k,
            KubeServer::Shared(_) => {
                panic!("the shared kube-apiserver is not one scenario's to stop")
            }
        }
    }

    fn leases(&self) -> String {
        format!(
            "/apis/coordination.k8s.io/v1/namespaces/{}/leases",
            self.namespace
        )
    }

    /// Every Lease of the namespace.
    pub fn all_leases(&self) -> Vec<serde_json::Value> {
        let (code, body) = self.kube().request("GET", &self.leases(), None);
        assert_eq!(code, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        v["items"].as_array().cloned().unwrap_or_default()
    }

    /// Every lock's records' ConfigMap (history and waiters) in the
    /// namespace, as the API server lists them by their label.
    pub fn records_maps(&self) -> Vec<serde_json::Value> {
        let (code, body) = self.kube().request(
            "GET",
            &format!(
                "/api/v1/namespaces/{}/configmaps?labelSelector=elect%2Frecords-of",
                self.namespace
            ),
            None,
        );
        assert_eq!(code, 200, "{body}");
        let list: serde_json::Value = serde_json::from_str(&body).unwrap();
        list["items"].as_array().cloned().unwrap_or_default()
    }

    /// The Lease of `lock` (elect names it so where it can).
    pub fn lease(&self, lock: &str) -> Option<serde_json::Value> {
        self.all_leases().into_iter().find(|l| {
            l["metadata"]["annotations"]["elect/lock"] == lock
                && l["metadata"]["annotations"]["elect/record"].is_null()
                && l["metadata"]["labels"]["elect/waiters-of"].is_null()
        })
    }

    /// Whether `lease` is held and was renewed within its duration, by the
    /// machine's wall clock.
    fn live(lease: &serde_json::Value) -> bool {
        let holder = lease["spec"]["holderIdentity"].as_str().unwrap_or("");
        let Some(renewed) = lease["spec"]["renewTime"]
            .as_str()
            .and_then(|t| humantime::parse_rfc3339(t).ok())
        else {
            return false;
        };
        let secs = lease["spec"]["leaseDurationSeconds"].as_u64().unwrap_or(1);
        !holder.is_empty() && renewed + Duration::from_secs(secs) > std::time::SystemTime::now()
    }

    /// The Lease of `lock` as a renewal of its holder's left it, read as
    /// soon as one was seen (its `renewTime` moved on).
    fn after_a_renewal(&self, lock: &str) -> serde_json::Value {
        let renewed = |l: &serde_json::Value| l["spec"]["renewTime"].clone();
        let before = renewed(&self.lease(lock).expect("a Lease held"));
        super::eventually("a renewal of the Lease", 10 * SECOND, || {
            let lease = self.lease(lock).ok_or("no Lease")?;
            match renewed(&lease) == before {
                true => Err(format!("renewTime still {before}")),
                false => Ok(lease),
            }
        })
    }

    /// PUT `change` of `lock`'s Lease, from its current version.
    fn change_lease(&self, lock: &str, change: impl Fn(&mut serde_json::Value)) {
        super::eventually(&format!("the Lease of {lock} changed"), 10 * SECOND, || {
            let mut lease = self.lease(lock).ok_or("no Lease")?;
            change(&mut lease);
            let name = lease["metadata"]["name"].as_str().unwrap().to_string();
            let (code, body) = self.kube().request(
                "PUT",
                &format!("{}/{name}", self.leases()),
                Some(&lease.to_string()),
            );
            match code {
                200 => Ok(()),
                _ => Err(body),
            }
        })
    }
}

/// The scenarios that stop or restart the server, and the one that runs 24
/// elects at once ("shards", whose load made the shared server answer the
/// other tests' requests late): each gets one of its own.
const KUBE_OF_ITS_OWN: &[&str] = &[
    "checkpoint-kept",
    "server-",
    "restart-",
    "shards",
    "restored",
];

impl StoreUnderTest for KubeStore {
    /// Each waiter watches every shard's Lease and renews a record beside
    /// it: 16 waiters of 8 shards on one API server, on two cores that run
    /// the rest of the suite too, made renewals at a 3 s TTL late enough to
    /// lose a shard now and then.
    fn crowd_ttl_secs() -> u64 {
        6
    }

    const NAME: &'static str = "k8s";
    const OUTSIDE_ENDS: &'static [&'static str] = &["take over the Lease", "let go of the Lease"];
    /// Tokens are resource versions: etcd's revisions.
    const CONSECUTIVE_TOKENS: bool = false;

    fn start(scenario: &str) -> KubeStore {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let slug: String = scenario
            .chars()
            .map(|c| match c.is_ascii_alphanumeric() {
                true => c.to_ascii_lowercase(),
                false => '-',
            })
            .take(40)
            .collect();
        let namespace = format!("t{n}-{}", slug.trim_matches('-'));
        let own = KUBE_OF_ITS_OWN.iter().any(|s| scenario.contains(s));
        let (server, context) = match own {
            true => {
                let kube = Kube::start(&namespace);
                let context = format!("own-{n}");
                kube.register(&context);
                (KubeServer::Own(Box::new(kube)), context)
            }
            false => (
                KubeServer::Shared(super::kube::shared()),
                "shared".to_string(),
            ),
        };
        let store = KubeStore {
            server,
            namespace,
            context,
        };
        store.kube().create_namespace(&store.namespace);
        store
    }

    const FETCHES_CREDENTIALS: bool = true;

    /// An exec plugin, in a kubeconfig of its own.
    fn credentials_from(
        &self,
        dir: &TempDir,
        name: &str,
        body: &str,
        expires_in: u64,
    ) -> Credentials {
        let config =
            self.kube()
                .exec_plugin_kubeconfig(dir, name, body, expires_in, &self.namespace);
        Credentials {
            url: format!("k8s:{}", self.namespace),
            env: vec![("KUBECONFIG".into(), config.display().to_string())],
            program: dir.join(&format!("{name}.sh")),
        }
    }

    const RESTORES: bool = true;

    /// A snapshot of the API server's etcd.
    fn save_state(&mut self) {
        self.own().etcd().save_snapshot();
    }

    /// The API server's etcd restored as `etcdutl snapshot restore` does by
    /// default, then the API server started again, as Kubernetes' restore
    /// guide has it.
    fn restore_state(&mut self, bump: bool) {
        assert!(
            !bump,
            "the API server's etcd is restored here only as it was"
        );
        let kube = self.own();
        kube.etcd().restore_snapshot(false);
        kube.restart("immediate");
    }

    fn url(&self) -> String {
        format!("k8s:{}?context={}", self.namespace, self.context)
    }

    fn shown(&self) -> String {
        format!("k8s:{}@{}", self.namespace, self.context)
    }

    /// The Lease's live holder, and the live waiters' records: keys
    /// `waiter.<session id>` of the lock's records' ConfigMap.
    fn contenders(&self, lock: &str) -> usize {
        let holder = self.lease(lock).is_some_and(|l| Self::live(&l));
        let now = std::time::SystemTime::now();
        let waiters = self
            .records_maps()
            .iter()
            .filter(|m| m["metadata"]["annotations"]["elect/lock"] == lock)
            .flat_map(|m| m["data"].as_object().cloned().unwrap_or_default())
            .filter(|(key, _)| key.starts_with("waiter."))
            .filter(|(_, value)| {
                let w: serde_json::Value =
                    serde_json::from_str(value.as_str().unwrap_or("")).unwrap_or_default();
                let renewed = w["renewed"]
                    .as_str()
                    .and_then(|t| humantime::parse_rfc3339(t).ok());
                let seconds = w["seconds"].as_u64().unwrap_or(0);
                renewed.is_some_and(|r| r + Duration::from_secs(seconds) > now)
            })
            .count();
        usize::from(holder) + waiters
    }

    fn unrelated_write(&self) {
        let body = r#"{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"unrelated"},"spec":{}}"#;
        let (code, out) = self.kube().request("POST", &self.leases(), Some(body));
        assert!(code == 201 || code == 409, "{out}");
        let (code, out) =
            self.kube()
                .request("DELETE", &format!("{}/unrelated", self.leases()), None);
        assert_eq!(code, 200, "{out}");
    }

    fn assert_empty(&self) {
        assert_eq!(
            self.all_leases(),
            Vec::<serde_json::Value>::new(),
            "no Lease was written"
        );
    }

    fn key_fits(&self, _lock: &str, lease: &str, key: &str) -> bool {
        key.rsplit_once('_')
            .is_some_and(|(_, tenure)| tenure == lease)
    }

    /// The tenure: 64 random bits in hex.
    fn lease_id_fits(lease: &str, _elect: i32) -> bool {
        lease.len() == 16 && u64::from_str_radix(lease, 16).is_ok()
    }

    fn end_lease_from_outside(&self, lock: &str, _holder: &Held, how: &str) {
        let past = humantime::format_rfc3339_micros(std::time::SystemTime::now() - 10 * SECOND)
            .to_string();
        match how {
            // By a taker that is gone at once: its Lease lapses.
            "take over the Lease" => self.change_lease(lock, |l| {
                l["spec"]["holderIdentity"] = "outsider".into();
                l["spec"]["leaseDurationSeconds"] = 1.into();
                l["spec"]["renewTime"] = past.clone().into();
            }),
            "let go of the Lease" => self.change_lease(lock, |l| {
                l["spec"]["holderIdentity"] = "".into();
                l["spec"]["leaseDurationSeconds"] = 1.into();
            }),
            _ => unreachable!("{how}"),
        }
    }

    /// At once, by a watch on the Lease.
    fn notices_outside_end_within(ttl: Duration) -> Duration {
        ttl / 2
    }

    fn restart(&mut self) {
        self.own().restart("immediate");
    }

    const HAS_LINK: bool = true;
    const HAS_SERVER: bool = true;
    /// A Lease is taken only once seen unchanged for its duration on the
    /// taker's own clock: no server clock is trusted.
    const JUDGES_BY_ITS_CLOCK: bool = false;
    const REPLICAS: usize = 1;

    fn link(&self) -> String {
        self.kube().url.trim_start_matches("https://").to_string()
    }

    /// A context of the tests' kubeconfig for the proxy, with this server's
    /// CA (its certificate names 127.0.0.1) and token.
    fn url_through(&self, port: u16) -> String {
        let context = format!("{}-via-{port}", self.context);
        super::kube::register_at(&context, &format!("https://127.0.0.1:{port}"), self.kube());
        format!("k8s:{}?context={context}", self.namespace)
    }

    fn pause_server(&self) {
        signal(self.kube().pid(), libc::SIGSTOP);
    }

    fn resume_server(&self) {
        signal(self.kube().pid(), libc::SIGCONT);
    }

    fn restart_server(&mut self, how: &str) {
        self.own().restart(how);
    }

    /// Its elect sees the Lease taken at once, by its watch.
    fn forced_break_overlap(_ttl: Duration) -> Duration {
        Duration::from_millis(300)
    }

    /// Anyone with `update` or `delete` on Leases.
    const HAS_FOREIGN_WRITERS: bool = true;

    /// `kubectl delete lease`.
    fn delete_record(&self, lock: &str) {
        let lease = self.after_a_renewal(lock);
        let name = lease["metadata"]["name"].as_str().unwrap();
        let (code, body) =
            self.kube()
                .request("DELETE", &format!("{}/{name}", self.leases()), None);
        assert_eq!(code, 200, "{body}");
    }

    /// `kubectl edit lease`: `leaseDurationSeconds` 1, the rest as read.
    fn shorten_record(&self, lock: &str) {
        super::eventually("the Lease shortened", 10 * SECOND, || {
            let mut lease = self.after_a_renewal(lock);
            lease["spec"]["leaseDurationSeconds"] = 1.into();
            let name = lease["metadata"]["name"].as_str().unwrap().to_string();
            match self.kube().request(
                "PUT",
                &format!("{}/{name}", self.leases()),
                Some(&lease.to_string()),
            ) {
                (200, _) => Ok(()),
                (_, body) => Err(body),
            }
        })
    }

    const SPEAKS: &'static str = "Kubernetes";

    fn url_at(host_port: &str) -> String {
        format!("k8s:?context={}", super::kube::context_at(host_port))
    }
}
