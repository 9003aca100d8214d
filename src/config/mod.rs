//! Configuration: TOML file + `VIGIL_*` environment overrides → a validated [`Config`], once, at load.
//!
//! Every scalar of the file can be overridden by an environment variable named after its path
//! (`probe.interval` → `VIGIL_PROBE_INTERVAL`, `region` → `VIGIL_REGION`); `DATABASE_URL` also
//! sets `storage.url`. Secrets never live in the file: it names the variable that holds them.
//!
//! Each section lives in its own file with its raw (file) shape, its validated shape and its
//! `validate`; this file ties them together and re-exports every public item.

mod alerts;
mod baseline;
mod breaker;
mod builtins;
mod canary;
mod capabilities;
pub mod chain;
pub mod chain_cost;
mod chain_env;
mod checks;
pub mod cloud;
mod deprecation;
mod env;
mod headers;
mod http;
mod kind;
mod metrics;
mod parse;
mod probe;
mod providers;
pub mod proxy;
mod ratelimit;
mod redact;
mod report;
mod retention;
pub(crate) mod secret_file;
pub(crate) mod signing_key;
mod status_pages;
mod storage;
pub mod tls;
mod toml_doc;
pub mod web;
mod workloads;

pub use self::alerts::{
    AlertmanagerConfig, AlertsConfig, EmailConfig, MaintenanceWindow, PagerDutyConfig, SlackConfig, WebhookConfig,
    DEFAULT_RUNBOOK_URL,
};
pub use self::baseline::BaselineConfig;
pub use self::breaker::BreakerConfig;
pub use self::builtins::{builtin_defaults, builtin_key_vars};
pub use self::canary::{CanaryConfig, DetectorConfig};
pub use self::capabilities::CapabilitiesConfig;
pub use self::checks::{Assertion, CheckConfig, DEFAULT_CHECK_EVERY};
pub use self::cloud::{BedrockConfig, CloudAuth, ServiceAccount, VertexConfig};
pub use self::deprecation::DeprecationConfig;
pub use self::env::{Env, ProcessEnv};
pub use self::headers::{secret_header_name, SecretHeader};
pub use self::http::HttpConfig;
pub use self::kind::{Endpoint, ProviderKind, AZURE_DEFAULT_API_VERSION};
pub use self::metrics::{Detail, MetricsConfig};
pub use self::parse::{duration_in, parse_duration};
pub use self::probe::{AdaptiveConfig, ProbeConfig};
pub use self::providers::{BalanceConfig, Price, ProviderConfig, DEFAULT_DEMOTE_WITHIN};
pub use self::ratelimit::RateLimitConfig;
pub use self::redact::redact_url;
pub use self::report::{parse_cron, ReportConfig, DEFAULT_WEEKLY};
pub use self::retention::RetentionConfig;
pub use self::status_pages::{StatusPageSource, StatusPagesConfig};
pub use self::storage::{StorageConfig, UrlFrom};
pub use self::web::WebConfig;
pub use self::workloads::{WorkloadConfig, MAX_INPUT_TOKENS, MIN_INPUT_TOKENS};

use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::Arc;
use thiserror::Error;

/// A configuration problem, always naming the key (or variable) at fault.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// File that failed.
        path: String,
        /// Underlying I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML.
    #[error("{file}:{line}:{column}: {message}")]
    Syntax {
        /// File that failed (`config` for a document that is not a file).
        file: String,
        /// Line of the fault, from 1.
        line: usize,
        /// Column of the fault (in characters), from 1.
        column: usize,
        /// What the TOML parser says.
        message: String,
    },
    /// A key is missing, unknown, of the wrong type or has a bad value.
    #[error("{key}: {message}")]
    Invalid {
        /// Key path, e.g. `provider[2].base_url`.
        key: String,
        /// What is wrong with it.
        message: String,
    },
}

/// A [`ConfigError::Invalid`] naming `key`.
fn invalid(key: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { key: key.into(), message: message.into() }
}

/// The configured providers. A config is cloned by each task that reads it (the running daemon,
/// the app, the credit poller, the price refresher, the weekly summary), and the planner, monitor
/// and price book keep providers too: shared, every one of them points at one copy of each
/// provider instead of holding its own (8 MB a copy at 10,000 providers).
pub type Providers = Arc<[Arc<ProviderConfig>]>;

/// Validated configuration; runtime state never lives here.
#[derive(Debug, Clone)]
pub struct Config {
    /// Region label of this instance.
    pub region: String,
    /// Where samples go.
    pub storage: StorageConfig,
    /// HTTP listener.
    pub http: HttpConfig,
    /// Probe cadence and limits.
    pub probe: ProbeConfig,
    /// Rolling baselines.
    pub baseline: BaselineConfig,
    /// Circuit breaker rules.
    pub breaker: BreakerConfig,
    /// Providers with their keys present (skipped ones are logged at load), shared: see [`Providers`].
    pub providers: Providers,
    /// Providers skipped because their key variable is unset: (name, variable).
    pub skipped: Vec<(String, String)>,
    /// Alert rules and channels.
    pub alerts: AlertsConfig,
    /// Scheduled reports.
    pub report: ReportConfig,
    /// Failover chains published in the router export (`[[chain]]`).
    pub chains: Vec<crate::config::chain::ChainConfig>,
    /// The document as read, `VIGIL_*` overrides applied (for `check-config`). It names secret
    /// variables (`*_env`) but holds no secret value, except possibly in `storage.url`. Shared, as
    /// the providers are: it holds every provider's table too.
    pub source: Arc<toml::Table>,
    /// Whether the document sets `probe.interval` (`--demo` probes faster only where it does not).
    pub probe_interval_given: bool,
    /// Retirement warnings.
    pub deprecation: DeprecationConfig,
    /// Providers' own status pages: which to poll, how often, and the `provider_incident` alert.
    pub status_pages: StatusPagesConfig,
    /// Cost-aware adaptive probing (`probe.max_interval`, `probe.incident_interval`).
    pub adaptive: AdaptiveConfig,
    /// What `/metrics` exports (`[metrics]`).
    pub metrics: MetricsConfig,
    /// `[probe.canary]`: the silent model-change canary.
    pub canary: CanaryConfig,
    /// `[probe.capabilities]`: capability probes.
    pub capabilities: CapabilitiesConfig,
    /// `[[probe.workload]]`: long-prompt probes, one per size.
    pub workloads: Vec<WorkloadConfig>,
    /// The `chain_head_changed` notice (`alerts.chain_head_changed`, `alerts.chain_head_channels`).
    pub chain_head: chain_cost::ChainHeadNotice,
    /// When rate-limit headroom counts as low (`[ratelimit]`, the `ratelimit_low` alert).
    pub ratelimit: RateLimitConfig,
}

/// The whole file as written; its defaults are also the template of every `VIGIL_*` override.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawConfig {
    region: String,
    storage: storage::RawStorage,
    http: http::RawHttp,
    probe: probe::RawProbe,
    baseline: baseline::RawBaseline,
    breaker: breaker::RawBreaker,
    #[serde(skip_serializing)]
    provider: Option<Vec<providers::RawProvider>>,
    alerts: alerts::RawAlerts,
    report: report::RawReport,
    #[serde(skip_serializing)]
    chain: Vec<crate::config::chain::RawChain>,
    deprecation: deprecation::RawDeprecation,
    metrics: metrics::RawMetrics,
    ratelimit: ratelimit::RawRateLimit,
}

impl Default for RawConfig {
    fn default() -> Self {
        RawConfig {
            region: "local".into(),
            storage: Default::default(),
            http: Default::default(),
            probe: Default::default(),
            baseline: Default::default(),
            breaker: Default::default(),
            provider: None,
            alerts: Default::default(),
            report: Default::default(),
            chain: vec![],
            deprecation: Default::default(),
            metrics: Default::default(),
            ratelimit: Default::default(),
        }
    }
}

impl Config {
    /// The same config without the document as read ([`Config::source`]): only `check-config`
    /// prints it, and a daemon keeps its config for as long as it runs (at 10,000 providers the
    /// document is 7.7 MB).
    pub fn without_document(mut self) -> Self {
        self.source = Arc::default();
        self
    }

    /// The one credit-watch list: every provider with a `balance` (validated at load to be one
    /// whose credit can be polled). The poller, the `credit_low` rule and the status page read it.
    pub fn credit_watch(&self) -> impl Iterator<Item = (&ProviderConfig, &BalanceConfig)> {
        self.providers.iter().filter_map(|p| p.balance.as_ref().map(|b| (&**p, b)))
    }

    /// Loads `path`, or `vigil.toml` in the working directory when it exists, else built-in defaults.
    pub fn load(path: Option<&Path>, env: &dyn Env) -> Result<Config, ConfigError> {
        Config::load_with(path, env, &[])
    }

    /// [`load`](Self::load) with `added` providers (the `--demo` ones) appended to the configured
    /// ones before anything that names providers is checked, so `[[chain]]` members and
    /// maintenance windows may name them; a configured provider of the same name is an error.
    pub fn load_with(path: Option<&Path>, env: &dyn Env, added: &[ProviderConfig]) -> Result<Config, ConfigError> {
        let (text, file) = match path {
            Some(p) => (
                std::fs::read_to_string(p)
                    .map_err(|source| ConfigError::Read { path: p.display().to_string(), source })?,
                p.display().to_string(),
            ),
            None => match std::fs::read_to_string("vigil.toml") {
                Ok(t) => (t, "vigil.toml".to_string()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => (String::new(), "vigil.toml".to_string()),
                Err(source) => return Err(ConfigError::Read { path: "vigil.toml".into(), source }),
            },
        };
        Config::from_file_text(&text, &file, env, added)
    }

    /// Parses and validates a TOML document with environment overrides applied.
    pub fn from_toml(text: &str, env: &dyn Env) -> Result<Config, ConfigError> {
        Config::from_toml_with(text, env, &[])
    }

    /// [`from_toml`](Self::from_toml) with `added` providers, as [`load_with`](Self::load_with).
    pub fn from_toml_with(text: &str, env: &dyn Env, added: &[ProviderConfig]) -> Result<Config, ConfigError> {
        Config::from_file_text(text, "config", env, added)
    }

    /// [`from_toml_with`](Self::from_toml_with) of the text of `file`, which a syntax error names
    /// with its line and column (as editors and compilers do), not a byte offset.
    fn from_file_text(text: &str, file: &str, env: &dyn Env, added: &[ProviderConfig]) -> Result<Config, ConfigError> {
        let mut doc: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            let (line, column) = e.span().map_or((1, 1), |s| line_column(text, s.start));
            ConfigError::Syntax { file: file.to_string(), line, column, message: e.message().trim().to_string() }
        })?;
        let url_in_file = doc.get("storage").and_then(|s| s.get("url")).is_some();
        env::apply_overrides(&mut doc, env)?;
        let source = doc.clone();
        let mut raw: RawConfig = serde_path_to_error::deserialize(toml::Value::Table(doc)).map_err(|e| {
            let key = e.path().to_string();
            invalid(if key == "." { "config".into() } else { key }, e.into_inner().message().to_string())
        })?;
        // A shorthand's default beside its k-of-n pair is fine, the shorthand written there is not.
        raw.alerts.error_probes_given = given(&source, "alerts", "error_probes");
        raw.breaker.consecutive_failures_given = given(&source, "breaker", "consecutive_failures");
        let mut config = validate(raw, env, added)?;
        config.probe_interval_given = given(&source, "probe", "interval");
        config.source = Arc::new(source);
        config.storage.url_from = match url_in_file {
            true => UrlFrom::File,
            false => env::storage_url_var(env).map_or(UrlFrom::Default, UrlFrom::Env),
        };
        Ok(config)
    }
}

/// Whether the document (after `VIGIL_*` overrides) sets `section.key`.
fn given(doc: &toml::Table, section: &str, key: &str) -> bool {
    doc.get(section).and_then(toml::Value::as_table).is_some_and(|t| t.contains_key(key))
}

/// The whole file validated, section by section in the order the file is documented; the first
/// problem found is the error. `added` providers join the configured ones before anything names them.
fn validate(mut raw: RawConfig, env: &dyn Env, added: &[ProviderConfig]) -> Result<Config, ConfigError> {
    validate_region(&raw.region)?;
    let storage = storage::validate(&raw.storage, &raw.baseline)?;
    let http = http::validate(raw.http, env)?;
    let (probe, adaptive) = probe::validate(&raw.probe, env)?;
    let baseline = baseline::validate(&raw.baseline)?;
    let breaker = breaker::validate(&raw.breaker)?;
    let mut resolved = providers::validate(raw.provider, env)?;
    for p in added {
        if resolved.names().contains(&p.name.as_str()) {
            return Err(invalid("provider", format!("{:?} is the name of a --demo provider; rename yours", p.name)));
        }
        resolved.providers.push(Arc::new(p.clone()));
    }
    alerts::check_maintenance_providers(&raw.alerts, &resolved.names())?;
    let status_pages = status_pages::validate(&raw.probe.status_page_every, &raw.alerts, resolved.pages)?;
    let head = (raw.alerts.chain_head_changed, std::mem::take(&mut raw.alerts.chain_head_channels));
    let alerts = alerts::validate(raw.alerts, env)?;
    let chain_head = chain_cost::notice(head.0, head.1, &alerts)?;
    let report = report::validate(raw.report, &alerts)?;
    let chains = crate::config::chain::validate(raw.chain, &resolved.providers, &resolved.skipped, env)?;
    let deprecation = deprecation::validate(&raw.deprecation)?;
    let metrics = metrics::validate(&raw.metrics)?;
    let canary = canary::validate(&raw.probe.canary)?;
    let capabilities = capabilities::validate(&raw.probe.capabilities)?;
    let workloads = workloads::validate(&raw.probe.workload, &resolved.providers, &resolved.skipped)?;
    let ratelimit = ratelimit::validate(&raw.ratelimit)?;
    Ok(Config {
        region: raw.region,
        storage,
        http,
        probe,
        baseline,
        breaker,
        providers: resolved.providers.into(),
        skipped: resolved.skipped,
        alerts,
        report,
        chains,
        status_pages,
        adaptive,
        source: Arc::default(),
        probe_interval_given: false,
        deprecation,
        metrics,
        canary,
        capabilities,
        workloads,
        chain_head,
        ratelimit,
    })
}

/// Line and column (both from 1, the column in characters) of byte `at` of `text`.
fn line_column(text: &str, at: usize) -> (usize, usize) {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let before = &text[..at];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// `region`: a short printable label.
fn validate_region(region: &str) -> Result<(), ConfigError> {
    if region.trim().is_empty() {
        return Err(invalid("region", "must not be empty"));
    }
    parse::no_controls("region", region)?;
    if region.len() > 64 {
        return Err(invalid("region", "must be at most 64 bytes"));
    }
    Ok(())
}

/// `providers` by name, the first of a name winning (validation refuses two): what a loop over
/// targets asks instead of scanning every provider for each (50 million comparisons at 10,000
/// targets on 10,000 providers).
pub fn by_name(providers: &[Arc<ProviderConfig>]) -> std::collections::HashMap<&str, &Arc<ProviderConfig>> {
    providers.iter().rev().map(|p| (p.name.as_str(), p)).collect()
}

/// [`by_name`] for a holder that outlives the slice (the monitor, the report's price book).
pub fn owned_by_name(providers: &[Arc<ProviderConfig>]) -> std::collections::HashMap<String, Arc<ProviderConfig>> {
    by_name(providers).into_iter().map(|(name, p)| (name.to_string(), Arc::clone(p))).collect()
}

/// Helpers the sections' unit tests share.
#[cfg(test)]
pub(crate) mod test_util {
    use crate::config::Config;
    use std::collections::BTreeMap;

    /// An environment holding `pairs`.
    pub(crate) fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    /// The error for `text` with the environment `e`; panics when the config is accepted.
    pub(crate) fn err(text: &str, e: &[(&str, &str)]) -> String {
        match Config::from_toml(text, &env(e)) {
            Ok(_) => panic!("config should be rejected:\n{text}"),
            Err(e) => e.to_string(),
        }
    }

    /// The error for `text`, which must start with `key: ` and must not be a panic.
    pub(crate) fn err_at(text: &str, e: &[(&str, &str)], key: &str) -> String {
        let msg = err(text, e);
        assert!(msg.starts_with(&format!("{key}: ")), "expected an error naming {key}, got: {msg}");
        msg
    }
}

#[cfg(test)]
mod tests {
    use crate::config::test_util::err;

    #[test]
    fn providers_by_name_find_each_and_the_first_of_a_name_wins() {
        let at = |name: &str, port: u16| {
            let url = format!("http://127.0.0.1:{port}/v1").parse().expect("url");
            super::ProviderConfig::new(name, super::ProviderKind::Openai, url)
        };
        let all = [at("b", 1), at("a", 2), at("b", 3)].map(std::sync::Arc::new);
        let index = super::by_name(&all);
        assert_eq!(index.len(), 2);
        assert_eq!(index.get("a").map(|p| p.base_url.port()), Some(Some(2)));
        assert_eq!(index.get("b").map(|p| p.base_url.port()), Some(Some(1)), "the first of a name");
        assert!(!index.contains_key("c"));
        let owned = super::owned_by_name(&all);
        assert_eq!(owned.len(), 2);
        assert!(std::sync::Arc::ptr_eq(&owned["b"], &all[0]), "the first of a name, shared");
    }

    #[test]
    fn a_cloned_config_shares_its_providers_and_document() {
        let text = "[[provider]]\nname = \"a\"\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\napi_key_env = \"K\"\nmodels = [\"m\", \"n\"]\n";
        let c = super::Config::from_toml(text, &super::test_util::env(&[("K", "sk-test-shared")])).expect("valid");
        let copy = c.clone();
        assert!(std::sync::Arc::ptr_eq(&c.providers, &copy.providers), "one list, not a copy per clone");
        assert!(std::sync::Arc::ptr_eq(&c.source, &copy.source), "one document");
        assert!(copy.source.contains_key("provider"), "the document as read");
    }

    #[test]
    fn a_config_without_its_document_still_knows_whether_the_interval_was_given() {
        let provider = "[[provider]]\nname = \"a\"\nkind = \"http\"\nbase_url = \"http://127.0.0.1:9/\"\n";
        let env = super::test_util::env(&[]);
        let given = super::Config::from_toml(&format!("[probe]\ninterval = \"45s\"\n{provider}"), &env).expect("valid");
        let unset = super::Config::from_toml(provider, &env).expect("valid");
        assert!(given.probe_interval_given && !unset.probe_interval_given);
        let kept = given.without_document();
        assert!(kept.source.is_empty(), "the document is dropped");
        assert!(kept.probe_interval_given, "what the demo's cadence asks is kept");
        assert_eq!(kept.probe.interval, std::time::Duration::from_secs(45));
    }

    #[test]
    fn a_syntax_error_names_file_line_and_column() {
        let text = "region = \"eu\"\n[probe]\ninterval = 5s\n";
        let e = super::Config::from_file_text(text, "/etc/vigil/vigil.toml", &super::test_util::env(&[]), &[])
            .expect_err("not TOML");
        let shown = e.to_string();
        assert!(shown.starts_with("/etc/vigil/vigil.toml:3:12: "), "{shown}");
        assert!(!shown.contains("byte"), "{shown}");
        assert_eq!(super::line_column("ab\ncdé\nx", 8), (3, 1));
        assert_eq!(super::line_column("ab\ncdé\nx", 7), (2, 4));
        assert_eq!(super::line_column("ab\ncdé\nx", 6), (2, 3), "inside a character: its start");
        assert_eq!(super::line_column("", 0), (1, 1));
    }

    #[test]
    fn errors_name_the_key_path() {
        let text = r#"
[[provider]]
name = "a"
kind = "http"
base_url = "https://a.example"
[[provider]]
name = "b"
kind = "http"
base_url = "https://b.example"
[[provider]]
name = "c"
kind = "http"
base_url = "not-a-url"
"#;
        assert_eq!(err(text, &[]), "provider[2].base_url: relative URL without a base");
        assert_eq!(err("[probe]\ninterval = \"soon\"", &[]).split(':').next(), Some("probe.interval"));
        {
            let e = err("[probe]\nintervall = \"5s\"", &[]);
            assert!(e.starts_with("probe.intervall: unknown field `intervall`"), "{e}");
        }
        assert!(err("[probe]\nconcurrency = \"many\"", &[]).starts_with("probe.concurrency:"));
        assert_eq!(
            err("", &[("VIGIL_PROBE_CONCURRENCY", "lots")]),
            "VIGIL_PROBE_CONCURRENCY: \"lots\" is not an integer"
        );
        assert!(err("[[alerts.slack]]\nwebhook_url_env = \"NOPE\"", &[])
            .starts_with("alerts.slack[0].webhook_url_env: environment variable NOPE"));
        assert!(err("[http]\nlisten = \"here\"", &[]).starts_with("http.listen:"));
    }
}
