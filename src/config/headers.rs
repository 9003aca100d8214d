//! A provider's extra request headers. Anything that looks like a credential must come from the
//! environment or a file (`headers_env`, `headers_file`), never inline, and every value must be
//! valid on the wire, because these bytes go straight into requests and must never be printed.

use crate::config::parse::no_controls;
use crate::config::{invalid, ConfigError, Env};
use secrecy::SecretString;
use std::collections::BTreeMap;
use std::path::Path;

/// One `headers_env` entry: a request header whose value is a secret read from a variable.
#[derive(Debug, Clone)]
pub struct SecretHeader {
    /// Header name (`api-key`).
    pub name: String,
    /// Variable the value was read from (`headers_env`); empty when read from a file (`headers_file`).
    pub env: String,
    /// The value.
    pub value: SecretString,
}

/// Whether a header name looks like it carries a credential, so its value must come from
/// `headers_env`, never inline: `authorization`, `api-key`, `x-api-key`, `cookie`, and any name
/// containing `token`, `secret`, `key`, `auth` or `password`.
pub fn secret_header_name(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n == "cookie" || ["token", "secret", "key", "auth", "password", "signature"].iter().any(|w| n.contains(w))
}

/// Header names and values must be valid HTTP without control characters; names that look like
/// they carry a credential must come from `headers_env`, never inline.
pub(super) fn validate(
    i: usize,
    headers: &BTreeMap<String, String>,
    headers_env: &BTreeMap<String, String>,
    headers_file: &BTreeMap<String, String>,
) -> Result<(), ConfigError> {
    for (name, value) in headers {
        let key = format!("provider[{i}].headers.{name}");
        if ::http::HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err(invalid(key, "is not a valid HTTP header name"));
        }
        if secret_header_name(name) {
            return Err(invalid(
                key,
                format!(
                    "looks like a secret and must not be inline: name the variable that holds it with \
                     headers_env = {{ \"{name}\" = \"SOME_VARIABLE\" }}"
                ),
            ));
        }
        no_controls(&key, value)?;
        if ::http::HeaderValue::from_str(value).is_err() {
            return Err(invalid(key, "is not a valid HTTP header value"));
        }
        if headers_env.keys().any(|n| n.eq_ignore_ascii_case(name)) {
            return Err(invalid(key, "is also set in headers_env"));
        }
        if headers_file.keys().any(|n| n.eq_ignore_ascii_case(name)) {
            return Err(invalid(key, "is also set in headers_file"));
        }
    }
    for (name, path) in headers_file {
        let key = format!("provider[{i}].headers_file.{name}");
        if ::http::HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err(invalid(key, "is not a valid HTTP header name"));
        }
        if headers_env.keys().any(|n| n.eq_ignore_ascii_case(name)) {
            return Err(invalid(key, "is also set in headers_env"));
        }
        if path.trim().is_empty() {
            return Err(invalid(key, "must name a file"));
        }
    }
    for (name, var) in headers_env {
        let key = format!("provider[{i}].headers_env.{name}");
        if ::http::HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err(invalid(key, "is not a valid HTTP header name"));
        }
        if var.trim().is_empty() || var.chars().any(|c| c.is_control() || c == '=') {
            return Err(invalid(key, "must name an environment variable"));
        }
    }
    Ok(())
}

/// The values of provider `i`'s `headers_env` (read from `env`) and `headers_file` headers;
/// a missing or unusable value is an error that names the header, never echoing the value.
pub(super) fn read_secrets(
    i: usize,
    headers_env: &BTreeMap<String, String>,
    headers_file: &BTreeMap<String, String>,
    env: &dyn Env,
) -> Result<Vec<SecretHeader>, ConfigError> {
    let mut secret_headers = Vec::new();
    let from_env = headers_env.iter().map(|(n, var)| (n, "headers_env", var, env.get_or_file(var)));
    let from_file = headers_file.iter().map(|(n, path)| {
        let value = crate::config::secret_file::read(Path::new(path))
            .map(Some)
            .map_err(|m| invalid(format!("provider[{i}].headers_file.{n}"), m));
        (n, "headers_file", path, value)
    });
    for (name, field, source, value) in from_env.chain(from_file) {
        let hkey = format!("provider[{i}].{field}.{name}");
        let value = value?
            .ok_or_else(|| invalid(&hkey, format!("environment variable {source} is not set (nor {source}_FILE)")))?;
        // The value goes onto the wire as a header: refuse CR/LF without echoing the secret.
        if value.chars().any(|c| c.is_control()) || ::http::HeaderValue::from_str(&value).is_err() {
            return Err(invalid(
                hkey,
                format!("the value of {source} is not a valid header value (control characters?)"),
            ));
        }
        secret_headers.push(SecretHeader {
            name: name.clone(),
            env: if field == "headers_env" { source.clone() } else { String::new() },
            value: SecretString::from(value),
        });
    }
    Ok(secret_headers)
}

#[cfg(test)]
mod tests {
    use crate::config::test_util::{env, err_at};
    use crate::config::Config;
    use secrecy::ExposeSecret;

    #[test]
    fn secret_headers_come_from_the_environment_and_are_never_printed() {
        let p = |extra: &str| {
            format!("[[provider]]\nname = \"azure\"\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1\"\napi_key_env = \"K\"\nmodels = [\"a\"]\n{extra}")
        };
        let k = ("K", "sk-test-k");
        for name in ["api-key", "Authorization", "x-api-key", "X-Auth-Token", "x-client-secret", "x-goog-api-key"] {
            let e = err_at(
                &p(&format!("headers = {{ \"{name}\" = \"inline-secret-value\" }}")),
                &[k],
                &format!("provider[0].headers.{name}"),
            );
            assert!(e.contains("headers_env"), "{e}");
            assert!(!e.contains("inline-secret-value"), "the error echoes the secret: {e}");
        }
        let ok = p("headers = { \"HTTP-Referer\" = \"https://example.com\" }\nheaders_env = { \"api-key\" = \"AZURE_OPENAI_API_KEY\" }");
        let c = Config::from_toml(&ok, &env(&[k, ("AZURE_OPENAI_API_KEY", "azure-secret-0123456789")])).expect("valid");
        let h = &c.providers[0].secret_headers;
        assert_eq!((h[0].name.as_str(), h[0].env.as_str()), ("api-key", "AZURE_OPENAI_API_KEY"));
        assert_eq!(h[0].value.expose_secret(), "azure-secret-0123456789");
        let shown = c.redacted_toml();
        assert!(!shown.contains("azure-secret-0123456789"), "{shown}");
        assert!(shown.contains("AZURE_OPENAI_API_KEY"), "{shown}");
        assert!(!format!("{c:?}").contains("azure-secret-0123456789"), "Debug shows the secret");
        let e = err_at(&ok, &[k], "provider[0].headers_env.api-key");
        assert!(e.contains("AZURE_OPENAI_API_KEY is not set"), "{e}");
        let e =
            err_at(&ok, &[k, ("AZURE_OPENAI_API_KEY", "azure-secret\r\nX-Evil: 1")], "provider[0].headers_env.api-key");
        assert!(!e.contains("azure-secret"), "{e}");
    }
}
