//! Connections to PostgreSQL: TLS as `sslmode` says, errors sorted into
//! those worth retrying and those that are the user's to fix, and a
//! [`Link`] that reconnects on its next use after a failure.
//!
//! No pool: a holder needs one connection for its statements, and a waiter
//! one more to LISTEN on. Every statement is unnamed (`query_typed`), so
//! that a transaction pooler (PgBouncer) can pass it to any server
//! connection.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};
use tokio::sync::broadcast;
use tokio_postgres::error::SqlState;
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::{AsyncMessage, Client, Config, NoTls, Socket};

use super::target::{PgTarget, RootCert};
use crate::store::StoreError;
use crate::store::lease_row::TlsMode;
use crate::store::retry::{self, ConnectFailure as Failure};
use crate::store::tls;

/// A connection made on first use, and made again after it broke.
#[derive(Clone)]
pub struct Link {
    target: Rc<PgTarget>,
    client: Rc<RefCell<Option<Rc<Client>>>>,
    /// How long a connection attempt may take.
    within: Duration,
}

impl Link {
    pub fn new(target: Rc<PgTarget>, within: Duration) -> Link {
        Link {
            target,
            client: Rc::default(),
            within,
        }
    }

    /// A link to the same server that shares nothing with this one.
    pub fn fresh(&self) -> Link {
        Link::new(self.target.clone(), self.within)
    }

    pub fn target(&self) -> &PgTarget {
        &self.target
    }

    /// The connection, made now if there is none or it broke.
    pub async fn client(&self) -> Result<Rc<Client>, StoreError> {
        if let Some(client) = self.client.borrow().as_ref()
            && !client.is_closed()
        {
            return Ok(client.clone());
        }
        let client = Rc::new(connect(&self.target, self.within, None).await?);
        *self.client.borrow_mut() = Some(client.clone());
        Ok(client)
    }

    /// Use a connection made with care: the caller knows it is connected.
    pub fn set(&self, client: Client) {
        *self.client.borrow_mut() = Some(Rc::new(client));
    }

    /// Drop the connection: the next use makes a new one.
    pub fn reset(&self) {
        self.client.borrow_mut().take();
    }

    /// Give up on the connection, whose statement went unanswered: that
    /// statement is cancelled on the server first ([`cancelling`]).
    pub async fn abandon(&self) {
        let client = self.client.borrow_mut().take();
        if let Some(client) = client {
            cancelling(&self.target, &client).await;
        }
    }

    /// Cancel the statement the connection runs, without waiting for the
    /// cancel to be sent; the connection is kept (a clone of this link may
    /// share it).
    pub fn cancel_later(&self) {
        if let Some(client) = self.client.borrow().as_ref() {
            tokio::spawn(cancelling(&self.target, client));
        }
    }
}

/// How long a cancel request may take to send.
const CANCEL_WITHIN: Duration = Duration::from_secs(1);

/// How long a connection may be idle before TCP asks whether the server is
/// still there, and how often it asks again (three times): a half-open
/// connection must not look alive for hours.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(5);
const KEEPALIVE_EVERY: Duration = Duration::from_secs(2);

/// Cancel the statement `client` may still run on the server. A statement
/// given up on runs on there after its connection is dropped, past elect's
/// end: a commit that waits for a synchronous standby that is gone waits
/// for ever (only a cancel ends that wait; the commit stays applied on the
/// primary), and every retry would leave one more.
pub fn cancelling(
    target: &PgTarget,
    client: &Client,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let token = client.cancel_token();
    let closed = client.is_closed();
    let tls = match tls_wanted(target) {
        true => Some(tls_connector(target)),
        false => None,
    };
    async move {
        if closed {
            return;
        }
        let sent = async {
            match tls {
                None => token.cancel_query(NoTls).await.map_err(|e| describe(&e)),
                Some(Ok(tls)) => token.cancel_query(tls).await.map_err(|e| describe(&e)),
                Some(Err(e)) => Err(e.message),
            }
        };
        match tokio::time::timeout(CANCEL_WITHIN, sent).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => crate::log::verbose(format_args!(
                "could not cancel a statement given up on ({e})"
            )),
            Err(_) => crate::log::verbose(format_args!(
                "could not cancel a statement given up on (no answer within {})",
                crate::clock::show(CANCEL_WITHIN)
            )),
        }
    }
}

/// Connect to `target`, retrying what may pass (nothing listens yet, a
/// server starting up) until `within` has passed, as every store retries
/// ([`crate::store::retry`]). Notifications go to `notify`, if given.
pub async fn connect(
    target: &PgTarget,
    within: Duration,
    notify: Option<broadcast::Sender<String>>,
) -> Result<Client, StoreError> {
    let config = config(target, within);
    let tls = match tls_wanted(target) {
        true => Some(tls_connector(target)?),
        false => None,
    };
    let attempt = || {
        let (config, tls, notify) = (&config, tls.clone(), notify.clone());
        async move {
            let connected = match tls {
                Some(tls) => drive(config, tls, notify).await,
                None => drive(config, NoTls, notify).await,
            };
            connected.map_err(|e| failure(&e, target))
        }
    };
    let passing = |failure: &Failure| failure.worth();
    // One attempt tries the URL's hosts one after the other, each for the
    // connect_timeout above: cut short, it would never reach the later ones.
    let each = within;
    match retry::retry("connecting to PostgreSQL", within, each, attempt, passing).await {
        Ok(client) => Ok(client),
        Err(gave_up) => Err(Failure::gave_up(gave_up, &target.to_string(), within)),
    }
}

/// Connect, and poll the connection in a task of its own that passes on
/// notifications and ends when the client is dropped.
async fn drive<T>(
    config: &Config,
    tls: T,
    notify: Option<broadcast::Sender<String>>,
) -> Result<Client, tokio_postgres::Error>
where
    T: MakeTlsConnect<Socket>,
    T::Stream: Send + 'static,
{
    let (client, mut connection) = config.connect(tls).await?;
    tokio::spawn(async move {
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(n))) => {
                    if let Some(tx) = &notify {
                        let _ = tx.send(n.payload().to_string());
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => break,
            }
        }
    });
    Ok(client)
}

fn config(target: &PgTarget, within: Duration) -> Config {
    let mut config = Config::new();
    config
        .user(&target.user)
        .dbname(&target.dbname)
        .application_name(&target.application_name)
        .connect_timeout(target.connect_timeout.unwrap_or(within).min(within))
        // A half-open connection must not look alive for hours.
        .keepalives(true)
        .keepalives_idle(KEEPALIVE_IDLE)
        .keepalives_interval(KEEPALIVE_EVERY)
        .keepalives_retries(3);
    if let Some(password) = &target.password {
        config.password(password.expose());
    }
    if target.read_write {
        config.target_session_attrs(tokio_postgres::config::TargetSessionAttrs::ReadWrite);
    }
    for server in &target.servers {
        match server.is_socket() {
            true => config.host_path(&server.host),
            false => config.host(&server.host),
        };
        config.port(server.port);
    }
    config.ssl_mode(match tls_wanted(target) {
        false => tokio_postgres::config::SslMode::Disable,
        true if target.sslmode == TlsMode::Prefer => tokio_postgres::config::SslMode::Prefer,
        true => tokio_postgres::config::SslMode::Require,
    });
    config
}

/// TLS is for TCP; libpq, too, ignores `sslmode` on Unix sockets.
fn tls_wanted(target: &PgTarget) -> bool {
    target.sslmode != TlsMode::Off && !target.servers.iter().all(|s| s.is_socket())
}

fn tls_connector(
    target: &PgTarget,
) -> Result<tokio_postgres_rustls::MakeRustlsConnect, StoreError> {
    let provider = tls::provider();
    let bad = |(part, e): (tls::Part, String)| {
        let what = match part {
            tls::Part::Versions => "TLS",
            tls::Part::Ca => "the CA certificate",
            tls::Part::Cert => "--cert",
            tls::Part::Key => "--key",
            tls::Part::CertAndKey => "--cert and --key",
        };
        StoreError::config(format!("{what}: {e}"))
    };
    let verifier: Arc<dyn ServerCertVerifier> = match target.sslmode {
        TlsMode::VerifyHost | TlsMode::VerifyCa => {
            let pem = match &target.root_cert {
                Some(RootCert::Pem(pem)) => Some(&pem[..]),
                Some(RootCert::System) | None => None,
            };
            let roots = Arc::new(tls::roots(pem).map_err(bad)?);
            let webpki = rustls::client::WebPkiServerVerifier::builder_with_provider(
                roots,
                provider.clone(),
            )
            .build()
            .map_err(|e| bad((tls::Part::Ca, e.to_string())))?;
            Arc::new(Checked {
                webpki,
                names: target.sslmode == TlsMode::VerifyHost,
            })
        }
        _ => Arc::new(tls::Unchecked(provider.clone())),
    };
    let config = tls::client_config(
        &provider,
        tls::Verifier::Custom(verifier),
        target.client_cert.as_ref(),
    )
    .map_err(bad)?;
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

/// `verify-ca` and `verify-full`: the chain must lead to the CA; the name
/// must match the host only with `verify-full`.
#[derive(Debug)]
struct Checked {
    webpki: Arc<rustls::client::WebPkiServerVerifier>,
    names: bool,
}

impl ServerCertVerifier for Checked {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .webpki
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.names => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// A failed connection attempt, sorted.
fn failure(e: &tokio_postgres::Error, target: &PgTarget) -> Failure {
    let text = describe(e);
    let code = e.code();
    let lower = text.to_ascii_lowercase();
    // The TLS library's error where it is in the chain; a server that
    // answers "no" to the SSLRequest is said only in words.
    let tls = tls::Refused::in_chain(e).or_else(|| {
        lower
            .contains("server does not support tls")
            .then(|| tls::Refused::new(tls::Why::NoTls, "server does not support TLS"))
    });
    let config = code == Some(&SqlState::INVALID_CATALOG_NAME);
    let refused = matches!(
        code,
        Some(c) if *c == SqlState::INVALID_PASSWORD
            || *c == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
    ) || lower.contains("password missing");
    let passing = code.is_none()
        || code == Some(&SqlState::CANNOT_CONNECT_NOW)
        || code == Some(&SqlState::TOO_MANY_CONNECTIONS)
        || code == Some(&SqlState::ADMIN_SHUTDOWN);
    let sorted = retry::Sorted {
        tls,
        config,
        refused,
        crowded: code == Some(&SqlState::TOO_MANY_CONNECTIONS),
        passing,
    };
    let asked = lower.contains("password missing") && target.password.is_none();
    Failure::new(e, text, sorted, asked, |_| {
        format!(
            "the server asks user {} for a password: give --password-file, ELECT_PASSWORD, PGPASSWORD or a ~/.pgpass line",
            target.user
        )
    })
}

/// An error, with its causes, on one line.
pub fn describe(e: &tokio_postgres::Error) -> String {
    // The server's message says it all; its source only repeats it.
    if let Some(db) = e.as_db_error() {
        return db.message().replace('\n', " ");
    }
    crate::store::with_causes(e.to_string(), e)
}

/// Whether a failed statement is worth trying again on a new connection.
/// A cancelled one is: elect cancels only statements it gave up on, and a
/// cancel sent while the server could not take it (stopped, cut off)
/// lands, once it can, on whatever that connection runs by then.
pub fn is_transient(e: &tokio_postgres::Error) -> bool {
    match e.code() {
        None => true,
        Some(code) => {
            code.code().starts_with("08")
                || code.code().starts_with("57P")
                || *code == SqlState::T_R_SERIALIZATION_FAILURE
                || *code == SqlState::T_R_DEADLOCK_DETECTED
                || *code == SqlState::TOO_MANY_CONNECTIONS
                || *code == SqlState::READ_ONLY_SQL_TRANSACTION
                || *code == SqlState::QUERY_CANCELED
        }
    }
}

/// A row's cells as elect's statements make them. A cell of another type
/// (a table another program made, or an older elect's) is a one-line 78,
/// never an abort.
pub trait Cells {
    fn cell<'a, T: tokio_postgres::types::FromSql<'a>>(&'a self, i: usize)
    -> Result<T, StoreError>;
}

impl Cells for tokio_postgres::Row {
    fn cell<'a, T: tokio_postgres::types::FromSql<'a>>(
        &'a self,
        i: usize,
    ) -> Result<T, StoreError> {
        self.try_get(i).map_err(|e| {
            let column = self.columns().get(i).map_or("?", |c| c.name());
            // The type mismatch itself is the source; the error says only "column i".
            let why = std::error::Error::source(&e).map_or(e.to_string(), |s| s.to_string());
            StoreError::config(format!(
                "the database answered elect's statement with a column {column} it did not \
                 expect ({why}): are elect's tables another program's, or an older elect's?"
            ))
        })
    }
}
