//! The PostgreSQL store: a real PostgreSQL, and a PgBouncer in front of it
//! ([`server`]), and the store as the shared suites see it
//! ([`under_test`]).

pub mod server;
pub mod under_test;

pub use server::*;
pub use under_test::Pooled;
