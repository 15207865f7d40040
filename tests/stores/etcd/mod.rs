//! etcd: a real etcd, one member or a cluster ([`server`], and [`http`] for
//! its metrics and a revoke through its gateway), the store as the shared
//! suites see it ([`under_test`]), and what only etcd does: [`tests`]
//! (beside `etcdctl lock`, partitions, unreachable endpoints, a lease that
//! expires by time), [`security`] (TLS, users and roles), and the deeper
//! fault tests, which `scripts/test` runs after the rest and by
//! themselves: [`faults`] (a [`nemesis`] against one and three members,
//! with a fenced register), [`slow_link`] and [`gc_pause`].

mod faults;
mod gc_pause;
pub mod http;
mod nemesis;
mod security;
pub mod server;
mod slow_link;
mod tests;
pub mod under_test;

pub use server::{Etcd, EtcdOptions};
pub use under_test::EtcdCluster;
