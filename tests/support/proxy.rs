//! A TCP proxy that can cut the network between a client and etcd the two
//! ways a real partition does: silently (packets vanish, sockets stay open)
//! or loudly (connections reset); or make it slow, as a long link is; or,
//! with a [`Cutter`] that reads what passes, cut one connection at a chosen
//! message.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::channel;
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Forward,
    /// Stop forwarding; keep every socket open.
    Blackhole,
    /// Reset every connection, and every new one.
    Reset,
    /// Forward every chunk this long after it was read, in each direction:
    /// a link with this one-way latency (and ample bandwidth).
    Delay(Duration),
}

/// Looks at every chunk read, before it is forwarded: `(toward the
/// target, connection number, bytes)`; true cuts that connection (both
/// sockets reset) instead of forwarding the chunk.
pub type Cutter = Box<dyn Fn(bool, u64, &[u8]) -> bool + Send + Sync>;

struct Shared {
    mode: Mutex<Mode>,
    /// Where new connections go.
    target: Mutex<String>,
    cutter: Option<Cutter>,
    /// Connections cut by the cutter.
    cut: AtomicU64,
    changed: Condvar,
    connections: Mutex<Vec<TcpStream>>,
    /// Connections are numbered as accepted; those below this are frozen.
    accepted: AtomicU64,
    frozen_below: AtomicU64,
}

pub struct Proxy {
    pub port: u16,
    shared: Arc<Shared>,
}

impl Proxy {
    pub fn start(target: &str) -> Proxy {
        Proxy::start_with(target, None, None)
    }

    /// A proxy that asks `cutter` about every chunk; see [`Proxy::cut`].
    pub fn cutting(target: &str, cutter: Cutter) -> Proxy {
        Proxy::start_with(target, Some(cutter), None)
    }

    /// A proxy that listens on this process's loopback and connects to
    /// `target` from inside the network namespace `netns` (an open
    /// `/run/netns/NAME`): see `support/netns.rs`.
    pub fn connecting_from(target: &str, netns: std::fs::File) -> Proxy {
        Proxy::start_with(target, None, Some(netns))
    }

    /// How many connections the cutter cut.
    pub fn cut(&self) -> u64 {
        self.shared.cut.load(Ordering::SeqCst)
    }

    fn start_with(target: &str, cutter: Option<Cutter>, netns: Option<std::fs::File>) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared {
            mode: Mutex::new(Mode::Forward),
            target: Mutex::new(target.to_string()),
            cutter,
            cut: AtomicU64::new(0),
            changed: Condvar::new(),
            connections: Mutex::new(Vec::new()),
            accepted: AtomicU64::new(0),
            frozen_below: AtomicU64::new(0),
        });
        let s = shared.clone();
        thread::spawn(move || {
            // A namespace is a thread's own: the sockets this thread
            // connects live in it, the listener stays where it was bound.
            if let Some(netns) = netns {
                use std::os::fd::AsRawFd;
                // SAFETY: setns(2) on an open namespace descriptor; it
                // changes this thread's network namespace only.
                let r = unsafe { libc::setns(netns.as_raw_fd(), libc::CLONE_NEWNET) };
                assert_eq!(r, 0, "setns: {}", std::io::Error::last_os_error());
            }
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                if *s.mode.lock().unwrap() == Mode::Reset {
                    reset(&client);
                    continue;
                }
                let target = s.target.lock().unwrap().clone();
                let Ok(server) = TcpStream::connect(&target) else {
                    reset(&client);
                    continue;
                };
                {
                    let mut conns = s.connections.lock().unwrap();
                    conns.push(client.try_clone().unwrap());
                    conns.push(server.try_clone().unwrap());
                }
                let id = s.accepted.fetch_add(1, Ordering::SeqCst);
                pump(
                    s.clone(),
                    id,
                    true,
                    client.try_clone().unwrap(),
                    server.try_clone().unwrap(),
                );
                pump(s.clone(), id, false, server, client);
            }
        });
        Proxy { port, shared }
    }

    pub fn url(&self) -> String {
        format!("etcd://127.0.0.1:{}", self.port)
    }

    /// Hold every byte of the connections open now, for ever, as if their
    /// packets vanished (a NAT or firewall that forgot them); connections
    /// opened later are forwarded as the mode says.
    pub fn freeze_open_connections(&self) {
        let open = self.shared.accepted.load(Ordering::SeqCst);
        self.shared.frozen_below.store(open, Ordering::SeqCst);
    }

    /// Send new connections to `target` from now on, and reset those
    /// open: an address moved to another server, as a virtual IP is in a
    /// failover.
    pub fn retarget(&self, target: &str) {
        *self.shared.target.lock().unwrap() = target.to_string();
        for c in self.shared.connections.lock().unwrap().drain(..) {
            reset(&c);
        }
    }

    pub fn set(&self, mode: Mode) {
        *self.shared.mode.lock().unwrap() = mode;
        self.shared.changed.notify_all();
        if mode == Mode::Reset {
            for c in self.shared.connections.lock().unwrap().drain(..) {
                reset(&c);
            }
        }
    }
}

/// Make the socket close with RST rather than FIN, and wake its reader so
/// that the pump drops its descriptors: the last close sends the RST.
fn reset(stream: &TcpStream) {
    use std::os::fd::AsRawFd;
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt with a valid linger struct on an open socket.
    unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
    let _ = stream.shutdown(Shutdown::Read);
}

/// Copy `from` to `to`: one thread reads, another writes each chunk at its
/// release time, so that a delay holds back no later chunk beyond its own.
fn pump(shared: Arc<Shared>, id: u64, upstream: bool, mut from: TcpStream, mut to: TcpStream) {
    let (chunks, queued) = channel::<(Instant, Vec<u8>)>();
    let peer = to.try_clone().unwrap();
    let writer = shared.clone();
    thread::spawn(move || {
        for (at, bytes) in queued {
            thread::sleep(at.saturating_duration_since(Instant::now()));
            if *writer.mode.lock().unwrap() == Mode::Reset || to.write_all(&bytes).is_err() {
                return;
            }
        }
        // The reader is done, and every chunk before its end is delivered.
        if *writer.mode.lock().unwrap() != Mode::Reset {
            let _ = to.shutdown(Shutdown::Write);
        }
    });
    thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if let Some(cutter) = &shared.cutter
                && cutter(upstream, id, &buf[..n])
            {
                shared.cut.fetch_add(1, Ordering::SeqCst);
                reset(&from);
                reset(&peer);
                break;
            }
            // Hold the bytes while blackholed, as a partition holds packets.
            let frozen = || id < shared.frozen_below.load(Ordering::SeqCst);
            let mut mode = shared.mode.lock().unwrap();
            while *mode == Mode::Blackhole || (frozen() && *mode != Mode::Reset) {
                mode = shared.changed.wait(mode).unwrap();
            }
            let delay = match *mode {
                Mode::Reset => break,
                Mode::Delay(d) => d,
                Mode::Forward | Mode::Blackhole => Duration::ZERO,
            };
            drop(mode);
            if chunks
                .send((Instant::now() + delay, buf[..n].to_vec()))
                .is_err()
            {
                break;
            }
        }
    });
}
