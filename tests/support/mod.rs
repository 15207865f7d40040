//! Test support: real stores started per test, elect as a process, a TCP
//! fault proxy, terminals and process watching. No mocks.
//!
//! - stores: [`etcd`] (one member or a cluster; [`etcd_http`] for its metrics), [`postgres`] (a server,
//!   and a PgBouncer in front of it), [`zookeeper`] (one server or an
//!   ensemble), [`kube`] (kube-apiserver on an etcd 3.6 of its own), [`tempdir`] (the `file:` store's directory, and any test's
//!   files), [`certs`] for TLS;
//! - processes: [`process`] (elect, its output, deaths, the process tree),
//!   [`pty`] (a process on a terminal), [`inspect`] (`elect status`/`check`),
//!   [`curator`] (Apache Curator's lock, a Java program on ZooKeeper);
//! - [`stores`]: every store as the shared suites see it; [`silent`]:
//!   addresses where no store answers (silent, closing, garbage, HTTP/1,
//!   refused, a name that cannot resolve);
//! - [`clock`], [`eventually`] (the one poller), and [`tools`] (programs on
//!   the PATH, free ports);
//! - [`endpoint`]: what asks `elect run --listen` (HTTP, a Prometheus
//!   server) and reads its systemd notifications (a datagram socket);
//! - the fault suite: [`proxy`], [`loss`], [`netns`] (members cut apart below TCP), [`contender`], [`register`],
//!   [`history`], [`nemesis`], [`ticker`].

// Each test binary uses a part of this.
#![allow(dead_code, unused_imports)]

pub mod certs;
pub mod clock;
pub mod contender;
pub mod curator;
pub mod endpoint;
pub mod etcd;
pub mod etcd_http;
pub mod eventually;
pub mod history;
pub mod inspect;
pub mod kube;
pub mod limits;
pub mod loss;
pub mod mariadb;
pub mod nemesis;
pub mod netns;
pub mod postgres;
pub mod process;
pub mod proxy;
pub mod pty;
pub mod register;
pub mod silent;
pub mod stores;
pub mod tempdir;
pub mod ticker;
pub mod tools;
pub mod zookeeper;

pub use clock::{SECOND, ms, now_ns};
pub use curator::Curator;
pub use etcd::{Etcd, EtcdOptions};
pub use eventually::{eventually, until};
pub use postgres::{PgBouncer, Postgres};
pub use process::{
    Death, GUARD, HOLD, Running, SENTINEL, alive, assert_outcome, elect, elect_run, find_child,
    hold, state,
};
pub use pty::Pty;
pub use tempdir::TempDir;
pub use zookeeper::ZooKeeper;
