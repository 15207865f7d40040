//! elect as a process, whatever the store: what its guard does at a
//! command's end, local overlaps, handovers, long-running and interactive
//! sessions, stores that are not there, low open-file limits, what
//! `status`, `list`, `check` and `break` show, usage errors, the docs'
//! examples and the Debian package. Most run on etcd or `file:`, as any
//! store would do; what every store must do is in [`crate::suites`].

mod docs;
mod fail_fast;
mod guard;
mod handover;
mod inspect;
mod open_files;
mod overlap;
mod package;
mod session;
mod usage;
