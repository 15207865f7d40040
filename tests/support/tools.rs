//! What the tests need from the machine: programs found on the PATH (or
//! named by an environment variable), failing loudly with the Debian
//! package to install, and free loopback ports.

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};

/// A loopback port nothing listens on right now, given to no other test of
/// this process, and below the kernel's range of ephemeral ports: a server
/// stopped and started again on it (a member killed and brought back) finds
/// it free still, taken neither by another test's server nor by the local
/// end of a client's connection, as a port the kernel picked could be.
pub fn free_port() -> u16 {
    static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    // The ephemeral range starts at 32768 unless set otherwise.
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768)
        .max(2048);
    let span = u64::from(ephemeral - 1024);
    let mut given = GIVEN.lock().unwrap_or_else(PoisonError::into_inner);
    // Each process starts elsewhere in the span, so that two test runs at
    // once seldom try the same ports.
    let start = u64::from(std::process::id()) * 7919;
    for i in 0..span {
        let port = 1024 + u16::try_from((start + i) % span).unwrap_or(0);
        if !given.contains(&port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.insert(port);
            return port;
        }
    }
    panic!("no free loopback port below {ephemeral}")
}

/// `name` on the PATH.
pub fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| PathBuf::from(d).join(name))
        .find(|p| p.is_file())
}

/// The program `$env`, else `name` on the PATH; panics naming `package`.
pub fn tool(env: &str, name: &str, package: &str) -> PathBuf {
    if let Some(path) = std::env::var_os(env) {
        return PathBuf::from(path);
    }
    which(name).unwrap_or_else(|| {
        panic!(
            "`{name}` not found: install Debian's {package} package \
             (apt-get install {package}), or set {env} to its path"
        )
    })
}
