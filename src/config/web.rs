//! `http.web_config_file` (`vigil run --web.config.file`): TLS and basic auth on the HTTP
//! listener, in the web configuration format of the Prometheus exporter toolkit (YAML), so the
//! file node_exporter or Prometheus itself reads works here too. Read and checked whole at load
//! (certificates, key, client CAs, every bcrypt hash): a bad file is a config error naming the
//! file and the key, never a listener that fails on its first connection.

use crate::config::tls::load_certs;
use crate::config::{invalid, ConfigError};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use secrecy::SecretString;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The config key every error of the file is reported under.
const KEY: &str = "http.web_config_file";

/// The response headers `http_server_config.headers` may set (the exporter toolkit's list).
pub const HEADERS: [&str; 5] = [
    "Content-Security-Policy",
    "X-Frame-Options",
    "X-Content-Type-Options",
    "X-XSS-Protection",
    "Strict-Transport-Security",
];

/// The web configuration, validated.
#[derive(Clone)]
pub struct WebConfig {
    /// The file it was read from.
    pub file: PathBuf,
    /// The TLS server settings, when `tls_server_config` names a certificate.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// `tls_server_config.client_auth_type` as written (`NoClientCert` when unset).
    pub client_auth: String,
    /// `basic_auth_users`: user name → bcrypt hash (checked to parse at load).
    pub basic_auth_users: BTreeMap<String, SecretString>,
    /// `http_server_config.headers`: added to every response.
    pub headers: Vec<(String, String)>,
}

impl fmt::Debug for WebConfig {
    // The hashes stay out of logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebConfig")
            .field("file", &self.file)
            .field("tls", &self.tls.is_some())
            .field("client_auth", &self.client_auth)
            .field("basic_auth_users", &self.basic_auth_users.keys().collect::<Vec<_>>())
            .field("headers", &self.headers)
            .finish()
    }
}

/// The file as written. Unknown keys are refused, as the exporter toolkit refuses them.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawWeb {
    tls_server_config: Option<RawTls>,
    http_server_config: Option<RawHttpServer>,
    basic_auth_users: Option<BTreeMap<String, String>>,
    rate_limit: Option<serde_norway::Value>,
}

/// `tls_server_config`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawTls {
    cert: String,
    key: String,
    client_ca: String,
    cert_file: String,
    key_file: String,
    client_auth_type: String,
    client_ca_file: String,
    client_allowed_sans: Vec<String>,
    min_version: String,
    max_version: String,
    cipher_suites: Vec<String>,
    prefer_server_cipher_suites: Option<bool>,
    curve_preferences: Vec<String>,
}

/// `http_server_config`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawHttpServer {
    http2: Option<bool>,
    headers: BTreeMap<String, String>,
}

/// Reads and validates the web configuration file at `path`.
pub fn load(path: &Path) -> Result<WebConfig, ConfigError> {
    let fail = |message: String| invalid(KEY, format!("{}: {message}", path.display()));
    let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
    // An empty file is a valid YAML document with nothing set.
    let raw: RawWeb = match text.trim().is_empty() {
        true => RawWeb::default(),
        false => serde_path_to_error::deserialize(serde_norway::Deserializer::from_str(&text)).map_err(|e| {
            let at = e.path().to_string();
            let inner = e.into_inner().to_string();
            fail(if at == "." { inner } else { format!("{at}: {inner}") })
        })?,
    };
    // Relative paths in the file are relative to the file, as in the exporter toolkit.
    let dir = path.parent().unwrap_or(Path::new("."));
    validate(raw, dir).map_err(fail).map(|mut web| {
        web.file = path.to_path_buf();
        web
    })
}

fn validate(raw: RawWeb, dir: &Path) -> Result<WebConfig, String> {
    if raw.rate_limit.is_some() {
        return Err("rate_limit: not supported by vigil (its listener caps connections itself)".into());
    }
    let (tls, client_auth) = match raw.tls_server_config {
        Some(t) => tls(t, dir).map_err(|m| format!("tls_server_config.{m}"))?,
        None => (None, "NoClientCert".to_string()),
    };
    let mut basic_auth_users = BTreeMap::new();
    for (user, hash) in raw.basic_auth_users.unwrap_or_default() {
        if let Err(e) = hash.parse::<bcrypt::HashParts>() {
            return Err(format!("basic_auth_users.{user}: not a bcrypt hash ({e}); make one with `htpasswd -nBC 10 \"\" | tr -d ':\\n'`"));
        }
        basic_auth_users.insert(user, SecretString::from(hash));
    }
    let mut headers = Vec::new();
    let server = raw.http_server_config.unwrap_or_default();
    // `http2` is accepted for compatibility; vigil's listener speaks HTTP/1.1 only.
    let _ = server.http2;
    for (name, value) in server.headers {
        let Some(known) = HEADERS.iter().find(|h| h.eq_ignore_ascii_case(&name)) else {
            return Err(format!("http_server_config.headers.{name}: not one of {}", HEADERS.join(", ")));
        };
        let lower = value.to_ascii_lowercase();
        let allowed = match *known {
            "X-Frame-Options" => matches!(lower.as_str(), "" | "deny" | "sameorigin"),
            "X-Content-Type-Options" => matches!(lower.as_str(), "" | "nosniff"),
            _ => true,
        };
        if !allowed || value.parse::<http::HeaderValue>().is_err() {
            return Err(format!("http_server_config.headers.{name}: {value:?} is not an allowed value"));
        }
        if !value.is_empty() {
            headers.push((known.to_string(), value));
        }
    }
    Ok(WebConfig { file: PathBuf::new(), tls, client_auth, basic_auth_users, headers })
}

/// A path from the file, relative to the file's directory.
fn resolve(dir: &Path, file: &str) -> PathBuf {
    let p = Path::new(file);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        dir.join(p)
    }
}

/// PEM given inline (`inline_key`) or as a file (`file_key`), never both; `None` when neither.
fn pem_source<'a>(
    inline: &'a str,
    file: &'a str,
    inline_key: &str,
    file_key: &str,
) -> Result<Option<Result<&'a str, &'a str>>, String> {
    match (inline.trim().is_empty(), file.trim().is_empty()) {
        (false, false) => Err(format!("{file_key}: set either {inline_key} or {file_key}, not both")),
        (false, true) => Ok(Some(Ok(inline))),
        (true, false) => Ok(Some(Err(file))),
        (true, true) => Ok(None),
    }
}

fn certs_of(source: Result<&str, &str>, dir: &Path, key: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    match source {
        Err(file) => load_certs(&resolve(dir, file)).map_err(|m| format!("{key}: {m}")),
        Ok(pem) => {
            let certs: Vec<_> = CertificateDer::pem_slice_iter(pem.as_bytes())
                .collect::<Result<_, _>>()
                .map_err(|e| format!("{key}: {e}"))?;
            if certs.is_empty() {
                return Err(format!("{key}: no PEM certificate in it"));
            }
            Ok(certs)
        }
    }
}

/// `min_version` / `max_version` as a minor number (12, 13); unset is the toolkit's default.
fn version(key: &str, v: &str) -> Result<u8, String> {
    match v {
        "" if key == "min_version" => Ok(12),
        "" => Ok(13),
        "TLS12" => Ok(12),
        "TLS13" => Ok(13),
        "TLS10" | "TLS11" => Err(format!("{key}: {v} is not supported (vigil speaks TLS12 and TLS13)")),
        other => Err(format!("{key}: {other:?} is not one of TLS10, TLS11, TLS12, TLS13")),
    }
}

/// `tls_server_config` → the rustls server config (`None` when no certificate is named, as in
/// the exporter toolkit: plain HTTP) and the client auth type; errors start with the key.
fn tls(raw: RawTls, dir: &Path) -> Result<(Option<Arc<rustls::ServerConfig>>, String), String> {
    for (key, list) in [
        ("cipher_suites", &raw.cipher_suites),
        ("curve_preferences", &raw.curve_preferences),
        ("client_allowed_sans", &raw.client_allowed_sans),
    ] {
        if !list.is_empty() {
            return Err(format!("{key}: not supported by vigil (rustls chooses its own safe suites and groups)"));
        }
    }
    let client_auth = match raw.client_auth_type.trim() {
        "" => "NoClientCert".to_string(),
        other => other.to_string(),
    };
    let cert = pem_source(&raw.cert, &raw.cert_file, "cert", "cert_file")?;
    let key = pem_source(&raw.key, &raw.key_file, "key", "key_file")?;
    let client_ca = pem_source(&raw.client_ca, &raw.client_ca_file, "client_ca", "client_ca_file")?;
    let (cert, key) = match (cert, key) {
        (None, None) => return Ok((None, client_auth)),
        (Some(_), None) => return Err("key_file: missing (cert_file is set)".into()),
        (None, Some(_)) => return Err("cert_file: missing (key_file is set)".into()),
        (Some(c), Some(k)) => (c, k),
    };
    let chain = certs_of(cert, dir, "cert_file")?;
    let key: PrivateKeyDer<'static> = match key {
        Err(file) => {
            let path = resolve(dir, file);
            PrivateKeyDer::from_pem_file(&path).map_err(|e| format!("key_file: {}: {e}", path.display()))?
        }
        Ok(pem) => PrivateKeyDer::from_pem_slice(pem.as_bytes()).map_err(|e| format!("key: {e}"))?,
    };
    let min = version("min_version", raw.min_version.trim())?;
    let max = version("max_version", raw.max_version.trim())?;
    if min > max {
        return Err(format!("min_version: {} is above max_version {}", raw.min_version, raw.max_version));
    }
    let versions: Vec<&'static rustls::SupportedProtocolVersion> =
        [(12, &rustls::version::TLS12), (13, &rustls::version::TLS13)]
            .into_iter()
            .filter(|(v, _)| (min..=max).contains(v))
            .map(|(_, p)| p)
            .collect();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let roots = match client_ca {
        None => None,
        Some(source) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in certs_of(source, dir, "client_ca_file")? {
                roots.add(c).map_err(|e| format!("client_ca_file: {e}"))?;
            }
            Some(Arc::new(roots))
        }
    };
    let verifier = |roots: Option<Arc<rustls::RootCertStore>>, optional: bool| {
        let roots = roots.ok_or_else(|| {
            format!("client_ca_file: missing ({client_auth} needs the CA that signs client certificates)")
        })?;
        let builder = rustls::server::WebPkiClientVerifier::builder_with_provider(roots, provider.clone());
        let builder = if optional { builder.allow_unauthenticated() } else { builder };
        builder.build().map_err(|e| format!("client_ca_file: {e}"))
    };
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| format!("min_version: {e}"))?;
    let builder = match client_auth.as_str() {
        "NoClientCert" => {
            if roots.is_some() {
                return Err("client_ca_file: set, but client_auth_type is NoClientCert (use RequireAndVerifyClientCert)".into());
            }
            builder.with_no_client_auth()
        }
        "VerifyClientCertIfGiven" => builder.with_client_cert_verifier(verifier(roots, true)?),
        "RequireAndVerifyClientCert" => builder.with_client_cert_verifier(verifier(roots, false)?),
        "RequestClientCert" | "RequireAnyClientCert" => {
            return Err(format!(
                "client_auth_type: {client_auth} is not supported (it accepts unverified certificates); use RequireAndVerifyClientCert or VerifyClientCertIfGiven"
            ))
        }
        other => {
            return Err(format!(
                "client_auth_type: {other:?} is not one of NoClientCert, RequestClientCert, RequireAnyClientCert, VerifyClientCertIfGiven, RequireAndVerifyClientCert"
            ))
        }
    };
    let mut config = builder.with_single_cert(chain, key).map_err(|e| format!("key_file: {e}"))?;
    // The exporter toolkit's default: the server's preference among the suites both offer.
    config.ignore_client_order = raw.prefer_server_cipher_suites.unwrap_or(true);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((Some(Arc::new(config)), client_auth))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(yaml: &str) -> String {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("web.yml");
        std::fs::write(&path, yaml).expect("write");
        load(&path).expect_err("refused").to_string()
    }

    #[test]
    fn refusals_name_the_file_and_the_key() {
        let e = err("basic_auth_users:\n  alice: not-a-hash\n");
        assert!(
            e.starts_with("http.web_config_file: ") && e.contains("web.yml: basic_auth_users.alice: not a bcrypt hash"),
            "{e}"
        );
        let e = err("tls_server_config:\n  cert_file: nowhere.pem\n  key_file: nowhere.key\n");
        assert!(e.contains("tls_server_config.cert_file: ") && e.contains("nowhere.pem"), "{e}");
        let e = err("tls_server_config:\n  cert_file: a.pem\n");
        assert!(e.contains("tls_server_config.key_file: missing"), "{e}");
        let e = err("tls_server_confg:\n  cert_file: a.pem\n");
        assert!(e.contains("unknown field `tls_server_confg`"), "{e}");
        let e = err("tls_server_config:\n  min_version: TLS10\n  cert_file: a\n  key_file: b\n");
        assert!(e.contains("tls_server_config."), "{e}");
        let e = err("http_server_config:\n  headers:\n    X-Frame-Options: maybe\n");
        assert!(e.contains("http_server_config.headers.X-Frame-Options"), "{e}");
        let e = err("rate_limit:\n  interval: 1s\n  burst: 5\n");
        assert!(e.contains("rate_limit: not supported"), "{e}");
    }

    #[test]
    fn an_empty_file_and_basic_auth_alone_are_plain_http() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("web.yml");
        std::fs::write(&path, "").expect("write");
        let web = load(&path).expect("empty is fine");
        assert!(web.tls.is_none() && web.basic_auth_users.is_empty());
        let hash = bcrypt::hash("s3cret", 4).expect("hash");
        std::fs::write(&path, format!("basic_auth_users:\n  prometheus: '{hash}'\n")).expect("write");
        let web = load(&path).expect("valid");
        assert!(web.tls.is_none());
        assert_eq!(web.basic_auth_users.keys().collect::<Vec<_>>(), ["prometheus"]);
        assert!(!format!("{web:?}").contains(&hash), "no hash in Debug");
    }
}
