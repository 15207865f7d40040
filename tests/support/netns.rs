//! A private network for the members of a replicated store, so that one
//! member can be cut off from the others for real: each member in a network
//! namespace of its own, on a bridge in one more namespace (the hub), on
//! private addresses (`10.77.0.N/24`) that exist only there. Cutting member
//! `i` off is an nftables rule on the hub's bridge that drops every frame to
//! and from its port: its peers' packets vanish, as in a partition, while
//! its own loopback, where its clients come in through a [`Proxy`] that
//! connects from inside its namespace ([`Network::gate`]), still works.
//!
//! A cluster whose members name each other by one address each (etcd, whose
//! member ids hash the peer URLs) cannot be cut apart by proxies between
//! pairs of members; this cuts below them. Nothing touches the machine's
//! own network namespace: the namespaces are named after the test process
//! and the network's number, deleted on drop (a panic included), and those
//! of a test process that is gone are deleted when a new network is made.
//! Needs root, `ip` (iproute2) and `nft`.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::loss::{nft_bin, nft_with};
use super::proxy::Proxy;
use super::tools::which;

/// Where `ip netns` keeps its namespaces.
const NETNS: &str = "/run/netns";
/// Every namespace of these tests is named `PREFIX-PID-...`.
const PREFIX: &str = "elect-test";

pub struct Network {
    hub: String,
    members: Vec<String>,
}

impl Network {
    /// `n` member namespaces on one bridge, each with its loopback up and
    /// its address on the bridge.
    pub fn new(n: usize) -> Network {
        remove_orphans();
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = |what: &str| format!("{PREFIX}-{}-{k}-{what}", std::process::id());
        let network = Network {
            hub: name("hub"),
            members: (0..n).map(|i| name(&format!("m{i}"))).collect(),
        };
        // Made one by one, so that a failure leaves only what drop removes.
        ip(&["netns", "add", &network.hub]);
        for member in &network.members {
            ip(&["netns", "add", member]);
        }
        let hub = network.hub.as_str();
        ip(&["-n", hub, "link", "add", "br0", "type", "bridge"]);
        ip(&["-n", hub, "link", "set", "br0", "up"]);
        for (i, member) in network.members.iter().enumerate() {
            // Made in the hub, its other end moved straight into the
            // member's namespace: never in the machine's own.
            let port = format!("port{i}");
            ip(&[
                "-n", hub, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns",
                member,
            ]);
            ip(&["-n", hub, "link", "set", &port, "master", "br0", "up"]);
            ip(&["-n", member, "link", "set", "lo", "up"]);
            let address = format!("{}/24", network.address(i));
            ip(&["-n", member, "addr", "add", &address, "dev", "eth0"]);
            ip(&["-n", member, "link", "set", "eth0", "up"]);
        }
        network
    }

    /// Member `i`'s address on the bridge.
    pub fn address(&self, i: usize) -> String {
        format!("10.77.0.{}", i + 1)
    }

    fn path(&self, i: usize) -> PathBuf {
        Path::new(NETNS).join(&self.members[i])
    }

    /// Make `command` run in member `i`'s namespace.
    pub fn enter(&self, command: &mut Command, i: usize) {
        let namespace = open(&self.path(i));
        // SAFETY: setns(2) is async-signal-safe; the descriptor is moved
        // into the closure and stays open until the command has run.
        unsafe {
            command.pre_exec(move || {
                if libc::setns(namespace.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }

    /// A proxy on the machine's loopback to `target` (an address as member
    /// `i` sees it, `127.0.0.1:PORT` its own loopback): how a client
    /// outside reaches a member.
    pub fn gate(&self, i: usize, target: &str) -> Proxy {
        Proxy::connecting_from(target, open(&self.path(i)))
    }

    /// Drop every frame to and from member `i` on the bridge.
    pub fn isolate(&self, i: usize) {
        self.nft(&format!(
            "table bridge cut{i} {{
               chain forward {{
                 type filter hook forward priority 0; policy accept;
                 iifname \"port{i}\" drop
                 oifname \"port{i}\" drop
               }}
             }}"
        ));
    }

    /// Undo [`Network::isolate`].
    pub fn heal(&self, i: usize) {
        self.nft(&format!("delete table bridge cut{i}"));
    }

    /// An nftables script in the hub's namespace.
    fn nft(&self, script: &str) {
        let mut command = Command::new(nft_bin());
        let hub = open(&Path::new(NETNS).join(&self.hub));
        // SAFETY: as in `enter`.
        unsafe {
            command.pre_exec(move || {
                if libc::setns(hub.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        nft_with(command, script);
    }
}

impl Drop for Network {
    /// The veths and the bridge go with their namespaces.
    fn drop(&mut self) {
        for namespace in self.members.iter().chain([&self.hub]) {
            let _ = quiet_ip(&["netns", "delete", namespace]);
        }
    }
}

fn open(path: &Path) -> File {
    File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The namespaces of test processes that are gone (killed before their
/// drop could run).
fn remove_orphans() {
    let Ok(entries) = std::fs::read_dir(NETNS) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(&format!("{PREFIX}-"))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<i32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = quiet_ip(&["netns", "delete", &name]);
        }
    }
}

/// ip: on the PATH, else in /usr/sbin (which a user's PATH may lack).
fn ip_bin() -> PathBuf {
    let sbin = PathBuf::from("/usr/sbin/ip");
    which("ip")
        .or_else(|| sbin.is_file().then_some(sbin))
        .unwrap_or_else(|| {
            panic!("`ip` not found: install Debian's iproute2 package (apt-get install iproute2)")
        })
}

fn quiet_ip(args: &[&str]) -> std::process::Output {
    Command::new(ip_bin())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("ip")
}

/// `ip ARGS`, which must succeed (root needed).
fn ip(args: &[&str]) {
    let out = quiet_ip(args);
    assert!(
        out.status.success(),
        "ip {} (root needed): {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}
