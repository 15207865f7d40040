//! etcd as the shared suites see it: one member ([`Etcd`]), and a cluster
//! of three ([`EtcdCluster`]) for its members' faults.

use std::time::Duration;

use super::server::Etcd;
use crate::suites::{Held, MEMBERS, StoreUnderTest, endpoints_of};
use crate::support::process::terminate;

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
        EtcdCluster(Etcd::start_with(super::server::EtcdOptions {
            members: MEMBERS,
            isolable: true,
            ..super::server::EtcdOptions::default()
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
