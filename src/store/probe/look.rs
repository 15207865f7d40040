//! One address looked at: which greetings go, in what order, and the
//! verdict their replies come to.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use super::greet::{ANSWER_WITHIN, Reply, greet};
use super::{Contact, Greeting, Heard, Opening, Server};
use crate::clock::{Instant, sleep_until};

/// How long the expected kind's greeting goes alone: a healthy store
/// answers by then, and is spared the others.
const ALONE_FOR: Duration = Duration::from_millis(300);

/// A greeting on its way, and what it got back.
type Greeted<'a> = Pin<Box<dyn Future<Output = (Opening, Reply)> + Send + 'a>>;

/// Every opening a look sends, each on a connection of its own: each
/// store's, once (none for a store that speaks first), an HTTP/1 request
/// if no store's is one, HTTP/2's preface and a TLS ClientHello.
pub(super) fn openings(stores: &[&Greeting]) -> Vec<Opening> {
    let mut all: Vec<Opening> = Vec::new();
    for store in stores {
        if store.opening != Opening::Nothing && !all.contains(&store.opening) {
            all.push(store.opening);
        }
    }
    if !all.iter().any(|o| matches!(o, Opening::Get(_))) {
        all.push(Opening::Get("/"));
    }
    all.extend([Opening::Preface, Opening::ClientHello]);
    all
}

/// Look at one address: the expected kind's greeting first; unless that
/// kind answers at once, every other greeting beside it. Done as soon as
/// an answer settles it.
pub(super) async fn look(
    contact: &Contact,
    stores: &[&'static Greeting],
    address: &str,
    until: Instant,
) -> Heard {
    if is_socket(address) {
        return look_at_socket(address, until).await;
    }
    let first = contact.expects.opening;
    let send = |o: Opening| -> Greeted<'_> {
        Box::pin(async move { (o, greet(address, o, until).await) })
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
            Some((opening, reply)) => {
                if opening == first {
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
                replies.push((opening, reply));
                if let Some(heard) = settled(contact, stores, &replies) {
                    return heard;
                }
            }
            None if !others_sent => {}
            // Every greeting is answered.
            None => return judge(contact, stores, &replies),
        }
        if !others_sent {
            others_sent = true;
            pending.extend(
                openings(stores)
                    .into_iter()
                    .filter(|o| *o != first)
                    .map(|o| Some(send(o))),
            );
        }
    }
}

/// Whether an address is a Unix socket's path.
pub(super) fn is_socket(address: &str) -> bool {
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
async fn next_done(pending: &mut [Option<Greeted<'_>>]) -> Option<(Opening, Reply)> {
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
/// or TLS server could yet turn out to be a store that speaks HTTP).
fn settled(
    contact: &Contact,
    stores: &[&'static Greeting],
    replies: &[(Opening, Reply)],
) -> Option<Heard> {
    // TLS from the first byte, where the URL speaks plain text and the
    // kind it names did not answer its own greeting meanwhile: no plain
    // request will ever get through.
    let speaks_tls = replies
        .iter()
        .any(|(o, r)| *o == Opening::ClientHello && recognise(stores, *o, r) == Some(Server::Tls));
    if speaks_tls && !expected(contact, Server::Tls) {
        return Some(Heard::Like(Server::Tls));
    }
    let known = replies.iter().filter_map(|(o, r)| recognise(stores, *o, r));
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
    server == Server::Store(contact.expects)
        || ((contact.tls || contact.expects.tls_only) && server == Server::Tls)
}

/// The verdict from every greeting's reply.
pub(super) fn judge(
    contact: &Contact,
    stores: &[&'static Greeting],
    replies: &[(Opening, Reply)],
) -> Heard {
    let known: Vec<Server> = replies
        .iter()
        .filter_map(|(o, r)| recognise(stores, *o, r))
        .collect();
    if known.iter().any(|s| expected(contact, *s)) {
        return Heard::Expected;
    }
    // The most telling first: a store, in the registry's order, then the
    // generic kinds (a store that speaks HTTP also answers as an HTTP/2
    // server).
    let order =
        stores
            .iter()
            .map(|s| Server::Store(s))
            .chain([Server::Tls, Server::Http2, Server::Http]);
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

/// The kind of server whose answer to `sent` this is, if any.
pub(super) fn recognise(
    stores: &[&'static Greeting],
    sent: Opening,
    reply: &Reply,
) -> Option<Server> {
    let Reply::Bytes(bytes) = reply else {
        return None;
    };
    let text = String::from_utf8_lossy(bytes);
    // A TLS record: an alert (21) or a handshake (22), version 3.x.
    if bytes.len() >= 3 && matches!(bytes[0], 21 | 22) && bytes[1] == 3 {
        return Some(Server::Tls);
    }
    // Go's TLS servers answer plain HTTP so.
    if text.contains("HTTP request to an HTTPS server") {
        return Some(Server::Tls);
    }
    // A store that speaks first is told by its greeting whatever was
    // sent: it is looked for before those that answer their own.
    let (first, others): (Vec<&'static Greeting>, Vec<_>) =
        stores.iter().partition(|s| s.opening == Opening::Nothing);
    let by_store = first
        .into_iter()
        .chain(others)
        .find(|s| (s.knows)(bytes, sent == s.opening));
    if let Some(store) = by_store {
        return Some(Server::Store(store));
    }
    if text.starts_with("HTTP/1.") {
        return Some(Server::Http);
    }
    // A frame header: 3 bytes of length, then the type, SETTINGS (4) or
    // GOAWAY (7), on stream 0.
    if sent == Opening::Preface && bytes.len() >= 9 && matches!(bytes[3], 4 | 7) {
        return Some(Server::Http2);
    }
    None
}

/// Every future's output, in order, polled side by side.
pub(super) async fn join_all<F: std::future::Future>(
    futures: impl IntoIterator<Item = F>,
) -> Vec<F::Output> {
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
    use super::super::tests::{ASKED, FIRST, WEB};
    use super::*;

    const STORES: &[&Greeting] = &[&WEB, &ASKED, &FIRST];

    fn contact(expects: &'static Greeting) -> Contact {
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
        let version = bytes(b"HTTP/1.1 200 OK\r\n\r\n{\"web\":\"1.0\"}");
        let settings = bytes(&[0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 5, 0, 0, 64, 0]);
        let get = WEB.opening;
        let ask = ASKED.opening;
        let is = |s: &'static Greeting| Some(Server::Store(s));
        assert_eq!(recognise(STORES, ask, &bytes(b"A")), is(&ASKED));
        // Its own answer, to another's request, is none.
        assert_eq!(recognise(STORES, get, &bytes(b"A")), None);
        assert_eq!(recognise(STORES, get, &version), is(&WEB));
        assert_eq!(recognise(STORES, get, &http404), Some(Server::Http));
        let preface = Opening::Preface;
        assert_eq!(recognise(STORES, preface, &settings), Some(Server::Http2));
        // One that speaks first, whatever was sent.
        for sent in [Opening::Nothing, ask, get] {
            assert_eq!(recognise(STORES, sent, &bytes(b"hello A")), is(&FIRST));
        }
        let alert = bytes(&[21, 3, 3, 0, 2, 2, 50]);
        assert_eq!(recognise(STORES, get, &alert), Some(Server::Tls));
        let go = bytes(
            b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n",
        );
        assert_eq!(recognise(STORES, get, &go), Some(Server::Tls));
        assert_eq!(recognise(STORES, ask, &bytes(b"\x7f\x01 nonsense")), None);

        // A store that speaks HTTP answers the preface too; its own
        // answer says more.
        let replies = [(get, version), (preface, settings)];
        assert_eq!(judge(&contact(&WEB), STORES, &replies), Heard::Expected);
        assert_eq!(
            judge(&contact(&ASKED), STORES, &replies),
            Heard::Like(Server::Store(&WEB))
        );
    }

    #[test]
    fn what_no_server_answered_is_judged_by_how_it_behaved() {
        let c = contact(&FIRST);
        let all = |r: Reply| -> Vec<(Opening, Reply)> {
            openings(STORES)
                .into_iter()
                .map(|o| (o, r.clone()))
                .collect()
        };
        assert_eq!(judge(&c, STORES, &all(Reply::Nothing)), Heard::Silent);
        assert_eq!(judge(&c, STORES, &all(Reply::Closed)), Heard::Closed);
        let junk = all(bytes(b"\x00\xffjunk"));
        assert_eq!(judge(&c, STORES, &junk), Heard::Garbage);
        assert_eq!(judge(&c, STORES, &all(Reply::Refused)), Heard::Refused);
        // A store closes on every greeting but its own.
        let mut asked = all(Reply::Closed);
        let own = asked.iter_mut().find(|(o, _)| *o == ASKED.opening).unwrap();
        own.1 = bytes(b"A");
        assert_eq!(
            judge(&c, STORES, &asked),
            Heard::Like(Server::Store(&ASKED))
        );
    }

    #[test]
    fn each_opening_goes_once() {
        let twice: &[&Greeting] = &[&WEB, &WEB, &FIRST];
        assert_eq!(
            openings(twice),
            [
                Opening::Get("/version"),
                Opening::Preface,
                Opening::ClientHello
            ]
        );
        assert_eq!(
            openings(&[&ASKED]),
            [
                Opening::Bytes(b"ask"),
                Opening::Get("/"),
                Opening::Preface,
                Opening::ClientHello
            ]
        );
    }
}
