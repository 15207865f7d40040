//! How to reach MySQL or MariaDB, the way their clients read it, so that
//! the settings a team already has work unchanged: a `mysql://` (or
//! `mariadb://`) URL, then `MYSQL_HOST`, `MYSQL_TCP_PORT` and
//! `MYSQL_UNIX_PORT`, then the `[client]` section of `~/.my.cnf` (user,
//! password, host, port, socket, database, `ssl-mode`, `ssl-ca`,
//! `ssl-cert`, `ssl-key`), then the clients' defaults (`localhost`, which
//! they take for the Unix socket `/run/mysqld/mysqld.sock`, port 3306, the
//! login name as user). elect's own flags (`--user`, `--password-file`,
//! `--cacert`, `--cert`, `--key`) come first. `MYSQL_PWD`, which the
//! clients deprecate, is not read.
//!
//! TLS follows the clients' `ssl-mode`: `DISABLED`, `PREFERRED` (the
//! default: TLS if the server offers it, its certificate unchecked),
//! `REQUIRED` (TLS, unchecked), `VERIFY_CA` (the chain to the CA) and
//! `VERIFY_IDENTITY` (the chain and the host name). An option elect cannot
//! honour is refused, never ignored.
//!
//! The password never shows: not in `Display` (the URL the command gets in
//! `ELECT_STORE`), not in `Debug`, not in any message.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::MySql;
use crate::store::StoreError;
use crate::store::kind::{About, Kind, Settings};
use crate::store::lease_row::TlsMode;
use crate::store::lease_row::target::{
    CertError, Env, SqlTarget, UrlError, UrlParts, client_cert, decode, encode, release, split_port,
};
use crate::store::secret::{Secret, find_password};

/// MySQL's and MariaDB's URLs.
pub const KIND: Kind = Kind {
    name: "mysql",
    forms: &[
        "mysql://USER@HOST:PORT/DB[?ssl-mode=M]",
        "mariadb://USER@HOST:PORT/DB",
    ],
    claims: |url| {
        let lower = url.to_ascii_lowercase();
        lower.starts_with("mysql://") || lower.starts_with("mariadb://")
    },
    parse: |url, settings| Ok(Box::new(MyTarget::parse(url, settings)?)),
    from_env: || None,
    release: release::<MyTarget>,
    greeting: Some(&super::greeting::GREETING),
    about: About {
        title: "MySQL/MariaDB",
        help: "mysql://USER@HOST:PORT/DB (or mariadb://)",
        reference: "`mysql://USER@HOST:PORT/DB` or `mariadb://…` (see [MySQL and MariaDB](stores/mysql.md))",
        schemes: &["mysql://", "mariadb://"],
        reads: &[(
            "MYSQL_HOST, MYSQL_TCP_PORT, MYSQL_UNIX_PORT",
            "the MySQL clients' variables, for what a mysql:// store URL leaves out (then ~/.my.cnf's [client] section).",
        )],
        secrets: SECRET_VARIABLES,
        key: "`<lock>/<session id>`",
        lease_id: "the holder's session id (32 hex digits, fresh for each `elect run`)",
        cacert: Some("as ssl-ca"),
        user: Some("the account"),
        store_variable: None,
    },
};

/// Variables that may carry a secret for MySQL: the command never sees them.
const SECRET_VARIABLES: &[&str] = &["MYSQL_PWD"];

/// The URL options elect understands.
const OPTIONS: &[&str] = &[
    "ssl-mode", "ssl-ca", "ssl-cert", "ssl-key", "socket", "prefix",
];

fn parse_ssl_mode(text: &str) -> Result<TlsMode, TargetError> {
    Ok(match text.to_ascii_uppercase().replace('-', "_").as_str() {
        "DISABLED" => TlsMode::Off,
        "PREFERRED" => TlsMode::Prefer,
        "REQUIRED" => TlsMode::Require,
        "VERIFY_CA" => TlsMode::VerifyCa,
        "VERIFY_IDENTITY" => TlsMode::VerifyHost,
        _ => {
            return Err(TargetError::TlsMode(text.to_string()));
        }
    })
}

pub fn ssl_mode_name(mode: TlsMode) -> &'static str {
    match mode {
        TlsMode::Off => "DISABLED",
        TlsMode::Prefer => "PREFERRED",
        TlsMode::Require => "REQUIRED",
        TlsMode::VerifyCa => "VERIFY_CA",
        TlsMode::VerifyHost => "VERIFY_IDENTITY",
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MyTarget {
    /// `mysql` or `mariadb`, as the URL said.
    pub scheme: String,
    pub host: String,
    pub port: u16,
    /// A Unix socket, used instead of TCP.
    pub socket: Option<String>,
    pub user: String,
    pub password: Option<Secret>,
    pub database: String,
    pub ssl_mode: TlsMode,
    /// PEM: the CA that signed the server's certificate.
    pub ca: Option<Vec<u8>>,
    /// PEM: a client certificate and its private key.
    pub client_cert: Option<(Vec<u8>, Vec<u8>)>,
    /// The tables are PREFIX_lease, PREFIX_waiter and PREFIX_record.
    pub prefix: String,
}

/// Why a MySQL URL, with what fills it in, names no server elect can use.
#[derive(Debug, thiserror::Error)]
enum TargetError {
    #[error("not a mysql:// URL")]
    NotMySql,
    #[error(transparent)]
    Words(#[from] UrlWordsError),
    #[error("unknown option '{unknown}'; elect knows {known}")]
    Unknown { unknown: String, known: String },
    #[error("'{0}' is not a host name")]
    Host(String),
    #[error("'{0}' is not a port")]
    Port(String),
    #[error("no user given and no login name to use")]
    NoUser,
    #[error("no database: name the one that keeps elect's tables, mysql://USER@HOST/DB")]
    NoDatabase,
    #[error("{what} '{name}' is not a plain name (a-z, A-Z, 0-9, _, $; at most 48)")]
    Name { what: &'static str, name: String },
    /// A certificate, key or password file that cannot be read, in the
    /// words of the reader every store shares.
    #[error("{}", .0.message)]
    File(StoreError),
    #[error(transparent)]
    Cert(#[from] CertError),
    #[error(
        "unknown ssl-mode '{0}'; use DISABLED, PREFERRED, REQUIRED, VERIFY_CA or VERIFY_IDENTITY"
    )]
    TlsMode(String),
    #[error("a client certificate with ssl-mode=DISABLED")]
    CertWithoutTls,
    #[error("ssl-mode={0} needs the CA's certificate: give --cacert or ssl-ca")]
    NoCa(&'static str),
}

/// The default socket of the clients (and of Debian's servers).
const DEFAULT_SOCKET: &str = "/run/mysqld/mysqld.sock";

impl MyTarget {
    pub fn parse(url: &str, settings: &Settings) -> Result<MyTarget, StoreError> {
        let shown = format!("store URL '{}'", crate::store::kind::redact(url));
        MyTarget::from_url(
            url,
            settings,
            &Env::process(|k| {
                matches!(
                    k,
                    "MYSQL_HOST" | "MYSQL_TCP_PORT" | "MYSQL_UNIX_PORT" | "HOME" | "ELECT_PASSWORD"
                )
            }),
        )
        .map_err(|e| StoreError::config(format!("{shown}: {e}")))
    }

    fn from_url(url: &str, settings: &Settings, env: &Env) -> Result<MyTarget, TargetError> {
        let (scheme, rest) = url.split_once("://").ok_or(TargetError::NotMySql)?;
        let scheme = scheme.to_ascii_lowercase();
        let mut words = url_words(rest)?;
        if let Some(unknown) = words
            .keys()
            .find(|k| !OPTIONS.contains(&k.as_str()) && !URL_PARTS.contains(&k.as_str()))
        {
            return Err(TargetError::Unknown {
                unknown: unknown.clone(),
                known: OPTIONS.join(", "),
            });
        }
        for (key, variable) in [
            ("host", "MYSQL_HOST"),
            ("port", "MYSQL_TCP_PORT"),
            ("socket", "MYSQL_UNIX_PORT"),
        ] {
            if !words.contains_key(key)
                && let Some(value) = env.var(variable)
            {
                words.insert(key.into(), value);
            }
        }
        let cnf = env
            .home()
            .map(|h| my_cnf_client(&h.join(".my.cnf")))
            .unwrap_or_default();
        for key in [
            "user", "host", "port", "socket", "database", "ssl-mode", "ssl-ca", "ssl-cert",
            "ssl-key",
        ] {
            if !words.contains_key(key)
                && let Some(value) = cnf.get(key)
            {
                words.insert(key.into(), value.clone());
            }
        }
        if let Some(user) = &settings.user {
            words.insert("user".into(), user.clone());
        }
        let get = |key: &str| words.get(key).map(String::as_str).filter(|v| !v.is_empty());

        let host = get("host").unwrap_or("localhost").to_string();
        if host.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(TargetError::Host(host));
        }
        let port = match get("port") {
            None => 3306,
            Some(p) => p
                .parse::<u16>()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| TargetError::Port(p.to_string()))?,
        };
        // As the clients: localhost means the Unix socket.
        let socket = match get("socket") {
            Some(socket) => Some(socket.to_string()),
            None if host == "localhost" => Some(DEFAULT_SOCKET.to_string()),
            None => None,
        };
        let user = match get("user") {
            Some(user) => user.to_string(),
            None => env.login().ok_or(TargetError::NoUser)?,
        };
        let database = get("database").ok_or(TargetError::NoDatabase)?.to_string();
        check_name(&database, "database")?;
        let prefix = get("prefix").unwrap_or("elect").to_string();
        check_name(&prefix, "prefix")?;

        let ca = match (settings.cacert.as_deref(), get("ssl-ca")) {
            (Some(path), _) => Some(read_pem(path, "--cacert", "CERTIFICATE")?),
            (None, Some(path)) => Some(read_pem(Path::new(path), "ssl-ca", "CERTIFICATE")?),
            (None, None) => None,
        };
        let client_cert = client_cert(
            settings,
            ("ssl-cert", get("ssl-cert")),
            ("ssl-key", get("ssl-key")),
        )?;
        let ssl_mode = match get("ssl-mode") {
            Some(mode) => parse_ssl_mode(mode)?,
            None => TlsMode::Prefer,
        }
        .with_certificates(ca.is_some(), client_cert.is_some())
        .map_err(|_| TargetError::CertWithoutTls)?;
        if ssl_mode.verifies() && ca.is_none() {
            return Err(TargetError::NoCa(ssl_mode_name(ssl_mode)));
        }

        let mut target = MyTarget {
            scheme,
            host,
            port,
            socket,
            user,
            password: None,
            database,
            ssl_mode,
            ca,
            client_cert,
            prefix,
        };
        // In the order of every store; the clients' own is ~/.my.cnf.
        let password = find_password(
            Some(&target.user),
            settings.password_file.as_deref(),
            words.get("password").cloned().map(Secret),
            |name| env.var(name),
            || cnf.get("password").cloned().map(Secret),
        )
        .map_err(TargetError::File)?;
        target.password = password;
        Ok(target)
    }

    /// Where the server is, for messages and the probe: `HOST:PORT`.
    pub fn address(&self) -> String {
        match self.host.contains(':') {
            true => format!("[{}]:{}", self.host, self.port),
            false => format!("{}:{}", self.host, self.port),
        }
    }
}

/// The parts of a URL that are not options.
const URL_PARTS: &[&str] = &["user", "password", "host", "port", "database"];

/// `[user[:password]@][host[:port]][/database][?key=value&…]`.
fn url_words(rest: &str) -> Result<BTreeMap<String, String>, UrlWordsError> {
    let mut words = BTreeMap::new();
    let url = UrlParts::read(rest, &mut words)?;
    let hostport = url.hosts;
    if hostport.contains(',') {
        return Err(UrlWordsError::OneServer);
    }
    if !hostport.is_empty() {
        let (host, port) = split_port(hostport)?;
        if !host.is_empty() {
            words.insert("host".into(), decode(host)?);
        }
        if let Some(port) = port {
            words.insert("port".into(), port.to_string());
        }
    }
    if let Some(path) = url.path.filter(|p| !p.is_empty()) {
        words.insert("database".into(), decode(path)?);
    }
    // The clients write both ssl-mode and ssl_mode.
    let options = url.options()?.into_iter();
    words.extend(options.map(|(key, value)| (key.replace('_', "-"), value)));
    Ok(words)
}

/// Why the words of a `mysql://` URL cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
enum UrlWordsError {
    #[error(transparent)]
    Url(#[from] UrlError),
    #[error("one server only: a MySQL URL names one host")]
    OneServer,
}

/// Database and table-prefix names: a plain identifier, so that it needs
/// no quoting beyond the backticks elect puts around it.
fn check_name(name: &str, what: &'static str) -> Result<(), TargetError> {
    let ok = !name.is_empty()
        && name.len() <= 48
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$');
    match ok {
        true => Ok(()),
        false => Err(TargetError::Name {
            what,
            name: name.to_string(),
        }),
    }
}

/// A PEM file, or why not.
fn read_pem(path: &Path, flag: &str, kind: &str) -> Result<Vec<u8>, TargetError> {
    crate::store::secret::read_pem(path, flag, kind).map_err(TargetError::File)
}

/// The `[client]` section of an option file, as the clients read it:
/// `key=value` or `key = "value"`, `_` and `-` alike in keys. A file that
/// others may read still counts (the clients warn only for world-writable
/// ones, which they skip).
fn my_cnf_client(file: &Path) -> BTreeMap<String, String> {
    use std::os::unix::fs::PermissionsExt;
    let mut found = BTreeMap::new();
    let Ok(meta) = std::fs::metadata(file) else {
        return found;
    };
    if meta.permissions().mode() & 0o002 != 0 {
        crate::log::notice(format_args!(
            "option file {} is world-writable; it is not used",
            file.display()
        ));
        return found;
    }
    let Ok(text) = std::fs::read_to_string(file) else {
        return found;
    };
    let mut in_client = false;
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(section) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            in_client = section.trim() == "client";
            continue;
        }
        if !in_client {
            continue;
        }
        let (key, value) = line.split_once('=').unwrap_or((line, ""));
        let key = key.trim().replace('_', "-");
        let mut value = value.trim();
        if value.len() >= 2
            && ((value.starts_with('"') && value.ends_with('"'))
                || (value.starts_with('\'') && value.ends_with('\'')))
        {
            value = &value[1..value.len() - 1];
        }
        let key = if key == "pass" {
            "password".into()
        } else {
            key
        };
        found.insert(key, value.to_string());
    }
    found
}

impl fmt::Display for MyTarget {
    /// A URL that elect reads back to the same target, without the
    /// password: this is what the command sees in `ELECT_STORE`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Over a socket the port means nothing.
        let server = match (self.host.contains(':'), &self.socket) {
            (false, Some(_)) => encode(&self.host),
            (true, _) => format!("[{}]:{}", self.host, self.port),
            (false, None) => format!("{}:{}", encode(&self.host), self.port),
        };
        write!(
            f,
            "{}://{}@{server}/{}",
            self.scheme,
            encode(&self.user),
            self.database
        )?;
        let mut options = Vec::new();
        if self.ssl_mode != TlsMode::Prefer {
            options.push(format!("ssl-mode={}", ssl_mode_name(self.ssl_mode)));
        }
        if let Some(socket) = self.socket.as_deref().filter(|s| *s != DEFAULT_SOCKET) {
            options.push(format!("socket={}", encode(socket)));
        }
        if self.prefix != "elect" {
            options.push(format!("prefix={}", self.prefix));
        }
        if !options.is_empty() {
            write!(f, "?{}", options.join("&"))?;
        }
        Ok(())
    }
}

impl SqlTarget for MyTarget {
    type Db = MySql;

    fn account(&self) -> (&str, Option<&Secret>) {
        (&self.user, self.password.as_ref())
    }

    /// The server over TCP, or its Unix socket (a path from the root: the
    /// probe tells one so). TLS begins inside MySQL's own protocol, after
    /// the server's greeting.
    fn reached_at(&self) -> Option<crate::store::probe::Contact> {
        let address = match &self.socket {
            Some(socket) if socket.starts_with('/') => socket.clone(),
            Some(_) => return None,
            None => self.address(),
        };
        Some(crate::store::probe::Contact {
            expects: &super::greeting::GREETING,
            tls: false,
            addresses: vec![address],
        })
    }

    async fn connect(&self, within: Duration) -> Result<MySql, StoreError> {
        MySql::connect(self, within).await
    }

    async fn reach_for_release(&self, tenure: &str, within: Duration) -> Result<MySql, StoreError> {
        MySql::release_tenure(self, tenure, within).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Env {
        Env {
            vars: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    fn parse_with(url: &str, pairs: &[(&str, &str)]) -> Result<MyTarget, TargetError> {
        MyTarget::from_url(url, &Settings::default(), &env(pairs))
    }

    #[test]
    fn a_url_reads_back_to_the_same_target_without_its_password() {
        let t = parse_with("mysql://alice:s%40cret@db:3307/jobs?prefix=locks", &[]).unwrap();
        assert_eq!(t.password.as_ref().map(Secret::expose), Some("s@cret"));
        assert_eq!(t.to_string(), "mysql://alice@db:3307/jobs?prefix=locks");
        assert!(!format!("{t:?}").contains("s@cret"));
        assert_eq!(t.socket, None);
        let again = parse_with(&t.to_string(), &[("ELECT_PASSWORD", "s@cret")]).unwrap();
        assert_eq!(again, t);
        let m = parse_with("mariadb://u@127.0.0.1/d?ssl_mode=required", &[]).unwrap();
        assert_eq!(m.ssl_mode, TlsMode::Require);
        assert_eq!(
            m.to_string(),
            "mariadb://u@127.0.0.1:3306/d?ssl-mode=REQUIRED"
        );
    }

    #[test]
    fn localhost_is_the_socket_and_variables_fill_what_the_url_leaves_out() {
        let t = parse_with("mysql://u@localhost/d", &[]).unwrap();
        assert_eq!(t.socket.as_deref(), Some(DEFAULT_SOCKET));
        let t = parse_with(
            "mysql:///d",
            &[
                ("MYSQL_HOST", "db"),
                ("MYSQL_TCP_PORT", "3310"),
                ("ELECT_PASSWORD", "pw"),
            ],
        );
        // No user: the login name.
        let t = t.unwrap();
        assert_eq!((t.host.as_str(), t.port), ("db", 3310));
        assert_eq!(t.password.unwrap().expose(), "pw");
    }

    #[test]
    fn my_cnf_client_section_is_read() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("elect-mycnf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join(".my.cnf");
        std::fs::write(
            &file,
            "[mysqld]\nport=1\n[client]\nuser = carol\npassword=\"p w\"\nport=3399\nssl_mode=DISABLED\n",
        )
        .unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let home = dir.display().to_string();
        let t = parse_with("mysql://db/jobs", &[("HOME", &home)]).unwrap();
        assert_eq!((t.user.as_str(), t.port), ("carol", 3399));
        assert_eq!(t.password.unwrap().expose(), "p w");
        assert_eq!(t.ssl_mode, TlsMode::Off);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn what_elect_cannot_honour_is_refused() {
        for (bad, says) in [
            ("mysql://u@h/d?ssl-mode=bogus", "unknown ssl-mode"),
            ("mysql://u@h/d?compress=1", "unknown option 'compress'"),
            ("mysql://u@h/d?ssl-mode=VERIFY_CA", "needs the CA"),
            ("mysql://u@h:0/d", "not a port"),
            ("mysql://u@h", "no database"),
            ("mysql://u@h/d-b", "not a plain name"),
            ("mysql://u@a,b/d", "one server"),
        ] {
            let err = parse_with(bad, &[]).unwrap_err().to_string();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }

    #[test]
    fn only_mysql_and_mariadb_urls_are_claimed() {
        for url in ["mysql://x", "MariaDB://x"] {
            assert!((KIND.claims)(url), "{url}");
        }
        for url in ["postgres://x", "file:/x", "etcd://x"] {
            assert!(!(KIND.claims)(url), "{url}");
        }
    }
}
