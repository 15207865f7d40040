//! Where a file store is: the `file:` URL, its per-user default, and the
//! release order that reaches the same directory again.
//!
//! Kept apart from the store so that parsing a URL, which every command
//! does before anything touches the store, reads no more than the URL.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{FileStore, check_name};
use crate::store::kind::{About, Kind, Target};
use crate::store::{Boxed, NameError, Store, StoreError};

/// `file:DIR`, `file:///DIR`, or `file` alone for the per-user default;
/// `?network-fs=ok` accepts a network filesystem.
pub const KIND: Kind = Kind {
    name: "file",
    forms: &["file:DIR"],
    claims: |url| url == "file" || url.starts_with("file:"),
    parse: |url, settings| {
        settings.refuse_security("file:")?;
        let rest = url.strip_prefix("file").unwrap_or_default();
        FileTarget::parse(rest.strip_prefix(':').unwrap_or(rest))
            .map(|t| Box::new(t) as Box<dyn Target>)
            .map_err(|e| StoreError::config(format!("store URL '{url}': {e}")))
    },
    from_env: || None,
    // The lock ends with its descriptors, which the guard closes first:
    // there is nothing to end, only the store to give back.
    release: |order, _within| {
        let target: Result<FileTarget, _> = serde_json::from_slice(order);
        Box::pin(async move {
            let target =
                target.map_err(|e| StoreError::config(format!("a bad release order: {e}")))?;
            let store = FileStore::open(&target.dir, target.network_fs_ok)?;
            Ok(Box::new(store) as Box<dyn Store>)
        })
    },
    greeting: None,
    about: About {
        title: "file",
        help: "file:DIR for locks on this host only (\"file\" alone: /var/lib/elect for root, else \
               $XDG_STATE_HOME/elect, or ~/.local/state/elect without it)",
        reference: "`file:DIR` (`file` alone: `/var/lib/elect` for root, else `$XDG_STATE_HOME/elect`, or `~/.local/state/elect` without it)",
        schemes: &["file:"],
        reads: &[],
        secrets: &[],
        key: "the lock file",
        lease_id: "the pid (decimal) of the elect that holds the lock",
        cacert: None,
        user: None,
        store_variable: None,
    },
};

/// A directory on this host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileTarget {
    dir: PathBuf,
    network_fs_ok: bool,
}

/// Why a `file:` URL names no directory.
#[derive(Debug, thiserror::Error)]
enum UrlError {
    #[error("unknown option '{0}'; the only one is network-fs=ok")]
    Option(String),
    /// `file://HOST/…`: a host, where only this one is meant.
    #[error("expected file:/DIR or file:///DIR")]
    Host,
    #[error("the directory name contains control characters")]
    Control,
    #[error("'~user' is not expanded; give the directory in full")]
    TildeUser,
    /// The current directory, to make a relative path absolute, as the
    /// system says.
    #[error("{0}")]
    Absolute(std::io::Error),
    #[error("--store file: neither XDG_STATE_HOME nor HOME is set; give a directory: file:/path")]
    NoStateDir,
    #[error("'~' needs HOME set to an absolute path")]
    NoHome,
}

impl FileTarget {
    fn parse(rest: &str) -> Result<Self, UrlError> {
        let (path, query) = match rest.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (rest, None),
        };
        let network_fs_ok = match query {
            None => false,
            Some("network-fs=ok") => true,
            Some(other) => {
                return Err(UrlError::Option(other.to_string()));
            }
        };
        let path = match path.strip_prefix("//") {
            Some(abs) if abs.starts_with('/') => abs,
            Some(_) => return Err(UrlError::Host),
            None => path,
        };
        if path.chars().any(char::is_control) {
            return Err(UrlError::Control);
        }
        let dir = match path {
            "" => default_dir()?,
            "~" => home()?,
            _ if path.starts_with("~/") => home()?.join(&path[2..]),
            _ if path.starts_with('~') => {
                return Err(UrlError::TildeUser);
            }
            // The command gets ELECT_STORE: it must mean the same place
            // from wherever the command runs.
            _ => std::path::absolute(path).map_err(UrlError::Absolute)?,
        };
        Ok(FileTarget { dir, network_fs_ok })
    }
}

impl fmt::Display for FileTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "file:{}", self.dir.display())?;
        if self.network_fs_ok {
            f.write_str("?network-fs=ok")?;
        }
        Ok(())
    }
}

impl Target for FileTarget {
    fn check_lock_name(&self, name: &str) -> Result<(), NameError> {
        check_name(name)
    }

    fn open(
        &self,
        _ping_timeout: Duration,
        _connect_timeout: Duration,
    ) -> Boxed<'_, Result<Box<dyn Store>, StoreError>> {
        let opened = FileStore::open(&self.dir, self.network_fs_ok);
        Box::pin(async move { opened.map(|store| Box::new(store) as Box<dyn Store>) })
    }

    fn release_order(&self, _id: &str) -> Option<Vec<u8>> {
        serde_json::to_vec(self).ok()
    }
}

/// The per-user state directory for a bare `--store file`. Not /run or
/// /tmp: the token counters must survive reboots.
fn default_dir() -> Result<PathBuf, UrlError> {
    if nix::unistd::geteuid().is_root() {
        return Ok(PathBuf::from("/var/lib/elect"));
    }
    if let Some(state) = std::env::var_os("XDG_STATE_HOME").filter(|s| Path::new(s).is_absolute()) {
        return Ok(PathBuf::from(state).join("elect"));
    }
    match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        Some(home) => Ok(PathBuf::from(home).join(".local/state/elect")),
        None => Err(UrlError::NoStateDir),
    }
}

/// `$HOME`, for `file:~/DIR`.
fn home() -> Result<PathBuf, UrlError> {
    std::env::var_os("HOME")
        .filter(|h| Path::new(h).is_absolute())
        .map(PathBuf::from)
        .ok_or(UrlError::NoHome)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::kind::Settings;

    #[test]
    fn store_urls() {
        let parse = |url: &str| {
            assert!((KIND.claims)(url), "{url}");
            (KIND.parse)(url, &Settings::default()).map(|t| t.to_string())
        };
        assert_eq!(parse("file:/var/x").unwrap(), "file:/var/x");
        assert_eq!(parse("file:///var/x").unwrap(), "file:/var/x");
        assert_eq!(
            parse("file:/mnt/n?network-fs=ok").unwrap(),
            "file:/mnt/n?network-fs=ok"
        );
        assert!(parse("file:/x?nfs=yes").is_err());
        assert!(parse("file://host/x").is_err());
        assert!(parse("file").unwrap().starts_with("file:/"));
        assert!(!(KIND.claims)("etcd://a:1") && !(KIND.claims)("files:/x"));
    }
}
