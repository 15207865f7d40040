//! Talking to an etcd cluster: connecting, and sending each request again
//! until it is answered, refused, or the caller's patience has passed.
//!
//! Every request elect sends goes through [`Cluster`], so that one rule
//! decides what is worth retrying and one wording says why a request failed.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use etcd_client::{
    Certificate, Client, ConnectOptions, DeleteResponse, GetOptions, GetResponse, Identity,
    LeaseGrantOptions, LeaseGrantResponse, LeaseTimeToLiveResponse, PutResponse, TlsOptions, Txn,
    TxnOpResponse, TxnResponse,
};
use tokio::time::timeout;

use super::EtcdTarget;
use crate::log;
use crate::store::StoreError;
use crate::store::retry::{self, GaveUp};
use crate::store::rewind::Mark;
use crate::store::tls;

/// How etcd's counter is named in messages.
pub(super) const REVISION: &str = "etcd's revision";

/// How to restore etcd without going back, for a waiter that found it went back.
pub(super) const BUMP: &str = "restore with `etcdutl snapshot restore --bump-revision \
     1000000000 --mark-compacted` (etcd 3.5 and later) to keep tokens rising";

/// Pause between retries of a failed read or watch while waiting.
pub(super) const RETRY: Duration = Duration::from_millis(100);

/// HTTP/2 pings go out only while a request or watch is open, after this
/// long without a frame from etcd. etcd's gRPC server allows one every 5 s
/// (`--grpc-keepalive-min-time`), and none without an open stream; a client
/// that pings more often gets GOAWAY "too_many_pings" and loses the
/// connection with every stream on it. The ping's timer is a tokio timer,
/// moved on only when it fires: at 10 s, with a renewal's answer every 5 s,
/// it fired every 5 s, and its way down tokio's timer wheel woke an idle
/// holder twice more each time (48 wake-ups a minute where the renewals
/// need 24). At 30 s, as the Kubernetes API server pings etcd, it fires
/// about twice a minute; a watch on a connection that died silently is
/// given up 30 s after its last frame, plus the ping's timeout.
const PING_EVERY: Duration = Duration::from_secs(30);

/// A client of the cluster, with how long to keep retrying its requests.
#[derive(Clone)]
pub(super) struct Cluster {
    pub(super) client: Client,
    pub(super) patience: Patience,
    /// The highest revision this process has seen of the cluster
    /// ([`crate::store::rewind`]).
    pub(super) mark: Mark,
}

impl Cluster {
    /// Set up a client for `target`'s endpoints, and the per-member clients
    /// renewals use. Nothing is sent yet unless there is a user to
    /// authenticate: the first request (the lease grant) finds out whether
    /// etcd is there.
    ///
    /// A connection is dropped when a ping goes unanswered for `ping_timeout`:
    /// it must exceed any round trip the caller can work with. Pings only
    /// unstick a watch on a connection that died silently; a renewal does not
    /// wait for them, it is retried over another connection when it goes
    /// unanswered (see [`crate::lease::keep`]).
    pub(super) async fn connect(
        target: &EtcdTarget,
        ping_timeout: Duration,
        connect_timeout: Duration,
    ) -> Result<(Cluster, Members), StoreError> {
        let scheme = if target.tls { "https" } else { "http" };
        let shown = format!(
            "{}://{}",
            if target.tls { "etcds" } else { "etcd" },
            target.endpoints.join(",")
        );
        let urls: Vec<String> = target
            .endpoints
            .iter()
            .map(|e| format!("{scheme}://{e}"))
            .collect();
        let mut options = ConnectOptions::new()
            .with_keep_alive(PING_EVERY, ping_timeout)
            .with_keep_alive_while_idle(false)
            .with_connect_timeout(connect_timeout)
            .with_require_leader(true);
        if target.tls {
            // Server certificates are always verified: by the given CA, else
            // by the system's roots.
            let mut tls = TlsOptions::new();
            tls = match &target.ca {
                Some(pem) => tls.ca_certificate(Certificate::from_pem(pem)),
                None => tls.with_native_roots(),
            };
            if let Some((cert, key)) = &target.identity {
                tls = tls.identity(Identity::from_pem(cert, key));
            }
            options = options.with_tls(tls);
        }
        if let (Some(user), Some(password)) = (&target.user, &target.password) {
            // Tokens expire (simple tokens after --auth-token-ttl, JWTs at
            // their exp): refresh instead of failing a renewal.
            options = options
                .with_user(user, password.expose())
                .with_auto_token_refresh(true);
        }
        let patience = Patience {
            within: connect_timeout,
            endpoints: target.endpoints.clone().into(),
            shown: shown.into(),
        };
        // With a user, connecting authenticates, so it can fail like any request.
        let client = retry(&patience, || {
            Client::connect(urls.clone(), Some(options.clone()))
        })
        .await?;
        let members = Members {
            urls,
            options,
            clients: Vec::new(),
            turn: Arc::new(AtomicUsize::new(0)),
        };
        let cluster = Cluster {
            client,
            patience,
            mark: Mark::default(),
        };
        Ok((cluster, members))
    }

    /// The same cluster, with another patience.
    pub(super) fn within(&self, within: Duration) -> Cluster {
        Cluster {
            client: self.client.clone(),
            patience: self.patience.for_(within),
            mark: self.mark.clone(),
        }
    }

    /// The store as the user named it, for messages.
    pub(super) fn shown(&self) -> &str {
        &self.patience.shown
    }

    /// One attempt at `txn`.
    pub(super) async fn txn_once(&self, txn: &Txn) -> Result<TxnResponse, etcd_client::Error> {
        self.client.kv_client().txn(txn.clone()).await
    }

    /// One transaction, retried.
    pub(super) async fn txn(&self, txn: &Txn) -> Result<TxnResponse, Failed> {
        retry(&self.patience, || self.txn_once(txn)).await
    }

    /// One read, retried.
    pub(super) async fn get(
        &self,
        key: &str,
        options: Option<GetOptions>,
    ) -> Result<GetResponse, Failed> {
        retry(&self.patience, || {
            let mut kv = self.client.kv_client();
            let options = options.clone();
            async move { kv.get(key, options).await }
        })
        .await
    }

    /// One put, retried.
    pub(super) async fn put(&self, key: &str, value: &str) -> Result<PutResponse, Failed> {
        retry(&self.patience, || {
            let mut kv = self.client.kv_client();
            async move { kv.put(key, value, None).await }
        })
        .await
    }

    /// One delete, retried.
    pub(super) async fn delete(&self, key: &str) -> Result<DeleteResponse, Failed> {
        retry(&self.patience, || {
            let mut kv = self.client.kv_client();
            async move { kv.delete(key, None).await }
        })
        .await
    }

    /// Grant lease `id` for `ttl` seconds, retried.
    pub(super) async fn grant(&self, id: i64, ttl: i64) -> Result<LeaseGrantResponse, Failed> {
        retry(&self.patience, || {
            let mut lease = self.client.lease_client();
            async move {
                let options = LeaseGrantOptions::new().with_id(id);
                lease.grant(ttl, Some(options)).await
            }
        })
        .await
    }

    /// What etcd says of lease `id`, retried.
    pub(super) async fn time_to_live(&self, id: i64) -> Result<LeaseTimeToLiveResponse, Failed> {
        retry(&self.patience, || {
            let mut lease = self.client.lease_client();
            async move { lease.time_to_live(id, None).await }
        })
        .await
    }

    /// Revoke lease `id`, retried; a lease already gone is fine.
    pub(super) async fn revoke(&self, id: i64) -> Result<(), StoreError> {
        let revoked = retry(&self.patience, || {
            let mut lease = self.client.lease_client();
            async move { lease.revoke(id).await }
        })
        .await;
        match revoked {
            Ok(_) => Ok(()),
            Err(e) if e.text.contains("not found") => Ok(()),
            Err(e) => Err(e.plain()),
        }
    }
}

/// The answer to the read at `index` among a transaction's operations, if
/// that operation was a read.
pub(super) fn read_at(reply: &TxnResponse, index: usize) -> Option<GetResponse> {
    match reply.op_responses().into_iter().nth(index) {
        Some(TxnOpResponse::Get(get)) => Some(get),
        _ => None,
    }
}

/// One client per member, for renewals: when a renewal fails, the next one
/// goes to another member, instead of waiting for the balancer to notice
/// that a member died. Each renewer has its own copy, so its own connections.
#[derive(Clone)]
pub(super) struct Members {
    urls: Vec<String>,
    options: ConnectOptions,
    /// Connected lazily, by index into `urls`.
    clients: Vec<Option<Client>>,
    /// Shared by all copies: renewers that reset one after the other go
    /// to different members.
    turn: Arc<AtomicUsize>,
}

impl Members {
    pub(super) async fn client(&mut self, index: usize) -> Result<Client, StoreError> {
        if self.clients.len() != self.urls.len() {
            self.clients = vec![None; self.urls.len()];
        }
        if let Some(client) = &self.clients[index] {
            return Ok(client.clone());
        }
        let client = Client::connect([self.urls[index].as_str()], Some(self.options.clone()))
            .await
            .map_err(|e| StoreError::unavailable(describe(&e)))?;
        self.clients[index] = Some(client.clone());
        Ok(client)
    }

    /// The member to try next.
    pub(super) fn next(&self) -> usize {
        self.turn.fetch_add(1, Ordering::Relaxed) % self.urls.len()
    }

    /// Drop our connection to `index`: one that failed may be half dead.
    pub(super) fn forget(&mut self, index: usize) {
        if let Some(client) = self.clients.get_mut(index) {
            *client = None;
        }
    }
}

/// What to check when etcd does not answer.
fn unreachable_hint(tls: bool) -> &'static str {
    match tls {
        // A server that rejects the client certificate closes the connection
        // without saying why.
        true => {
            "is etcd running there with TLS, and does it accept this client certificate (--cert, --key)?"
        }
        false => "is etcd running there? (--store, ELECT_STORE)",
    }
}

/// Run `op` until it succeeds, fails in a way retrying cannot fix, or
/// `patience` has passed, as every store retries ([`crate::store::retry`]).
/// With several endpoints, a retry may reach another.
pub(super) async fn retry<T, F, Fut>(patience: &Patience, mut op: F) -> Result<T, Failed>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, etcd_client::Error>>,
{
    // The future is spawned (the lease grant): Send.
    let probed = AtomicBool::new(false);
    let endpoints = &patience.endpoints;
    // An attempt's error: why retrying would not help (`None`: it may), and
    // what etcd said.
    let attempt = || {
        let answer = op();
        let probed = &probed;
        async move {
            let e = match answer.await {
                Ok(value) => return Ok(value),
                Err(e) => e,
            };
            let text = describe(&e);
            if let Some(errno) = out_of_descriptors(&e) {
                return Err((Some(Why::Local(errno)), text));
            }
            if let Some(refused) = tls_refusal(&e) {
                return Err((Some(Why::Tls), refused.to_string()));
            }
            if let Some(why) = refusal(&e) {
                return Err((Some(why), text));
            }
            // A refused connection is answered at once; only what can heal
            // by itself (a timeout, a member without a leader) is worth the
            // whole patience.
            if text.contains("connect")
                && !probed.swap(true, Ordering::Relaxed)
                && nothing_listens(endpoints).await
            {
                let text = "nothing listens there (connection refused)".to_string();
                return Err((Some(Why::NothingListens), text));
            }
            Err((None, text))
        }
    };
    let worth_retrying = |(why, text): &(Option<Why>, String)| {
        if why.is_some() {
            return retry::Worth::No;
        }
        log::verbose(format_args!("etcd request failed, retrying: {text}"));
        retry::Worth::Yes
    };
    let failed = |why, text| Failed {
        why,
        text,
        shown: patience.shown.clone(),
        within: patience.within,
    };
    match retry::retry(
        "etcd request",
        patience.within,
        patience.attempt(),
        attempt,
        worth_retrying,
    )
    .await
    {
        Ok(value) => Ok(value),
        Err(GaveUp::Refused((why, text))) => Err(failed(why.unwrap_or(Why::Refused), text)),
        Err(GaveUp::Bound(last)) => Err(failed(
            Why::GaveUp,
            last.map_or_else(|| "no answer".to_string(), |(_, text)| text),
        )),
    }
}

/// How long a connection to an endpoint may take before it counts as
/// maybe listening: a refusal comes back within a round trip.
const LISTEN_WITHIN: Duration = Duration::from_secs(1);

/// Whether every endpoint refuses a TCP connection (none within
/// [`LISTEN_WITHIN`] counts as maybe listening).
async fn nothing_listens(endpoints: &[String]) -> bool {
    for endpoint in endpoints {
        let attempt = tokio::net::TcpStream::connect(endpoint.as_str());
        match timeout(LISTEN_WITHIN, attempt).await {
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {}
            _ => return false,
        }
    }
    true
}

/// How long to keep trying a request, the endpoints to probe when one
/// cannot connect, and the store's name for saying why it failed.
#[derive(Clone, Debug)]
pub(super) struct Patience {
    pub(super) within: Duration,
    endpoints: Arc<[String]>,
    shown: Arc<str>,
}

impl Patience {
    /// How long one attempt may wait for its answer, as on every store
    /// ([`retry::attempt_within`]).
    pub(super) fn attempt(&self) -> Duration {
        retry::attempt_within(self.within)
    }

    /// The same endpoints, with another time limit.
    fn for_(&self, within: Duration) -> Patience {
        Patience {
            within,
            endpoints: self.endpoints.clone(),
            shown: self.shown.clone(),
        }
    }
}

/// Why a retried request failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Why {
    /// The user refused: its credentials, or a permission it lacks.
    Denied,
    /// Refused otherwise (bad input): retrying would not help.
    Refused,
    /// The TLS handshake was refused (as every store says it: `text`).
    Tls,
    /// Nothing listens at any endpoint.
    NothingListens,
    /// A descriptor could not be had on this machine (this errno).
    Local(i32),
    /// Its database reached its quota: the NOSPACE alarm refuses every
    /// write until an operator frees space and disarms it.
    OutOfSpace,
    /// No answer within the patience.
    GaveUp,
}

/// A retried request that failed: `Display` is what etcd said; as a
/// [`StoreError`] it also names the store and what to check.
#[derive(Debug)]
pub(super) struct Failed {
    why: Why,
    pub(super) text: String,
    shown: Arc<str>,
    within: Duration,
}

impl Failed {
    /// What to change when etcd's users and elect's disagree, after "; ".
    pub(super) fn users_hint(&self) -> &'static str {
        if self.text.contains("authentication is not enabled") {
            "; this etcd has no users: leave out --user (and ELECT_USER, ETCDCTL_USER)"
        } else if self.text.contains("user name is empty") {
            "; this etcd has users: give --user NAME (and --password-file, or ELECT_PASSWORD)"
        } else {
            ""
        }
    }
}

impl Failed {
    /// `message` about this failure, of its kind: the user denied, or the
    /// store unavailable.
    pub(super) fn error(&self, message: String) -> StoreError {
        match self.why {
            Why::Denied => StoreError::denied(message),
            Why::Local(errno) => StoreError::out_of_descriptors(errno),
            _ => StoreError::unavailable(message),
        }
    }

    /// What etcd said, of its kind.
    pub(super) fn plain(self) -> StoreError {
        let text = self.text.clone();
        self.error(text)
    }
}

impl From<Failed> for StoreError {
    /// The error for a request to the store that failed so, with what to check.
    fn from(f: Failed) -> StoreError {
        let shown = &f.shown;
        let tls = shown.starts_with("etcds:");
        f.error(match f.why {
            Why::Denied | Why::Refused => {
                format!("{shown} refused the request: {f}{}", f.users_hint())
            }
            Why::Tls | Why::Local(_) => format!("{shown}: {f}"),
            Why::OutOfSpace => format!(
                "{shown} refused the request: {f}: its database is full (the NOSPACE \
                 alarm); compact and defragment it (etcdctl compact, etcdctl defrag), then \
                 `etcdctl alarm disarm`"
            ),
            Why::NothingListens => {
                format!("cannot reach {shown}: {f}; {}", unreachable_hint(tls))
            }
            // A member that lost its quorum takes connections and
            // answers nothing that needs one.
            Why::GaveUp if !tls => format!(
                "cannot reach {shown} within {}: {f}; is etcd running there, with a quorum \
                 of its members? (--store, ELECT_STORE)",
                crate::clock::show(f.within),
            ),
            Why::GaveUp => format!(
                "cannot reach {shown} within {}: {f}; {}",
                crate::clock::show(f.within),
                unreachable_hint(tls)
            ),
        })
    }
}

impl From<Failed> for String {
    fn from(f: Failed) -> String {
        f.text
    }
}

impl fmt::Display for Failed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// One line for an etcd-client error.
pub(super) fn describe(e: &etcd_client::Error) -> String {
    let text = match e {
        etcd_client::Error::GRpcStatus(s) if !s.message().is_empty() => s.message().to_string(),
        etcd_client::Error::GRpcStatus(s) => format!("{:?}", s.code()),
        other => other.to_string(),
    };
    crate::store::with_causes(text, e)
}

/// A descriptor that could not be had (its errno), from the I/O error
/// under the gRPC status or transport error, or their words.
fn out_of_descriptors(e: &etcd_client::Error) -> Option<i32> {
    match e {
        etcd_client::Error::GRpcStatus(status) => crate::descriptors::in_chain(status),
        etcd_client::Error::TransportError(transport) => crate::descriptors::in_chain(transport),
        other => crate::descriptors::in_chain(other),
    }
}

/// A refused TLS handshake, from the TLS library's error under the gRPC
/// status or transport error (etcd-client's own error names no source).
fn tls_refusal(e: &etcd_client::Error) -> Option<tls::Refused> {
    match e {
        etcd_client::Error::GRpcStatus(status) => tls::Refused::in_chain(status),
        etcd_client::Error::TransportError(transport) => tls::Refused::in_chain(transport),
        _ => None,
    }
}

/// Errors that retrying will not fix, and why: the user refused (by the
/// status code where etcd gives one, else by the words of its message:
/// etcd answers a wrong password and a user where it has none with
/// InvalidArgument), and bad input. A refused TLS handshake is found
/// before, from the TLS library's error ([`tls::Refused`]), and never
/// retried, nor in the clear. `None`: worth another try.
fn refusal(e: &etcd_client::Error) -> Option<Why> {
    use tonic::Code;
    let code = match e {
        etcd_client::Error::GRpcStatus(s) => Some(s.code()),
        _ => None,
    };
    let text = describe(e).to_ascii_lowercase();
    let says = |words: &[&str]| words.iter().any(|w| text.contains(w));
    let denied = matches!(code, Some(Code::PermissionDenied | Code::Unauthenticated))
        || says(&[
            "authentication failed",
            "authentication is not enabled",
            "user name is empty",
            "permission denied",
        ]);
    let refused = matches!(code, Some(Code::InvalidArgument | Code::NotFound))
        || matches!(
            e,
            etcd_client::Error::InvalidArgs(_) | etcd_client::Error::InvalidUri(_)
        );
    if says(&["database space exceeded"]) {
        return Some(Why::OutOfSpace);
    }
    match (denied, refused) {
        (true, _) => Some(Why::Denied),
        (false, true) => Some(Why::Refused),
        (false, false) => None,
    }
}
