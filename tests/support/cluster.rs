//! etcd as one node or as a cluster of three on loopback, whose members can
//! be killed and restarted: a member crash, the leader's included, and the
//! loss of quorum are faults a lock must live through (or fail safely in).
//!
//! Members keep their data directory and ports across a restart, as a real
//! member that reboots does, so a restarted member rejoins its cluster.

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::{free_port, tool};

/// How long a member (or the cluster) may take to become healthy.
const HEALTHY_WITHIN: Duration = Duration::from_secs(20);

struct Member {
    name: String,
    client: String,
    peer: String,
    process: Option<Child>,
}

pub struct Cluster {
    members: Vec<Member>,
    initial_cluster: String,
    dir: PathBuf,
}

impl Cluster {
    /// Start `size` members and wait until every one of them is healthy.
    pub fn start(size: usize) -> Cluster {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("elect-test-cluster-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let members: Vec<Member> = (0..size)
            .map(|i| Member {
                name: format!("m{i}"),
                client: format!("127.0.0.1:{}", free_port()),
                peer: format!("http://127.0.0.1:{}", free_port()),
                process: None,
            })
            .collect();
        let initial_cluster = members
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = Cluster {
            members,
            initial_cluster,
            dir,
        };
        for i in 0..size {
            cluster.launch(i);
        }
        cluster.wait_healthy();
        cluster
    }

    fn launch(&mut self, i: usize) {
        let etcd = tool("ELECT_TEST_ETCD", "etcd", "etcd-server");
        let m = &self.members[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("{}.log", m.name)))
            .unwrap();
        let client_url = format!("http://{}", m.client);
        let process = Command::new(&etcd)
            .args(["--name", &m.name, "--data-dir"])
            .arg(self.dir.join(&m.name))
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &m.peer])
            .args(["--initial-advertise-peer-urls", &m.peer])
            .args(["--initial-cluster", &self.initial_cluster])
            .args(["--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", &self.dir.to_string_lossy()])
            .args(["--heartbeat-interval", "10", "--election-timeout", "100"])
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

    /// `etcd://a,b,c` straight to the members.
    pub fn url(&self) -> String {
        format!("etcd://{}", self.endpoints().join(","))
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

    /// Start member `i` again on its old data and ports; do not wait.
    pub fn restart(&mut self, i: usize) {
        if !self.is_up(i) {
            self.launch(i);
        }
    }

    fn etcdctl_at(&self, endpoints: &[String], args: &[&str]) -> Output {
        Command::new(tool("ELECT_TEST_ETCDCTL", "etcdctl", "etcd-client"))
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", &endpoints.join(","), "--dial-timeout", "1s"])
            .args(["--command-timeout", "2s"])
            .args(args)
            .output()
            .unwrap()
    }

    /// etcdctl against every member that is up.
    pub fn etcdctl(&self, args: &[&str]) -> Output {
        let up: Vec<String> = self
            .up()
            .into_iter()
            .map(|i| self.members[i].client.clone())
            .collect();
        self.etcdctl_at(&up, args)
    }

    fn member_healthy(&self, i: usize) -> bool {
        self.is_up(i)
            && self
                .etcdctl_at(&[self.members[i].client.clone()], &["endpoint", "health"])
                .status
                .success()
    }

    /// Poll until every member that is up is healthy (which needs a quorum).
    pub fn wait_healthy(&mut self) {
        let give_up = Instant::now() + HEALTHY_WITHIN;
        loop {
            for m in &mut self.members {
                if let Some(p) = &mut m.process
                    && let Ok(Some(status)) = p.try_wait()
                {
                    panic!(
                        "etcd member {} exited ({status}); see {}",
                        m.name,
                        self.dir.display()
                    );
                }
            }
            if self.up().iter().all(|&i| self.member_healthy(i)) {
                return;
            }
            assert!(
                Instant::now() < give_up,
                "etcd members {:?} not healthy within {HEALTHY_WITHIN:?}; logs in {}",
                self.up(),
                self.dir.display()
            );
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// The index of the member that is the Raft leader, by its own report
    /// (`etcdctl endpoint status`): `leader` equals its own `member_id`.
    pub fn leader(&self) -> Option<usize> {
        self.up().into_iter().find(|&i| {
            let out = self.etcdctl_at(
                &[self.members[i].client.clone()],
                &["endpoint", "status", "-w", "json"],
            );
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
        let give_up = Instant::now() + HEALTHY_WITHIN;
        loop {
            if let Some(i) = self.leader() {
                return i;
            }
            assert!(Instant::now() < give_up, "no etcd leader");
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Keys under `prefix`, in create order; None if the cluster cannot say.
    pub fn keys(&self, prefix: &str) -> Option<Vec<String>> {
        let out = self.etcdctl(&["get", "--prefix", "--keys-only", "--sort-by=CREATE", prefix]);
        out.status.success().then(|| {
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter(|l| !l.is_empty())
                .map(str::to_string)
                .collect()
        })
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.size() {
            self.kill(i);
        }
        if !thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
