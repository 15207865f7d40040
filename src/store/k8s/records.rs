//! A lock's records on Kubernetes: one ConfigMap a lock beside its Lease
//! (`<object>.elect`), holding its history (a key a tenure, whose value is
//! the record's JSON) and its waiters (a key `waiter.<session id>` each), so
//! that `kubectl get leases` lists the locks and nothing else.
//!
//! A tenure's write is a JSON merge patch of its one key: hosts ending
//! their runs at once never conflict. A write only where none is (a
//! `running` record, which must never hide how the tenure ended) cannot be
//! a merge patch, nor a standard JSON Patch (its `test` of a member that
//! is absent fails by RFC 6902, and passes only by a quirk of the API
//! server's library); it is a read, then a merge patch carrying the
//! `resourceVersion` read, which the API server takes as a precondition:
//! a 409 is read again.
//!
//! A waiter's key is a merge patch too, renewed while it waits so that a
//! live waiter is told from one whose elect died. Every write stores the
//! whole ConfigMap, so n waiters renewing once a TTL would cost the API
//! server's etcd n² bytes a TTL: each waiter renews less often as the
//! waiters and the ConfigMap grow ([`renew_every`]), keeping their writes
//! together under [`WAITERS_BYTES_PER_SECOND`].

use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::api::{Api, CONFIGMAPS};
use super::lease;
use crate::log;
use crate::store::StoreError;

/// What a lock's object name is followed by in its records' name.
const SUFFIX: &str = ".elect";

/// What a waiter's key starts with; no tenure's key does (elect's ids
/// start with a time).
const WAITER: &str = "waiter.";

/// A waiter record's lifetime, in its renewal periods: it outlives a
/// renewal or two that fail.
const WAITER_LIFETIMES: u32 = 4;

/// What the waiters of one lock write to the API server, together, at
/// most, once more of them wait than renew once a TTL within it: a few
/// dozen waiters renew once a TTL; 1,000 of them in 180 kB once in 46
/// minutes.
pub const WAITERS_BYTES_PER_SECOND: u64 = 64 * 1024;

pub fn configmaps(namespace: &str) -> String {
    format!("/api/v1/namespaces/{namespace}/configmaps")
}

pub fn path(namespace: &str, name: &str) -> String {
    format!("{}/{name}", configmaps(namespace))
}

/// The ConfigMaps of every lock's records, as a query.
pub fn all(namespace: &str) -> String {
    format!(
        "{}?labelSelector={}",
        configmaps(namespace),
        lease::RECORDS_OF
    )
}

/// The records' ConfigMap of the lock whose Lease is `object`: the object's
/// name and [`SUFFIX`]; one too long for an object name is cut, and a hash
/// of the whole name appended, as [`lease::record_name`] does.
pub fn name(object: &str) -> String {
    let whole = format!("{object}{SUFFIX}");
    if whole.len() <= 253 {
        return whole;
    }
    let base: String = object.chars().take(200).collect();
    let base = base.trim_end_matches(['-', '.']);
    format!("{base}{SUFFIX}-{}", lease::hash8(object))
}

/// Whether `key` may be a key of a ConfigMap's `data`.
fn is_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 253
        && key != "."
        && key != ".."
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
}

/// The `data` key of tenure `id`: the id itself (elect's ids are valid
/// keys: a time, a host's name mapped, a pid); any other mapped, with a
/// hash of it, so that two ids never share a key.
pub fn key(id: &str) -> String {
    if is_key(id) {
        return id.to_string();
    }
    let mapped: String = id
        .chars()
        .take(200)
        .map(|c| match c.is_ascii_alphanumeric() || "-._".contains(c) {
            true => c,
            false => '_',
        })
        .collect();
    format!("{mapped}.{}", lease::hash16(id))
}

/// A new records' ConfigMap `name` of `lock` (its Lease `object`), with
/// `data`.
pub fn new(name: &str, lock: &str, object: &str, data: Map<String, Value>) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "labels": { lease::RECORDS_OF: lease::records_label(object) },
            "annotations": { lease::LOCK: lock },
        },
        "data": data,
    })
}

/// The lock a records' ConfigMap is of, by its annotation.
pub fn lock_of(map: &Value) -> Option<&str> {
    map["metadata"]["annotations"][lease::LOCK].as_str()
}

/// Its tenures: each key and value.
pub fn entries(map: &Value) -> impl Iterator<Item = (&String, &str)> {
    map["data"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| !k.starts_with(WAITER))
        .filter_map(|(k, v)| Some((k, v.as_str()?)))
}

/// The key of the waiter of session `session` (16 hex digits).
pub fn waiter_key(session: &str) -> String {
    format!("{WAITER}{session}")
}

/// One waiter of a lock, as its record says.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Waiter {
    /// Its `holderIdentity`, should it take the Lease.
    pub identity: String,
    /// When it began to wait, by its wall clock: the queue's order.
    pub since: String,
    /// When it last renewed its record, by its wall clock.
    pub renewed: String,
    /// How long its record lives past `renewed`, in whole seconds.
    pub seconds: u64,
}

impl Waiter {
    /// A waiter beginning now, renewing every `every`.
    pub fn new(identity: &str, every: Duration) -> Waiter {
        let now = lease::now_micro();
        Waiter {
            identity: identity.to_string(),
            since: now.clone(),
            renewed: now,
            seconds: lifetime(every),
        }
    }

    /// Renewed now, to renew again in `every`.
    pub fn renew(&mut self, every: Duration) {
        self.renewed = lease::now_micro();
        self.seconds = lifetime(every);
    }

    /// What is left of its record's life, by our wall clock.
    pub fn left_by_wall_clock(&self) -> Duration {
        lease::left_by_wall_clock(Some(&self.renewed), self.seconds)
    }

    pub fn since(&self) -> Option<SystemTime> {
        humantime::parse_rfc3339(&self.since).ok()
    }
}

fn lifetime(every: Duration) -> u64 {
    (every * WAITER_LIFETIMES).as_secs_f64().ceil() as u64
}

/// The waiters of `map`, the records' ConfigMap of `lock`, each with its
/// key; none if the ConfigMap is another lock's.
pub fn waiters<'a>(map: &'a Value, lock: &'a str) -> impl Iterator<Item = (&'a str, Waiter)> {
    map["data"]
        .as_object()
        .filter(|_| lock_of(map).is_none_or(|l| l == lock))
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.starts_with(WAITER))
        .filter_map(|(k, v)| Some((k.as_str(), serde_json::from_str(v.as_str()?).ok()?)))
}

/// How often one of `waiters` renews its record in a ConfigMap of `bytes`
/// when the holders' TTL is `ttl`: once a TTL, or less often, so that
/// together they write at most [`WAITERS_BYTES_PER_SECOND`].
pub fn renew_every(ttl: Duration, waiters: usize, bytes: usize) -> Duration {
    let written = waiters as f64 * bytes as f64;
    ttl.max(Duration::from_secs_f64(
        written / WAITERS_BYTES_PER_SECOND as f64,
    ))
}

/// The size of `map` as the API server stores it, nearly.
pub fn size(map: &Value) -> usize {
    serde_json::to_vec(map).map_or(0, |v| v.len())
}

/// A merge patch of `data` into `lock`'s records `name` (its Lease
/// `object`) in `namespace`, creating them where there are none: the
/// ConfigMap as written. `Ok(None)` with `create` false and none there.
pub async fn merge(
    api: &Api,
    namespace: &str,
    (lock, object, name): (&str, &str, &str),
    data: Map<String, Value>,
    create: bool,
) -> Result<Option<Value>, StoreError> {
    let patch = json!({ "data": data });
    loop {
        let reply = api
            .request("PATCH", &path(namespace, name), Some(&patch))
            .await?;
        match reply.status {
            200 => return Ok(Some(reply.body)),
            404 if !create => return Ok(None),
            404 => {
                if let Some(map) = self::create(api, namespace, (lock, object, name), &data).await?
                {
                    return Ok(Some(map));
                }
            }
            _ => return Err(api.refusal_of(CONFIGMAPS, "patch", name, &reply)),
        }
    }
}

/// Create `lock`'s records `name` (its Lease `object`) with `data`: the
/// ConfigMap as written, `None` if it exists. The write that created it
/// moves in the history Leases an earlier version left: a failure to is a
/// warning, never the write's.
pub async fn create(
    api: &Api,
    namespace: &str,
    (lock, object, name): (&str, &str, &str),
    data: &Map<String, Value>,
) -> Result<Option<Value>, StoreError> {
    let map = new(name, lock, object, data.clone());
    let reply = api
        .request("POST", &configmaps(namespace), Some(&map))
        .await?;
    match reply.status {
        200 | 201 => {
            if let Err(e) = adopt(api, namespace, (lock, object, name)).await {
                log::warn(format_args!(
                    "could not move the history Leases of lock {lock} into ConfigMap \
                     {name}: {e}"
                ));
            }
            Ok(Some(reply.body))
        }
        409 => Ok(None),
        _ => Err(api.refusal_of(CONFIGMAPS, "create", name, &reply)),
    }
}

/// Move into `lock`'s new records' ConfigMap `name` the tenures earlier
/// versions kept as Leases (labelled [`lease::RECORDS_OF`]), then
/// delete those Leases: once a lock, by whoever created the ConfigMap.
async fn adopt(
    api: &Api,
    namespace: &str,
    (lock, object, name): (&str, &str, &str),
) -> Result<(), StoreError> {
    let selector = format!("{}%3D{}", lease::RECORDS_OF, lease::records_label(object));
    let list = format!("{}?labelSelector={selector}", lease::leases(namespace));
    let reply = api.request_patiently("GET", &list, None).await?;
    if reply.status != 200 {
        return Err(api.refusal("list", "leases", &reply));
    }
    let old: Vec<(String, String, String)> = super::session::leases_of(&reply.body)
        .iter()
        .filter(|l| l.annotation(lease::LOCK) == Some(lock))
        .filter_map(|l| {
            let record = l.annotation(lease::RECORD)?;
            let id = record.strip_prefix(crate::store::HISTORY)?;
            let value = l.annotation(lease::VALUE)?;
            Some((l.name().to_string(), key(id), value.to_string()))
        })
        .collect();
    if old.is_empty() {
        return Ok(());
    }
    let data: Map<String, Value> = old
        .iter()
        .map(|(_, key, value)| (key.clone(), Value::from(value.as_str())))
        .collect();
    let reply = api
        .request(
            "PATCH",
            &path(namespace, name),
            Some(&json!({ "data": data })),
        )
        .await?;
    if reply.status != 200 {
        return Err(api.refusal_of(CONFIGMAPS, "patch", name, &reply));
    }
    for (lease_name, ..) in &old {
        let reply = api
            .request("DELETE", &lease::path(namespace, lease_name), None)
            .await?;
        if !matches!(reply.status, 200 | 202 | 404) {
            return Err(api.refusal("delete", lease_name, &reply));
        }
    }
    log::verbose(format_args!(
        "moved {} history Leases of lock {lock} into ConfigMap {name}",
        old.len()
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_records_are_named_by_its_lock_s_object_within_an_object_name() {
        assert_eq!(name("nightly-report"), "nightly-report.elect");
        for lock in ["jobs/Nightly", &"x".repeat(253), &"A_b.".repeat(80)] {
            let object = lease::object_name(lock);
            let name = name(&object);
            assert!(lease::is_object_name(&name), "{lock} -> {name}");
        }
        let (a, b) = ("a".repeat(240), format!("{}b", "a".repeat(239)));
        assert_ne!(name(&a), name(&b));
    }

    #[test]
    fn a_tenure_s_key_is_its_id_where_it_may_be() {
        let id = "1764600000123-web-1.example_x-4242";
        assert_eq!(key(id), id);
        for odd in ["", ".", "..", "a/b", "a b", "é", &"x".repeat(254)] {
            let k = key(odd);
            assert!(is_key(&k), "{odd:?} -> {k}");
            assert_eq!(key(&k), k, "a key read back is the key");
        }
        assert_ne!(key("a/b"), key("a b"));
    }

    #[test]
    fn waiters_renew_once_a_ttl_until_together_they_write_too_much() {
        let ttl = Duration::from_secs(15);
        assert_eq!(renew_every(ttl, 1, 2_000), ttl);
        assert_eq!(renew_every(ttl, 30, 10_000), ttl);
        // 1,000 waiters in a ConfigMap of 180 kB: about half an hour.
        let every = renew_every(ttl, 1_000, 180_000);
        assert!(every > Duration::from_secs(2_700), "{every:?}");
        let written = 1_000.0 * 180_000.0 / every.as_secs_f64();
        assert!(written <= WAITERS_BYTES_PER_SECOND as f64 * 1.001);
    }

    #[test]
    fn a_waiter_s_record_is_read_back_and_lives_four_renewal_periods() {
        let every = Duration::from_millis(2_500);
        let waiter = Waiter::new("web-1_00112233aabbccdd", every);
        assert_eq!(waiter.seconds, 10);
        let map = json!({
            "metadata": { "annotations": { lease::LOCK: "job" } },
            "data": {
                "1764600000123-web-1-42": "{}",
                waiter_key("00112233aabbccdd"): serde_json::to_string(&waiter).unwrap(),
                "waiter.broken": "not json",
            },
        });
        let read: Vec<_> = waiters(&map, "job").collect();
        assert_eq!(read, [("waiter.00112233aabbccdd", waiter.clone())]);
        assert!(waiters(&map, "other").next().is_none(), "another lock's");
        assert!(!read[0].1.left_by_wall_clock().is_zero());
        assert_eq!(entries(&map).count(), 1, "a waiter is no tenure");
    }
}
