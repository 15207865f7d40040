//! A store's server as a fleet figure sees it: what it counts of the
//! requests it served, by its own counters, and its processes, for the CPU
//! it spent. Each store the tests start ([`StoreUnderTest`]) is one impl.

use std::time::{Duration, Instant};

use super::procfs;
use crate::stores::etcd::Etcd;
use crate::stores::etcd::http::Metrics;
use crate::stores::k8s::KubeStore;
use crate::stores::mysql::MariaDb;
use crate::stores::postgres::Postgres;
use crate::stores::zookeeper::ZooKeeper;
use crate::suites::StoreUnderTest;

/// A store server started for a figure.
pub trait Served: StoreUnderTest {
    /// What [`Served::requests`] counts, for the report.
    const REQUESTS: &'static str;

    /// Requests served since the server started, by its own counter.
    fn requests(&self) -> Result<f64, String>;

    /// The server's processes; each one's descendants are counted too.
    fn server_pids(&self) -> Vec<i32>;

    /// How long the counter may lag behind the requests it counts.
    const LAG: Duration = Duration::ZERO;

    /// A new server for the fleet figures, able to serve `clients` elects.
    fn for_fleet(figure: &str, clients: usize) -> Self {
        let _ = clients;
        Self::start(figure)
    }
}

/// A reading of a server: its request counter and CPU time, and when.
#[derive(Clone, Copy)]
pub struct Reading {
    pub at: Instant,
    pub requests: f64,
    pub cpu: Duration,
}

impl Reading {
    pub fn take<S: Served>(store: &S) -> Result<Reading, String> {
        let requests = store.requests()?;
        let family = procfs::family();
        let cpu = store
            .server_pids()
            .into_iter()
            .map(|pid| procfs::tree_cpu(pid, &family))
            .sum();
        Ok(Reading {
            at: Instant::now(),
            requests,
            cpu,
        })
    }

    /// Requests per second and CPU (share of one core) from `self` to `later`.
    pub fn rates(&self, later: &Reading) -> (f64, f64) {
        let secs = (later.at - self.at).as_secs_f64();
        (
            (later.requests - self.requests) / secs,
            later.cpu.saturating_sub(self.cpu).as_secs_f64() / secs,
        )
    }
}

impl Served for Etcd {
    const REQUESTS: &'static str = "gRPC messages received";

    /// Every gRPC message, a lease keep-alive on its stream included.
    fn requests(&self) -> Result<f64, String> {
        let metrics = Metrics::scrape(&self.endpoint).map_err(|e| e.to_string())?;
        Ok(metrics.sum("grpc_server_msg_received_total", |_| true))
    }

    fn server_pids(&self) -> Vec<i32> {
        vec![self.pid()]
    }
}

impl Served for Postgres {
    const REQUESTS: &'static str = "statements (pg_stat_statements)";

    /// Statements elect's role ran in its database, as
    /// `pg_stat_statements` counts them as each ends (`pg_stat_database`
    /// lags by up to 10 s, and counts autovacuum's and the readings' own
    /// transactions): these readings, run as the superuser, are not among
    /// them.
    fn requests(&self) -> Result<f64, String> {
        let n = self.try_psql(
            "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements s \
             JOIN pg_roles r ON r.oid = s.userid JOIN pg_database d ON d.oid = s.dbid \
             WHERE r.rolname = 'elect' AND d.datname = 'elect'",
        )?;
        n.parse()
            .map_err(|e| format!("pg_stat_statements says {n:?}: {e}"))
    }

    fn server_pids(&self) -> Vec<i32> {
        vec![self.pid()]
    }

    /// The tests' server, counting statements, with room for two
    /// connections for each elect (itself and its guard), whichever it uses
    /// (it allows 200).
    fn for_fleet(_figure: &str, clients: usize) -> Postgres {
        let pg = Postgres::start();
        pg.psql("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'");
        let wanted = 2 * clients + 50;
        if wanted > 200 {
            pg.psql(&format!("ALTER SYSTEM SET max_connections = {wanted}"));
        }
        pg.restart("fast");
        pg.psql("CREATE EXTENSION pg_stat_statements");
        pg
    }
}

impl Served for MariaDb {
    const REQUESTS: &'static str = "statements (USER_STATISTICS)";

    /// Statements account `elect` ran, by MariaDB's per-user statistics
    /// (`userstat`): `SELECT_COMMANDS + UPDATE_COMMANDS + OTHER_COMMANDS`
    /// of `information_schema.USER_STATISTICS`, updated as each command
    /// ends. A text query and an execution of a prepared statement count
    /// one each, and so do the `SELECT @@max_allowed_packet,@@wait_timeout`
    /// and the `SET SESSION`s its client sends on connecting; preparing a
    /// statement, `SHOW`s, pings and the handshake do not. These readings,
    /// run as root, are not among them (`Questions` would count them,
    /// every client's statements, and each prepare besides).
    fn requests(&self) -> Result<f64, String> {
        let n = self.try_sql(
            "SELECT coalesce(sum(SELECT_COMMANDS + UPDATE_COMMANDS + OTHER_COMMANDS), 0) \
             FROM information_schema.USER_STATISTICS WHERE USER = 'elect'",
        )?;
        n.parse()
            .map_err(|e| format!("USER_STATISTICS says {n:?}: {e}"))
    }

    /// mariadbd, which serves every connection on a thread of its own.
    fn server_pids(&self) -> Vec<i32> {
        vec![self.pid()]
    }

    /// The tests' server, keeping per-user statistics, with room for two
    /// connections for each elect (itself and its guard), whichever it uses
    /// (it allows 400).
    fn for_fleet(_figure: &str, clients: usize) -> MariaDb {
        let mut args = vec!["--userstat=1".to_string()];
        let wanted = 2 * clients + 50;
        if wanted > 400 {
            args.push(format!("--max-connections={wanted}"));
        }
        MariaDb::start_with_args(Vec::new(), args)
    }
}

impl Served for ZooKeeper {
    const REQUESTS: &'static str = "packets received (mntr)";

    /// A heap that holds `clients` sessions beside the tests' own.
    fn for_fleet(_figure: &str, clients: usize) -> ZooKeeper {
        ZooKeeper::start_with_heap(crate::stores::zookeeper::HEAP_MIB + clients / 16)
    }

    /// Every packet, session pings (a session's renewal) included.
    fn requests(&self) -> Result<f64, String> {
        let mntr = self
            .four_letter(0, "mntr")
            .ok_or("ZooKeeper does not answer mntr")?;
        mntr.lines()
            .find_map(|l| l.strip_prefix("zk_packets_received"))
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| format!("no zk_packets_received in mntr: {mntr}"))
    }

    fn server_pids(&self) -> Vec<i32> {
        vec![self.pid(0)]
    }
}

impl Served for KubeStore {
    const REQUESTS: &'static str = "API requests (apiserver_request_total)";

    /// Every request the API server answered, its own loopback clients'
    /// and this scrape's included.
    fn requests(&self) -> Result<f64, String> {
        let (code, body) = self.kube().request("GET", "/metrics", None);
        if code != 200 {
            return Err(format!("GET /metrics: {code} {body}"));
        }
        Ok(Metrics::parse(&body).sum("apiserver_request_total", |_| true))
    }

    /// kube-apiserver and the etcd behind it: both are the store's cost.
    fn server_pids(&self) -> Vec<i32> {
        vec![self.kube().pid(), self.kube().etcd_pid()]
    }

    /// A server of its own ("server-" in the name), not the tests' shared one.
    fn for_fleet(figure: &str, _clients: usize) -> KubeStore {
        KubeStore::start(&format!("server-{figure}"))
    }
}
