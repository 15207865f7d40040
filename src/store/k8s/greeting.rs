//! How the probe ([`crate::store::probe`]) takes a Kubernetes API server:
//! it speaks only TLS, and answers plain HTTP as Go's TLS servers do, so
//! any such server passes for one.

use crate::store::probe::{Greeting, Opening};

pub const GREETING: Greeting = Greeting {
    name: "Kubernetes",
    opening: Opening::Get("/version"),
    // Told only as a TLS server.
    knows: |_, _| false,
    silent_because: "",
    closed_because: "",
    tls_hint: "reach it over TLS",
    tls_only: true,
};
