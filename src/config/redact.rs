//! What `check-config` prints: the resolved config as a TOML document `--config` reads back,
//! with every secret named by its variable or file and never shown, so the output can be pasted
//! into a ticket or diffed between machines.

use crate::config::builtins::BUILTINS;
use crate::config::providers::{Price, ProviderConfig};
use crate::config::toml_doc::{merge, table_mut};
use crate::config::{Config, ProviderKind, RawConfig};
use secrecy::ExposeSecret;
use std::collections::HashMap;
use url::Url;

impl Config {
    /// The resolved config as a TOML document `--config` accepts back: defaults filled in,
    /// `VIGIL_*` overrides applied, providers resolved (built-in defaults spelled out), every
    /// secret named by its `*_env` variable and never shown, a database password replaced.
    pub fn redacted_toml(&self) -> String {
        self.redacted_toml_with(&[])
    }

    /// [`redacted_toml`](Self::redacted_toml) with `notes` added to its comment header (what the
    /// caller knows of the config that config does not, such as each model's price).
    pub fn redacted_toml_with(&self, notes: &[String]) -> String {
        let mut doc = toml::Table::try_from(RawConfig::default()).unwrap_or_default();
        merge(&mut doc, &self.source);
        let url = self.storage.url.expose_secret();
        table_mut(&mut doc, "storage").insert("url".into(), toml::Value::String(redact_url(url)));
        let probe = table_mut(&mut doc, "probe");
        if let Some(proxy) = probe.get("proxy").and_then(toml::Value::as_str).map(redact_url) {
            probe.insert("proxy".into(), toml::Value::String(proxy));
        }
        doc.insert("provider".into(), toml::Value::Array(self.provider_tables()));
        // A k-of-n pair replaces its "n in a row" shorthand: the shorthand's default beside it
        // would read back as both set.
        for (section, shorthand, k) in
            [("alerts", "error_probes", "error_k"), ("breaker", "consecutive_failures", "failure_k")]
        {
            let set = self.source.get(section).and_then(|t| t.get(k)).and_then(toml::Value::as_integer);
            if set.is_some_and(|k| k != 0) {
                table_mut(&mut doc, section).remove(shorthand);
            }
        }
        let head = self.comment_header(url, notes);
        match toml::to_string_pretty(&doc) {
            Ok(body) => head + &body,
            Err(e) => format!("# could not render config: {e}\n"),
        }
    }

    /// The `[[provider]]` list in the order written (the built-ins when none is): resolved ones
    /// spelled out, unresolved ones as written, skipped ones by name and key variable.
    fn provider_tables(&self) -> Vec<toml::Value> {
        let raw_providers: Vec<&toml::Table> = self
            .source
            .get("provider")
            .and_then(toml::Value::as_array)
            .map(|a| a.iter().filter_map(toml::Value::as_table).collect())
            .unwrap_or_default();
        // Looked up by name, the first of a name winning as a scan from the front would (hence
        // `rev`, as `by_name` does): a scan per name was O(n²) at 10,000 providers.
        let raw_by_name: HashMap<&str, &toml::Table> =
            raw_providers.iter().rev().filter_map(|t| Some((t.get("name")?.as_str()?, *t))).collect();
        let resolved = crate::config::by_name(&self.providers);
        let pages: HashMap<&str, _> = self.status_pages.pages.iter().rev().map(|s| (s.provider.as_str(), s)).collect();
        let skipped: HashMap<&str, &String> = self.skipped.iter().rev().map(|(n, var)| (n.as_str(), var)).collect();
        let raw_of = |name: &str| raw_by_name.get(name).copied();
        let mut providers = Vec::new();
        let order: Vec<String> = match raw_providers.is_empty() {
            true => BUILTINS.iter().map(|b| b.name.to_string()).collect(),
            false => raw_providers.iter().filter_map(|t| t.get("name")?.as_str().map(String::from)).collect(),
        };
        for name in &order {
            if let Some(p) = resolved.get(name.as_str()) {
                let mut t = provider_table(p);
                // Paths to secrets are shown as written (the secrets themselves never are).
                for k in ["api_key_file", "headers_file"] {
                    if let Some(v) = raw_of(name).and_then(|raw| raw.get(k)) {
                        t.insert(k.into(), v.clone());
                    }
                }
                // Spelled out so the document reads back the same ("" = off, even for a built-in).
                let page = pages.get(name.as_str());
                t.insert(
                    "status_page_url".into(),
                    toml::Value::String(page.map(|s| s.url.to_string()).unwrap_or_default()),
                );
                providers.push(toml::Value::Table(t));
            } else if let Some(raw) = raw_of(name) {
                providers.push(toml::Value::Table((*raw).clone()));
            } else if let Some(var) = skipped.get(name.as_str()) {
                let mut t = toml::Table::new();
                t.insert("name".into(), toml::Value::String(name.clone()));
                t.insert("api_key_env".into(), toml::Value::String((*var).clone()));
                providers.push(toml::Value::Table(t));
            }
        }
        providers
    }

    /// The comment lines above the document: where secrets come from, what was replaced or
    /// skipped, the probes' proxy, and the caller's `notes`.
    fn comment_header(&self, url: &str, notes: &[String]) -> String {
        let mut head = String::from(
            "# vigil check-config: the resolved configuration. Secrets are read from the variables\n\
             # named by the *_env keys (or their *_FILE twins) or the files named by the *_file keys,\n\
             # and are never printed.\n",
        );
        if Url::parse(url).is_ok_and(|u| u.password().is_some()) {
            head.push_str(
                "# storage.url: the password is replaced; set DATABASE_URL (or DATABASE_URL_FILE) to supply it.\n",
            );
        }
        for (name, var) in &self.skipped {
            head.push_str(&format!("# provider {name} is skipped while {var} is not set.\n"));
        }
        let px = &self.probe.proxy;
        let shown = |u: &Option<Url>| u.as_ref().map_or_else(|| "none".to_string(), |u| redact_url(u.as_str()));
        if px.https.is_some() || px.http.is_some() {
            head.push_str(&format!(
                "# probes go through proxy https={} http={} (no_proxy: {})\n",
                shown(&px.https),
                shown(&px.http),
                if px.no_proxy.is_empty() { "none".to_string() } else { px.no_proxy.join(", ") }
            ));
        }
        for note in notes {
            head.push_str(&format!("# {note}\n"));
        }
        head
    }
}

/// A price as a `{ input_per_mtok, output_per_mtok }` table.
fn price_table(pr: &Price) -> toml::Value {
    let mut pt = toml::Table::new();
    pt.insert("input_per_mtok".into(), toml::Value::Float(pr.input_per_mtok));
    pt.insert("output_per_mtok".into(), toml::Value::Float(pr.output_per_mtok));
    toml::Value::Table(pt)
}

/// Bedrock's and Vertex's keys (paths and names; the key files' content never).
fn cloud_keys(t: &mut toml::Table, cloud: &crate::config::CloudAuth) {
    use crate::config::CloudAuth;
    let s = |v: &str| toml::Value::String(v.to_string());
    match cloud {
        CloudAuth::None => {}
        CloudAuth::Bedrock(b) => {
            t.insert("region".into(), s(&b.region));
            if let Some(p) = &b.profile {
                t.insert("profile".into(), s(p));
            }
            if let Some(f) = &b.credentials_file {
                t.insert("credentials_file".into(), s(&f.display().to_string()));
            }
        }
        CloudAuth::Vertex(v) => {
            t.insert("credentials_file".into(), s(&v.credentials_file.display().to_string()));
            t.insert("project".into(), s(&v.project));
            t.insert("location".into(), s(&v.location));
        }
    }
}

/// A resolved provider as a `[[provider]]` table (the key itself named by `api_key_env` only).
fn provider_table(p: &ProviderConfig) -> toml::Table {
    let mut t = toml::Table::new();
    let s = |v: &str| toml::Value::String(v.to_string());
    let list = |v: &[String]| toml::Value::Array(v.iter().map(|x| s(x)).collect());
    t.insert("name".into(), s(&p.name));
    t.insert("kind".into(), s(p.kind.as_str()));
    t.insert("base_url".into(), s(p.base_url.as_str()));
    if let Some(var) = &p.api_key_env {
        t.insert("api_key_env".into(), s(var));
    }
    if p.kind != ProviderKind::Http {
        t.insert("models".into(), list(&p.models));
    }
    if p.endpoint != crate::config::Endpoint::Chat {
        t.insert("endpoint".into(), s(p.endpoint.as_str()));
    }
    if !p.routes.is_empty() {
        t.insert("routes".into(), list(&p.routes));
    }
    if !p.reasoning_models.is_empty() {
        t.insert("reasoning_models".into(), list(&p.reasoning_models));
    }
    if let Some(b) = &p.balance {
        let mut bt = toml::Table::new();
        bt.insert("min_usd".into(), toml::Value::Float(b.min_usd));
        bt.insert("every".into(), s(&humantime::format_duration(b.every).to_string()));
        bt.insert("warn_hours".into(), toml::Value::Float(b.warn_hours));
        t.insert("balance".into(), toml::Value::Table(bt));
    }
    if let Some(price) = &p.price {
        t.insert("price".into(), price_table(price));
    }
    cloud_keys(&mut t, &p.cloud);
    if !p.headers.is_empty() {
        t.insert("headers".into(), toml::Value::Table(p.headers.iter().map(|(k, v)| (k.clone(), s(v))).collect()));
    }
    if !p.secret_headers.is_empty() {
        // The variables' names only: the values never leave the process.
        let env: toml::Table =
            p.secret_headers.iter().filter(|h| !h.env.is_empty()).map(|h| (h.name.clone(), s(&h.env))).collect();
        if !env.is_empty() {
            t.insert("headers_env".into(), toml::Value::Table(env));
        }
    }
    if !p.prices.is_empty() {
        let prices = p.prices.iter().map(|(m, pr)| (m.clone(), price_table(pr))).collect();
        t.insert("prices".into(), toml::Value::Table(prices));
    }
    let path = |f: &std::path::Path| s(&f.display().to_string());
    if let Some(f) = &p.tls.ca_file {
        t.insert("ca_file".into(), path(f));
    }
    if let Some(c) = &p.tls.client {
        // The paths only: the key itself never leaves the process.
        t.insert("client_cert_file".into(), path(&c.cert_file));
        t.insert("client_key_file".into(), path(&c.key_file));
    }
    t
}

/// Hides the password of a database URL.
pub fn redact_url(url: &str) -> String {
    match Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("redacted"));
            u.to_string()
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use crate::config::test_util::env;
    use crate::config::{Config, ProviderKind};

    #[test]
    fn spec_example_parses() {
        let text = r#"
region = "eu-west-1"
[storage]
url = "sqlite://vigil.db"
retention_days = 30
[http]
listen = "127.0.0.1:9470"
api_token_env = "VIGIL_API_TOKEN"
[probe]
interval = "60s"
timeout = "10s"
max_tokens = 16
concurrency = 256
daily_budget_usd = 5.0
[baseline]
window = "7d"
failover_factor = 2.0
[breaker]
consecutive_failures = 3
failure_window = "120s"
latency_trips = 2
open_for = "5m"
[[provider]]
name = "openrouter"
kind = "openai"
base_url = "https://openrouter.ai/api/v1"
api_key_env = "OPENROUTER_API_KEY"
models = ["meta-llama/llama-3-70b-instruct"]
routes = ["DeepInfra", "Together", "Lepton"]
balance = { min_usd = 20.0, every = "5m" }
price = { input_per_mtok = 0.59, output_per_mtok = 0.79 }
[[provider]]
name = "status-page"
kind = "http"
base_url = "https://status.example.com/api/v2/status.json"
[alerts]
renotify = "1h"
[[alerts.slack]]
webhook_url_env = "SLACK_WEBHOOK_URL"
[[alerts.email]]
smtp_url_env = "SMTP_URL"
from = "vigil@example.com"
to = ["oncall@example.com"]
[[alerts.pagerduty]]
routing_key_env = "PAGERDUTY_ROUTING_KEY"
events_url = "https://events.pagerduty.com/v2/enqueue"
[[alerts.webhook]]
url_env = "ALERT_WEBHOOK_URL"
secret_env = "ALERT_WEBHOOK_SECRET"
"#;
        let e = env(&[
            ("OPENROUTER_API_KEY", "sk-or-v1-test"),
            ("SLACK_WEBHOOK_URL", "http://127.0.0.1:1/slack-T000-secret"),
            ("SMTP_URL", "smtp://127.0.0.1:2525"),
            ("PAGERDUTY_ROUTING_KEY", "pd-routing-key-test"),
            ("ALERT_WEBHOOK_URL", "http://127.0.0.1:1/hook-token-9"),
            ("ALERT_WEBHOOK_SECRET", "s3cret"),
        ]);
        let c = Config::from_toml(text, &e).expect("valid");
        assert_eq!(c.region, "eu-west-1");
        assert_eq!(c.providers.len(), 2);
        assert_eq!(c.providers[0].routes.len(), 3);
        assert_eq!(c.providers[0].balance.as_ref().map(|b| b.min_usd), Some(20.0));
        assert_eq!(c.providers[1].kind, ProviderKind::Http);
        assert_eq!(c.alerts.slack.len(), 1);
        assert_eq!(c.alerts.webhook[0].name, "webhook");
        let shown = c.redacted_toml();
        for secret in ["sk-or-v1-test", "slack-T000-secret", "hook-token-9", "pd-routing-key-test", "s3cret", "2525"] {
            assert!(!shown.contains(secret), "{secret} leaked into:\n{shown}");
        }
        for var in ["SLACK_WEBHOOK_URL", "ALERT_WEBHOOK_SECRET", "PAGERDUTY_ROUTING_KEY", "SMTP_URL"] {
            assert!(shown.contains(var), "{var} named in:\n{shown}");
        }
        // What check-config prints is a config: read back, it resolves to the same thing.
        let again = Config::from_toml(&shown, &e).expect("check-config output is a valid config");
        assert_eq!(again.redacted_toml(), shown);
        assert_eq!(again.providers.len(), c.providers.len());
        assert_eq!(again.alerts.webhook.len(), 1);
    }
}
