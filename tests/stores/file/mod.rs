//! The `file:` store: a directory (a [`crate::support::TempDir`]), and the
//! store as the shared suites see it ([`under_test`]).

pub mod under_test;

pub use under_test::FileStore;
