//! How to reach PostgreSQL, the way libpq reads it, so that the settings a
//! team already has work unchanged: a `postgres://` URL or `key=value`
//! words, then `PGHOST`, `PGPORT`, `PGUSER`, `PGDATABASE`, `PGPASSWORD`,
//! `PGPASSFILE` (or `~/.pgpass`), `PGSSLMODE`, `PGSSLROOTCERT`,
//! `PGSSLCERT`, `PGSSLKEY`, `PGAPPNAME`, `PGCONNECT_TIMEOUT` for what they
//! leave out, then libpq's defaults (the Unix socket in
//! `/var/run/postgresql`, port 5432, the login name as user and database).
//! elect's own flags (`--user`, `--password-file`, `--cacert`, `--cert`,
//! `--key`) come first.
//!
//! Two options are elect's: `schema` (where the lease table lives, default
//! `elect`) and `listen` (`off` where LISTEN cannot work, behind a
//! transaction pooler). A libpq option that elect cannot honour is refused,
//! never ignored.
//!
//! The password never shows: not in `Display` (the URL the command gets in
//! `ELECT_STORE`), not in `Debug`, not in any message.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Postgres;
use super::words::{WordsError, servers, shown_input, words_of};
use crate::store::StoreError;
use crate::store::kind::{About, Kind, Settings};
use crate::store::lease_row::TlsMode;
use crate::store::lease_row::target::{CertError, Env, SqlTarget, client_cert, encode, release};
use crate::store::secret::{Secret, find_password};

/// PostgreSQL's URLs and libpq's `key=value` words.
pub const KIND: Kind = Kind {
    name: "postgres",
    forms: &[
        "postgres://USER@HOST:PORT/DB[?schema=S]",
        "'host=H dbname=D …' (libpq words)",
    ],
    claims: |url| {
        let lower = url.to_ascii_lowercase();
        lower.starts_with("postgres://")
            || lower.starts_with("postgresql://")
            || url
                .split_once('=')
                .is_some_and(|(key, _)| KEYS.contains(&key.trim()))
    },
    parse: |url, settings| Ok(Box::new(PgTarget::parse(url, settings)?)),
    from_env: || None,
    release: release::<PgTarget>,
    greeting: Some(&super::greeting::GREETING),
    about: About {
        title: "PostgreSQL",
        help: "postgres://USER@HOST:PORT/DB (or libpq's 'host=H dbname=D' words)",
        reference: "`postgres://USER@HOST:PORT/DB` or libpq's `host=H dbname=D` words (see [PostgreSQL](stores/postgresql.md))",
        schemes: &["postgres://"],
        reads: &[(
            "PGHOST, PGPORT, PGUSER, PGDATABASE, PGPASSWORD, PGPASSFILE, PGSSLMODE, PGSSLROOTCERT, PGSSLCERT, PGSSLKEY, PGAPPNAME, PGCONNECT_TIMEOUT",
            "libpq's variables, for what a postgres:// store URL leaves out.",
        )],
        secrets: SECRET_VARIABLES,
        key: "`<lock>/<session id>`",
        lease_id: "the holder's session id (32 hex digits, fresh for each `elect run`)",
        cacert: Some("as sslrootcert, the whole chain checked"),
        user: Some("the role"),
        store_variable: None,
    },
};

/// The libpq words elect understands, and its own two.
pub(super) const KEYS: &[&str] = &[
    "host",
    "port",
    "dbname",
    "user",
    "password",
    "passfile",
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "connect_timeout",
    "application_name",
    "target_session_attrs",
    "schema",
    "listen",
];

/// Variables that may carry a secret for PostgreSQL: the command never sees them.
const SECRET_VARIABLES: &[&str] = &["PGPASSWORD"];

fn parse_sslmode(text: &str) -> Result<TlsMode, TargetError> {
    Ok(match text {
        "disable" => TlsMode::Off,
        "prefer" => TlsMode::Prefer,
        "require" => TlsMode::Require,
        "verify-ca" => TlsMode::VerifyCa,
        "verify-full" => TlsMode::VerifyHost,
        "allow" => {
            return Err(TargetError::Allow);
        }
        other => {
            return Err(TargetError::TlsMode(other.to_string()));
        }
    })
}

fn sslmode_name(mode: TlsMode) -> &'static str {
    match mode {
        TlsMode::Off => "disable",
        TlsMode::Prefer => "prefer",
        TlsMode::Require => "require",
        TlsMode::VerifyCa => "verify-ca",
        TlsMode::VerifyHost => "verify-full",
    }
}

/// Where to find the CA that signed the server's certificate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RootCert {
    /// PEM, read from `sslrootcert` or `--cacert`.
    Pem(Vec<u8>),
    /// `sslrootcert=system`: the system's trusted roots.
    System,
}

/// Why libpq's words, with what fills them in, name no server elect can
/// use.
#[derive(Debug, thiserror::Error)]
pub(super) enum TargetError {
    #[error(transparent)]
    Words(#[from] WordsError),
    #[error("no user given and no login name to use")]
    NoUser,
    /// A certificate, key or password file that cannot be read, in the
    /// words of the reader every store shares.
    #[error("{}", .0.message)]
    File(StoreError),
    #[error(transparent)]
    Cert(#[from] CertError),
    #[error(
        "sslmode=allow (plain first, TLS if refused) is not supported; use disable, prefer, require, verify-ca or verify-full"
    )]
    Allow,
    #[error("unknown sslmode '{0}'; use disable, prefer, require, verify-ca or verify-full")]
    TlsMode(String),
    #[error("a client certificate with sslmode=disable")]
    CertWithoutTls,
    #[error(
        "sslmode={0} needs the CA's certificate: give --cacert or sslrootcert (or sslrootcert=system)"
    )]
    NoCa(&'static str),
    #[error("connect_timeout '{0}' is not whole seconds")]
    ConnectTimeout(String),
    #[error("target_session_attrs must be any or read-write, not '{0}'")]
    SessionAttrs(String),
    #[error("listen must be on or off, not '{0}'")]
    Listen(String),
    #[error("schema '{0}' is not a plain lower-case SQL name (a-z, 0-9, _; at most 63)")]
    Schema(String),
}

/// One server to try: a host name or address, or a Unix socket directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Server {
    pub host: String,
    pub port: u16,
}

impl Server {
    /// A host that starts with `/` is the directory of a Unix socket.
    pub fn is_socket(&self) -> bool {
        self.host.starts_with('/')
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgTarget {
    pub servers: Vec<Server>,
    pub user: String,
    pub password: Option<Secret>,
    pub dbname: String,
    pub sslmode: TlsMode,
    pub root_cert: Option<RootCert>,
    /// PEM: a client certificate and its private key.
    pub client_cert: Option<(Vec<u8>, Vec<u8>)>,
    pub connect_timeout: Option<Duration>,
    pub application_name: String,
    /// The schema of the lease tables.
    pub schema: String,
    /// Whether waiters may LISTEN for releases; off behind a transaction pooler.
    pub listen: bool,
    /// `target_session_attrs=read-write`: of several hosts, only a primary.
    pub read_write: bool,
}

impl PgTarget {
    pub fn parse(url: &str, settings: &Settings) -> Result<PgTarget, StoreError> {
        let shown = shown_input(url);
        let words = words_of(url).map_err(|e| StoreError::config(format!("{shown}: {e}")))?;
        PgTarget::from_words(
            words,
            settings,
            &Env::process(|k| k.starts_with("PG") || k == "HOME" || k == "ELECT_PASSWORD"),
        )
        .map_err(|e| StoreError::config(format!("{shown}: {e}")))
    }

    fn from_words(
        mut words: BTreeMap<String, String>,
        settings: &Settings,
        env: &Env,
    ) -> Result<PgTarget, TargetError> {
        // What the URL leaves out comes from libpq's variables.
        for (key, variable) in [
            ("host", "PGHOST"),
            ("port", "PGPORT"),
            ("user", "PGUSER"),
            ("dbname", "PGDATABASE"),
            ("passfile", "PGPASSFILE"),
            ("sslmode", "PGSSLMODE"),
            ("sslrootcert", "PGSSLROOTCERT"),
            ("sslcert", "PGSSLCERT"),
            ("sslkey", "PGSSLKEY"),
            ("application_name", "PGAPPNAME"),
            ("connect_timeout", "PGCONNECT_TIMEOUT"),
        ] {
            if !words.contains_key(key)
                && let Some(value) = env.var(variable)
            {
                words.insert(key.into(), value);
            }
        }
        if let Some(user) = &settings.user {
            words.insert("user".into(), user.clone());
        }
        let get = |key: &str| words.get(key).map(String::as_str).filter(|v| !v.is_empty());

        let servers = servers(get("host"), get("port"))?;
        let user = match get("user") {
            Some(user) => user.to_string(),
            None => env.login().ok_or(TargetError::NoUser)?,
        };
        let dbname = get("dbname").unwrap_or(&user).to_string();

        let mut root_cert = match settings.cacert.as_deref() {
            Some(path) => Some(RootCert::Pem(read_pem(path, "--cacert", "CERTIFICATE")?)),
            None => match get("sslrootcert") {
                Some("system") => Some(RootCert::System),
                Some(path) => Some(RootCert::Pem(read_pem(
                    Path::new(path),
                    "sslrootcert",
                    "CERTIFICATE",
                )?)),
                None => None,
            },
        };
        let client_cert = client_cert(
            settings,
            ("sslcert", get("sslcert")),
            ("sslkey", get("sslkey")),
        )?;
        let sslmode = match get("sslmode") {
            Some(mode) => parse_sslmode(mode)?,
            None => TlsMode::Prefer,
        }
        .with_certificates(root_cert.is_some(), client_cert.is_some())
        .map_err(|_| TargetError::CertWithoutTls)?;
        if sslmode.verifies() && root_cert.is_none() {
            // libpq's default root certificate file.
            let default = env.home().map(|h| h.join(".postgresql/root.crt"));
            match default.filter(|p| p.exists()) {
                Some(path) => {
                    root_cert = Some(RootCert::Pem(read_pem(
                        &path,
                        "sslrootcert",
                        "CERTIFICATE",
                    )?))
                }
                None => {
                    return Err(TargetError::NoCa(sslmode_name(sslmode)));
                }
            }
        }

        let connect_timeout = match get("connect_timeout") {
            None => None,
            Some(text) => match text.parse::<u64>() {
                Ok(0) => None,
                Ok(secs) => Some(Duration::from_secs(secs.max(2))),
                Err(_) => return Err(TargetError::ConnectTimeout(text.to_string())),
            },
        };
        let application_name = get("application_name").unwrap_or("elect").to_string();
        let schema = get("schema").unwrap_or("elect").to_string();
        check_schema(&schema)?;
        let read_write = match get("target_session_attrs") {
            None | Some("any") => false,
            Some("read-write") => true,
            Some(other) => {
                return Err(TargetError::SessionAttrs(other.to_string()));
            }
        };
        let listen = match get("listen") {
            None | Some("on") => true,
            Some("off") => false,
            Some(other) => return Err(TargetError::Listen(other.to_string())),
        };

        let mut target = PgTarget {
            servers,
            user,
            password: None,
            dbname,
            sslmode,
            root_cert,
            client_cert,
            connect_timeout,
            application_name,
            schema,
            listen,
            read_write,
        };
        // In the order of every store; libpq's own are PGPASSWORD, then
        // the password file.
        let passfile = match get("passfile") {
            Some(file) => Some(PathBuf::from(file)),
            None => env.home().map(|h| h.join(".pgpass")),
        };
        let libpq = || {
            env.var("PGPASSWORD").map(Secret).or_else(|| {
                passfile
                    .and_then(|file| passfile_lookup(&file, &target))
                    .map(Secret)
            })
        };
        let password = find_password(
            Some(&target.user),
            settings.password_file.as_deref(),
            words.get("password").cloned().map(Secret),
            |name| env.var(name),
            libpq,
        )
        .map_err(TargetError::File)?;
        target.password = password;
        Ok(target)
    }

    /// The quoted schema name, for SQL.
    pub fn schema_sql(&self) -> String {
        format!("\"{}\"", self.schema)
    }
}

/// A PEM file, or why not.
fn read_pem(path: &Path, flag: &str, kind: &str) -> Result<Vec<u8>, TargetError> {
    crate::store::secret::read_pem(path, flag, kind).map_err(TargetError::File)
}

/// Schema names: a plain lower-case SQL identifier, so that it means the
/// same quoted or not, and fits a LISTEN channel.
fn check_schema(schema: &str) -> Result<(), TargetError> {
    let ok = !schema.is_empty()
        && schema.len() <= 63
        && schema.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && schema
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    match ok {
        true => Ok(()),
        false => Err(TargetError::Schema(schema.to_string())),
    }
}

/// The password for `target` in a libpq password file, if it has one.
/// Like libpq, a file that others can read is not used.
fn passfile_lookup(file: &Path, target: &PgTarget) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(file).ok()?;
    if meta.permissions().mode() & 0o077 != 0 {
        crate::log::notice(format_args!(
            "password file {} has group or world access; it is not used (chmod 0600 it)",
            file.display()
        ));
        return None;
    }
    let text = std::fs::read_to_string(file).ok()?;
    target.servers.iter().find_map(|server| {
        // libpq matches the default socket directory as "localhost".
        let host = match server.is_socket() {
            true if server.host == "/var/run/postgresql" => "localhost",
            _ => &server.host,
        };
        let port = server.port.to_string();
        let wanted = [host, &port, &target.dbname, &target.user];
        text.lines()
            .filter(|line| !line.trim_start().starts_with('#'))
            .find_map(|line| {
                let fields = pgpass_fields(line);
                (fields.len() == 5
                    && fields[..4]
                        .iter()
                        .zip(wanted)
                        .all(|(field, want)| field == "*" || field == want))
                .then(|| fields[4].clone())
            })
    })
}

/// The `:`-separated fields of a password file line, `\:` and `\\` unescaped.
fn pgpass_fields(line: &str) -> Vec<String> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => field.extend(chars.next()),
            ':' if fields.len() < 4 => fields.push(std::mem::take(&mut field)),
            c => field.push(c),
        }
    }
    fields.push(field);
    fields
}

impl fmt::Display for PgTarget {
    /// A URL that elect reads back to the same target, without the
    /// password: this is what the command sees in `ELECT_STORE`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let servers: Vec<String> = self
            .servers
            .iter()
            .map(|s| match s.host.contains(':') {
                true => format!("[{}]:{}", s.host, s.port),
                false => format!("{}:{}", encode(&s.host), s.port),
            })
            .collect();
        write!(
            f,
            "postgres://{}@{}/{}",
            encode(&self.user),
            servers.join(","),
            encode(&self.dbname)
        )?;
        let mut options = Vec::new();
        if self.sslmode != TlsMode::Prefer {
            options.push(format!("sslmode={}", sslmode_name(self.sslmode)));
        }
        if self.root_cert == Some(RootCert::System) {
            options.push("sslrootcert=system".into());
        }
        if self.schema != "elect" {
            options.push(format!("schema={}", self.schema));
        }
        if !self.listen {
            options.push("listen=off".into());
        }
        if self.read_write {
            options.push("target_session_attrs=read-write".into());
        }
        if self.application_name != "elect" {
            options.push(format!(
                "application_name={}",
                encode(&self.application_name)
            ));
        }
        if !options.is_empty() {
            write!(f, "?{}", options.join("&"))?;
        }
        Ok(())
    }
}

impl SqlTarget for PgTarget {
    type Db = Postgres;

    fn account(&self) -> (&str, Option<&Secret>) {
        (&self.user, self.password.as_ref())
    }

    /// The servers reached over TCP; none over a Unix socket.
    fn reached_at(&self) -> Option<crate::store::probe::Contact> {
        // A socket directory's socket is named by the port, as libpq names it.
        let addresses: Vec<String> = self
            .servers
            .iter()
            .map(|s| match (s.is_socket(), s.host.contains(':')) {
                (true, _) => format!("{}/.s.PGSQL.{}", s.host.trim_end_matches('/'), s.port),
                (false, true) => format!("[{}]:{}", s.host, s.port),
                (false, false) => format!("{}:{}", s.host, s.port),
            })
            .collect();
        Some(crate::store::probe::Contact {
            expects: &super::greeting::GREETING,
            tls: false,
            addresses,
        })
    }

    async fn connect(&self, within: Duration) -> Result<Postgres, StoreError> {
        Postgres::connect(self, within).await
    }

    async fn reach_for_release(
        &self,
        tenure: &str,
        within: Duration,
    ) -> Result<Postgres, StoreError> {
        Postgres::release_tenure(self, tenure, within).await
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

    fn parse_with(url: &str, env_pairs: &[(&str, &str)]) -> Result<PgTarget, TargetError> {
        let words = words_of(url)?;
        PgTarget::from_words(words, &Settings::default(), &env(env_pairs))
    }

    #[test]
    fn urls_and_words_name_the_same_target() {
        let a = parse_with("postgres://alice:s3cret@db:6432/jobs?schema=locks", &[]).unwrap();
        let b = parse_with(
            "host=db port=6432 user=alice password='s3cret' dbname=jobs schema=locks",
            &[],
        )
        .unwrap();
        assert_eq!(a, b);
        assert_eq!(a.password.as_ref().map(Secret::expose), Some("s3cret"));
        assert_eq!(
            a.to_string(),
            "postgres://alice@db:6432/jobs?schema=locks",
            "never the password"
        );
        assert!(!format!("{a:?}").contains("s3cret"));
        let again = parse_with(&a.to_string(), &[("PGPASSWORD", "s3cret")]).unwrap();
        assert_eq!(again, a, "the shown URL reads back to the same target");
    }

    #[test]
    fn libpq_variables_fill_what_the_url_leaves_out() {
        let t = parse_with(
            "postgresql:///jobs",
            &[
                ("PGHOST", "/run/pg"),
                ("PGPORT", "5433"),
                ("PGUSER", "bob"),
                ("PGPASSWORD", "pw"),
                ("PGSSLMODE", "disable"),
                ("PGAPPNAME", "nightly"),
            ],
        )
        .unwrap();
        assert_eq!(
            t.servers,
            [Server {
                host: "/run/pg".into(),
                port: 5433
            }]
        );
        assert_eq!((t.user.as_str(), t.dbname.as_str()), ("bob", "jobs"));
        assert_eq!(t.sslmode, TlsMode::Off);
        assert_eq!(t.application_name, "nightly");
        assert_eq!(t.password.unwrap().expose(), "pw");
        assert_eq!(
            parse_with("postgres://u@%2Frun%2Fpg/d", &[])
                .unwrap()
                .to_string(),
            "postgres://u@%2Frun%2Fpg:5432/d"
        );
        let two = parse_with(
            "postgres://u@a:1,[::1]:2/d?target_session_attrs=read-write",
            &[],
        )
        .unwrap();
        assert_eq!(
            two.to_string(),
            "postgres://u@a:1,[::1]:2/d?target_session_attrs=read-write"
        );
    }

    #[test]
    fn what_elect_cannot_honour_is_refused() {
        for (bad, says) in [
            ("postgres://u@h/d?sslmode=allow", "allow"),
            ("postgres://u@h/d?sslmode=bogus", "unknown sslmode"),
            (
                "postgres://u@h/d?hostaddr=1.2.3.4",
                "unknown option 'hostaddr'",
            ),
            ("postgres://u@h/d?schema=Bad-Name", "schema"),
            ("postgres://u@h:0/d", "not a port"),
            ("postgres://u@h/d?sslmode=verify-full", "needs the CA"),
            ("postgres://u@h/d?listen=maybe", "listen"),
            (
                "postgres://u@h/d?target_session_attrs=standby",
                "read-write",
            ),
            ("host=h dbname", "no '='"),
            ("host='h", "closing quote"),
            ("host=a,b port=1,2,3 dbname=d", "ports"),
        ] {
            let err = parse_with(bad, &[]).unwrap_err().to_string();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }

    #[test]
    fn password_files_match_as_libpq_does() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("elect-pgpass-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("pgpass");
        std::fs::write(
            &file,
            "# comment\nother:*:*:*:no\ndb:5432:jobs:alice:a\\:b\n*:*:*:*:fallback\n",
        )
        .unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let passfile = file.display().to_string();
        let t = parse_with(
            &format!("postgres://alice@db/jobs?passfile={passfile}"),
            &[],
        )
        .unwrap();
        assert_eq!(t.password.unwrap().expose(), "a:b");
        let t = parse_with(&format!("postgres://carol@db/x?passfile={passfile}"), &[]).unwrap();
        assert_eq!(t.password.unwrap().expose(), "fallback");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let t = parse_with(&format!("postgres://carol@db/x?passfile={passfile}"), &[]).unwrap();
        assert!(t.password.is_none(), "a file others can read is not used");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn only_postgres_urls_and_libpq_words_are_claimed() {
        for url in ["postgres://x", "postgresql://x", "host=/run dbname=x"] {
            assert!((KIND.claims)(url), "{url}");
        }
        for url in ["etcd://x", "file:/x", "zk://x=1"] {
            assert!(!(KIND.claims)(url), "{url}");
        }
    }
}
