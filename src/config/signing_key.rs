//! The export's Ed25519 signing key, read at config load from a variable or a file.

use crate::config::{ConfigError, Env};
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use base64::Engine;
use secrecy::SecretString;

/// The 32-byte seed in `text` (base64, padded or not), if that is what it holds.
pub(crate) fn decode_seed(text: &str) -> Option<[u8; 32]> {
    let t = text.trim();
    let bytes = STANDARD.decode(t).or_else(|_| STANDARD_NO_PAD.decode(t)).ok()?;
    bytes.try_into().ok()
}

/// The seed from the variable named by `http.signing_key_env` (`""`: signing off); a named but
/// unset variable or a seed that is not base64 of 32 bytes is a config error.
pub fn key_from_env(var: &str, env: &dyn Env) -> Result<Option<SecretString>, ConfigError> {
    if var.is_empty() {
        return Ok(None);
    }
    let key = "http.signing_key_env".to_string();
    let Some(value) = env.get_or_file(var)? else {
        return Err(ConfigError::Invalid { key, message: format!("environment variable {var} is not set") });
    };
    if decode_seed(&value).is_none() {
        return Err(ConfigError::Invalid {
            key,
            message: format!("{var} must hold an Ed25519 seed: 32 bytes, base64 (e.g. `openssl rand -base64 32`)"),
        });
    }
    Ok(Some(SecretString::from(value)))
}

/// The seed in the file `http.signing_key_file` names; an unreadable file or a seed that is not
/// base64 of 32 bytes is a config error naming the key and the path.
pub fn key_from_file(path: &std::path::Path) -> Result<SecretString, ConfigError> {
    let key = "http.signing_key_file".to_string();
    let value =
        crate::config::secret_file::read(path).map_err(|message| ConfigError::Invalid { key: key.clone(), message })?;
    if decode_seed(&value).is_none() {
        return Err(ConfigError::Invalid {
            key,
            message: format!("{} must hold an Ed25519 seed: 32 bytes, base64", path.display()),
        });
    }
    Ok(SecretString::from(value))
}
