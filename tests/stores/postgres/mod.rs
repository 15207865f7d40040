//! The PostgreSQL store: a real PostgreSQL, and a PgBouncer in front of it
//! ([`server`]), the store as the shared suites see it ([`under_test`]),
//! and what only it does ([`tests`]).

pub mod server;
mod tests;
pub mod under_test;

pub use server::*;
pub use under_test::Pooled;
