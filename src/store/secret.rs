//! Passwords and certificates that stores read from files: a password never
//! shows in `Debug`, and a file that is not what its flag says is named at
//! once, before anything touches the store.

use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::StoreError;

/// A password, kept out of every `Debug` and `Display`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Secret(pub String);

impl Secret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// A PEM file with at least one `kind` block (`CERTIFICATE`, `PRIVATE KEY`).
pub fn read_pem(path: &Path, flag: &str, kind: &str) -> Result<Vec<u8>, StoreError> {
    let bytes = std::fs::read(path)
        .map_err(|e| StoreError::config(format!("cannot read {flag} {}: {e}", path.display())))?;
    let text = String::from_utf8_lossy(&bytes);
    if !(text.contains("-----BEGIN ") && text.contains(kind)) {
        return Err(StoreError::config(format!(
            "{flag} {} is not a PEM file with a {kind}",
            path.display()
        )));
    }
    Ok(bytes)
}

/// The password in `path`, without its line end.
pub fn read_password(path: &Path) -> Result<Secret, StoreError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        StoreError::config(format!(
            "cannot read --password-file {}: {e}",
            path.display()
        ))
    })?;
    let password = text.strip_suffix('\n').unwrap_or(&text);
    let password = password.strip_suffix('\r').unwrap_or(password);
    if password.is_empty() {
        return Err(StoreError::config(format!(
            "--password-file {} is empty",
            path.display()
        )));
    }
    Ok(Secret(password.to_string()))
}
