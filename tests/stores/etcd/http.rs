//! etcd over plain HTTP on its client URL: the Prometheus metrics, and a
//! lease revoke through the gRPC gateway. Neither shows up in the gRPC
//! counters the scale figure reads, and a revoke this way costs one local
//! round trip instead of starting an `etcdctl`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// One HTTP/1.0 exchange (so the reply is neither chunked nor kept alive).
fn exchange(endpoint: &str, method: &str, path: &str, body: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(endpoint)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.set_nodelay(true)?;
    write!(
        stream,
        "{method} {path} HTTP/1.0\r\nHost: {endpoint}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply)?;
    let (head, body) = reply
        .split_once("\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("malformed HTTP reply"))?;
    if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
        return Err(std::io::Error::other(format!(
            "{method} {path}: {}; {body}",
            head.lines().next().unwrap_or("")
        )));
    }
    Ok(body.to_string())
}

/// Revoke a lease given in hex, as `etcdctl lease revoke` takes it.
pub fn revoke(endpoint: &str, lease_hex: &str) -> std::io::Result<()> {
    let id = i64::from_str_radix(lease_hex, 16)
        .map_err(|e| std::io::Error::other(format!("lease id {lease_hex}: {e}")))?;
    exchange(
        endpoint,
        "POST",
        "/v3/lease/revoke",
        &format!("{{\"ID\":\"{id}\"}}"),
    )
    .map(|_| ())
}

/// A scrape of etcd's /metrics: (series with labels, value).
pub struct Metrics(Vec<(String, f64)>);

impl Metrics {
    pub fn scrape(endpoint: &str) -> std::io::Result<Metrics> {
        Ok(Metrics::parse(&exchange(endpoint, "GET", "/metrics", "")?))
    }

    /// Prometheus' text format, as any server's /metrics writes it.
    pub fn parse(text: &str) -> Metrics {
        Metrics(
            text.lines()
                .filter(|l| !l.starts_with('#'))
                .filter_map(|l| {
                    let (series, value) = l.rsplit_once(' ')?;
                    Some((series.to_string(), value.parse().ok()?))
                })
                .collect(),
        )
    }

    /// The sum of every series of metric `name` whose labels satisfy `keep`.
    pub fn sum(&self, name: &str, keep: impl Fn(&str) -> bool) -> f64 {
        self.0
            .iter()
            .filter(|(series, _)| {
                let (metric, labels) = series.split_once('{').unwrap_or((series, ""));
                metric == name && keep(labels)
            })
            .map(|(_, v)| v)
            .sum()
    }
}
