//! etcd: a real etcd, one member or a cluster ([`server`], and [`http`] for
//! its metrics and a revoke through its gateway), and the store as the
//! shared suites see it ([`under_test`]).

pub mod http;
pub mod server;
pub mod under_test;

pub use server::{Etcd, EtcdOptions};
pub use under_test::EtcdCluster;
