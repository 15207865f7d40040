//! What a kind of store is to elect: the URLs it answers to, what it says
//! of itself, the settings it is offered, and the [`Target`] it parses a
//! URL into.
//!
//! This is what every store implements and what the registry
//! ([`super::KINDS`]) lists; it names no store, so that the stores depend
//! on it and the registry on them, never the other way round.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use super::api::{Boxed, Store, StoreError};
use super::names::NameError;
use super::probe;
use super::records::to_json;
use super::secret::Secret;

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
    /// How the probe greets it and tells its answer; `None` for a store
    /// with no address to look at (a directory).
    pub greeting: Option<&'static probe::Greeting>,
    /// What it says of itself, for everything that lists the stores.
    pub about: About,
}

/// What a kind of store says of itself: `--store`'s help, the ENVIRONMENT
/// section of the help and the man pages, the completions' schemes and the
/// reference's tables are made from these, so that a new store is one entry
/// in [`KINDS`](super::KINDS) and none of those places.
pub struct About {
    /// Its name in prose: `PostgreSQL`.
    pub title: &'static str,
    /// Its URL forms for `--store`'s help, plain.
    pub help: &'static str,
    /// The same for docs/reference.md's `--store` row, in Markdown.
    // Read by the tests that write and check the docs and completions.
    #[cfg_attr(not(test), allow(dead_code))]
    pub reference: &'static str,
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
    /// What `--cacert` is to it, for the flag's help; `None`: refused.
    pub cacert: Option<&'static str>,
    /// Who `--user` is on it, for the flag's help; `None`: refused.
    pub user: Option<&'static str>,
    /// The variable of its own tools that names a store, which `from_env`
    /// reads when neither `--store` nor `ELECT_STORE` is set (etcd:
    /// `ETCDCTL_ENDPOINTS`), for `--store`'s help.
    pub store_variable: Option<&'static str>,
}

impl fmt::Debug for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

/// How a kind carries out a release order.
pub type ReleaseFn = fn(&[u8], Duration) -> Boxed<'static, Result<Box<dyn Store>, StoreError>>;

/// How a kind parses its URLs.
pub type ParseFn = fn(&str, &Settings) -> Result<Box<dyn Target>, StoreError>;

/// A store's address and settings, parsed and checked; nothing sent yet.
/// `Display` is the URL as shown to users and handed to the command in
/// `ELECT_STORE`: never with credentials.
pub trait Target: fmt::Display + fmt::Debug {
    /// This store's limits on lock names, beyond
    /// [`check_lock_name`](super::check_lock_name).
    fn check_lock_name(&self, _name: &str) -> Result<(), NameError> {
        Ok(())
    }
    /// This store's limits on a holder's key as given to `check` and
    /// `checkpoint put` (`--holder-key`, `ELECT_KEY`): a key that could be
    /// no holder's on this store is refused before anything is sent.
    fn check_holder_key(&self, _key: &str) -> Result<(), NameError> {
        Ok(())
    }
    /// How the store names itself in messages, where its URL (`Display`,
    /// what the command gets in `ELECT_STORE`) leaves out what was found
    /// after it was given: a `k8s:` store's namespace.
    fn shown(&self) -> String {
        self.to_string()
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
    /// Where the store is reached, over TCP or a Unix socket, and what
    /// should answer there, for a look of elect's own when its client gets
    /// nowhere ([`probe`]); `None` where there is no such address (a
    /// directory).
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

/// A URL with its password replaced by `***`, for error messages: in
/// `USER:PASSWORD@` (the user stays, as every other message shows it) and
/// in a `password=` setting (libpq's URLs take one).
pub fn redact(url: &str) -> String {
    let start = url.find("://").map_or(0, |s| s + 3);
    // The last '@', as a password may hold one.
    let shown = match url[start..].rfind('@').map(|at| url[start..].split_at(at)) {
        Some((userinfo, rest)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{}{user}:***{rest}", &url[..start]),
            None => url.to_string(),
        },
        None => url.to_string(),
    };
    let Some((base, query)) = shown.split_once('?') else {
        return shown;
    };
    let query: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((key, _)) if key.eq_ignore_ascii_case("password") => format!("{key}=***"),
            _ => pair.to_string(),
        })
        .collect();
    format!("{base}?{}", query.join("&"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_shown_with_its_user_and_without_its_password() {
        for (url, shown) in [
            ("postgres://alice@db/app", "postgres://alice@db/app"),
            (
                "postgres://alice:s3cret@db/app",
                "postgres://alice:***@db/app",
            ),
            (
                "postgres://alice:s3@c:ret@db/app",
                "postgres://alice:***@db/app",
            ),
            (
                "postgres://alice@db/app?password=s3cret&x=1",
                "postgres://alice@db/app?password=***&x=1",
            ),
            ("etcd:alice:s3cret@h:1", "etcd:***@h:1"),
            ("etcd://h:1", "etcd://h:1"),
        ] {
            assert_eq!(redact(url), shown, "{url}");
        }
    }
}
