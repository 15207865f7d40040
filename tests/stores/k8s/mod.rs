//! The Kubernetes store: a real kube-apiserver on an etcd 3.6 of its own,
//! and the client-go contender beside it ([`server`]), and the store as the
//! shared suites see it ([`under_test`]).

pub mod server;
pub mod under_test;

pub use server::*;
pub use under_test::KubeStore;
