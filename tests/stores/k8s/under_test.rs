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
    /// The token elect reaches the API server with: the tests' own, or
    /// its service account's ([`AS_A_SERVICE_ACCOUNT`]).
    token: String,
    /// The request that keeps elect's priority level busy
    /// ([`KubeStore::reach_the_connection_limit`]).
    stalled: Option<std::process::Child>,
}

impl Drop for KubeStore {
    fn drop(&mut self) {
        if let Some(mut stalled) = self.stalled.take() {
            let _ = stalled.kill();
            let _ = stalled.wait();
        }
    }
}

enum KubeServer {
    Shared(&'static Kube),
    Own(Box<Kube>),
}

impl KubeServer {
    fn kube(&self) -> &Kube {
        match self {
            KubeServer::Shared(k) => k,
            KubeServer::Own(k) => k,
        }
    }
}

impl KubeStore {
    pub fn kube(&self) -> &Kube {
        self.server.kube()
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

/// The scenarios in which elect reaches the API server as a service
/// account of its namespace with only the rights it needs, as in a pod:
/// the tests' own user, of `system:masters`, is exempt from API Priority
/// and Fairness, which can turn a service account away for load.
const AS_A_SERVICE_ACCOUNT: &[&str] = &["connection-limit"];

/// The service account elect is in those scenarios.
const ACCOUNT: &str = "elect";

/// The names of the priority level and the FlowSchema that turn elect's
/// service account away ([`KubeStore::reach_the_connection_limit`]).
fn crowding(namespace: &str) -> String {
    format!("elect-crowded-{namespace}")
}

impl KubeStore {
    /// The service account [`ACCOUNT`] in the namespace, with a Role of
    /// every right elect uses on Leases and ConfigMaps: its token.
    fn service_account(&self) -> String {
        let ns = &self.namespace;
        let kube = self.kube();
        let create = |path: &str, body: String| {
            let (code, out) = kube.request("POST", path, Some(&body));
            assert_eq!(code, 201, "POST {path}: {out}");
            out
        };
        create(
            &format!("/api/v1/namespaces/{ns}/serviceaccounts"),
            format!(
                r#"{{"apiVersion":"v1","kind":"ServiceAccount","metadata":{{"name":"{ACCOUNT}"}}}}"#
            ),
        );
        create(
            &format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles"),
            format!(
                r#"{{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{{"name":"{ACCOUNT}"}},"rules":[{{"apiGroups":["coordination.k8s.io"],"resources":["leases"],"verbs":["get","list","watch","create","update","patch","delete"]}},{{"apiGroups":[""],"resources":["configmaps"],"verbs":["get","list","watch","create","update","patch","delete"]}}]}}"#
            ),
        );
        create(
            &format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings"),
            format!(
                r#"{{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{{"name":"{ACCOUNT}"}},"roleRef":{{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"{ACCOUNT}"}},"subjects":[{{"kind":"ServiceAccount","name":"{ACCOUNT}","namespace":"{ns}"}}]}}"#
            ),
        );
        let out = create(
            &format!("/api/v1/namespaces/{ns}/serviceaccounts/{ACCOUNT}/token"),
            r#"{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"expirationSeconds":3600}}"#.to_string(),
        );
        let answer: serde_json::Value = serde_json::from_str(&out).unwrap();
        answer["status"]["token"].as_str().expect(&out).to_string()
    }

    /// curl with elect's token and the server's CA, and no arguments yet.
    fn curl_as_elect(&self) -> std::process::Command {
        let kube = self.kube();
        let mut c = std::process::Command::new(crate::support::tools::tool(
            "ELECT_TEST_CURL",
            "curl",
            "curl",
        ));
        c.args(["-sS", "--cacert"])
            .arg(&kube.certs.ca)
            .args(["-H", &format!("Authorization: Bearer {}", self.token)]);
        c
    }

    /// A read of the namespace's Leases as elect's account: the HTTP
    /// status, the `Retry-After` and the priority level (its UID) the API
    /// server's API Priority and Fairness gave it.
    fn read_as_elect(&self) -> (u16, Option<String>, Option<String>) {
        let out = self
            .curl_as_elect()
            .args(["--max-time", "10", "-o", "/dev/null", "-D", "-"])
            .arg(format!("{}{}", self.kube().url, self.leases()))
            .output()
            .expect("curl");
        let head = String::from_utf8_lossy(&out.stdout);
        let status = head
            .lines()
            .next()
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let header = |wanted: &str| {
            head.lines().find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case(wanted)
                    .then(|| value.trim().to_string())
            })
        };
        (
            status,
            header("retry-after"),
            header("x-kubernetes-pf-prioritylevel-uid"),
        )
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
        let token = server.kube().token.clone();
        let mut store = KubeStore {
            server,
            namespace,
            context,
            token,
            stalled: None,
        };
        store.kube().create_namespace(&store.namespace);
        if AS_A_SERVICE_ACCOUNT.iter().any(|s| scenario.contains(s)) {
            store.token = store.service_account();
            store.context = format!("{}-{ACCOUNT}-{n}", store.context);
            kube::register_as(&store.context, store.kube(), &store.token);
        }
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

    /// API Priority and Fairness, as a loaded API server applies it: a
    /// priority level of no seats, none lent or borrowed, that rejects
    /// what it cannot run, and a FlowSchema that puts elect's service
    /// account there, ahead of every other but `exempt`. A level runs one
    /// request beyond its seats while it runs none (its guard against
    /// starvation): another of the account's, a create whose body never
    /// comes, keeps it running one, as a crowd of the account's would.
    /// Done once a read as the account is answered 429 with a
    /// `Retry-After`.
    const LIMITS_CONNECTIONS: bool = true;
    const AT_THE_LIMIT_SAYS: &'static str = "429 Too Many Requests";

    fn reach_the_connection_limit(&mut self) {
        let name = crowding(&self.namespace);
        let flowcontrol = "/apis/flowcontrol.apiserver.k8s.io/v1";
        let level = format!(
            r#"{{"apiVersion":"flowcontrol.apiserver.k8s.io/v1","kind":"PriorityLevelConfiguration","metadata":{{"name":"{name}"}},"spec":{{"type":"Limited","limited":{{"nominalConcurrencyShares":0,"lendablePercent":0,"borrowingLimitPercent":0,"limitResponse":{{"type":"Reject"}}}}}}}}"#
        );
        let (code, out) = self.kube().request(
            "POST",
            &format!("{flowcontrol}/prioritylevelconfigurations"),
            Some(&level),
        );
        assert_eq!(code, 201, "{out}");
        let level: serde_json::Value = serde_json::from_str(&out).unwrap();
        let uid = level["metadata"]["uid"].as_str().unwrap().to_string();
        let schema = format!(
            r#"{{"apiVersion":"flowcontrol.apiserver.k8s.io/v1","kind":"FlowSchema","metadata":{{"name":"{name}"}},"spec":{{"priorityLevelConfiguration":{{"name":"{name}"}},"matchingPrecedence":2,"rules":[{{"subjects":[{{"kind":"ServiceAccount","serviceAccount":{{"name":"{ACCOUNT}","namespace":"{}"}}}}],"resourceRules":[{{"verbs":["*"],"apiGroups":["*"],"resources":["*"],"namespaces":["*"]}}]}}]}}}}"#,
            self.namespace
        );
        let (code, out) =
            self.kube()
                .request("POST", &format!("{flowcontrol}/flowschemas"), Some(&schema));
        assert_eq!(code, 201, "{out}");
        eventually(
            "elect's account in its priority level",
            10 * SECOND,
            || match self.read_as_elect() {
                (200, _, Some(level)) if level == uid => Ok(()),
                other => Err(format!("{other:?}")),
            },
        );
        // A body sent as it comes (chunked), from a pipe never written.
        // Alone in the level, it runs: nothing else of the account may
        // run until it does, or it is the one turned away.
        let stalled = self
            .curl_as_elect()
            .args(["-o", "/dev/null", "-X", "POST", "-T", "-"])
            .args(["-H", "Content-Type: application/json", "-H", "Expect:"])
            .arg(format!(
                "{}/api/v1/namespaces/{}/configmaps",
                self.kube().url,
                self.namespace
            ))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("curl");
        let mut stalled = stalled;
        eventually(
            "the stalled create running in its level",
            10 * SECOND,
            || {
                if let Some(status) = stalled.try_wait().unwrap() {
                    panic!("the stalled create ended: {status}");
                }
                let dump = "/debug/api_priority_and_fairness/dump_requests";
                match self.kube().request("GET", dump, None) {
                    (200, requests)
                        if requests.lines().any(|l| l.starts_with(&format!("{name},"))) =>
                    {
                        Ok(())
                    }
                    other => Err(format!("{other:?}")),
                }
            },
        );
        self.stalled = Some(stalled);
        eventually(
            "elect's account refused for load",
            10 * SECOND,
            || match self.read_as_elect() {
                (429, Some(after), _) => Ok(after),
                other => Err(format!("{other:?}")),
            },
        );
    }

    /// The stalled create ended, the FlowSchema and its level deleted,
    /// until a read as elect's account is answered again.
    fn lift_the_connection_limit(&mut self) {
        if let Some(mut stalled) = self.stalled.take() {
            let _ = stalled.kill();
            let _ = stalled.wait();
        }
        let name = crowding(&self.namespace);
        let flowcontrol = "/apis/flowcontrol.apiserver.k8s.io/v1";
        for kind in ["flowschemas", "prioritylevelconfigurations"] {
            let (code, out) =
                self.kube()
                    .request("DELETE", &format!("{flowcontrol}/{kind}/{name}"), None);
            assert_eq!(code, 200, "{out}");
        }
        eventually(
            "elect's account answered again",
            10 * SECOND,
            || match self.read_as_elect() {
                (200, ..) => Ok(()),
                other => Err(format!("{other:?}")),
            },
        );
    }

    const SPEAKS: &'static str = "Kubernetes";

    fn url_at(host_port: &str) -> String {
        format!("k8s:?context={}", kube::context_at(host_port))
    }
}
