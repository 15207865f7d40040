//! The ZooKeeper store.
//!
//! First, the test ZooKeeper and Curator themselves
//! (tests/support/zookeeper.rs, tests/support/curator.rs), before any store
//! test leans on them: a server takes and gives back a node, an ensemble
//! elects a new leader when its leader is killed and takes the old one back
//! as it restarts, and Curator's lock holds, refuses a second taker and
//! lets go.

mod support;

use std::time::Instant;

use support::{Curator, SECOND, ZooKeeper};

#[test]
fn the_test_servers_start() {
    let started = Instant::now();
    let zk = ZooKeeper::start();
    eprintln!("one server: {:?}", started.elapsed());
    assert_eq!(zk.mode(0).as_deref(), Some("standalone"));
    assert!(zk.url().starts_with("zk://127.0.0.1:"), "{}", zk.url());
    assert!(!zk.exists("/smoke"));
    assert_eq!(zk.children("/smoke"), Vec::<String>::new());
    zk.create("/smoke/a", b"one", true);
    zk.create("/smoke/b", b"", false);
    assert_eq!(zk.children("/smoke"), ["a", "b"]);
    assert_eq!(zk.data("/smoke/a").as_deref(), Some(&b"one"[..]));
    assert_eq!(zk.data("/smoke/none"), None);
    let a = zk.czxid("/smoke/a").expect("a czxid");
    let b = zk.czxid("/smoke/b").expect("a czxid");
    assert!(0 < a && a < b, "czxids {a} {b}");
    zk.delete("/smoke/b");
    assert_eq!(zk.children("/smoke"), ["a"]);
    zk.delete_all("/smoke");
    assert!(!zk.exists("/smoke"));
    drop(zk);

    let started = Instant::now();
    let mut zk = ZooKeeper::ensemble(3);
    eprintln!("three servers: {:?}", started.elapsed());
    let leader = zk.wait_leader();
    zk.create("/smoke/before", b"", true);
    zk.kill(leader);
    let killed = Instant::now();
    let new = zk.wait_leader();
    eprintln!("a new leader: {:?}", killed.elapsed());
    assert_ne!(new, leader);
    assert!(zk.exists("/smoke/before"));
    zk.restart(leader);
    let restarted = Instant::now();
    zk.wait_ready();
    eprintln!("the old leader back: {:?}", restarted.elapsed());
    assert_eq!(zk.mode(leader).as_deref(), Some("follower"));
    assert_eq!(zk.leader(), Some(new));

    let started = Instant::now();
    let mut first = Curator::spawn(&zk.connect_string(), "/locks/smoke", None);
    first.expect_line("held", 30 * SECOND);
    eprintln!("Curator holds (javac included): {:?}", started.elapsed());
    let started = Instant::now();
    let mut second = Curator::spawn(&zk.connect_string(), "/locks/smoke", Some(500));
    second.expect_line("busy", 10 * SECOND);
    assert_eq!(second.wait_code(10 * SECOND), 3);
    eprintln!("Curator busy after 500 ms: {:?}", started.elapsed());
    assert_eq!(zk.children("/locks/smoke").len(), 1);
    first.send_line("");
    first.expect_line("released", 10 * SECOND);
    assert_eq!(first.wait_code(10 * SECOND), 0);
    assert_eq!(zk.children("/locks/smoke"), Vec::<String>::new());
}
