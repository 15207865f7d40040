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
use std::time::{Duration, Instant};

use super::certs::{self, Certs};
use super::tools::free_port;
use super::{Etcd, EtcdOptions, TempDir};

/// How long a fresh kube-apiserver may take to be ready.
const READY_WITHIN: Duration = Duration::from_secs(90);

pub struct Kube {
    process: Child,
    pub dir: TempDir,
    /// `https://127.0.0.1:PORT`.
    pub url: String,
    pub token: String,
    pub certs: Certs,
    /// A kubeconfig with the server, its CA and the test's token.
    pub kubeconfig: PathBuf,
    _etcd: Etcd,
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
            format!("{token},elect-test,elect-test-uid,\"system:masters\"\n"),
        )
        .unwrap();
        let port = free_port();
        let url = format!("https://127.0.0.1:{port}");
        let log = std::fs::File::create(dir.join("kube-apiserver.log")).unwrap();
        let path = |f: &str| dir.join(f).to_string_lossy().into_owned();
        let process = Command::new(built("ELECT_TEST_KUBE_APISERVER"))
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
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("kube-apiserver");
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
            dir,
            url,
            token,
            certs,
            kubeconfig,
            _etcd: etcd,
        };
        kube.wait_ready();
        kube
    }

    fn wait_ready(&mut self) {
        super::eventually("kube-apiserver ready", READY_WITHIN, || {
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
        let mut c = Command::new(super::tools::tool("ELECT_TEST_CURL", "curl", "curl"));
        c.args(["-sS", "--max-time", "10", "--cacert"])
            .arg(&self.certs.ca)
            .args(["-H", &format!("Authorization: Bearer {}", self.token)])
            .args(["-H", "Content-Type: application/json"]);
        c
    }

    /// `method path` with `body` (JSON): the HTTP status and the body.
    pub fn request(&self, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
        let mut c = self.curl();
        c.args(["-X", method, "-w", "\n%{http_code}"]);
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

impl Drop for Kube {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}
