//! What the SQL stores' targets share: the environment a URL is read
//! with, how a URL part is written back, and the order that ends a
//! session from another process.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Everything needed to end a session from another process: where, and
/// its tenure.
#[derive(Serialize, Deserialize)]
pub struct ReleaseOrder<T> {
    pub target: T,
    pub tenure: String,
}

/// The environment, as a target's parser sees it.
pub struct Env {
    pub vars: BTreeMap<String, String>,
}

impl Env {
    /// The process's variables that `wanted` names.
    pub fn process(wanted: impl Fn(&str) -> bool) -> Env {
        Env {
            vars: std::env::vars().filter(|(k, _)| wanted(k)).collect(),
        }
    }

    /// A variable that is set and not empty.
    pub fn var(&self, name: &str) -> Option<String> {
        self.vars.get(name).filter(|v| !v.is_empty()).cloned()
    }

    pub fn home(&self) -> Option<PathBuf> {
        self.var("HOME").map(PathBuf::from)
    }

    /// The login name, the clients' default user.
    pub fn login(&self) -> Option<String> {
        nix::unistd::User::from_uid(nix::unistd::getuid())
            .ok()
            .flatten()
            .map(|u| u.name)
    }
}

/// Percent-encode what would break a URL part.
pub fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
