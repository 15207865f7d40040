//! How the probe ([`crate::store::probe`]) tells ZooKeeper: it answers
//! its four-letter word `srvr` in text, or says it is not allowed.

use crate::store::probe::{Greeting, Opening};

pub const GREETING: Greeting = Greeting {
    name: "ZooKeeper",
    opening: Opening::Bytes(b"srvr"),
    knows,
    silent_because: "",
    // Beyond its maxClientCnxns from one address, it closes each new
    // connection at once; short of a quorum it would answer `srvr`.
    closed_because: " (is it at its maxClientCnxns, the most connections it takes from one address?)",
    tls_hint: "if it is ZooKeeper's secureClientPort, use zks:// (with --cacert)",
    tls_only: false,
};

/// Its answer to `srvr`. A member of an ensemble without a quorum (or
/// still joining one) says that it does not serve: a ZooKeeper that may
/// serve again.
fn knows(answer: &[u8], to_own: bool) -> bool {
    let text = String::from_utf8_lossy(answer);
    to_own
        && (text.starts_with("Zookeeper version")
            || text.contains("is not executed because it is not in the whitelist")
            || text.starts_with("This ZooKeeper instance is not currently serving"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn its_answer_to_srvr_names_it() {
        assert!(knows(
            b"Zookeeper version: 3.8.0-debian\nLatency min/avg/max: 0/0.0/0\n",
            true
        ));
        assert!(knows(
            b"This ZooKeeper instance is not currently serving requests\n",
            true
        ));
        assert!(!knows(b"Zookeeper version: 3.8.0", false));
    }
}
