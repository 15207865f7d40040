//! The MySQL store, on a real MariaDB ([`server`]), the store as the
//! shared suites see it ([`under_test`]), and what only it does
//! ([`tests`]).

pub mod server;
mod tests;
pub mod under_test;

pub use server::*;
