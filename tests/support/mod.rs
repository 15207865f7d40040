//! Test support shared by every test: elect as a process, a TCP fault
//! proxy, terminals and process watching. No mocks. (The real stores'
//! servers are in `tests/stores/`, one folder each.)
//!
//! - [`tempdir`] (the `file:` store's directory, and any test's files),
//!   [`certs`] for TLS;
//! - processes: [`process`] (elect, its output, signals, deaths, the
//!   process tree), [`pty`] (a process on a terminal), [`inspect`]
//!   (`elect status`/`check`);
//! - [`silent`]: addresses where no store answers (silent, closing,
//!   garbage, HTTP/1, refused, a name that cannot resolve);
//! - [`clock`] (and a faketime clock file for a server's steppable
//!   clock), [`eventually`] (the one poller), and [`tools`] (programs on
//!   the PATH, free ports);
//! - [`endpoint`]: what asks `elect run --listen` (HTTP, a Prometheus
//!   server) and reads its systemd notifications (a datagram socket);
//! - [`limits`]: elect under a low open-file limit;
//! - the fault suites: [`proxy`], [`loss`], [`netns`] (members cut apart
//!   below TCP), [`contender`], [`register`], [`history`], [`ticker`].

// Not every test uses every part of this.
#![allow(dead_code, unused_imports)]

pub mod certs;
pub mod clock;
pub mod contender;
pub mod endpoint;
pub mod eventually;
pub mod history;
pub mod inspect;
pub mod limits;
pub mod loss;
pub mod netns;
pub mod process;
pub mod proxy;
pub mod pty;
pub mod register;
pub mod silent;
pub mod tempdir;
pub mod ticker;
pub mod tools;

pub use clock::{SECOND, ms, now_ns};
pub use eventually::{eventually, until};
pub use process::{
    Death, GUARD, HOLD, Running, SENTINEL, alive, assert_outcome, elect, elect_run, find_child,
    hold, state,
};
pub use pty::Pty;
pub use tempdir::TempDir;
