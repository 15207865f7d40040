//! Addresses where no store answers, made on loopback by the test itself:
//! a listener that accepts and never says a word, one that closes each
//! connection at once, one that sends bytes of no protocol, a tiny HTTP/1
//! server, a port nothing listens on, and a host name that cannot resolve.
//! What a store client meets when a URL is wrong or a server hangs.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{self, JoinHandle};
use std::time::Duration;

/// A host name that never resolves: `.invalid` is reserved for that (RFC 6761).
pub const UNRESOLVED: &str = "no-such-store.invalid";

/// What a [`Listener`] does with each connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Manner {
    /// Accepts and keeps the connection open without a word.
    Silent,
    /// Accepts and closes at once.
    Closing,
    /// Sends bytes of no protocol at once, then reads and ignores.
    Garbage,
    /// Reads a request head and answers `400 Bad Request`, as HTTP/1 servers
    /// answer what they cannot parse (`GET` gets `404 Not Found`).
    Http,
}

/// A loopback listener that answers every connection in one [`Manner`],
/// until dropped.
pub struct Listener {
    port: u16,
    stop: Arc<AtomicBool>,
    accepting: Option<JoinHandle<()>>,
}

impl Listener {
    pub fn start(manner: Manner) -> Listener {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let accepting = thread::spawn(move || {
            // Kept open until the listener is dropped.
            let mut held = Vec::new();
            while !stopping.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        stream.set_nonblocking(false).unwrap();
                        match manner {
                            Manner::Silent => held.push(stream),
                            Manner::Closing => drop(stream),
                            Manner::Garbage => {
                                thread::spawn(move || garbage(stream));
                            }
                            Manner::Http => {
                                thread::spawn(move || http(stream));
                            }
                        }
                    }
                    Err(_) => thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Listener {
            port,
            stop,
            accepting: Some(accepting),
        }
    }

    /// `127.0.0.1:PORT`.
    pub fn host_port(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(accepting) = self.accepting.take() {
            let _ = accepting.join();
        }
    }
}

fn garbage(mut stream: TcpStream) {
    let _ = stream.write_all(b"\x7f\x01\xfe\x00 &#% no protocol at all %#& \x00\x13\x37\r\n");
    let mut sink = [0u8; 4096];
    let _ = stream.set_read_timeout(Some(Duration::from_secs(60)));
    while matches!(stream.read(&mut sink), Ok(n) if n > 0) {}
}

fn http(mut stream: TcpStream) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(60)));
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 65536 {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
    }
    let reply = match head.starts_with(b"GET ") {
        true => {
            "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 10\r\n\
                 Connection: close\r\n\r\nnot found\n"
        }
        false => {
            "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: 12\r\n\
                  Connection: close\r\n\r\nbad request\n"
        }
    };
    let _ = stream.write_all(reply.as_bytes());
}

/// `127.0.0.1:PORT` where nothing listens: bound, then let go.
pub fn refused() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    format!("127.0.0.1:{}", listener.local_addr().unwrap().port())
}
