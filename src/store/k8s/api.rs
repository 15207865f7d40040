//! Requests to the Kubernetes API server: HTTP/1.1 over rustls, each on a
//! connection of a small pool (a watch on one of its own), each bounded,
//! with the credentials of [`super::config::Conn`]; and the server's
//! answers sorted into what the store makes of them.
//!
//! A token from an exec plugin or a file is [`super::tokens`]'s: fetched
//! ahead of need, off the way of the requests, and afresh after a 401.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use serde_json::Value;

use super::config::{Auth, Conn};
use super::tokens::{Source, Tokens};
use crate::store::retry::Worth;
use crate::store::tls;
use crate::store::{Secret, StoreError, with_causes};

/// The resources elect uses, as RBAC names them.
pub const LEASES: &str = "leases.coordination.k8s.io";
pub const CONFIGMAPS: &str = "configmaps";

/// The most connections kept idle for reuse.
const POOL: usize = 4;

/// The API server as one user in one namespace reaches it.
pub struct Api {
    pub conn: Conn,
    host: String,
    port: u16,
    server_name: ServerName<'static>,
    tls: Arc<rustls::ClientConfig>,
    /// The tokens of a token file or an exec plugin.
    tokens: Option<Tokens>,
    idle: RefCell<Vec<SendRequest<Full<Bytes>>>>,
    /// The GETs on their way, by path: one asked while another of the same
    /// path is unanswered takes its answer (the first look at a lock and
    /// at its shard count are one read).
    reading: RefCell<std::collections::HashMap<String, Rc<Reading>>>,
    /// The bound on one request.
    pub within: Duration,
    /// How long a request that finds no server is tried again.
    patience: Duration,
    /// The last failure is one another try would not change: nothing
    /// listens, the name does not resolve, a certificate is refused.
    settled: std::cell::Cell<bool>,
}

/// A read shared by those who asked for it while it was on its way.
type Reading = tokio::sync::OnceCell<Result<Reply, StoreError>>;

/// An answer: the HTTP status and the body, parsed.
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub body: Value,
}

impl Reply {
    /// The server's own words for a refusal (a `Status` object's message).
    pub fn message(&self) -> String {
        match self.body.get("message").and_then(Value::as_str) {
            Some(m) => m.to_string(),
            None => format!("HTTP {}", self.status),
        }
    }
}

impl Api {
    /// The API server of `conn`, each request tried again for `patience`
    /// at most where [`Api::request_patiently`] says so.
    pub fn new(conn: Conn, patience: Duration) -> Result<Api, StoreError> {
        let within = crate::store::retry::attempt_within(patience);
        let (host, port) = split_server(&conn.server)?;
        let name = conn.tls_server_name.clone().unwrap_or_else(|| host.clone());
        let server_name = ServerName::try_from(name.trim_matches(['[', ']']).to_string())
            .map_err(|e| StoreError::config(format!("{}: server name {name}: {e}", conn.shown)))?;
        let tls = Arc::new(tls_config(&conn)?);
        if conn.insecure {
            crate::log::warn(format_args!(
                "{}: insecure-skip-tls-verify: the API server's certificate is not checked",
                conn.shown
            ));
        }
        let tokens = match &conn.auth {
            Auth::Exec(plugin) => Some(Tokens::new(Source::Exec(plugin.clone()))),
            Auth::TokenFile(path) => Some(Tokens::new(Source::File(path.clone()))),
            Auth::None | Auth::Token(_) => None,
        };
        Ok(Api {
            conn,
            host,
            port,
            server_name,
            tls,
            tokens,
            idle: RefCell::new(Vec::new()),
            reading: RefCell::default(),
            within,
            patience,
            settled: std::cell::Cell::new(false),
        })
    }

    /// How the store is shown in messages.
    pub fn shown(&self) -> &str {
        &self.conn.shown
    }

    /// Forget every idle connection: the next request connects afresh.
    pub fn reset(&self) {
        self.idle.borrow_mut().clear();
    }

    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, StoreError> {
        let host = self.host.trim_matches(['[', ']']);
        let at = format!("{}:{}", self.host, self.port);
        let addresses: Vec<std::net::SocketAddr> = tokio::net::lookup_host((host, self.port))
            .await
            .map_err(|e| {
                self.settled.set(true);
                if let Some(errno) = crate::descriptors::of_io(&e) {
                    return StoreError::out_of_descriptors(errno);
                }
                StoreError::unavailable(format!(
                    "{}: cannot resolve the host name {host} ({e})",
                    self.shown()
                ))
            })?
            .collect();
        let mut last = None;
        let mut connected = None;
        for address in addresses {
            match tokio::net::TcpStream::connect(address).await {
                Ok(tcp) => {
                    connected = Some(tcp);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let tcp = match (connected, last) {
            (Some(tcp), _) => tcp,
            (None, Some(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                self.settled.set(true);
                return Err(StoreError::unavailable(format!(
                    "{}: nothing listens at {at} (connection refused)",
                    self.shown()
                )));
            }
            (None, Some(e)) => return Err(self.failed(&format!("cannot connect to {at}"), &e)),
            (None, None) => {
                return Err(StoreError::unavailable(format!(
                    "{}: {host} has no address",
                    self.shown()
                )));
            }
        };
        let _ = tcp.set_nodelay(true);
        let stream = tokio_rustls::TlsConnector::from(self.tls.clone())
            .connect(self.server_name.clone(), tcp)
            .await
            .map_err(|e| match tls::Refused::in_chain(&e) {
                Some(refused) => {
                    // Not TLS there: what is, the probe may tell.
                    self.settled.set(refused.why != tls::Why::NoTls);
                    refused.error(self.shown())
                }
                None => self.failed("TLS", &e),
            })?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| self.failed("HTTP", &e))?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(sender)
    }

    fn failed(&self, what: &str, e: &(dyn std::error::Error + 'static)) -> StoreError {
        if let Some(local) = StoreError::descriptors_in(e) {
            return local;
        }
        StoreError::unavailable(with_causes(format!("{}: {what}: {e}", self.shown()), e))
    }

    /// The bearer token to send now, if any: one that lives is never
    /// waited for; without one, a fetch is, for the patience at most.
    async fn bearer(&self) -> Result<Option<Secret>, StoreError> {
        match (&self.tokens, &self.conn.auth) {
            (Some(tokens), _) => tokens.token(self.patience).await.map(Some),
            (None, Auth::Token(token)) => Ok(Some(token.clone())),
            (None, _) => Ok(None),
        }
    }

    /// [`Api::request`], tried again while it finds no server there (or
    /// one that does not answer), for the patience at most: a call that
    /// reaches the store until elect is queued, every look, and leaving a queue.
    pub async fn request_patiently(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Reply, StoreError> {
        // A token waited for outside the bound of each attempt: a plugin
        // may take seconds, and is not the API server's silence.
        self.bearer().await?;
        if method != "GET" || body.is_some() {
            return self.patiently(method, path, body).await;
        }
        let reading = self
            .reading
            .borrow_mut()
            .entry(path.to_string())
            .or_default()
            .clone();
        let reply = reading
            .get_or_init(|| self.patiently(method, path, None))
            .await
            .clone();
        let mut on_its_way = self.reading.borrow_mut();
        if on_its_way
            .get(path)
            .is_some_and(|r| Rc::ptr_eq(r, &reading))
        {
            on_its_way.remove(path);
        }
        reply
    }

    /// Whether a GET of `path` is on its way, whose answer
    /// [`Api::request_patiently`] would share.
    pub fn reading(&self, path: &str) -> bool {
        self.reading.borrow().contains_key(path)
    }

    async fn patiently(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Reply, StoreError> {
        let what = format!("{method} {path}");
        let tried = crate::store::retry::retry(
            &what,
            self.patience,
            self.within,
            || {
                self.settled.set(false);
                self.request(method, path, body)
            },
            |e: &StoreError| match Worth::of(e) {
                Worth::Yes if self.settled.get() => Worth::No,
                worth => worth,
            },
        )
        .await;
        match tried {
            Ok(reply) => Ok(reply),
            Err(crate::store::retry::GaveUp::Refused(e)) => Err(e),
            Err(crate::store::retry::GaveUp::Bound(e)) => Err(e.unwrap_or_else(|| {
                StoreError::unavailable(format!(
                    "{}: {what}: no answer within {}",
                    self.shown(),
                    crate::clock::show(self.patience)
                ))
            })),
        }
    }

    /// `method path` with `body`, bounded by [`Api::within`] once a token
    /// is at hand ([`Api::bearer`]); a 401 on a token kept is tried once
    /// more with one fetched afresh.
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Reply, StoreError> {
        let bound = self.within;
        let token = self.bearer().await?;
        let mut reply = self.bounded(bound, method, path, body, &token).await?;
        if let (401, Some(tokens), Some(refused)) = (reply.status, &self.tokens, &token) {
            let token = Some(tokens.after_refusal(refused, self.patience).await?);
            reply = self.bounded(bound, method, path, body, &token).await?;
        }
        Ok(reply)
    }

    async fn bounded(
        &self,
        bound: Duration,
        method: &str,
        path: &str,
        body: Option<&Value>,
        token: &Option<Secret>,
    ) -> Result<Reply, StoreError> {
        match tokio::time::timeout(bound, self.once(method, path, body, token)).await {
            Ok(reply) => reply,
            Err(_) => {
                self.reset();
                Err(StoreError::unavailable(format!(
                    "{}: {method} {path}: no answer within {}",
                    self.shown(),
                    crate::clock::show(bound)
                )))
            }
        }
    }

    fn build(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        token: &Option<Secret>,
    ) -> Result<hyper::Request<Full<Bytes>>, StoreError> {
        let mut request = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header("host", format!("{}:{}", self.host, self.port))
            .header("accept", "application/json")
            .header("user-agent", concat!("elect/", env!("CARGO_PKG_VERSION")));
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {}", token.expose()));
        }
        let bytes = match body {
            Some(body) => {
                // Every PATCH elect sends is a JSON merge patch: keys of a
                // history ConfigMap set or removed without a read.
                let kind = match method {
                    "PATCH" => "application/merge-patch+json",
                    _ => "application/json",
                };
                request = request.header("content-type", kind);
                Bytes::from(body.to_string())
            }
            None => Bytes::new(),
        };
        request
            .body(Full::new(bytes))
            .map_err(|e| StoreError::config(format!("{}: {method} {path}: {e}", self.shown())))
    }

    async fn sender(&self) -> Result<SendRequest<Full<Bytes>>, StoreError> {
        loop {
            let idle = self.idle.borrow_mut().pop();
            match idle {
                Some(mut sender) => {
                    if sender.is_closed() {
                        continue;
                    }
                    if sender.ready().await.is_ok() {
                        return Ok(sender);
                    }
                }
                None => return self.connect().await,
            }
        }
    }

    async fn once(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        token: &Option<Secret>,
    ) -> Result<Reply, StoreError> {
        let request = self.build(method, path, body, token)?;
        let mut sender = self.sender().await?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| self.failed(&format!("{method} {path}"), &e))?;
        let status = response.status().as_u16();
        let again_after = retry_after(response.headers());
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| self.failed(&format!("{method} {path}"), &e))?
            .to_bytes();
        let mut idle = self.idle.borrow_mut();
        if idle.len() < POOL {
            idle.push(sender);
        }
        drop(idle);
        if status == 429 {
            return Err(self.crowded(&format!("{method} {path}"), &bytes, again_after));
        }
        let body = match bytes.is_empty() {
            true => Value::Null,
            false => serde_json::from_slice(&bytes).map_err(|e| {
                StoreError::unavailable(format!(
                    "{}: {method} {path}: HTTP {status}, not JSON: {e}",
                    self.shown()
                ))
            })?,
        };
        Ok(Reply { status, body })
    }

    /// The API server refused `what` for load (429: API Priority and
    /// Fairness rejected it, or `--max-requests-inflight` was reached),
    /// asking to be asked again after `again_after`. Sorted here, where
    /// every answer passes, so that no caller takes it for an answer to
    /// its request (a renewal that counts, a Lease that is not there).
    fn crowded(&self, what: &str, body: &[u8], again_after: Option<Duration>) -> StoreError {
        let asked = match again_after {
            Some(after) => format!(", Retry-After {}", crate::clock::show(after)),
            None => String::new(),
        };
        // A `Status` from the API server's handlers; plain text from its
        // filters, which turn requests away before any handler.
        let words = match serde_json::from_slice::<Value>(body) {
            Ok(status) => status["message"].as_str().unwrap_or_default().to_string(),
            Err(_) => String::from_utf8_lossy(body).into_owned(),
        };
        let words: String = words.split_whitespace().collect::<Vec<_>>().join(" ");
        let words: String = words.chars().take(200).collect();
        StoreError::crowded(
            format!(
                "{}: the API server refused {what} for load (429 Too Many Requests{asked}): {words}",
                self.shown(),
            ),
            again_after,
        )
    }

    /// Open a watch (`path` with `watch=1`): its events, line by line.
    pub async fn watch(&self, path: &str) -> Result<Watch, StoreError> {
        let token = self.bearer().await?;
        let open = async {
            let request = self.build("GET", path, None, &token)?;
            let mut sender = self.connect().await?;
            let response = sender
                .send_request(request)
                .await
                .map_err(|e| self.failed(&format!("watch {path}"), &e))?;
            Ok::<_, StoreError>(response)
        };
        let response = tokio::time::timeout(self.within, open)
            .await
            .map_err(|_| {
                StoreError::unavailable(format!("{}: watch {path}: no answer", self.shown()))
            })??;
        let status = response.status().as_u16();
        if status != 200 {
            let again_after = retry_after(response.headers());
            let bytes = response
                .into_body()
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            if status == 429 {
                return Err(self.crowded(&format!("watch {path}"), &bytes, again_after));
            }
            let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            return Err(self.refusal("watch", path, &Reply { status, body }));
        }
        Ok(Watch {
            body: response.into_body(),
            buffer: Vec::new(),
        })
    }

    /// [`Api::refusal_of`] a request on Leases.
    pub fn refusal(&self, verb: &str, what: &str, reply: &Reply) -> StoreError {
        self.refusal_of(LEASES, verb, what, reply)
    }

    /// The error for an answer that is neither success nor one the caller
    /// expects: a refusal of the user (401, 403 on `resource`: exit 78) or
    /// a failure of the server (worth another try).
    pub fn refusal_of(&self, resource: &str, verb: &str, what: &str, reply: &Reply) -> StoreError {
        let message = reply.message().replace('\n', " ");
        match reply.status {
            401 => StoreError::denied(format!(
                "{}: the API server refused elect's credentials (401 Unauthorized): {message}",
                self.shown()
            )),
            403 => StoreError::denied(format!(
                "{}: RBAC: no right to {verb} {resource} in namespace {}: {message}",
                self.shown(),
                self.conn.namespace
            )),
            404 if reply.body["details"]["kind"] == "namespaces" => StoreError::config(format!(
                "{}: namespace {} does not exist: {message}",
                self.shown(),
                self.conn.namespace
            )),
            400 | 422 => StoreError::config(format!(
                "{}: the API server refused to {verb} {what}: {message}",
                self.shown()
            )),
            _ => StoreError::unavailable(format!(
                "{}: {verb} {what}: HTTP {}: {message}",
                self.shown(),
                reply.status
            )),
        }
    }
}

/// The events of a watch, as they come.
pub struct Watch {
    body: Incoming,
    buffer: Vec<u8>,
}

impl Watch {
    /// The next event (`{"type": …, "object": …}`); `None` once the server
    /// ended the watch or the connection broke.
    pub async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(at) = self.buffer.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=at).collect();
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return serde_json::from_slice(&line).ok();
            }
            let frame = self.body.frame().await?.ok()?;
            if let Ok(data) = frame.into_data() {
                self.buffer.extend_from_slice(&data);
            }
        }
    }
}

/// The pause an answer asks for before the next request (`Retry-After`,
/// in seconds, as the API server gives it with a 429); an HTTP date, which
/// it never gives, is left to elect's own pause.
fn retry_after(headers: &hyper::HeaderMap) -> Option<Duration> {
    let seconds = headers.get(hyper::header::RETRY_AFTER)?.to_str().ok()?;
    seconds.trim().parse().ok().map(Duration::from_secs)
}

/// `https://HOST:PORT` as its host and port (443 by default).
fn split_server(server: &str) -> Result<(String, u16), StoreError> {
    let rest = server.strip_prefix("https://").ok_or_else(|| {
        StoreError::config(format!(
            "the API server {server} is not https://: elect speaks to it only over TLS"
        ))
    })?;
    let rest = rest.trim_end_matches('/');
    if rest.contains('/') {
        return Err(StoreError::config(format!(
            "the API server {server} has a path, which elect does not support"
        )));
    }
    let (host, port) = match rest.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(':') && !port.contains(']') => {
            let port = port.parse().map_err(|_| {
                StoreError::config(format!("the API server {server} has a bad port"))
            })?;
            (host.to_string(), port)
        }
        _ => (rest.to_string(), 443),
    };
    Ok((host, port))
}

fn tls_config(conn: &Conn) -> Result<rustls::ClientConfig, StoreError> {
    let provider = tls::provider();
    let bad = |(part, e): (tls::Part, String)| {
        let what = match part {
            tls::Part::Versions => "TLS",
            tls::Part::Ca => "the CA certificate",
            tls::Part::Cert => "the client certificate",
            tls::Part::Key => "the client key",
            tls::Part::CertAndKey => "the client certificate and key",
        };
        StoreError::config(format!("{}: {what}: {e}", conn.shown))
    };
    let verifier = match (&conn.ca, conn.insecure) {
        (_, true) => tls::Verifier::Custom(Arc::new(tls::Unchecked(provider.clone()))),
        (ca, false) => tls::Verifier::Roots(tls::roots(ca.as_deref()).map_err(bad)?),
    };
    tls::client_config(&provider, verifier, conn.client_cert.as_ref()).map_err(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_is_split_into_host_and_port() {
        let split = |s: &str| split_server(s).map_err(|e| e.message);
        assert_eq!(split("https://a:6443"), Ok(("a".into(), 6443)));
        assert_eq!(split("https://a/"), Ok(("a".into(), 443)));
        assert_eq!(split("https://[::1]:6443"), Ok(("[::1]".into(), 6443)));
        assert_eq!(split("https://[::1]"), Ok(("[::1]".into(), 443)));
        assert!(split("http://a:80").unwrap_err().contains("not https://"));
        assert!(split("https://a:1/k8s").unwrap_err().contains("path"));
    }

    #[test]
    fn retry_after_is_read_in_seconds() {
        let asked = |value: &str| {
            let mut headers = hyper::HeaderMap::new();
            headers.insert(hyper::header::RETRY_AFTER, value.parse().unwrap());
            retry_after(&headers)
        };
        assert_eq!(asked("1"), Some(Duration::from_secs(1)));
        assert_eq!(asked(" 32 "), Some(Duration::from_secs(32)));
        assert_eq!(asked("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        assert_eq!(retry_after(&hyper::HeaderMap::new()), None);
    }
}
