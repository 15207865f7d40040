//! A real Apache ZooKeeper on free loopback ports, in its own temp dir: one
//! server (standalone) or an ensemble of several (a quorum), whose servers
//! can be killed and restarted: a server crash, the leader's included, and
//! the loss of quorum are faults a lock must live through (or fail safely
//! in). A server keeps its data directory, `myid` and ports across a
//! restart, as a real server that reboots does, so it rejoins its ensemble.
//!
//! The server is Debian's `zookeeper` package (3.8), run straight with java
//! rather than through zkServer.sh, so that the child the tests hold, and
//! kill, is the server itself. Its classpath is Debian's (zkEnv.sh:
//! `/usr/share/java/zookeeper.jar`, whose manifest names the jars it needs)
//! plus slf4j's log4j 1.2 binding and log4j 1.2 (both among
//! libzookeeper-java's dependencies), without which the server logs nothing;
//! ELECT_TEST_ZOOKEEPER_CLASSPATH replaces it (scripts/servers-zk sets it to
//! ZooKeeper 3.9's jars from Maven Central, which log with Logback: the
//! server is given a configuration for either), ELECT_TEST_JAVA names java.
//! Time is short (`tickTime=100`: a session may be as short as 200 ms) and
//! the log is not fsynced (a killed server loses nothing by that: only a
//! machine crash would).
//!
//! An ensemble made with [`ZooKeeper::ensemble_with_links`] names each
//! peer's quorum and election ports through a TCP proxy of its own, one per
//! ordered pair of servers and port: blackholing the proxies to and from
//! one server cuts it off from the others (its clients still reach it), as
//! a partition of the network between the servers does.
//!
//! Readiness is asked with the four-letter words (`ruok`, `srvr`, all
//! allowed); the tree is looked at and changed without a JVM per call,
//! through the `zookeeper-client` crate on a small runtime of its own (see
//! [`ZooKeeper::children`] and its neighbours). The directory, with each
//! server's log, is kept when a test panics.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use zookeeper_client::{Acls, Client, CreateMode, Error};

use crate::support::proxy::{Mode, Proxy};
use crate::support::tools::{free_port, tool};

/// How long a server (or the ensemble) may take to serve.
const READY_WITHIN: Duration = Duration::from_secs(30);
/// Starts on other ports when one is taken meanwhile.
const ATTEMPTS: usize = 5;

/// Each test server's JVM heap, MiB: plenty for a test's few sessions.
pub const HEAP_MIB: usize = 96;
/// How long an inspection may keep trying through lost connections and
/// elections.
const INSPECT_WITHIN: Duration = Duration::from_secs(15);

/// Debian's jars, all in /usr/share/java.
const JARS: &str = "/usr/share/java";

/// `JARS/name`, which must exist; panics naming the Debian package.
pub(crate) fn jar(name: &str, package: &str) -> String {
    let path = Path::new(JARS).join(name);
    assert!(
        path.is_file(),
        "{} not found: install Debian's {package} package (apt-get install {package})",
        path.display()
    );
    path.display().to_string()
}

/// java: ELECT_TEST_JAVA, else on the PATH.
pub(crate) fn java() -> PathBuf {
    tool("ELECT_TEST_JAVA", "java", "default-jre-headless")
}

/// The server's classpath (see the module's doc).
fn server_classpath() -> String {
    if let Some(classpath) = std::env::var_os("ELECT_TEST_ZOOKEEPER_CLASSPATH") {
        return classpath.to_string_lossy().into_owned();
    }
    [
        jar("zookeeper.jar", "zookeeper"),
        jar("slf4j-log4j12.jar", "libslf4j-java"),
        jar("log4j-1.2.jar", "liblog4j1.2-java"),
        // TLS is served by Netty, whose codecs zookeeper.jar does not name.
        jar("netty-codec.jar", "libnetty-java"),
    ]
    .join(":")
}

/// The servers' tick, as [`SETTINGS`] sets it: a session's timeout, and a
/// follower's pings, are counted in ticks.
pub const TICK_TIME: Duration = Duration::from_millis(100);

/// Settings of every test server (`tickTime` is [`TICK_TIME`]).
const SETTINGS: &str = "\
# elect's tests
tickTime=100
initLimit=20
syncLimit=10
minSessionTimeout=200
maxSessionTimeout=60000
# Every contender of a test is a client on 127.0.0.1: no limit per address.
maxClientCnxns=0
clientPortAddress=127.0.0.1
4lw.commands.whitelist=*
admin.enableServer=false
forceSync=no
";

/// The servers' log, on stdout (into each server's `server.log`), for
/// Debian's 3.8 (log4j 1.2)...
const LOG4J: &str = "\
log4j.rootLogger=INFO, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n
";

/// ... and for ZooKeeper's own builds (Logback), which without it log
/// everything down to DEBUG.
const LOGBACK: &str = r#"<configuration>
  <appender name="CONSOLE" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%d{ISO8601} %-5level [%thread:%logger{0}] - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="CONSOLE"/></root>
</configuration>
"#;

/// A session opened by hand on the server at `port`, as a client's first
/// words open one (a `ConnectRequest` of 60 s); `None` if the server
/// closed the connection instead of answering.
fn open_session(port: u16) -> Option<TcpStream> {
    let mut request = Vec::new();
    request.extend(0i32.to_be_bytes()); // protocol version
    request.extend(0i64.to_be_bytes()); // the last zxid seen
    request.extend(60_000i32.to_be_bytes()); // the session's timeout, ms
    request.extend(0i64.to_be_bytes()); // a new session
    request.extend(16i32.to_be_bytes()); // its password
    request.extend([0u8; 16]);
    request.push(0); // not read-only
    let mut framed = i32::try_from(request.len()).unwrap().to_be_bytes().to_vec();
    framed.extend(request);
    let session = || -> std::io::Result<TcpStream> {
        let address = SocketAddr::from(([127, 0, 0, 1], port));
        let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(5))?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        stream.write_all(&framed)?;
        let mut length = [0u8; 4];
        stream.read_exact(&mut length)?;
        let mut answer = vec![0u8; usize::try_from(i32::from_be_bytes(length)).unwrap()];
        stream.read_exact(&mut answer)?;
        Ok(stream)
    };
    match session() {
        Ok(stream) => Some(stream),
        Err(e) => match e.kind() {
            std::io::ErrorKind::WouldBlock
            | std::io::ErrorKind::TimedOut
            | std::io::ErrorKind::ConnectionRefused => {
                panic!("ZooKeeper on port {port} did not take a session: {e}")
            }
            // Closed at once, or reset: turned away.
            _ => None,
        },
    }
}

/// A four-letter word to the server on `port`: its answer, or None if it
/// does not answer (down, or starting).
fn four_letter(port: u16, word: &str) -> Option<String> {
    let address = SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream.write_all(word.as_bytes()).ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    Some(answer)
}

struct Server {
    /// Its `myid`, from 1.
    id: usize,
    client_port: u16,
    /// Its ports for followers and for leader election (ensembles only).
    peer_port: u16,
    election_port: u16,
    /// Holds `zoo.cfg`, `data/` (with `myid`) and `server.log`.
    dir: PathBuf,
    process: Option<Child>,
}

pub struct ZooKeeper {
    /// The TLS port of the first server, when it serves TLS.
    secure_port: Option<u16>,
    servers: Vec<Server>,
    dir: PathBuf,
    /// Made on the first inspection.
    inspector: OnceLock<Inspector>,
    /// The links between servers (ensembles with links only): (from, to,
    /// the proxy `from` reaches `to`'s quorum or election port through).
    links: Vec<(usize, usize, Proxy)>,
    /// Each server's JVM heap, MiB.
    heap_mib: usize,
    /// Sessions opened by hand to the first server and held
    /// ([`ZooKeeper::take_every_connection`]).
    crowd: Vec<TcpStream>,
}

impl ZooKeeper {
    /// One server, standalone.
    pub fn start() -> ZooKeeper {
        ZooKeeper::start_servers(1, None, false, "", HEAP_MIB)
    }

    /// One server whose JVM may take `heap_mib` MiB of heap: for thousands
    /// of sessions.
    pub fn start_with_heap(heap_mib: usize) -> ZooKeeper {
        ZooKeeper::start_servers(1, None, false, "", heap_mib)
    }

    /// One server with `settings` beside (after, so over) the tests' own:
    /// `tickTime=2000` for ZooKeeper's default tick, say.
    pub fn start_with(settings: &str) -> ZooKeeper {
        ZooKeeper::start_servers(1, None, false, settings, HEAP_MIB)
    }

    /// `n` servers in a quorum (`n` = 1 is a standalone server).
    pub fn ensemble(n: usize) -> ZooKeeper {
        ZooKeeper::start_servers(n, None, false, "", HEAP_MIB)
    }

    /// `n` servers in a quorum, each reaching the others through proxies
    /// (see the module's doc), so that [`ZooKeeper::isolate`] can cut one
    /// off.
    pub fn ensemble_with_links(n: usize) -> ZooKeeper {
        assert!(n > 1, "links need an ensemble");
        ZooKeeper::start_servers(n, None, true, "", HEAP_MIB)
    }

    /// One server that also serves TLS with `certs`' server certificate,
    /// and requires a client certificate that `certs`' CA signed.
    pub fn start_tls(certs: &crate::support::certs::Certs) -> ZooKeeper {
        ZooKeeper::start_servers(1, Some(certs), false, "", HEAP_MIB)
    }

    /// `zks://127.0.0.1:PORT`, the TLS port.
    pub fn tls_url(&self) -> String {
        format!(
            "zks://127.0.0.1:{}",
            self.secure_port.expect("started with start_tls")
        )
    }

    /// Start every server and wait until each serves. A server that exits
    /// while starting (a port taken meanwhile) makes it start again on
    /// other ports. With `links`, servers reach each other through proxies.
    fn start_servers(
        n: usize,
        certs: Option<&crate::support::certs::Certs>,
        links: bool,
        settings: &str,
        heap_mib: usize,
    ) -> ZooKeeper {
        assert!(n > 0, "a ZooKeeper of no servers");
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        for attempt in 1..=ATTEMPTS {
            let k = NEXT.fetch_add(1, Ordering::Relaxed);
            let dir = std::env::temp_dir()
                .join(format!("elect-test-zookeeper-{}-{k}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("log4j.properties"), LOG4J).unwrap();
            std::fs::write(dir.join("logback.xml"), LOGBACK).unwrap();
            let servers: Vec<Server> = (1..=n)
                .map(|id| Server {
                    id,
                    client_port: free_port(),
                    peer_port: free_port(),
                    election_port: free_port(),
                    dir: dir.join(format!("zk{id}")),
                    process: None,
                })
                .collect();
            // What server `from` names server `to` by: its own ports, or
            // the proxies to them.
            let mut proxies = Vec::new();
            let mut ensemble = |from: usize| -> String {
                if n == 1 {
                    return String::new();
                }
                servers
                    .iter()
                    .enumerate()
                    .map(|(to, s)| {
                        let (peer, election) = match links && to != from {
                            false => (s.peer_port, s.election_port),
                            true => {
                                let peer = Proxy::start(&format!("127.0.0.1:{}", s.peer_port));
                                let election =
                                    Proxy::start(&format!("127.0.0.1:{}", s.election_port));
                                let ports = (peer.port, election.port);
                                proxies.push((from, to, peer));
                                proxies.push((from, to, election));
                                ports
                            }
                        };
                        format!("server.{}=127.0.0.1:{peer}:{election}\n", s.id)
                    })
                    .collect()
            };
            let configs: Vec<String> = (0..n).map(&mut ensemble).collect();
            let secure_port = certs.map(|_| free_port());
            let tls = match (certs, secure_port) {
                (Some(certs), Some(port)) => {
                    let pem = |p: &std::path::Path| std::fs::read_to_string(p).unwrap();
                    let keystore = dir.join("server.pem");
                    std::fs::write(&keystore, pem(&certs.server_key) + &pem(&certs.server_cert))
                        .unwrap();
                    format!(
                        "secureClientPort={port}\n\
                         serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n\
                         ssl.keyStore.location={}\nssl.keyStore.type=PEM\n\
                         ssl.trustStore.location={}\nssl.trustStore.type=PEM\n\
                         ssl.clientAuth=need\n",
                        keystore.display(),
                        certs.ca.display()
                    )
                }
                _ => String::new(),
            };
            for (s, ensemble) in servers.iter().zip(&configs) {
                let data = s.dir.join("data");
                std::fs::create_dir_all(&data).unwrap();
                std::fs::write(data.join("myid"), format!("{}\n", s.id)).unwrap();
                std::fs::write(
                    s.dir.join("zoo.cfg"),
                    format!(
                        "{SETTINGS}dataDir={}\nclientPort={}\n{ensemble}{tls}{settings}",
                        data.display(),
                        s.client_port
                    ),
                )
                .unwrap();
            }
            let mut zk = ZooKeeper {
                secure_port,
                servers,
                dir,
                inspector: OnceLock::new(),
                links: proxies,
                heap_mib,
                crowd: Vec::new(),
            };
            for i in 0..n {
                zk.launch(i);
            }
            match zk.ready_within(READY_WITHIN) {
                Ok(()) => return zk,
                // The logs stay: dropped while panicking.
                Err(e) if attempt == ATTEMPTS => panic!("ZooKeeper did not start: {e}"),
                // Dropped: killed, its directory removed; try other ports.
                Err(_) => continue,
            }
        }
        unreachable!()
    }

    fn launch(&mut self, i: usize) {
        let java = java();
        let classpath = server_classpath();
        let s = &self.servers[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(s.dir.join("server.log"))
            .unwrap();
        let process = Command::new(&java)
            .arg(format!("-Xmx{}m", self.heap_mib))
            .args(["-Xshare:auto", "-XX:TieredStopAtLevel=1"])
            .args(["-XX:+UseSerialGC", "-cp", &classpath])
            .arg(format!("-Dzookeeper.log.dir={}", s.dir.display()))
            .arg(format!(
                "-Dlog4j.configuration=file:{}",
                self.dir.join("log4j.properties").display()
            ))
            .arg(format!(
                "-Dlogback.configurationFile={}",
                self.dir.join("logback.xml").display()
            ))
            .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
            .arg(s.dir.join("zoo.cfg"))
            .current_dir(&s.dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", java.display()));
        self.servers[i].process = Some(process);
    }

    /// Cut server `i` off from every other server, silently (packets
    /// vanish): its clients still reach it, it reaches no peer.
    pub fn isolate(&self, i: usize) {
        self.set_links(i, Mode::Blackhole);
    }

    /// Undo [`ZooKeeper::isolate`]; do not wait (see
    /// [`ZooKeeper::wait_ready`]).
    pub fn heal(&self, i: usize) {
        self.set_links(i, Mode::Forward);
    }

    fn set_links(&self, i: usize, mode: Mode) {
        assert!(!self.links.is_empty(), "started without links");
        for (from, to, proxy) in &self.links {
            if *from == i || *to == i {
                proxy.set(mode);
            }
        }
    }

    pub fn size(&self) -> usize {
        self.servers.len()
    }

    /// The directory of every server's files (`zkN/`, N = i + 1).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Server `i`'s client address, `127.0.0.1:PORT`.
    pub fn endpoint(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.servers[i].client_port)
    }

    /// `127.0.0.1:P1,127.0.0.1:P2,...`: every server, for a ZooKeeper client.
    pub fn connect_string(&self) -> String {
        (0..self.size())
            .map(|i| self.endpoint(i))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `zk://127.0.0.1:P1,127.0.0.1:P2,...`: the store URL.
    /// Sessions from the tests' address, 127.0.0.1, opened until the
    /// first server closes one unanswered, as it does beyond its
    /// `maxClientCnxns` from one address; held until
    /// [`ZooKeeper::free_connections`]. How many were held.
    pub fn take_every_connection(&mut self) -> usize {
        let port = self.servers[0].client_port;
        while let Some(session) = open_session(port) {
            self.crowd.push(session);
            assert!(
                self.crowd.len() <= 1000,
                "ZooKeeper on port {port} took 1000 sessions from one address"
            );
        }
        self.crowd.len()
    }

    /// Close the sessions [`ZooKeeper::take_every_connection`] held.
    pub fn free_connections(&mut self) {
        self.crowd.clear();
    }

    pub fn url(&self) -> String {
        format!("zk://{}", self.connect_string())
    }

    /// The pid of server `i`'s JVM.
    pub fn pid(&self, i: usize) -> i32 {
        let process = self.servers[i].process.as_ref();
        process.expect("the server is down").id() as i32
    }

    pub fn is_up(&self, i: usize) -> bool {
        self.servers[i].process.is_some()
    }

    pub fn up(&self) -> Vec<usize> {
        (0..self.size()).filter(|&i| self.is_up(i)).collect()
    }

    /// SIGKILL server `i`: a crash, no goodbye to its peers or its clients.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut process) = self.servers[i].process.take() {
            let _ = process.kill();
            let _ = process.wait();
        }
    }

    /// A copy of the single server's data directory, as an operator's
    /// backup keeps it, beside it.
    pub fn back_up(&self) {
        assert_eq!(self.servers.len(), 1, "a backup of a single server");
        let dir = &self.servers[0].dir;
        copy_tree(&dir.join("data"), &dir.join("backup"));
    }

    /// The single server killed, its data directory replaced by the
    /// backup, and started again; waits until it serves.
    pub fn restore_backup(&mut self) {
        assert_eq!(self.servers.len(), 1, "a restore of a single server");
        self.kill(0);
        let dir = self.servers[0].dir.clone();
        std::fs::remove_dir_all(dir.join("data")).unwrap();
        copy_tree(&dir.join("backup"), &dir.join("data"));
        self.restart(0);
        self.wait_ready();
    }

    /// Start server `i` again on its old configuration, data and ports; do
    /// not wait (see [`ZooKeeper::wait_ready`]).
    pub fn restart(&mut self, i: usize) {
        if !self.is_up(i) {
            self.launch(i);
        }
    }

    /// Server `i`'s answer to the four-letter word `word` (`cons`, `mntr`...),
    /// None if it does not answer.
    pub fn four_letter(&self, i: usize, word: &str) -> Option<String> {
        four_letter(self.servers[i].client_port, word)
    }

    /// Server `i`'s version by `srvr` (`3.8.0-...`), None while it does not
    /// answer.
    pub fn version(&self, i: usize) -> Option<String> {
        let srvr = four_letter(self.servers[i].client_port, "srvr")?;
        srvr.lines()
            .find_map(|l| l.strip_prefix("Zookeeper version: "))
            .map(|v| v.split(',').next().unwrap_or(v).trim().to_string())
    }

    /// Server `i`'s `Mode:` by `srvr` (`standalone`, `leader`, `follower`),
    /// None while it does not serve (down, starting, or without a quorum).
    pub fn mode(&self, i: usize) -> Option<String> {
        if !self.is_up(i) {
            return None;
        }
        let srvr = four_letter(self.servers[i].client_port, "srvr")?;
        srvr.lines()
            .find_map(|l| l.strip_prefix("Mode: "))
            .map(|m| m.trim().to_string())
    }

    /// Server `i` says it is fine (`ruok`) and serves clients (`srvr`).
    fn serving(&self, i: usize) -> bool {
        four_letter(self.servers[i].client_port, "ruok").as_deref() == Some("imok")
            && self.mode(i).is_some()
    }

    /// The index of the server that is the leader, by its own `srvr`.
    pub fn leader(&self) -> Option<usize> {
        self.up()
            .into_iter()
            .find(|&i| self.mode(i).as_deref() == Some("leader"))
    }

    /// Poll for the leader.
    pub fn wait_leader(&self) -> usize {
        crate::support::eventually("a ZooKeeper leader", READY_WITHIN, || {
            self.leader()
                .ok_or_else(|| format!("none; logs in {}", self.dir.display()))
        })
    }

    /// Poll until every server that is up serves; Err if one exits.
    fn ready_within(&mut self, within: Duration) -> Result<(), String> {
        let give_up = Instant::now() + within;
        loop {
            for s in &mut self.servers {
                if let Some(p) = &mut s.process
                    && let Ok(Some(status)) = p.try_wait()
                {
                    return Err(format!(
                        "ZooKeeper server {} exited ({status}); see {}",
                        s.id,
                        s.dir.join("server.log").display()
                    ));
                }
            }
            if self.up().iter().all(|&i| self.serving(i)) {
                return Ok(());
            }
            if Instant::now() >= give_up {
                let modes: Vec<_> = self.up().iter().map(|&i| (i, self.mode(i))).collect();
                return Err(format!(
                    "ZooKeeper servers not all serving within {within:?} (modes {modes:?}); \
                     logs in {}",
                    self.dir.display()
                ));
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Poll until every server that is up serves (which, in an ensemble,
    /// needs a quorum).
    pub fn wait_ready(&mut self) {
        if let Err(e) = self.ready_within(READY_WITHIN) {
            panic!("{e}");
        }
    }

    fn inspector(&self) -> &Inspector {
        self.inspector
            .get_or_init(|| Inspector::new(self.connect_string()))
    }

    /// The children's names of `path`, sorted; none if it does not exist.
    pub fn children(&self, path: &str) -> Vec<String> {
        let mut names = self.inspector().call("list", path, |c, p| async move {
            match c.list_children(&p).await {
                Err(Error::NoNode) => Ok(Vec::new()),
                r => r,
            }
        });
        names.sort();
        names
    }

    pub fn exists(&self, path: &str) -> bool {
        self.inspector().call("stat", path, |c, p| async move {
            c.check_stat(&p).await.map(|s| s.is_some())
        })
    }

    /// The data of `path`, None if it does not exist.
    pub fn data(&self, path: &str) -> Option<Vec<u8>> {
        self.inspector().call("get", path, |c, p| async move {
            match c.get_data(&p).await {
                Ok((data, _)) => Ok(Some(data)),
                Err(Error::NoNode) => Ok(None),
                Err(e) => Err(e),
            }
        })
    }

    /// The zxid of the transaction that created `path`, None if it does not
    /// exist.
    pub fn czxid(&self, path: &str) -> Option<i64> {
        self.inspector().call("stat", path, |c, p| async move {
            c.check_stat(&p).await.map(|s| s.map(|s| s.czxid))
        })
    }

    /// Delete `path`, whatever its version; fine if it does not exist;
    /// panics if it has children.
    pub fn delete(&self, path: &str) {
        self.inspector().call("delete", path, |c, p| async move {
            match c.delete(&p, None).await {
                Err(Error::NoNode) => Ok(()),
                r => r,
            }
        })
    }

    /// Delete `path` and everything below it; fine if it does not exist.
    pub fn delete_all(&self, path: &str) {
        let give_up = Instant::now() + INSPECT_WITHIN;
        loop {
            for child in self.children(path) {
                self.delete_all(&format!("{}/{child}", path.trim_end_matches('/')));
            }
            // A child created meanwhile: round again.
            let deleted = self.inspector().call("delete", path, |c, p| async move {
                match c.delete(&p, None).await {
                    Err(Error::NoNode) => Ok(true),
                    Err(Error::NotEmpty) => Ok(false),
                    r => r.map(|()| true),
                }
            });
            if deleted {
                return;
            }
            assert!(
                Instant::now() < give_up,
                "zookeeper: {path} keeps getting children"
            );
        }
    }

    /// Create `path` with `data`: persistent, or ephemeral (on the
    /// inspection's session, which lasts as long as this ZooKeeper unless
    /// every server is down for 10 s), with any missing parent made
    /// persistent and empty. Panics if it exists.
    pub fn create(&self, path: &str, data: &[u8], persistent: bool) {
        let data = data.to_vec();
        self.inspector().call("create", path, move |c, p| {
            let data = data.clone();
            async move {
                let mode = match persistent {
                    true => CreateMode::Persistent,
                    false => CreateMode::Ephemeral,
                };
                if let Some((parent, _)) = p.rsplit_once('/')
                    && !parent.is_empty()
                {
                    c.mkdir(
                        parent,
                        &CreateMode::Persistent.with_acls(Acls::anyone_all()),
                    )
                    .await?;
                }
                c.create(&p, &data, &mode.with_acls(Acls::anyone_all()))
                    .await
                    .map(|_| ())
            }
        })
    }
}

impl Drop for ZooKeeper {
    fn drop(&mut self) {
        // Its runtime stops: no session of its goes on trying the servers.
        drop(self.inspector.take());
        for i in 0..self.size() {
            self.kill(i);
        }
        if !thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A ZooKeeper session for looking at the tree, on a current-thread tokio
/// runtime that a thread of its own drives (so that the session keeps
/// pinging between calls), called into from the tests' blocking code.
struct Inspector {
    connect: String,
    runtime: tokio::runtime::Handle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<thread::JoinHandle<()>>,
    client: Mutex<Option<Client>>,
}

impl Inspector {
    fn new(connect: String) -> Inspector {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let handle = runtime.handle().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = thread::Builder::new()
            .name("zk-inspector".into())
            .spawn(move || {
                runtime.block_on(async {
                    let _ = stopped.await;
                })
            })
            .unwrap();
        Inspector {
            connect,
            runtime: handle,
            stop: Some(stop),
            thread: Some(thread),
            client: Mutex::new(None),
        }
    }

    /// `op` on `path` with the session, through lost connections, elections
    /// and an expired session (a new one), for up to [`INSPECT_WITHIN`];
    /// panics with the last error then, or at once on any other error.
    fn call<T, F>(&self, what: &str, path: &str, op: impl Fn(Client, String) -> F) -> T
    where
        F: Future<Output = Result<T, Error>>,
    {
        let give_up = Instant::now() + INSPECT_WITHIN;
        // A test that panicked in a call before is no reason to panic here.
        let mut client = self.client.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            // Each try within what is left, give or take.
            let patience = give_up
                .saturating_duration_since(Instant::now())
                .clamp(Duration::from_millis(200), Duration::from_secs(5));
            let result = self.runtime.block_on(async {
                if client.is_none() {
                    let connect = Client::connector()
                        .with_session_timeout(Duration::from_secs(10))
                        .connect(&self.connect);
                    *client = Some(
                        tokio::time::timeout(patience, connect)
                            .await
                            .unwrap_or(Err(Error::Timeout))?,
                    );
                }
                let c = client.clone().unwrap();
                tokio::time::timeout(patience, op(c, path.to_string()))
                    .await
                    .unwrap_or(Err(Error::Timeout))
            });
            let error = match result {
                Ok(value) => return value,
                Err(e) => e,
            };
            match error {
                Error::SessionExpired | Error::ClientClosed | Error::NoHosts => *client = None,
                Error::ConnectionLoss | Error::Timeout => {}
                e => panic!("zookeeper: {what} {path}: {e}"),
            }
            assert!(
                Instant::now() < give_up,
                "zookeeper: {what} {path}: {error} for {INSPECT_WITHIN:?}"
            );
            thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Inspector {
    fn drop(&mut self) {
        drop(self.client.lock().unwrap_or_else(|e| e.into_inner()).take());
        let _ = self.stop.take().map(|stop| stop.send(()));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A cutter for [`Proxy::cutting`] that reads ZooKeeper's framing (a
/// 4-byte length before every packet; after the connect request and its
/// answer, requests start with xid and opcode, replies with xid, zxid and
/// error) and cuts the connection instead of forwarding the reply to the
/// first create of a node whose path holds `marker`: the server has done
/// the create, the client never hears of it. A create refused is let
/// through. The second half: the zxid of the create whose reply was cut
/// (the czxid of the node it made), once it was.
pub fn cut_the_reply_to_a_create(
    marker: &'static str,
) -> (
    crate::support::proxy::Cutter,
    std::sync::Arc<Mutex<Option<i64>>>,
) {
    use std::collections::{HashMap, HashSet};
    /// create, create2, createContainer, createTTL.
    const CREATES: [i32; 4] = [1, 15, 19, 21];
    #[derive(Default)]
    struct Stream {
        buf: Vec<u8>,
        /// Past the connect request, or its answer.
        connected: bool,
    }
    #[derive(Default)]
    struct State {
        streams: HashMap<(u64, bool), Stream>,
        creates: HashSet<(u64, i32)>,
    }
    let cut: std::sync::Arc<Mutex<Option<i64>>> = Default::default();
    let seen = cut.clone();
    let state = Mutex::new(State::default());
    let int = |b: &[u8]| i32::from_be_bytes(b[..4].try_into().unwrap());
    let cutter = move |upstream: bool, id: u64, bytes: &[u8]| -> bool {
        if seen.lock().unwrap().is_some() {
            return false;
        }
        let mut state = state.lock().unwrap();
        let State { streams, creates } = &mut *state;
        let stream = streams.entry((id, upstream)).or_default();
        stream.buf.extend_from_slice(bytes);
        while stream.buf.len() >= 4 {
            let len = int(&stream.buf) as usize;
            if stream.buf.len() < 4 + len {
                break;
            }
            let packet: Vec<u8> = stream.buf.drain(..4 + len).skip(4).collect();
            if !std::mem::replace(&mut stream.connected, true) || packet.len() < 8 {
                continue;
            }
            let xid = int(&packet);
            if upstream {
                let body = String::from_utf8_lossy(&packet[8..]);
                if CREATES.contains(&int(&packet[4..])) && body.contains(marker) {
                    creates.insert((id, xid));
                }
            } else if packet.len() >= 16 && creates.remove(&(id, xid)) {
                let (zxid, err) = (
                    i64::from_be_bytes(packet[4..12].try_into().unwrap()),
                    int(&packet[12..]),
                );
                // A create refused (its parent missing) made nothing.
                if err == 0 {
                    *seen.lock().unwrap() = Some(zxid);
                    return true;
                }
            }
        }
        false
    };
    (Box::new(cutter), cut)
}

/// A cutter for [`Proxy::cutting`] that cuts nothing and tells, on the
/// channel, of every answer to a `sync` (opcode 9) it passes to the client,
/// as it passes, with the moment: a moment a test can cut something else at.
pub fn tell_sync_answers() -> (
    crate::support::proxy::Cutter,
    std::sync::mpsc::Receiver<Instant>,
) {
    use std::collections::{HashMap, HashSet};
    const SYNC: i32 = 9;
    #[derive(Default)]
    struct State {
        /// Each connection's bytes each way not yet framed, and whether
        /// the connect request or its answer (which has no xid) is past.
        streams: HashMap<(u64, bool), (Vec<u8>, bool)>,
        syncs: HashSet<(u64, i32)>,
    }
    let (tell, told) = std::sync::mpsc::channel();
    let tell = Mutex::new(tell);
    let state = Mutex::new(State::default());
    let int = |b: &[u8]| i32::from_be_bytes(b[..4].try_into().unwrap());
    let cutter = move |upstream: bool, id: u64, bytes: &[u8]| -> bool {
        let mut state = state.lock().unwrap();
        let State { streams, syncs } = &mut *state;
        let (buf, connected) = streams.entry((id, upstream)).or_default();
        buf.extend_from_slice(bytes);
        while buf.len() >= 4 {
            let len = int(buf) as usize;
            if buf.len() < 4 + len {
                break;
            }
            let packet: Vec<u8> = buf.drain(..4 + len).skip(4).collect();
            if !std::mem::replace(connected, true) || packet.len() < 8 {
                continue;
            }
            let xid = int(&packet);
            if upstream {
                if int(&packet[4..]) == SYNC {
                    syncs.insert((id, xid));
                }
            } else if syncs.remove(&(id, xid)) {
                // Nobody listening any more is no matter.
                let _ = tell.lock().unwrap().send(Instant::now());
            }
        }
        false
    };
    (Box::new(cutter), told)
}

/// `cp -a` of `from` to `to`, keeping the transaction log's holes.
fn copy_tree(from: &Path, to: &Path) {
    let out = Command::new("cp")
        .args(["-a", "--sparse=always"])
        .arg(from)
        .arg(to)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cp -a {} {}: {}",
        from.display(),
        to.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}
