//! The conformance suites, each scenario written once and run against
//! every store: what every store must do ([`behaviour`]) and every fault on
//! every store ([`every_fault`]). A store takes part through
//! [`StoreUnderTest`] ([`store`]); each suite's `stores!`, at its end, names
//! the stores it runs on.

mod behaviour;
mod every_fault;
pub mod store;

pub use store::*;
