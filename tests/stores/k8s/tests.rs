//! The Kubernetes store beside client-go: elect and the client-go
//! contender (`tests/servers/kube-*/main.go`, `leaderelection` with a
//! `LeaseLock`) on one Lease exclude each other both ways, measured on one
//! monotonic clock (their ticks, `support/ticker.rs`), through a clean
//! release, a SIGKILL and a partition of either (a partition of client-go
//! within the bound its timing gives); and what only this store does.

use crate::stores::k8s::KubeStore;
use crate::suites::StoreUnderTest;
use crate::support;

use std::process::Command;

use crate::stores::k8s::{self as kube, Kube};
use support::inspect::status;
use support::ticker::{Ticks, group_alive};
use support::{Running, SECOND, TempDir, elect_run};

/// client-go's timing flags for the contender: LeaseDuration 2 s,
/// RenewDeadline 1.5 s, RetryPeriod 0.2 s (client-go requires LeaseDuration
/// > RenewDeadline > 1.2 x RetryPeriod).
const GO_TIMING: [&str; 6] = [
    "--lease-duration",
    "2s",
    "--renew-deadline",
    "1500ms",
    "--retry-period",
    "200ms",
];

/// The client-go contender for Lease `name` of `store`, ticking as `label`.
fn contender(store: &KubeStore, name: &str, identity: &str, label: &str, ticks: &Ticks) -> Running {
    contender_with(store, name, identity, label, ticks, &[])
}

/// [`contender`] with `extra` flags, which override [`GO_TIMING`].
fn contender_with(
    store: &KubeStore,
    name: &str,
    identity: &str,
    label: &str,
    ticks: &Ticks,
    extra: &[&str],
) -> Running {
    let mut c = Command::new(kube::contender());
    c.arg("--kubeconfig")
        .arg(&store.kube().kubeconfig)
        .args(["--namespace", &store.namespace])
        .args(["--name", name, "--identity", identity])
        .args(GO_TIMING)
        .args(["--label", label])
        .arg("--ticks")
        .arg(&ticks.log)
        .args(extra);
    Running::spawn(c)
}

/// elect holding Lease `name`, ticking as `label`; its command's group.
fn elect_holder(store: &KubeStore, name: &str, label: &str, ticks: &Ticks) -> (Running, i32) {
    let mut holder = Running::spawn(elect_run(
        &store.url(),
        name,
        &["--ttl", "2s"],
        &ticks.script(label, false),
    ));
    let pgid: i32 = holder
        .expect_line("pgid", 30 * SECOND)
        .trim()
        .parse()
        .unwrap();
    (holder, pgid)
}

/// `old` ticked last before `new` ticked first.
fn assert_after(ticks: &Ticks, old: &str, new: &str) {
    let first = ticks.first(new, 30 * SECOND);
    let last = ticks.last(old).expect("the old holder never ticked");
    eprintln!(
        "{old} -> {new}: a gap of {:.1} ms",
        (first - last) as f64 / 1e6
    );
    assert!(
        last < first,
        "{old} ticked {:.1} ms into {new}'s tenure",
        (last - first) as f64 / 1e6
    );
}

#[test]
fn elect_and_client_go_exclude_each_other_through_clean_releases() {
    let store = KubeStore::start("interop-clean");
    let dir = TempDir::new("k8s-interop-clean");
    let ticks = Ticks::new(&dir.0);

    let (mut first, pgid) = elect_holder(&store, "job", "E1", &ticks);
    ticks.first("E1", 10 * SECOND);
    let mut go = contender(&store, "job", "client-go-1", "G", &ticks);
    // It waits: the Lease is elect's.
    std::thread::sleep(3 * SECOND);
    assert!(ticks.last("G").is_none(), "client-go led beside elect");
    let (code, out) = status(&store.url(), "job", true);
    assert_eq!(code, 0, "{out}");

    // elect lets go when its command ends: client-go takes it at once.
    first.signal(libc::SIGTERM);
    first.wait(10 * SECOND);
    assert!(!group_alive(pgid));
    go.expect_line("leading", 10 * SECOND);
    assert_after(&ticks, "E1", "G");

    // elect's status shows the client-go holder, as not elect's.
    let (code, out) = status(&store.url(), "job", true);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("client-go-1"), "{out}");
    // And `list` shows its Lease among the locks, as a foreign holder.
    let listed = support::elect()
        .args(["list", "--store", &store.url()])
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed
            .lines()
            .any(|l| l.contains("job") && l.contains("client-go-1")),
        "{listed}"
    );

    // client-go lets go on SIGTERM: elect, waiting, takes it at once.
    let (mut second, _) = elect_holder_waiting(&store, "job", "E2", &ticks);
    std::thread::sleep(SECOND);
    assert!(ticks.last("E2").is_none(), "elect led beside client-go");
    go.signal(libc::SIGTERM);
    assert_eq!(go.wait_code(10 * SECOND), 0);
    assert_after(&ticks, "G", "E2");
    second.signal(libc::SIGTERM);
    second.wait(10 * SECOND);
}

/// An elect that waits for Lease `name` (its pgid line comes once it holds).
fn elect_holder_waiting(
    store: &KubeStore,
    name: &str,
    label: &str,
    ticks: &Ticks,
) -> (Running, ()) {
    let holder = Running::spawn(elect_run(
        &store.url(),
        name,
        &["--ttl", "2s"],
        &ticks.script(label, false),
    ));
    (holder, ())
}

#[test]
fn a_sigkill_of_either_hands_over_without_overlap() {
    let store = KubeStore::start("interop-kill");
    let dir = TempDir::new("k8s-interop-kill");
    let ticks = Ticks::new(&dir.0);

    // client-go leads and is SIGKILLed: elect takes the Lease only once it
    // saw it unchanged for its 2 s.
    let mut go = contender(&store, "job", "client-go-1", "G", &ticks);
    go.expect_line("leading", 20 * SECOND);
    ticks.first("G", 5 * SECOND);
    let (waiter, ()) = elect_holder_waiting(&store, "job", "E", &ticks);
    std::thread::sleep(SECOND);
    go.signal(libc::SIGKILL);
    // Its ticker is its own goroutine: gone with it.
    assert_after(&ticks, "G", "E");

    // elect holds and is SIGKILLed: its guard stops the command and lets
    // go; client-go takes it then.
    let mut next = contender(&store, "job", "client-go-2", "G2", &ticks);
    std::thread::sleep(SECOND);
    assert!(ticks.last("G2").is_none(), "client-go led beside elect");
    waiter.signal(libc::SIGKILL);
    next.expect_line("leading", 20 * SECOND);
    assert_after(&ticks, "E", "G2");
    next.signal(libc::SIGTERM);
    next.wait_code(10 * SECOND);
}

/// A Role without `update` on leases: elect says which right it lacks, in
/// one line, and exits 78.
#[test]
fn a_missing_right_is_named_in_one_line_and_exits_78() {
    // A user whose Role may read and create Leases, not update them.
    let (kube, ns, kubeconfig) = a_reader_in(
        "rbac",
        r#"[{"apiGroups":["coordination.k8s.io"],"resources":["leases"],"verbs":["get","list","watch","create"]},{"apiGroups":[""],"resources":["configmaps"],"verbs":["get","list","create","patch"]}]"#,
    );
    // A Lease held by someone else: taking it over needs update.
    let (code, out) = kube.request(
        "POST",
        &format!("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"),
        Some(r#"{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"job"},"spec":{"holderIdentity":""}}"#),
    );
    assert_eq!(code, 201, "{out}");
    let out = support::elect()
        .env("KUBECONFIG", &kubeconfig)
        .args([
            "run",
            "--store",
            &format!("k8s:{ns}"),
            "--lock",
            "job",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("update leases"), "{stderr}");
}

/// An API server `name` with a namespace of that name, where the user
/// `reader` has the Role of `rules` (JSON): the server, the namespace, and
/// the reader's kubeconfig.
fn a_reader_in(name: &'static str, rules: &str) -> (Kube, &'static str, std::path::PathBuf) {
    let kube = Kube::start(name);
    kube.create_namespace(name);
    grant_reader(&kube, name, rules);
    let kubeconfig = kube.kubeconfig_of_user("reader");
    (kube, name, kubeconfig)
}

/// Grant the user `reader` in namespace `ns` the Role of `rules` (JSON).
fn grant_reader(kube: &Kube, ns: &str, rules: &str) {
    let role = format!(
        r#"{{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{{"name":"reader","namespace":"{ns}"}},"rules":{rules}}}"#
    );
    let (code, out) = kube.request(
        "POST",
        &format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles"),
        Some(&role),
    );
    assert_eq!(code, 201, "{out}");
    let binding = format!(
        r#"{{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{{"name":"reader","namespace":"{ns}"}},"roleRef":{{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"reader"}},"subjects":[{{"apiGroup":"rbac.authorization.k8s.io","kind":"User","name":"reader"}}]}}"#
    );
    let (code, out) = kube.request(
        "POST",
        &format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings"),
        Some(&binding),
    );
    assert_eq!(code, 201, "{out}");
}

/// A Role with every right on Leases and none on ConfigMaps: the history
/// is out of reach, which costs a run one warning line naming the verb and
/// the resource, never the lock or the command; `history` and `list`,
/// which only read it, say so in one line and exit 78.
#[test]
fn a_missing_right_on_configmaps_costs_a_run_a_warning_only() {
    let (_kube, ns, kubeconfig) = a_reader_in(
        "rbac-history",
        r#"[{"apiGroups":["coordination.k8s.io"],"resources":["leases"],"verbs":["get","list","watch","create","update","delete"]}]"#,
    );
    let url = format!("k8s:{ns}");
    let elect = |args: &[&str]| {
        let out = support::elect()
            .env("KUBECONFIG", &kubeconfig)
            .args(args)
            .output()
            .unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        eprintln!("{args:?}: exit {:?}\n{stdout}{stderr}", out.status.code());
        (out.status.code(), stdout, stderr)
    };
    for script in ["echo ran", "sleep 1.5; echo ran"] {
        let (code, stdout, stderr) = elect(&[
            "run", "--store", &url, "--lock", "job", "--", "sh", "-c", script,
        ]);
        assert_eq!(code, Some(0), "{stderr}");
        assert_eq!(stdout, "ran\n");
        assert!(!stderr.is_empty(), "no warning");
        for line in stderr.lines() {
            assert!(
                line.contains("configmaps in namespace rbac-history"),
                "{stderr}"
            );
        }
    }
    let (code, _, stderr) = elect(&["history", "--store", &url, "--lock", "job"]);
    assert_eq!(code, Some(78), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("get configmaps"), "{stderr}");
    let (code, _, stderr) = elect(&["list", "--store", &url]);
    assert_eq!(code, Some(78), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("list configmaps"), "{stderr}");
}

/// `elect history --lock LOCK --json` of `store`: one tenure a line.
fn history_of(store: &KubeStore, lock: &str) -> Vec<serde_json::Value> {
    let out = support::elect()
        .args(["history", "--store", &store.url(), "--lock", lock, "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A lock's history is one ConfigMap beside its Lease, a key a tenure, the
/// oldest deleted beyond `--history`: the namespace's Leases are the
/// locks', as `kubectl get leases` lists them, not one a tenure.
#[test]
fn the_history_is_one_configmap_beside_the_lease() {
    let store = KubeStore::start("history-configmap");
    for n in 0..5 {
        let out = support::elect()
            .args(["run", "--store", &store.url(), "--lock", "nightly-report"])
            .args([
                "--history",
                "3",
                "--",
                "sh",
                "-c",
                &format!("exit {}", n % 2),
            ])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(n % 2), "{out:?}");
    }
    let leases: Vec<String> = store
        .all_leases()
        .iter()
        .map(|l| l["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(leases, ["nightly-report"]);
    let maps = store.records_maps();
    assert_eq!(maps.len(), 1, "{maps:#?}");
    let map = &maps[0];
    assert_eq!(map["metadata"]["name"], "nightly-report.elect");
    assert_eq!(
        map["metadata"]["annotations"]["elect/lock"],
        "nightly-report"
    );
    let data = map["data"].as_object().unwrap();
    assert_eq!(data.len(), 3, "{map:#}");
    // The last three, as `history` reads them.
    let outcomes: Vec<String> = history_of(&store, "nightly-report")
        .iter()
        .map(|t| t["outcome"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(outcomes, ["succeeded", "failed", "succeeded"]);
}

/// The history Leases an earlier version wrote (`<lease>.rec-<hash>`, a
/// tenure each, labelled `elect/records-of`) are moved into the ConfigMap
/// by the run that creates it, and deleted; `history` reads them there.
#[test]
fn history_leases_of_earlier_versions_move_into_the_configmap() {
    let store = KubeStore::start("history-leases");
    let leases = format!(
        "/apis/coordination.k8s.io/v1/namespaces/{}/leases",
        store.namespace
    );
    // As the earlier version wrote them, for the lock `job` and another
    // (labelled `r-` and the FNV-1a hash of the Lease's name, 8 hex digits).
    for (n, lock, label) in [
        (1, "job", "r-45627c19"),
        (2, "job", "r-45627c19"),
        (3, "other", "r-0a24ad61"),
    ] {
        let id = format!("00000000000{n}0-old-host-{n}");
        let tenure = format!(
            r#"{{"lock":"{lock}","shard":null,"token":{n},"identity":"old","host":"old-host","pid":{n},"queued":"2026-01-01T00:00:0{n}.000Z","started":"2026-01-01T00:00:0{n}.000Z","ended":"2026-01-01T00:00:0{n}.500Z","outcome":"succeeded","exit_code":0,"signal":null,"why":null,"slot":null}}"#
        );
        let lease = serde_json::json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": format!("{lock}.rec-{n}"),
                "labels": { "elect/records-of": label },
                "annotations": {
                    "elect/lock": lock,
                    "elect/record": format!(".history/{id}"),
                    "elect/value": tenure,
                },
            },
            "spec": {},
        });
        let (code, out) = store
            .kube()
            .request("POST", &leases, Some(&lease.to_string()));
        assert_eq!(code, 201, "{out}");
    }
    // `history` and `list` are not misled by them meanwhile.
    let (code, out) = status(&store.url(), "job", false);
    assert_eq!(code, 1, "{out}");
    let out = support::elect()
        .args([
            "run",
            "--store",
            &store.url(),
            "--lock",
            "job",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let history = history_of(&store, "job");
    let hosts: Vec<&str> = history
        .iter()
        .map(|t| t["host"].as_str().unwrap())
        .collect();
    assert_eq!(hosts.len(), 3, "{history:#?}");
    assert_eq!(&hosts[..2], ["old-host", "old-host"]);
    let mut left: Vec<String> = store
        .all_leases()
        .iter()
        .map(|l| l["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    left.sort();
    // The other lock's are its own to move, on its next run.
    assert_eq!(left, ["job", "other.rec-3"]);
}

/// A `KUBECONFIG` that names no file that exists is said to, in one line
/// and 78, by `run` and the other commands, before anything is sent: not
/// taken for a kubeconfig without a current context.
#[test]
fn a_kubeconfig_that_does_not_exist_is_named() {
    let dir = TempDir::new("k8s-missing");
    let missing = dir.join("no-such-kubeconfig");
    let other = dir.join("nor-this-one");
    let one = missing.display().to_string();
    let both = format!("{one}:{}", other.display());
    for (kubeconfig, command, says) in [
        (
            &one,
            &["run", "--store", "k8s:", "--lock", "x", "--", "echo", "ran"][..],
            format!("store URL 'k8s:': the kubeconfig {one} does not exist (KUBECONFIG)"),
        ),
        (
            &one,
            &["status", "--store", "k8s:?context=c", "--lock", "x"][..],
            format!("store URL 'k8s:?context=c': the kubeconfig {one} does not exist (KUBECONFIG)"),
        ),
        (
            &both,
            &["list", "--store", "k8s:"][..],
            format!("store URL 'k8s:': none of the kubeconfigs {both} exists (KUBECONFIG)"),
        ),
    ] {
        let out = support::elect()
            .env("KUBECONFIG", kubeconfig)
            .args(command)
            .output()
            .unwrap();
        support::assert_outcome(&format!("{command:?}"), &out, 78, &says);
    }
}

/// The store names itself by the namespace it works in, however that was
/// found (the URL, the kubeconfig's context, else `default`), and by the
/// context where the URL named one: never by the URL alone, `k8s:`.
#[test]
fn the_store_is_named_by_its_namespace_and_context() {
    let store = KubeStore::start("named");
    let (kube, ns) = (store.kube(), &store.namespace);
    let dir = TempDir::new("k8s-named");
    let config = kube.kubeconfig_with(
        &dir,
        "config",
        &format!("    certificate-authority: {}\n", kube.certs.ca.display()),
        &format!("    token: {}\n", kube.token),
        ns,
    );
    let in_ns = format!("k8s:{ns}?context=shared");
    for (url, kubeconfig, named) in [
        ("k8s:", Some(&config), format!("k8s:{ns}")),
        (&in_ns[..], None, format!("k8s:{ns}@shared")),
        (
            "k8s:?context=shared",
            None,
            "k8s:default@shared".to_string(),
        ),
    ] {
        let mut elect = support::elect();
        if let Some(config) = kubeconfig {
            elect.env("KUBECONFIG", config);
        }
        let out = elect
            .args(["status", "--store", url, "--lock", "nightly"])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{url}: {out:?}");
        assert_eq!(stdout, format!("lock nightly at {named}: free\n"), "{url}");
    }
}

/// A kubeconfig for `kube`, with `cluster` and `user` as YAML lines.
fn kubeconfig(
    dir: &TempDir,
    name: &str,
    kube: &Kube,
    cluster: &str,
    user: &str,
) -> std::path::PathBuf {
    kube.kubeconfig_with(dir, name, cluster, user, "creds")
}

/// `elect run --store k8s: -- CMD` with `kubeconfig`: its exit code and stderr.
fn run_with(kubeconfig: &std::path::Path, script: &str) -> (Option<i32>, String) {
    let out = support::elect()
        .env("KUBECONFIG", kubeconfig)
        .args([
            "run", "--store", "k8s:", "--lock", "creds", "--", "sh", "-c", script,
        ])
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn base64(path: &std::path::Path) -> String {
    let out = Command::new("base64")
        .arg("-w0")
        .arg(path)
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap()
}

/// Credentials as kubectl takes them: a client certificate (files and
/// inline data), an exec plugin's token, insecure-skip-tls-verify with a
/// warning, a token file and an exec plugin's token that rotate during a
/// hold (a 401, then a token fetched afresh); and what elect does not
/// support refused by name.
#[test]
fn credentials_as_kubectl_takes_them() {
    let mut kube = Kube::start("creds");
    kube.create_namespace("creds");
    let dir = TempDir::new("k8s-creds");
    // The client certificate's user (CN=client) may use Leases in creds.
    let role = r#"{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"elect","namespace":"creds"},"rules":[{"apiGroups":["coordination.k8s.io"],"resources":["leases"],"verbs":["get","list","watch","create","update","delete"]},{"apiGroups":[""],"resources":["configmaps"],"verbs":["get","list","create","patch"]}]}"#;
    let (code, out) = kube.request(
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/creds/roles",
        Some(role),
    );
    assert_eq!(code, 201, "{out}");
    let binding = r#"{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{"name":"elect","namespace":"creds"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"elect"},"subjects":[{"apiGroup":"rbac.authorization.k8s.io","kind":"User","name":"client"}]}"#;
    let (code, out) = kube.request(
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/creds/rolebindings",
        Some(binding),
    );
    assert_eq!(code, 201, "{out}");
    let ca = format!("    certificate-authority: {}\n", kube.certs.ca.display());

    let files = kubeconfig(
        &dir,
        "cert-files",
        &kube,
        &ca,
        &format!(
            "    client-certificate: {}\n    client-key: {}\n",
            kube.certs.client_cert.display(),
            kube.certs.client_key.display()
        ),
    );
    let (code, err) = run_with(&files, "true");
    assert_eq!(code, Some(0), "client certificate files: {err}");
    let inline = kubeconfig(
        &dir,
        "cert-data",
        &kube,
        &format!(
            "    certificate-authority-data: {}\n",
            base64(&kube.certs.ca)
        ),
        &format!(
            "    client-certificate-data: {}\n    client-key-data: {}\n",
            base64(&kube.certs.client_cert),
            base64(&kube.certs.client_key)
        ),
    );
    let (code, err) = run_with(&inline, "true");
    assert_eq!(code, Some(0), "inline data: {err}");

    // An exec plugin: a script printing an ExecCredential.
    let ran = dir.join("plugin-ran");
    let plugin = dir.join("plugin.sh");
    let expires = humantime::format_rfc3339_seconds(std::time::SystemTime::now() + 3600 * SECOND);
    std::fs::write(
        &plugin,
        format!(
            "#!/bin/sh\necho ran >> {}\necho '{{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{{\"token\":\"{}\",\"expirationTimestamp\":\"{expires}\"}}}}'\n",
            ran.display(),
            kube.token
        ),
    )
    .unwrap();
    assert!(
        Command::new("chmod")
            .arg("755")
            .arg(&plugin)
            .status()
            .unwrap()
            .success()
    );
    let exec = kubeconfig(
        &dir,
        "exec",
        &kube,
        &ca,
        &format!(
            "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: {}\n      interactiveMode: Never\n",
            plugin.display()
        ),
    );
    let (code, err) = run_with(&exec, "true");
    assert_eq!(code, Some(0), "exec plugin: {err}");
    // Once: its token lives for an hour.
    assert_eq!(
        std::fs::read_to_string(&ran).unwrap(),
        "ran\n",
        "the plugin ran once"
    );

    // insecure-skip-tls-verify: no CA, a warning.
    let insecure = kubeconfig(
        &dir,
        "insecure",
        &kube,
        "    insecure-skip-tls-verify: true\n",
        &format!("    token: {}\n", kube.token),
    );
    let (code, err) = run_with(&insecure, "true");
    assert_eq!(code, Some(0), "insecure: {err}");
    assert!(
        err.contains("insecure-skip-tls-verify") && err.lines().count() == 1,
        "{err}"
    );

    // What elect does not support: refused by name, 78, one line.
    let provider = kubeconfig(
        &dir,
        "provider",
        &kube,
        &ca,
        "    auth-provider:\n      name: gcp\n",
    );
    let (code, err) = run_with(&provider, "true");
    assert_eq!(code, Some(78), "{err}");
    assert!(
        err.contains("auth-provider") && err.lines().count() == 1,
        "{err}"
    );

    // A token file rotated during a hold: the old token is refused once
    // the server restarts without it, and elect reads the file again.
    let tokens = kube.dir.join("tokens.csv");
    let master = std::fs::read_to_string(&tokens).unwrap();
    let with = |t: &str| format!("{master}{t},rotating,rotating-uid,\"system:masters\"\n");
    std::fs::write(&tokens, with("first-token")).unwrap();
    kube.restart("immediate");
    let token_file = dir.join("token");
    std::fs::write(&token_file, "first-token\n").unwrap();
    let rotating = kubeconfig(
        &dir,
        "rotating",
        &kube,
        &ca,
        &format!("    tokenFile: {}\n", token_file.display()),
    );
    let mut holder = Running::spawn({
        let mut c = support::elect();
        c.env("KUBECONFIG", &rotating)
            .args([
                "run", "--store", "k8s:", "--lock", "rotating", "--ttl", "30s", "--",
            ])
            .args(["sh", "-c", "echo held; read _line"]);
        c
    });
    holder.expect_line("held", 20 * SECOND);
    std::fs::write(&tokens, with("second-token")).unwrap();
    std::fs::write(&token_file, "second-token\n").unwrap();
    kube.restart("immediate");
    let restarted = std::time::SystemTime::now();
    // Renewals every 10 s: one with the old token refused, then the new
    // one read; the Lease renewed after the restart proves it.
    renewed_since(&kube, "rotating", restarted, "a renewal with the new token");
    holder.send_line("done");
    assert_eq!(holder.wait_code(20 * SECOND), 0, "{:?}", holder.stderr_seen);

    // An exec plugin's token refused during a hold: the plugin is run
    // again at once, and the renewal sent again with its new token.
    std::fs::write(&tokens, with("first-exec")).unwrap();
    kube.restart("immediate");
    let ran = dir.join("exec-ran");
    let body = format!(
        "token=first-exec\n[ -e {ran} ] && token=second-exec\necho ran >> {ran}",
        ran = ran.display()
    );
    let exec = plugin_kubeconfig(&dir, &kube, "exec-rotating", &body, 3600);
    let mut holder = Running::spawn({
        let mut c = support::elect();
        c.env("KUBECONFIG", &exec)
            .args([
                "run",
                "--store",
                "k8s:",
                "--lock",
                "exec-rotating",
                "--ttl",
                "30s",
            ])
            .args(["--", "sh", "-c", "echo held; read _line"]);
        c
    });
    holder.expect_line("held", 20 * SECOND);
    std::fs::write(&tokens, with("second-exec")).unwrap();
    kube.restart("immediate");
    let restarted = std::time::SystemTime::now();
    renewed_since(
        &kube,
        "exec-rotating",
        restarted,
        "a renewal with the plugin's new token",
    );
    holder.send_line("done");
    assert_eq!(holder.wait_code(20 * SECOND), 0, "{:?}", holder.stderr_seen);
    assert_eq!(
        std::fs::read_to_string(&ran).unwrap(),
        "ran\nran\n",
        "the plugin ran again after the 401 only"
    );
}

/// Wait until the Lease `name` of namespace `creds` was renewed after
/// `restarted` (the API server's restart that refused the old token).
fn renewed_since(kube: &Kube, name: &str, restarted: std::time::SystemTime, what: &str) {
    support::eventually(what, 15 * SECOND, || {
        let path = format!("/apis/coordination.k8s.io/v1/namespaces/creds/leases/{name}");
        let (_, body) = kube.request("GET", &path, None);
        let lease: serde_json::Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
        let renewed = lease["spec"]["renewTime"]
            .as_str()
            .and_then(|t| humantime::parse_rfc3339(t).ok());
        match renewed {
            Some(at) if at > restarted => Ok(()),
            _ => Err(body),
        }
    });
}

/// elect cut off from the API server (its link blackholed) while a
/// client-go program waits: elect's command stops before client-go leads,
/// on one monotonic clock. (The other way round:
/// [`a_partition_of_client_go_hands_over_to_elect_within_client_gos_bound`].)
#[test]
fn a_partition_of_elect_hands_over_to_client_go_without_overlap() {
    use support::proxy::{Mode, Proxy};
    let store = KubeStore::start("interop-cut");
    let dir = TempDir::new("k8s-interop-cut");
    let ticks = Ticks::new(&dir.0);
    let proxy = Proxy::start(&store.link());

    // elect holds through the proxy; client-go waits.
    let mut cut = Running::spawn(elect_run(
        &store.url_through(proxy.port),
        "job",
        &["--ttl", "2s"],
        &ticks.script("E", false),
    ));
    cut.expect_line("pgid", 30 * SECOND);
    ticks.first("E", 10 * SECOND);
    let mut go = contender(&store, "job", "client-go-1", "G", &ticks);
    std::thread::sleep(SECOND);
    proxy.set(Mode::Blackhole);
    go.expect_line("leading", 20 * SECOND);
    // Its elect has stopped the command, and ends: every tick is in.
    cut.wait(20 * SECOND);
    assert_after(&ticks, "E", "G");
    go.signal(libc::SIGTERM);
    go.wait(10 * SECOND);
}

/// What the client-go contender did when cut off from the API server while
/// elect waited, all in monotonic ns: its last renewal answered, the
/// cancellation of its work, its last tick; and elect's first tick.
struct Cut {
    renewed: i128,
    cancelled: i128,
    last: i128,
    taken: i128,
}

/// Cut the client-go contender, leading Lease `name` with `flags` through a
/// proxy, off from the API server while elect waits for the Lease.
fn cut_client_go(store: &KubeStore, ticks: &Ticks, name: &str, flags: &[&str]) -> Cut {
    use support::proxy::{Mode, Proxy};
    let proxy = Proxy::start(&store.link());
    let server = format!("https://127.0.0.1:{}", proxy.port);
    let (go_label, elect_label) = (format!("G-{name}"), format!("E-{name}"));
    let mut flags = flags.to_vec();
    flags.extend(["--server", &server]);
    let mut go = contender_with(store, name, "client-go", &go_label, ticks, &flags);
    go.expect_line("leading", 20 * SECOND);
    ticks.first(&go_label, 5 * SECOND);
    let mut waiter = Running::spawn(elect_run(
        &store.url(),
        name,
        &["--ttl", "2s"],
        &ticks.script(&elect_label, false),
    ));
    std::thread::sleep(SECOND);
    assert!(
        ticks.last(&elect_label).is_none(),
        "elect led beside client-go"
    );
    proxy.set(Mode::Blackhole);
    let taken = ticks.first(&elect_label, 30 * SECOND);
    go.expect_line("cancelled", 30 * SECOND);
    // Its work ended: it ends, with or without a release that went through.
    go.wait(30 * SECOND);
    waiter.signal(libc::SIGTERM);
    waiter.wait(10 * SECOND);
    let cut = Cut {
        renewed: ticks.last(&format!("{go_label}:renewed")).unwrap(),
        cancelled: ticks.last(&format!("{go_label}:cancelled")).unwrap(),
        last: ticks.last(&go_label).unwrap(),
        taken,
    };
    let ms = |ns: i128| (ns - cut.renewed) as f64 / 1e6;
    eprintln!(
        "{name} {flags:?}: after client-go's last renewal, its work cancelled at {:.0} ms, \
         its last tick {:.0} ms, elect's first {:.0} ms",
        ms(cut.cancelled),
        ms(cut.last),
        ms(cut.taken)
    );
    cut
}

/// client-go cut off from the API server (its link blackholed) while elect
/// waits. elect takes the Lease only once it saw the record unchanged for
/// its leaseDurationSeconds on its own clock: LeaseDuration after the last
/// renewal client-go got an answer to, at least. client-go cancels the
/// context it gave OnStartedLeading once its renewals failed for
/// RenewDeadline (RetryPeriod after its last renewal, at most) and, with
/// ReleaseOnCancel, only after a release attempt too, which on a dead link
/// waits another RenewDeadline. So client-go's work ends before elect
/// starts when LeaseDuration > RetryPeriod + RenewDeadline (no
/// ReleaseOnCancel) or > RetryPeriod + 2 x RenewDeadline (ReleaseOnCancel);
/// short of that it overlaps elect by the difference, at most, and no more.
#[test]
fn a_partition_of_client_go_hands_over_to_elect_within_client_gos_bound() {
    let store = KubeStore::start("interop-cut-go");
    let dir = TempDir::new("k8s-interop-cut-go");
    let ticks = Ticks::new(&dir.0);
    const MS: i128 = 1_000_000;
    // A renewal's answer and elect's sight of it are apart by this, at most;
    // and client-go's timers run late by this, at most.
    const SLACK: i128 = 300 * MS;

    // Without ReleaseOnCancel: 2 s > 0.2 s + 1.5 s.
    let cut = cut_client_go(&store, &ticks, "no-release", &["--release-on-cancel=false"]);
    assert!(cut.taken - cut.renewed > 2000 * MS - SLACK);
    assert!(cut.cancelled - cut.renewed < 1700 * MS + SLACK);
    assert!(cut.last < cut.taken, "client-go ticked into elect's tenure");

    // With ReleaseOnCancel: 4 s > 0.2 s + 2 x 1.5 s.
    let cut = cut_client_go(&store, &ticks, "release", &["--lease-duration", "4s"]);
    assert!(cut.taken - cut.renewed > 4000 * MS - SLACK);
    assert!(cut.cancelled - cut.renewed < 3200 * MS + SLACK);
    assert!(cut.last < cut.taken, "client-go ticked into elect's tenure");

    // With ReleaseOnCancel and 2 s < 3.2 s: client-go works on into elect's
    // tenure, by 1.2 s at most.
    let cut = cut_client_go(&store, &ticks, "release-short", &[]);
    assert!(cut.taken - cut.renewed > 2000 * MS - SLACK);
    assert!(cut.cancelled - cut.renewed > 3200 * MS - SLACK);
    assert!(cut.cancelled - cut.renewed < 3200 * MS + SLACK);
    assert!(cut.last - cut.taken < 1200 * MS + SLACK);
}

/// The etcd behind the API server SIGKILLed and started again while elect
/// holds a Lease and another elect waits: the lock never has two holders
/// (the holder keeps it through the restart, or stops before the waiter
/// starts), and the waiter gets it once the holder lets go.
#[test]
fn the_etcd_behind_the_api_server_restarted() {
    let mut kube = Kube::start("etcd-restart");
    kube.create_namespace("restart");
    kube.register("etcd-restart");
    let url = "k8s:restart?context=etcd-restart";
    let dir = TempDir::new("k8s-etcd-restart");
    let ticks = Ticks::new(&dir.0);
    let mut a = Running::spawn(elect_run(
        url,
        "job",
        &["--ttl", "3s"],
        &ticks.script("A", false),
    ));
    a.expect_line("pgid", 30 * SECOND);
    ticks.first("A", 10 * SECOND);
    let mut b = Running::spawn(elect_run(
        url,
        "job",
        &["--ttl", "3s"],
        &ticks.script("B", false),
    ));
    std::thread::sleep(SECOND);
    let killed = support::ticker::monotonic_ns();
    kube.etcd().kill(0);
    kube.etcd().restart(0);
    kube.etcd().wait_healthy();
    eprintln!(
        "etcd back {:.0} ms after its SIGKILL",
        (support::ticker::monotonic_ns() - killed) as f64 / 1e6
    );
    std::thread::sleep(3 * SECOND);
    match ticks.last("B") {
        // B took over: A had stopped first.
        Some(_) => {
            a.wait(10 * SECOND);
            assert_after(&ticks, "A", "B");
            eprintln!("A lost the Lease; B took it");
        }
        // A kept it: B gets it once A lets go.
        None => {
            a.signal(libc::SIGTERM);
            a.wait(10 * SECOND);
            assert_after(&ticks, "A", "B");
            eprintln!("A kept the Lease through the restart");
        }
    }
    b.signal(libc::SIGTERM);
    b.wait(10 * SECOND);
}

/// A `preferredHolder` that names someone else asks elect's holder to let
/// go: it stops its command, as for `elect break`, and frees the Lease,
/// keeping the field.
#[test]
fn a_preferred_holder_of_another_is_a_request_to_let_go() {
    // The field is kept only with coordinated leader election on.
    let kube = Kube::start_with(
        "preferred",
        &[
            "--feature-gates=CoordinatedLeaderElection=true",
            "--runtime-config=coordination.k8s.io/v1beta1=true",
        ],
    );
    kube.create_namespace("preferred");
    kube.register("preferred");
    let url = "k8s:preferred?context=preferred";
    let mut holder = Running::spawn(elect_run(
        url,
        "job",
        &["--ttl", "3s"],
        r#"trap 'echo "term"; exit 0' TERM; echo held; while :; do sleep 0.01; done"#,
    ));
    holder.expect_line("held", 20 * SECOND);
    let path = "/apis/coordination.k8s.io/v1/namespaces/preferred/leases/job";
    support::eventually("preferredHolder written", 10 * SECOND, || {
        let (_, body) = kube.request("GET", path, None);
        let mut lease: serde_json::Value =
            serde_json::from_str(&body).map_err(|e| e.to_string())?;
        lease["spec"]["strategy"] = "OldestEmulationVersion".into();
        lease["spec"]["preferredHolder"] = "someone-else".into();
        match kube.request("PUT", path, Some(&lease.to_string())) {
            (200, _) => Ok(()),
            (_, body) => Err(body),
        }
    });
    holder.expect_line("term", 5 * SECOND);
    holder.wait(10 * SECOND);
    let said = holder.stderr_seen.join("\n");
    assert!(said.contains("preferredHolder is someone-else"), "{said}");
    let (_, body) = kube.request("GET", path, None);
    let lease: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "", "{lease}");
    assert_eq!(lease["spec"]["preferredHolder"], "someone-else", "{lease}");
    assert_eq!(
        lease["spec"]["strategy"], "OldestEmulationVersion",
        "{lease}"
    );
}

/// A break, asked and then forced, reaches a holder at once through its
/// watch of its Lease, 10 s before its next renewal would find it; the
/// label `elect break` writes beside its request stays on a forced break.
#[test]
fn a_break_reaches_the_holder_at_once_by_its_label() {
    let store = KubeStore::start("break-label");
    let url = store.url();
    let path = format!(
        "/apis/coordination.k8s.io/v1/namespaces/{}/leases/job",
        store.namespace
    );
    for force in [false, true] {
        let mut holder = Running::spawn(elect_run(
            &url,
            "job",
            &["--ttl", "30s"],
            r#"trap 'echo term; exit 0' TERM; echo held; while :; do sleep 0.01; done"#,
        ));
        holder.expect_line("held", 30 * SECOND);
        let mut args = vec!["break", "--store", &url, "--lock", "job", "--yes"];
        if force {
            args.push("--force");
        }
        let asked = std::time::Instant::now();
        let mut breaking = support::elect();
        breaking.args(&args);
        let mut breaking = Running::spawn(breaking);
        holder.expect_line("term", 3 * SECOND);
        let took = asked.elapsed();
        eprintln!("force {force}: the holder's command got TERM {took:?} after the break began");
        assert!(took < 3 * SECOND, "{took:?}: by a renewal, not the watch");
        holder.wait(10 * SECOND);
        breaking.wait(20 * SECOND);
        // The next holder's take removes the label, and so did the release.
        let (_, body) = store.kube().request("GET", &path, None);
        let lease: serde_json::Value = serde_json::from_str(&body).unwrap();
        let label = &lease["metadata"]["labels"]["elect/break"];
        match force {
            false => assert!(label.is_null(), "{lease}"),
            true => assert_eq!(label, "forced", "{lease}"),
        }
    }
}

/// `break --force` on a client-go holder: client-go finds the Lease
/// another's on its next renewal, but stops leading only once its renewals
/// have failed for its RenewDeadline. The break writes a holder of no one
/// for the Lease's own duration (client-go's LeaseDuration, which client-go
/// keeps above RenewDeadline), so the elect waiting takes the Lease only
/// after seeing that unchanged for it: after client-go has stopped.
#[test]
fn a_forced_break_of_a_client_go_holder_hands_over_only_once_it_stopped() {
    let store = KubeStore::start("break-client-go");
    let dir = TempDir::new("k8s-break-client-go");
    let ticks = Ticks::new(&dir.0);
    const MS: i128 = 1_000_000;
    let timing = [
        "--lease-duration",
        "4s",
        "--renew-deadline",
        "3s",
        "--retry-period",
        "500ms",
    ];
    let mut go = contender_with(&store, "job", "client-go-1", "G", &ticks, &timing);
    go.expect_line("leading", 20 * SECOND);
    ticks.first("G", 5 * SECOND);
    let (mut waiter, ()) = elect_holder_waiting(&store, "job", "E", &ticks);
    let broke = support::ticker::monotonic_ns();
    let out = support::elect()
        .args(["break", "--store", &store.url(), "--lock", "job"])
        .args(["--yes", "--force"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{said}");
    go.expect_line("cancelled", 20 * SECOND);
    go.wait(10 * SECOND);
    let taken = ticks.first("E", 20 * SECOND);
    let cancelled = ticks.last("G:cancelled").unwrap();
    eprintln!(
        "after the break: client-go's work cancelled at {:.0} ms, elect's first tick {:.0} ms",
        (cancelled - broke) as f64 / 1e6,
        (taken - broke) as f64 / 1e6
    );
    assert_after(&ticks, "G", "E");
    // Held for the Lease's 4 s, by elect's own clock.
    assert!(taken - broke > 4000 * MS, "{said}");
    waiter.signal(libc::SIGTERM);
    waiter.wait(10 * SECOND);
}

/// In a pod: nothing but the service account's files (token, CA,
/// namespace) at their path and `KUBERNETES_SERVICE_HOST`/`PORT`. The
/// files are put there in a mount namespace of elect's own (a tmpfs over
/// /run, which /var/run names), so the machine's are untouched.
#[test]
fn in_a_pod_the_service_account_is_all_it_needs() {
    let store = KubeStore::start("in-cluster");
    let dir = TempDir::new("k8s-in-cluster");
    std::fs::write(dir.join("token"), format!("{}\n", store.kube().token)).unwrap();
    std::fs::copy(&store.kube().certs.ca, dir.join("ca.crt")).unwrap();
    std::fs::write(dir.join("namespace"), &store.namespace).unwrap();
    let port = store.kube().url.rsplit(':').next().unwrap().to_string();
    let sa = "/var/run/secrets/kubernetes.io/serviceaccount";
    let script = format!(
        "mount -t tmpfs none /run && mkdir -p {sa} && cp {}/token {}/ca.crt {}/namespace {sa}/ && \
         exec {} run --store k8s: --lock in-pod -- sh -c 'echo \"token $ELECT_TOKEN\"'",
        dir.0.display(),
        dir.0.display(),
        dir.0.display(),
        env!("CARGO_BIN_EXE_elect")
    );
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .env_remove("KUBECONFIG")
        .env("HOME", "/nonexistent")
        .env("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        .env("KUBERNETES_SERVICE_PORT", &port)
        .output()
        .expect("`unshare` not found: install Debian's util-linux package");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(stdout.starts_with("token "), "{stdout}");
    // In the pod's namespace, named by its file.
    let lease = store
        .lease("in-pod")
        .expect("the Lease in the pod's namespace");
    assert_eq!(lease["spec"]["holderIdentity"], "", "let go: {lease}");
}

/// What a take-run-release cycle asks of the API server, counted in its
/// audit log: on a Lease not there yet, and on one nobody holds.
#[test]
fn a_cycle_costs_few_requests() {
    let dir = TempDir::new("k8s-requests");
    let kube = Kube::start_audited("requests", &dir);
    kube.create_namespace("requests");
    kube.register("requests");
    // A read, the take, a watch while it holds, the list of waiters the
    // release names the next holder from, the release, and the history's
    // read (for trimming) and write; the lock's first write of its history
    // creates its ConfigMap, and looks once for the history Leases of
    // earlier versions to move into it.
    for (lease, most) in [("none yet", 8), ("free", 7)] {
        let before = Kube::requests_of_elect(&dir).len();
        let out = support::elect()
            .args(["run", "--store", "k8s:requests?context=requests"])
            .args(["--lock", "job", "--", "true"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let made = Kube::requests_of_elect(&dir)[before..].to_vec();
        eprintln!(
            "a cycle on a Lease {lease}: {} requests: {made:#?}",
            made.len()
        );
        assert!(made.len() <= most, "{made:#?}");
    }
}

/// The waiter records in `namespace`, as the API server lists them: each
/// lock's are keys `waiter.<tenure>` of its records' ConfigMap.
fn waiter_records(kube: &Kube, namespace: &str) -> Result<Vec<serde_json::Value>, String> {
    let (_, body) = kube.request(
        "GET",
        &format!("/api/v1/namespaces/{namespace}/configmaps?labelSelector=elect%2Frecords-of"),
        None,
    );
    let list: serde_json::Value =
        serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
    let mut found = Vec::new();
    for map in list["items"].as_array().into_iter().flatten() {
        for (key, value) in map["data"].as_object().into_iter().flatten() {
            if key.starts_with("waiter.") {
                let value = value.as_str().unwrap_or_default();
                found.push(serde_json::from_str(value).map_err(|e| format!("{e}: {value}"))?);
            }
        }
    }
    Ok(found)
}

/// The names of the Leases in `namespace`, as `kubectl get leases` lists
/// them.
fn lease_names(kube: &Kube, namespace: &str) -> Vec<String> {
    let (code, body) = kube.request(
        "GET",
        &format!("/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"),
        None,
    );
    assert_eq!(code, 200, "{body}");
    let list: serde_json::Value = serde_json::from_str(&body).unwrap();
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|l| {
            l["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

/// Waiters take the Lease in the order they came: each release names the
/// oldest waiter, and the others let it take the Lease first, so that a
/// handover is one take, not a PUT of every waiter and a read and a watch
/// of each that lost. Each waiter holds until told, so a take out of order
/// leaves the one due next waiting, and the test fails.
#[test]
fn waiters_take_the_lease_in_the_order_they_came() {
    let dir = TempDir::new("k8s-order");
    let kube = Kube::start_audited("order", &dir);
    kube.create_namespace("order");
    kube.register("order");
    let url = "k8s:order?context=order";
    let script = "echo held; read _line";
    let mut holder = Running::spawn(elect_run(url, "job", &[], script));
    holder.expect_line("held", 20 * SECOND);
    let mut waiters = Vec::new();
    for n in 1..=4 {
        waiters.push(Running::spawn(elect_run(url, "job", &[], script)));
        support::eventually(&format!("{n} waiters' records"), 10 * SECOND, || {
            let found = waiter_records(&kube, "order")?.len();
            (found == n).then_some(()).ok_or(format!("{found} records"))
        });
    }
    // The waiters are not Leases: `kubectl get leases` lists the lock.
    assert_eq!(lease_names(&kube, "order"), ["job"]);
    let from = Kube::requests_of_elect(&dir).len();
    holder.send_line("done");
    assert_eq!(holder.wait_code(10 * SECOND), 0);
    for waiter in &mut waiters {
        waiter.expect_line("held", 10 * SECOND);
        waiter.send_line("done");
        assert_eq!(waiter.wait_code(10 * SECOND), 0);
    }
    let made = Kube::requests_of_elect(&dir)[from..].to_vec();
    let writes = made
        .iter()
        .filter(|r| *r == "update /apis/coordination.k8s.io/v1/namespaces/order/leases/job")
        .count();
    eprintln!(
        "4 handovers and a release: {writes} PUTs of the Lease, {} requests in all",
        made.len()
    );
    // Five releases and four takes, and a renewal or two: a herd would PUT
    // 4 + 3 + 2 + 1 times to take it.
    assert!(writes <= 11, "{made:#?}");
}

/// A lock's ConfigMap too full to take another waiter's key: that elect
/// waits unlisted, sending no more writes that cannot be taken, and takes
/// the lock when the holder lets go.
#[test]
fn a_waiter_that_finds_the_configmap_full_waits_unlisted() {
    let dir = TempDir::new("k8s-full");
    let kube = Kube::start_audited("full", &dir);
    kube.create_namespace("full");
    kube.register("full");
    let url = "k8s:full?context=full";
    // Within 100 bytes of the 1 MiB the API server takes in a ConfigMap.
    let filler = "x".repeat(1_048_500);
    let map = serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "job.elect",
            "labels": { "elect/records-of": "r-0" },
            "annotations": { "elect/lock": "job" },
        },
        "data": { "filler": filler },
    });
    let (code, body) = kube.request(
        "POST",
        "/api/v1/namespaces/full/configmaps",
        Some(&map.to_string()),
    );
    assert_eq!(code, 201, "{body}");
    let script = "echo held; read _line";
    let mut holder = Running::spawn(elect_run(url, "job", &["--ttl", "2s"], script));
    holder.expect_line("held", 20 * SECOND);
    let mut waiter = Running::spawn(elect_run(url, "job", &["--ttl", "2s", "-v"], script));
    waiter.expect_stderr("unlisted", 10 * SECOND);
    // A window measured: a TTL and a half, in which a waiter still counting
    // the record as its own would try it again with each renewal.
    let from = Kube::requests_of_elect(&dir).len();
    std::thread::sleep(3 * SECOND);
    let patches = Kube::requests_of_elect(&dir)[from..]
        .iter()
        .filter(|r| *r == "patch /api/v1/namespaces/full/configmaps/job.elect")
        .count();
    // The one refused may be logged late; each renewal would add one.
    assert!(
        patches <= 1,
        "{patches} patches of a ConfigMap that cannot take them"
    );
    holder.send_line("done");
    assert_eq!(holder.wait_code(10 * SECOND), 0);
    waiter.expect_line("held", 10 * SECOND);
    waiter.send_line("done");
    assert_eq!(waiter.wait_code(10 * SECOND), 0);
}

/// What waiting costs: a waiter renews the record that shows it waits
/// once a TTL, not with each of its session's renewals (three a TTL), while
/// the holder renews its Lease with each of its own.
#[test]
fn a_waiter_renews_its_record_once_a_ttl() {
    let dir = TempDir::new("k8s-waiter-cost");
    let kube = Kube::start_audited("waiter-cost", &dir);
    kube.create_namespace("cost");
    kube.register("cost");
    let url = "k8s:cost?context=cost";
    let script = "echo held; read _line";
    let mut holder = Running::spawn(elect_run(url, "job", &["--ttl", "3s"], script));
    holder.expect_line("held", 20 * SECOND);
    let mut waiter = Running::spawn(elect_run(url, "job", &["--ttl", "3s"], script));
    support::eventually("the waiter's record", 10 * SECOND, || {
        let records = waiter_records(&kube, "cost")?;
        records
            .first()
            .map(drop)
            .ok_or_else(|| "no waiter record yet".to_string())
    });
    let from = Kube::requests_of_elect(&dir).len();
    // A window measured: three TTLs.
    std::thread::sleep(9 * SECOND);
    let made = Kube::requests_of_elect(&dir)[from..].to_vec();
    let count = |request: &str| made.iter().filter(|r| *r == request).count();
    let of_holder = count("update /apis/coordination.k8s.io/v1/namespaces/cost/leases/job");
    let of_waiter = count("patch /api/v1/namespaces/cost/configmaps/job.elect");
    eprintln!(
        "in 9 s at --ttl 3s: the holder's Lease {of_holder} PUTs, the waiter's record \
         {of_waiter}, {} requests in all",
        made.len()
    );
    assert!(of_holder >= 7, "{made:#?}");
    assert!((2..=4).contains(&of_waiter), "{made:#?}");
    // It still waits, and gets the lock once the holder lets go.
    let (code, out) = status(url, "job", true);
    assert_eq!(code, 0, "{out}");
    holder.send_line("done");
    assert_eq!(holder.wait_code(10 * SECOND), 0);
    waiter.expect_line("held", 10 * SECOND);
    waiter.send_line("done");
    assert_eq!(waiter.wait_code(10 * SECOND), 0);
}

/// An exec plugin running `body` and a kubeconfig whose user runs it
/// ([`Kube::exec_plugin_kubeconfig`]), in namespace creds.
fn plugin_kubeconfig(
    dir: &TempDir,
    kube: &Kube,
    name: &str,
    body: &str,
    expires_in: u64,
) -> std::path::PathBuf {
    kube.exec_plugin_kubeconfig(dir, name, body, expires_in, "creds")
}
