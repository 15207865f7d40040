//! What the tests need from the machine: programs found on the PATH (or
//! named by an environment variable), failing loudly with the Debian
//! package to install, and free loopback ports.

use std::net::TcpListener;
use std::path::PathBuf;

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
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
