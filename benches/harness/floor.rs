//! The floor under a cycle: what its unavoidable parts cost on this machine,
//! measured in the same run as the cycle itself.
//!
//! A cycle of `elect run -- true` must at least exec two programs (elect
//! and the command; the guard is forked, and overlaps the talk with the
//! store) and wait for the store's writes: on etcd, the grant with the
//! queue transaction (sent side by side, committed together) on the new
//! process's new connection, and the revoke, each a disk write on etcd's
//! side; on one host, one synced counter update.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp};

use super::stats::Samples;

/// Spawn and wait for `true`, `n` times.
pub fn exec(n: usize) -> Samples {
    let mut times = Samples::default();
    for _ in 0..=n {
        let start = Instant::now();
        let status = Command::new("true")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("cannot run true");
        assert!(status.success());
        times.push(start.elapsed());
    }
    times
}

/// Write 32 bytes in place and fdatasync, `n` times, in `dir`.
pub fn fsync(dir: &Path, n: usize) -> Samples {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(dir.join("floor.counter"))
        .expect("cannot create the floor's counter");
    let mut times = Samples::default();
    for i in 0..=n {
        let start = Instant::now();
        file.write_all_at(&[b'x'; 32], (i % 2 * 32) as u64).unwrap();
        file.sync_data().unwrap();
        if i > 0 {
            times.push(start.elapsed());
        }
    }
    times
}

/// What one request costs on a warm connection to etcd, and the first one
/// on a new connection.
pub struct EtcdWrites {
    /// A new client's connection (TCP, HTTP/2) and its first request, a grant.
    pub first: Samples,
    pub grant: Samples,
    pub txn: Samples,
    pub revoke: Samples,
}

/// A grant on a new connection; then grant, queue (the put of the lock
/// recipe, guarded), revoke on a warm one: `n` each.
pub fn etcd(endpoint: &str, n: usize) -> EtcdWrites {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let mut client = Client::connect([endpoint], None)
            .await
            .expect("cannot connect to etcd");
        let mut writes = EtcdWrites {
            first: Samples::default(),
            grant: Samples::default(),
            txn: Samples::default(),
            revoke: Samples::default(),
        };
        let elapsed = |start: Instant| -> Duration { start.elapsed() };
        for i in 0..=n {
            let start = Instant::now();
            let mut fresh = Client::connect([endpoint], None)
                .await
                .expect("cannot connect to etcd");
            let lease = fresh.lease_grant(15, None).await.expect("grant").id();
            let first = elapsed(start);
            fresh.lease_revoke(lease).await.expect("revoke");
            drop(fresh);
            let start = Instant::now();
            let lease = client.lease_grant(15, None).await.expect("grant").id();
            let grant = elapsed(start);
            let key = format!("bench-floor/{lease:x}");
            let txn = Txn::new()
                .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(
                    key.as_str(),
                    "x",
                    Some(PutOptions::new().with_lease(lease)),
                )]);
            let start = Instant::now();
            client.txn(txn).await.expect("txn");
            let txn = elapsed(start);
            let start = Instant::now();
            client.lease_revoke(lease).await.expect("revoke");
            let revoke = elapsed(start);
            if i > 0 {
                writes.first.push(first);
                writes.grant.push(grant);
                writes.txn.push(txn);
                writes.revoke.push(revoke);
            }
        }
        writes
    })
}
