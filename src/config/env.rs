//! The environment: `VIGIL_*` overrides of every scalar, and secrets read from variables, their
//! `_FILE` twins or files named in the config. Injected as a trait so tests never touch the
//! process environment, and so every secret read has one place that names the key at fault.

use crate::config::toml_doc::{merge, table_mut};
use crate::config::{invalid, ConfigError, RawConfig};
use secrecy::SecretString;
use std::collections::BTreeMap;
use std::path::Path;

/// Reads environment variables; injected so tests need not touch the process environment.
pub trait Env {
    /// Value of `name`, if set and non-empty.
    fn get(&self, name: &str) -> Option<String>;

    /// Value of `name`, or the content of the file named by `<name>_FILE` (trailing newline
    /// removed); an unreadable file is an error naming `<name>_FILE` and the path. Setting
    /// both is refused: which one wins would be a guess.
    fn get_or_file(&self, name: &str) -> Result<Option<String>, ConfigError> {
        let file_var = format!("{name}_FILE");
        match (self.get(name), self.get(&file_var)) {
            (Some(_), Some(_)) => Err(invalid(file_var, format!("set either {name} or {name}_FILE, not both"))),
            (Some(v), None) => Ok(Some(v)),
            (None, Some(path)) => {
                crate::config::secret_file::read(Path::new(&path)).map(Some).map_err(|m| invalid(file_var, m))
            }
            (None, None) => Ok(None),
        }
    }
}

/// The process environment.
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn get(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.is_empty())
    }
}

impl Env for BTreeMap<String, String> {
    fn get(&self, name: &str) -> Option<String> {
        BTreeMap::get(self, name).cloned().filter(|v| !v.is_empty())
    }
}

/// A secret named by `<key>_env` (a variable, or the file its `_FILE` twin names) or by
/// `<key>_file` (a path); `None` when neither is given or the variable is unset. Errors name
/// the key and the path, never the content.
pub(super) fn secret_of(
    env: &dyn Env,
    key: &str,
    var: Option<&str>,
    file: Option<&str>,
) -> Result<Option<SecretString>, ConfigError> {
    let var = var.filter(|v| !v.trim().is_empty());
    match (var, file.filter(|f| !f.trim().is_empty())) {
        (Some(_), Some(_)) => {
            Err(invalid(format!("{key}_file"), format!("set either {key}_env or {key}_file, not both")))
        }
        (None, Some(path)) => crate::config::secret_file::read(Path::new(path))
            .map(|v| Some(SecretString::from(v)))
            .map_err(|m| invalid(format!("{key}_file"), m)),
        (Some(var), None) => Ok(env.get_or_file(var)?.map(SecretString::from)),
        (None, None) => Ok(None),
    }
}

/// [`secret_of`] for a secret that must be given.
pub(super) fn secret_from(
    env: &dyn Env,
    key: &str,
    var: Option<&str>,
    file: Option<&str>,
) -> Result<SecretString, ConfigError> {
    secret_of(env, key, var, file)?.ok_or_else(|| match var.filter(|v| !v.trim().is_empty()) {
        Some(var) => invalid(format!("{key}_env"), format!("environment variable {var} is not set (nor {var}_FILE)")),
        None => invalid(
            format!("{key}_env"),
            format!("missing: name the variable ({key}_env) or the file ({key}_file) that holds it"),
        ),
    })
}

/// Every scalar in the defaults becomes overridable by `VIGIL_<PATH>`; the value is parsed as
/// the type the default has, so `VIGIL_PROBE_CONCURRENCY=abc` is rejected naming the variable.
pub(super) fn apply_overrides(doc: &mut toml::Table, env: &dyn Env) -> Result<(), ConfigError> {
    let defaults = toml::Table::try_from(RawConfig::default()).map_err(|e| invalid("config", e.to_string()))?;
    if let Some(url) = env.get_or_file("DATABASE_URL")? {
        table_mut(doc, "storage").insert("url".into(), toml::Value::String(url));
    }
    override_scalars(doc, &defaults, "VIGIL", env)
}

/// The variable `storage.url` was taken from, when one was set (`VIGIL_STORAGE_URL` is applied
/// after `DATABASE_URL`, so it wins).
pub(super) fn storage_url_var(env: &dyn Env) -> Option<String> {
    ["VIGIL_STORAGE_URL", "VIGIL_STORAGE_URL_FILE", "DATABASE_URL", "DATABASE_URL_FILE"]
        .into_iter()
        .find(|v| env.get(v).is_some())
        .map(str::to_string)
}

/// Overrides each scalar of `defaults` found in the environment as `<prefix>_<KEY>`, nested
/// tables included (`storage.retention.every` → `VIGIL_STORAGE_RETENTION_EVERY`).
fn override_scalars(
    doc: &mut toml::Table,
    defaults: &toml::Table,
    prefix: &str,
    env: &dyn Env,
) -> Result<(), ConfigError> {
    for (key, default) in defaults {
        let var = format!("{prefix}_{}", key.to_uppercase());
        match default {
            toml::Value::Table(section) => {
                // Built aside and merged only when something is set: `source` keeps its shape.
                let mut found = toml::Table::new();
                override_scalars(&mut found, section, &var, env)?;
                if !found.is_empty() {
                    merge(table_mut(doc, key), &found);
                }
            }
            scalar => {
                if let Some(v) = env.get_or_file(&var)? {
                    let value = parse_like(scalar, &v).map_err(|m| invalid(var, m))?;
                    doc.insert(key.clone(), value);
                }
            }
        }
    }
    Ok(())
}

/// `v` parsed as the type `default` has (strings taken as they are).
fn parse_like(default: &toml::Value, v: &str) -> Result<toml::Value, String> {
    match default {
        toml::Value::Integer(_) => {
            v.trim().parse().map(toml::Value::Integer).map_err(|_| format!("{v:?} is not an integer"))
        }
        toml::Value::Float(_) => v.trim().parse().map(toml::Value::Float).map_err(|_| format!("{v:?} is not a number")),
        toml::Value::Boolean(_) => {
            v.trim().parse().map(toml::Value::Boolean).map_err(|_| format!("{v:?} is not true/false"))
        }
        _ => Ok(toml::Value::String(v.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use crate::config::test_util::{env, err_at};
    use crate::config::Config;
    use secrecy::{ExposeSecret, SecretString};
    use std::path::Path;
    use std::time::Duration;

    #[test]
    fn env_overrides_every_scalar() {
        let c = Config::from_toml(
            "region = \"file\"\n[probe]\ninterval = \"60s\"",
            &env(&[
                ("VIGIL_REGION", "us-east-1"),
                ("VIGIL_PROBE_INTERVAL", "1s"),
                ("VIGIL_PROBE_TIMEOUT", "1s"),
                ("DATABASE_URL", "postgres://postgres@127.0.0.1/test"),
                ("VIGIL_HTTP_LISTEN", "127.0.0.1:0"),
                ("VIGIL_BASELINE_FAILOVER_FACTOR", "3"),
            ]),
        )
        .expect("valid");
        assert_eq!(c.region, "us-east-1");
        assert_eq!(c.probe.interval, Duration::from_secs(1));
        assert_eq!(c.storage.url.expose_secret(), "postgres://postgres@127.0.0.1/test");
        assert_eq!(c.http.listen.port(), 0);
        assert_eq!(c.baseline.failover_factor, 3.0);
    }

    const SEED: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

    /// Writes `body` and a newline to `dir/name`; its path.
    fn write(dir: &Path, name: &str, body: &str) -> String {
        let p = dir.join(name);
        std::fs::write(&p, format!("{body}\n")).expect("write");
        p.display().to_string()
    }

    /// A config naming a file (written under `dir`) for every secret it can hold.
    fn every_secret_in_a_file(dir: &Path) -> String {
        let file = |name: &str, body: &str| write(dir, name, body);
        let seed = SEED;
        format!(
            "[http]\napi_token_file = \"{token}\"\nsigning_key_file = \"{seed_file}\"\n\
             [[provider]]\nname = \"openai\"\napi_key_file = \"{key}\"\nheaders_file = {{ \"x-api-key\" = \"{hdr}\" }}\n\
             [[alerts.slack]]\nwebhook_url_file = \"{slack}\"\n\
             [[alerts.email]]\nsmtp_url_file = \"{smtp}\"\nfrom = \"vigil@example.com\"\nto = [\"ops@example.com\"]\n\
             [[alerts.pagerduty]]\nrouting_key_file = \"{pd}\"\n\
             [[alerts.webhook]]\nurl_file = \"{hook}\"\nsecret_file = \"{hook_secret}\"\n\
             [[alerts.alertmanager]]\nurl_file = \"{am}\"\n",
            token = file("token", "tok-from-file"),
            seed_file = file("seed", seed),
            key = file("key", "sk-test-from-file"),
            hdr = file("hdr", "hdr-from-file"),
            slack = file("slack", "https://hooks.example/slack-from-file"),
            smtp = file("smtp", "smtp://user:smtp-from-file@mail.example:587"),
            pd = file("pd", "pd-from-file"),
            hook = file("hook", "https://hooks.example/hook-from-file"),
            hook_secret = file("hook-secret", "hook-secret-from-file"),
            am = file("am", "http://alertmanager.example:9093"),
        )
    }

    fn exposed(s: &SecretString) -> String {
        s.expose_secret().to_string()
    }

    #[test]
    fn every_secret_can_come_from_a_file_with_its_trailing_newline_removed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = |name: &str, body: &str| write(dir.path(), name, body);
        let seed = SEED;
        let text = every_secret_in_a_file(dir.path());
        let db = file("db", "postgres://vigil:db-from-file@db.example/vigil");
        let region = file("region", "eu-west-1");
        let c = Config::from_toml(
            &text,
            &env(&[("DATABASE_URL_FILE", db.as_str()), ("VIGIL_REGION_FILE", region.as_str())]),
        )
        .expect("valid");
        assert_eq!(c.region, "eu-west-1");
        assert_eq!(exposed(&c.storage.url), "postgres://vigil:db-from-file@db.example/vigil");
        assert_eq!(c.http.api_token.as_ref().map(exposed).as_deref(), Some("tok-from-file"));
        assert_eq!(c.http.signing_key.as_ref().map(exposed).as_deref(), Some(seed));
        let p = &c.providers[0];
        assert_eq!(p.api_key.as_ref().map(exposed).as_deref(), Some("sk-test-from-file"));
        assert_eq!(p.api_key_env, None, "the file replaces the built-in variable");
        assert_eq!(
            (p.secret_headers[0].name.as_str(), exposed(&p.secret_headers[0].value)),
            ("x-api-key", "hdr-from-file".into())
        );
        assert!(c.skipped.is_empty());
        let a = &c.alerts;
        assert_eq!(exposed(&a.slack[0].webhook_url), "https://hooks.example/slack-from-file");
        assert_eq!(exposed(&a.email[0].smtp_url), "smtp://user:smtp-from-file@mail.example:587");
        assert_eq!(exposed(&a.pagerduty[0].routing_key), "pd-from-file");
        assert_eq!(exposed(&a.webhook[0].url), "https://hooks.example/hook-from-file");
        assert_eq!(a.webhook[0].secret.as_ref().map(exposed).as_deref(), Some("hook-secret-from-file"));
        assert_eq!(exposed(&a.alertmanager[0].url), "http://alertmanager.example:9093");
        let shown = c.redacted_toml();
        for secret in [
            "tok-from-file",
            "sk-test-from-file",
            "hdr-from-file",
            "slack-from-file",
            "smtp-from-file",
            "pd-from-file",
            "hook-from-file",
            "db-from-file",
        ] {
            assert!(!shown.contains(secret), "{secret} shown:\n{shown}");
        }
        // `source` keeps storage.url as given (documented on the field); the other secrets are
        // never in the Debug form.
        for secret in [
            "tok-from-file",
            "sk-test-from-file",
            "hdr-from-file",
            "slack-from-file",
            "smtp-from-file",
            "pd-from-file",
            "hook-from-file",
        ] {
            assert!(!format!("{c:?}").contains(secret), "{secret} in Debug");
        }
        let back = Config::from_toml(&shown, &env(&[("DATABASE_URL_FILE", db.as_str())])).expect("reads back");
        assert_eq!(back.providers[0].api_key.as_ref().map(exposed).as_deref(), Some("sk-test-from-file"));
        assert_eq!(back.providers[0].secret_headers.len(), 1);
    }

    #[test]
    fn file_twins_of_the_variables_hold_secrets_but_not_alongside_the_variable() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = |name: &str, body: &str| write(dir.path(), name, body);
        // `<VAR>_FILE` twins of the variables `*_env` keys name.
        let k = file("k", "sk-test-twin");
        let c = Config::from_toml("", &env(&[("OPENAI_API_KEY_FILE", k.as_str())])).expect("twin");
        assert_eq!(
            c.providers.iter().find(|p| p.name == "openai").and_then(|p| p.api_key.as_ref()).map(exposed).as_deref(),
            Some("sk-test-twin")
        );
        let e =
            err_at("", &[("OPENAI_API_KEY", "sk-test-a"), ("OPENAI_API_KEY_FILE", k.as_str())], "OPENAI_API_KEY_FILE");
        assert!(e.contains("not both"), "{e}");
    }

    #[test]
    fn unreadable_or_doubled_secret_files_are_errors_naming_the_key_and_path_not_the_content() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = |name: &str, body: &str| write(dir.path(), name, body);
        // Errors name the key and the path; never the content.
        let missing = dir.path().join("missing").display().to_string();
        let cases = [
            (format!("[http]\napi_token_file = \"{missing}\""), "http.api_token_file"),
            (format!("[http]\nsigning_key_file = \"{missing}\""), "http.signing_key_file"),
            (format!("[[provider]]\nname = \"openai\"\napi_key_file = \"{missing}\""), "provider[0].api_key_file"),
            (format!("[[alerts.slack]]\nwebhook_url_file = \"{missing}\""), "alerts.slack[0].webhook_url_file"),
            (format!("[[alerts.webhook]]\nurl_file = \"{missing}\""), "alerts.webhook[0].url_file"),
        ];
        for (text, key) in &cases {
            let e = err_at(text, &[], key);
            assert!(e.contains(&format!("cannot read {missing}")), "{e}");
        }
        let e = err_at(
            &format!("[[provider]]\nname = \"x\"\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1\"\nmodels = [\"m\"]\nheaders_file = {{ \"x-api-key\" = \"{missing}\" }}\napi_key_env = \"K\""),
            &[("K", "sk-test-k")],
            "provider[0].headers_file.x-api-key",
        );
        assert!(e.contains("cannot read"), "{e}");
        let e = err_at(
            &format!("[http]\nsigning_key_file = \"{}\"", file("bad-seed", "not-a-seed")),
            &[],
            "http.signing_key_file",
        );
        assert!(!e.contains("not-a-seed"), "{e}");
        let e = err_at(
            &format!("[[alerts.slack]]\nwebhook_url_env = \"S\"\nwebhook_url_file = \"{}\"", file("s", "x")),
            &[("S", "https://hooks.example/x")],
            "alerts.slack[0].webhook_url_file",
        );
        assert!(e.contains("not both"), "{e}");
        let e = err_at("[[alerts.slack]]\nname = \"ops\"", &[], "alerts.slack[0].webhook_url_env");
        assert!(e.contains("webhook_url_file"), "{e}");
        err_at("", &[("DATABASE_URL_FILE", missing.as_str())], "DATABASE_URL_FILE");
        err_at("", &[("VIGIL_PROBE_INTERVAL_FILE", missing.as_str())], "VIGIL_PROBE_INTERVAL_FILE");
    }
}
