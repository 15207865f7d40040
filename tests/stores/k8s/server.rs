//! A Kubernetes API server for the tests: kube-apiserver
//! (`ELECT_TEST_KUBE_APISERVER`, built by `scripts/servers-go build`) on a
//! free loopback port, against an etcd 3.6 of its own
//! (`ELECT_TEST_KUBE_ETCD`: Kubernetes needs at least etcd 3.5.11, newer
//! than Debian's), with the flags controller-runtime's envtest passes: a
//! serving certificate for 127.0.0.1 from the tests' CA, a service-account
//! issuer and signing key, RBAC authorization and a static token for the
//! test's user (a member of `system:masters`). [`Kube::kubeconfig`] names
//! it all for clients; [`Kube::request`] speaks to it with curl.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::stores::etcd::{Etcd, EtcdOptions};
use crate::support::TempDir;
use crate::support::certs::{self, Certs};
use crate::support::tools::free_port;

/// How long a fresh kube-apiserver may take to be ready.
const READY_WITHIN: Duration = Duration::from_secs(90);

pub struct Kube {
    process: Child,
    port: u16,
    pub dir: TempDir,
    /// `https://127.0.0.1:PORT`.
    pub url: String,
    pub token: String,
    pub certs: Certs,
    /// A kubeconfig with the server, its CA and the test's token.
    pub kubeconfig: PathBuf,
    _etcd: Etcd,
    /// Flags beyond envtest's, for every start.
    extra: Vec<String>,
}

/// The program `$env`, which scripts/servers-go builds.
fn built(env: &str) -> PathBuf {
    match std::env::var_os(env) {
        Some(path) => PathBuf::from(path),
        None => panic!(
            "{env} is not set: `eval \"$(scripts/servers-go build)\"` builds \
             kube-apiserver, the client-go contender and etcd 3.6 and names them"
        ),
    }
}

/// The client-go contender (`tests/servers/kube-*/main.go`).
pub fn contender() -> PathBuf {
    built("ELECT_TEST_KUBE_CONTENDER")
}

fn openssl(dir: &std::path::Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("`openssl` not found: install Debian's openssl package");
    assert!(out.status.success(), "openssl {args:?}: {out:?}");
}

impl Kube {
    pub fn start(name: &str) -> Kube {
        Kube::start_with(name, &[])
    }

    /// [`Kube::start`] with `extra` flags (feature gates).
    pub fn start_with(name: &str, extra: &[&str]) -> Kube {
        let extra: Vec<String> = extra.iter().map(|f| f.to_string()).collect();
        let etcd = Etcd::start_with(EtcdOptions {
            binary: Some(built("ELECT_TEST_KUBE_ETCD")),
            ..EtcdOptions::default()
        });
        let dir = TempDir::new(&format!("kube-{name}"));
        let certs = certs::generate(&format!("kube-{name}"));
        openssl(&dir.0, &["genrsa", "-out", "sa.key", "2048"]);
        openssl(
            &dir.0,
            &["rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub"],
        );
        let token = format!("elect-test-{}", std::process::id());
        std::fs::write(
            dir.join("tokens.csv"),
            format!(
                "{token},elect-test,elect-test-uid,\"system:masters\"\n\
                 reader-{token},reader,reader-uid\n"
            ),
        )
        .unwrap();
        let port = free_port();
        let url = format!("https://127.0.0.1:{port}");
        let process = Kube::spawn(&dir, &certs, &etcd, port, &extra);
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\n\
                 clusters:\n- name: test\n  cluster:\n    server: {url}\n    certificate-authority: {}\n\
                 users:\n- name: test\n  user:\n    token: {token}\n\
                 contexts:\n- name: test\n  context:\n    cluster: test\n    user: test\n\
                 current-context: test\n",
                certs.ca.display()
            ),
        )
        .unwrap();
        let mut kube = Kube {
            process,
            port,
            dir,
            url,
            token,
            certs,
            kubeconfig,
            _etcd: etcd,
            extra,
        };
        kube.wait_ready();
        kube
    }

    /// kube-apiserver on `port`, against `etcd`.
    fn spawn(dir: &TempDir, certs: &Certs, etcd: &Etcd, port: u16, extra: &[String]) -> Child {
        let url = format!("https://127.0.0.1:{port}");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("kube-apiserver.log"))
            .unwrap();
        let path = |f: &str| dir.join(f).to_string_lossy().into_owned();
        Command::new(built("ELECT_TEST_KUBE_APISERVER"))
            .arg(format!(
                "--etcd-servers={}",
                etcd.url().replace("etcd://", "http://")
            ))
            .arg(format!("--cert-dir={}", path("serving")))
            .arg(format!("--tls-cert-file={}", certs.server_cert.display()))
            .arg(format!(
                "--tls-private-key-file={}",
                certs.server_key.display()
            ))
            .arg(format!("--client-ca-file={}", certs.ca.display()))
            .arg("--bind-address=127.0.0.1")
            .arg("--advertise-address=127.0.0.1")
            .arg(format!("--secure-port={port}"))
            .arg(format!("--service-account-issuer={url}"))
            .arg(format!("--service-account-key-file={}", path("sa.pub")))
            .arg(format!(
                "--service-account-signing-key-file={}",
                path("sa.key")
            ))
            .arg("--service-cluster-ip-range=10.0.0.0/24")
            .arg("--allow-privileged=true")
            .arg("--authorization-mode=RBAC")
            .arg(format!("--token-auth-file={}", path("tokens.csv")))
            .arg("--disable-admission-plugins=ServiceAccount")
            .args(extra)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("kube-apiserver")
    }

    /// [`Kube::start`] with an audit log of every request on Leases and
    /// ConfigMaps (the history), which [`Kube::requests_of_elect`] reads.
    pub fn start_audited(name: &str, dir: &TempDir) -> Kube {
        let policy = dir.join("audit-policy.yaml");
        std::fs::write(
            &policy,
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\n\
             rules:\n- level: Metadata\n  resources:\n  - group: coordination.k8s.io\n    \
             resources: [leases]\n  - group: \"\"\n    resources: [configmaps]\n- level: None\n",
        )
        .unwrap();
        let log = dir.join("audit.log");
        Kube::start_with(
            name,
            &[
                &format!("--audit-policy-file={}", policy.display()),
                &format!("--audit-log-path={}", log.display()),
                "--audit-log-mode=blocking",
            ],
        )
    }

    /// The Lease and ConfigMap requests elect made, by its user agent, as `VERB URI`, in
    /// order, from the audit log of a server [`Kube::start_audited`] with
    /// `dir` (each request once, a watch counted when its answer started).
    pub fn requests_of_elect(dir: &TempDir) -> Vec<String> {
        let text = std::fs::read_to_string(dir.join("audit.log")).unwrap_or_default();
        let mut seen = std::collections::HashSet::new();
        text.lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter(|e| {
                e["userAgent"]
                    .as_str()
                    .is_some_and(|a| a.starts_with("elect/"))
            })
            .filter(|e| seen.insert(e["auditID"].as_str().unwrap_or("").to_string()))
            .map(|e| {
                format!(
                    "{} {}",
                    e["verb"].as_str().unwrap_or("?"),
                    e["requestURI"].as_str().unwrap_or("?")
                )
            })
            .collect()
    }

    /// A kubeconfig for the user `reader`, of no group: the rights a test
    /// grants it by RBAC are all it has.
    pub fn kubeconfig_of_user(&self, user: &str) -> PathBuf {
        assert_eq!(user, "reader", "the static token file names only reader");
        let path = self.dir.join(&format!("kubeconfig-{user}"));
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\n\
                 clusters:\n- name: test\n  cluster:\n    server: {}\n    certificate-authority: {}\n\
                 users:\n- name: {user}\n  user:\n    token: reader-{}\n\
                 contexts:\n- name: test\n  context:\n    cluster: test\n    user: {user}\n\
                 current-context: test\n",
                self.url,
                self.certs.ca.display(),
                self.token
            ),
        )
        .unwrap();
        path
    }

    /// A kubeconfig `name` in `dir` for this server, with `cluster` and
    /// `user` as YAML lines, its context in `namespace`.
    pub fn kubeconfig_with(
        &self,
        dir: &TempDir,
        name: &str,
        cluster: &str,
        user: &str,
        namespace: &str,
    ) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\ncurrent-context: c\n\
                 clusters:\n- name: c\n  cluster:\n    server: {}\n{cluster}\
                 users:\n- name: u\n  user:\n{user}\
                 contexts:\n- name: c\n  context:\n    cluster: c\n    user: u\n    namespace: {namespace}\n",
                self.url
            ),
        )
        .unwrap();
        path
    }

    /// An exec plugin `NAME.sh` in `dir`, a shell script that runs `body`
    /// and then prints an ExecCredential with the test's token (or
    /// `$token`, if `body` sets it), expiring `expires_in` seconds after it
    /// printed it; and a kubeconfig `NAME` whose user runs it, its context
    /// in `namespace`.
    pub fn exec_plugin_kubeconfig(
        &self,
        dir: &TempDir,
        name: &str,
        body: &str,
        expires_in: u64,
        namespace: &str,
    ) -> PathBuf {
        let plugin = dir.join(&format!("{name}.sh"));
        let script =
            "#!/bin/sh\nBODY\nat=$(date -u -d \"@$(( $(date +%s) + EXPIRES ))\" +%Y-%m-%dT%H:%M:%SZ)\n\
             printf '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\
             \"status\":{\"token\":\"%s\",\"expirationTimestamp\":\"%s\"}}\\n' \"${token:-TOKEN}\" \"$at\"\n"
                .replace("BODY", body)
                .replace("EXPIRES", &expires_in.to_string())
                .replace("TOKEN", &self.token);
        std::fs::write(&plugin, script).unwrap();
        std::fs::set_permissions(&plugin, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        self.kubeconfig_with(
            dir,
            name,
            &format!("    certificate-authority: {}\n", self.certs.ca.display()),
            &format!(
                "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: {}\n      interactiveMode: Never\n",
                plugin.display()
            ),
            namespace,
        )
    }

    /// The kube-apiserver's pid.
    pub fn pid(&self) -> i32 {
        self.process.id() as i32
    }

    /// The pid of the etcd behind it.
    pub fn etcd_pid(&self) -> i32 {
        self._etcd.pid()
    }

    /// The etcd behind it.
    pub fn etcd(&mut self) -> &mut Etcd {
        &mut self._etcd
    }

    /// Stop kube-apiserver (SIGTERM, its orderly shutdown, with `fast`;
    /// else SIGKILL) and start it again on its port; return once ready.
    pub fn restart(&mut self, how: &str) {
        if how == "fast" {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(self.pid()),
                nix::sys::signal::Signal::SIGTERM,
            );
            crate::support::eventually(
                "kube-apiserver stopped",
                30 * crate::support::SECOND,
                || match self.process.try_wait().unwrap() {
                    Some(_) => Ok(()),
                    None => Err("running".to_string()),
                },
            );
        }
        let _ = self.process.kill();
        let _ = self.process.wait();
        self.process = Kube::spawn(&self.dir, &self.certs, &self._etcd, self.port, &self.extra);
        self.wait_ready();
    }

    /// Create namespace `ns`.
    pub fn create_namespace(&self, ns: &str) {
        let body = format!(
            "{{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{{\"name\":\"{ns}\"}}}}"
        );
        let (code, answer) = self.request("POST", "/api/v1/namespaces", Some(&body));
        assert!(
            code == 201 || code == 409,
            "namespace {ns}: {code} {answer}"
        );
    }

    /// Name this server `context` in the tests' one kubeconfig, which every
    /// elect the tests start reads ([`kubeconfig`]).
    pub fn register(&self, context: &str) {
        register(context, &self.url, Some(&self.certs.ca), &self.token);
    }
}

/// A context of the tests' kubeconfig for the server at `host_port`
/// (whatever answers there), with the system's CAs; its name.
pub fn context_at(host_port: &str) -> String {
    let context = format!("at-{}", host_port.replace([':', '.', '[', ']'], "-"));
    register(&context, &format!("https://{host_port}"), None, "none");
    context
}

/// A context of the tests' kubeconfig for `kube` reached at `url` (a proxy).
pub fn register_at(context: &str, url: &str, kube: &Kube) {
    register(context, url, Some(&kube.certs.ca), &kube.token);
}

/// A context of the tests' kubeconfig for `kube` with another user's
/// `token` (a service account's).
pub fn register_as(context: &str, kube: &Kube, token: &str) {
    register(context, &kube.url, Some(&kube.certs.ca), token);
}

/// Name the server at `url` `context` in the tests' one kubeconfig.
fn register(context: &str, url: &str, ca: Option<&std::path::Path>, token: &str) {
    {
        let mut contexts = CONTEXTS.lock().unwrap_or_else(|e| e.into_inner());
        contexts.retain(|(name, ..)| name != context);
        contexts.push((
            context.to_string(),
            url.to_string(),
            ca.map(PathBuf::from),
            token.to_string(),
        ));
        let mut text = String::from("apiVersion: v1\nkind: Config\nclusters:\n");
        for (name, url, ca, _) in contexts.iter() {
            text += &format!("- name: {name}\n  cluster:\n    server: {url}\n");
            if let Some(ca) = ca {
                text += &format!("    certificate-authority: {}\n", ca.display());
            }
        }
        text += "users:\n";
        for (name, _, _, token) in contexts.iter() {
            text += &format!("- name: {name}\n  user:\n    token: {token}\n");
        }
        text += "contexts:\n";
        for (name, ..) in contexts.iter() {
            text += &format!("- name: {name}\n  context:\n    cluster: {name}\n    user: {name}\n");
        }
        let path = kubeconfig_path();
        let new = path.with_extension("new");
        std::fs::write(&new, text).unwrap();
        std::fs::rename(&new, &path).unwrap();
    }
}

impl Kube {
    fn wait_ready(&mut self) {
        crate::support::eventually("kube-apiserver ready", READY_WITHIN, || {
            if let Some(status) = self.process.try_wait().unwrap() {
                panic!("kube-apiserver exited with {status}: {}", self.log_tail());
            }
            match self.request("GET", "/readyz", None).0 {
                200 => Ok(()),
                _ => Err(self.log_tail()),
            }
        })
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("kube-apiserver.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// curl with the test's token and the server's CA, and no arguments yet.
    pub fn curl(&self) -> Command {
        let mut c = Command::new(crate::support::tools::tool(
            "ELECT_TEST_CURL",
            "curl",
            "curl",
        ));
        c.args(["-sS", "--max-time", "10", "--cacert"])
            .arg(&self.certs.ca)
            .args(["-H", &format!("Authorization: Bearer {}", self.token)]);
        c
    }

    /// `method path` with `body` (JSON): the HTTP status and the body.
    pub fn request(&self, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
        self.request_in("application/json", method, path, body)
    }

    /// [`Kube::request`] with a body of another `content_type`
    /// (`application/yaml`).
    pub fn request_in(
        &self,
        content_type: &str,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> (u16, String) {
        let mut c = self.curl();
        c.args(["-X", method, "-w", "\n%{http_code}"]);
        c.args(["-H", &format!("Content-Type: {content_type}")]);
        if body.is_some() {
            c.args(["--data-binary", "@-"]);
        }
        let mut child = c
            .arg(format!("{}{path}", self.url))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("curl");
        let mut stdin = child.stdin.take().unwrap();
        if let Some(body) = body {
            stdin.write_all(body.as_bytes()).unwrap();
        }
        drop(stdin);
        let out = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
        (code.trim().parse().unwrap_or(0), body.to_string())
    }
}

/// A context of the tests' kubeconfig: its name, the server's URL, its CA
/// and the token.
type Context = (String, String, Option<PathBuf>, String);

/// Every server the tests started.
static CONTEXTS: std::sync::Mutex<Vec<Context>> = std::sync::Mutex::new(Vec::new());

fn kubeconfig_path() -> PathBuf {
    std::env::temp_dir().join(format!("elect-test-kubeconfig-{}", std::process::id()))
}

/// The kubeconfig that names every server the tests started, once one
/// did: what every elect they start is given as `KUBECONFIG`.
pub fn kubeconfig() -> Option<PathBuf> {
    let path = kubeconfig_path();
    path.exists().then_some(path)
}

/// The one kube-apiserver that the shared suites' scenarios share, each in
/// a namespace of its own; it and its etcd are killed when the tests end.
pub fn shared() -> &'static Kube {
    static SHARED: std::sync::OnceLock<Kube> = std::sync::OnceLock::new();
    SHARED.get_or_init(|| {
        let kube = Kube::start("shared");
        kube.register("shared");
        // No Drop for a static: a watchdog ends both once the tests' process is gone.
        #[allow(clippy::zombie_processes, reason = "it outlives the tests' process")]
        Command::new("sh")
            .arg("-c")
            .arg(format!(
                "while kill -0 {} 2>/dev/null; do sleep 1; done; kill -9 {} {} 2>/dev/null",
                std::process::id(),
                kube.pid(),
                kube._etcd.pid()
            ))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("sh");
        kube
    })
}

impl Drop for Kube {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}
