//! The MySQL store, on a real MariaDB ([`server`]), and the store as the
//! shared suites see it ([`under_test`]).

pub mod server;
pub mod under_test;

pub use server::*;
