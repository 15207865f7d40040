//! Every store as the shared suites see it: [`StoreUnderTest`] says how to
//! start a store, look into it without elect, end a holder's lease from
//! outside, and where stores legitimately differ. `tests/behaviour.rs` and
//! `tests/every_fault.rs` run each of their scenarios against every impl.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::{Etcd, Postgres, SECOND, TempDir, ZooKeeper};

/// What a scenario knows of a holder whose lease it ends from outside: its
/// command's ELECT_LEASE_ID and ELECT_KEY.
pub struct Held {
    pub lease: String,
    pub key: String,
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
    /// How many contenders for `lock`, its holder and its waiters, the store
    /// has, as the store itself (not elect) tells.
    fn contenders(&self, lock: &str) -> usize;
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
    /// Whether the lock lives in a descriptor that the command's processes
    /// share: then it cannot pass while any of them lives, even with elect
    /// and its guard dead. Else it passes when the lease expires.
    fn held_by_the_commands_descriptors() -> bool {
        false
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
}

/// The `file:` store in a directory of its own.
pub struct FileStore(pub TempDir);

impl FileStore {
    pub fn lock_file(&self, lock: &str) -> PathBuf {
        self.0.join(&format!("{}.lock", lock.replace('/', "%2F")))
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

    /// The lock file's descriptor, which the command inherits.
    fn held_by_the_commands_descriptors() -> bool {
        true
    }
}

/// PostgreSQL, over its unix socket (no password needed there).
impl StoreUnderTest for Postgres {
    const NAME: &'static str = "postgres";
    const OUTSIDE_ENDS: &'static [&'static str] = &["expire the lease row", "free the lease row"];
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
            "expire the lease row" => "expires_at = clock_timestamp() - interval '1 second'",
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
}

/// Poll until the store has `n` contenders for `lock`.
pub fn wait_contenders<S: StoreUnderTest>(store: &S, lock: &str, n: usize) {
    let give_up = Instant::now() + 10 * SECOND;
    loop {
        let found = store.contenders(lock);
        if found == n {
            return;
        }
        assert!(
            Instant::now() < give_up,
            "expected {n} contenders for {lock}, found {found}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
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
