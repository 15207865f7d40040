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

/// A client certificate for `flag` (`--cert`): a PEM file whose first
/// certificate is X.509 v3. A v1 certificate (what a plain `openssl x509
/// -req` makes) is refused by the TLS library only once the handshake
/// fails, which says nothing of why: named here, at once.
pub fn read_client_certificate(path: &Path, flag: &str) -> Result<Vec<u8>, StoreError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let pem = read_pem(path, flag, "CERTIFICATE")?;
    let first = CertificateDer::pem_slice_iter(&pem).next();
    if let Some(Ok(der)) = first
        && x509_version(&der) == Some(1)
    {
        return Err(StoreError::config(format!(
            "{flag} {} is an X.509 v1 certificate, which TLS here refuses: make a v3 one \
             (openssl x509 -req … -extfile with an extension, e.g. \
             extendedKeyUsage=clientAuth)",
            path.display()
        )));
    }
    Ok(pem)
}

/// The version of the X.509 certificate `der` (1 to 3), if it can be read:
/// its TBSCertificate starts with an explicit `[0] version` unless v1.
fn x509_version(der: &[u8]) -> Option<u8> {
    /// The contents of the DER element at the start of `bytes`, if its tag
    /// is `tag`.
    fn inside(bytes: &[u8], tag: u8) -> Option<&[u8]> {
        let (&t, rest) = bytes.split_first()?;
        let (&first, rest) = rest.split_first()?;
        if t != tag {
            return None;
        }
        let (len, rest) = match first {
            n if n < 0x80 => (usize::from(n), rest),
            n => {
                let count = usize::from(n & 0x7f);
                if count == 0 || count > 4 || rest.len() < count {
                    return None;
                }
                let len = rest[..count]
                    .iter()
                    .fold(0usize, |l, &b| (l << 8) | usize::from(b));
                (len, &rest[count..])
            }
        };
        rest.get(..len)
    }
    const SEQUENCE: u8 = 0x30;
    const VERSION: u8 = 0xa0;
    const INTEGER: u8 = 0x02;
    let tbs = inside(inside(der, SEQUENCE)?, SEQUENCE)?;
    match inside(tbs, VERSION) {
        None => Some(1),
        Some(version) => match inside(version, INTEGER)? {
            [v] if *v < 3 => Some(v + 1),
            _ => None,
        },
    }
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

/// The password of `user`, looked for in one order on every store: the
/// `--password-file`, else the store URL's, else `ELECT_PASSWORD` (as
/// `var` reads the environment), else the store's own tools' (`own`:
/// etcd's `ETCDCTL_USER=NAME:PASSWORD`, PostgreSQL's `PGPASSWORD` and
/// password file, as libpq reads them; ZooKeeper's tools have none).
/// Without a user there is no password, and a `--password-file` is a
/// mistake. `None`: none was found, and what then is the store's to say
/// (etcd asks on a terminal, ZooKeeper refuses, PostgreSQL lets the server
/// say whether it wants one).
pub fn find_password(
    user: Option<&str>,
    file: Option<&Path>,
    url: Option<Secret>,
    var: impl Fn(&str) -> Option<String>,
    own: impl FnOnce() -> Option<Secret>,
) -> Result<Option<Secret>, StoreError> {
    if user.is_none() {
        return match file {
            Some(_) => Err(StoreError::config("--password-file needs --user")),
            None => Ok(None),
        };
    }
    if let Some(file) = file {
        return read_password(file).map(Some);
    }
    let env = || var("ELECT_PASSWORD").filter(|p| !p.is_empty()).map(Secret);
    Ok(url.or_else(env).or_else(own))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(
        user: Option<&str>,
        file: Option<&Path>,
        url: Option<&str>,
        env: Option<&str>,
        own: Option<&str>,
    ) -> Result<Option<String>, String> {
        let var = |name: &str| match name {
            "ELECT_PASSWORD" => env.map(str::to_string),
            _ => None,
        };
        let url = url.map(|p| Secret(p.into()));
        let own = || own.map(|p| Secret(p.into()));
        find_password(user, file, url, var, own)
            .map(|p| p.map(|p| p.0))
            .map_err(|e| e.message)
    }

    #[test]
    fn a_password_is_found_in_one_order_on_every_store() {
        let dir = std::env::temp_dir().join(format!("elect-password-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("pw");
        std::fs::write(&file, "from-file\n").unwrap();
        let u = Some("alice");
        let all = found(u, Some(&file), Some("url"), Some("env"), Some("own"));
        assert_eq!(all, Ok(Some("from-file".into())));
        let no_file = found(u, None, Some("url"), Some("env"), Some("own"));
        assert_eq!(no_file, Ok(Some("url".into())));
        assert_eq!(
            found(u, None, None, Some("env"), Some("own")),
            Ok(Some("env".into()))
        );
        assert_eq!(
            found(u, None, None, Some(""), Some("own")),
            Ok(Some("own".into()))
        );
        assert_eq!(found(u, None, None, None, None), Ok(None));
        // No user, no password; a file for none is a mistake.
        assert_eq!(
            found(None, None, Some("url"), Some("env"), Some("own")),
            Ok(None)
        );
        let lost = found(None, Some(&file), None, None, None);
        assert_eq!(lost, Err("--password-file needs --user".into()));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
