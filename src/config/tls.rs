//! Certificates read at config load: extra roots (`ca_file`) and client identities for mTLS.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A client certificate chain and its key, read at config load.
#[derive(Clone)]
pub struct ClientIdentity {
    /// Where the chain was read from.
    pub cert_file: PathBuf,
    /// Where the key was read from.
    pub key_file: PathBuf,
    /// The chain, leaf first.
    pub chain: Vec<CertificateDer<'static>>,
    pub(crate) key: Arc<PrivateKeyDer<'static>>,
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
