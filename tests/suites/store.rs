//! Every store as the shared suites see it: [`StoreUnderTest`] says how to
//! start a store, look into it without elect, end a holder's lease from
//! outside, and where stores legitimately differ. Each store's impl is
//! beside its server, in `tests/stores/STORE/under_test.rs`.

// As in `support`: the trait offers more than today's scenarios call.
#![allow(dead_code)]

use std::path::PathBuf;
use std::time::Duration;

use crate::stores::etcd::Etcd;
use crate::stores::mysql::MariaDb;
use crate::stores::postgres::{PgBouncer, Postgres};
use crate::stores::zookeeper::ZooKeeper;
use crate::support::{SECOND, TempDir, eventually};

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

    // What the store can suffer, and how (`every_fault.rs`); a
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
    /// MySQL's `max_connections`, a role's connection limit), or requests
    /// for load (an API server's 429 Too Many Requests).
    const LIMITS_CONNECTIONS: bool = false;
    /// What elect's line says when the limit turned it away.
    const AT_THE_LIMIT_SAYS: &'static str = "connection limit";
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

/// What a store of one server has not: members.
fn no_members<S: StoreUnderTest>() -> ! {
    unreachable!("{} keeps its data on one server: no members", S::NAME)
}

/// Poll until the store has `n` contenders for `lock`.
pub fn wait_contenders<S: StoreUnderTest>(store: &S, lock: &str, n: usize) {
    let what = format!("{n} contenders for {lock}");
    eventually(&what, 10 * SECOND, || match store.contenders(lock) {
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
        let bouncer = PgBouncer::start(&pg, "transaction");
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
pub fn endpoints_of<S: StoreUnderTest>(store: &S, members: &[usize]) -> String {
    let endpoints: Vec<String> = members.iter().map(|&i| store.member_endpoint(i)).collect();
    endpoints.join(",")
}
