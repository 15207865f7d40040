//! How to reach ZooKeeper: `zk://HOST:PORT[,HOST:PORT...][/CHROOT]`, or
//! `zks://` for TLS (with `--cacert`, and `--cert`/`--key` for servers that
//! want a client certificate), with digest authentication from `--user`
//! and `--password-file` (or `ELECT_PASSWORD`).

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::ZooKeeper;
use crate::store::kind::{About, Kind, Settings, Target, redact};
use crate::store::secret::{Secret, find_password};
use crate::store::{Boxed, NameError, Store, StoreError};

/// ZooKeeper's URLs.
pub const KIND: Kind = Kind {
    name: "zookeeper",
    forms: &[
        "zk://HOST:PORT[,HOST:PORT...][/CHROOT]",
        "zks://HOST:PORT (TLS)",
    ],
    claims: |url| {
        url.split_once("://")
            .is_some_and(|(scheme, _)| matches!(scheme.to_ascii_lowercase().as_str(), "zk" | "zks"))
    },
    parse: |url, settings| {
        let shown = redact(url);
        let target = ZkTarget::parse(url, settings)
            .map_err(|e| StoreError::config(format!("store URL '{shown}': {e}")))?;
        Ok(Box::new(target))
    },
    from_env: || None,
    release: |order, within| {
        let order: Result<super::ReleaseOrder, _> = serde_json::from_slice(order);
        Box::pin(async move {
            let order =
                order.map_err(|e| StoreError::config(format!("a bad release order: {e}")))?;
            let store = ZooKeeper::release_nodes(order.target, &order.nodes, within).await?;
            Ok(Box::new(store) as Box<dyn Store>)
        })
    },
    greeting: Some(&super::greeting::GREETING),
    about: About {
        title: "ZooKeeper",
        help: "zk://HOST:PORT[,HOST:PORT...][/CHROOT] (zks:// for TLS)",
        reference: "`zk://HOST:PORT[,HOST:PORT...][/CHROOT]` or `zks://` for TLS (see [ZooKeeper](stores/zookeeper.md))",
        schemes: &["zk://", "zks://"],
        reads: &[],
        secrets: &[],
        key: "its node, `/<lock>/_c_<uuid>-lock-<seq>`",
        lease_id: "the session id, hexadecimal",
        cacert: Some("needed by zks://"),
        user: Some("a digest user"),
        store_variable: None,
    },
};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZkTarget {
    /// `host:port` of each server.
    pub servers: Vec<String>,
    /// Where elect's nodes live: `""` for the root, else `/a/b`.
    pub chroot: String,
    pub user: Option<String>,
    pub password: Option<Secret>,
    /// TLS: the CA's certificates (PEM), and a client certificate and key.
    pub tls: Option<ZkTls>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZkTls {
    pub ca: String,
    pub identity: Option<(String, Secret)>,
}

/// Why a ZooKeeper URL, with the settings given, names no store.
#[derive(Debug, thiserror::Error)]
enum UrlError {
    #[error("expected zk://HOST:PORT or zks://HOST:PORT")]
    Scheme,
    /// A certificate or key file that cannot be used, as its reader says.
    #[error("{0}")]
    File(String),
    /// A TLS flag given for a `zk://` URL.
    #[error("{0} needs TLS: use zks://")]
    NeedsTls(&'static str),
    #[error("zks:// needs --cacert, the CA that signed the servers' certificates")]
    NoCacert,
    #[error("--cert needs --key")]
    CertWithoutKey,
    #[error("--key needs --cert")]
    KeyWithoutCert,
    #[error(
        "unknown option '{0}': ZooKeeper's URL takes none; its settings are the flags --user, --password-file, --cacert, --cert and --key"
    )]
    Option(String),
    #[error("chroot: {0}")]
    Chroot(NameError),
    #[error("an empty server")]
    EmptyServer,
    #[error("'{0}' is not HOST:PORT")]
    NotHostPort(String),
    #[error("'{0}' has a bad port")]
    Port(String),
    /// The password, wherever it was looked for, as that says.
    #[error("{0}")]
    Password(String),
    #[error("ZooKeeper user {0} needs a password: give --password-file or ELECT_PASSWORD")]
    NoPassword(String),
}

impl ZkTarget {
    fn parse(url: &str, settings: &Settings) -> Result<ZkTarget, UrlError> {
        let (scheme, rest) = url.split_once("://").ok_or(UrlError::Scheme)?;
        let pem = |path: &std::path::Path, flag: &str, kind: &str| {
            crate::store::secret::read_pem(path, flag, kind)
                .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
                .map_err(|e| UrlError::File(e.message))
        };
        let tls = match scheme.eq_ignore_ascii_case("zks") {
            false => {
                if let Some(flag) = [
                    ("--cacert", settings.cacert.is_some()),
                    ("--cert", settings.cert.is_some()),
                    ("--key", settings.key.is_some()),
                ]
                .iter()
                .find_map(|(flag, given)| given.then_some(flag))
                {
                    return Err(UrlError::NeedsTls(flag));
                }
                None
            }
            true => {
                let ca = match &settings.cacert {
                    Some(path) => pem(path, "--cacert", "CERTIFICATE")?,
                    None => {
                        return Err(UrlError::NoCacert);
                    }
                };
                let identity = match (&settings.cert, &settings.key) {
                    (Some(cert), Some(key)) => Some((
                        crate::store::secret::read_client_certificate(cert, "--cert")
                            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
                            .map_err(|e| UrlError::File(e.message))?,
                        Secret(pem(key, "--key", "PRIVATE KEY")?),
                    )),
                    (None, None) => None,
                    (Some(_), None) => return Err(UrlError::CertWithoutKey),
                    (None, Some(_)) => return Err(UrlError::KeyWithoutCert),
                };
                Some(ZkTls { ca, identity })
            }
        };
        let (userinfo, rest) = match rest.rsplit_once('@') {
            Some((userinfo, rest)) => (Some(userinfo), rest),
            None => (None, rest),
        };
        if let Some((_, query)) = rest.split_once('?') {
            let first = query.split('&').next().unwrap_or_default();
            let name = first.split('=').next().unwrap_or_default();
            return Err(UrlError::Option(name.to_string()));
        }
        let (list, chroot) = match rest.find('/') {
            Some(at) => (&rest[..at], rest[at..].trim_end_matches('/')),
            None => (rest, ""),
        };
        if !chroot.is_empty() {
            crate::store::check_lock_name(chroot).map_err(UrlError::Chroot)?;
        }
        let mut servers = Vec::new();
        for item in list.split(',') {
            let item = item.trim();
            if item.is_empty() {
                return Err(UrlError::EmptyServer);
            }
            let bad = || UrlError::NotHostPort(item.to_string());
            let (host, port) = match item.strip_prefix('[') {
                Some(v6) => {
                    let (addr, after) = v6.split_once(']').ok_or_else(bad)?;
                    if addr.is_empty() || !addr.chars().all(|c| c.is_ascii_hexdigit() || c == ':') {
                        return Err(bad());
                    }
                    let port = match after {
                        "" => None,
                        after => Some(after.strip_prefix(':').ok_or_else(bad)?),
                    };
                    (format!("[{addr}]"), port)
                }
                None => {
                    let (host, port) = match item.split_once(':') {
                        Some((host, port)) => (host, Some(port)),
                        None => (item, None),
                    };
                    let name = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_');
                    if host.is_empty() || !host.chars().all(name) {
                        return Err(bad());
                    }
                    (host.to_string(), port)
                }
            };
            let port = match port {
                None => 2181,
                Some(p) => p
                    .parse::<u16>()
                    .ok()
                    .filter(|p| *p != 0)
                    .ok_or_else(|| UrlError::Port(item.to_string()))?,
            };
            servers.push(format!("{host}:{port}"));
        }
        let (url_user, url_password) = match userinfo.map(|u| u.split_once(':')) {
            None => (None, None),
            Some(Some((user, pw))) => (Some(user.to_string()), Some(Secret(pw.to_string()))),
            Some(None) => (userinfo.map(str::to_string), None),
        };
        let user = settings.user.clone().or(url_user);
        // In the order of every store; ZooKeeper's own tools have none.
        let password = find_password(
            user.as_deref(),
            settings.password_file.as_deref(),
            url_password,
            |name| std::env::var(name).ok(),
            || None,
        )
        .map_err(|e| UrlError::Password(e.message))?;
        if let (Some(user), None) = (&user, &password) {
            return Err(UrlError::NoPassword(user.clone()));
        }
        Ok(ZkTarget {
            servers,
            chroot: chroot.to_string(),
            user,
            password,
            tls,
        })
    }

    /// The connection string: servers, then the chroot.
    pub fn connect_string(&self) -> String {
        format!("{}{}", self.servers.join(","), self.chroot)
    }
}

impl fmt::Display for ZkTarget {
    /// Without credentials: what the command sees in `ELECT_STORE`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.tls.is_some() { "zks" } else { "zk" };
        write!(f, "{scheme}://{}{}", self.servers.join(","), self.chroot)
    }
}

impl Target for ZkTarget {
    /// A holder's key is its node's path: absolute, as ZooKeeper's paths
    /// are (a relative one is no node at all, whatever the servers hold).
    fn check_holder_key(&self, key: &str) -> Result<(), NameError> {
        let reserved = |c: char| {
            c.is_control()
                || ('\u{e000}'..='\u{f8ff}').contains(&c)
                || ('\u{fff0}'..='\u{ffff}').contains(&c)
        };
        let a_path = key.strip_prefix('/').is_some_and(|rest| {
            rest.split('/')
                .all(|segment| !matches!(segment, "" | "." | ".."))
                && !rest.chars().any(reserved)
        });
        match a_path {
            true => Ok(()),
            false => Err(NameError::HolderKey {
                key: crate::log::escaped(key).to_string(),
                expected: "ZooKeeper node: a key is the path of the holder's node, \
                           /LOCK/_c_UUID-lock-SEQ, as elect run gives it in ELECT_KEY \
                           (--holder-key)",
            }),
        }
    }

    fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    fn password(&self) -> Option<&Secret> {
        self.password.as_ref()
    }

    fn release_order(&self, id: &str) -> Option<Vec<u8>> {
        serde_json::to_vec(&super::ReleaseOrder {
            target: self.clone(),
            nodes: id.lines().map(str::to_string).collect(),
        })
        .ok()
    }

    fn open(
        &self,
        _ping_timeout: Duration,
        connect_timeout: Duration,
    ) -> Boxed<'_, Result<Box<dyn Store>, StoreError>> {
        Box::pin(async move {
            let store: Box<dyn Store> = Box::new(ZooKeeper::new(self.clone(), connect_timeout));
            Ok(store)
        })
    }

    fn contact(&self) -> Option<crate::store::probe::Contact> {
        Some(crate::store::probe::Contact {
            expects: &super::greeting::GREETING,
            tls: self.tls.is_some(),
            addresses: self.servers.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> Result<ZkTarget, UrlError> {
        ZkTarget::parse(url, &Settings::default())
    }

    #[test]
    fn urls() {
        let t = parse("zk://a,b:2182/jobs/locks").unwrap();
        assert_eq!(t.servers, ["a:2181", "b:2182"]);
        assert_eq!(t.chroot, "/jobs/locks");
        assert_eq!(t.to_string(), "zk://a:2181,b:2182/jobs/locks");
        assert_eq!(t.connect_string(), "a:2181,b:2182/jobs/locks");
        let t = parse("zk://u:s3cret@a").unwrap();
        assert_eq!(t.to_string(), "zk://a:2181", "never the password");
        assert!(!format!("{t:?}").contains("s3cret"));
        for (bad, says) in [
            ("zks://a", "--cacert"),
            ("zk://a:0", "bad port"),
            ("zk://a,,b", "empty"),
            ("zk://a/../x", "chroot"),
            ("zk://u@a", "needs a password"),
            (
                "zk://h:2181?x=y",
                "unknown option 'x': ZooKeeper's URL takes none",
            ),
            ("zk://h/jobs?x", "unknown option 'x'"),
        ] {
            let err = parse(bad).unwrap_err().to_string();
            assert!(err.contains(says), "{bad}: {err}");
        }
        let certs = Settings {
            cacert: Some("/ca".into()),
            ..Settings::default()
        };
        let err = ZkTarget::parse("zk://a", &certs).unwrap_err().to_string();
        assert!(err.contains("zks://"), "{err}");
    }
}
