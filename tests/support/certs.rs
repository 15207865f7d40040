//! Certificates made at test time with the openssl command: a CA, a server
//! certificate for 127.0.0.1, a client certificate, and a second CA with a
//! client certificate of its own that the server must not accept.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use super::TempDir;

#[derive(Clone)]
pub struct Certs {
    _dir: Arc<TempDir>,
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    /// A CA that signed neither the server's nor the client's certificate.
    pub other_ca: PathBuf,
    pub other_client_cert: PathBuf,
    pub other_client_key: PathBuf,
    /// A client certificate of X.509 version 1, signed by `ca`.
    pub v1_client_cert: PathBuf,
    pub v1_client_key: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("`openssl` not found: install Debian's openssl package");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A self-signed CA `name.crt`/`name.key`.
fn ca(dir: &Path, name: &str) {
    let (crt, key) = (format!("{name}.crt"), format!("{name}.key"));
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &crt,
            "-days",
            "2",
            "-subj",
            &format!("/CN={name}"),
        ],
    );
}

/// `name.crt`/`name.key` signed by `ca`, with the given extensions.
fn leaf(dir: &Path, ca: &str, name: &str, extensions: &str) {
    let ext = format!("{name}.ext");
    std::fs::write(dir.join(&ext), extensions).unwrap();
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
            "-subj",
            &format!("/CN={name}"),
        ],
    );
    // Without extensions, `openssl x509 -req` makes an X.509 v1 certificate.
    let (csr, crt) = (format!("{name}.csr"), format!("{name}.crt"));
    let (ca_crt, ca_key) = (format!("{ca}.crt"), format!("{ca}.key"));
    let mut args = vec![
        "x509",
        "-req",
        "-in",
        &csr,
        "-CA",
        &ca_crt,
        "-CAkey",
        &ca_key,
        "-CAcreateserial",
        "-out",
        &crt,
        "-days",
        "2",
    ];
    if !extensions.is_empty() {
        args.extend(["-extfile", &ext]);
    }
    openssl(dir, &args);
}

pub fn generate(name: &str) -> Certs {
    let dir = TempDir::new(&format!("certs-{name}"));
    ca(&dir.0, "ca");
    leaf(
        &dir.0,
        "ca",
        "server",
        "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n",
    );
    leaf(&dir.0, "ca", "client", "extendedKeyUsage=clientAuth\n");
    leaf(&dir.0, "ca", "v1-client", "");
    ca(&dir.0, "other-ca");
    leaf(
        &dir.0,
        "other-ca",
        "other-client",
        "extendedKeyUsage=clientAuth\n",
    );
    let p = |f: &str| dir.join(f);
    Certs {
        ca: p("ca.crt"),
        server_cert: p("server.crt"),
        server_key: p("server.key"),
        client_cert: p("client.crt"),
        client_key: p("client.key"),
        other_ca: p("other-ca.crt"),
        other_client_cert: p("other-client.crt"),
        other_client_key: p("other-client.key"),
        v1_client_cert: p("v1-client.crt"),
        v1_client_key: p("v1-client.key"),
        _dir: Arc::new(dir),
    }
}
