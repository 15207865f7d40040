//! `--listen`: the HTTP endpoint of `elect run`, for probes and scrapers.
//!
//! - `/readyz`: 200 while this elect holds the lock (any of its shards),
//!   503 otherwise: a readiness probe that sends traffic to the holder only;
//! - `/livez`: 200 unless the renewals failed past the lease's deadline or
//!   the renewal loop is wedged (client-go's `HealthzAdaptor` idea): a
//!   liveness probe that restarts an elect stuck without its lease;
//! - `/metrics`: Prometheus's text format ([`super::standing::METRICS`]).
//!
//! A small HTTP/1.1 responder written here, not hyper's server (which is
//! in the build, through tonic): three fixed GET routes, one response a
//! connection, no bodies to read, so the whole protocol elect needs is a
//! request line, a bounded head and a response with a length. With hyper
//! the bounds a probe port needs would still be written around it (its
//! header-read timeout takes a timer to be wired in, and it bounds neither
//! a whole exchange nor the connections open); here they are a few
//! lines: a head of at most [`MAX_HEAD`] bytes, [`WITHIN`] for a whole
//! exchange, at most [`MAX_OPEN`] connections at once.
//!
//! It runs on elect's one thread beside the run, and never waits on
//! anything but its sockets: a request is answered from [`Standing`] in
//! microseconds, between the run's own steps, so the renewal loop is never
//! held up and the way from the lock to the command does not pass here.
//! The listener is bound before the store is reached, after the guard is
//! forked (so that the guard does not hold the port), and is closed on
//! exec: the command never has it.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::standing::Standing;
use crate::exit::{Code, Failure};
use crate::log;

/// The longest request head read; a longer one is answered 431.
pub const MAX_HEAD: usize = 8192;
/// How long one connection may take, from accept to the response's end.
pub const WITHIN: Duration = Duration::from_secs(2);
/// How many connections are served at once; more wait to be accepted.
pub const MAX_OPEN: usize = 16;

/// The endpoint's socket, bound.
pub struct Endpoint {
    listener: std::net::TcpListener,
}

impl Endpoint {
    /// Bind `addr`: a port in use, or an address not this host's, is a
    /// configuration error, before anything touches the store.
    pub fn bind(addr: SocketAddr) -> Result<Endpoint, Failure> {
        let fail = |e: std::io::Error| {
            crate::descriptors::or(&e, || {
                Failure::new(
                    Code::Config,
                    format!("cannot listen on {addr} (--listen): {e}"),
                )
            })
        };
        // std's listener is made close-on-exec: the command never has it.
        let listener = std::net::TcpListener::bind(addr).map_err(fail)?;
        listener.set_nonblocking(true).map_err(fail)?;
        Ok(Endpoint { listener })
    }

    /// Answer requests about `standing`, for as long as the run lasts.
    pub async fn serve(self, standing: &Standing) -> Infallible {
        let listener = match TcpListener::from_std(self.listener) {
            Ok(listener) => listener,
            Err(e) => {
                log::warn(format_args!("the --listen endpoint cannot serve: {e}"));
                return std::future::pending().await;
            }
        };
        if let Ok(addr) = listener.local_addr() {
            log::verbose(format_args!(
                "serving /readyz, /livez and /metrics on {addr}"
            ));
        }
        let mut open: Vec<Pin<Box<dyn Future<Output = ()> + '_>>> = Vec::new();
        loop {
            let accepted = std::future::poll_fn(|cx| {
                open.retain_mut(|c| c.as_mut().poll(cx).is_pending());
                if open.len() < MAX_OPEN
                    && let Poll::Ready(accepted) = listener.poll_accept(cx)
                {
                    return Poll::Ready(accepted);
                }
                Poll::Pending
            })
            .await;
            match accepted {
                Ok((stream, _)) => open.push(Box::pin(answer(stream, standing))),
                // Out of descriptors, most likely: let some close.
                Err(e) => {
                    log::verbose(format_args!("--listen: cannot accept: {e}"));
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
}

/// One connection: read the head, answer, close; all within [`WITHIN`].
async fn answer(mut stream: TcpStream, standing: &Standing) {
    let exchange = async {
        let mut head = [0u8; MAX_HEAD];
        let mut len = 0;
        let response = loop {
            if len == head.len() {
                break reply(431, "text/plain", "request head too large\n".into(), true);
            }
            match stream.read(&mut head[len..]).await {
                Ok(0) | Err(_) => return,
                Ok(n) => len += n,
            }
            if let Some(end) = end_of_head(&head[..len]) {
                break respond(&head[..end], standing);
            }
        };
        let _ = stream.write_all(&response).await;
        let _ = stream.shutdown().await;
    };
    let _ = tokio::time::timeout(WITHIN, exchange).await;
}

/// Where the head ends (its blank line), if it has.
fn end_of_head(bytes: &[u8]) -> Option<usize> {
    let crlf = bytes.windows(4).position(|w| w == b"\r\n\r\n");
    let lf = bytes.windows(2).position(|w| w == b"\n\n");
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The response to a request whose head is `head`.
fn respond(head: &[u8], standing: &Standing) -> Vec<u8> {
    let first = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = first.strip_suffix(b"\r").unwrap_or(first);
    let Some((method, path)) = request_line(line) else {
        return reply(400, "text/plain", "bad request line\n".into(), true);
    };
    let body_too = method == "GET";
    if !["/readyz", "/livez", "/metrics"].contains(&path) {
        return reply(
            404,
            "text/plain",
            "not found: try /readyz, /livez or /metrics\n".into(),
            body_too,
        );
    }
    if method != "GET" && method != "HEAD" {
        return reply(405, "text/plain", "only GET and HEAD\n".into(), true);
    }
    match path {
        "/readyz" => match standing.holding() {
            true => reply(
                200,
                "text/plain",
                format!("{}\n", standing.status_line()),
                body_too,
            ),
            false => reply(
                503,
                "text/plain",
                format!("not the holder: {}\n", standing.status_line()),
                body_too,
            ),
        },
        "/livez" => match standing.unwell() {
            None => reply(200, "text/plain", "ok\n".into(), body_too),
            Some(why) => reply(503, "text/plain", format!("{why}\n"), body_too),
        },
        _ => reply(
            200,
            "text/plain; version=0.0.4; charset=utf-8",
            standing.metrics(),
            body_too,
        ),
    }
}

/// `METHOD /path[?query] HTTP/1.x`: the method and the path.
fn request_line(line: &[u8]) -> Option<(&str, &str)> {
    let line = std::str::from_utf8(line).ok()?;
    let mut parts = line.split(' ');
    let (method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some()
        || method.is_empty()
        || !method.bytes().all(|b| b.is_ascii_uppercase())
        || !target.starts_with('/')
        || !matches!(version, "HTTP/1.0" | "HTTP/1.1")
    {
        return None;
    }
    let path = target.split_once('?').map_or(target, |(path, _)| path);
    Some((method, path))
}

fn reply(code: u16, kind: &str, body: String, with_body: bool) -> Vec<u8> {
    let reason = match code {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        _ => "Service Unavailable",
    };
    let mut out = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n\
         Cache-Control: no-store\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if with_body {
        out.extend_from_slice(body.as_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_routed_and_bad_ones_refused() {
        let s = Standing::new("billing", None);
        let status = |head: &str| {
            let out = respond(head.as_bytes(), &s);
            String::from_utf8(out).unwrap()[9..12].to_string()
        };
        assert_eq!(status("GET /readyz HTTP/1.1\r\nHost: x"), "503");
        assert_eq!(status("GET /livez HTTP/1.1"), "200");
        assert_eq!(status("GET /metrics?x=1 HTTP/1.0"), "200");
        assert_eq!(status("HEAD /metrics HTTP/1.1"), "200");
        assert_eq!(status("GET / HTTP/1.1"), "404");
        assert_eq!(status("GET /readyz/ HTTP/1.1"), "404");
        assert_eq!(status("POST /readyz HTTP/1.1"), "405");
        assert_eq!(status("GET /readyz"), "400");
        assert_eq!(status("GET  /readyz HTTP/1.1"), "400");
        assert_eq!(status("GET readyz HTTP/1.1"), "400");
        assert_eq!(status("\u{1}\u{2}"), "400");
        s.observe(crate::run::standing::Step::Acquired {
            shard: None,
            token: crate::store::Token::new(3),
        });
        assert_eq!(status("GET /readyz HTTP/1.1"), "200");
        let head = String::from_utf8(respond(b"HEAD /readyz HTTP/1.1", &s)).unwrap();
        assert!(head.ends_with("\r\n\r\n"), "{head}");
    }

    #[test]
    fn the_head_ends_at_its_blank_line() {
        assert_eq!(end_of_head(b"GET / HTTP/1.1\r\n\r\nrest"), Some(14));
        assert_eq!(end_of_head(b"GET / HTTP/1.1\n\n"), Some(14));
        assert_eq!(end_of_head(b"GET / HTTP/1.1\r\nHost: x\r\n"), None);
    }
}
