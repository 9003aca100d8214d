//! The cloud kinds' own `[[provider]]` keys: Bedrock's `region`, `profile` and
//! `credentials_file` (an AWS shared credentials file), Vertex's `credentials_file` (a
//! service-account JSON key), `project` and `location`. Checked at load, so a Bedrock provider
//! without a region or a Vertex key file that is unreadable, not a service-account key or holds
//! no usable RSA key fails naming `provider[i].<key>`; each kind's default `base_url` is derived
//! here from its region or location.
//!
//! AWS credentials themselves are looked up when a probe runs (they rotate: session tokens
//! expire, `aws sso`/`aws configure export-credentials` rewrite the file), not here.

use crate::config::kind::ProviderKind;
use crate::config::{invalid, ConfigError};
use secrecy::{ExposeSecret, SecretString};
use std::path::PathBuf;
use url::Url;

/// How a cloud provider authenticates and where it lives; [`CloudAuth::None`] for the API-key kinds.
#[derive(Debug, Clone, Default)]
pub enum CloudAuth {
    /// Not a cloud kind: the key (if any) is `api_key`.
    #[default]
    None,
    /// `kind = "bedrock"`.
    Bedrock(BedrockConfig),
    /// `kind = "vertex"`.
    Vertex(VertexConfig),
}

/// Bedrock's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct BedrockConfig {
    /// AWS region (`us-east-1`): the signing scope and the default endpoint.
    pub region: String,
    /// Profile of the shared credentials file (`profile`; else `AWS_PROFILE`, else `default`).
    pub profile: Option<String>,
    /// The shared credentials file named in the config; when set, it is the only source.
    pub credentials_file: Option<PathBuf>,
}

/// Vertex AI's settings, the service account read and checked at load.
#[derive(Debug, Clone)]
pub struct VertexConfig {
    /// Google Cloud project (`project`, else the key file's `project_id`).
    pub project: String,
    /// Location (`us-central1`, `europe-west4`, `global`).
    pub location: String,
    /// The service-account key file.
    pub credentials_file: PathBuf,
    /// What the key file holds.
    pub account: ServiceAccount,
}

/// The parts of a service-account JSON key that mint a token.
#[derive(Debug, Clone)]
pub struct ServiceAccount {
    /// `client_email`: the JWT's issuer.
    pub client_email: String,
    /// `private_key_id`: the JWT header's `kid`.
    pub private_key_id: Option<String>,
    /// `private_key`: a PKCS#8 RSA key in PEM.
    pub private_key: SecretString,
    /// `token_uri`: where the signed JWT is exchanged for an access token.
    pub token_uri: Url,
}

/// Token endpoint used when a key file names none.
pub const GOOGLE_TOKEN_URI: &str = "https://oauth2.googleapis.com/token";

/// The cloud keys of one `[[provider]]` as written.
#[derive(Debug, Default)]
pub(super) struct RawCloud {
    pub(super) region: Option<String>,
    pub(super) profile: Option<String>,
    pub(super) credentials_file: Option<String>,
    pub(super) project: Option<String>,
    pub(super) location: Option<String>,
}

/// Provider `i`'s cloud settings and its default base URL; keys that belong to another kind are refused.
pub(super) fn validate(i: usize, kind: ProviderKind, raw: RawCloud) -> Result<(CloudAuth, Option<Url>), ConfigError> {
    let key = |field: &str| format!("provider[{i}].{field}");
    let foreign = |field: &str, set: bool| -> Result<(), ConfigError> {
        if set {
            return Err(invalid(key(field), format!("kind = \"{}\" has no {field}", kind.as_str())));
        }
        Ok(())
    };
    match kind {
        ProviderKind::Bedrock => {
            foreign("project", raw.project.is_some())?;
            foreign("location", raw.location.is_some())?;
            let region = raw.region.ok_or_else(|| invalid(key("region"), "missing: Bedrock needs its AWS region"))?;
            let region = name(&key("region"), region)?;
            let profile = raw.profile.map(|p| printable(&key("profile"), p)).transpose()?;
            let credentials_file = raw.credentials_file.map(|f| path(&key("credentials_file"), f)).transpose()?;
            let url = Url::parse(&format!("https://bedrock-runtime.{region}.amazonaws.com"))
                .map_err(|e| invalid(key("region"), e.to_string()))?;
            Ok((CloudAuth::Bedrock(BedrockConfig { region, profile, credentials_file }), Some(url)))
        }
        ProviderKind::Vertex => {
            foreign("region", raw.region.is_some())?;
            foreign("profile", raw.profile.is_some())?;
            let file = raw.credentials_file.ok_or_else(|| {
                invalid(key("credentials_file"), "missing: Vertex needs a service-account JSON key file")
            })?;
            let credentials_file = path(&key("credentials_file"), file)?;
            let (account, project_id) = read_account(&key("credentials_file"), &credentials_file)?;
            let project = match raw.project {
                Some(p) => project(&key("project"), p)?,
                None => project_id
                    .ok_or_else(|| invalid(key("project"), "missing, and the credentials file has no project_id"))?,
            };
            let location = name(&key("location"), raw.location.unwrap_or_else(|| "us-central1".into()))?;
            let host = if location == "global" {
                "aiplatform.googleapis.com".to_string()
            } else {
                format!("{location}-aiplatform.googleapis.com")
            };
            let url = Url::parse(&format!("https://{host}/v1")).map_err(|e| invalid(key("location"), e.to_string()))?;
            Ok((CloudAuth::Vertex(VertexConfig { project, location, credentials_file, account }), Some(url)))
        }
        _ => {
            for (field, set) in [
                ("region", raw.region.is_some()),
                ("profile", raw.profile.is_some()),
                ("credentials_file", raw.credentials_file.is_some()),
                ("project", raw.project.is_some()),
                ("location", raw.location.is_some()),
            ] {
                if set {
                    return Err(invalid(key(field), format!("only kind = \"bedrock\" or \"vertex\" takes {field}")));
                }
            }
            Ok((CloudAuth::None, None))
        }
    }
}

/// A region or location: lower-case letters, digits and hyphens (it becomes part of a host name).
fn name(key: &str, v: String) -> Result<String, ConfigError> {
    let ok =
        !v.is_empty() && v.len() <= 40 && v.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !ok {
        return Err(invalid(key, format!("{v:?} is not a region name (lower-case letters, digits and hyphens)")));
    }
    Ok(v)
}

/// A project id: letters, digits, hyphens, and the dot and colon of domain-scoped projects.
fn project(key: &str, v: String) -> Result<String, ConfigError> {
    let ok = !v.is_empty() && v.len() <= 100 && v.bytes().all(|b| b.is_ascii_alphanumeric() || b"-.:".contains(&b));
    if !ok {
        return Err(invalid(key, format!("{v:?} is not a Google Cloud project id")));
    }
    Ok(v)
}

fn printable(key: &str, v: String) -> Result<String, ConfigError> {
    if v.trim().is_empty() || v.chars().any(|c| c.is_control() || c == '[' || c == ']') {
        return Err(invalid(key, "must be a non-empty profile name without brackets or control characters"));
    }
    Ok(v)
}

fn path(key: &str, v: String) -> Result<PathBuf, ConfigError> {
    if v.trim().is_empty() {
        return Err(invalid(key, "must not be empty"));
    }
    Ok(PathBuf::from(v))
}

/// Reads and checks a service-account key file; errors name the path and what is wrong, never
/// the file's content.
fn read_account(key: &str, path: &std::path::Path) -> Result<(ServiceAccount, Option<String>), ConfigError> {
    let text = crate::config::secret_file::read_document(path).map_err(|e| invalid(key, e))?;
    let shown = path.display();
    let v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| invalid(key, format!("{shown} is not JSON (line {}, column {})", e.line(), e.column())))?;
    let field = |name: &str| v.get(name).and_then(serde_json::Value::as_str).map(str::to_string);
    if field("type").as_deref() != Some("service_account") {
        return Err(invalid(
            key,
            format!("{shown} is not a service-account key (\"type\": \"service_account\"); user credentials are not supported"),
        ));
    }
    let missing = |name: &str| invalid(key, format!("{shown} has no {name}"));
    let client_email = field("client_email").filter(|e| !e.is_empty()).ok_or_else(|| missing("client_email"))?;
    let private_key = SecretString::from(field("private_key").ok_or_else(|| missing("private_key"))?);
    rsa_key_der(private_key.expose_secret())
        .and_then(|der| ring::signature::RsaKeyPair::from_pkcs8(&der).map(|_| ()).map_err(|e| e.to_string()))
        .map_err(|e| invalid(key, format!("{shown}: private_key is not a usable PKCS#8 RSA key ({e})")))?;
    let token_uri = field("token_uri").unwrap_or_else(|| GOOGLE_TOKEN_URI.to_string());
    let token_uri = Url::parse(&token_uri)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https"))
        .ok_or_else(|| invalid(key, format!("{shown}: token_uri is not an http(s) URL")))?;
    let account = ServiceAccount { client_email, private_key_id: field("private_key_id"), private_key, token_uri };
    Ok((account, field("project_id").filter(|p| !p.is_empty())))
}

/// The DER bytes of a PEM `PRIVATE KEY` block (PKCS#8), or why not.
pub fn rsa_key_der(pem: &str) -> Result<Vec<u8>, String> {
    use base64::Engine;
    const BEGIN: &str = "-----BEGIN PRIVATE KEY-----";
    const END: &str = "-----END PRIVATE KEY-----";
    let start = pem.find(BEGIN).ok_or("no -----BEGIN PRIVATE KEY----- block")? + BEGIN.len();
    let len = pem[start..].find(END).ok_or("no -----END PRIVATE KEY----- line")?;
    let body: String = pem[start..start + len].chars().filter(|c| !c.is_whitespace()).collect();
    base64::engine::general_purpose::STANDARD.decode(body).map_err(|_| "the PEM block is not base64".to_string())
}

impl CloudAuth {
    /// Key of cached credentials: a changed region, profile, file or account mints anew.
    pub fn cache_key(&self) -> String {
        match self {
            CloudAuth::None => String::new(),
            CloudAuth::Bedrock(b) => format!("bedrock\0{}\0{:?}\0{:?}", b.region, b.profile, b.credentials_file),
            CloudAuth::Vertex(v) => {
                format!("vertex\0{}\0{}\0{}", v.credentials_file.display(), v.account.client_email, v.account.token_uri)
            }
        }
    }
}
