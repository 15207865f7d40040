//! ZooKeeper as the shared suites see it: one server ([`ZooKeeper`]), and
//! an ensemble of three ([`Ensemble`]) for its members' faults.

use std::time::Duration;

use super::server::ZooKeeper;
use crate::suites::{Held, MEMBERS, StoreUnderTest, endpoints_of};
use crate::support::process::{signal, terminate};

/// ZooKeeper: one server.
impl StoreUnderTest for ZooKeeper {
    const NAME: &'static str = "zookeeper";
    const OUTSIDE_ENDS: &'static [&'static str] = &["delete the lock node"];
    /// Tokens are czxids: zxids of the whole ensemble.
    const CONSECUTIVE_TOKENS: bool = false;

    fn start(scenario: &str) -> ZooKeeper {
        match scenario.contains("connection-limit") {
            // ZooKeeper's own default is 60; fewer to hold open.
            true => ZooKeeper::start_with("maxClientCnxns=8\n"),
            false => ZooKeeper::start(),
        }
    }

    /// `maxClientCnxns`: the server closes every connection from an
    /// address beyond that many, unanswered; every client here is on
    /// 127.0.0.1.
    const LIMITS_CONNECTIONS: bool = true;
    const AT_THE_LIMIT_SAYS: &'static str = "maxClientCnxns";

    /// Every connection the limit lets 127.0.0.1 have, held by the test:
    /// found when the server closes one more unanswered.
    fn reach_the_connection_limit(&mut self) {
        let held = self.take_every_connection();
        assert!(held > 0, "no session before the limit");
    }

    fn lift_the_connection_limit(&mut self) {
        self.free_connections();
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
