//! The MySQL store as the shared suites see it, on a MariaDB of its own.

use std::time::{Duration, Instant};

use super::server::{MariaDb, PASSWORD};
use crate::suites::{Held, StoreUnderTest};
use crate::support::SECOND;
use crate::support::process::signal_tree;

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
            PASSWORD
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
