//! The Kubernetes store as the shared suites see it: a namespace of its
//! own on a kube-apiserver ([`KubeStore`]).

use std::time::Duration;

use super::server::{self as kube, Kube};
use crate::suites::{Credentials, Held, StoreUnderTest};
use crate::support::process::signal;
use crate::support::{SECOND, TempDir, eventually};

/// Kubernetes: a namespace of its own on the kube-apiserver the suites
/// share ([`kube::shared`]), or a server of its own for a scenario
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
        eventually("a renewal of the Lease", 10 * SECOND, || {
            let lease = self.lease(lock).ok_or("no Lease")?;
            match renewed(&lease) == before {
                true => Err(format!("renewTime still {before}")),
                false => Ok(lease),
            }
        })
    }

    /// PUT `change` of `lock`'s Lease, from its current version.
    fn change_lease(&self, lock: &str, change: impl Fn(&mut serde_json::Value)) {
        eventually(&format!("the Lease of {lock} changed"), 10 * SECOND, || {
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
            false => (KubeServer::Shared(kube::shared()), "shared".to_string()),
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
        kube::register_at(&context, &format!("https://127.0.0.1:{port}"), self.kube());
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
        eventually("the Lease shortened", 10 * SECOND, || {
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
        format!("k8s:?context={}", kube::context_at(host_port))
    }
}
