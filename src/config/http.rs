//! `[http]`: the listener, its bearer token and the export's signing key. The secrets are named
//! here (a variable or a file), read once at load, and never written back out.

use crate::config::env::secret_of;
use crate::config::{invalid, ConfigError, Env};
use secrecy::SecretString;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::Path;

/// `[http]`.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// Listen address.
    pub listen: SocketAddr,
    /// Bearer token for `/v1/*`, when its variable is set.
    pub api_token: Option<SecretString>,
    /// Name of the variable holding the token.
    pub api_token_env: String,
    /// Ed25519 seed (base64 of 32 bytes) that signs the router export, when its variable is named.
    pub signing_key: Option<SecretString>,
    /// Name of the variable holding the signing key (`http.signing_key_env`).
    pub signing_key_env: Option<String>,
    /// TLS and basic auth on the listener (`http.web_config_file`, `run --web.config.file`).
    pub web: Option<crate::config::web::WebConfig>,
}

/// `[http]` as written.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawHttp {
    listen: String,
    api_token_env: String,
    signing_key_env: String,
    api_token_file: String,
    signing_key_file: String,
    web_config_file: String,
}

impl Default for RawHttp {
    fn default() -> Self {
        RawHttp {
            listen: "127.0.0.1:9470".into(),
            api_token_env: "VIGIL_API_TOKEN".into(),
            signing_key_env: String::new(),
            api_token_file: String::new(),
            signing_key_file: String::new(),
            web_config_file: String::new(),
        }
    }
}

/// `[http]`, validated, its secrets read from `env` or their files.
pub(super) fn validate(raw: RawHttp, env: &dyn Env) -> Result<HttpConfig, ConfigError> {
    Ok(HttpConfig {
        listen: raw
            .listen
            .parse()
            .map_err(|_| invalid("http.listen", format!("{:?} is not host:port (e.g. 127.0.0.1:9470)", raw.listen)))?,
        // A file, when given, replaces the default variable.
        api_token: match raw.api_token_file.trim() {
            "" => secret_of(env, "http.api_token", Some(raw.api_token_env.as_str()), None)?,
            file => secret_of(env, "http.api_token", None, Some(file))?,
        },
        api_token_env: raw.api_token_env,
        signing_key: match raw.signing_key_file.trim() {
            "" => crate::config::signing_key::key_from_env(&raw.signing_key_env, env)?,
            file if raw.signing_key_env.trim().is_empty() => {
                Some(crate::config::signing_key::key_from_file(Path::new(file))?)
            }
            _ => {
                return Err(invalid(
                    "http.signing_key_file",
                    "set either http.signing_key_env or http.signing_key_file, not both",
                ))
            }
        },
        signing_key_env: Some(raw.signing_key_env).filter(|v| !v.is_empty()),
        web: match raw.web_config_file.trim() {
            "" => None,
            file => Some(crate::config::web::load(Path::new(file))?),
        },
    })
}
