//! Real packet loss on one TCP port of the loopback: an nftables table
//! that drops a share of the packets to and from the port, at random, each
//! way. The kernel's TCP then retransmits, as on a lossy network. (netem
//! would do the same per interface, but not every kernel has it, and the
//! loopback carries every other test's traffic too.) Needs root and nft.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use super::tools::which;

/// The table, dropped on drop.
pub struct Loss {
    table: String,
}

impl Loss {
    /// Drop `percent` % of the packets to and from `port`, each way.
    pub fn on_port(port: u16, percent: u32) -> Loss {
        let table = format!("elect_loss_{port}");
        nft(&format!(
            "table inet {table} {{
               chain out {{
                 type filter hook output priority 0; policy accept;
                 tcp dport {port} numgen random mod 100 < {percent} drop
                 tcp sport {port} numgen random mod 100 < {percent} drop
               }}
             }}"
        ));
        Loss { table }
    }
}

impl Drop for Loss {
    fn drop(&mut self) {
        nft(&format!("delete table inet {}", self.table));
    }
}

fn nft(script: &str) {
    nft_with(Command::new(nft_bin()), script);
}

/// Feed `script` to `nft` (a command of [`nft_bin`], maybe set to run in
/// another network namespace); assert that nft took it.
pub fn nft_with(mut nft: Command, script: &str) {
    let mut child = nft
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("nft");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(script.as_bytes()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "nft (root needed) refused {script:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// nft: ELECT_TEST_NFT, else on the PATH, else in /usr/sbin (which a
/// user's PATH may lack).
pub fn nft_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("ELECT_TEST_NFT") {
        return PathBuf::from(path);
    }
    let sbin = PathBuf::from("/usr/sbin/nft");
    which("nft")
        .or_else(|| sbin.is_file().then_some(sbin))
        .unwrap_or_else(|| {
            panic!(
                "`nft` not found: install Debian's nftables package \
                 (apt-get install nftables), or set ELECT_TEST_NFT to its path"
            )
        })
}
