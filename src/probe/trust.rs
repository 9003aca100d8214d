//! Whom the probes trust and how they prove who they are: the system's root store plus the
//! built-in Mozilla roots plus `ca_file` (global and per provider), and a client certificate
//! (`client_cert_file`/`client_key_file`) for mTLS gateways.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use tokio_rustls::TlsConnector;

/// A client certificate chain and its key, read at config load.
#[derive(Clone)]
pub struct ClientIdentity {
    /// Where the chain was read from.
    pub cert_file: PathBuf,
    /// Where the key was read from.
    pub key_file: PathBuf,
    /// The chain, leaf first.
    pub chain: Vec<CertificateDer<'static>>,
    key: Arc<PrivateKeyDer<'static>>,
}

impl fmt::Debug for ClientIdentity {
    // The key never reaches a log or `check-config`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientIdentity")
            .field("cert_file", &self.cert_file)
            .field("key_file", &self.key_file)
            .field("key", &"<redacted>")
            .finish()
    }
}

/// A provider's own trust settings; empty means the prober's shared ones.
#[derive(Debug, Clone, Default)]
pub struct ProviderTls {
    /// `ca_file`, when set.
    pub ca_file: Option<PathBuf>,
    /// Its certificates.
    pub ca_certs: Vec<CertificateDer<'static>>,
    /// `client_cert_file` + `client_key_file`.
    pub client: Option<ClientIdentity>,
}

impl ProviderTls {
    /// True when the provider needs a connector of its own.
    pub fn is_custom(&self) -> bool {
        !self.ca_certs.is_empty() || self.client.is_some()
    }
}

/// Every certificate in a PEM file; an unreadable file or one without certificates is an error.
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let iter = CertificateDer::pem_file_iter(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let certs: Vec<_> = iter.collect::<Result<_, _>>().map_err(|e| format!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no PEM certificate in it", path.display()));
    }
    Ok(certs)
}

/// A client identity from a PEM chain and a PEM key (PKCS#8, PKCS#1 or SEC1).
pub fn load_identity(cert_file: &Path, key_file: &Path) -> Result<ClientIdentity, String> {
    let chain = load_certs(cert_file)?;
    let key = PrivateKeyDer::from_pem_file(key_file).map_err(|e| format!("{}: {e}", key_file.display()))?;
    Ok(ClientIdentity {
        cert_file: cert_file.to_path_buf(),
        key_file: key_file.to_path_buf(),
        chain,
        key: Arc::new(key),
    })
}

/// The operating system's trusted roots, read once; unreadable ones are skipped (logged).
pub fn system_roots() -> &'static [CertificateDer<'static>] {
    static ROOTS: OnceLock<Vec<CertificateDer<'static>>> = OnceLock::new();
    ROOTS.get_or_init(|| {
        let found = rustls_native_certs::load_native_certs();
        for e in &found.errors {
            tracing::info!(error = %e, "a system root certificate could not be read");
        }
        found.certs
    })
}

/// A TLS client trusting the system store, the built-in roots and `extra`, presenting `client`.
pub fn connector(extra: &[CertificateDer<'static>], client: Option<&ClientIdentity>) -> Result<TlsConnector, String> {
    client_config(extra, client).map(|config| TlsConnector::from(Arc::new(config)))
}

/// The TLS settings of [`connector`], for clients that take a `rustls::ClientConfig` (the
/// models-list poller's reqwest client trusts and presents exactly what the probes do).
pub fn client_config(
    extra: &[CertificateDer<'static>],
    client: Option<&ClientIdentity>,
) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
    // System stores hold odd certificates (expired, unsupported algorithms); skipping them is
    // what every client does.
    let _ = roots.add_parsable_certificates(system_roots().iter().cloned());
    for cert in extra {
        roots.add(cert.clone()).map_err(|e| format!("CA certificate refused: {e}"))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
    let mut config = match client {
        Some(id) => builder
            .with_client_auth_cert(id.chain.clone(), id.key.clone_key())
            .map_err(|e| format!("client certificate {}: {e}", id.cert_file.display()))?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    // Resumption would skip the full handshake and hide the TLS cost a new client pays.
    config.resumption = rustls::client::Resumption::disabled();
    Ok(config)
}
