//! What the SQL stores' targets share: the environment a URL is read
//! with, how a URL part is written back, the order that ends a session
//! from another process, and the [`Target`] every one of them is.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::{Dialect, LeaseRows};
use crate::store::kind::{Settings, Target};
use crate::store::probe::Contact;
use crate::store::secret::Secret;
use crate::store::{Boxed, Store, StoreError};

/// The five levels of TLS that libpq's `sslmode` and MySQL's `ssl-mode`
/// share, each store spelling them its own way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TlsMode {
    Off,
    Prefer,
    Require,
    VerifyCa,
    /// The chain and the server's name.
    VerifyHost,
}

/// A client certificate given where TLS is off.
pub struct CertWithoutTls;

impl TlsMode {
    /// Whether the server's certificate is checked against a CA.
    pub fn verifies(self) -> bool {
        matches!(self, TlsMode::VerifyCa | TlsMode::VerifyHost)
    }

    /// Certificates mean TLS, checked: never fall back to the clear, and
    /// with a CA, verify the chain (as libpq does when it finds one, and
    /// MySQL's clients with `--ssl-ca`).
    pub fn with_certificates(self, ca: bool, client_cert: bool) -> Result<TlsMode, CertWithoutTls> {
        let mode = match self {
            TlsMode::Prefer | TlsMode::Require if ca => TlsMode::VerifyCa,
            TlsMode::Prefer if client_cert => TlsMode::Require,
            mode => mode,
        };
        match (mode, client_cert) {
            (TlsMode::Off, true) => Err(CertWithoutTls),
            (mode, _) => Ok(mode),
        }
    }
}

/// A SQL store's parsed URL: what the core needs of it to make it a
/// [`Target`].
#[allow(async_fn_in_trait)]
pub trait SqlTarget:
    fmt::Display + fmt::Debug + Clone + Serialize + DeserializeOwned + 'static
{
    type Db: Dialect + 'static;
    /// The user, and its password where one was found.
    fn account(&self) -> (&str, Option<&Secret>);
    /// As [`Target::contact`].
    fn reached_at(&self) -> Option<Contact>;
    async fn connect(&self, within: Duration) -> Result<Self::Db, StoreError>;
    /// Reach the database to end `tenure`'s session from another process.
    async fn reach_for_release(
        &self,
        tenure: &str,
        within: Duration,
    ) -> Result<Self::Db, StoreError>;
}

impl<T: SqlTarget> Target for T {
    fn user(&self) -> Option<&str> {
        Some(self.account().0)
    }

    fn password(&self) -> Option<&Secret> {
        self.account().1
    }

    fn release_order(&self, id: &str) -> Option<Vec<u8>> {
        serde_json::to_vec(&ReleaseOrder {
            target: self.clone(),
            tenure: id.to_string(),
        })
        .ok()
    }

    fn open(
        &self,
        _ping_timeout: Duration,
        connect_timeout: Duration,
    ) -> Boxed<'_, Result<Box<dyn Store>, StoreError>> {
        Box::pin(async move {
            let store: Box<dyn Store> = Box::new(LeaseRows(self.connect(connect_timeout).await?));
            Ok(store)
        })
    }

    fn contact(&self) -> Option<Contact> {
        self.reached_at()
    }
}

/// A kind's `release`: the order read back, and the store reached to end
/// its session.
pub fn release<T: SqlTarget>(
    order: &[u8],
    within: Duration,
) -> Boxed<'static, Result<Box<dyn Store>, StoreError>> {
    let order: Result<ReleaseOrder<T>, _> = serde_json::from_slice(order);
    Box::pin(async move {
        let order = order.map_err(|e| StoreError::config(format!("a bad release order: {e}")))?;
        let store = order
            .target
            .reach_for_release(&order.tenure, within)
            .await?;
        Ok(Box::new(LeaseRows(store)) as Box<dyn Store>)
    })
}

/// Everything needed to end a session from another process: where, and
/// its tenure.
#[derive(Serialize, Deserialize)]
pub struct ReleaseOrder<T> {
    pub target: T,
    pub tenure: String,
}

/// The environment, as a target's parser sees it.
pub struct Env {
    pub vars: BTreeMap<String, String>,
}

impl Env {
    /// The process's variables that `wanted` names.
    pub fn process(wanted: impl Fn(&str) -> bool) -> Env {
        Env {
            vars: std::env::vars().filter(|(k, _)| wanted(k)).collect(),
        }
    }

    /// A variable that is set and not empty.
    pub fn var(&self, name: &str) -> Option<String> {
        self.vars.get(name).filter(|v| !v.is_empty()).cloned()
    }

    pub fn home(&self) -> Option<PathBuf> {
        self.var("HOME").map(PathBuf::from)
    }

    /// The login name, the clients' default user.
    pub fn login(&self) -> Option<String> {
        nix::unistd::User::from_uid(nix::unistd::getuid())
            .ok()
            .flatten()
            .map(|u| u.name)
    }
}

/// Percent-encode what would break a URL part.
pub fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Why a part of a SQL store's URL cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("bad percent-encoding in '{0}'")]
    Percent(String),
    #[error("'{0}' is not UTF-8 once decoded")]
    NotUtf8(String),
    #[error("option '{0}' has no value")]
    NoValue(String),
    #[error("'{0}': unclosed '['")]
    Unclosed(String),
}

/// What follows a URL's scheme, `[user[:password]@]hosts[/path][?query]`:
/// the user and password (decoded) put in `words`, the rest as written.
pub struct UrlParts<'a> {
    pub hosts: &'a str,
    pub path: Option<&'a str>,
    pub query: Option<&'a str>,
}

impl<'a> UrlParts<'a> {
    pub fn read(rest: &'a str, words: &mut BTreeMap<String, String>) -> Result<Self, UrlError> {
        let (main, query) = match rest.split_once('?') {
            Some((main, query)) => (main, Some(query)),
            None => (rest, None),
        };
        let (authority, path) = match main.split_once('/') {
            Some((authority, path)) => (authority, Some(path)),
            None => (main, None),
        };
        let hosts = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => {
                let (user, password) = match userinfo.split_once(':') {
                    Some((user, pw)) => (user, Some(pw)),
                    None => (userinfo, None),
                };
                if !user.is_empty() {
                    words.insert("user".into(), decode(user)?);
                }
                if let Some(pw) = password {
                    words.insert("password".into(), decode(pw)?);
                }
                hosts
            }
            None => authority,
        };
        Ok(UrlParts { hosts, path, query })
    }

    /// The query's `key=value` options, decoded.
    pub fn options(&self) -> Result<Vec<(String, String)>, UrlError> {
        let pairs = self.query.into_iter().flat_map(|q| q.split('&'));
        pairs
            .filter(|pair| !pair.is_empty())
            .map(|pair| {
                let (key, value) = pair
                    .split_once('=')
                    .ok_or_else(|| UrlError::NoValue(pair.to_string()))?;
                Ok((decode(key)?, decode(value)?))
            })
            .collect()
    }
}

/// `host[:port]`, with `[v6]` hosts.
pub fn split_port(item: &str) -> Result<(&str, Option<&str>), UrlError> {
    if let Some(v6) = item.strip_prefix('[') {
        let (addr, after) = v6
            .split_once(']')
            .ok_or_else(|| UrlError::Unclosed(item.to_string()))?;
        return Ok((addr, after.strip_prefix(':')));
    }
    Ok(match item.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (item, None),
    })
}

/// Percent-decoding, as in URLs.
pub fn decode(text: &str) -> Result<String, UrlError> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| UrlError::Percent(text.to_string()))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| UrlError::NotUtf8(text.to_string()))
}

/// Why a client certificate cannot be had.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// A file that cannot be read, in the words of the reader every store
    /// shares.
    #[error("{}", .0.message)]
    File(StoreError),
    /// `cert` and `key`: the URL's words for `--cert` and `--key`.
    #[error("--cert ({cert}) needs --key ({key})")]
    NoKey {
        cert: &'static str,
        key: &'static str,
    },
    #[error("--key ({key}) needs --cert ({cert})")]
    NoCert {
        cert: &'static str,
        key: &'static str,
    },
}

/// A client certificate and its private key, PEM.
pub type CertPem = (Vec<u8>, Vec<u8>);

/// A client certificate and its key, PEM, from `--cert` and `--key` or
/// else the URL's words for them (`cert` and `key`, with their values):
/// both, or neither.
pub fn client_cert(
    settings: &Settings,
    (cert, cert_path): (&'static str, Option<&str>),
    (key, key_path): (&'static str, Option<&str>),
) -> Result<Option<CertPem>, CertError> {
    let cert_path = settings.cert.clone().or(cert_path.map(PathBuf::from));
    let key_path = settings.key.clone().or(key_path.map(PathBuf::from));
    match (cert_path, key_path) {
        (Some(cert), Some(key)) => Ok(Some((
            crate::store::secret::read_client_certificate(&cert, "--cert")
                .map_err(CertError::File)?,
            crate::store::secret::read_pem(&key, "--key", "PRIVATE KEY")
                .map_err(CertError::File)?,
        ))),
        (None, None) => Ok(None),
        (Some(_), None) => Err(CertError::NoKey { cert, key }),
        (None, Some(_)) => Err(CertError::NoCert { cert, key }),
    }
}
