//! What asks elect's `--listen` endpoint and its systemd notifications:
//! plain HTTP requests, a real Prometheus server that scrapes it, and a
//! datagram socket standing in for systemd's notify socket (the socket is
//! real; only the reader is the test).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::tools::{free_port, tool};
use super::{SECOND, TempDir, eventually};

/// One request to `127.0.0.1:port`: the status code and the body, or
/// `None` if nothing answers there.
pub fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(5 * SECOND)).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply).ok()?;
    let (head, body) = reply.split_once("\r\n\r\n")?;
    let code = head.split(' ').nth(1)?.parse().ok()?;
    Some((code, body.to_string()))
}

/// The status code of `path` on `port` (0: nothing answers).
pub fn code(port: u16, path: &str) -> u16 {
    get(port, path).map_or(0, |(code, _)| code)
}

/// A Prometheus server on a free loopback port, scraping `targets` every
/// second; killed when dropped.
pub struct Prometheus {
    child: Child,
    pub port: u16,
    _dir: TempDir,
}

impl Prometheus {
    pub fn start(name: &str, targets: &[u16]) -> Prometheus {
        let binary = tool("ELECT_TEST_PROMETHEUS", "prometheus", "prometheus");
        let dir = TempDir::new(&format!("prometheus-{name}"));
        let port = free_port();
        let targets: Vec<String> = targets.iter().map(|p| format!("'127.0.0.1:{p}'")).collect();
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  \
                 - job_name: elect\n    static_configs:\n      - targets: [{}]\n",
                targets.join(", ")
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("prometheus (Debian's prometheus package; scripts/test installs it)");
        let prometheus = Prometheus {
            child,
            port,
            _dir: dir,
        };
        let logged = prometheus._dir.join("prometheus.log");
        eventually("Prometheus ready", 30 * SECOND, || {
            match get(port, "/-/ready") {
                Some((200, _)) => Ok(()),
                _ => Err(std::fs::read_to_string(&logged).unwrap_or_default()),
            }
        });
        prometheus
    }

    /// The instant vector `query` (no spaces or other characters that need
    /// escaping in a URL): each series' `instance` label and value.
    pub fn query(&self, query: &str) -> Result<Vec<(String, f64)>, String> {
        let (code, body) = get(self.port, &format!("/api/v1/query?query={query}"))
            .ok_or("Prometheus does not answer")?;
        if code != 200 {
            return Err(format!("{code}: {body}"));
        }
        let reply: serde_json::Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
        let result = reply["data"]["result"]
            .as_array()
            .ok_or_else(|| body.clone())?;
        Ok(result
            .iter()
            .map(|series| {
                (
                    series["metric"]["instance"]
                        .as_str()
                        .unwrap_or("")
                        .to_string(),
                    series["value"][1]
                        .as_str()
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(f64::NAN),
                )
            })
            .collect())
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A datagram socket bound where `NOTIFY_SOCKET` points, and every
/// message it has received, in order.
pub struct NotifySocket {
    pub path: PathBuf,
    messages: Arc<Mutex<Vec<String>>>,
    _dir: TempDir,
}

impl NotifySocket {
    /// At a path in a directory of its own.
    pub fn bind(name: &str) -> NotifySocket {
        let dir = TempDir::new(&format!("notify-{name}"));
        let path = dir.join("notify");
        let socket = UnixDatagram::bind(&path).unwrap();
        NotifySocket::reading(socket, path, dir)
    }

    /// At an abstract name; `path` is then `@NAME`, as systemd writes it.
    pub fn bind_abstract(name: &str) -> NotifySocket {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("elect-test-notify-{name}-{}", std::process::id());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let socket = UnixDatagram::bind_addr(&addr).unwrap();
        let dir = TempDir::new(&format!("notify-abstract-{name}"));
        NotifySocket::reading(socket, PathBuf::from(format!("@{name}")), dir)
    }

    fn reading(socket: UnixDatagram, path: PathBuf, dir: TempDir) -> NotifySocket {
        let messages = Arc::new(Mutex::new(Vec::new()));
        let theirs = messages.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = socket.recv(&mut buf) {
                theirs
                    .lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&buf[..n]).into_owned());
            }
        });
        NotifySocket {
            path,
            messages,
            _dir: dir,
        }
    }

    /// Every line received so far (`READY=1`, `STATUS=…`), in order.
    pub fn lines(&self) -> Vec<String> {
        self.messages
            .lock()
            .unwrap()
            .iter()
            .flat_map(|m| m.lines().map(str::to_string).collect::<Vec<_>>())
            .collect()
    }

    /// Wait until a line starting with `prefix` has come.
    pub fn wait_for(&self, prefix: &str, within: Duration) -> String {
        eventually(&format!("{prefix} on the notify socket"), within, || {
            let lines = self.lines();
            lines
                .iter()
                .find(|l| l.starts_with(prefix))
                .cloned()
                .ok_or_else(|| format!("{lines:?}"))
        })
    }
}
