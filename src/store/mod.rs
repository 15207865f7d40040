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
//! flags it accepts all live in that module.

mod api;
pub mod breaking;
pub mod etcd;
pub mod file;
mod holder;
mod observed;
pub mod postgres;
pub mod probe;
mod retry;
mod secret;
pub use secret::Secret;
mod tls;
pub mod zk;

pub use api::{
    Boxed, Breaking, ErrorKind, Fence, Lock, Loss, Renewal, Renewer, Session, Store, StoreError,
    Turn, Versioned, first_turn,
};
pub use holder::{
    Broken, CHECKPOINT_IN_ENV_MAX, CHECKPOINT_MAX, Check, Checkpoint, Forced, HISTORY, Holder,
    HolderRecord, LockStatus, MAX_SHARDS, Owner, Put, Record, check_lock_name, check_slot,
    is_lock_or_shard, shard_lock, to_json,
};

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// Every store elect knows. Registering a store is one line here.
const KINDS: &[&Kind] = &[&etcd::KIND, &postgres::KIND, &zk::KIND, &file::KIND];

/// The store used when neither `--store`, `ELECT_STORE` nor a store's own
/// environment names one.
pub const DEFAULT_STORE: &str = "etcd://127.0.0.1:2379";

/// A kind of store: the URLs it answers to, and how to set one up.
pub struct Kind {
    /// Its name, as it heads its release orders.
    pub name: &'static str,
    /// The URL forms, for messages: `etcd://HOST:PORT`, `file:DIR`.
    pub forms: &'static [&'static str],
    /// Whether `url` is one of this kind's.
    pub claims: fn(&str) -> bool,
    /// Parse `url` with the common settings; read any file they name now,
    /// so that a bad one is reported before anything touches the store.
    pub parse: ParseFn,
    /// A store URL from this kind's own environment, for when neither
    /// `--store` nor `ELECT_STORE` is set: the variable's name and the URL
    /// (etcd: `ETCDCTL_ENDPOINTS`).
    pub from_env: fn() -> Option<(&'static str, String)>,
    /// Carry out a release order ([`Target::release_order`]), and give back
    /// the store it reached, for the history.
    pub release: ReleaseFn,
    /// What it says of itself, for everything that lists the stores.
    pub about: About,
}

/// What a kind of store says of itself: `--store`'s help, the ENVIRONMENT
/// section of the help and the man pages, the completions' schemes and the
/// README's tables are made from these, so that a new store is one entry
/// in [`KINDS`] and none of those places.
pub struct About {
    /// Its name in prose: `PostgreSQL`.
    pub title: &'static str,
    /// Its URL forms for `--store`'s help, plain.
    pub help: &'static str,
    /// The same for the README's `--store` row, in Markdown.
    // Read by the tests that write and check the docs and completions.
    #[cfg_attr(not(test), allow(dead_code))]
    pub readme: &'static str,
    /// Its URL schemes, for the completions: `etcd://`, `file:`.
    #[cfg_attr(not(test), allow(dead_code))]
    pub schemes: &'static [&'static str],
    /// The variables it reads beside the flags', grouped as the
    /// ENVIRONMENT section lists them, with what each group is for.
    pub reads: &'static [(&'static str, &'static str)],
    /// Variables that may carry its secrets: the command never sees them.
    pub secrets: &'static [&'static str],
    /// What `ELECT_KEY` and `ELECT_LEASE_ID` are on it (Markdown).
    pub key: &'static str,
    pub lease_id: &'static str,
}

/// Every kind of store, for what lists them.
pub fn kinds() -> impl Iterator<Item = &'static Kind> {
    KINDS.iter().copied()
}

/// How a kind carries out a release order.
pub type ReleaseFn = fn(&[u8], Duration) -> Boxed<'static, Result<Box<dyn Store>, StoreError>>;

/// How a kind parses its URLs.
pub type ParseFn = fn(&str, &Settings) -> Result<Box<dyn Target>, StoreError>;

/// A store's address and settings, parsed and checked; nothing sent yet.
/// `Display` is the URL as shown to users and handed to the command in
/// `ELECT_STORE`: never with credentials.
pub trait Target: fmt::Display + fmt::Debug {
    /// This store's limits on lock names, beyond [`check_lock_name`].
    fn check_lock_name(&self, _name: &str) -> Result<(), String> {
        Ok(())
    }
    /// The user this store is reached as, wherever it came from (a flag,
    /// the URL, a variable of the store's own tools).
    fn user(&self) -> Option<&str> {
        None
    }
    /// That user's password, wherever it came from: what an elect inside
    /// the command needs to reach the store the same way.
    fn password(&self) -> Option<&Secret> {
        None
    }
    /// What it takes to end session `id` from another process, with every
    /// setting and secret that needs (the guard keeps it in memory and hands
    /// it over through a pipe, never argv or the environment), for when
    /// elect dies while its command runs: the guard kills the command's
    /// group and then ends the session, so the next holder need not wait
    /// for the lease to expire; and where it records how the tenure ended.
    /// `None` if the order cannot be written.
    fn release_order(&self, id: &str) -> Option<Vec<u8>>;
    /// Connect. A keep-alive ping may go unanswered for `ping_timeout`;
    /// `connect_timeout` bounds how long to keep trying to reach the store.
    fn open(
        &self,
        ping_timeout: Duration,
        connect_timeout: Duration,
    ) -> Boxed<'_, Result<Box<dyn Store>, StoreError>>;
    /// Where the store is reached over TCP and what should answer there,
    /// for a look of elect's own when its client gets nowhere
    /// ([`probe`]); `None` where there is no such address (a directory, a
    /// Unix socket).
    fn contact(&self) -> Option<probe::Contact> {
        None
    }
}

/// The settings every store is offered, from flags and the environment. A
/// store that cannot use one refuses it ([`Settings::refuse_security`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// `--store` or `ELECT_STORE`.
    pub store: Option<String>,
    /// `--cacert`: the CA that signed the servers' certificates.
    pub cacert: Option<PathBuf>,
    /// `--cert` and `--key`: a client certificate and its private key.
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    /// `--user` and `--password-file`.
    pub user: Option<String>,
    pub password_file: Option<PathBuf>,
}

/// How an elect reached the store it hands its command in `ELECT_STORE`:
/// what `ELECT_STORE_CREDENTIALS` carries, as JSON (never a password: a
/// file that holds it).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Credentials {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_file: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cacert: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<PathBuf>,
}

impl Credentials {
    pub const VARIABLE: &'static str = "ELECT_STORE_CREDENTIALS";

    pub fn to_env(&self) -> String {
        to_json(self)
    }
}

impl Settings {
    /// Inside a command of `elect run`: for the store it was handed
    /// (`ELECT_STORE`), and only that one, take what the flags and
    /// variables leave out from how that elect reached it
    /// ([`Credentials`]).
    pub fn inherit(mut self) -> Self {
        let (Ok(handed), Ok(credentials)) = (
            std::env::var("ELECT_STORE"),
            std::env::var(Credentials::VARIABLE),
        ) else {
            return self;
        };
        if self.store.as_deref().map(str::trim) != Some(handed.trim()) {
            return self;
        }
        let Ok(c) = serde_json::from_str::<Credentials>(&credentials) else {
            return self;
        };
        // A user of one's own comes with its own password, or none.
        if self.user.is_none() {
            self.user = c.user;
            self.password_file = self.password_file.or(c.password_file);
        }
        self.cacert = self.cacert.or(c.cacert);
        if self.cert.is_none() && self.key.is_none() {
            self.cert = c.cert;
            self.key = c.key;
        }
        self
    }

    /// Refuse certificates and users, for a store that has no use for them.
    pub fn refuse_security(&self, store: &str) -> Result<(), StoreError> {
        let given = [
            ("--cacert", self.cacert.is_some()),
            ("--cert", self.cert.is_some()),
            ("--key", self.key.is_some()),
            ("--user", self.user.is_some()),
            ("--password-file", self.password_file.is_some()),
        ];
        match given.iter().find(|(_, set)| *set) {
            Some((flag, _)) => Err(StoreError::config(format!(
                "the {store} store takes no {flag} (nor its ELECT_ variable)"
            ))),
            None => Ok(()),
        }
    }
}

/// Where the lock lives: the store the settings name.
#[derive(Debug)]
pub struct Location {
    kind: &'static Kind,
    target: Box<dyn Target>,
}

impl fmt::Debug for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
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
        if let Some(url) = settings.store.as_deref().filter(|u| !u.trim().is_empty()) {
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
                let forms: Vec<&str> = KINDS.iter().flat_map(|k| k.forms.iter().copied()).collect();
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

    /// Check a lock name for this store.
    pub fn check_lock_name(&self, name: &str) -> Result<(), String> {
        check_lock_name(name)?;
        self.target.check_lock_name(name)
    }

    /// Check that the names of `shards` shards of `lock` fit this store.
    pub fn check_shard_names(&self, lock: &str, shards: u32) -> Result<(), String> {
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

/// A URL with any `user:password@` removed, for error messages.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://***@{}", &url[..s], &url[at + 1..]),
        (None, Some(at)) => format!("***@{}", &url[at + 1..]),
        _ => url.to_string(),
    }
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
