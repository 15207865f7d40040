//! One greeting on a fresh connection, and what came back: the bytes of
//! each opening, connecting (and why not), and a read with a bound.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::Opening;
use crate::clock::{Instant, sleep_until};

impl Opening {
    pub(super) fn bytes(self, host: &str) -> Vec<u8> {
        match self {
            Opening::Bytes(bytes) => bytes.to_vec(),
            Opening::Nothing => Vec::new(),
            Opening::Get(path) => format!(
                "GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: elect\r\nConnection: close\r\n\r\n"
            )
            .into_bytes(),
            Opening::Preface => {
                let mut bytes = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
                // An empty SETTINGS frame: length 0, type 4, no flags, stream 0.
                bytes.extend([0, 0, 0, 4, 0, 0, 0, 0, 0]);
                bytes
            }
            Opening::ClientHello => client_hello(),
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
pub(super) enum Reply {
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
pub(super) const ANSWER_WITHIN: Duration = Duration::from_secs(2);

/// Send `opening` to `address` on a fresh connection and read what comes
/// back, within [`ANSWER_WITHIN`] and by `until`.
pub(super) async fn greet(address: &str, opening: Opening, until: Instant) -> Reply {
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
    if stream.write_all(&opening.bytes(host)).await.is_err() {
        return Reply::Closed;
    }
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    let mut closed = false;
    // Until the server closes or the time is up; once it has begun to
    // answer, a moment more for the rest: a server that answers and then
    // waits (one byte, and then for more) has said what it has to say.
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
            // Accepted, then closed before the connect was seen through
            // (ZooKeeper beyond its maxClientCnxns): closed, not unreachable.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
                ) =>
            {
                return Err(Reply::Closed);
            }
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
