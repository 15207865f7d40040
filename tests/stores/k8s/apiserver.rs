//! The Kubernetes API server the tests start ([`super::server`]), and the
//! client-go contender beside it: what the Kubernetes Lease store builds on,
//! seen through the API with the test's own credentials.

use crate::support;

use std::time::Duration;

use crate::stores::k8s::{self as kube, Kube};
use serde_json::{Value, json};
use support::ticker::Ticks;
use support::{Running, SECOND, TempDir};

const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/default/leases";

fn lease(name: &str, holder: &str, resource_version: Option<&str>) -> String {
    let mut metadata = json!({ "name": name });
    if let Some(rv) = resource_version {
        metadata["resourceVersion"] = json!(rv);
    }
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": metadata,
        "spec": { "holderIdentity": holder, "leaseDurationSeconds": 10 },
    })
    .to_string()
}

fn parsed(what: &str, (code, body): (u16, String), expected: u16) -> Value {
    assert_eq!(code, expected, "{what}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{what}: {e}: {body}"))
}

/// A Lease is created, updated under a resourceVersion precondition (a
/// stale one is answered 409 Conflict and changes nothing), and a watch
/// from the created version sees the update.
#[test]
fn a_lease_is_created_updated_only_from_its_current_version_and_watched() {
    let kube = Kube::start("lease");
    let created = parsed(
        "create",
        kube.request("POST", LEASES, Some(&lease("smoke", "a", None))),
        201,
    );
    let first = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();

    let mut watch = kube.curl();
    watch.args(["-N", "--max-time", "30"]).arg(format!(
        "{}{LEASES}?watch=1&fieldSelector=metadata.name%3Dsmoke&resourceVersion={first}",
        kube.url
    ));
    let mut watch = Running::spawn(watch);

    let path = format!("{LEASES}/smoke");
    let updated = parsed(
        "update",
        kube.request("PUT", &path, Some(&lease("smoke", "b", Some(&first)))),
        200,
    );
    assert_eq!(updated["spec"]["holderIdentity"], "b");
    let second = updated["metadata"]["resourceVersion"].as_str().unwrap();
    assert_ne!(second, first);

    let stale = parsed(
        "stale update",
        kube.request("PUT", &path, Some(&lease("smoke", "c", Some(&first)))),
        409,
    );
    assert_eq!(stale["reason"], "Conflict", "{stale}");
    let now = parsed("read", kube.request("GET", &path, None), 200);
    assert_eq!(now["spec"]["holderIdentity"], "b");
    assert_eq!(now["metadata"]["resourceVersion"], second);

    let event: Value = serde_json::from_str(&watch.expect_line("", 10 * SECOND)).unwrap();
    assert_eq!(event["type"], "MODIFIED", "{event}");
    assert_eq!(event["object"]["spec"]["holderIdentity"], "b", "{event}");
    assert_eq!(event["object"]["metadata"]["resourceVersion"], second);
    let _ = watch.child.kill();
}

/// The client-go contender takes a Lease nobody holds, records itself as
/// its holder, and ticks on CLOCK_MONOTONIC while it leads; on SIGTERM it
/// stops ticking and lets the Lease go.
#[test]
fn the_client_go_contender_leads_a_free_lease_and_ticks() {
    let kube = Kube::start("contender");
    let dir = TempDir::new("contender-ticks");
    let ticks = Ticks::new(&dir.0);
    let mut contender = std::process::Command::new(kube::contender());
    contender
        .arg("--kubeconfig")
        .arg(&kube.kubeconfig)
        .args(["--name", "job", "--identity", "client-go-1"])
        .args(["--lease-duration", "2s", "--renew-deadline", "1500ms"])
        .args(["--retry-period", "200ms", "--label", "g"])
        .arg("--ticks")
        .arg(&ticks.log);
    let mut contender = Running::spawn(contender);
    contender.expect_line("leading", 20 * SECOND);
    let first = ticks.first("g", 5 * SECOND);
    let held = parsed(
        "the contender's Lease",
        kube.request("GET", &format!("{LEASES}/job"), None),
        200,
    );
    assert_eq!(held["spec"]["holderIdentity"], "client-go-1", "{held}");
    assert_eq!(held["spec"]["leaseDurationSeconds"], 2, "{held}");
    // It goes on ticking, every 10 ms, while it leads.
    std::thread::sleep(Duration::from_millis(500));
    let during = ticks
        .all()
        .iter()
        .filter(|(l, t)| l == "g" && *t > first)
        .count();
    assert!(during >= 20, "{during} ticks in 500 ms");

    contender.signal(libc::SIGTERM);
    assert_eq!(
        contender.wait_code(10 * SECOND),
        0,
        "{:?}",
        contender.stderr_seen
    );
    let last = ticks.last("g").unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(ticks.last("g"), Some(last), "it ticked after it ended");
    let released = parsed(
        "the released Lease",
        kube.request("GET", &format!("{LEASES}/job"), None),
        200,
    );
    assert_eq!(released["spec"]["holderIdentity"], "", "{released}");
}
