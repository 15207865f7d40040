//! Connections to MySQL and MariaDB: TLS as `ssl-mode` says, errors sorted
//! into those worth retrying (a lost connection, a deadlock, a lock wait
//! that timed out) and those that are the user's to fix, and a [`Link`]
//! that reconnects on its next use after a failure.
//!
//! No pool: a holder needs one connection for its statements, and one for
//! its doorbell (`session`). Every connection sets `CLIENT_FOUND_ROWS`, so
//! that an UPDATE's count is the rows it matched (MySQL otherwise counts
//! only rows it changed), and REPEATABLE READ for itself, under which an
//! `INSERT … SELECT` share-locks the rows it read, whatever the server's
//! default isolation.

use std::rc::Rc;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{ClientIdentity, Conn, OptsBuilder, Params, Row, SslOpts, Value};
use std::cell::RefCell;

use super::target::MyTarget;
use crate::store::lease_row::TlsMode;
use crate::store::retry::{self, ConnectFailure as Failure};
use crate::store::{StoreError, tls};

/// Server error codes elect acts on.
pub mod code {
    pub const DUPLICATE_KEY: u16 = 1062;
    pub const NO_SUCH_TABLE: u16 = 1146;
    pub const BAD_DATABASE: u16 = 1049;
    pub const TABLE_ACCESS_DENIED: u16 = 1142;
    pub const DB_ACCESS_DENIED: u16 = 1044;
    pub const ACCESS_DENIED: u16 = 1045;
    pub const SPECIFIC_ACCESS_DENIED: u16 = 1227;
    pub const COLUMN_ACCESS_DENIED: u16 = 1143;
    pub const LOCK_WAIT_TIMEOUT: u16 = 1205;
    pub const DEADLOCK: u16 = 1213;
    pub const TOO_MANY_CONNECTIONS: u16 = 1040;
    /// An account's `MAX_USER_CONNECTIONS` reached.
    pub const USER_LIMIT_REACHED: u16 = 1226;
    pub const SERVER_SHUTDOWN: u16 = 1053;
    pub const CONNECTION_KILLED: u16 = 1927;
    pub const READ_ONLY: u16 = 1290;
    pub const READ_ONLY_MODE: u16 = 1836;
    pub const QUERY_INTERRUPTED: u16 = 1317;
}

/// A failed statement, sorted.
#[derive(Debug)]
pub enum Failed {
    /// The server refused it: its code and words.
    Server(u16, String),
    /// The connection failed, or no answer came in time: another
    /// connection may do.
    Link(StoreError),
}

impl Failed {
    /// Worth sending again on a new connection.
    pub fn is_transient(&self) -> bool {
        match self {
            Failed::Link(e) => e.kind == crate::store::ErrorKind::Unavailable,
            Failed::Server(code, _) => matches!(
                *code,
                code::LOCK_WAIT_TIMEOUT
                    | code::DEADLOCK
                    | code::TOO_MANY_CONNECTIONS
                    | code::USER_LIMIT_REACHED
                    | code::SERVER_SHUTDOWN
                    | code::CONNECTION_KILLED
                    | code::QUERY_INTERRUPTED
            ),
        }
    }

    pub fn code(&self) -> Option<u16> {
        match self {
            Failed::Server(code, _) => Some(*code),
            Failed::Link(_) => None,
        }
    }

    pub fn text(&self) -> String {
        match self {
            Failed::Server(_, text) => text.clone(),
            Failed::Link(e) => e.message.clone(),
        }
    }

    /// A refusal of the account's rights.
    pub fn is_denied(&self) -> bool {
        matches!(
            self.code(),
            Some(
                code::TABLE_ACCESS_DENIED
                    | code::DB_ACCESS_DENIED
                    | code::SPECIFIC_ACCESS_DENIED
                    | code::COLUMN_ACCESS_DENIED
            )
        )
    }

    pub fn is_read_only(&self) -> bool {
        matches!(self.code(), Some(code::READ_ONLY | code::READ_ONLY_MODE))
    }
}

/// One connection, made on first use and again after it broke; one
/// statement at a time on it. A statement takes the connection out while it
/// runs and puts it back once answered; a statement sent meanwhile makes a
/// connection of its own. So a statement given up half-way (its future
/// dropped) takes its connection with it, never leaving the next statement
/// to read its answer, and one whose future is merely not polled for a
/// while (a renewal in flight while the run records its success) holds up
/// no other statement.
#[derive(Clone)]
pub struct Link {
    target: Rc<MyTarget>,
    conn: Rc<RefCell<Option<Held>>>,
    /// How long a connection attempt may take, and a statement.
    within: Duration,
    /// The server's ids of connections whose statement was given up
    /// unanswered: the server may still run it (a commit waiting for a
    /// semi-synchronous replica), so [`Link::cancel_unanswered`] kills it.
    unanswered: Rc<RefCell<Vec<u32>>>,
}

/// A connection, and whether it was given [`SETTINGS`].
struct Held {
    conn: Conn,
    settled: bool,
}

/// The session settings elect's locking statements rely on, sent on a
/// connection before its first statement that needs them. A run's first
/// look, one SELECT in autocommit that takes no lock, reads the same
/// without them: a fleet's skipped hosts send that statement alone.
const SETTINGS: [&str; 2] = [
    "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ",
    "SET SESSION innodb_lock_wait_timeout = 5",
];

/// How long elect asks the server about a statement it gave up on, and
/// has it killed.
const ASK_WITHIN: Duration = Duration::from_millis(500);

/// The bound on the whole of that: a connection of its own, one look and
/// the kills, each within [`ASK_WITHIN`].
const CANCEL_WITHIN: Duration = Duration::from_secs(1);

/// The client's packet limit, and the idle time it takes a connection to
/// live for ([`opts`]): MySQL's defaults.
const MAX_PACKET: usize = 4 << 20;
const WAIT_TIMEOUT_S: usize = 28_800;

/// How long a connection may be idle before TCP asks whether the peer is
/// still there: a half-open connection must not look alive for hours.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(5);

/// A statement on its way: the connection's id goes to
/// [`Link::unanswered`] unless it is answered (its future may be dropped
/// by a timeout of the caller's, too).
struct InFlight {
    id: u32,
    unanswered: Rc<RefCell<Vec<u32>>>,
    answered: bool,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if !self.answered {
            self.unanswered.borrow_mut().push(self.id);
        }
    }
}

impl Link {
    pub fn new(target: Rc<MyTarget>, within: Duration) -> Link {
        Link {
            target,
            conn: Rc::default(),
            within,
            unanswered: Rc::default(),
        }
    }

    /// A link to the same server that shares nothing with this one.
    pub fn fresh(&self) -> Link {
        Link::new(self.target.clone(), self.within)
    }

    pub fn target(&self) -> &MyTarget {
        &self.target
    }

    /// Connect now, unless connected.
    pub async fn connected(&self) -> Result<(), StoreError> {
        if self.conn.borrow().is_none() {
            let conn = connect(&self.target, self.within).await?;
            self.put_back(Held {
                conn,
                settled: false,
            });
        }
        Ok(())
    }

    /// Drop the connection: the next use makes a new one.
    pub fn reset(&self) {
        self.conn.borrow_mut().take();
    }

    fn in_flight(&self, conn: &Conn) -> InFlight {
        InFlight {
            id: conn.id(),
            unanswered: self.unanswered.clone(),
            answered: false,
        }
    }

    /// Kill, on a connection of its own, every statement given up
    /// unanswered, so that none waits on in the server after elect gave
    /// up on it; what the server said the first was doing (its
    /// processlist state), if it said.
    pub async fn cancel_unanswered(&self) -> Option<String> {
        let ids: Vec<u32> = std::mem::take(&mut *self.unanswered.borrow_mut());
        if ids.is_empty() {
            return None;
        }
        let link = Link::new(self.target.clone(), ASK_WITHIN);
        let ask = async {
            let mut state = None;
            for id in ids {
                let look = "SELECT state FROM information_schema.processlist WHERE id = ?";
                if state.is_none()
                    && let Ok((rows, _)) = link
                        .exec_unsettled(look, vec![Value::from(id)], ASK_WITHIN)
                        .await
                {
                    state = rows
                        .first()
                        .and_then(|row| row.get_opt::<Option<String>, _>(0)?.ok())
                        .flatten();
                }
                // Gone already: nothing to kill (1094, no such thread).
                let _ = link.run(&format!("KILL QUERY {id}")).await;
            }
            state
        };
        tokio::time::timeout(CANCEL_WITHIN, ask)
            .await
            .ok()
            .flatten()
    }

    /// The connection, taken out for a statement; a new one if there is
    /// none (another statement has it, or it broke).
    async fn take(&self) -> Result<Held, Failed> {
        let idle = self.conn.borrow_mut().take();
        match idle {
            Some(held) => Ok(held),
            None => match connect(&self.target, self.within).await {
                Ok(conn) => Ok(Held {
                    conn,
                    settled: false,
                }),
                Err(e) => Err(Failed::Link(e)),
            },
        }
    }

    /// A connection whose statement was answered, kept for the next one
    /// unless another was put back meanwhile.
    fn put_back(&self, held: Held) {
        let mut slot = self.conn.borrow_mut();
        if slot.is_none() {
            *slot = Some(held);
        }
    }

    /// Run `statement` with `params`, on a connection given [`SETTINGS`];
    /// its rows and the rows it affected (matched, for an UPDATE). A
    /// connection that fails, or a statement unanswered within `patience`,
    /// is dropped.
    pub async fn exec(
        &self,
        statement: &str,
        params: Vec<Value>,
        patience: Duration,
    ) -> Result<(Vec<Row>, u64), Failed> {
        self.exec_as(statement, params, patience, true).await
    }

    /// [`Link::exec`] for a SELECT in autocommit that takes no lock: it
    /// needs no [`SETTINGS`], and is not held up sending them.
    pub async fn exec_unsettled(
        &self,
        statement: &str,
        params: Vec<Value>,
        patience: Duration,
    ) -> Result<(Vec<Row>, u64), Failed> {
        self.exec_as(statement, params, patience, false).await
    }

    async fn exec_as(
        &self,
        statement: &str,
        params: Vec<Value>,
        patience: Duration,
        settle: bool,
    ) -> Result<(Vec<Row>, u64), Failed> {
        let mut held = self.take().await?;
        let params = match params.is_empty() {
            true => Params::Empty,
            false => Params::Positional(params),
        };
        let mut flight = self.in_flight(&held.conn);
        let run = async {
            if settle && !held.settled {
                for setting in SETTINGS {
                    held.conn.query_drop(setting).await?;
                }
                held.settled = true;
            }
            let rows: Vec<Row> = held.conn.exec(statement, params).await?;
            Ok::<_, mysql_async::Error>((rows, held.conn.affected_rows()))
        };
        let answer = tokio::time::timeout(patience, run).await;
        flight.answered = answer.is_ok();
        drop(flight);
        match answer {
            Ok(Ok(answer)) => {
                self.put_back(held);
                Ok(answer)
            }
            Ok(Err(mysql_async::Error::Server(e))) => {
                if !matches!(e.code, code::SERVER_SHUTDOWN | code::CONNECTION_KILLED) {
                    self.put_back(held);
                }
                Err(Failed::Server(e.code, e.message.replace('\n', " ")))
            }
            Ok(Err(e)) => Err(Failed::Link(StoreError::unavailable(format!(
                "{}: {}",
                self.target,
                crate::store::with_causes(e.to_string(), &e)
            )))),
            Err(_) => Err(Failed::Link(StoreError::unavailable(format!(
                "{} did not answer within {}",
                self.target,
                crate::clock::show(patience)
            )))),
        }
    }

    /// Run a text statement without parameters (DDL, which MySQL cannot
    /// always prepare).
    pub async fn run(&self, statement: &str) -> Result<(), Failed> {
        let mut held = self.take().await?;
        let mut flight = self.in_flight(&held.conn);
        let answer = tokio::time::timeout(self.within, held.conn.query_drop(statement)).await;
        flight.answered = answer.is_ok();
        drop(flight);
        match answer {
            Ok(Ok(())) => {
                self.put_back(held);
                Ok(())
            }
            Ok(Err(mysql_async::Error::Server(e))) => {
                self.put_back(held);
                Err(Failed::Server(e.code, e.message.replace('\n', " ")))
            }
            Ok(Err(e)) => Err(Failed::Link(StoreError::unavailable(
                crate::store::with_causes(e.to_string(), &e),
            ))),
            Err(_) => Err(Failed::Link(StoreError::unavailable(format!(
                "{} did not answer within {}",
                self.target,
                crate::clock::show(self.within)
            )))),
        }
    }
}

fn opts(target: &MyTarget, ssl: Option<SslOpts>) -> OptsBuilder {
    let mut opts = OptsBuilder::default()
        .user(Some(target.user.clone()))
        .pass(target.password.as_ref().map(|p| p.expose().to_string()))
        .db_name(Some(target.database.clone()))
        .client_found_rows(true)
        .stmt_cache_size(64)
        .tcp_nodelay(true)
        .tcp_keepalive(Some(KEEPALIVE_IDLE))
        .prefer_socket(false)
        // Limits of the client's own, which it would otherwise ask the
        // server for on every connection: elect's packets are far
        // smaller (a checkpoint is at most 64 KiB), and it keeps no pool
        // for wait_timeout to expire.
        .max_allowed_packet(Some(MAX_PACKET))
        .wait_timeout(Some(WAIT_TIMEOUT_S))
        .ssl_opts(ssl);
    match &target.socket {
        Some(socket) => opts = opts.socket(Some(socket.clone())),
        None => {
            opts = opts
                .ip_or_hostname(target.host.clone())
                .tcp_port(target.port)
        }
    }
    opts
}

/// TLS as `ssl-mode` says; none over a Unix socket, as the clients.
fn ssl_opts(target: &MyTarget) -> Option<SslOpts> {
    if target.socket.is_some() || target.ssl_mode == TlsMode::Off {
        return None;
    }
    let mut ssl = SslOpts::default();
    if let Some((cert, key)) = &target.client_cert {
        ssl = ssl.with_client_identity(Some(ClientIdentity::new(
            cert.clone().into(),
            key.clone().into(),
        )));
    }
    ssl = match target.ssl_mode {
        TlsMode::Prefer | TlsMode::Require => ssl
            .with_danger_accept_invalid_certs(true)
            .with_danger_skip_domain_validation(true),
        TlsMode::VerifyCa | TlsMode::VerifyHost => {
            let ca = target.ca.clone().unwrap_or_default();
            ssl.with_root_certs(vec![ca.into()])
                .with_disable_built_in_roots(true)
                .with_danger_skip_domain_validation(target.ssl_mode == TlsMode::VerifyCa)
        }
        TlsMode::Off => return None,
    };
    Some(ssl)
}

/// Connect to `target`, retrying what may pass (nothing listens yet, a
/// server starting up) until `within` has passed, as every store retries.
pub async fn connect(target: &MyTarget, within: Duration) -> Result<Conn, StoreError> {
    // rustls needs a process-wide provider where several may be linked.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let attempt = || async move {
        let first = Conn::new(opts(target, ssl_opts(target))).await;
        match first {
            // PREFERRED: in the clear where the server offers no TLS.
            Err(mysql_async::Error::Driver(
                mysql_async::DriverError::NoClientSslFlagFromServer,
            )) if target.ssl_mode == TlsMode::Prefer => Conn::new(opts(target, None))
                .await
                .map_err(|e| failure(&e, target)),
            other => other.map_err(|e| failure(&e, target)),
        }
    };
    let passing = |failure: &Failure| failure.worth();
    let each = retry::attempt_within(within);
    match retry::retry("connecting to MySQL", within, each, attempt, passing).await {
        Ok(conn) => Ok(conn),
        Err(gave_up) => Err(Failure::gave_up(gave_up, &target.to_string(), within)),
    }
}

/// A failed connection attempt, sorted.
fn failure(e: &mysql_async::Error, target: &MyTarget) -> Failure {
    let text = crate::store::with_causes(e.to_string(), e);
    let tls = tls::Refused::in_chain(e).or_else(|| {
        matches!(
            e,
            mysql_async::Error::Driver(mysql_async::DriverError::NoClientSslFlagFromServer)
        )
        .then(|| tls::Refused::new(tls::Why::NoTls, "server does not support TLS"))
    });
    let (code, text) = match e {
        mysql_async::Error::Server(s) => (Some(s.code), s.message.replace('\n', " ")),
        _ => (None, socket_failure(e, target).unwrap_or(text)),
    };
    let config = code == Some(code::BAD_DATABASE);
    let refused = matches!(
        code,
        Some(code::ACCESS_DENIED | code::DB_ACCESS_DENIED | code::SPECIFIC_ACCESS_DENIED)
    );
    let crowded = matches!(
        code,
        Some(code::TOO_MANY_CONNECTIONS | code::USER_LIMIT_REACHED)
    );
    let passing = match code {
        None => !matches!(e, mysql_async::Error::Driver(_)),
        Some(c) => crowded || c == code::SERVER_SHUTDOWN,
    };
    // Logged in, with no rights on the database: say what to grant, as a
    // missing CREATE is told (the account as the server names it).
    let text = match code {
        Some(code::DB_ACCESS_DENIED) => {
            let account = text
                .split_once("for user ")
                .and_then(|(_, rest)| rest.split_once(" to database"))
                .map_or_else(|| format!("'{}'@'%'", target.user), |(a, _)| a.to_string());
            let tables = super::sql::Tables::new(&target.database, &target.prefix);
            format!(
                "{text}; {}",
                super::sql::for_an_administrator(&tables, &account)
            )
        }
        _ => text,
    };
    let sorted = retry::Sorted {
        tls,
        config,
        refused,
        crowded,
        passing,
    };
    Failure::new(
        e,
        text,
        sorted,
        refused && target.password.is_none(),
        |text| {
            format!(
                "{text}: give a password with --password-file, ELECT_PASSWORD or ~/.my.cnf's [client] section"
            )
        },
    )
}

/// What connecting to the Unix socket came to, naming its path, where the
/// client says only "Input/output error: No such file or directory".
fn socket_failure(e: &mysql_async::Error, target: &MyTarget) -> Option<String> {
    let socket = target.socket.as_deref()?;
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(error) = next {
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            return match io.raw_os_error() {
                Some(libc::ENOENT | libc::ENOTDIR) => {
                    Some(format!("the socket {socket} does not exist"))
                }
                Some(libc::ECONNREFUSED) => Some(format!(
                    "nothing listens at the socket {socket} (connection refused)"
                )),
                _ => None,
            };
        }
        next = error.source();
    }
    None
}

/// A cell of a row as elect's statements make it. A cell of another type
/// (a table another program made) is a one-line 78, never an abort.
pub fn cell<T: mysql_async::prelude::FromValue>(row: &Row, i: usize) -> Result<T, StoreError> {
    match row.get_opt::<T, usize>(i) {
        Some(Ok(value)) => Ok(value),
        Some(Err(e)) => Err(StoreError::config(format!(
            "the database answered elect's statement with a column {i} it did not expect \
             ({e}): are elect's tables another program's?"
        ))),
        None => Err(StoreError::config(format!(
            "the database answered elect's statement without column {i}"
        ))),
    }
}

/// A parameter.
pub fn p(value: impl Into<Value>) -> Value {
    value.into()
}
