//! Whom the probes trust and how they prove who they are: the system's root store plus the
//! built-in Mozilla roots plus `ca_file` (global and per provider), and a client certificate
//! (`client_cert_file`/`client_key_file`) for mTLS gateways.

use crate::config::tls::ClientIdentity;
use rustls::pki_types::CertificateDer;
use std::sync::{Arc, OnceLock};
use tokio_rustls::TlsConnector;

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
