//! A real etcd on free loopback ports, in its own temp dir: one member (a
//! cluster of one) or several, whose members can be killed and restarted:
//! a member crash, the leader's included, and the loss of quorum are
//! faults a lock must live through (or fail safely in).
//!
//! Members keep their data directory and ports across a restart, as a real
//! member that reboots does, so a restarted member rejoins its cluster.
//! The directory, with each member's log, is kept when a test panics.
//!
//! With [`EtcdOptions::isolable`], each member runs in a network namespace
//! of its own (`support/netns.rs`), its peers on a private bridge, its
//! clients through a proxy on the loopback: [`Etcd::isolate`] then cuts one
//! member off from the others, as a partition does.

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::support::certs::Certs;
use crate::support::netns::Network;
use crate::support::proxy::Proxy;
use crate::support::tools::{free_port, tool};

/// How long a member (or the cluster) may take to become healthy.
const HEALTHY_WITHIN: Duration = Duration::from_secs(20);

/// How to start a test etcd beyond the defaults.
#[derive(Clone)]
pub struct EtcdOptions {
    /// How many members; 1 unless told.
    pub members: usize,
    /// Serve clients over TLS with these certificates, and require client certificates.
    pub tls: Option<Certs>,
    /// More flags for every member.
    pub args: Vec<String>,
    /// Raft heartbeat interval and election timeout, in milliseconds. Short
    /// by default (10 and 100) so that 1 s leases are allowed.
    pub heartbeat_ms: u32,
    pub election_ms: u32,
    /// Each member in a network namespace of its own, so that
    /// [`Etcd::isolate`] can cut it off (see the module's doc).
    pub isolable: bool,
    /// The etcd program; else `ELECT_TEST_ETCD` or `etcd` on the PATH.
    pub binary: Option<std::path::PathBuf>,
}

impl Default for EtcdOptions {
    fn default() -> EtcdOptions {
        EtcdOptions {
            members: 1,
            tls: None,
            args: Vec::new(),
            heartbeat_ms: 10,
            election_ms: 100,
            isolable: false,
            binary: None,
        }
    }
}

struct Member {
    name: String,
    /// `127.0.0.1:PORT`: where its clients reach it.
    client: String,
    /// Where it listens for them: `client`, or its own loopback in its
    /// namespace, which `_gate` forwards `client` to.
    listen_client: String,
    _gate: Option<Proxy>,
    /// `http://127.0.0.1:PORT`
    peer: String,
    process: Option<Child>,
}

pub struct Etcd {
    /// The first member's client address, `127.0.0.1:PORT`: all of a
    /// single-member etcd's.
    pub endpoint: String,
    members: Vec<Member>,
    initial_cluster: String,
    dir: PathBuf,
    options: EtcdOptions,
    /// `root:PASSWORD` once authentication is enabled.
    root: Option<String>,
    /// The members' namespaces, when isolable; dropped after the members.
    network: Option<Network>,
}

impl Etcd {
    /// One member with the default options.
    pub fn start() -> Etcd {
        Etcd::start_with(EtcdOptions::default())
    }

    /// `members` members with the default options.
    pub fn cluster(members: usize) -> Etcd {
        Etcd::start_with(EtcdOptions {
            members,
            ..EtcdOptions::default()
        })
    }

    /// Start every member and wait until each is healthy. A member that
    /// exits while starting (a port taken meanwhile) makes it start again
    /// on other ports.
    pub fn start_with(options: EtcdOptions) -> Etcd {
        assert!(options.members > 0, "an etcd of no members");
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        const ATTEMPTS: usize = 5;
        for attempt in 1..=ATTEMPTS {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let dir =
                std::env::temp_dir().join(format!("elect-test-etcd-{}-{n}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            let network = options.isolable.then(|| Network::new(options.members));
            let members: Vec<Member> = (0..options.members)
                .map(|i| match &network {
                    None => {
                        let client = format!("127.0.0.1:{}", free_port());
                        Member {
                            name: format!("m{i}"),
                            listen_client: client.clone(),
                            client,
                            _gate: None,
                            peer: format!("http://127.0.0.1:{}", free_port()),
                            process: None,
                        }
                    }
                    // Alone in its namespace: the usual ports are free.
                    Some(network) => {
                        let listen_client = "127.0.0.1:2379".to_string();
                        let gate = network.gate(i, &listen_client);
                        Member {
                            name: format!("m{i}"),
                            client: format!("127.0.0.1:{}", gate.port),
                            listen_client,
                            _gate: Some(gate),
                            peer: format!("http://{}:2380", network.address(i)),
                            process: None,
                        }
                    }
                })
                .collect();
            let initial_cluster = members
                .iter()
                .map(|m| format!("{}={}", m.name, m.peer))
                .collect::<Vec<_>>()
                .join(",");
            let mut etcd = Etcd {
                endpoint: members[0].client.clone(),
                members,
                initial_cluster,
                dir,
                options: options.clone(),
                root: None,
                network,
            };
            for i in 0..etcd.size() {
                etcd.launch(i);
            }
            match etcd.healthy_within(HEALTHY_WITHIN) {
                Ok(()) => return etcd,
                // The logs stay: dropped while panicking.
                Err(e) if attempt == ATTEMPTS => panic!("etcd did not start: {e}"),
                // Dropped: killed, its directory removed; try other ports.
                Err(_) => continue,
            }
        }
        unreachable!()
    }

    fn launch(&mut self, i: usize) {
        let etcd = self
            .options
            .binary
            .clone()
            .unwrap_or_else(|| tool("ELECT_TEST_ETCD", "etcd", "etcd-server"));
        let scheme = match self.options.tls {
            Some(_) => "https",
            None => "http",
        };
        let m = &self.members[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("{}.log", m.name)))
            .unwrap();
        let client_url = format!("{scheme}://{}", m.client);
        let listen_client_url = format!("{scheme}://{}", m.listen_client);
        let mut command = Command::new(&etcd);
        if let Some(network) = &self.network {
            network.enter(&mut command, i);
        }
        if let Some(tls) = &self.options.tls {
            command
                .arg("--cert-file")
                .arg(&tls.server_cert)
                .arg("--key-file")
                .arg(&tls.server_key)
                .arg("--trusted-ca-file")
                .arg(&tls.ca)
                .arg("--client-cert-auth");
        }
        let process = command
            .args(&self.options.args)
            .args(["--name", &m.name, "--data-dir"])
            .arg(self.dir.join(&m.name))
            .args(["--listen-client-urls", &listen_client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &m.peer])
            .args(["--initial-advertise-peer-urls", &m.peer])
            .args(["--initial-cluster", &self.initial_cluster])
            .args(["--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", &self.dir.to_string_lossy()])
            .args([
                "--heartbeat-interval",
                &self.options.heartbeat_ms.to_string(),
            ])
            .args(["--election-timeout", &self.options.election_ms.to_string()])
            .args(["--logger", "zap", "--log-level", "error"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", etcd.display()));
        self.members[i].process = Some(process);
    }

    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// The members' client addresses, `127.0.0.1:PORT`.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(|m| m.client.clone()).collect()
    }

    /// `etcd://a,b,c` (`etcds://` with TLS) straight to the members.
    pub fn url(&self) -> String {
        let scheme = match self.options.tls {
            Some(_) => "etcds",
            None => "etcd",
        };
        format!("{scheme}://{}", self.endpoints().join(","))
    }

    /// The pid of the first member (all of a single-member etcd).
    pub fn pid(&self) -> i32 {
        let first = self.members[0].process.as_ref();
        first.expect("the first member is down").id() as i32
    }

    pub fn is_up(&self, i: usize) -> bool {
        self.members[i].process.is_some()
    }

    pub fn up(&self) -> Vec<usize> {
        (0..self.size()).filter(|&i| self.is_up(i)).collect()
    }

    /// SIGKILL member `i`: a crash, no goodbye to its peers.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut process) = self.members[i].process.take() {
            let _ = process.kill();
            let _ = process.wait();
        }
    }

    /// Cut member `i` off from every other member, silently (packets
    /// vanish); its clients still reach it. Needs [`EtcdOptions::isolable`].
    pub fn isolate(&self, i: usize) {
        self.network().isolate(i);
    }

    /// Undo [`Etcd::isolate`]; do not wait.
    pub fn heal(&self, i: usize) {
        self.network().heal(i);
    }

    fn network(&self) -> &Network {
        self.network
            .as_ref()
            .expect("started without EtcdOptions::isolable")
    }

    /// SIGSTOP member `i`: alive to TCP, deaf to its peers and clients.
    pub fn pause(&self, i: usize) {
        self.signal(i, nix::sys::signal::Signal::SIGSTOP);
    }

    /// SIGCONT member `i` after [`Etcd::pause`].
    pub fn resume(&self, i: usize) {
        self.signal(i, nix::sys::signal::Signal::SIGCONT);
    }

    fn signal(&self, i: usize, signal: nix::sys::signal::Signal) {
        let process = self.members[i].process.as_ref();
        let pid = process.unwrap_or_else(|| panic!("member {i} is down")).id();
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal)
            .unwrap_or_else(|e| panic!("{signal} to member {i}: {e}"));
    }

    /// Start member `i` again on its old data and ports; do not wait.
    pub fn restart(&mut self, i: usize) {
        if !self.is_up(i) {
            self.launch(i);
        }
    }

    /// A snapshot of the single member's data, as an operator's backup
    /// takes it (`etcdctl snapshot save`), into this etcd's directory.
    pub fn save_snapshot(&self) {
        assert_eq!(self.members.len(), 1, "a snapshot of a single member");
        let file = self.dir.join("backup.db");
        let out = self
            .etcdctl_command()
            .args(["snapshot", "save"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "etcdctl snapshot save: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The single member killed, its data replaced by the snapshot saved as an
    /// operator restores a backup, and started again; waits until it is
    /// healthy. With `bump`, `--bump-revision 1000000000 --mark-compacted`
    /// (etcd 3.5 and later, `ELECT_TEST_ETCDUTL`), else as
    /// `etcdctl`/`etcdutl snapshot restore` do by default: the revision goes
    /// back to the snapshot's.
    pub fn restore_snapshot(&mut self, bump: bool) {
        assert_eq!(self.members.len(), 1, "a restore of a single member");
        let snapshot = self.dir.join("backup.db");
        self.kill(0);
        let m = &self.members[0];
        let data = self.dir.join(&m.name);
        std::fs::remove_dir_all(&data).unwrap();
        // etcdutl restores from 3.5 on (etcdctl no longer does from 3.6);
        // etcd 3.4 has only etcdctl's.
        let mut restore = match std::env::var_os("ELECT_TEST_ETCDUTL") {
            Some(etcdutl) => Command::new(etcdutl),
            None => {
                assert!(!bump, "--bump-revision needs etcdutl (ELECT_TEST_ETCDUTL)");
                let mut c = Command::new(tool("ELECT_TEST_ETCDCTL", "etcdctl", "etcd-client"));
                c.env("ETCDCTL_API", "3");
                c
            }
        };
        restore
            .args(["snapshot", "restore"])
            .arg(&snapshot)
            .arg("--data-dir")
            .arg(&data)
            .args(["--name", &m.name])
            .args(["--initial-cluster", &self.initial_cluster])
            .args(["--initial-cluster-token", &self.dir.to_string_lossy()])
            .args(["--initial-advertise-peer-urls", &m.peer]);
        if bump {
            restore.args(["--bump-revision", "1000000000", "--mark-compacted"]);
        }
        let out = restore.output().unwrap();
        assert!(
            out.status.success(),
            "snapshot restore: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        self.restart(0);
        self.wait_healthy();
    }

    /// etcdctl against `endpoints`, with the certificates and the root
    /// user if there are any, and no arguments yet.
    fn etcdctl_to(&self, endpoints: &[String]) -> Command {
        let mut c = Command::new(tool("ELECT_TEST_ETCDCTL", "etcdctl", "etcd-client"));
        c.env("ETCDCTL_API", "3")
            .args(["--endpoints", &endpoints.join(",")]);
        if let Some(tls) = &self.options.tls {
            c.arg("--cacert")
                .arg(&tls.ca)
                .arg("--cert")
                .arg(&tls.client_cert)
                .arg("--key")
                .arg(&tls.client_key);
        }
        if let Some(root) = &self.root {
            c.args(["--user", root]);
        }
        c
    }

    /// etcdctl against every member that is up, without arguments yet.
    pub fn etcdctl_command(&self) -> Command {
        let up: Vec<String> = self
            .up()
            .into_iter()
            .map(|i| self.members[i].client.clone())
            .collect();
        let mut c = self.etcdctl_to(&up);
        c.args(["--dial-timeout", "2s"]);
        c
    }

    /// etcdctl against every member that is up.
    pub fn etcdctl(&self, args: &[&str]) -> Output {
        self.etcdctl_command().args(args).output().unwrap()
    }

    /// etcdctl against member `i` alone, quick to give up: it may be down.
    fn etcdctl_at(&self, i: usize, args: &[&str]) -> Output {
        self.etcdctl_to(&[self.members[i].client.clone()])
            .args(["--dial-timeout", "1s", "--command-timeout", "2s"])
            .args(args)
            .output()
            .unwrap()
    }

    fn member_healthy(&self, i: usize) -> bool {
        self.is_up(i) && self.etcdctl_at(i, &["endpoint", "health"]).status.success()
    }

    /// Poll until every member that is up is healthy; Err if one exits.
    fn healthy_within(&mut self, within: Duration) -> Result<(), String> {
        let give_up = Instant::now() + within;
        loop {
            for m in &mut self.members {
                if let Some(p) = &mut m.process
                    && let Ok(Some(status)) = p.try_wait()
                {
                    return Err(format!(
                        "etcd member {} exited ({status}); see {}",
                        m.name,
                        self.dir.display()
                    ));
                }
            }
            if self.up().iter().all(|&i| self.member_healthy(i)) {
                return Ok(());
            }
            if Instant::now() >= give_up {
                return Err(format!(
                    "etcd members {:?} not healthy within {within:?}; logs in {}",
                    self.up(),
                    self.dir.display()
                ));
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Poll until every member that is up is healthy (which needs a quorum).
    pub fn wait_healthy(&mut self) {
        if let Err(e) = self.healthy_within(HEALTHY_WITHIN) {
            panic!("{e}");
        }
    }

    /// The index of the member that is the Raft leader, by its own report
    /// (`etcdctl endpoint status`): `leader` equals its own `member_id`.
    pub fn leader(&self) -> Option<usize> {
        self.up().into_iter().find(|&i| {
            let out = self.etcdctl_at(i, &["endpoint", "status", "-w", "json"]);
            let Ok(json) = serde_json::from_slice::<serde_json::Value>(&out.stdout) else {
                return false;
            };
            let status = &json[0]["Status"];
            let me = status["header"]["member_id"].as_u64();
            me.is_some() && status["leader"].as_u64() == me
        })
    }

    /// Poll for the leader.
    pub fn wait_leader(&self) -> usize {
        crate::support::eventually("an etcd leader", HEALTHY_WITHIN, || {
            self.leader().ok_or_else(|| "none".to_string())
        })
    }

    /// Turn authentication on: a root user, and `user` with `password`
    /// allowed to read and write keys under `prefix` only.
    pub fn enable_auth(&mut self, user: &str, password: &str, prefix: &str) {
        let ok = |args: &[&str]| {
            let out = self.etcdctl(args);
            assert!(
                out.status.success(),
                "etcdctl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        ok(&["user", "add", "root:root-pw", "--interactive=false"]);
        ok(&["role", "add", "locks"]);
        ok(&[
            "role",
            "grant-permission",
            "locks",
            "--prefix=true",
            "readwrite",
            prefix,
        ]);
        ok(&[
            "user",
            "add",
            &format!("{user}:{password}"),
            "--interactive=false",
        ]);
        ok(&["user", "grant-role", user, "locks"]);
        ok(&["auth", "enable"]);
        self.root = Some("root:root-pw".into());
    }

    /// Keys under `prefix`, in create order; Err with etcdctl's complaint
    /// if etcd cannot say (no quorum, say).
    pub fn try_keys(&self, prefix: &str) -> Result<Vec<String>, String> {
        let out = self.etcdctl(&["get", "--prefix", "--keys-only", "--sort-by=CREATE", prefix]);
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect())
    }

    /// Keys under `prefix`, in create order.
    pub fn keys(&self, prefix: &str) -> Vec<String> {
        self.try_keys(prefix)
            .unwrap_or_else(|e| panic!("etcdctl get: {e}"))
    }

    /// Poll until `prefix` has `n` keys: etcd has no "tell me when", short of a watch.
    pub fn wait_keys(&self, prefix: &str, n: usize) {
        let what = format!("{n} keys under {prefix}");
        crate::support::eventually(&what, Duration::from_secs(10), || {
            let keys = self.keys(prefix);
            match keys.len() == n {
                true => Ok(()),
                false => Err(format!("found {keys:?}")),
            }
        })
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        for i in 0..self.size() {
            self.kill(i);
        }
        if !thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
