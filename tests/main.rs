//! elect's integration tests, one binary, compiled once, its modules
//! mirroring the code:
//!
//! - [`suites`]: the conformance suites, each scenario written once and
//!   run against every store (`suites::behaviour::STORE::NAME`,
//!   `suites::every_fault::STORE::NAME`), and the trait a store takes part
//!   through;
//! - [`stores`]: a folder per store, as `src/store/` has (etcd, file, k8s,
//!   mysql, postgres, zookeeper): its server, its impl of that trait and
//!   what only it does (`stores::STORE::tests::NAME`);
//! - [`process`]: elect as a process, whatever the store (guard, overlap,
//!   session, inspect, usage, docs, package …);
//! - [`support`]: what every test shares (elect as a process, the fault
//!   proxy, terminals, temporary directories).
//!
//! Run a part with a filter: `cargo test --test elect -- suites::behaviour::`
//! (or `behaviour::zookeeper::`, `every_fault::etcd::`, `stores::postgres::`,
//! `process::overlap::`).

mod process;
mod stores;
mod suites;
mod support;
