//! Coordination stores, behind one boundary ([`api`]).
//!
//! A store grants leases and queues holders under locks; it knows nothing of
//! children, signals or deadlines: [`crate::lease`] turns renewals into a
//! deadline, and [`crate::supervisor`] enforces it. This module only picks
//! the store that a URL names, from [`KINDS`].
//!
//! Adding a store is one module (or folder) here that defines a [`Kind`]
//! and a [`Target`], and one line in [`KINDS`]: its URL syntax, its own
//! environment variables and secrets, its lock-name rules and which common
//! flags it accepts all live in that module. What a store implements is
//! defined in [`api`] and [`kind`], which name no store: the stores depend
//! on them, and only this registry on the stores.

mod api;
pub mod breaking;
pub mod etcd;
pub mod file;
mod holder;
pub mod ids;
pub mod k8s;
mod kind;
mod lease_row;
pub mod mysql;
mod names;
mod observed;
pub mod postgres;
pub mod probe;
pub mod records;
mod retry;
pub mod rewind;
mod token;
pub use token::Token;
mod secret;
pub use secret::Secret;
mod tls;
pub mod zk;

pub use api::{
    Boxed, Breaking, ErrorKind, Fence, Lock, Look, Loss, Renewal, Renewer, Session, Store,
    StoreError, Turn, Versioned, first_turn, look_apart, with_causes,
};
pub use holder::{Broken, Check, Forced, Holder, HolderRecord, LockStatus, Owner};
pub use kind::{About, Credentials, Kind, Settings, Target};
pub use names::{
    LockName, MAX_SHARDS, NameError, check_lock_name, check_slot, is_lock_or_shard, shard_lock,
};
pub use records::{
    CHECKPOINT_IN_ENV_MAX, CHECKPOINT_MAX, Checkpoint, HISTORY, Put, Record, to_json,
};

/// How long after a lease row's expiry a waiter on it (PostgreSQL, MySQL)
/// looks again: enough that the look finds it expired by the database's
/// clock too, never so long that a handover waits on it.
pub const PAST_EXPIRY: std::time::Duration = std::time::Duration::from_millis(5);

/// How often a waiter on a lease row (PostgreSQL, MySQL) reads a busy
/// lock's row at most, when nothing wakes it: no LISTEN (a transaction
/// pooler), no holder's doorbell.
pub const POLL_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

use std::fmt;
use std::time::Duration;

use kind::redact;

/// Every store elect knows. Registering a store is one line here.
const KINDS: &[&Kind] = &[
    &etcd::KIND,
    &postgres::KIND,
    &mysql::KIND,
    &zk::KIND,
    &k8s::KIND,
    &file::KIND,
];

/// The store used when neither `--store`, `ELECT_STORE` nor a store's own
/// environment names one.
pub const DEFAULT_STORE: &str = "etcd://127.0.0.1:2379";

/// Every store's URL forms, for messages: `etcd://HOST:PORT[,HOST:PORT...]`.
pub fn forms() -> Vec<&'static str> {
    KINDS.iter().flat_map(|k| k.forms.iter().copied()).collect()
}

/// Every kind of store, for what lists them.
pub fn kinds() -> impl Iterator<Item = &'static Kind> {
    KINDS.iter().copied()
}

/// Where the lock lives: the store the settings name.
#[derive(Debug)]
pub struct Location {
    kind: &'static Kind,
    target: Box<dyn Target>,
}

impl Location {
    /// The store from `--store`/`ELECT_STORE`, else from a store's own
    /// environment, else the local default.
    pub fn from_settings(settings: &Settings) -> Result<Self, StoreError> {
        Location::choose(settings, KINDS.iter().find_map(|kind| (kind.from_env)()))
    }

    /// The store named by the settings, else by `from_env`, else the default.
    fn choose(
        settings: &Settings,
        from_env: Option<(&'static str, String)>,
    ) -> Result<Self, StoreError> {
        // A blank one is refused as it parses, never taken for the default
        // (the command line's is refused before: `usage.rs`).
        if let Some(url) = settings.store.as_deref() {
            return Location::parse(url, settings);
        }
        match from_env {
            Some((variable, url)) => Location::parse(&url, settings)
                .map_err(|e| StoreError::config(format!("{variable}: {e}"))),
            None => Location::parse(DEFAULT_STORE, settings),
        }
    }

    pub fn parse(url: &str, settings: &Settings) -> Result<Self, StoreError> {
        let url = url.trim();
        match KINDS.iter().find(|kind| (kind.claims)(url)) {
            Some(kind) => (kind.parse)(url, settings).map(|target| Location { kind, target }),
            None => {
                let forms = forms();
                let what = match url.split_once("://") {
                    Some((scheme, _)) => {
                        format!("unknown store '{scheme}://' in '{}'.", redact(url))
                    }
                    None => match (likely(url, &forms), url.split_once(':')) {
                        (Some(meant), _) => format!(
                            "store URL '{}' lacks its scheme; did you mean {}?",
                            redact(url),
                            redact(&meant)
                        ),
                        (None, Some((scheme, _)))
                            if !scheme.is_empty()
                                && scheme.chars().all(|c| c.is_ascii_alphanumeric()) =>
                        {
                            format!("unknown store '{scheme}:' in '{}'.", redact(url))
                        }
                        (None, _) => format!("store URL '{}' has no scheme.", redact(url)),
                    },
                };
                Err(StoreError::config(format!(
                    "{what} The forms are {}",
                    forms.join(", ")
                )))
            }
        }
    }

    /// `name` as a lock's name on this store, or why it cannot be one.
    pub fn lock_name(&self, name: &str) -> Result<LockName, NameError> {
        check_lock_name(name)?;
        self.target.check_lock_name(name)?;
        Ok(LockName::checked(name))
    }

    /// Check a holder's key (`--holder-key`, `ELECT_KEY`) for this store.
    pub fn check_holder_key(&self, key: &str) -> Result<(), NameError> {
        self.target.check_holder_key(key)
    }

    /// Check that the names of `shards` shards of `lock` fit this store.
    pub fn check_shard_names(&self, lock: &str, shards: u32) -> Result<(), NameError> {
        // The longest name is the last shard's.
        self.target
            .check_lock_name(&shard_lock(lock, shards.saturating_sub(1)))
    }

    /// What it takes to end session `id` from another process, headed by
    /// the store's kind: see [`Target::release_order`].
    pub fn release_order(&self, id: &str) -> Option<Vec<u8>> {
        let body = self.target.release_order(id)?;
        let mut order = format!("{}\n", self.kind.name).into_bytes();
        order.extend(body);
        Some(order)
    }

    /// Carry out a release order from [`Location::release_order`]; the
    /// store it reached.
    pub async fn release(order: &[u8], within: Duration) -> Result<Box<dyn Store>, StoreError> {
        let (name, body) = order
            .iter()
            .position(|&b| b == b'\n')
            .map(|at| (&order[..at], &order[at + 1..]))
            .ok_or_else(|| StoreError::config("a release order without its store"))?;
        let kind = KINDS
            .iter()
            .find(|k| k.name.as_bytes() == name)
            .ok_or_else(|| StoreError::config("a release order for an unknown store"))?;
        (kind.release)(body, within).await
    }

    /// Variables of the environment that the command must not see.
    pub fn secret_variables(&self) -> &'static [&'static str] {
        self.kind.about.secrets
    }

    /// The user the store is reached as, if any.
    pub fn user(&self) -> Option<&str> {
        self.target.user()
    }

    /// The user's password, if any.
    pub fn password(&self) -> Option<&Secret> {
        self.target.password()
    }

    /// Connect to the store.
    pub async fn open(
        &self,
        ping_timeout: Duration,
        connect_timeout: Duration,
    ) -> Result<Box<dyn Store>, StoreError> {
        self.target.open(ping_timeout, connect_timeout).await
    }

    /// Where the store is reached over TCP: see [`Target::contact`].
    pub fn contact(&self) -> Option<probe::Contact> {
        self.target.contact()
    }
}

impl Location {
    /// The store as shown to a user ([`Target::shown`]), its control
    /// characters escaped ([`crate::log::escaped`]); `Display` is the URL
    /// itself, as the command gets it in `ELECT_STORE`.
    pub fn shown(&self) -> String {
        crate::log::escaped(&self.target.shown()).into_owned()
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.target.fmt(f)
    }
}

/// What a URL without a scheme probably meant: `etcd:HOST:PORT` for
/// `etcd://HOST:PORT`, a path for `file:PATH`.
fn likely(url: &str, forms: &[&str]) -> Option<String> {
    if url.starts_with(['/', '.', '~']) {
        return Some(format!("file:{url}"));
    }
    let (scheme, rest) = url.split_once(':')?;
    let rest = rest.trim_start_matches('/');
    let known = forms
        .iter()
        .filter_map(|form| form.split_once("://"))
        .find(|(known, _)| known.eq_ignore_ascii_case(scheme))
        .map(|(known, _)| format!("{known}://{rest}"));
    // HOST:PORT[,HOST:PORT...], as etcdctl's --endpoints take them.
    let endpoints = url.split(',').all(|e| {
        e.rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty() && !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit())
        })
    });
    known.or_else(|| endpoints.then(|| format!("etcd://{url}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> Result<String, StoreError> {
        Location::parse(url, &Settings::default()).map(|l| l.to_string())
    }

    #[test]
    fn every_scheme_a_store_offers_is_its_own() {
        for kind in kinds() {
            for scheme in kind.about.schemes {
                let url = format!("{scheme}somewhere");
                let claimed: Vec<&str> = kinds()
                    .filter(|k| (k.claims)(&url))
                    .map(|k| k.name)
                    .collect();
                assert_eq!(claimed, [kind.name], "{url}");
            }
        }
    }

    #[test]
    fn each_url_finds_its_store_and_others_are_refused() {
        assert_eq!(parse("etcd://a:1").unwrap(), "etcd://a:1");
        assert_eq!(parse("file:/var/x").unwrap(), "file:/var/x");
        assert_eq!(parse("zk://a/x").unwrap(), "zk://a:2181/x");
        assert_eq!(parse("postgres://u@h/d").unwrap(), "postgres://u@h:5432/d");
        for bad in ["", "consul://a", "a:1", "http//x"] {
            let err = parse(bad).unwrap_err();
            assert_eq!(err.kind, ErrorKind::Config, "{bad}");
            assert!(err.message.contains("file:DIR"), "{}", err.message);
        }
        let err = parse("consul://u:secret@a").unwrap_err();
        assert!(!err.message.contains("secret"), "{}", err.message);
        let err = parse("etcd:127.0.0.1:2379").unwrap_err();
        assert!(
            err.message.contains("did you mean etcd://127.0.0.1:2379?"),
            "{}",
            err.message
        );
        let err = parse("/tmp/x").unwrap_err();
        assert!(
            err.message.contains("did you mean file:/tmp/x?"),
            "{}",
            err.message
        );
        let err = parse("etcd:u:secret@h:1").unwrap_err();
        assert!(!err.message.contains("secret"), "{}", err.message);
    }

    #[test]
    fn store_choice_order() {
        let named = |store: Option<&str>, env: Option<&str>| {
            let settings = Settings {
                store: store.map(String::from),
                ..Settings::default()
            };
            let env = env.map(|url| ("ETCDCTL_ENDPOINTS", url.to_string()));
            Location::choose(&settings, env).map(|l| l.to_string())
        };
        assert_eq!(
            named(Some("etcd://a:1"), Some("etcd://b:2")).unwrap(),
            "etcd://a:1"
        );
        assert_eq!(
            named(None, Some("etcd://http://b:2,c:3")).unwrap(),
            "etcd://b:2,c:3"
        );
        assert_eq!(named(None, None).unwrap(), DEFAULT_STORE);
        let err = named(None, Some("etcd://b:x")).unwrap_err();
        assert!(
            err.message.starts_with("ETCDCTL_ENDPOINTS: "),
            "{}",
            err.message
        );
    }

    #[test]
    fn a_store_refuses_the_flags_it_cannot_use() {
        let settings = Settings {
            cacert: Some("/ca.pem".into()),
            ..Settings::default()
        };
        let err = Location::parse("file:/x", &settings).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Config);
        assert!(err.message.contains("--cacert"), "{}", err.message);
    }
}
