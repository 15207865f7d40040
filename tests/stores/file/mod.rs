//! The `file:` store: a directory (a [`crate::support::TempDir`]), the
//! store as the shared suites see it ([`under_test`]), and what only it
//! does ([`tests`]).

mod tests;
pub mod under_test;

pub use under_test::FileStore;
