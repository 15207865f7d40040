//! libpq's two forms of a connection string read into its words: a
//! `postgres://` URL (percent-decoded, several hosts and ports) and
//! `key=value` words (quoted as libpq quotes them), and the servers the
//! `host` and `port` words name.

use std::collections::BTreeMap;

use super::target::{KEYS, Server};
use crate::store::lease_row::target::{UrlError, UrlParts, decode, split_port};

/// Why libpq's words cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WordsError {
    #[error(transparent)]
    Url(#[from] UrlError),
    #[error("unknown option '{unknown}'; elect knows {known}")]
    Unknown { unknown: String, known: String },
    #[error("'{0}' has no '=' and value")]
    NoValue(String),
    #[error("the value of '{0}' lacks its closing quote")]
    Unquoted(String),
    #[error("{hosts} hosts but {ports} ports: give one port, or one for each host")]
    Ports { hosts: usize, ports: usize },
    #[error("'{0}' is not a port")]
    Port(String),
    #[error("'{0}' is not a host name")]
    Host(String),
}

/// What parses a store URL reports it as: a URL without its password, or
/// "the store's words" for libpq's form (which may hold one anywhere).
pub(super) fn shown_input(url: &str) -> String {
    if url.contains("://") {
        format!("store URL '{}'", crate::store::kind::redact(url))
    } else {
        "the PostgreSQL store's settings".into()
    }
}

/// The settings a URL or `key=value` words give, by libpq's names.
pub(super) fn words_of(input: &str) -> Result<BTreeMap<String, String>, WordsError> {
    let lower = input.to_ascii_lowercase();
    let words = if let Some((_, rest)) = input
        .split_once("://")
        .filter(|_| lower.starts_with("postgres://") || lower.starts_with("postgresql://"))
    {
        url_words(rest)?
    } else {
        key_value_words(input)?
    };
    if let Some(unknown) = words.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(WordsError::Unknown {
            unknown: unknown.clone(),
            known: KEYS.join(", "),
        });
    }
    Ok(words)
}

/// `[user[:password]@][host[:port][,…]][/dbname][?key=value&…]`.
fn url_words(rest: &str) -> Result<BTreeMap<String, String>, WordsError> {
    let mut words = BTreeMap::new();
    let url = UrlParts::read(rest, &mut words)?;
    if !url.hosts.is_empty() {
        let mut names = Vec::new();
        let mut ports = Vec::new();
        for item in url.hosts.split(',') {
            let (host, port) = split_port(item)?;
            names.push(decode(host)?);
            ports.push(port.map(str::to_string).unwrap_or_default());
        }
        words.insert("host".into(), names.join(","));
        if ports.iter().any(|p| !p.is_empty()) {
            words.insert("port".into(), ports.join(","));
        }
    }
    if let Some(path) = url.path.filter(|p| !p.is_empty()) {
        words.insert("dbname".into(), decode(path)?);
    }
    words.extend(url.options()?);
    Ok(words)
}

/// libpq's `key=value key='quoted \' value'` words.
fn key_value_words(input: &str) -> Result<BTreeMap<String, String>, WordsError> {
    let mut words = BTreeMap::new();
    let mut chars = input.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return Ok(words);
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            return Err(WordsError::NoValue(key));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    Some('\\') => value.extend(chars.next()),
                    Some('\'') => break,
                    Some(c) => value.push(c),
                    None => return Err(WordsError::Unquoted(key)),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                match c {
                    '\\' => value.extend(chars.next()),
                    c => value.push(c),
                }
            }
        }
        words.insert(key, value);
    }
}

/// The servers that `host` and `port` name: one port for all, or one each.
pub(super) fn servers(hosts: Option<&str>, ports: Option<&str>) -> Result<Vec<Server>, WordsError> {
    let hosts: Vec<&str> = hosts
        .unwrap_or("/var/run/postgresql")
        .split(',')
        .map(str::trim)
        .collect();
    let ports: Vec<&str> = ports.unwrap_or("").split(',').map(str::trim).collect();
    if ports.len() != 1 && ports.len() != hosts.len() {
        return Err(WordsError::Ports {
            hosts: hosts.len(),
            ports: ports.len(),
        });
    }
    hosts
        .iter()
        .enumerate()
        .map(|(i, host)| {
            let port = ports.get(i).or(ports.first()).copied().unwrap_or("");
            let port = match port {
                "" => 5432,
                p => p
                    .parse::<u16>()
                    .ok()
                    .filter(|p| *p != 0)
                    .ok_or_else(|| WordsError::Port(p.to_string()))?,
            };
            let host = match *host {
                "" => "/var/run/postgresql",
                h => h,
            };
            if host.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(WordsError::Host(host.to_string()));
            }
            Ok(Server {
                host: host.to_string(),
                port,
            })
        })
        .collect()
}
