//! A `coordination.k8s.io/v1` Lease as client-go's `LeaseLock` reads and
//! writes it, and the object names of elect's locks.
//!
//! Every write is a PUT of the whole object as last read, its
//! `resourceVersion` the precondition, with only the fields a step changes
//! set: `strategy`, `preferredHolder`, labels and others' annotations are
//! kept. A holder is taken with `acquireTime` and `renewTime` now and
//! `leaseTransitions` one more; renewed with its holder's whole spec
//! (`holderIdentity`, `leaseDurationSeconds`, `renewTime` now), as client-go
//! renews, so that a duration someone else edited is put back; let go as
//! client-go lets go: no `holderIdentity`, `leaseDurationSeconds` 1, and
//! for elect's waiters the one to take it next ([`NEXT`]).
//! Nothing of elect's is ever deleted but a waiter record (and the history
//! Leases of earlier versions, once moved into the lock's history
//! ConfigMap, [`super::history`]).

use serde_json::{Map, Value, json};

use crate::store::StoreError;

/// The lock's own name, where the object's name is a mapping of it.
pub const LOCK: &str = "elect/lock";
/// The holder's [`crate::store::HolderRecord`], as JSON.
pub const HOLDER: &str = "elect/holder";
/// The holder's token: the `resourceVersion` of the write that took it,
/// recorded by the first write after that one (the Lease's own
/// `resourceVersion` is the token until then).
pub const TOKEN: &str = "elect/token";
/// `elect break`'s request to let go: an annotation (who asked), and a
/// label (`asked`, or `forced` by `--force`), for `kubectl get -l`.
pub const BREAK: &str = "elect/break";
/// The lock's checkpoint, as JSON.
pub const CHECKPOINT: &str = "elect/checkpoint";
/// The number of shards, recorded once.
pub const SHARDS: &str = "elect/shards";
/// The identity of the holder that took it last.
pub const LAST: &str = "elect/last";
/// The last success, for `--once-per`.
pub const DONE: &str = "elect/done";
/// The identity of the waiter that the holder letting go named to take the
/// Lease next: the other waiters let it have the Lease first for a while
/// ([`crate::store::observed::NAMED_FIRST`]), so that a release wakes one
/// taker, not all.
pub const NEXT: &str = "elect/next";

/// The annotation of the lock's Lease that keeps `record`, for the records
/// a holder writes fenced (`None`: a tenure, a key of the lock's history
/// ConfigMap).
pub fn annotation_of(record: crate::store::Record<'_>) -> Option<String> {
    match record {
        crate::store::Record::Checkpoint => Some(CHECKPOINT.into()),
        crate::store::Record::Shards => Some(SHARDS.into()),
        crate::store::Record::Last => Some(LAST.into()),
        crate::store::Record::Done => Some(DONE.into()),
        crate::store::Record::Slot(key) => Some(format!("elect/slot-{}", hash16(key))),
        crate::store::Record::Tenure(_) => None,
    }
}

/// On a history record of an earlier version (a Lease a tenure, now moved
/// into the lock's ConfigMap): its value, and which record it is.
pub const VALUE: &str = "elect/value";
pub const RECORD: &str = "elect/record";
/// The label that gathers a lock's history: its ConfigMap (and the Leases
/// a tenure of earlier versions).
pub const RECORDS_OF: &str = "elect/records-of";
/// The label of the waiter records (Leases) of earlier versions, which
/// are no locks: an elect of one may still wait beside this one.
pub const WAITERS_OF: &str = "elect/waiters-of";

/// The holder `elect break --force` writes: no one, for a second after an
/// elect holder (which sees it at once), for the Lease's own duration after
/// any other, so that a client-go holder, which finds the Lease another's
/// on its next renewal but stops leading only after its `RenewDeadline`
/// (less than that duration), has stopped before anyone takes it.
pub const BROKEN: &str = "elect-break";

pub fn leases(namespace: &str) -> String {
    format!("/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases")
}

pub fn path(namespace: &str, name: &str) -> String {
    format!("{}/{name}", leases(namespace))
}

/// A watch on the one Lease `name`, from `version`.
pub fn watch(namespace: &str, name: &str, version: &str) -> String {
    format!(
        "{}?watch=1&fieldSelector=metadata.name%3D{name}&resourceVersion={version}&timeoutSeconds=300",
        leases(namespace)
    )
}

/// FNV-1a, 64 bits: a stable hash of a name.
fn fnv(name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The hash of a name in 8 hex digits.
pub(super) fn hash8(name: &str) -> String {
    format!("{:08x}", fnv(name) >> 32)
}

/// The hash of a name in 16 hex digits.
pub(super) fn hash16(name: &str) -> String {
    format!("{:016x}", fnv(name))
}

/// Whether `name` is a DNS-1123 subdomain, as object names must be.
pub fn is_object_name(name: &str) -> bool {
    name.len() <= 253
        && !name.is_empty()
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// The Lease of lock `lock`: the name itself where it is one an object
/// may have (so that a client-go program's Lease `job` is elect's lock
/// `job`); else lowercased, with `/` and `_` as `-`, and a hash of the
/// real name after it, so that two names never map to one object (the
/// real name is kept in the [`LOCK`] annotation, and checked).
pub fn object_name(lock: &str) -> String {
    if is_object_name(lock) {
        return lock.to_string();
    }
    let mapped: String = lock
        .trim_start_matches('/')
        .chars()
        .map(|c| match c {
            '/' | '_' => '-',
            c => c.to_ascii_lowercase(),
        })
        .collect();
    let labels: Vec<&str> = mapped
        .split('.')
        .map(|l| l.trim_matches('-'))
        .filter(|l| !l.is_empty())
        .collect();
    let mut base = labels.join(".");
    base.truncate(200);
    let base = base.trim_end_matches(['-', '.']);
    match base.is_empty() {
        true => format!("lock-{}", hash8(lock)),
        false => format!("{base}-{}", hash8(lock)),
    }
}

/// The Lease name earlier versions gave record `suffix` (a waiter's, a
/// tenure's) of the lock whose object is `name`.
pub fn record_name(name: &str, suffix: &str) -> String {
    let mut base: String = name.chars().take(200).collect();
    base = base.trim_end_matches(['-', '.']).to_string();
    format!("{base}.rec-{}", hash8(&format!("{name}\n{suffix}")))
}

/// The label value that gathers the records of the lock whose object is
/// `name`: its history's ConfigMap (and earlier versions' Leases of its
/// waiters and tenures; a label value is at most 63 characters).
pub fn records_label(name: &str) -> String {
    format!("r-{}", hash8(name))
}

/// The time now as a MicroTime, as the API writes it.
pub fn now_micro() -> String {
    humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string()
}

/// What is left of a record renewed at `renewed` (a MicroTime, by its
/// writer's wall clock) that lives `seconds` past it, by our wall clock:
/// shown, and used to order a wake-up, never who holds a lock.
pub fn left_by_wall_clock(renewed: Option<&str>, seconds: u64) -> std::time::Duration {
    let Some(renewed) = renewed.and_then(|t| humantime::parse_rfc3339(t).ok()) else {
        return std::time::Duration::ZERO;
    };
    let end = renewed + std::time::Duration::from_secs(seconds);
    end.duration_since(std::time::SystemTime::now())
        .unwrap_or_default()
}

/// One Lease object, as read.
#[derive(Clone, Debug, PartialEq)]
pub struct Lease(pub Value);

impl Lease {
    pub fn holder(&self) -> &str {
        self.0["spec"]["holderIdentity"].as_str().unwrap_or("")
    }

    /// `leaseDurationSeconds`, at least 1.
    pub fn seconds(&self) -> u64 {
        self.0["spec"]["leaseDurationSeconds"]
            .as_u64()
            .unwrap_or(1)
            .max(1)
    }

    pub fn version(&self) -> &str {
        self.0["metadata"]["resourceVersion"].as_str().unwrap_or("")
    }

    pub fn name(&self) -> &str {
        self.0["metadata"]["name"].as_str().unwrap_or("")
    }

    pub fn preferred(&self) -> Option<&str> {
        self.0["spec"]["preferredHolder"]
            .as_str()
            .filter(|p| !p.is_empty())
    }

    pub fn renew_time(&self) -> Option<&str> {
        self.0["spec"]["renewTime"].as_str()
    }

    /// The waiter this Lease, let go, names to take it next, unless it is
    /// `me`.
    pub fn named_other(&self, me: &str) -> Option<&str> {
        let next = self.annotation(NEXT).filter(|n| !n.is_empty() && *n != me);
        next.filter(|_| self.holder().is_empty())
    }

    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.0["metadata"]["annotations"][key].as_str()
    }

    /// The lock this object is of, as its annotation names it; its own
    /// name for a Lease elect did not write.
    pub fn lock(&self) -> &str {
        self.annotation(LOCK).unwrap_or_else(|| self.name())
    }

    /// Refuse an object that another lock's name maps to.
    pub fn check_of(&self, lock: &str) -> Result<(), StoreError> {
        match self.annotation(LOCK) {
            Some(other) if other != lock => Err(StoreError::config(format!(
                "lock {lock} maps to Lease {}, which is lock {other}'s: rename one of them",
                self.name()
            ))),
            _ => Ok(()),
        }
    }

    fn annotations(&mut self) -> Option<&mut Map<String, Value>> {
        let meta = &mut self.0["metadata"];
        if !meta["annotations"].is_object() {
            meta["annotations"] = json!({});
        }
        meta["annotations"].as_object_mut()
    }

    pub fn set_label(&mut self, key: &str, value: &str) {
        let meta = &mut self.0["metadata"];
        if !meta["labels"].is_object() {
            meta["labels"] = json!({});
        }
        if let Some(map) = meta["labels"].as_object_mut() {
            map.insert(key.into(), value.into());
        }
    }

    /// Whether its holder renewed it within its duration, by our wall
    /// clock against its `renewTime`: shown, never acted on.
    pub fn live_by_wall_clock(&self) -> bool {
        !self.holder().is_empty() && !self.left_by_wall_clock().is_zero()
    }

    /// What is left of its holder's lease by its `renewTime` and our
    /// wall clock.
    pub fn left_by_wall_clock(&self) -> std::time::Duration {
        left_by_wall_clock(self.renew_time(), self.seconds())
    }

    fn remove_label(&mut self, key: &str) {
        if let Some(map) = self.0["metadata"]["labels"].as_object_mut() {
            map.remove(key);
        }
    }

    /// `elect break` (`who` asked) asks its holder to let go.
    pub fn ask_to_let_go(&mut self, who: &str) {
        self.set_annotation(BREAK, who);
        self.set_label(BREAK, "asked");
    }

    /// No request to let go, asked or forced, is left.
    fn unask(&mut self) {
        self.remove_annotation(BREAK);
        self.remove_label(BREAK);
    }

    pub fn set_annotation(&mut self, key: &str, value: &str) {
        if let Some(map) = self.annotations() {
            map.insert(key.into(), value.into());
        }
    }

    pub fn remove_annotation(&mut self, key: &str) {
        if let Some(map) = self.annotations() {
            map.remove(key);
        }
    }

    fn spec(&mut self) -> &mut Value {
        if !self.0["spec"].is_object() {
            self.0["spec"] = json!({});
        }
        &mut self.0["spec"]
    }

    /// Taken by `holder` for `seconds`, as client-go takes a Lease.
    pub fn take(&mut self, lock: &str, holder: &str, seconds: u64, record: &str) {
        let transitions = self.0["spec"]["leaseTransitions"].as_i64().unwrap_or(0);
        let now = now_micro();
        let spec = self.spec();
        spec["holderIdentity"] = holder.into();
        spec["leaseDurationSeconds"] = seconds.into();
        spec["acquireTime"] = now.clone().into();
        spec["renewTime"] = now.into();
        spec["leaseTransitions"] = (transitions + 1).into();
        self.set_annotation(LOCK, lock);
        self.set_annotation(HOLDER, record);
        if let Some(identity) = identity_in(record) {
            self.set_annotation(LAST, &identity);
        }
        self.remove_annotation(TOKEN);
        self.unask();
        self.remove_annotation(NEXT);
    }

    pub fn renew(&mut self) {
        self.spec()["renewTime"] = now_micro().into();
    }

    /// Renewed by `holder` for `seconds`: its whole spec written again, as
    /// client-go writes it on every renewal, whatever someone else made of
    /// `leaseDurationSeconds` meanwhile.
    pub fn renew_as(&mut self, holder: &str, seconds: u64) {
        let spec = self.spec();
        spec["holderIdentity"] = holder.into();
        spec["leaseDurationSeconds"] = seconds.into();
        self.renew();
    }

    /// Whether elect took it: a holder record beside a holder identity of
    /// elect's form (`<host>_<session id>`).
    pub fn held_by_elect(&self) -> bool {
        self.annotation(HOLDER).is_some() && super::session::session_of(self.holder()).is_some()
    }

    /// Let go as client-go does.
    pub fn let_go(&mut self) {
        self.let_go_to(None);
    }

    /// Let go as client-go does, naming the waiter to take it next, if any.
    pub fn let_go_to(&mut self, next: Option<&str>) {
        match next {
            Some(next) => self.set_annotation(NEXT, next),
            None => self.remove_annotation(NEXT),
        }
        let now = now_micro();
        let spec = self.spec();
        spec["holderIdentity"] = "".into();
        spec["leaseDurationSeconds"] = 1.into();
        spec["acquireTime"] = now.clone().into();
        spec["renewTime"] = now.into();
        for key in [HOLDER, TOKEN] {
            self.remove_annotation(key);
        }
        self.unask();
    }

    /// A new Lease of `lock`, named `name`, held by `holder`.
    pub fn new(name: &str, lock: &str, holder: &str, seconds: u64, record: &str) -> Lease {
        let mut lease = Lease::bare(name, lock, holder, seconds, record);
        if let Some(identity) = identity_in(record) {
            lease.set_annotation(LAST, &identity);
        }
        lease
    }

    fn bare(name: &str, lock: &str, holder: &str, seconds: u64, record: &str) -> Lease {
        let now = now_micro();
        Lease(json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": name,
                "annotations": { LOCK: lock, HOLDER: record },
            },
            "spec": {
                "holderIdentity": holder,
                "leaseDurationSeconds": seconds,
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            },
        }))
    }

    /// Record the token of an elect holder that took it by the write read
    /// here (none after it has recorded it yet), before writing it again:
    /// every writer of a held Lease does so, so it is always the take's.
    pub fn pin_token(&mut self) {
        if !self.holder().is_empty()
            && self.annotation(HOLDER).is_some()
            && self.annotation(TOKEN).is_none()
        {
            let version = self.version().to_string();
            self.set_annotation(TOKEN, &version);
        }
    }

    /// The token of its elect holder: as recorded, else (not written since
    /// the take) its `resourceVersion`; 0 for a holder not elect's.
    pub fn holder_token(&self) -> u64 {
        match self.annotation(TOKEN) {
            Some(token) => token.parse().unwrap_or(0),
            None if !self.holder().is_empty() && self.annotation(HOLDER).is_some() => {
                self.token().unwrap_or(0)
            }
            None => 0,
        }
    }

    /// The token of a write: its `resourceVersion`, which must be a
    /// canonical decimal (Kubernetes 1.35 and later compare them so).
    pub fn token(&self) -> Result<u64, StoreError> {
        parse_version(self.version())
    }
}

/// The identity in a holder record's JSON.
fn identity_in(record: &str) -> Option<String> {
    let record: Value = serde_json::from_str(record).ok()?;
    record["identity"].as_str().map(String::from)
}

/// A resourceVersion as a u64, if it is a canonical decimal.
pub fn parse_version(version: &str) -> Result<u64, StoreError> {
    let canonical = !version.is_empty()
        && version.bytes().all(|b| b.is_ascii_digit())
        && (version == "0" || !version.starts_with('0'));
    match canonical.then(|| version.parse::<u64>().ok()).flatten() {
        Some(n) => Ok(n),
        None => Err(StoreError::config(format!(
            "the API server's resourceVersion '{version}' is not a canonical decimal, so it \
             cannot be a fencing token (elect needs resource versions as Kubernetes 1.35 and \
             later give them)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_names_map_to_object_names_one_to_one() {
        assert_eq!(object_name("job"), "job");
        assert_eq!(object_name("db.maint-2"), "db.maint-2");
        for lock in [
            "Job",
            "jobs/nightly",
            "/locks/x",
            "a_b",
            "a..b",
            "-x-",
            "...",
            "A/B.C_",
        ] {
            let name = object_name(lock);
            assert!(is_object_name(&name), "{lock} -> {name}");
        }
        assert_ne!(object_name("a_b"), object_name("a-b"));
        assert_ne!(object_name("A"), object_name("a"));
        assert!(object_name(&"X".repeat(200)).len() <= 253);
        assert!(is_object_name(&record_name(
            &object_name("jobs/x"),
            ".history/1"
        )));
    }

    #[test]
    fn tokens_are_canonical_decimals() {
        assert_eq!(parse_version("12345").unwrap(), 12345);
        for bad in ["", "012", "1a", "-1", "99999999999999999999999"] {
            assert!(parse_version(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_token_is_the_take_s_version_until_a_later_write_records_it() {
        let mut lease = Lease::new("job", "job", "", 1, "");
        lease.0["metadata"]["resourceVersion"] = "7".into();
        lease.take("job", "host_0123456789abcdef", 3, "{}");
        lease.0["metadata"]["resourceVersion"] = "12".into();
        assert_eq!(lease.annotation(TOKEN), None);
        assert_eq!(lease.holder_token(), 12);
        // The next write records it; the version moves on, the token not.
        lease.pin_token();
        lease.renew();
        lease.0["metadata"]["resourceVersion"] = "15".into();
        assert_eq!(lease.holder_token(), 12);
        lease.pin_token();
        assert_eq!(lease.annotation(TOKEN), Some("12"));
        // A holder not elect's has none.
        let mut foreign = Lease(json!({
            "metadata": { "name": "job", "resourceVersion": "20" },
            "spec": { "holderIdentity": "client-go-1" },
        }));
        assert_eq!(foreign.holder_token(), 0);
        foreign.pin_token();
        assert_eq!(foreign.annotation(TOKEN), None);
        lease.let_go();
        assert_eq!((lease.annotation(TOKEN), lease.holder_token()), (None, 0));
    }

    #[test]
    fn take_renew_and_let_go_keep_what_elect_does_not_own() {
        let mut lease = Lease(json!({
            "metadata": {"name": "job", "resourceVersion": "7", "annotations": {"other": "x"}},
            "spec": {"holderIdentity": "", "leaseTransitions": 4, "strategy": "OldestEmulationVersion", "preferredHolder": "p"},
        }));
        lease.take("job", "me_1", 2, "{}");
        assert_eq!(lease.holder(), "me_1");
        assert_eq!(lease.0["spec"]["leaseTransitions"], 5);
        assert_eq!(lease.0["spec"]["strategy"], "OldestEmulationVersion");
        assert_eq!(lease.annotation("other"), Some("x"));
        assert_eq!(lease.annotation(LOCK), Some("job"));
        lease.let_go();
        assert_eq!(lease.holder(), "");
        assert_eq!(lease.seconds(), 1);
        assert_eq!(lease.0["spec"]["leaseTransitions"], 5);
        assert_eq!(lease.preferred(), Some("p"));
        assert_eq!(lease.annotation(HOLDER), None);
    }

    #[test]
    fn a_release_names_the_next_holder_until_it_is_taken() {
        let mut lease = Lease(json!({"metadata": {"name": "job"}, "spec": {}}));
        lease.take("job", "a_1", 2, "{}");
        lease.let_go_to(Some("b_2"));
        assert_eq!(lease.named_other("c_3"), Some("b_2"));
        assert_eq!(lease.named_other("b_2"), None);
        lease.take("job", "c_3", 2, "{}");
        assert_eq!(
            (lease.annotation(NEXT), lease.named_other("d_4")),
            (None, None)
        );
        // Named, then held by a holder that does not know the annotation.
        lease.let_go_to(Some("b_2"));
        lease.0["spec"]["holderIdentity"] = "client-go-1".into();
        assert_eq!(lease.named_other("c_3"), None);
        lease.let_go();
        assert_eq!(lease.annotation(NEXT), None);
    }
}
