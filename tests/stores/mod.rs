//! One folder per store, as `src/store/` has one: each with the real
//! server its tests start (`server.rs`), the store as the shared suites in
//! [`crate::suites`] see it (`under_test.rs`), and the tests of what only
//! that store does.

// As in `support`: a server offers more than the tests call (the bench,
// benches/elect.rs, which shares the servers, calls some of the rest).
#![allow(dead_code)]

pub mod etcd;
pub mod file;
pub mod k8s;
pub mod mysql;
pub mod postgres;
pub mod zookeeper;
