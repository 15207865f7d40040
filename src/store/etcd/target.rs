//! How to reach an etcd cluster: endpoints, TLS, and credentials.
//!
//! Secrets never go on a command line, where `ps` shows them to every user:
//! a password comes from where every store finds one (`--password-file`,
//! the URL, `ELECT_PASSWORD`; etcdctl's `ETCDCTL_USER`), else a prompt on a
//! terminal. The
//! target's `Display` (what `ELECT_STORE` becomes for the command) and its
//! `Debug` never show them.

use std::fmt;
use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Etcd;
use crate::store::kind::{About, Kind, Settings, Target, redact};
use crate::store::secret::{Secret, find_password, read_client_certificate, read_pem};
use crate::store::{Boxed, Store, StoreError};

/// etcd's URLs: `etcd://` and `etcds://` (TLS), and `http://`/`https://`
/// as etcdctl writes them; `ETCDCTL_ENDPOINTS` when nothing else names a
/// store.
pub const KIND: Kind = Kind {
    name: "etcd",
    forms: &["etcd://HOST:PORT[,HOST:PORT...]", "etcds://HOST:PORT (TLS)"],
    claims: |url| {
        url.split_once("://").is_some_and(|(scheme, _)| {
            matches!(
                scheme.to_ascii_lowercase().as_str(),
                "etcd" | "etcds" | "http" | "https"
            )
        })
    },
    parse: |url, settings| {
        let (scheme, rest) = url.split_once("://").unwrap_or(("etcd", url));
        let tls = matches!(scheme.to_ascii_lowercase().as_str(), "etcds" | "https");
        let mut target = EtcdTarget::parse(rest, tls)
            .map_err(|e| StoreError::config(format!("store URL '{}': {e}", redact(url))))?;
        target.secure(settings)?;
        Ok(Box::new(target))
    },
    from_env: || {
        let list = std::env::var("ETCDCTL_ENDPOINTS").ok()?;
        (!list.trim().is_empty()).then(|| ("ETCDCTL_ENDPOINTS", format!("etcd://{list}")))
    },
    release: |order, within| {
        let order: Result<ReleaseOrder, _> = serde_json::from_slice(order);
        Box::pin(async move {
            let order =
                order.map_err(|e| StoreError::config(format!("a bad release order: {e}")))?;
            let etcd = Etcd::connect(&order.target, within, within).await?;
            etcd.revoke(order.lease, within).await?;
            Ok(Box::new(etcd) as Box<dyn Store>)
        })
    },
    greeting: Some(&super::greeting::GREETING),
    about: About {
        title: "etcd",
        help: "etcd://HOST:PORT[,HOST:PORT...], etcds://... for TLS",
        reference: "`etcd://HOST:PORT[,HOST:PORT...]`, `etcds://` for TLS",
        schemes: &["etcd://", "etcds://"],
        reads: &[
            (
                "ETCDCTL_ENDPOINTS",
                "etcd endpoints (HOST:PORT,...) when neither --store nor ELECT_STORE is set.",
            ),
            (
                "ETCDCTL_USER, ETCDCTL_CACERT, ETCDCTL_CERT, ETCDCTL_KEY",
                "etcdctl's own variables (ETCDCTL_USER is NAME[:PASSWORD]), when elect's flags and variables do not say otherwise.",
            ),
        ],
        secrets: SECRET_VARIABLES,
        key: "the key of this holder, `<lock>/<lease id hex>`",
        lease_id: "the lease id, hexadecimal",
        cacert: Some("else the system's roots"),
        user: Some("its user"),
        store_variable: Some("ETCDCTL_ENDPOINTS"),
    },
};

/// Everything needed to revoke a lease from another process.
#[derive(Serialize, Deserialize)]
struct ReleaseOrder {
    target: EtcdTarget,
    lease: i64,
}

/// The secrets of etcd's own tools: the command never sees them.
const SECRET_VARIABLES: &[&str] = &["ETCDCTL_PASSWORD", "ETCDCTL_USER"];

/// Why the part of an etcd URL after the scheme names no cluster.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("bad user name before '@'")]
    User,
    #[error(
        "unknown option '{name}': etcd's URL takes none; its settings are the \
         flags --user, --password-file, --cacert, --cert and --key"
    )]
    Option { name: String },
    #[error("mixes http:// and https:// endpoints")]
    MixedSchemes,
    #[error("an http:// endpoint in a TLS store URL")]
    PlainInTls,
    #[error("empty endpoint")]
    EmptyEndpoint,
    #[error("'{item}' is not HOST:PORT")]
    NotHostPort { item: String },
    #[error("'{item}': unclosed '['")]
    Unclosed { item: String },
    #[error("'{item}' has no host")]
    NoHost { item: String },
    #[error("'{item}' has a bad port")]
    Port { item: String },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EtcdTarget {
    /// `host:port` of each member.
    pub endpoints: Vec<String>,
    pub tls: bool,
    /// PEM: the CA that signed the servers' certificates; else the system's roots.
    pub ca: Option<Vec<u8>>,
    /// PEM: a client certificate and its private key.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
    pub user: Option<String>,
    pub password: Option<Secret>,
}

impl EtcdTarget {
    /// `[user[:password]@]host:port[,host:port...]`; each endpoint may carry
    /// `http://` or `https://` (as in `ETCDCTL_ENDPOINTS`).
    pub fn parse(rest: &str, tls: bool) -> Result<Self, UrlError> {
        let (userinfo, list) = match rest.rsplit_once('@') {
            Some((userinfo, list)) => (Some(userinfo), list),
            None => (None, rest),
        };
        let (user, password) = match userinfo {
            None => (None, None),
            Some(info) => match info.split_once(':') {
                Some((user, pw)) => (Some(user.to_string()), Some(Secret(pw.to_string()))),
                None => (Some(info.to_string()), None),
            },
        };
        if user
            .as_deref()
            .is_some_and(|u| u.is_empty() || u.contains([',', '/']))
        {
            return Err(UrlError::User);
        }
        if let Some((_, query)) = list.split_once('?') {
            let first = query.split('&').next().unwrap_or_default();
            let name = first.split('=').next().unwrap_or_default();
            return Err(UrlError::Option { name: name.into() });
        }
        let mut endpoints = Vec::new();
        let mut schemes = (false, false);
        for item in list.split(',') {
            let item = item.trim();
            let item = if let Some(rest) = item.strip_prefix("https://") {
                schemes.1 = true;
                rest
            } else if let Some(rest) = item.strip_prefix("http://") {
                schemes.0 = true;
                rest
            } else {
                item
            };
            endpoints.push(endpoint(item.trim_end_matches('/'))?);
        }
        match schemes {
            (true, true) => Err(UrlError::MixedSchemes),
            (true, false) if tls => Err(UrlError::PlainInTls),
            (_, https) => Ok(EtcdTarget {
                endpoints,
                tls: tls || https,
                ca: None,
                identity: None,
                user,
                password,
            }),
        }
    }

    /// Add the certificates and credentials that flags and the environment give.
    pub fn secure(&mut self, args: &Settings) -> Result<(), StoreError> {
        self.certificates(args)?;
        self.credentials(args)
    }

    /// The CA and the client certificate, from flags or etcdctl's variables.
    fn certificates(&mut self, args: &Settings) -> Result<(), StoreError> {
        let path = |flag: &Option<PathBuf>, fallback: &str| {
            flag.clone().or_else(|| {
                std::env::var_os(fallback)
                    .filter(|v| !v.is_empty())
                    .map(PathBuf::from)
            })
        };
        if let Some(ca) = path(&args.cacert, "ETCDCTL_CACERT") {
            self.ca = Some(read_pem(&ca, "--cacert", "CERTIFICATE")?);
        }
        match (
            path(&args.cert, "ETCDCTL_CERT"),
            path(&args.key, "ETCDCTL_KEY"),
        ) {
            (Some(cert), Some(key)) => {
                let cert = read_client_certificate(&cert, "--cert")?;
                let key = read_pem(&key, "--key", "PRIVATE KEY")?;
                self.identity = Some((cert, key));
            }
            (None, None) => {}
            (Some(_), None) => {
                return Err(StoreError::config(
                    "--cert needs --key (the client certificate's private key)",
                ));
            }
            (None, Some(_)) => {
                return Err(StoreError::config(
                    "--key needs --cert (the client certificate)",
                ));
            }
        }
        // Certificates mean TLS: never send them, or anything else, in the clear.
        if self.ca.is_some() || self.identity.is_some() {
            self.tls = true;
        }

        Ok(())
    }

    /// The user, from `--user`, the URL or etcdctl's `ETCDCTL_USER`; its
    /// password, in the order of every store
    /// ([`crate::store::secret::find_password`]), etcdctl's being the one in
    /// `ETCDCTL_USER` for the user it names, else a prompt.
    fn credentials(&mut self, args: &Settings) -> Result<(), StoreError> {
        // ETCDCTL_USER is "name:password", as etcdctl reads it.
        let etcdctl_user = std::env::var("ETCDCTL_USER").ok().filter(|u| !u.is_empty());
        let (etcdctl_name, etcdctl_password) =
            match etcdctl_user.as_deref().map(|u| u.split_once(':')) {
                Some(Some((name, pw))) => (Some(name.to_string()), Some(Secret(pw.to_string()))),
                Some(None) => (etcdctl_user.clone(), None),
                None => (None, None),
            };
        if let Some(user) = args.user.clone() {
            self.user = Some(user);
        } else if self.user.is_none() {
            self.user = etcdctl_name.clone();
        }
        let user = self.user.clone();
        let etcdctl = || etcdctl_password.filter(|_| etcdctl_name == user);
        self.password = find_password(
            user.as_deref(),
            args.password_file.as_deref(),
            self.password.take(),
            |name| std::env::var(name).ok(),
            etcdctl,
        )?;
        if let (Some(user), None) = (&self.user, &self.password) {
            self.password = Some(prompt(user)?);
        }
        Ok(())
    }
}

/// Validate one `host[:port]`, defaulting the port to etcd's 2379.
fn endpoint(item: &str) -> Result<String, UrlError> {
    if item.is_empty() {
        return Err(UrlError::EmptyEndpoint);
    }
    if item.contains(['/', '?', '#', ' ']) || item.chars().any(char::is_control) {
        return Err(UrlError::NotHostPort { item: item.into() });
    }
    let (host, port) = if let Some(v6) = item.strip_prefix('[') {
        let (addr, after) = v6
            .split_once(']')
            .ok_or_else(|| UrlError::Unclosed { item: item.into() })?;
        (format!("[{addr}]"), after.strip_prefix(':'))
    } else {
        match item.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (item.to_string(), None),
        }
    };
    if host.is_empty() || host == "[]" {
        return Err(UrlError::NoHost { item: item.into() });
    }
    let port = match port {
        None => 2379,
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| UrlError::Port { item: item.into() })?,
    };
    Ok(format!("{host}:{port}"))
}

impl fmt::Display for EtcdTarget {
    /// Without credentials: this is what the command sees in `ELECT_STORE`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.tls { "etcds" } else { "etcd" };
        write!(f, "{scheme}://{}", self.endpoints.join(","))
    }
}

impl Target for EtcdTarget {
    fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    fn password(&self) -> Option<&Secret> {
        self.password.as_ref()
    }

    fn release_order(&self, id: &str) -> Option<Vec<u8>> {
        let order = ReleaseOrder {
            target: self.clone(),
            lease: i64::from_str_radix(id, 16).ok()?,
        };
        serde_json::to_vec(&order).ok()
    }

    fn open(
        &self,
        ping_timeout: Duration,
        connect_timeout: Duration,
    ) -> Boxed<'_, Result<Box<dyn Store>, StoreError>> {
        Box::pin(async move {
            let store: Box<dyn Store> =
                Box::new(Etcd::connect(self, ping_timeout, connect_timeout).await?);
            Ok(store)
        })
    }

    fn contact(&self) -> Option<crate::store::probe::Contact> {
        Some(crate::store::probe::Contact {
            expects: &super::greeting::GREETING,
            tls: self.tls,
            addresses: self.endpoints.clone(),
        })
    }
}

/// Ask on the terminal, without echo; fail if there is no terminal to ask on.
fn prompt(user: &str) -> Result<Secret, StoreError> {
    use nix::sys::termios::{LocalFlags, SetArg, tcgetattr, tcsetattr};
    let stdin = std::io::stdin();
    if !(stdin.is_terminal() && std::io::stderr().is_terminal()) {
        return Err(StoreError::config(format!(
            "etcd user {user} needs a password: give --password-file or ELECT_PASSWORD (no terminal to ask on)"
        )));
    }
    eprint!("elect: password for etcd user {user}: ");
    let _ = std::io::stderr().flush();
    let saved = tcgetattr(&stdin).ok();
    if let Some(modes) = &saved {
        let mut quiet = modes.clone();
        quiet.local_flags.remove(LocalFlags::ECHO);
        let _ = tcsetattr(&stdin, SetArg::TCSANOW, &quiet);
    }
    let mut line = String::new();
    let read = stdin.lock().read_line(&mut line);
    if let Some(modes) = &saved {
        let _ = tcsetattr(&stdin, SetArg::TCSANOW, modes);
    }
    eprintln!();
    read.map_err(|e| StoreError::config(format!("cannot read the password: {e}")))?;
    let password = line.trim_end_matches(['\n', '\r']);
    if password.is_empty() {
        return Err(StoreError::config("no password given"));
    }
    Ok(Secret(password.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_with_credentials_and_schemes() {
        let t = EtcdTarget::parse("alice:s3cret@a:1,b", false).unwrap();
        assert_eq!(t.endpoints, ["a:1", "b:2379"]);
        assert_eq!(t.user.as_deref(), Some("alice"));
        assert_eq!(t.password.as_ref().map(Secret::expose), Some("s3cret"));
        assert!(!format!("{t:?}").contains("s3cret"));
        assert!(
            EtcdTarget::parse("https://a:1,https://b:2", false)
                .unwrap()
                .tls
        );
        assert!(EtcdTarget::parse("http://a:1,https://b:2", false).is_err());
        let err = EtcdTarget::parse("u:p?w@a:1?x=y", false)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("unknown option 'x'"), "{err}");
        assert!(
            EtcdTarget::parse("http://a:1", true).is_err(),
            "no downgrade inside a TLS URL"
        );
        assert!(EtcdTarget::parse("@a:1", false).is_err());
    }

    #[test]
    fn each_bad_url_says_why() {
        let why = |rest: &str, tls: bool| EtcdTarget::parse(rest, tls).unwrap_err().to_string();
        assert_eq!(why("@a:1", false), "bad user name before '@'");
        assert_eq!(
            why("a:1?x=y", false),
            "unknown option 'x': etcd's URL takes none; its settings are the flags --user, \
             --password-file, --cacert, --cert and --key"
        );
        assert_eq!(
            why("http://a:1,https://b:2", false),
            "mixes http:// and https:// endpoints"
        );
        assert_eq!(
            why("http://a:1", true),
            "an http:// endpoint in a TLS store URL"
        );
        assert_eq!(why("a,,b", false), "empty endpoint");
        assert_eq!(why("a b", false), "'a b' is not HOST:PORT");
        assert_eq!(why("[::1", false), "'[::1': unclosed '['");
        assert_eq!(why(":1", false), "':1' has no host");
        assert_eq!(why("a:0", false), "'a:0' has a bad port");
    }

    fn parse(url: &str) -> Result<(), StoreError> {
        assert!((KIND.claims)(url), "{url}");
        (KIND.parse)(url, &Settings::default()).map(|_| ())
    }

    #[test]
    fn store_urls() {
        let shown = |url: &str| (KIND.parse)(url, &Settings::default()).map(|t| t.to_string());
        assert_eq!(
            shown("etcd://127.0.0.1:2379").unwrap(),
            "etcd://127.0.0.1:2379"
        );
        assert_eq!(shown("etcd://a:1,b").unwrap(), "etcd://a:1,b:2379");
        assert_eq!(shown("etcd://[::1]:23").unwrap(), "etcd://[::1]:23");
        assert_eq!(shown("etcds://a:1").unwrap(), "etcds://a:1");
        assert_eq!(shown("http://b:2,c:3").unwrap(), "etcd://b:2,c:3");
        assert_eq!(
            shown("etcd://u:secret@a:1").unwrap(),
            "etcd://a:1",
            "ELECT_STORE never carries credentials"
        );
        for bad in [
            "etcd://",
            "etcd://:1",
            "etcd://a:0",
            "etcd://a:x",
            "etcd://a,,b",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        let err = shown("etcd://u:secret@a:notaport").unwrap_err();
        assert!(!err.message.contains("secret"), "{}", err.message);
        assert!(!(KIND.claims)("file:/x") && !(KIND.claims)("zk://a"));
    }
}
