//! How the probe ([`crate::store::probe`]) tells MySQL or MariaDB: it
//! speaks first, its handshake.

use crate::store::probe::{Greeting, Opening};

pub const GREETING: Greeting = Greeting {
    name: "MySQL or MariaDB",
    opening: Opening::Nothing,
    knows,
    silent_because: "",
    closed_because: "",
    // It starts TLS inside its own protocol, after its greeting: TLS at
    // the first byte is something in front of it.
    tls_hint: "MySQL starts TLS inside its own protocol (ssl-mode): give its own port, not a TLS proxy's",
    tls_only: false,
};

/// Its handshake, whatever was sent: 3 bytes of length, sequence 0, then
/// protocol 10 and a version; or an error packet (0xff) from a server
/// that turns the connection away.
fn knows(answer: &[u8], _to_own: bool) -> bool {
    answer.len() >= 5
        && answer[3] == 0
        && (answer[4] == 10 || answer[4] == 0xff)
        && (1..1024).contains(&u32::from_le_bytes([answer[0], answer[1], answer[2], 0]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn its_handshake_or_refusal_names_it() {
        // MariaDB's greeting, sent before anything is asked: length 90,
        // sequence 0, protocol 10, its version.
        let mut handshake = vec![90, 0, 0, 0, 10];
        handshake.extend_from_slice(b"5.5.5-10.11.19-MariaDB-0+deb12u1\0");
        assert!(knows(&handshake, false));
        // Turned away: an error packet (0xff, code 1040: too many connections).
        assert!(knows(&[23, 0, 0, 0, 0xff, 0x10, 0x04, b'T'], true));
        assert!(!knows(b"HTTP/1.1 400 Bad Request\r\n", false));
    }
}
