//! What answers at a store's address when the store's own client gets
//! nowhere: a URL that points at the wrong server (etcd's port given to
//! PostgreSQL, a web server, a typo in the port), or a server that hangs.
//! The client libraries only say "transport error", "early eof" or nothing
//! at all; a look of its own, on fresh connections, tells the user what is
//! there.
//!
//! Each kind of server answers a greeting of its own, and closes on or
//! ignores the others': PostgreSQL (and PgBouncer) answers an SSLRequest
//! with one byte, 'S' or 'N'; ZooKeeper answers its four-letter word
//! `srvr` in text (or says it is not allowed); an HTTP/1 server answers a
//! `GET` (etcd's `/version` names etcd); an HTTP/2 server answers the
//! connection preface with a SETTINGS frame; a TLS server answers plain
//! text with an alert. The greeting of the kind the URL names goes first
//! and alone: a store that is what its URL says is spared the others.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::clock::{Instant, sleep_until};

/// A kind of server, as a probe tells them apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Server {
    Etcd,
    Postgres,
    /// MySQL or MariaDB: it speaks first, its handshake.
    MySql,
    ZooKeeper,
    /// An HTTP/1 server that is not etcd.
    Http,
    /// An HTTP/2 server (with prior knowledge, as gRPC) that is not etcd.
    Http2,
    /// A server that speaks TLS first.
    Tls,
    /// A Kubernetes API server: it speaks only TLS, and answers plain HTTP
    /// as Go's TLS servers do, so any such server passes for one.
    Kubernetes,
}

impl fmt::Display for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Server::Etcd => "etcd",
            Server::Postgres => "PostgreSQL",
            Server::MySql => "MySQL or MariaDB",
            Server::ZooKeeper => "ZooKeeper",
            Server::Http => "an HTTP server",
            Server::Http2 => "an HTTP/2 server",
            Server::Tls => "a TLS server",
            Server::Kubernetes => "Kubernetes",
        })
    }
}

impl Server {
    /// What most often keeps a server of this kind that takes the
    /// connection from answering, as a question to end the finding with.
    fn silent_because(self) -> &'static str {
        match self {
            // A member without a quorum takes requests and answers none
            // that needs the cluster, as each of elect's does.
            Server::Etcd => " (has the cluster lost its quorum?)",
            _ => "",
        }
    }
}

/// Where a store is reached, over TCP or a Unix socket, and what should
/// answer there.
#[derive(Clone, Debug)]
pub struct Contact {
    /// The kind of server the URL names.
    pub expects: Server,
    /// Whether the store is reached over TLS: then a TLS server is expected.
    pub tls: bool,
    /// Each address: `host:port`, or the path of a Unix socket (`/…`).
    pub addresses: Vec<String>,
}

/// What one address came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Heard {
    /// The kind of server expected (or TLS, where TLS is expected): its
    /// client's trouble is another.
    Expected,
    /// Nothing listens there.
    Refused,
    /// No Unix socket is there (the path, or a directory on it, does not
    /// exist).
    NoSocket,
    /// The host name does not resolve, and will not by waiting.
    Unresolved(String),
    /// Connecting failed otherwise (no route, a firewall that drops), or
    /// the name could not be looked up just now.
    Unreachable(String),
    /// It accepted the connection and never answered.
    Silent,
    /// It closed the connection without a word.
    Closed,
    /// It answered as another kind of server.
    Like(Server),
    /// It answered, in no protocol elect knows.
    Garbage,
    /// No descriptor could be had here to look (this errno, EMFILE or
    /// ENFILE): this machine's limit, not the address's doing.
    Local(i32),
}

impl Heard {
    /// Whether waiting longer cannot change it: then say so at once.
    pub fn is_final(&self) -> bool {
        matches!(
            self,
            Heard::Refused
                | Heard::NoSocket
                | Heard::Unresolved(_)
                | Heard::Like(_)
                | Heard::Garbage
                | Heard::Local(_)
        )
    }
}

/// What each address of a contact came to.
#[derive(Clone, Debug)]
pub struct Findings {
    pub expects: Server,
    /// Whether the store is reached over TLS.
    pub tls: bool,
    pub heard: Vec<(String, Heard)>,
}

impl Findings {
    /// Whether every address has an answer that waiting cannot change, or
    /// one says that this machine gives elect no descriptor to look with.
    pub fn is_final(&self) -> bool {
        self.local().is_some()
            || (!self.heard.is_empty() && self.heard.iter().all(|(_, h)| h.is_final()))
    }

    /// The errno of a descriptor that could not be had for some address.
    pub fn local(&self) -> Option<i32> {
        self.heard.iter().find_map(|(_, h)| match h {
            Heard::Local(errno) => Some(*errno),
            _ => None,
        })
    }

    /// Whether the probe has anything to say beyond the store's own error:
    /// some address is not what the URL names.
    pub fn says_more(&self) -> bool {
        self.heard.iter().any(|(_, h)| *h != Heard::Expected)
    }

    /// One address's finding, as a sentence about "it" (a socket's, naming
    /// its path).
    fn describe(&self, address: &str, heard: &Heard) -> String {
        let expects = self.expects;
        match heard {
            Heard::Refused if is_socket(address) => {
                format!("nothing listens at the socket {address} (connection refused)")
            }
            Heard::NoSocket => format!("the socket {address} does not exist"),
            Heard::Expected if self.tls => {
                "it takes the connection, but did not answer elect's requests over TLS".into()
            }
            Heard::Expected => format!(
                "it is {expects}, but did not answer elect's requests{}",
                expects.silent_because()
            ),
            Heard::Refused => "nothing listens there (connection refused)".into(),
            Heard::Unresolved(why) => format!("cannot resolve the host name ({why})"),
            Heard::Unreachable(why) => format!("cannot connect ({why})"),
            Heard::Silent => "it accepted the connection and never answered".into(),
            Heard::Closed => "it closed the connection without a word".into(),
            Heard::Like(Server::Tls) => format!(
                "it speaks TLS from its first byte, which the URL does not: {}",
                tls_hint(expects)
            ),
            Heard::Like(other) => format!("this is not {expects}: it answered like {other}"),
            Heard::Garbage => {
                format!("this is not {expects}: it answered in no protocol elect knows")
            }
            Heard::Local(errno) => crate::descriptors::message(*errno),
        }
    }
}

impl fmt::Display for Findings {
    /// With one address, what it came to; with several, each by name.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.heard.as_slice() {
            [(address, heard)] => f.write_str(&self.describe(address, heard)),
            all => {
                let each: Vec<String> = all
                    .iter()
                    .map(|(address, heard)| format!("{address}: {}", self.describe(address, heard)))
                    .collect();
                f.write_str(&each.join("; "))
            }
        }
    }
}

/// How to reach a server of kind `expects` that speaks TLS at once.
fn tls_hint(expects: Server) -> &'static str {
    match expects {
        Server::Etcd => "use etcds:// (with --cacert)",
        Server::ZooKeeper => "if it is ZooKeeper's secureClientPort, use zks:// (with --cacert)",
        // Both start TLS inside their own protocol, after a plain request:
        // TLS at the first byte is something in front of them.
        Server::Postgres => {
            "PostgreSQL starts TLS inside its own protocol (sslmode): give its own port, not a TLS proxy's"
        }
        Server::MySql => {
            "MySQL starts TLS inside its own protocol (ssl-mode): give its own port, not a TLS proxy's"
        }
        _ => "reach it over TLS",
    }
}

/// Look at every address of `contact`, side by side, done by `until`.
pub async fn probe(contact: &Contact, until: Instant) -> Findings {
    let looks = contact
        .addresses
        .iter()
        .map(|address| async move { (address.clone(), look(contact, address, until).await) });
    Findings {
        expects: contact.expects,
        tls: contact.tls,
        heard: join_all(looks).await,
    }
}

/// The greetings, each on a connection of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Greeting {
    /// PostgreSQL's SSLRequest.
    SslRequest,
    /// ZooKeeper's four-letter word.
    Srvr,
    /// HTTP/1, for etcd's version.
    GetVersion,
    /// HTTP/2's connection preface and an empty SETTINGS frame.
    Preface,
    /// A TLS ClientHello: a server that speaks TLS from its first byte
    /// answers it in TLS (its ServerHello, or an alert), where plain text
    /// may get no answer at all (etcd's TLS port).
    ClientHello,
    /// Nothing: MySQL greets first.
    Nothing,
}

impl Greeting {
    const ALL: [Greeting; 5] = [
        Greeting::SslRequest,
        Greeting::Srvr,
        Greeting::GetVersion,
        Greeting::Preface,
        Greeting::ClientHello,
    ];

    /// The greeting that a server of this kind answers.
    fn of(server: Server) -> Greeting {
        match server {
            Server::Postgres => Greeting::SslRequest,
            Server::ZooKeeper => Greeting::Srvr,
            Server::MySql => Greeting::Nothing,
            Server::Etcd | Server::Http | Server::Tls | Server::Kubernetes => Greeting::GetVersion,
            Server::Http2 => Greeting::Preface,
        }
    }

    fn bytes(self, host: &str) -> Vec<u8> {
        match self {
            // Length 8, then the SSLRequest code 80877103.
            Greeting::SslRequest => vec![0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f],
            Greeting::Srvr => b"srvr".to_vec(),
            Greeting::Nothing => Vec::new(),
            Greeting::GetVersion => format!(
                "GET /version HTTP/1.1\r\nHost: {host}\r\nUser-Agent: elect\r\nConnection: close\r\n\r\n"
            )
            .into_bytes(),
            Greeting::Preface => {
                let mut bytes = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
                // An empty SETTINGS frame: length 0, type 4, no flags, stream 0.
                bytes.extend([0, 0, 0, 4, 0, 0, 0, 0, 0]);
                bytes
            }
            Greeting::ClientHello => client_hello(),
        }
    }
}

/// A TLS 1.2 ClientHello (RFC 5246 7.4.1.2) that also offers TLS 1.3, with
/// the suites and groups every server has: enough for a ServerHello, a
/// HelloRetryRequest or an alert, each a TLS record. Nothing is ever
/// encrypted: the probe reads the first record and hangs up.
fn client_hello() -> Vec<u8> {
    fn with_len(width: usize, body: &[u8]) -> Vec<u8> {
        let len = body.len().to_be_bytes();
        let mut out = len[len.len() - width..].to_vec();
        out.extend_from_slice(body);
        out
    }
    fn extension(kind: u16, body: &[u8]) -> Vec<u8> {
        let mut out = kind.to_be_bytes().to_vec();
        out.extend(with_len(2, body));
        out
    }
    let u16s =
        |values: &[u16]| -> Vec<u8> { values.iter().flat_map(|v| v.to_be_bytes()).collect() };
    // TLS 1.3's three suites, then ECDHE with AES-GCM and ChaCha20.
    let suites = u16s(&[
        0x1301, 0x1302, 0x1303, 0xc02b, 0xc02f, 0xc02c, 0xc030, 0xcca9, 0xcca8,
    ]);
    let mut extensions = Vec::new();
    // supported_groups: x25519, secp256r1, secp384r1.
    extensions.extend(extension(
        10,
        &with_len(2, &u16s(&[0x001d, 0x0017, 0x0018])),
    ));
    // ec_point_formats: uncompressed.
    extensions.extend(extension(11, &[1, 0]));
    // signature_algorithms: ECDSA, RSA-PSS and RSA PKCS#1 with SHA-256/384.
    let schemes = u16s(&[0x0403, 0x0804, 0x0401, 0x0503, 0x0805, 0x0501]);
    extensions.extend(extension(13, &with_len(2, &schemes)));
    // supported_versions: TLS 1.3 and 1.2.
    extensions.extend(extension(43, &with_len(1, &u16s(&[0x0304, 0x0303]))));
    let mut hello = vec![3, 3];
    hello.extend([0x5a; 32]);
    hello.push(0);
    hello.extend(with_len(2, &suites));
    hello.extend([1, 0]);
    hello.extend(with_len(2, &extensions));
    let mut handshake = vec![1];
    handshake.extend(with_len(3, &hello));
    let mut record = vec![22, 3, 1];
    record.extend(with_len(2, &handshake));
    record
}

/// What a greeting got back.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Reply {
    Refused,
    /// No descriptor could be had to connect with (this errno).
    Local(i32),
    Unresolved(String),
    Unreachable(String),
    /// Connected, and nothing came back before the time was up.
    Nothing,
    /// Closed without a byte.
    Closed,
    Bytes(Vec<u8>),
}

/// How long one greeting waits for its answer: enough for a server across
/// the world, and leaves the rest of the bound for the store's own client.
const ANSWER_WITHIN: Duration = Duration::from_secs(2);

/// How long the expected kind's greeting goes alone: a healthy store
/// answers by then, and is spared the others.
const ALONE_FOR: Duration = Duration::from_millis(300);

/// A greeting on its way, and what it got back.
type Greeted<'a> = Pin<Box<dyn Future<Output = (Greeting, Reply)> + Send + 'a>>;

/// Look at one address: the expected kind's greeting first; unless that
/// kind answers at once, every other greeting beside it. Done as soon as
/// an answer settles it.
async fn look(contact: &Contact, address: &str, until: Instant) -> Heard {
    if is_socket(address) {
        return look_at_socket(address, until).await;
    }
    let first = Greeting::of(contact.expects);
    let send = |g: Greeting| -> Greeted<'_> {
        Box::pin(async move { (g, greet(address, g, until).await) })
    };
    let mut pending = vec![Some(send(first))];
    let mut replies = Vec::new();
    let others_at = Instant::now() + ALONE_FOR;
    let mut others_sent = false;
    loop {
        let next = tokio::select! {
            next = next_done(&mut pending) => next,
            () = sleep_until(others_at), if !others_sent => None,
        };
        match next {
            Some((greeting, reply)) => {
                if greeting == first {
                    match &reply {
                        Reply::Refused => return Heard::Refused,
                        Reply::Local(errno) => return Heard::Local(*errno),
                        Reply::Unresolved(why) => return Heard::Unresolved(why.clone()),
                        Reply::Unreachable(why) => return Heard::Unreachable(why.clone()),
                        // A TLS server need not answer plain text at all,
                        // nor a TLS greeting elect does not send: that it
                        // listens is all a probe can tell.
                        _ if contact.tls => return Heard::Expected,
                        _ => {}
                    }
                }
                replies.push((greeting, reply));
                if let Some(heard) = settled(contact, &replies) {
                    return heard;
                }
            }
            None if !others_sent => {}
            // Every greeting is answered.
            None => return judge(contact, &replies),
        }
        if !others_sent {
            others_sent = true;
            pending.extend(
                Greeting::ALL
                    .into_iter()
                    .filter(|g| *g != first)
                    .map(|g| Some(send(g))),
            );
        }
    }
}

/// Whether an address is a Unix socket's path.
fn is_socket(address: &str) -> bool {
    address.starts_with('/')
}

/// Look at a Unix socket as at a TCP port: one that is not there
/// (ENOENT, ENOTDIR) or that nobody listens on (ECONNREFUSED: the server
/// that made it is gone) is settled at once. What does accept there is
/// taken for the kind expected: only its server makes a socket there.
async fn look_at_socket(path: &str, until: Instant) -> Heard {
    let until = until.min(Instant::now() + ANSWER_WITHIN);
    let connected = tokio::select! {
        connected = tokio::net::UnixStream::connect(path) => connected,
        () = sleep_until(until) => {
            return Heard::Unreachable("the connection was not accepted in time".into());
        }
    };
    let Err(e) = connected else {
        return Heard::Expected;
    };
    if let Some(errno) = crate::descriptors::of_io(&e) {
        return Heard::Local(errno);
    }
    match e.raw_os_error() {
        Some(libc::ENOENT | libc::ENOTDIR) => Heard::NoSocket,
        Some(libc::ECONNREFUSED) => Heard::Refused,
        _ => Heard::Unreachable(e.to_string()),
    }
}

/// The next greeting answered, `None` once all are.
async fn next_done(pending: &mut [Option<Greeted<'_>>]) -> Option<(Greeting, Reply)> {
    std::future::poll_fn(|cx| {
        let mut left = false;
        for slot in pending.iter_mut() {
            let Some(greeted) = slot else { continue };
            match greeted.as_mut().poll(cx) {
                Poll::Ready(done) => {
                    *slot = None;
                    return Poll::Ready(Some(done));
                }
                Poll::Pending => left = true,
            }
        }
        match left {
            true => Poll::Pending,
            false => Poll::Ready(None),
        }
    })
    .await
}

/// A verdict that no answer still to come could change: the kind
/// expected, or a server that answers only its own greeting (an HTTP/2
/// or TLS server could yet turn out to be etcd).
fn settled(contact: &Contact, replies: &[(Greeting, Reply)]) -> Option<Heard> {
    // TLS from the first byte, where the URL speaks plain text and the
    // kind it names did not answer its own greeting meanwhile: no plain
    // request will ever get through.
    let speaks_tls = replies
        .iter()
        .any(|(g, r)| *g == Greeting::ClientHello && recognise(*g, r) == Some(Server::Tls));
    if speaks_tls && !expected(contact, Server::Tls) {
        return Some(Heard::Like(Server::Tls));
    }
    let known = replies.iter().filter_map(|(g, r)| recognise(*g, r));
    let mut other = None;
    for server in known {
        if expected(contact, server) {
            return Some(Heard::Expected);
        }
        if !matches!(server, Server::Http2 | Server::Tls) {
            other = Some(Heard::Like(server));
        }
    }
    other
}

fn expected(contact: &Contact, server: Server) -> bool {
    server == contact.expects
        || ((contact.tls || contact.expects == Server::Kubernetes) && server == Server::Tls)
}

/// The verdict from every greeting's reply.
fn judge(contact: &Contact, replies: &[(Greeting, Reply)]) -> Heard {
    let known: Vec<Server> = replies
        .iter()
        .filter_map(|(g, r)| recognise(*g, r))
        .collect();
    if known.iter().any(|s| expected(contact, *s)) {
        return Heard::Expected;
    }
    // The most telling first: etcd also answers as an HTTP/2 server.
    let order = [
        Server::Etcd,
        Server::Postgres,
        Server::MySql,
        Server::ZooKeeper,
        Server::Tls,
        Server::Http2,
        Server::Http,
    ];
    if let Some(server) = order.into_iter().find(|s| known.contains(s)) {
        return Heard::Like(server);
    }
    let replied = |f: fn(&Reply) -> bool| replies.iter().any(|(_, r)| f(r));
    if replied(|r| matches!(r, Reply::Bytes(_))) {
        Heard::Garbage
    } else if replied(|r| *r == Reply::Nothing) {
        Heard::Silent
    } else if replied(|r| *r == Reply::Closed) {
        Heard::Closed
    } else {
        match replies.first().map(|(_, r)| r) {
            Some(Reply::Refused) => Heard::Refused,
            Some(Reply::Local(errno)) => Heard::Local(*errno),
            Some(Reply::Unresolved(why)) => Heard::Unresolved(why.clone()),
            Some(Reply::Unreachable(why)) => Heard::Unreachable(why.clone()),
            _ => Heard::Silent,
        }
    }
}

/// The kind of server whose answer to `greeting` this is, if any.
fn recognise(greeting: Greeting, reply: &Reply) -> Option<Server> {
    let Reply::Bytes(bytes) = reply else {
        return None;
    };
    let text = String::from_utf8_lossy(bytes);
    // A TLS record: an alert (21) or a handshake (22), version 3.x.
    if bytes.len() >= 3 && matches!(bytes[0], 21 | 22) && bytes[1] == 3 {
        return Some(Server::Tls);
    }
    // Go's TLS servers (etcd's) answer plain HTTP so.
    if text.contains("HTTP request to an HTTPS server") {
        return Some(Server::Tls);
    }
    if text.starts_with("HTTP/1.") {
        return Some(match text.contains("\"etcdserver\"") {
            true => Server::Etcd,
            false => Server::Http,
        });
    }
    // MySQL's and MariaDB's handshake, whatever was sent: 3 bytes of
    // length, sequence 0, then protocol 10 and a version; or an error
    // packet (0xff) from a server that turns the connection away.
    if bytes.len() >= 5
        && bytes[3] == 0
        && (bytes[4] == 10 || bytes[4] == 0xff)
        && (1..1024).contains(&u32::from_le_bytes([bytes[0], bytes[1], bytes[2], 0]))
    {
        return Some(Server::MySql);
    }
    match greeting {
        Greeting::SslRequest if matches!(bytes.as_slice(), [b'S' | b'N']) => Some(Server::Postgres),
        // An ErrorResponse ('E', then a length) from a server that refuses
        // the request outright.
        Greeting::SslRequest if bytes.len() >= 5 && bytes[0] == b'E' && bytes[1] == 0 => {
            Some(Server::Postgres)
        }
        // A member of an ensemble without a quorum (or still joining one)
        // says that it does not serve: a ZooKeeper that may serve again.
        Greeting::Srvr
            if text.starts_with("Zookeeper version")
                || text.contains("is not executed because it is not in the whitelist")
                || text.starts_with("This ZooKeeper instance is not currently serving") =>
        {
            Some(Server::ZooKeeper)
        }
        // A frame header: 3 bytes of length, then the type, SETTINGS (4) or
        // GOAWAY (7), on stream 0.
        Greeting::Preface if bytes.len() >= 9 && matches!(bytes[3], 4 | 7) => Some(Server::Http2),
        _ => None,
    }
}

/// Send `greeting` to `address` on a fresh connection and read what comes
/// back, within [`ANSWER_WITHIN`] and by `until`.
async fn greet(address: &str, greeting: Greeting, until: Instant) -> Reply {
    let mut until = until.min(Instant::now() + ANSWER_WITHIN);
    let connected = tokio::select! {
        connected = connect(address) => connected,
        () = sleep_until(until) => {
            return Reply::Unreachable("the connection was not accepted in time".into());
        }
    };
    let mut stream = match connected {
        Ok(stream) => stream,
        Err(reply) => return reply,
    };
    let host = address.rsplit_once(':').map_or(address, |(h, _)| h);
    if stream.write_all(&greeting.bytes(host)).await.is_err() {
        return Reply::Closed;
    }
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    let mut closed = false;
    // Until the server closes or the time is up; once it has begun to
    // answer, a moment more for the rest: a server that answers and then
    // waits (PostgreSQL after its one byte) has said what it has to say.
    loop {
        let read = tokio::select! {
            read = stream.read(&mut buf) => read,
            () = sleep_until(until) => break,
        };
        match read {
            Ok(0) | Err(_) => {
                closed = true;
                break;
            }
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
        if got.len() >= 4096 {
            break;
        }
        until = until.min(Instant::now() + Duration::from_millis(200));
    }
    match (got.is_empty(), closed) {
        (false, _) => Reply::Bytes(got),
        (true, true) => Reply::Closed,
        (true, false) => Reply::Nothing,
    }
}

/// A connection to the first of the address's resolved addresses that
/// takes one.
async fn connect(address: &str) -> Result<TcpStream, Reply> {
    let resolved: Vec<_> = match tokio::net::lookup_host(address).await {
        Ok(all) => all.collect(),
        Err(e) => match crate::descriptors::of_io(&e) {
            Some(errno) => return Err(Reply::Local(errno)),
            None => return Err(unresolved(&e)),
        },
    };
    let mut last = Reply::Unresolved("no address".into());
    for at in resolved {
        match TcpStream::connect(at).await {
            Ok(stream) => return Ok(stream),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => last = Reply::Refused,
            Err(e) => match crate::descriptors::of_io(&e) {
                Some(errno) => return Err(Reply::Local(errno)),
                None => last = Reply::Unreachable(e.to_string()),
            },
        }
    }
    Err(last)
}

/// A failed look-up: final when the name does not exist (glibc and musl
/// say so in their own words), else perhaps passing.
fn unresolved(e: &std::io::Error) -> Reply {
    let text = e.to_string();
    let why = text
        .strip_prefix("failed to lookup address information: ")
        .unwrap_or(&text)
        .to_string();
    let gone = [
        "Name or service not known",
        "Name does not resolve",
        "No address associated",
    ];
    match gone.iter().any(|g| why.contains(g)) {
        true => Reply::Unresolved(why),
        false => Reply::Unreachable(format!("cannot look up the host name: {why}")),
    }
}

/// Every future's output, in order, polled side by side.
async fn join_all<F: std::future::Future>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output> {
    let mut pending: Vec<_> = futures.into_iter().map(Box::pin).collect();
    let mut done: Vec<Option<F::Output>> = (0..pending.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        for (future, slot) in pending.iter_mut().zip(done.iter_mut()) {
            if slot.is_none()
                && let Poll::Ready(out) = future.as_mut().poll(cx)
            {
                *slot = Some(out);
            }
        }
        match done.iter().all(Option::is_some) {
            true => Poll::Ready(()),
            false => Poll::Pending,
        }
    })
    .await;
    // Every slot is filled: the poll above returned Ready only then.
    done.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contact(expects: Server) -> Contact {
        Contact {
            expects,
            tls: false,
            addresses: vec!["a:1".into()],
        }
    }

    fn bytes(b: &[u8]) -> Reply {
        Reply::Bytes(b.to_vec())
    }

    #[test]
    fn each_server_is_told_by_its_answer() {
        let http404 = bytes(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
        let version =
            bytes(b"HTTP/1.1 200 OK\r\n\r\n{\"etcdserver\":\"3.4.23\",\"etcdcluster\":\"3.4.0\"}");
        let settings = bytes(&[0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 5, 0, 0, 64, 0]);
        assert_eq!(
            recognise(Greeting::SslRequest, &bytes(b"N")),
            Some(Server::Postgres)
        );
        assert_eq!(
            recognise(Greeting::SslRequest, &bytes(b"S")),
            Some(Server::Postgres)
        );
        assert_eq!(
            recognise(Greeting::GetVersion, &version),
            Some(Server::Etcd)
        );
        assert_eq!(
            recognise(Greeting::GetVersion, &http404),
            Some(Server::Http)
        );
        assert_eq!(recognise(Greeting::Preface, &settings), Some(Server::Http2));
        // MariaDB's greeting, sent before anything is asked: length 90,
        // sequence 0, protocol 10, its version; and whatever was sent.
        let mut handshake = vec![90, 0, 0, 0, 10];
        handshake.extend_from_slice(b"5.5.5-10.11.19-MariaDB-0+deb12u1\0");
        for greeting in [
            Greeting::Nothing,
            Greeting::SslRequest,
            Greeting::GetVersion,
        ] {
            assert_eq!(recognise(greeting, &bytes(&handshake)), Some(Server::MySql));
        }
        // Turned away: an error packet (0xff, code 1040: too many connections).
        assert_eq!(
            recognise(
                Greeting::Nothing,
                &bytes(&[23, 0, 0, 0, 0xff, 0x10, 0x04, b'T'])
            ),
            Some(Server::MySql)
        );
        assert_eq!(
            recognise(
                Greeting::Srvr,
                &bytes(b"Zookeeper version: 3.8.0-debian\nLatency min/avg/max: 0/0.0/0\n")
            ),
            Some(Server::ZooKeeper)
        );
        assert_eq!(
            recognise(
                Greeting::Srvr,
                &bytes(b"This ZooKeeper instance is not currently serving requests\n")
            ),
            Some(Server::ZooKeeper)
        );
        assert_eq!(
            recognise(Greeting::GetVersion, &bytes(&[21, 3, 3, 0, 2, 2, 50])),
            Some(Server::Tls)
        );
        assert_eq!(
            recognise(Greeting::SslRequest, &bytes(b"\x7f\x01 nonsense")),
            None
        );

        // etcd answers the preface too; its version says more.
        let replies = [
            (Greeting::GetVersion, version),
            (Greeting::Preface, settings),
        ];
        assert_eq!(judge(&contact(Server::Etcd), &replies), Heard::Expected);
        assert_eq!(
            judge(&contact(Server::Postgres), &replies),
            Heard::Like(Server::Etcd)
        );
    }

    #[test]
    fn what_no_server_answered_is_judged_by_how_it_behaved() {
        let c = contact(Server::ZooKeeper);
        let all = |r: Reply| -> Vec<(Greeting, Reply)> {
            Greeting::ALL.into_iter().map(|g| (g, r.clone())).collect()
        };
        assert_eq!(judge(&c, &all(Reply::Nothing)), Heard::Silent);
        assert_eq!(judge(&c, &all(Reply::Closed)), Heard::Closed);
        assert_eq!(judge(&c, &all(bytes(b"\x00\xffjunk"))), Heard::Garbage);
        assert_eq!(judge(&c, &all(Reply::Refused)), Heard::Refused);
        // PostgreSQL closes on every greeting but its own.
        let mut pg = all(Reply::Closed);
        pg[0].1 = bytes(b"N");
        assert_eq!(judge(&c, &pg), Heard::Like(Server::Postgres));
    }

    #[test]
    fn findings_read_as_one_line() {
        let one = Findings {
            expects: Server::Etcd,
            tls: false,
            heard: vec![("a:1".into(), Heard::Like(Server::Http))],
        };
        assert_eq!(
            one.to_string(),
            "this is not etcd: it answered like an HTTP server"
        );
        assert!(one.is_final());
        let two = Findings {
            expects: Server::Etcd,
            tls: false,
            heard: vec![
                ("a:1".into(), Heard::Refused),
                ("b:2".into(), Heard::Silent),
            ],
        };
        assert_eq!(
            two.to_string(),
            "a:1: nothing listens there (connection refused); b:2: it accepted the connection and never answered"
        );
        assert!(!two.is_final());
        // A socket is named: its path is not in the URL as such.
        let sockets = |heard: Heard| Findings {
            expects: Server::Postgres,
            tls: false,
            heard: vec![("/run/pg/.s.PGSQL.5432".into(), heard)],
        };
        assert_eq!(
            sockets(Heard::NoSocket).to_string(),
            "the socket /run/pg/.s.PGSQL.5432 does not exist"
        );
        assert_eq!(
            sockets(Heard::Refused).to_string(),
            "nothing listens at the socket /run/pg/.s.PGSQL.5432 (connection refused)"
        );
        assert!(sockets(Heard::NoSocket).is_final() && sockets(Heard::Refused).is_final());
        // The right server, silent: etcd's likely cause is said; not for
        // PostgreSQL, which has no quorum to lose.
        let silent = |expects| Findings {
            expects,
            tls: false,
            heard: vec![("a:1".into(), Heard::Expected)],
        };
        assert_eq!(
            silent(Server::Etcd).to_string(),
            "it is etcd, but did not answer elect's requests (has the cluster lost its quorum?)"
        );
        assert_eq!(
            silent(Server::Postgres).to_string(),
            "it is PostgreSQL, but did not answer elect's requests"
        );
    }
}
