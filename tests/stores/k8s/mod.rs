//! The Kubernetes store: a real kube-apiserver on an etcd 3.6 of its own,
//! and the client-go contender beside it ([`server`]; [`apiserver`] tests
//! them, seen through the API), the store as the shared suites see it
//! ([`under_test`]), and the store beside client-go and what only it does
//! ([`tests`]).

mod apiserver;
pub mod server;
mod tests;
pub mod under_test;

pub use server::*;
pub use under_test::KubeStore;
