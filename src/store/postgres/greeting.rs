//! How the probe ([`crate::store::probe`]) tells PostgreSQL (and
//! PgBouncer): it answers an SSLRequest with one byte, 'S' or 'N'.

use crate::store::probe::{Greeting, Opening};

pub const GREETING: Greeting = Greeting {
    name: "PostgreSQL",
    // Length 8, then the SSLRequest code 80877103.
    opening: Opening::Bytes(&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f]),
    knows,
    silent_because: "",
    closed_because: "",
    // It starts TLS inside its own protocol, after a plain request: TLS
    // at the first byte is something in front of it.
    tls_hint: "PostgreSQL starts TLS inside its own protocol (sslmode): give its own port, not a TLS proxy's",
    tls_only: false,
};

/// 'S' or 'N'; or an ErrorResponse ('E', then a length) from a server
/// that refuses the request outright. Only in answer to its SSLRequest.
fn knows(answer: &[u8], to_own: bool) -> bool {
    to_own
        && (matches!(answer, [b'S' | b'N'])
            || (answer.len() >= 5 && answer[0] == b'E' && answer[1] == 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn its_one_byte_answers_its_own_request_only() {
        assert!(knows(b"N", true) && knows(b"S", true));
        assert!(!knows(b"N", false));
        assert!(!knows(b"\x7f\x01 nonsense", true));
    }
}
