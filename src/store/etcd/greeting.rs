//! How the probe ([`crate::store::probe`]) tells etcd: over HTTP/1, its
//! `/version` names it.

use crate::store::probe::{Greeting, Opening};

pub const GREETING: Greeting = Greeting {
    name: "etcd",
    opening: Opening::Get("/version"),
    knows,
    // A member without a quorum takes requests and answers none that
    // needs the cluster, as each of elect's does.
    silent_because: " (has the cluster lost its quorum?)",
    closed_because: "",
    tls_hint: "use etcds:// (with --cacert)",
    tls_only: false,
};

/// Its version, whatever asked for it: `{"etcdserver":"3.5.0",…}`.
fn knows(answer: &[u8], _to_own: bool) -> bool {
    let text = String::from_utf8_lossy(answer);
    text.starts_with("HTTP/1.") && text.contains("\"etcdserver\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn its_version_names_it_and_another_http_server_does_not() {
        let version =
            b"HTTP/1.1 200 OK\r\n\r\n{\"etcdserver\":\"3.4.23\",\"etcdcluster\":\"3.4.0\"}";
        assert!(knows(version, true));
        assert!(!knows(
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
            true
        ));
    }
}
