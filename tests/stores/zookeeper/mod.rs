//! The ZooKeeper store: a real ZooKeeper, one server or an ensemble
//! ([`server`]), Apache Curator's lock beside it ([`curator`]), the store
//! as the shared suites see it ([`under_test`]), and what only it does
//! ([`tests`]).

pub mod curator;
pub mod server;
mod tests;
pub mod under_test;

pub use curator::Curator;
pub use server::*;
pub use under_test::Ensemble;
