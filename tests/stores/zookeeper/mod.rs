//! The ZooKeeper store: a real ZooKeeper, one server or an ensemble
//! ([`server`]), Apache Curator's lock beside it ([`curator`]), and the
//! store as the shared suites see it ([`under_test`]).

pub mod curator;
pub mod server;
pub mod under_test;

pub use curator::Curator;
pub use server::*;
pub use under_test::Ensemble;
