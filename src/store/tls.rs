//! A TLS handshake the server or elect refused, told apart and worded
//! alike on every store, from the TLS library's own error where the
//! store's client passes it on (a `rustls::Error` in its error's chain),
//! not from the words of a message.
//!
//! Every refusal is one of the server's: its certificate, or what it made
//! of ours, or that it speaks no TLS; none passes by trying again, so it
//! is said at once, and exits 69 (the store cannot be reached as given).
//! A local file that is not what its flag says is another matter, found
//! before anything is sent (exit 78: [`crate::store::secret`]).

use std::error::Error;
use std::fmt;

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{AlertDescription, CertificateError, DigitallySignedStruct, SignatureScheme};

use super::StoreError;

/// Why a TLS handshake failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// The server's certificate is signed by no CA elect trusts.
    UnknownCa,
    /// The server's certificate is refused otherwise: a name it lacks,
    /// expired, not for a server.
    Certificate,
    /// The server refused our client certificate, or wanted one.
    ClientCertificate,
    /// The server does not speak TLS there.
    NoTls,
    /// The handshake failed otherwise (no protocol or cipher in common).
    Handshake,
}

/// A refused TLS handshake: why, and the TLS library's words for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    pub why: Why,
    detail: String,
}

impl Refused {
    pub fn new(why: Why, detail: impl Into<String>) -> Refused {
        Refused {
            why,
            detail: detail.into(),
        }
    }

    /// The refusal in `error` or its sources, if one of them is the TLS
    /// library's error (also inside an I/O error, as TLS streams give it).
    pub fn in_chain(error: &(dyn Error + 'static)) -> Option<Refused> {
        let mut next = Some(error);
        while let Some(e) = next {
            let inner = e
                .downcast_ref::<std::io::Error>()
                .and_then(std::io::Error::get_ref)
                .and_then(|inner| inner.downcast_ref::<rustls::Error>());
            if let Some(tls) = e.downcast_ref::<rustls::Error>().or(inner) {
                return Some(Refused::of(tls));
            }
            next = e.source();
        }
        None
    }

    fn of(e: &rustls::Error) -> Refused {
        use rustls::Error as E;
        let why = match e {
            E::InvalidCertificate(CertificateError::UnknownIssuer) => Why::UnknownCa,
            E::InvalidCertificate(_) => Why::Certificate,
            E::AlertReceived(
                AlertDescription::BadCertificate
                | AlertDescription::CertificateRequired
                | AlertDescription::UnknownCA
                | AlertDescription::CertificateUnknown
                | AlertDescription::UnsupportedCertificate
                | AlertDescription::CertificateExpired
                | AlertDescription::CertificateRevoked
                | AlertDescription::AccessDenied,
            ) => Why::ClientCertificate,
            // What a server that answers in plain text looks like.
            E::InvalidMessage(_) | E::InappropriateMessage { .. } => Why::NoTls,
            _ => Why::Handshake,
        };
        Refused::new(why, e.to_string())
    }

    /// The one line for this refusal by the store shown as `shown`.
    pub fn error(&self, shown: &str) -> StoreError {
        StoreError::unavailable(format!("{shown}: {self}"))
    }
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let why = match self.why {
            Why::UnknownCa => {
                "the server's certificate is signed by no CA elect trusts (--cacert, else the \
                 system's roots)"
            }
            Why::Certificate => "the server's certificate does not fit (its name, its dates)",
            Why::ClientCertificate => {
                "the server does not accept this client certificate, or wants one (--cert, --key)"
            }
            Why::NoTls => "the server does not speak TLS there",
            Why::Handshake => "the server and elect have no TLS in common",
        };
        write!(f, "TLS handshake refused: {why} ({})", self.detail)
    }
}

/// A server's certificate taken unchecked, its handshake's signatures
/// still verified: what libpq's `prefer` and `require` without a CA mean,
/// and a kubeconfig's `insecure-skip-tls-verify`.
#[derive(Debug)]
pub struct Unchecked(pub Arc<CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn why_of(e: rustls::Error) -> Option<Why> {
        // As a TLS stream passes it on: inside an I/O error, under another.
        #[derive(Debug)]
        struct Outer(std::io::Error);
        impl fmt::Display for Outer {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("transport error")
            }
        }
        impl Error for Outer {
            fn source(&self) -> Option<&(dyn Error + 'static)> {
                Some(&self.0)
            }
        }
        let outer = Outer(std::io::Error::new(std::io::ErrorKind::InvalidData, e));
        Refused::in_chain(&outer).map(|r| r.why)
    }

    #[test]
    fn refusals_are_told_apart_by_the_tls_librarys_error_inside_the_chain() {
        use rustls::Error as E;
        let cert = |e| E::InvalidCertificate(e);
        assert_eq!(
            why_of(cert(CertificateError::UnknownIssuer)),
            Some(Why::UnknownCa)
        );
        assert_eq!(
            why_of(cert(CertificateError::NotValidForName)),
            Some(Why::Certificate)
        );
        assert_eq!(
            why_of(cert(CertificateError::Expired)),
            Some(Why::Certificate)
        );
        assert_eq!(
            why_of(E::AlertReceived(AlertDescription::CertificateRequired)),
            Some(Why::ClientCertificate)
        );
        assert_eq!(
            why_of(E::InvalidMessage(
                rustls::InvalidMessage::InvalidContentType
            )),
            Some(Why::NoTls)
        );
        assert_eq!(
            why_of(E::AlertReceived(AlertDescription::HandshakeFailure)),
            Some(Why::Handshake)
        );
        let plain = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        assert_eq!(Refused::in_chain(&plain), None, "no TLS error, no refusal");
    }

    #[test]
    fn a_refusal_is_one_line_naming_the_store_what_to_check_and_the_librarys_words() {
        let r = Refused::new(Why::UnknownCa, "invalid peer certificate: UnknownIssuer");
        let e = r.error("etcds://a:2379");
        assert_eq!(e.kind, crate::store::ErrorKind::Unavailable);
        assert_eq!(
            e.message,
            "etcds://a:2379: TLS handshake refused: the server's certificate is signed by no CA \
             elect trusts (--cacert, else the system's roots) (invalid peer certificate: \
             UnknownIssuer)"
        );
    }
}

/// Which part of a client's TLS set-up was bad, for the caller to name as
/// its flags or settings call it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// No protocol version the provider offers.
    Versions,
    /// A CA certificate.
    Ca,
    /// The client certificate.
    Cert,
    /// The client key.
    Key,
    /// The two together (a key that is not the certificate's).
    CertAndKey,
}

/// How the client checks the server's certificate.
pub enum Verifier {
    /// Against these roots, as WebPKI does.
    Roots(rustls::RootCertStore),
    /// Another way: a store's own rules, or not at all.
    Custom(Arc<dyn ServerCertVerifier>),
}

/// The provider every store's client uses.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The roots a server's certificate must lead to: the CA certificates in
/// `pem`, else the system's (those it cannot use are left out).
pub fn roots(pem: Option<&[u8]>) -> Result<rustls::RootCertStore, (Part, String)> {
    let mut roots = rustls::RootCertStore::empty();
    match pem {
        Some(pem) => {
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| (Part::Ca, e.to_string()))?;
                roots.add(cert).map_err(|e| (Part::Ca, e.to_string()))?;
            }
        }
        None => {
            for cert in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(cert);
            }
        }
    }
    Ok(roots)
}

/// A client's TLS configuration: the server checked by `verifier`, and
/// `client` (a certificate and its key, PEM) shown when the server asks.
pub fn client_config(
    provider: &Arc<CryptoProvider>,
    verifier: Verifier,
    client: Option<&(Vec<u8>, Vec<u8>)>,
) -> Result<rustls::ClientConfig, (Part, String)> {
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| (Part::Versions, e.to_string()))?;
    let builder = match verifier {
        Verifier::Roots(roots) => builder.with_root_certificates(roots),
        Verifier::Custom(verifier) => builder
            .dangerous()
            .with_custom_certificate_verifier(verifier),
    };
    match client {
        Some((cert, key)) => {
            let certs = CertificateDer::pem_slice_iter(cert)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| (Part::Cert, e.to_string()))?;
            let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(key)
                .map_err(|e| (Part::Key, e.to_string()))?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|e| (Part::CertAndKey, e.to_string()))
        }
        None => Ok(builder.with_no_client_auth()),
    }
}
