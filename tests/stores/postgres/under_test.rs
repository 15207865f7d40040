//! PostgreSQL as the shared suites see it: a server of its own
//! ([`Postgres`]), and one behind a PgBouncer pooling by transaction
//! ([`Pooled`]).

use std::time::{Duration, Instant};

use super::server::{PASSWORD, PgBouncer, Postgres};
use crate::suites::{Held, StoreUnderTest};
use crate::support::SECOND;
use crate::support::process::signal_tree;

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
