//! elect's integration tests, one binary: each file below is a module,
//! and all of them share [`support`] (real stores, elect as a process, the
//! fault proxy), compiled once.
//!
//! Run one file's tests with a filter: `cargo test --test elect -- behaviour::`
//! (or `behaviour::zookeeper::`, `every_fault::etcd::`).

mod stores;
mod suites;
mod support;

mod docs;
mod fail_fast;
mod guard;
mod handover;
mod inspect;
mod open_files;
mod overlap;
mod package;
mod session;
