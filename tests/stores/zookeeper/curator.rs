//! Apache Curator's lock, `InterProcessMutex`, as a process: the recipe
//! most Java programs lock with on ZooKeeper, for what elect's ZooKeeper
//! store must agree with (one holder between them) and how it must treat
//! the other's nodes.
//!
//! `CuratorLock` ([`SOURCE`]), a small Java program, is compiled once per test
//! binary with javac against Debian's jars (libcurator-recipes-java, whose
//! manifest names the rest: curator-framework and -client, zookeeper and
//! zookeeper-jute, guava, slf4j-api, netty...) plus slf4j-simple for its
//! warnings on stderr (Curator 5.4 on bookworm). ELECT_TEST_CURATOR_CLASSPATH
//! replaces those jars (scripts/servers-zk sets it to Curator 5.9's from
//! Maven Central, on the ZooKeeper 3.9 client),
//! ELECT_TEST_JAVAC names javac, ELECT_TEST_JAVA java.
//!
//! `java CuratorLock CONNECT PATH [WAIT_MS]`: first prints `versions curator
//! V zookeeper V` (Curator's `unknown` where its jar's manifest does not
//! say, as Debian's does not); then a client (session timeout
//! 3 s, connection timeout 3 s, exponential back-off retries) takes the
//! mutex at PATH; with WAIT_MS it gives up after that long, prints `busy`
//! and exits 3; without, it waits as long as it takes. Holding, it prints
//! `held`, then on a line on stdin (or its end) releases, prints `released`
//! and exits 0. Its connection's states print as `state SUSPENDED`, `state
//! LOST`, `state RECONNECTED`... as they come.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use super::server::{jar, java};
use crate::support::process::Running;
use crate::support::tools::tool;

/// The program.
pub const SOURCE: &str = r#"
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class CuratorLock {
    static void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 2 || args.length > 3) {
            System.err.println("usage: CuratorLock CONNECT PATH [WAIT_MS]");
            System.exit(2);
        }
        String curator = CuratorFramework.class.getPackage().getImplementationVersion();
        say("versions curator " + (curator == null ? "unknown" : curator)
            + " zookeeper " + org.apache.zookeeper.Version.getFullVersion());
        CuratorFramework client = CuratorFrameworkFactory.newClient(
            args[0], 3000, 3000, new ExponentialBackoffRetry(100, 10));
        client.getConnectionStateListenable().addListener(
            (c, state) -> say("state " + state));
        client.start();
        InterProcessMutex mutex = new InterProcessMutex(client, args[1]);
        if (args.length == 3) {
            if (!mutex.acquire(Long.parseLong(args[2]), TimeUnit.MILLISECONDS)) {
                say("busy");
                client.close();
                System.exit(3);
            }
        } else {
            mutex.acquire();
        }
        say("held");
        new BufferedReader(new InputStreamReader(System.in)).readLine();
        mutex.release();
        say("released");
        client.close();
        System.exit(0);
    }
}
"#;

/// The classpath for compiling and running, without the program's own
/// directory.
fn jars() -> String {
    if let Some(classpath) = std::env::var_os("ELECT_TEST_CURATOR_CLASSPATH") {
        return classpath.to_string_lossy().into_owned();
    }
    [
        jar("curator-recipes.jar", "libcurator-recipes-java"),
        jar("slf4j-simple.jar", "libslf4j-java"),
    ]
    .join(":")
}

/// The directory of the compiled `CuratorLock.class`, made once per test
/// binary and removed when it exits.
fn compiled() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    extern "C" fn remove_dir() {
        if let Some(dir) = DIR.get() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("elect-test-curator-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let source = dir.join("CuratorLock.java");
        std::fs::write(&source, SOURCE).unwrap();
        let javac = tool("ELECT_TEST_JAVAC", "javac", "default-jdk-headless");
        let out = Command::new(&javac)
            .args(["-J-Xshare:auto", "-J-XX:TieredStopAtLevel=1", "-nowarn"])
            .arg("-d")
            .arg(&dir)
            .args(["-cp", &jars()])
            .arg(&source)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", javac.display()));
        assert!(
            out.status.success(),
            "javac CuratorLock.java: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // SAFETY: registers a plain function to run at exit.
        unsafe { libc::atexit(remove_dir) };
        dir
    })
}

pub struct Curator;

impl Curator {
    /// `java CuratorLock CONNECT PATH [WAIT_MS]` (see the module's doc),
    /// its output as lines. `connect` is a ZooKeeper connect string
    /// (`ZooKeeper::connect_string`).
    pub fn spawn(connect: &str, path: &str, wait_ms: Option<u64>) -> Running {
        let classpath = format!("{}:{}", compiled().display(), jars());
        let mut command = Command::new(java());
        command
            .args(["-Xshare:auto", "-XX:TieredStopAtLevel=1", "-Xmx64m"])
            .args(["-XX:+UseSerialGC", "-cp", &classpath])
            .arg("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")
            // Its complaint that the server hung up once the session closed.
            .arg("-Dorg.slf4j.simpleLogger.log.org.apache.zookeeper.ClientCnxn=error")
            .args(["CuratorLock", connect, path]);
        if let Some(ms) = wait_ms {
            command.arg(ms.to_string());
        }
        Running::spawn(command)
    }
}
