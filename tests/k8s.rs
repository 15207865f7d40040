//! The Kubernetes store beside client-go: elect and the client-go
//! contender (`tests/servers/kube-*/main.go`, `leaderelection` with a
//! `LeaseLock`) on one Lease exclude each other both ways, measured on one
//! monotonic clock (their ticks, `support/ticker.rs`), through a clean
//! release and a SIGKILL of either; and what only this store does.

use crate::support;

use std::process::Command;

use support::inspect::status;
use support::kube::{self, Kube};
use support::stores::{KubeStore, StoreUnderTest};
use support::ticker::{Ticks, group_alive};
use support::{Running, SECOND, TempDir, elect_run};

/// The client-go contender for Lease `name` of `store`, ticking as `label`.
fn contender(store: &KubeStore, name: &str, identity: &str, label: &str, ticks: &Ticks) -> Running {
    let mut c = Command::new(kube::contender());
    c.arg("--kubeconfig")
        .arg(&store.kube().kubeconfig)
        .args(["--namespace", &store.namespace])
        .args(["--name", name, "--identity", identity])
        .args(["--lease-duration", "2s", "--renew-deadline", "1500ms"])
        .args(["--retry-period", "200ms", "--label", label])
        .arg("--ticks")
        .arg(&ticks.log);
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
    let kube = Kube::start("rbac");
    let ns = "rbac";
    kube.create_namespace(ns);
    // A user whose Role may read and create Leases, not update them.
    let role = format!(
        r#"{{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{{"name":"reader","namespace":"{ns}"}},"rules":[{{"apiGroups":["coordination.k8s.io"],"resources":["leases"],"verbs":["get","list","watch","create"]}}]}}"#
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
    let kubeconfig = kube.kubeconfig_of_user("reader");
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
