//! What elect says to its guard over their socket: the handover of the
//! lock (the deadline with the descriptors that later deadlines come by,
//! the order that ends the session, the holder's variables, then the token
//! with the descriptors that hold the lock), and after it the orders that
//! the guard's machine takes as events.

use std::io::Read;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::Signal;
use nix::sys::socket::MsgFlags;
use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, recvmsg};

use super::machine::Event;
use crate::clock::Instant;
use crate::supervisor::deadline::Told;
use crate::supervisor::protocol::{MAX_HELD, Message, SIZE};

/// The lock, as elect hands it over.
pub(super) struct HandedOver {
    /// As of the handover; renewals move it on in the guard's
    /// [`State`](super::machine::State).
    pub(super) deadline: Instant,
    /// How renewals move it on, without a message.
    pub(super) told: Told,
    pub(super) token: u64,
    /// Descriptors that hold the lock (a file store's lock file), kept open
    /// until the guard exits, after the command's group is dead; received
    /// close-on-exec, and passed to the command's process on purpose (see
    /// [`Launch::go`](crate::supervisor::launch::Launch::go)).
    pub(super) held: Vec<OwnedFd>,
    /// How to end the session from here if elect dies while the command runs.
    pub(super) release_order: Option<Vec<u8>>,
    /// Variables that name the holder, for the command's environment, as
    /// elect sent them (`NAME=VALUE\0`…): passed on to the command's process.
    pub(super) env: Vec<u8>,
}

/// Read elect's orders until it says the lock is ours: the deadline, then
/// the token with the descriptors that hold the lock. `None` if elect
/// closes the socket first.
pub(super) fn wait_for_the_lock(socket: &UnixStream) -> Option<HandedOver> {
    let mut deadline = None;
    let mut told = None;
    let mut release_order = None;
    let mut env = Vec::new();
    let bytes = |len: u64| {
        let mut bytes = vec![0; usize::try_from(len).ok()?];
        (&*socket).read_exact(&mut bytes).ok()?;
        Some(bytes)
    };
    loop {
        let (record, held) = receive_with_fds(socket)?;
        match Message::decode(&record)? {
            Message::Deadline(ns) => {
                let at = Instant::from_nanos(ns);
                deadline = Some(at);
                told = Told::new(held, at);
            }
            Message::Order(len) => release_order = Some(bytes(len)?),
            Message::Env(len) => env = bytes(len)?,
            Message::Token(token) => {
                return Some(HandedOver {
                    deadline: deadline?,
                    told: told?,
                    token,
                    held,
                    release_order,
                    env,
                });
            }
            _ => {}
        }
    }
}

/// Take in what elect has sent since the token, without waiting: the
/// events it makes, and [`Event::ElectGone`] last if elect is gone. A
/// partial message is left in `inbox` for the watch to complete.
pub(super) fn read_latest_orders(socket: &UnixStream, inbox: &mut Vec<u8>) -> Vec<Event> {
    let mut gone = false;
    loop {
        let mut buf = [0u8; 256];
        match nix::sys::socket::recv(socket.as_raw_fd(), &mut buf, MsgFlags::MSG_DONTWAIT) {
            Err(Errno::EAGAIN) => break,
            Err(Errno::EINTR) => continue,
            // elect is gone: nobody would keep the lease.
            Ok(0) | Err(_) => {
                gone = true;
                break;
            }
            Ok(n) => inbox.extend_from_slice(&buf[..n]),
        }
    }
    let mut events = orders_in(inbox);
    if gone {
        events.push(Event::ElectGone);
    }
    events
}

/// The events that the whole messages at the start of `inbox` make, taken
/// out of it; a partial one stays.
pub(super) fn orders_in(inbox: &mut Vec<u8>) -> Vec<Event> {
    let mut events = Vec::new();
    while inbox.len() >= SIZE {
        let mut record = [0u8; SIZE];
        record.copy_from_slice(&inbox[..SIZE]);
        inbox.drain(..SIZE);
        events.extend(match Message::decode(&record) {
            Some(Message::Deadline(ns)) => Some(Event::Renewed(Instant::from_nanos(ns))),
            Some(Message::Stop(grace)) => Some(Event::Stop(Duration::from_nanos(grace))),
            Some(Message::Signal(n)) => Signal::try_from(n).ok().map(Event::Forward),
            Some(Message::Suspend) => Some(Event::Suspend),
            Some(Message::Resume) => Some(Event::Resume),
            // Nothing else comes once the lock is ours.
            _ => None,
        });
    }
    events
}

/// One message and any descriptors sent with it (SCM_RIGHTS), received as
/// the OwnedFds they are.
fn receive_with_fds(socket: &UnixStream) -> Option<([u8; SIZE], Vec<OwnedFd>)> {
    let mut record = [0u8; SIZE];
    let mut filled = 0;
    let mut held = Vec::new();
    while filled < SIZE {
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_HELD))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let mut iov = [std::io::IoSliceMut::new(&mut record[filled..])];
        let message = match recvmsg(socket, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC) {
            Ok(m) => m,
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return None,
        };
        for cmsg in control.drain() {
            if let RecvAncillaryMessage::ScmRights(fds) = cmsg {
                held.extend(fds);
            }
        }
        // Descriptors cut off for want of room: the handover is not whole.
        if message.flags.contains(ReturnFlags::CTRUNC) {
            return None;
        }
        match message.bytes {
            0 => return None,
            n => filled += n,
        }
    }
    Some((record, held))
}
