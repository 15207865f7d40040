//! A lock's history on Kubernetes: one ConfigMap a lock beside its Lease
//! (`<object>.elect-history`), each tenure a key of its `data` whose value
//! is the record's JSON, so that `kubectl get leases` lists the locks and
//! their waiters alone.
//!
//! A tenure's write is a JSON merge patch of its one key: hosts ending
//! their runs at once never conflict. A write only where none is (a
//! `running` record, which must never hide how the tenure ended) cannot be
//! a merge patch, nor a standard JSON Patch (its `test` of a member that
//! is absent fails by RFC 6902, and passes only by a quirk of the API
//! server's library); it is a read, then a merge patch carrying the
//! `resourceVersion` read, which the API server takes as a precondition:
//! a 409 is read again.

use serde_json::{Map, Value, json};

use super::lease;

/// What a lock's object name is followed by in its history's name.
const SUFFIX: &str = ".elect-history";

pub fn configmaps(namespace: &str) -> String {
    format!("/api/v1/namespaces/{namespace}/configmaps")
}

pub fn path(namespace: &str, name: &str) -> String {
    format!("{}/{name}", configmaps(namespace))
}

/// The ConfigMaps of every lock's history, as a query.
pub fn all(namespace: &str) -> String {
    format!(
        "{}?labelSelector={}",
        configmaps(namespace),
        lease::RECORDS_OF
    )
}

/// The history ConfigMap of the lock whose Lease is `object`: the object's
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

/// A new history ConfigMap `name` of `lock` (its Lease `object`), with
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

/// The lock a history ConfigMap is of, by its annotation.
pub fn lock_of(map: &Value) -> Option<&str> {
    map["metadata"]["annotations"][lease::LOCK].as_str()
}

/// Its tenures: each key and value.
pub fn entries(map: &Value) -> impl Iterator<Item = (&String, &str)> {
    map["data"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k, v.as_str()?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_history_is_named_by_its_lock_s_object_within_an_object_name() {
        assert_eq!(name("nightly-report"), "nightly-report.elect-history");
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
}
