//! What asks elect's `--listen` endpoint: plain HTTP requests, and a real
//! Prometheus server that scrapes it.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};

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
