//! What answers at a store's address when the store's own client gets
//! nowhere: a URL that points at the wrong server (one store's port given
//! to another, a web server, a typo in the port), or a server that hangs.
//! The client libraries only say "transport error", "early eof" or nothing
//! at all; a look of its own, on fresh connections, tells the user what is
//! there.
//!
//! Each kind of server answers a greeting of its own, and closes on or
//! ignores the others': each store's [`Greeting`], in its [`Kind`], says
//! what it is sent and how its answer is told; an HTTP/1 server answers a
//! `GET`; an HTTP/2 server answers the connection preface with a SETTINGS
//! frame; a TLS server answers plain text with an alert. The greeting of
//! the kind the URL names goes first and alone: a store that is what its
//! URL says is spared the others.
//!
//! [`Kind`]: super::Kind

mod greet;
mod look;

use std::fmt;

use crate::clock::Instant;

/// What the probe needs from a kind of store: what to send it on a fresh
/// connection, how to tell its answer, and how to speak of it. Each store
/// defines its own, in its [`Kind`](super::Kind).
#[derive(Debug)]
pub struct Greeting {
    /// Its name in the probe's messages: "this is not {name}".
    pub name: &'static str,
    /// What it is sent first.
    pub opening: Opening,
    /// Whether `answer` is its, and `to_own` whether that answers its own
    /// opening (a store that speaks first says the same to anything).
    pub knows: fn(answer: &[u8], to_own: bool) -> bool,
    /// What most often keeps a server of this kind that takes the
    /// connection from answering, as a question to end the finding with
    /// (with its leading space), or "".
    pub silent_because: &'static str,
    /// The same, for a server of this kind that closes the connection
    /// without a word, or "".
    pub closed_because: &'static str,
    /// How to reach it when TLS answers from the first byte where its URL
    /// speaks plain text.
    pub tls_hint: &'static str,
    /// Whether it speaks only TLS, so that any TLS server passes for it.
    pub tls_only: bool,
}

impl fmt::Display for Greeting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

/// What one greeting sends, on a connection of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opening {
    /// These bytes, in the store's own protocol.
    Bytes(&'static [u8]),
    /// An HTTP/1 `GET` of this path.
    Get(&'static str),
    /// Nothing: the server speaks first.
    Nothing,
    /// HTTP/2's connection preface and an empty SETTINGS frame.
    Preface,
    /// A TLS ClientHello: a server that speaks TLS from its first byte
    /// answers it in TLS (its ServerHello, or an alert), where plain text
    /// may get no answer at all (as from some TLS ports).
    ClientHello,
}

/// A kind of server, as a probe tells them apart.
#[derive(Clone, Copy, Debug)]
pub enum Server {
    /// One of the stores.
    Store(&'static Greeting),
    /// An HTTP/1 server that is no store.
    Http,
    /// An HTTP/2 server (with prior knowledge, as gRPC) that is no store.
    Http2,
    /// A server that speaks TLS first.
    Tls,
}

/// Stores are one by name, as the registry has each once.
impl PartialEq for Server {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Server::Store(a), Server::Store(b)) => a.name == b.name,
            (a, b) => std::mem::discriminant(a) == std::mem::discriminant(b),
        }
    }
}

impl Eq for Server {}

impl fmt::Display for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Server::Store(store) => store.name,
            Server::Http => "an HTTP server",
            Server::Http2 => "an HTTP/2 server",
            Server::Tls => "a TLS server",
        })
    }
}

/// Where a store is reached, over TCP or a Unix socket, and what should
/// answer there.
#[derive(Clone, Debug)]
pub struct Contact {
    /// The kind of store the URL names.
    pub expects: &'static Greeting,
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
    pub expects: &'static Greeting,
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
            Heard::Refused if look::is_socket(address) => {
                format!("nothing listens at the socket {address} (connection refused)")
            }
            Heard::NoSocket => format!("the socket {address} does not exist"),
            Heard::Expected if self.tls => {
                "it takes the connection, but did not answer elect's requests over TLS".into()
            }
            Heard::Expected => format!(
                "it is {expects}, but did not answer elect's requests{}",
                expects.silent_because
            ),
            Heard::Refused => "nothing listens there (connection refused)".into(),
            Heard::Unresolved(why) => format!("cannot resolve the host name ({why})"),
            Heard::Unreachable(why) => format!("cannot connect ({why})"),
            Heard::Silent => "it accepted the connection and never answered".into(),
            Heard::Closed => format!(
                "it closed the connection without a word{}",
                expects.closed_because
            ),
            Heard::Like(Server::Tls) => format!(
                "it speaks TLS from its first byte, which the URL does not: {}",
                expects.tls_hint
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

/// Look at every address of `contact`, side by side, done by `until`.
pub async fn probe(contact: &Contact, until: Instant) -> Findings {
    let stores: Vec<&'static Greeting> = super::kinds().filter_map(|k| k.greeting).collect();
    let stores = &stores;
    let looks = contact.addresses.iter().map(|address| async move {
        let heard = look::look(contact, stores, address, until).await;
        (address.clone(), heard)
    });
    Findings {
        expects: contact.expects,
        tls: contact.tls,
        heard: look::join_all(looks).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store that answers HTTP, and has a likely cause of silence.
    pub(super) static WEB: Greeting = Greeting {
        name: "Web",
        opening: Opening::Get("/version"),
        knows: |answer, _| answer.starts_with(b"HTTP/1.1 200 OK\r\n\r\n{\"web\""),
        silent_because: " (is it asleep?)",
        closed_because: "",
        tls_hint: "use webs://",
        tls_only: false,
    };

    /// A store that answers its own bytes with its own byte.
    pub(super) static ASKED: Greeting = Greeting {
        name: "Asked",
        opening: Opening::Bytes(b"ask"),
        knows: |answer, to_own| to_own && answer == b"A",
        silent_because: "",
        closed_because: "",
        tls_hint: "reach it over TLS",
        tls_only: false,
    };

    /// A store that speaks first.
    pub(super) static FIRST: Greeting = Greeting {
        name: "First",
        opening: Opening::Nothing,
        knows: |answer, _| answer.starts_with(b"hello"),
        silent_because: "",
        closed_because: "",
        tls_hint: "reach it over TLS",
        tls_only: false,
    };

    #[test]
    fn findings_read_as_one_line() {
        let one = Findings {
            expects: &WEB,
            tls: false,
            heard: vec![("a:1".into(), Heard::Like(Server::Http))],
        };
        assert_eq!(
            one.to_string(),
            "this is not Web: it answered like an HTTP server"
        );
        assert!(one.is_final());
        let two = Findings {
            expects: &WEB,
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
            expects: &ASKED,
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
        // The right server, silent: a store's likely cause is said, where
        // it has one.
        let silent = |expects| Findings {
            expects,
            tls: false,
            heard: vec![("a:1".into(), Heard::Expected)],
        };
        assert_eq!(
            silent(&WEB).to_string(),
            "it is Web, but did not answer elect's requests (is it asleep?)"
        );
        assert_eq!(
            silent(&ASKED).to_string(),
            "it is Asked, but did not answer elect's requests"
        );
        let tls = Findings {
            expects: &WEB,
            tls: false,
            heard: vec![("a:1".into(), Heard::Like(Server::Tls))],
        };
        assert_eq!(
            tls.to_string(),
            "it speaks TLS from its first byte, which the URL does not: use webs://"
        );
    }
}
