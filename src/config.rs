//! Configuration: TOML file + `VIGIL_*` environment overrides → a validated [`Config`], once, at load.
//!
//! Every scalar of the file can be overridden by an environment variable named after its path
//! (`probe.interval` → `VIGIL_PROBE_INTERVAL`, `region` → `VIGIL_REGION`); `DATABASE_URL` also
//! sets `storage.url`. Secrets never live in the file: it names the variable that holds them.

use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use thiserror::Error;
use url::Url;

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
    /// A key is missing, unknown, of the wrong type or has a bad value.
    #[error("{key}: {message}")]
    Invalid {
        /// Key path, e.g. `provider[2].base_url`.
        key: String,
        /// What is wrong with it.
        message: String,
    },
}

fn invalid(key: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { key: key.into(), message: message.into() }
}

/// Protocol family of a provider; one adapter each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// OpenAI chat completions (OpenRouter, OpenAI, Groq, Together, DeepInfra, vLLM, Ollama).
    Openai,
    /// Anthropic Messages API.
    Anthropic,
    /// Azure OpenAI: `base_url` is the resource (`https://NAME.openai.azure.com`, optionally
    /// `?api-version=…`), models are deployment names, the key goes in `api-key`.
    Azure,
    /// Gemini `streamGenerateContent?alt=sse`.
    Gemini,
    /// Plain GET expecting 2xx.
    Http,
}

impl ProviderKind {
    /// The config name (`openai`, `anthropic`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Openai => "openai",
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::Azure => "azure",
            ProviderKind::Gemini => "gemini",
            ProviderKind::Http => "http",
        }
    }
}

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
    /// Providers with their keys present (skipped ones are logged at load).
    pub providers: Vec<ProviderConfig>,
    /// Providers skipped because their key variable is unset: (name, variable).
    pub skipped: Vec<(String, String)>,
    /// Alert rules and channels.
    pub alerts: AlertsConfig,
    /// Scheduled reports.
    pub report: ReportConfig,
    /// Failover chains published in the router export (`[[chain]]`).
    pub chains: Vec<crate::chain::ChainConfig>,
    /// The document as read, `VIGIL_*` overrides applied (for `check-config`). It names secret
    /// variables (`*_env`) but holds no secret value, except possibly in `storage.url`.
    pub source: toml::Table,
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
}

/// The intervals of cost-aware adaptive probing (the budget is `probe.daily_budget_usd`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdaptiveConfig {
    /// `probe.max_interval`: the longest a calm target is stretched to under the daily budget.
    pub max_interval: Duration,
    /// `probe.incident_interval`: how often a target in trouble is probed (at most `probe.interval`).
    pub incident_interval: Duration,
}

/// `[metrics]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MetricsConfig {
    /// Per-target series: `compact` (default, at most 10 per target), `histograms` (at most 25) or `full`.
    pub detail: crate::metrics::Detail,
}

/// `[probe.canary]`: the silent model-change canary (docs/CANARY.md).
#[derive(Debug, Clone, PartialEq)]
pub struct CanaryConfig {
    /// Off unless `enabled = true`.
    pub enabled: bool,
    /// One canary run per target every `interval`.
    pub interval: Duration,
    /// Output budget of one run.
    pub max_tokens: u32,
    /// `seed` sent where the API has one.
    pub seed: u64,
    /// Ask OpenAI-compatible APIs for log-probabilities.
    pub logprobs: bool,
    /// Most canary runs in flight at once (apart from the regular probes' limit).
    pub concurrency: usize,
    /// Runs the statistic's reference window holds.
    pub reference_runs: usize,
    /// Runs of the recent window a change must hold through.
    pub recent_runs: usize,
    /// Significance of the score test.
    pub alpha: f64,
    /// Smallest exact-match score difference that counts.
    pub min_delta: f64,
}

impl CanaryConfig {
    /// The statistic's settings.
    pub fn detector(&self) -> crate::canary::detect::DetectorConfig {
        crate::canary::detect::DetectorConfig {
            reference: self.reference_runs,
            recent: self.recent_runs,
            min_reference: (self.reference_runs / 2).max(1),
            alpha: self.alpha,
            min_delta: self.min_delta,
            ..Default::default()
        }
    }
}

impl Default for CanaryConfig {
    fn default() -> Self {
        CanaryConfig {
            enabled: false,
            interval: Duration::from_secs(15 * 60),
            max_tokens: 64,
            seed: 7,
            logprobs: false,
            concurrency: 2,
            reference_runs: 16,
            recent_runs: 4,
            alpha: 1e-4,
            min_delta: 0.2,
        }
    }
}

/// `[deprecation]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeprecationConfig {
    /// Warn this many days before an announced retirement date (`model_deprecated`).
    pub warn_days: u32,
    /// How often the providers' models lists are read (`deprecation.models_every`); `None` = off.
    pub models_every: Option<Duration>,
}

/// Polling of the providers' official status pages (Statuspage v2 JSON).
#[derive(Debug, Clone, Default)]
pub struct StatusPagesConfig {
    /// Time between polls of each page (`probe.status_page_every`).
    pub every: Duration,
    /// One entry per configured provider whose page is polled (empty `status_page_url` = off).
    pub pages: Vec<StatusPageSource>,
    /// `alerts.provider_incident`: alert on the provider's own open incidents (off by default).
    pub alert: bool,
    /// `alerts.provider_incident_components`: only incidents naming one of these components
    /// (case-insensitive); empty means every incident.
    pub alert_components: Vec<String>,
}

/// One provider's status page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusPageSource {
    /// Provider name as in `[[provider]]`.
    pub provider: String,
    /// Base URL of the page (vigil reads `<url>/api/v2/summary.json`).
    pub url: Url,
    /// `status_page_components`: the components whose incidents `provider_incident` pages for
    /// this provider (case-insensitive; empty = every incident); `None` follows
    /// `alerts.provider_incident_components`.
    pub components: Option<Vec<String>>,
}

/// `[report]`.
#[derive(Debug, Clone)]
pub struct ReportConfig {
    /// When the weekly summary email goes out: a cron expression with seconds, in UTC
    /// (tokio-cron-scheduler syntax); `None` when set to `off`.
    pub weekly: Option<String>,
    /// Recipients of the weekly summary; empty sends it to each `[[alerts.email]]` channel's own `to`.
    pub weekly_to: Vec<String>,
}

/// `[storage]`.
#[derive(Debug, Clone)]
pub struct StorageConfig {
    /// `sqlite://vigil.db` or `postgres://…`.
    pub url: SecretString,
    /// Raw samples older than this many days are removed.
    pub retention_days: u32,
    /// Directory for the spool and other local state.
    pub data_dir: PathBuf,
    /// Most bytes the on-disk spool may hold before the oldest samples are dropped.
    pub spool_max_bytes: u64,
    /// Most samples written in one batch.
    pub batch_size: usize,
    /// Longest a sample waits for its batch to fill.
    pub batch_age: Duration,
    /// `[storage.retention]`: how long everything but raw samples is kept.
    pub retention: RetentionConfig,
}

/// `[storage.retention]`: days each table is kept, and how the job deletes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetentionConfig {
    /// Hourly rollups (`rollups_days`, at least the baseline window).
    pub rollups_days: u32,
    /// Delivered and abandoned alert outbox items (`outbox_days`); pending ones are never removed.
    pub outbox_days: u32,
    /// Breaker transition history (`breaker_transitions_days`).
    pub breaker_transitions_days: u32,
    /// Credit balance readings (`credit_readings_days`).
    pub credit_readings_days: u32,
    /// Alert state, target status, incident leases and sightings of regions that stopped
    /// writing them (`alert_state_days`).
    pub alert_state_days: u32,
    /// Providers' status page incidents and components (`provider_status_days`).
    pub provider_status_days: u32,
    /// Most rows one delete statement removes (`batch_size`).
    pub batch_size: u32,
    /// Time between retention runs (`every`).
    pub every: Duration,
}

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
}

/// `[probe]`.
#[derive(Debug, Clone)]
pub struct ProbeConfig {
    /// `probe.ca_file`: extra CA certificates every probe trusts (besides the system and built-in roots).
    pub ca_file: Option<std::path::PathBuf>,
    /// Its certificates, read at load.
    pub ca_certs: Vec<rustls::pki_types::CertificateDer<'static>>,
    /// HTTP proxy for probes (`probe.proxy`, `HTTPS_PROXY`/`HTTP_PROXY`, `NO_PROXY`).
    pub proxy: crate::probe::proxy::ProxyConfig,
    /// One round every `interval`.
    pub interval: Duration,
    /// Whole-probe limit.
    pub timeout: Duration,
    /// DNS + TCP + TLS limit.
    pub connect_timeout: Duration,
    /// Request sent → first content token limit.
    pub ttft_timeout: Duration,
    /// `max_tokens` sent with each probe.
    pub max_tokens: u32,
    /// Most probes in flight at once.
    pub concurrency: usize,
    /// Probe spend guard per UTC day.
    pub daily_budget_usd: f64,
    /// Largest response body read, so a runaway stream cannot exhaust memory.
    pub max_body_bytes: usize,
}

/// `[baseline]`.
#[derive(Debug, Clone)]
pub struct BaselineConfig {
    /// Rolling window.
    pub window: Duration,
    /// Router threshold = factor × P95.
    pub failover_factor: f64,
    /// Fewest samples for a published P50.
    pub min_samples_p50: u64,
    /// Fewest samples for a published P95.
    pub min_samples_p95: u64,
    /// Fewest samples for a published P99.
    pub min_samples_p99: u64,
}

/// `[breaker]`.
#[derive(Debug, Clone)]
pub struct BreakerConfig {
    /// Failed probes in a row that open the breaker…
    pub consecutive_failures: u32,
    /// …within this window.
    pub failure_window: Duration,
    /// Consecutive probes with TTFB above factor × P95 that open it.
    pub latency_trips: u32,
    /// Time open before a half-open probe.
    pub open_for: Duration,
}

/// `probe.max_interval` (from `interval` up to a day) and `probe.incident_interval` (from
/// `probe.timeout` up to `interval`, empty = `interval`), so a target is never probed twice at once.
fn adaptive_intervals(p: &RawProbe, probe: &ProbeConfig) -> Result<AdaptiveConfig, ConfigError> {
    let max = duration_in("probe.max_interval", &p.max_interval, probe.interval.max(SECOND), DAY.max(probe.interval))?;
    let fast = if p.incident_interval.trim().is_empty() {
        probe.interval
    } else {
        duration_in("probe.incident_interval", &p.incident_interval, probe.timeout, probe.interval)?
    };
    Ok(AdaptiveConfig { max_interval: max, incident_interval: fast })
}

/// `price = { input_per_mtok, output_per_mtok }`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// USD per million input tokens.
    pub input_per_mtok: f64,
    /// USD per million output tokens.
    pub output_per_mtok: f64,
}

impl Price {
    /// Cost of one call.
    pub fn cost(&self, input_tokens: u32, output_tokens: u32) -> f64 {
        (f64::from(input_tokens) * self.input_per_mtok + f64::from(output_tokens) * self.output_per_mtok) / 1e6
    }
}

/// `balance = { min_usd, every, warn_hours }`.
#[derive(Debug, Clone)]
pub struct BalanceConfig {
    /// Alert below this balance.
    pub min_usd: f64,
    /// Poll period.
    pub every: Duration,
    /// Alert when the burn rate projects zero within this many hours.
    pub warn_hours: f64,
}

/// One `[[provider]]`.
#[derive(Debug, Clone)]
pub struct ProviderConfig {
    /// Name (`openrouter`).
    pub name: String,
    /// Protocol family.
    pub kind: ProviderKind,
    /// API base (`https://openrouter.ai/api/v1`) or, for `http`, the URL to GET.
    pub base_url: Url,
    /// Variable the key was read from.
    pub api_key_env: Option<String>,
    /// The key itself.
    pub api_key: Option<SecretString>,
    /// Models to probe.
    pub models: Vec<String>,
    /// Upstream hosts to pin (one target each).
    pub routes: Vec<String>,
    /// Models that stream reasoning; probed with the smallest effort and a larger token budget.
    pub reasoning_models: Vec<String>,
    /// Low-credit polling.
    pub balance: Option<BalanceConfig>,
    /// Configured price for every model of the provider (`price`).
    pub price: Option<Price>,
    /// Configured prices per model (`prices."model" = {…}`); win over `price` and the built-in table.
    pub prices: BTreeMap<String, Price>,
    /// Extra request headers (e.g. OpenRouter `HTTP-Referer`).
    pub headers: BTreeMap<String, String>,
    /// Request headers whose values come from the environment (`headers_env`), never printed.
    pub secret_headers: Vec<SecretHeader>,
    /// Its own `ca_file` and client certificate (`client_cert_file`/`client_key_file`).
    pub tls: crate::probe::trust::ProviderTls,
}

impl ProviderConfig {
    /// A provider with no key, models, routes, prices, headers or TLS settings of its own: the
    /// start of every provider built in code (the demo, tests, benches), which then set what they need.
    pub fn new(name: &str, kind: ProviderKind, base_url: Url) -> Self {
        ProviderConfig {
            name: name.to_string(),
            kind,
            base_url,
            api_key_env: None,
            api_key: None,
            models: Vec::new(),
            routes: Vec::new(),
            reasoning_models: Vec::new(),
            balance: None,
            price: None,
            prices: BTreeMap::new(),
            headers: BTreeMap::new(),
            secret_headers: Vec::new(),
            tls: Default::default(),
        }
    }
}

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

/// `[alerts]`.
#[derive(Debug, Clone)]
pub struct AlertsConfig {
    /// Re-send a firing alert no more often than this.
    pub renotify: Duration,
    /// Failed probes in a row that fire `errors`.
    pub error_probes: u32,
    /// Probes a condition must stay clear before the alert resolves.
    pub resolve_after: u32,
    /// A probe is slow above this × the target's baseline P95 (`latency_factor`, 1.5).
    pub latency_factor: f64,
    /// latency_degraded needs `latency_k` slow probes among the last `latency_n` ok ones (3 of 5).
    pub latency_k: usize,
    /// See `latency_k`.
    pub latency_n: usize,
    /// Probes the flap detector looks at (20).
    pub flap_window: usize,
    /// Weighted state-change rate above which a target is flapping (0.4).
    pub flap_high: f64,
    /// …and under which it calms down (0.2).
    pub flap_low: f64,
    /// Give up delivering after this long (and record it).
    pub delivery_deadline: Duration,
    /// Link put in messages (status page).
    pub status_url: Option<String>,
    /// Slack incoming webhooks.
    pub slack: Vec<SlackConfig>,
    /// SMTP recipients.
    pub email: Vec<EmailConfig>,
    /// PagerDuty Events v2 integrations.
    pub pagerduty: Vec<PagerDutyConfig>,
    /// Generic signed webhooks.
    pub webhook: Vec<WebhookConfig>,
    /// Alertmanager v2 APIs.
    pub alertmanager: Vec<AlertmanagerConfig>,
    /// Per-provider maintenance windows: alerts are recorded but not notified.
    pub maintenance: Vec<MaintenanceWindow>,
}

/// `[[alerts.maintenance]] provider, start, end` (RFC 3339).
#[derive(Debug, Clone, PartialEq)]
pub struct MaintenanceWindow {
    /// Provider name.
    pub provider: String,
    /// Window start (inclusive).
    pub start: chrono::DateTime<chrono::Utc>,
    /// Window end (exclusive).
    pub end: chrono::DateTime<chrono::Utc>,
}

/// `[[alerts.slack]]`.
#[derive(Debug, Clone)]
pub struct SlackConfig {
    /// Channel name used in logs, metrics and `alert-test --channel`.
    pub name: String,
    /// Webhook URL (a secret).
    pub webhook_url: SecretString,
}

/// `[[alerts.email]]`.
#[derive(Debug, Clone)]
pub struct EmailConfig {
    /// Channel name.
    pub name: String,
    /// `smtp://user:pass@host:587` (STARTTLS), `smtps://…:465` or `smtp://host:25?tls=none`.
    pub smtp_url: SecretString,
    /// Sender.
    pub from: String,
    /// Recipients.
    pub to: Vec<String>,
}

/// `[[alerts.pagerduty]]`.
#[derive(Debug, Clone)]
pub struct PagerDutyConfig {
    /// Channel name.
    pub name: String,
    /// Integration key (a secret).
    pub routing_key: SecretString,
    /// Events API URL.
    pub events_url: Url,
}

/// `[[alerts.webhook]]`.
#[derive(Debug, Clone)]
pub struct WebhookConfig {
    /// Channel name.
    pub name: String,
    /// Receiver URL (a secret: it often embeds a token).
    pub url: SecretString,
    /// HMAC-SHA256 key for `X-Vigil-Signature`.
    pub secret: Option<SecretString>,
}

/// `[[alerts.alertmanager]]`: incidents posted to an Alertmanager's v2 API.
#[derive(Debug, Clone)]
pub struct AlertmanagerConfig {
    /// Channel name.
    pub name: String,
    /// Alertmanager base URL (`http://alertmanager:9093`; a secret, it may embed credentials).
    pub url: SecretString,
    /// Re-post firing incidents this often (well under Alertmanager's `resolve_timeout`).
    pub repost_every: Duration,
    /// `endsAt` of a firing post lies this far ahead: if vigil stops posting, Alertmanager resolves then.
    pub ends_after: Duration,
}

// ---------------------------------------------------------------- raw file shape

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawConfig {
    region: String,
    storage: RawStorage,
    http: RawHttp,
    probe: RawProbe,
    baseline: RawBaseline,
    breaker: RawBreaker,
    #[serde(skip_serializing)]
    provider: Option<Vec<RawProvider>>,
    alerts: RawAlerts,
    report: RawReport,
    #[serde(skip_serializing)]
    chain: Vec<crate::chain::RawChain>,
    deprecation: RawDeprecation,
    metrics: RawMetrics,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawMetrics {
    detail: String,
}

impl Default for RawMetrics {
    fn default() -> Self {
        RawMetrics { detail: "compact".into() }
    }
}

fn validate_metrics(raw: &RawMetrics) -> Result<MetricsConfig, ConfigError> {
    let detail = match raw.detail.trim() {
        "compact" => crate::metrics::Detail::Compact,
        "histograms" => crate::metrics::Detail::Histograms,
        "full" => crate::metrics::Detail::Full,
        other => {
            return Err(invalid("metrics.detail", format!("{other:?} must be \"compact\", \"histograms\" or \"full\"")))
        }
    };
    Ok(MetricsConfig { detail })
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawDeprecation {
    warn_days: u32,
    models_every: String,
}

impl Default for RawDeprecation {
    fn default() -> Self {
        RawDeprecation { warn_days: crate::alert::deprecation::DEFAULT_WARN_DAYS, models_every: "6h".into() }
    }
}

impl Default for RawConfig {
    fn default() -> Self {
        RawConfig {
            region: "local".into(),
            storage: RawStorage::default(),
            http: RawHttp::default(),
            probe: RawProbe::default(),
            baseline: RawBaseline::default(),
            breaker: RawBreaker::default(),
            provider: None,
            alerts: RawAlerts::default(),
            report: RawReport::default(),
            chain: vec![],
            deprecation: RawDeprecation::default(),
            metrics: RawMetrics::default(),
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawReport {
    weekly: String,
    // A list, so it has no VIGIL_* override (those cover scalars only).
    #[serde(skip_serializing)]
    weekly_to: Vec<String>,
}

impl Default for RawReport {
    fn default() -> Self {
        RawReport { weekly: DEFAULT_WEEKLY.into(), weekly_to: vec![] }
    }
}

/// Default `report.weekly`: Mondays at 09:00:00 UTC.
pub const DEFAULT_WEEKLY: &str = "0 0 9 * * Mon";

/// Parses a cron expression the way tokio-cron-scheduler does (six fields, seconds first).
pub fn parse_cron(key: &str, expr: &str) -> Result<croner::Cron, ConfigError> {
    croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Required)
        .dom_and_dow(true)
        .build()
        .parse(expr.trim())
        .map_err(|e| {
            invalid(
                key,
                format!(
                    "{expr:?} is not a cron expression with seconds (sec min hour day-of-month month day-of-week, \
                     e.g. \"{DEFAULT_WEEKLY}\"; or \"off\"): {e}"
                ),
            )
        })
}

fn validate_report(raw: RawReport, alerts: &AlertsConfig) -> Result<ReportConfig, ConfigError> {
    let weekly = match raw.weekly.trim() {
        "" | "off" => None,
        expr => {
            parse_cron("report.weekly", expr)?;
            Some(expr.to_string())
        }
    };
    for (i, to) in raw.weekly_to.iter().enumerate() {
        to.parse::<lettre::message::Mailbox>()
            .map_err(|e| invalid(format!("report.weekly_to[{i}]"), format!("{to:?} is not an email address: {e}")))?;
    }
    if !raw.weekly_to.is_empty() && alerts.email.is_empty() {
        return Err(invalid("report.weekly_to", "needs an [[alerts.email]] channel to send through"));
    }
    Ok(ReportConfig { weekly, weekly_to: raw.weekly_to })
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawStorage {
    url: String,
    retention_days: u32,
    data_dir: String,
    spool_max_mb: u64,
    batch_size: usize,
    batch_age: String,
    retention: RawRetention,
}

impl Default for RawStorage {
    fn default() -> Self {
        RawStorage {
            url: "sqlite://vigil.db".into(),
            retention_days: 30,
            data_dir: "vigil-data".into(),
            spool_max_mb: 256,
            batch_size: 5_000,
            batch_age: "1s".into(),
            retention: RawRetention::default(),
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawRetention {
    rollups_days: u32,
    outbox_days: u32,
    breaker_transitions_days: u32,
    credit_readings_days: u32,
    alert_state_days: u32,
    provider_status_days: u32,
    batch_size: u32,
    every: String,
}

impl Default for RawRetention {
    fn default() -> Self {
        RawRetention {
            rollups_days: 400,
            outbox_days: 30,
            breaker_transitions_days: 180,
            credit_readings_days: 90,
            alert_state_days: 30,
            provider_status_days: 180,
            batch_size: 5_000,
            every: "1h".into(),
        }
    }
}

fn validate_retention(raw: &RawRetention, baseline_window: Duration) -> Result<RetentionConfig, ConfigError> {
    let days = |key: &str, v: u32| count_in(&format!("storage.retention.{key}"), v, 1, 3650);
    let rollups_days = days("rollups_days", raw.rollups_days)?;
    // Baselines are rebuilt from rollups at start: pruning inside the window would shrink them.
    if Duration::from_secs(u64::from(rollups_days) * 86_400) < baseline_window {
        return Err(invalid(
            "storage.retention.rollups_days",
            format!(
                "{rollups_days} days is shorter than baseline.window ({}): baselines are built from rollups",
                humantime::format_duration(baseline_window)
            ),
        ));
    }
    Ok(RetentionConfig {
        rollups_days,
        outbox_days: days("outbox_days", raw.outbox_days)?,
        breaker_transitions_days: days("breaker_transitions_days", raw.breaker_transitions_days)?,
        credit_readings_days: days("credit_readings_days", raw.credit_readings_days)?,
        alert_state_days: days("alert_state_days", raw.alert_state_days)?,
        provider_status_days: days("provider_status_days", raw.provider_status_days)?,
        batch_size: count_in("storage.retention.batch_size", raw.batch_size, 100, 100_000)?,
        every: duration_in("storage.retention.every", &raw.every, MINUTE, DAY)?,
    })
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawHttp {
    listen: String,
    api_token_env: String,
    signing_key_env: String,
    api_token_file: String,
    signing_key_file: String,
}

impl Default for RawHttp {
    fn default() -> Self {
        RawHttp {
            listen: "127.0.0.1:9470".into(),
            api_token_env: "VIGIL_API_TOKEN".into(),
            signing_key_env: String::new(),
            api_token_file: String::new(),
            signing_key_file: String::new(),
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawProbe {
    interval: String,
    timeout: String,
    connect_timeout: String,
    ttft_timeout: String,
    max_tokens: u32,
    concurrency: usize,
    daily_budget_usd: f64,
    max_body_kb: usize,
    proxy: Option<String>,
    ca_file: Option<String>,
    status_page_every: String,
    max_interval: String,
    incident_interval: String,
    canary: RawCanary,
}

/// `[probe.canary]` as written.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawCanary {
    enabled: bool,
    interval: String,
    max_tokens: u32,
    seed: u64,
    logprobs: bool,
    concurrency: usize,
    reference_runs: usize,
    recent_runs: usize,
    alpha: f64,
    min_delta: f64,
}

impl Default for RawCanary {
    fn default() -> Self {
        let d = CanaryConfig::default();
        RawCanary {
            enabled: d.enabled,
            interval: "15m".into(),
            max_tokens: d.max_tokens,
            seed: d.seed,
            logprobs: d.logprobs,
            concurrency: d.concurrency,
            reference_runs: d.reference_runs,
            recent_runs: d.recent_runs,
            alpha: d.alpha,
            min_delta: d.min_delta,
        }
    }
}

/// `[probe.canary]`, validated; every error names its key.
fn validate_canary(c: &RawCanary) -> Result<CanaryConfig, ConfigError> {
    Ok(CanaryConfig {
        enabled: c.enabled,
        interval: duration_in("probe.canary.interval", &c.interval, MINUTE, 7 * DAY)?,
        max_tokens: count_in("probe.canary.max_tokens", c.max_tokens, 16, 1024)?,
        seed: c.seed,
        logprobs: c.logprobs,
        concurrency: size_in("probe.canary.concurrency", c.concurrency, 1, 64)?,
        reference_runs: size_in("probe.canary.reference_runs", c.reference_runs, 4, 1000)?,
        recent_runs: size_in("probe.canary.recent_runs", c.recent_runs, 2, 100)?,
        alpha: number_in("probe.canary.alpha", c.alpha, 0.0, 0.05, true)?,
        min_delta: number_in("probe.canary.min_delta", c.min_delta, 0.0, 1.0, true)?,
    })
}

impl Default for RawProbe {
    fn default() -> Self {
        RawProbe {
            interval: "60s".into(),
            timeout: "10s".into(),
            connect_timeout: "3s".into(),
            ttft_timeout: "8s".into(),
            max_tokens: 16,
            concurrency: 256,
            daily_budget_usd: 5.0,
            max_body_kb: 1024,
            proxy: None,
            ca_file: None,
            status_page_every: "3m".into(),
            max_interval: "5m".into(),
            // Empty: the base interval.
            incident_interval: String::new(),
            canary: RawCanary::default(),
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawBaseline {
    window: String,
    failover_factor: f64,
    min_samples_p50: u64,
    min_samples_p95: u64,
    min_samples_p99: u64,
}

impl Default for RawBaseline {
    fn default() -> Self {
        // A P95 needs a few hundred samples to be stable and a P99 about two thousand
        // (≈ 5 h and ≈ 33 h at one probe a minute); below that the quantile is null.
        RawBaseline {
            window: "7d".into(),
            failover_factor: 2.0,
            min_samples_p50: 30,
            min_samples_p95: 300,
            min_samples_p99: 2000,
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawBreaker {
    consecutive_failures: u32,
    failure_window: String,
    latency_trips: u32,
    open_for: String,
}

impl Default for RawBreaker {
    fn default() -> Self {
        RawBreaker { consecutive_failures: 3, failure_window: "120s".into(), latency_trips: 2, open_for: "5m".into() }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProvider {
    name: String,
    kind: Option<ProviderKind>,
    base_url: Option<String>,
    api_key_env: Option<String>,
    api_key_file: Option<String>,
    models: Option<Vec<String>>,
    #[serde(default)]
    routes: Vec<String>,
    #[serde(default)]
    reasoning_models: Vec<String>,
    balance: Option<RawBalance>,
    price: Option<Price>,
    #[serde(default)]
    prices: BTreeMap<String, Price>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    headers_env: BTreeMap<String, String>,
    #[serde(default)]
    headers_file: BTreeMap<String, String>,
    ca_file: Option<String>,
    client_cert_file: Option<String>,
    client_key_file: Option<String>,
    status_page_url: Option<String>,
    /// Components whose incidents `provider_incident` pages for this provider.
    status_page_components: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBalance {
    min_usd: f64,
    every: Option<String>,
    warn_hours: Option<f64>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawAlerts {
    renotify: String,
    error_probes: u32,
    resolve_after: u32,
    latency_factor: f64,
    latency_k: usize,
    latency_n: usize,
    flap_window: usize,
    flap_high: f64,
    flap_low: f64,
    delivery_deadline: String,
    status_url: String,
    #[serde(skip_serializing)]
    slack: Vec<RawSlack>,
    #[serde(skip_serializing)]
    email: Vec<RawEmail>,
    #[serde(skip_serializing)]
    pagerduty: Vec<RawPagerDuty>,
    #[serde(skip_serializing)]
    webhook: Vec<RawWebhook>,
    #[serde(skip_serializing)]
    alertmanager: Vec<RawAlertmanager>,
    #[serde(skip_serializing)]
    maintenance: Vec<RawMaintenance>,
    provider_incident: bool,
    provider_incident_components: Vec<String>,
}

impl Default for RawAlerts {
    fn default() -> Self {
        RawAlerts {
            renotify: "1h".into(),
            error_probes: 2,
            resolve_after: 3,
            latency_factor: 1.5,
            latency_k: 3,
            latency_n: 5,
            flap_window: 20,
            flap_high: 0.4,
            flap_low: 0.2,
            delivery_deadline: "24h".into(),
            status_url: String::new(),
            slack: vec![],
            email: vec![],
            pagerduty: vec![],
            webhook: vec![],
            alertmanager: vec![],
            maintenance: vec![],
            provider_incident: false,
            provider_incident_components: vec![],
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSlack {
    name: Option<String>,
    webhook_url_env: Option<String>,
    webhook_url_file: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEmail {
    name: Option<String>,
    smtp_url_env: Option<String>,
    smtp_url_file: Option<String>,
    from: String,
    to: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPagerDuty {
    name: Option<String>,
    routing_key_env: Option<String>,
    routing_key_file: Option<String>,
    events_url: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMaintenance {
    provider: String,
    start: String,
    end: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWebhook {
    name: Option<String>,
    url_env: Option<String>,
    url_file: Option<String>,
    secret_env: Option<String>,
    secret_file: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAlertmanager {
    name: Option<String>,
    url_env: Option<String>,
    url_file: Option<String>,
    repost_every: Option<String>,
    ends_after: Option<String>,
}

/// Built-in provider defaults: a `[[provider]]` with one of these names inherits what it omits.
struct Builtin {
    name: &'static str,
    kind: ProviderKind,
    base_url: &'static str,
    key_env: &'static str,
    model: &'static str,
    /// The provider's official status page when it serves the Statuspage v2 JSON API; "" = none.
    status_page: &'static str,
}

const BUILTINS: [Builtin; 7] = [
    Builtin {
        name: "openrouter",
        kind: ProviderKind::Openai,
        base_url: "https://openrouter.ai/api/v1",
        key_env: "OPENROUTER_API_KEY",
        model: "meta-llama/llama-3.1-8b-instruct",
        status_page: "",
    },
    Builtin {
        name: "openai",
        kind: ProviderKind::Openai,
        base_url: "https://api.openai.com/v1",
        key_env: "OPENAI_API_KEY",
        model: "gpt-4o-mini",
        status_page: "https://status.openai.com",
    },
    Builtin {
        name: "anthropic",
        kind: ProviderKind::Anthropic,
        base_url: "https://api.anthropic.com/v1",
        key_env: "ANTHROPIC_API_KEY",
        model: "claude-3-5-haiku-latest",
        status_page: "https://status.claude.com",
    },
    Builtin {
        name: "groq",
        kind: ProviderKind::Openai,
        base_url: "https://api.groq.com/openai/v1",
        key_env: "GROQ_API_KEY",
        model: "llama-3.1-8b-instant",
        status_page: "https://groqstatus.com",
    },
    Builtin {
        name: "together",
        kind: ProviderKind::Openai,
        base_url: "https://api.together.xyz/v1",
        key_env: "TOGETHER_API_KEY",
        model: "meta-llama/Llama-3.2-3B-Instruct-Turbo",
        status_page: "https://status.together.ai",
    },
    Builtin {
        name: "deepinfra",
        kind: ProviderKind::Openai,
        base_url: "https://api.deepinfra.com/v1/openai",
        key_env: "DEEPINFRA_API_KEY",
        model: "meta-llama/Meta-Llama-3.1-8B-Instruct",
        status_page: "",
    },
    Builtin {
        name: "gemini",
        kind: ProviderKind::Gemini,
        base_url: "https://generativelanguage.googleapis.com/v1beta",
        key_env: "GEMINI_API_KEY",
        model: "gemini-2.0-flash-lite",
        status_page: "",
    },
];

/// The probes' proxy: `probe.proxy` for every scheme (`off` for none), else `HTTPS_PROXY` and
/// `HTTP_PROXY` (either case) by scheme; `NO_PROXY` lists the hosts that bypass it.
fn proxy_config(key: Option<&str>, env: &dyn Env) -> Result<crate::probe::proxy::ProxyConfig, ConfigError> {
    let var = |names: [&str; 2]| names.iter().find_map(|n| env.get(n));
    let parse = |what: &str, v: String| -> Result<Url, ConfigError> {
        let with_scheme = if v.contains("://") { v } else { format!("http://{v}") };
        let u = Url::parse(&with_scheme).map_err(|e| invalid(what, e.to_string()))?;
        if u.scheme() != "http" {
            return Err(invalid(
                what,
                format!("scheme {:?}: only http:// proxies (HTTP CONNECT) are supported", u.scheme()),
            ));
        }
        if u.host_str().is_none() {
            return Err(invalid(what, "has no host"));
        }
        Ok(u)
    };
    let (https, http) = match key.map(str::trim) {
        Some("off") => (None, None),
        Some(v) if !v.is_empty() => {
            let u = parse("probe.proxy", v.to_string())?;
            (Some(u.clone()), Some(u))
        }
        _ => (
            var(["HTTPS_PROXY", "https_proxy"]).map(|v| parse("HTTPS_PROXY", v)).transpose()?,
            var(["HTTP_PROXY", "http_proxy"]).map(|v| parse("HTTP_PROXY", v)).transpose()?,
        ),
    };
    let no_proxy = var(["NO_PROXY", "no_proxy"])
        .map(|v| v.split(',').map(|e| e.trim().to_string()).filter(|e| !e.is_empty()).collect())
        .unwrap_or_default();
    Ok(crate::probe::proxy::ProxyConfig { https, http, no_proxy })
}

/// Every built-in provider's name, API host and default model (for the built-in price table).
pub fn builtin_defaults() -> impl Iterator<Item = (&'static str, String, &'static str)> {
    BUILTINS.iter().map(|b| {
        let host = Url::parse(b.base_url).ok().and_then(|u| u.host_str().map(str::to_string)).unwrap_or_default();
        (b.name, host, b.model)
    })
}

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
                crate::secret_file::read(Path::new(&path)).map(Some).map_err(|m| invalid(file_var, m))
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

impl Config {
    /// The one credit-watch list: every provider with a `balance` (validated at load to be one
    /// whose credit can be polled). The poller, the `credit_low` rule and the status page read it.
    pub fn credit_watch(&self) -> impl Iterator<Item = (&ProviderConfig, &BalanceConfig)> {
        self.providers.iter().filter_map(|p| p.balance.as_ref().map(|b| (p, b)))
    }

    /// Loads `path`, or `vigil.toml` in the working directory when it exists, else built-in defaults.
    pub fn load(path: Option<&Path>, env: &dyn Env) -> Result<Config, ConfigError> {
        let text = match path {
            Some(p) => std::fs::read_to_string(p)
                .map_err(|source| ConfigError::Read { path: p.display().to_string(), source })?,
            None => match std::fs::read_to_string("vigil.toml") {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
                Err(source) => return Err(ConfigError::Read { path: "vigil.toml".into(), source }),
            },
        };
        Config::from_toml(&text, env)
    }

    /// Parses and validates a TOML document with environment overrides applied.
    pub fn from_toml(text: &str, env: &dyn Env) -> Result<Config, ConfigError> {
        let mut doc: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            let span = e.span().map(|s| format!(" (at byte {})", s.start)).unwrap_or_default();
            invalid("config", format!("{}{span}", e.message()))
        })?;
        apply_env_overrides(&mut doc, env)?;
        let source = doc.clone();
        let raw: RawConfig = serde_path_to_error::deserialize(toml::Value::Table(doc)).map_err(|e| {
            let key = e.path().to_string();
            invalid(if key == "." { "config".into() } else { key }, e.into_inner().message().to_string())
        })?;
        let mut config = validate(raw, env)?;
        config.source = source;
        Ok(config)
    }

    /// The resolved config as a TOML document `--config` accepts back: defaults filled in,
    /// `VIGIL_*` overrides applied, providers resolved (built-in defaults spelled out), every
    /// secret named by its `*_env` variable and never shown, a database password replaced.
    pub fn redacted_toml(&self) -> String {
        let mut doc = toml::Table::try_from(RawConfig::default()).unwrap_or_default();
        merge(&mut doc, &self.source);
        let url = self.storage.url.expose_secret();
        table_mut(&mut doc, "storage").insert("url".into(), toml::Value::String(redact_url(url)));
        let probe = table_mut(&mut doc, "probe");
        if let Some(proxy) = probe.get("proxy").and_then(toml::Value::as_str).map(redact_url) {
            probe.insert("proxy".into(), toml::Value::String(proxy));
        }
        let raw_providers: Vec<&toml::Table> = self
            .source
            .get("provider")
            .and_then(toml::Value::as_array)
            .map(|a| a.iter().filter_map(toml::Value::as_table).collect())
            .unwrap_or_default();
        let raw_of = |name: &str| raw_providers.iter().find(|t| t.get("name").and_then(|n| n.as_str()) == Some(name));
        let mut providers = Vec::new();
        let order: Vec<String> = match raw_providers.is_empty() {
            true => BUILTINS.iter().map(|b| b.name.to_string()).collect(),
            false => raw_providers.iter().filter_map(|t| t.get("name")?.as_str().map(String::from)).collect(),
        };
        for name in &order {
            if let Some(p) = self.providers.iter().find(|p| &p.name == name) {
                let mut t = provider_table(p);
                // Paths to secrets are shown as written (the secrets themselves never are).
                for k in ["api_key_file", "headers_file"] {
                    if let Some(v) = raw_of(name).and_then(|raw| raw.get(k)) {
                        t.insert(k.into(), v.clone());
                    }
                }
                // Spelled out so the document reads back the same ("" = off, even for a built-in).
                let page = self.status_pages.pages.iter().find(|s| &s.provider == name);
                t.insert(
                    "status_page_url".into(),
                    toml::Value::String(page.map(|s| s.url.to_string()).unwrap_or_default()),
                );
                providers.push(toml::Value::Table(t));
            } else if let Some(raw) = raw_of(name) {
                providers.push(toml::Value::Table((*raw).clone()));
            } else if let Some((_, var)) = self.skipped.iter().find(|(n, _)| n == name) {
                let mut t = toml::Table::new();
                t.insert("name".into(), toml::Value::String(name.clone()));
                t.insert("api_key_env".into(), toml::Value::String(var.clone()));
                providers.push(toml::Value::Table(t));
            }
        }
        doc.insert("provider".into(), toml::Value::Array(providers));
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
        for p in &self.providers {
            for m in &p.models {
                if let Some((price, source)) = crate::price_table::price_of(p, m, None, None) {
                    head.push_str(&format!(
                        "# price {}/{m}: ${} in, ${} out per 1M tokens ({})\n",
                        p.name,
                        price.input_per_mtok,
                        price.output_per_mtok,
                        source.label()
                    ));
                }
            }
        }
        match toml::to_string_pretty(&doc) {
            Ok(body) => head + &body,
            Err(e) => format!("# could not render config: {e}\n"),
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
        let mut pt = toml::Table::new();
        pt.insert("input_per_mtok".into(), toml::Value::Float(price.input_per_mtok));
        pt.insert("output_per_mtok".into(), toml::Value::Float(price.output_per_mtok));
        t.insert("price".into(), toml::Value::Table(pt));
    }
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
        let price = |pr: &Price| {
            let mut pt = toml::Table::new();
            pt.insert("input_per_mtok".into(), toml::Value::Float(pr.input_per_mtok));
            pt.insert("output_per_mtok".into(), toml::Value::Float(pr.output_per_mtok));
            toml::Value::Table(pt)
        };
        t.insert("prices".into(), toml::Value::Table(p.prices.iter().map(|(m, pr)| (m.clone(), price(pr))).collect()));
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

/// Deep-merges `over` into `base`: tables key by key, anything else replaced.
fn merge(base: &mut toml::Table, over: &toml::Table) {
    for (k, v) in over {
        match (base.get_mut(k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            _ => {
                base.insert(k.clone(), v.clone());
            }
        }
    }
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

/// Every scalar in the defaults becomes overridable by `VIGIL_<PATH>`; the value is parsed as
/// the type the default has, so `VIGIL_PROBE_CONCURRENCY=abc` is rejected naming the variable.
fn apply_env_overrides(doc: &mut toml::Table, env: &dyn Env) -> Result<(), ConfigError> {
    let defaults = toml::Table::try_from(RawConfig::default()).map_err(|e| invalid("config", e.to_string()))?;
    if let Some(url) = env.get_or_file("DATABASE_URL")? {
        table_mut(doc, "storage").insert("url".into(), toml::Value::String(url));
    }
    override_scalars(doc, &defaults, "VIGIL", env)
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

fn table_mut<'a>(doc: &'a mut toml::Table, key: &str) -> &'a mut toml::Table {
    let entry = doc.entry(key.to_string()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
    if !entry.is_table() {
        *entry = toml::Value::Table(toml::Table::new());
    }
    match entry {
        toml::Value::Table(t) => t,
        _ => unreachable!("replaced by a table above"),
    }
}

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

/// Parses `1s`, `60s`, `5m`, `7d`, `1h30m`; zero is refused.
pub fn parse_duration(key: &str, s: &str) -> Result<Duration, ConfigError> {
    let d = humantime::parse_duration(s.trim())
        .map_err(|e| invalid(key, format!("{s:?} is not a duration ({e}); use e.g. 1s, 60s, 5m, 7d")))?;
    if d.is_zero() {
        return Err(invalid(key, "must be greater than zero"));
    }
    Ok(d)
}

const SECOND: Duration = Duration::from_secs(1);
const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(86_400);

/// A duration within `min..=max` (both shown in the error), so no later arithmetic on it can
/// overflow and no loop over it can spin.
pub fn duration_in(key: &str, s: &str, min: Duration, max: Duration) -> Result<Duration, ConfigError> {
    let d = parse_duration(key, s)?;
    if d < min || d > max {
        let show = |d: Duration| humantime::format_duration(d).to_string();
        return Err(invalid(key, format!("{s:?} is out of range: must be from {} to {}", show(min), show(max))));
    }
    Ok(d)
}

/// A count within `min..=max`.
fn count_in<T: Copy + Into<u128>>(key: &str, v: T, min: u64, max: u64) -> Result<T, ConfigError> {
    let n: u128 = v.into();
    if n < u128::from(min) || n > u128::from(max) {
        return Err(invalid(key, format!("{n} is out of range: must be from {min} to {max}")));
    }
    Ok(v)
}

/// A `usize` count within `min..=max` (usize has no `Into<u128>`).
fn size_in(key: &str, v: usize, min: u64, max: u64) -> Result<usize, ConfigError> {
    count_in(key, v as u64, min, max).map(|_| v)
}

/// A finite number within `min..=max`; with `above_min`, `min` itself is refused.
fn number_in(key: &str, v: f64, min: f64, max: f64, above_min: bool) -> Result<f64, ConfigError> {
    let low_ok = if above_min { v > min } else { v >= min };
    if v.is_finite() && low_ok && v <= max {
        Ok(v)
    } else {
        let low = if above_min { "above" } else { "from" };
        Err(invalid(key, format!("{v} is out of range: must be a number {low} {min} up to {max}")))
    }
}

/// Refuses control characters (CR, LF, NUL, ESC, …) in a value that ends up in a request,
/// a label or a log line.
fn no_controls(key: &str, v: &str) -> Result<(), ConfigError> {
    if v.chars().any(|c| c.is_control()) {
        return Err(invalid(key, "must not contain control characters (CR, LF, tab, NUL, …)"));
    }
    Ok(())
}

fn validate(raw: RawConfig, env: &dyn Env) -> Result<Config, ConfigError> {
    if raw.region.trim().is_empty() {
        return Err(invalid("region", "must not be empty"));
    }
    no_controls("region", &raw.region)?;
    if raw.region.len() > 64 {
        return Err(invalid("region", "must be at most 64 bytes"));
    }
    let storage = StorageConfig {
        url: {
            let u = raw.storage.url.trim();
            if !(u.starts_with("sqlite:") || u.starts_with("postgres://") || u.starts_with("postgresql://")) {
                return Err(invalid(
                    "storage.url",
                    format!("{:?} must start with sqlite:// or postgres://", redact_url(u)),
                ));
            }
            SecretString::from(u.to_string())
        },
        retention_days: count_in("storage.retention_days", raw.storage.retention_days, 1, 3650)?,
        data_dir: PathBuf::from(&raw.storage.data_dir),
        spool_max_bytes: count_in("storage.spool_max_mb", raw.storage.spool_max_mb, 1, 1 << 20)? * 1024 * 1024,
        batch_size: size_in("storage.batch_size", raw.storage.batch_size, 1, 100_000)?,
        batch_age: duration_in("storage.batch_age", &raw.storage.batch_age, Duration::from_millis(1), MINUTE)?,
        retention: validate_retention(
            &raw.storage.retention,
            duration_in("baseline.window", &raw.baseline.window, MINUTE, 90 * DAY)?,
        )?,
    };
    let http = HttpConfig {
        listen: raw.http.listen.parse().map_err(|_| {
            invalid("http.listen", format!("{:?} is not host:port (e.g. 127.0.0.1:9470)", raw.http.listen))
        })?,
        // A file, when given, replaces the default variable.
        api_token: match raw.http.api_token_file.trim() {
            "" => secret_of(env, "http.api_token", Some(raw.http.api_token_env.as_str()), None)?,
            file => secret_of(env, "http.api_token", None, Some(file))?,
        },
        api_token_env: raw.http.api_token_env,
        signing_key: match raw.http.signing_key_file.trim() {
            "" => crate::signing::key_from_env(&raw.http.signing_key_env, env)?,
            file if raw.http.signing_key_env.trim().is_empty() => Some(crate::signing::key_from_file(Path::new(file))?),
            _ => {
                return Err(invalid(
                    "http.signing_key_file",
                    "set either http.signing_key_env or http.signing_key_file, not both",
                ))
            }
        },
        signing_key_env: Some(raw.http.signing_key_env).filter(|v| !v.is_empty()),
    };
    let p = &raw.probe;
    let ms = Duration::from_millis;
    let ca_file = p.ca_file.as_deref().map(std::path::PathBuf::from);
    let ca_certs = match &ca_file {
        Some(path) => crate::probe::trust::load_certs(path).map_err(|e| invalid("probe.ca_file", e))?,
        None => Vec::new(),
    };
    let probe = ProbeConfig {
        ca_file,
        ca_certs,
        proxy: proxy_config(p.proxy.as_deref(), env)?,
        interval: duration_in("probe.interval", &p.interval, SECOND, DAY)?,
        timeout: duration_in("probe.timeout", &p.timeout, ms(10), HOUR)?,
        connect_timeout: duration_in("probe.connect_timeout", &p.connect_timeout, ms(10), HOUR)?,
        ttft_timeout: duration_in("probe.ttft_timeout", &p.ttft_timeout, ms(10), HOUR)?,
        max_tokens: count_in("probe.max_tokens", p.max_tokens, 1, 100_000)?,
        concurrency: size_in("probe.concurrency", p.concurrency, 1, 4096)?,
        daily_budget_usd: number_in("probe.daily_budget_usd", p.daily_budget_usd, 0.0, 1_000_000.0, true)?,
        // 1 GiB at most: the byte count then fits every usize vigil runs on.
        max_body_bytes: size_in("probe.max_body_kb", p.max_body_kb, 1, 1 << 20)? * 1024,
    };
    let adaptive = adaptive_intervals(p, &probe)?;
    if probe.timeout > probe.interval {
        return Err(invalid(
            "probe.timeout",
            "must not exceed probe.interval (a target is never probed twice at once)",
        ));
    }
    let b = &raw.baseline;
    let samples = |key: &str, n: u64| count_in(key, n, 1, 100_000_000);
    let baseline = BaselineConfig {
        window: duration_in("baseline.window", &b.window, MINUTE, 90 * DAY)?,
        failover_factor: number_in("baseline.failover_factor", b.failover_factor, 1.0, 100.0, false)?,
        min_samples_p50: samples("baseline.min_samples_p50", b.min_samples_p50)?,
        min_samples_p95: samples("baseline.min_samples_p95", b.min_samples_p95)?,
        min_samples_p99: samples("baseline.min_samples_p99", b.min_samples_p99)?,
    };
    let breaker = BreakerConfig {
        consecutive_failures: count_in("breaker.consecutive_failures", raw.breaker.consecutive_failures, 1, 1000)?,
        failure_window: duration_in("breaker.failure_window", &raw.breaker.failure_window, SECOND, DAY)?,
        latency_trips: count_in("breaker.latency_trips", raw.breaker.latency_trips, 1, 1000)?,
        open_for: duration_in("breaker.open_for", &raw.breaker.open_for, SECOND, DAY)?,
    };

    let raw_providers = raw.provider.unwrap_or_else(|| {
        BUILTINS
            .iter()
            .map(|b| RawProvider {
                name: b.name.into(),
                kind: None,
                base_url: None,
                api_key_env: None,
                api_key_file: None,
                models: None,
                routes: vec![],
                reasoning_models: vec![],
                balance: None,
                price: None,
                prices: BTreeMap::new(),
                headers: BTreeMap::new(),
                headers_env: BTreeMap::new(),
                headers_file: BTreeMap::new(),
                ca_file: None,
                client_cert_file: None,
                client_key_file: None,
                status_page_url: None,
                status_page_components: None,
            })
            .collect()
    });
    let mut providers = Vec::new();
    let mut skipped = Vec::new();
    let mut names = std::collections::HashSet::new();
    let mut pages = Vec::new();
    for (i, rp) in raw_providers.into_iter().enumerate() {
        let key = |field: &str| format!("provider[{i}].{field}");
        if rp.name.trim().is_empty() {
            return Err(invalid(key("name"), "must not be empty"));
        }
        no_controls(&key("name"), &rp.name)?;
        validate_headers(i, &rp.headers, &rp.headers_env, &rp.headers_file)?;
        if !names.insert(rp.name.clone()) {
            return Err(invalid(key("name"), format!("duplicate provider name {:?}", rp.name)));
        }
        let builtin = BUILTINS.iter().find(|b| b.name == rp.name);
        let kind = rp
            .kind
            .or(builtin.map(|b| b.kind))
            .ok_or_else(|| invalid(key("kind"), "missing (openai | anthropic | azure | gemini | http)"))?;
        let base = rp
            .base_url
            .or(builtin.map(|b| b.base_url.to_string()))
            .ok_or_else(|| invalid(key("base_url"), "missing"))?;
        let base_url = Url::parse(&base).map_err(|e| invalid(key("base_url"), e.to_string()))?;
        if !matches!(base_url.scheme(), "http" | "https") {
            return Err(invalid(key("base_url"), format!("scheme {:?} is not http or https", base_url.scheme())));
        }
        let api_key_file = rp.api_key_file.filter(|f| !f.trim().is_empty());
        // A file, when given, replaces the built-in default variable.
        let api_key_env = match &api_key_file {
            Some(_) => rp.api_key_env,
            None => rp.api_key_env.or(builtin.map(|b| b.key_env.to_string())),
        };
        let api_key = secret_of(env, &key("api_key"), api_key_env.as_deref(), api_key_file.as_deref())?;
        if kind != ProviderKind::Http && api_key.is_none() {
            let var = api_key_env.clone().unwrap_or_default();
            if var.is_empty() {
                return Err(invalid(
                    key("api_key_env"),
                    "missing: name the variable (api_key_env) or the file (api_key_file) that holds the key",
                ));
            }
            skipped.push((rp.name.clone(), var));
            continue;
        }
        let models = match (kind, rp.models) {
            (ProviderKind::Http, Some(m)) if !m.is_empty() => {
                return Err(invalid(key("models"), "plain http providers take no models"));
            }
            (ProviderKind::Http, _) => vec![String::new()],
            (_, Some(m)) if !m.is_empty() => m,
            (_, _) => match builtin {
                Some(b) => vec![b.model.to_string()],
                None => return Err(invalid(key("models"), "needs at least one model")),
            },
        };
        if let Some(j) = models.iter().position(|m| kind != ProviderKind::Http && m.trim().is_empty()) {
            return Err(invalid(format!("provider[{i}].models[{j}]"), "must not be empty"));
        }
        for (list, values) in [("models", &models), ("routes", &rp.routes), ("reasoning_models", &rp.reasoning_models)]
        {
            for (j, v) in values.iter().enumerate() {
                no_controls(&format!("provider[{i}].{list}[{j}]"), v)?;
                if values[..j].contains(v) {
                    return Err(invalid(format!("provider[{i}].{list}[{j}]"), format!("duplicate {v:?}")));
                }
            }
        }
        if rp.balance.is_some() && kind != ProviderKind::Openai {
            return Err(invalid(
                key("balance"),
                format!(
                    "credit is read from an OpenRouter-compatible /key and /credits API (kind = \"openai\"); \
                     kind = \"{}\" has none, so this balance would never be polled",
                    kind.as_str()
                ),
            ));
        }
        let balance = match rp.balance {
            Some(b) => Some(BalanceConfig {
                min_usd: number_in(&key("balance.min_usd"), b.min_usd, 0.0, 1_000_000_000.0, false)?,
                every: duration_in(&key("balance.every"), b.every.as_deref().unwrap_or("5m"), SECOND, DAY)?,
                warn_hours: number_in(&key("balance.warn_hours"), b.warn_hours.unwrap_or(24.0), 0.0, 8760.0, true)?,
            }),
            None => None,
        };
        if let Some(price) = rp.price {
            number_in(&key("price.input_per_mtok"), price.input_per_mtok, 0.0, 1_000_000.0, false)?;
            number_in(&key("price.output_per_mtok"), price.output_per_mtok, 0.0, 1_000_000.0, false)?;
        }
        for (model, price) in &rp.prices {
            number_in(&key(&format!("prices.{model}.input_per_mtok")), price.input_per_mtok, 0.0, 1_000_000.0, false)?;
            number_in(
                &key(&format!("prices.{model}.output_per_mtok")),
                price.output_per_mtok,
                0.0,
                1_000_000.0,
                false,
            )?;
        }
        let mut secret_headers = Vec::new();
        let from_env = rp.headers_env.iter().map(|(n, var)| (n, "headers_env", var, env.get_or_file(var)));
        let from_file = rp.headers_file.iter().map(|(n, path)| {
            let value = crate::secret_file::read(Path::new(path))
                .map(Some)
                .map_err(|m| invalid(format!("provider[{i}].headers_file.{n}"), m));
            (n, "headers_file", path, value)
        });
        for (name, field, source, value) in from_env.chain(from_file) {
            let hkey = format!("provider[{i}].{field}.{name}");
            let value = value?.ok_or_else(|| {
                invalid(&hkey, format!("environment variable {source} is not set (nor {source}_FILE)"))
            })?;
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
        let ca_file = rp.ca_file.as_deref().map(std::path::PathBuf::from);
        let ca_certs = match &ca_file {
            Some(path) => crate::probe::trust::load_certs(path).map_err(|e| invalid(key("ca_file"), e))?,
            None => Vec::new(),
        };
        let client = match (&rp.client_cert_file, &rp.client_key_file) {
            (Some(c), Some(k)) => Some(
                crate::probe::trust::load_identity(c.as_ref(), k.as_ref())
                    .map_err(|e| invalid(key("client_cert_file"), e))?,
            ),
            (None, None) => None,
            (Some(_), None) => return Err(invalid(key("client_key_file"), "missing: client_cert_file needs its key")),
            (None, Some(_)) => {
                return Err(invalid(key("client_cert_file"), "missing: client_key_file needs its certificate"))
            }
        };
        let tls = crate::probe::trust::ProviderTls { ca_file, ca_certs, client };
        let page = rp.status_page_url.unwrap_or_else(|| builtin.map_or("", |b| b.status_page).to_string());
        if !page.trim().is_empty() {
            let url = Url::parse(page.trim()).map_err(|e| invalid(key("status_page_url"), e.to_string()))?;
            if !matches!(url.scheme(), "http" | "https") {
                return Err(invalid(key("status_page_url"), format!("scheme {:?} is not http or https", url.scheme())));
            }
            if let Some(list) = &rp.status_page_components {
                for (i, c) in list.iter().enumerate() {
                    no_controls(&format!("{}[{i}]", key("status_page_components")), c)?;
                }
            }
            pages.push(StatusPageSource {
                provider: rp.name.clone(),
                url,
                components: rp.status_page_components.clone(),
            });
        }
        providers.push(ProviderConfig {
            name: rp.name,
            kind,
            base_url,
            api_key_env,
            api_key,
            models,
            routes: rp.routes,
            reasoning_models: rp.reasoning_models,
            balance,
            price: rp.price,
            prices: rp.prices,
            headers: rp.headers,
            secret_headers,
            tls,
        });
    }

    let known: Vec<&str> =
        providers.iter().map(|p| p.name.as_str()).chain(skipped.iter().map(|(n, _)| n.as_str())).collect();
    for (i, m) in raw.alerts.maintenance.iter().enumerate() {
        if !known.contains(&m.provider.as_str()) {
            return Err(invalid(
                format!("alerts.maintenance[{i}].provider"),
                format!("{:?} is not a configured provider (known: {})", m.provider, known.join(", ")),
            ));
        }
    }
    let status_page_every = duration_in("probe.status_page_every", &raw.probe.status_page_every, SECOND, DAY)?;
    for (i, c) in raw.alerts.provider_incident_components.iter().enumerate() {
        no_controls(&format!("alerts.provider_incident_components[{i}]"), c)?;
    }
    let status_pages = StatusPagesConfig {
        every: status_page_every,
        pages,
        alert: raw.alerts.provider_incident,
        alert_components: raw.alerts.provider_incident_components.clone(),
    };
    let alerts = validate_alerts(raw.alerts, env)?;
    let report = validate_report(raw.report, &alerts)?;
    let chains = crate::chain::validate(raw.chain, &providers, &skipped)?;
    let models_every = match raw.deprecation.models_every.trim() {
        "off" => None,
        every => Some(duration_in("deprecation.models_every", every, SECOND, 7 * DAY)?),
    };
    let deprecation = DeprecationConfig {
        warn_days: count_in("deprecation.warn_days", raw.deprecation.warn_days, 0, 3650)?,
        models_every,
    };
    let metrics = validate_metrics(&raw.metrics)?;
    let canary = validate_canary(&raw.probe.canary)?;
    Ok(Config {
        region: raw.region,
        storage,
        http,
        probe,
        baseline,
        breaker,
        providers,
        skipped,
        alerts,
        report,
        chains,
        status_pages,
        adaptive,
        source: toml::Table::new(),
        deprecation,
        metrics,
        canary,
    })
}

/// Header names and values must be valid HTTP without control characters; names that look like
/// they carry a credential must come from `headers_env`, never inline.
fn validate_headers(
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

/// A secret named by `<key>_env` (a variable, or the file its `_FILE` twin names) or by
/// `<key>_file` (a path); `None` when neither is given or the variable is unset. Errors name
/// the key and the path, never the content.
fn secret_of(
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
        (None, Some(path)) => crate::secret_file::read(Path::new(path))
            .map(|v| Some(SecretString::from(v)))
            .map_err(|m| invalid(format!("{key}_file"), m)),
        (Some(var), None) => Ok(env.get_or_file(var)?.map(SecretString::from)),
        (None, None) => Ok(None),
    }
}

/// [`secret_of`] for a secret that must be given.
fn secret_from(env: &dyn Env, key: &str, var: Option<&str>, file: Option<&str>) -> Result<SecretString, ConfigError> {
    secret_of(env, key, var, file)?.ok_or_else(|| match var.filter(|v| !v.trim().is_empty()) {
        Some(var) => invalid(format!("{key}_env"), format!("environment variable {var} is not set (nor {var}_FILE)")),
        None => invalid(
            format!("{key}_env"),
            format!("missing: name the variable ({key}_env) or the file ({key}_file) that holds it"),
        ),
    })
}

fn validate_alerts(raw: RawAlerts, env: &dyn Env) -> Result<AlertsConfig, ConfigError> {
    let name = |n: Option<String>, kind: &str, i: usize| {
        n.unwrap_or_else(|| if i == 0 { kind.to_string() } else { format!("{kind}-{i}") })
    };
    let mut slack = Vec::new();
    for (i, s) in raw.slack.into_iter().enumerate() {
        let webhook_url = secret_from(
            env,
            &format!("alerts.slack[{i}].webhook_url"),
            s.webhook_url_env.as_deref(),
            s.webhook_url_file.as_deref(),
        )?;
        slack.push(SlackConfig { name: name(s.name, "slack", i), webhook_url });
    }
    let mut email = Vec::new();
    for (i, e) in raw.email.into_iter().enumerate() {
        let smtp_url = secret_from(
            env,
            &format!("alerts.email[{i}].smtp_url"),
            e.smtp_url_env.as_deref(),
            e.smtp_url_file.as_deref(),
        )?;
        if e.to.is_empty() {
            return Err(invalid(format!("alerts.email[{i}].to"), "needs at least one recipient"));
        }
        email.push(EmailConfig { name: name(e.name, "email", i), smtp_url, from: e.from, to: e.to });
    }
    let mut pagerduty = Vec::new();
    for (i, p) in raw.pagerduty.into_iter().enumerate() {
        let routing_key = secret_from(
            env,
            &format!("alerts.pagerduty[{i}].routing_key"),
            p.routing_key_env.as_deref(),
            p.routing_key_file.as_deref(),
        )?;
        let url = p.events_url.unwrap_or_else(|| "https://events.pagerduty.com/v2/enqueue".into());
        let events_url =
            Url::parse(&url).map_err(|e| invalid(format!("alerts.pagerduty[{i}].events_url"), e.to_string()))?;
        pagerduty.push(PagerDutyConfig { name: name(p.name, "pagerduty", i), routing_key, events_url });
    }
    let mut webhook = Vec::new();
    for (i, w) in raw.webhook.into_iter().enumerate() {
        let url = secret_from(env, &format!("alerts.webhook[{i}].url"), w.url_env.as_deref(), w.url_file.as_deref())?;
        let secret = match (&w.secret_env, &w.secret_file) {
            (None, None) => None,
            (var, file) => {
                Some(secret_from(env, &format!("alerts.webhook[{i}].secret"), var.as_deref(), file.as_deref())?)
            }
        };
        webhook.push(WebhookConfig { name: name(w.name, "webhook", i), url, secret });
    }
    let mut alertmanager = Vec::new();
    for (i, a) in raw.alertmanager.into_iter().enumerate() {
        let url =
            secret_from(env, &format!("alerts.alertmanager[{i}].url"), a.url_env.as_deref(), a.url_file.as_deref())?;
        Url::parse(url.expose_secret())
            .map_err(|e| invalid(format!("alerts.alertmanager[{i}].url_env"), format!("not a URL: {e}")))?;
        let dur = |field: &str, v: Option<String>, default: &str| {
            parse_duration(&format!("alerts.alertmanager[{i}].{field}"), v.as_deref().unwrap_or(default))
        };
        let repost_every = dur("repost_every", a.repost_every, "1m")?;
        let ends_after = dur("ends_after", a.ends_after, "5m")?;
        if ends_after <= repost_every {
            return Err(invalid(format!("alerts.alertmanager[{i}].ends_after"), "must be longer than repost_every"));
        }
        alertmanager.push(AlertmanagerConfig { name: name(a.name, "alertmanager", i), url, repost_every, ends_after });
    }
    let mut maintenance = Vec::new();
    for (i, m) in raw.maintenance.into_iter().enumerate() {
        let time = |field: &str, v: &str| {
            chrono::DateTime::parse_from_rfc3339(v)
                .map(|t| t.with_timezone(&chrono::Utc))
                .map_err(|e| invalid(format!("alerts.maintenance[{i}].{field}"), format!("{v:?} is not RFC 3339: {e}")))
        };
        let (start, end) = (time("start", &m.start)?, time("end", &m.end)?);
        if end <= start {
            return Err(invalid(format!("alerts.maintenance[{i}].end"), "must be after start"));
        }
        maintenance.push(MaintenanceWindow { provider: m.provider, start, end });
    }
    if !(raw.latency_factor.is_finite() && raw.latency_factor > 0.0) {
        return Err(invalid("alerts.latency_factor", "must be a positive number"));
    }
    if raw.latency_k == 0 || raw.latency_n < raw.latency_k || raw.latency_n > 100 {
        return Err(invalid("alerts.latency_n", "needs 1 <= alerts.latency_k <= alerts.latency_n <= 100"));
    }
    if !(2..=200).contains(&raw.flap_window) {
        return Err(invalid("alerts.flap_window", "must be between 2 and 200 probes"));
    }
    if !(raw.flap_low >= 0.0 && raw.flap_low < raw.flap_high && raw.flap_high <= 1.2) {
        return Err(invalid("alerts.flap_high", "needs 0 <= alerts.flap_low < alerts.flap_high <= 1.2"));
    }
    Ok(AlertsConfig {
        renotify: duration_in("alerts.renotify", &raw.renotify, SECOND, 30 * DAY)?,
        error_probes: count_in("alerts.error_probes", raw.error_probes, 1, 1000)?,
        resolve_after: count_in("alerts.resolve_after", raw.resolve_after, 1, 1000)?,
        latency_factor: raw.latency_factor,
        latency_k: raw.latency_k,
        latency_n: raw.latency_n,
        flap_window: raw.flap_window,
        flap_high: raw.flap_high,
        flap_low: raw.flap_low,
        delivery_deadline: duration_in("alerts.delivery_deadline", &raw.delivery_deadline, SECOND, 30 * DAY)?,
        status_url: Some(raw.status_url).filter(|s| !s.is_empty()),
        slack,
        email,
        pagerduty,
        webhook,
        alertmanager,
        maintenance,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn probe_proxy_comes_from_the_key_or_the_environment_and_is_shown_redacted() {
        let env: BTreeMap<String, String> = [
            ("HTTPS_PROXY".to_string(), "http://user:s3cret@proxy.corp:3128".to_string()),
            ("no_proxy".to_string(), "localhost, .internal".to_string()),
        ]
        .into();
        let c = Config::from_toml("", &env).expect("config");
        assert_eq!(c.probe.proxy.https.as_ref().map(|u| u.as_str()), Some("http://user:s3cret@proxy.corp:3128/"));
        assert_eq!(c.probe.proxy.http, None);
        assert_eq!(c.probe.proxy.no_proxy, vec!["localhost".to_string(), ".internal".to_string()]);
        let shown = c.redacted_toml();
        assert!(shown.contains("proxy.corp:3128") && !shown.contains("s3cret"), "{shown}");
        let c = Config::from_toml("[probe]\nproxy = \"10.0.0.1:8080\"", &env).expect("config");
        assert_eq!(c.probe.proxy.http.as_ref().map(|u| u.as_str()), Some("http://10.0.0.1:8080/"));
        assert_eq!(c.probe.proxy.https, c.probe.proxy.http);
        let c = Config::from_toml("[probe]\nproxy = \"off\"", &env).expect("config");
        assert_eq!(c.probe.proxy.https, None);
        let e = Config::from_toml("[probe]\nproxy = \"socks5://h:1\"", &env).expect_err("socks refused");
        assert!(e.to_string().contains("probe.proxy"), "{e}");
    }

    #[test]
    fn adaptive_intervals_default_to_five_minutes_and_the_base_interval_and_are_bounded() {
        let c = Config::from_toml("", &env(&[("OPENAI_API_KEY", "sk-test-1")])).expect("valid");
        assert_eq!(c.adaptive.max_interval, Duration::from_secs(300));
        assert_eq!(c.adaptive.incident_interval, c.probe.interval, "no faster probing unless asked");
        let c = Config::from_toml(
            "[probe]\ninterval = \"30s\"\nmax_interval = \"2m\"\nincident_interval = \"10s\"\n\
             [[provider]]\nname = \"openai\"\nstatus_page_components = [\"Chat Completions\"]\n",
            &env(&[("OPENAI_API_KEY", "sk-test-1")]),
        )
        .expect("valid");
        assert_eq!(
            (c.adaptive.max_interval, c.adaptive.incident_interval),
            (Duration::from_secs(120), Duration::from_secs(10))
        );
        assert_eq!(c.status_pages.pages[0].components, Some(vec!["Chat Completions".to_string()]));
        err_at("[probe]\ninterval = \"60s\"\nmax_interval = \"30s\"", &[], "probe.max_interval");
        err_at("[probe]\nmax_interval = \"2d\"", &[], "probe.max_interval");
        err_at("[probe]\nincident_interval = \"2m\"", &[], "probe.incident_interval");
        err_at("[probe]\ntimeout = \"10s\"\nincident_interval = \"5s\"", &[], "probe.incident_interval");
    }

    #[test]
    fn metrics_detail_is_compact_by_default_and_checked() {
        let keys = env(&[("OPENAI_API_KEY", "sk-test-1")]);
        let c = Config::from_toml("", &keys).expect("valid");
        assert_eq!(c.metrics.detail, crate::metrics::Detail::Compact);
        let c = Config::from_toml("[metrics]\ndetail = \"full\"", &keys).expect("valid");
        assert_eq!(c.metrics.detail, crate::metrics::Detail::Full);
        let c = Config::from_toml("[metrics]\ndetail = \"histograms\"", &keys).expect("valid");
        assert_eq!(c.metrics.detail, crate::metrics::Detail::Histograms);
        let e = Config::from_toml("[metrics]\ndetail = \"all\"", &keys).expect_err("refused");
        assert!(e.to_string().contains("metrics.detail"), "{e}");
    }

    #[test]
    fn status_pages_default_for_builtins_can_be_set_or_switched_off() {
        let keys =
            env(&[("OPENAI_API_KEY", "sk-test-1"), ("GROQ_API_KEY", "sk-test-2"), ("DEEPINFRA_API_KEY", "sk-test-3")]);
        let c = Config::from_toml("", &keys).expect("valid");
        let pages: Vec<(&str, &str)> =
            c.status_pages.pages.iter().map(|p| (p.provider.as_str(), p.url.as_str())).collect();
        assert_eq!(pages, vec![("openai", "https://status.openai.com/"), ("groq", "https://groqstatus.com/")]);
        assert_eq!(c.status_pages.every, Duration::from_secs(180));
        assert!(!c.status_pages.alert, "provider_incident is off by default");
        let text = "[probe]\nstatus_page_every = \"5m\"\n[alerts]\nprovider_incident = true\nprovider_incident_components = [\"Chat Completions\"]\n\
                    [[provider]]\nname = \"openai\"\nstatus_page_url = \"\"\n\
                    [[provider]]\nname = \"deepinfra\"\nstatus_page_url = \"https://status.example.invalid\"\n";
        let c = Config::from_toml(text, &keys).expect("valid");
        assert_eq!(c.status_pages.pages.len(), 1, "openai switched off");
        assert_eq!(c.status_pages.pages[0].provider, "deepinfra");
        assert_eq!(c.status_pages.every, Duration::from_secs(300));
        assert!(c.status_pages.alert);
        assert_eq!(c.status_pages.alert_components, vec!["Chat Completions".to_string()]);
        assert!(c.redacted_toml().contains("status.example.invalid"));
        let back = Config::from_toml(&c.redacted_toml(), &keys).expect("check-config output reads back");
        assert_eq!(back.status_pages.pages, c.status_pages.pages, "off stays off, set stays set");
        assert_eq!(back.status_pages.every, c.status_pages.every);
        assert_eq!(back.status_pages.alert_components, c.status_pages.alert_components);
        let bad = Config::from_toml("[[provider]]\nname = \"openai\"\nstatus_page_url = \"ftp://x\"\n", &keys)
            .expect_err("not http");
        assert!(bad.to_string().contains("provider[0].status_page_url"), "{bad}");
        let fast = Config::from_toml("[probe]\nstatus_page_every = \"10ms\"\n", &keys).expect_err("too fast");
        assert!(fast.to_string().contains("probe.status_page_every"), "{fast}");
    }

    #[test]
    fn maintenance_windows_parse_and_bad_ones_name_the_key() {
        let text = "[[alerts.maintenance]]\nprovider = \"openrouter\"\nstart = \"2026-12-01T02:00:00Z\"\nend = \"2026-12-01T04:00:00+00:00\"";
        let c = Config::from_toml(text, &env(&[])).expect("valid");
        assert_eq!(c.alerts.maintenance.len(), 1);
        assert_eq!(c.alerts.maintenance[0].provider, "openrouter");
        assert_eq!((c.alerts.maintenance[0].end - c.alerts.maintenance[0].start).num_hours(), 2);
        let backwards = "[[alerts.maintenance]]\nprovider = \"openrouter\"\nstart = \"2026-12-01T04:00:00Z\"\nend = \"2026-12-01T02:00:00Z\"";
        assert_eq!(err(backwards, &[]), "alerts.maintenance[0].end: must be after start");
        let garbled =
            "[[alerts.maintenance]]\nprovider = \"openrouter\"\nstart = \"tomorrow\"\nend = \"2026-12-01T02:00:00Z\"";
        assert!(err(garbled, &[]).starts_with("alerts.maintenance[0].start: \"tomorrow\" is not RFC 3339"));
    }

    fn err(text: &str, e: &[(&str, &str)]) -> String {
        match Config::from_toml(text, &env(e)) {
            Ok(_) => panic!("config should be rejected:\n{text}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn empty_file_enables_only_builtins_whose_key_is_set() {
        let c = Config::from_toml("", &env(&[("GROQ_API_KEY", "sk-test-groq")])).expect("valid");
        assert_eq!(c.providers.len(), 1);
        assert_eq!(c.providers[0].name, "groq");
        assert_eq!(c.providers[0].base_url.as_str(), "https://api.groq.com/openai/v1");
        assert_eq!(c.skipped.len(), 6);
        assert!(c.skipped.iter().any(|(n, v)| n == "openrouter" && v == "OPENROUTER_API_KEY"));
        assert_eq!(c.probe.interval, Duration::from_secs(60));
        assert_eq!(c.baseline.window, Duration::from_secs(7 * 86400));
    }

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

    #[test]
    fn weekly_report_schedule_defaults_to_monday_0900_utc_and_can_be_turned_off() {
        let c = Config::from_toml("", &env(&[])).expect("valid");
        assert_eq!(c.report.weekly.as_deref(), Some("0 0 9 * * Mon"));
        assert!(c.report.weekly_to.is_empty());
        let cron = parse_cron("k", DEFAULT_WEEKLY).expect("default parses");
        let sunday = chrono::DateTime::parse_from_rfc3339("2026-11-29T23:00:00Z").expect("time");
        let next = cron.find_next_occurrence(&sunday.with_timezone(&chrono::Utc), false).expect("next");
        assert_eq!(next.to_rfc3339(), "2026-11-30T09:00:00+00:00", "the Monday after, 09:00 UTC");
        let off = Config::from_toml("[report]\nweekly = \"off\"", &env(&[])).expect("valid");
        assert_eq!(off.report.weekly, None);
        let every_friday = Config::from_toml("", &env(&[("VIGIL_REPORT_WEEKLY", "30 15 17 * * Fri")])).expect("env");
        assert_eq!(every_friday.report.weekly.as_deref(), Some("30 15 17 * * Fri"));
        assert!(c.redacted_toml().contains("weekly = \"0 0 9 * * Mon\""), "{}", c.redacted_toml());
    }

    #[test]
    fn a_bad_weekly_schedule_or_recipient_names_the_key() {
        let e = err("[report]\nweekly = \"0 9 * * Mon\"", &[]);
        assert!(e.starts_with("report.weekly: \"0 9 * * Mon\" is not a cron expression with seconds"), "{e}");
        let e = err("[report]\nweekly = \"0 0 25 * * Mon\"", &[]);
        assert!(e.starts_with("report.weekly: "), "{e}");
        let e = err("", &[("VIGIL_REPORT_WEEKLY", "mondays")]);
        assert!(e.starts_with("report.weekly: \"mondays\""), "{e}");
        let e = err("[report]\nweekly_to = [\"ops@example.com\"]", &[]);
        assert_eq!(e, "report.weekly_to: needs an [[alerts.email]] channel to send through");
        let with_email = "[[alerts.email]]\nsmtp_url_env = \"SMTP_URL\"\nfrom = \"vigil@example.com\"\nto = [\"a@example.com\"]\n[report]\nweekly_to = [\"ops@example.com\", \"not an address\"]";
        let e = err(with_email, &[("SMTP_URL", "smtp://127.0.0.1:25?tls=none")]);
        assert!(e.starts_with("report.weekly_to[1]: \"not an address\" is not an email address"), "{e}");
        assert!(err("[report]\nweekly = 5", &[]).starts_with("report.weekly:"));
        assert!(err("[report]\nmonthly = \"x\"", &[]).starts_with("report.monthly: unknown field"));
    }

    #[test]
    fn durations_accept_seconds_to_days() {
        assert_eq!(parse_duration("k", "1s").ok(), Some(Duration::from_secs(1)));
        assert_eq!(parse_duration("k", "5m").ok(), Some(Duration::from_secs(300)));
        assert_eq!(parse_duration("k", "7d").ok(), Some(Duration::from_secs(604800)));
        assert!(parse_duration("k", "0s").is_err());
    }

    #[test]
    fn builtin_name_inherits_defaults_and_keeps_overrides() {
        let c = Config::from_toml(
            "[[provider]]\nname = \"openai\"\nmodels = [\"gpt-4.1-nano\"]",
            &env(&[("OPENAI_API_KEY", "sk-test-x")]),
        )
        .expect("valid");
        assert_eq!(c.providers[0].kind, ProviderKind::Openai);
        assert_eq!(c.providers[0].models, vec!["gpt-4.1-nano"]);
        assert_eq!(
            c.providers[0].api_key.as_ref().map(|k| k.expose_secret().to_string()).as_deref(),
            Some("sk-test-x")
        );
    }
    /// The error for `text`, which must start with `key: ` and must not be a panic.
    fn err_at(text: &str, e: &[(&str, &str)], key: &str) -> String {
        let msg = err(text, e);
        assert!(msg.starts_with(&format!("{key}: ")), "expected an error naming {key}, got: {msg}");
        msg
    }

    #[test]
    fn every_duration_has_a_range_named_in_the_error() {
        let cases = [
            ("probe", "interval", "500ms", "1000000000y"),
            ("probe", "timeout", "1ms", "2h"),
            ("probe", "connect_timeout", "1ms", "2h"),
            ("probe", "ttft_timeout", "1ms", "2h"),
            ("storage", "batch_age", "100us", "2m"),
            ("baseline", "window", "30s", "100000y"),
            ("breaker", "failure_window", "500ms", "2d"),
            ("breaker", "open_for", "500ms", "2d"),
            ("alerts", "renotify", "500ms", "31d"),
            ("alerts", "delivery_deadline", "500ms", "31d"),
        ];
        for (section, field, low, high) in cases {
            let key = format!("{section}.{field}");
            for bad in [low, high] {
                // A long interval keeps probe.timeout ≤ interval out of the way.
                let extra = if section == "probe" && field != "interval" { "interval = \"1d\"\n" } else { "" };
                let text = format!("[{section}]\n{extra}{field} = \"{bad}\"");
                let msg = err_at(&text, &[], &key);
                assert!(msg.contains("out of range") || msg.contains("not a duration"), "{msg}");
            }
        }
        let c =
            Config::from_toml("[probe]\ninterval = \"1s\"\ntimeout = \"1s\"\n[baseline]\nwindow = \"90d\"", &env(&[]))
                .expect("the bounds themselves are accepted");
        assert_eq!(c.baseline.window, Duration::from_secs(90 * 86_400));
    }

    #[test]
    fn every_count_and_size_has_a_range_named_in_the_error() {
        let cases: [(&str, &str, &str, &str); 16] = [
            ("storage", "retention_days", "0", "4000000000"),
            ("storage", "spool_max_mb", "0", "18014398509481984"),
            ("storage", "batch_size", "0", "100001"),
            ("probe", "max_tokens", "0", "100001"),
            ("probe", "concurrency", "0", "9223372036854775807"),
            ("probe", "max_body_kb", "0", "18014398509481984"),
            ("probe", "daily_budget_usd", "0.0", "1e300"),
            ("baseline", "failover_factor", "0.5", "1e9"),
            ("baseline", "min_samples_p50", "0", "100000001"),
            ("baseline", "min_samples_p95", "0", "100000001"),
            ("baseline", "min_samples_p99", "0", "100000001"),
            ("breaker", "consecutive_failures", "0", "1001"),
            ("breaker", "latency_trips", "0", "1001"),
            ("alerts", "error_probes", "0", "1001"),
            ("alerts", "resolve_after", "0", "1001"),
            ("probe", "daily_budget_usd", "-1.0", "nan"),
        ];
        for (section, field, low, high) in cases {
            let key = format!("{section}.{field}");
            for bad in [low, high] {
                err_at(&format!("[{section}]\n{field} = {bad}"), &[], &key);
            }
        }
        // The same bounds hold for environment overrides, named by the key.
        err_at("", &[("VIGIL_PROBE_CONCURRENCY", "9223372036854775807")], "probe.concurrency");
        err_at("", &[("VIGIL_PROBE_INTERVAL", "500ms")], "probe.interval");
    }

    #[test]
    fn a_balance_is_refused_where_credit_cannot_be_polled() {
        let p = |kind: &str| {
            format!("[[provider]]\nname = \"s\"\nkind = \"{kind}\"\nbase_url = \"http://127.0.0.1:1\"\napi_key_env = \"K\"\nmodels = [\"m\"]\nbalance = {{ min_usd = 5.0 }}\n")
        };
        let k = [("K", "sk-test-k")];
        for kind in ["anthropic", "gemini", "azure"] {
            let msg = err_at(&p(kind), &k, "provider[0].balance");
            assert!(msg.contains(&format!("kind = \"{kind}\" has none")), "{msg}");
        }
        let c = Config::from_toml(&p("openai"), &env(&k)).expect("openai kind polls credit");
        assert_eq!(c.credit_watch().map(|(p, b)| (p.name.as_str(), b.min_usd)).collect::<Vec<_>>(), [("s", 5.0)]);
    }

    #[test]
    fn provider_numbers_have_ranges() {
        let p = |extra: &str| {
            format!("[[provider]]\nname = \"s\"\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1\"\napi_key_env = \"K\"\nmodels = [\"m\"]\n{extra}")
        };
        let k = [("K", "sk-test-k")];
        err_at(&p("balance = { min_usd = -1.0 }"), &k, "provider[0].balance.min_usd");
        err_at(&p("balance = { min_usd = 1.0, every = \"1000000000y\" }"), &k, "provider[0].balance.every");
        err_at(&p("balance = { min_usd = 1.0, warn_hours = 0.0 }"), &k, "provider[0].balance.warn_hours");
        err_at(&p("price = { input_per_mtok = 1e300, output_per_mtok = 1.0 }"), &k, "provider[0].price.input_per_mtok");
        err_at(&p("price = { input_per_mtok = 1.0, output_per_mtok = -1.0 }"), &k, "provider[0].price.output_per_mtok");
    }

    #[test]
    fn duplicates_control_characters_and_unknown_maintenance_providers_are_refused() {
        let p = |extra: &str| {
            format!("[[provider]]\nname = \"s\"\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1\"\napi_key_env = \"K\"\n{extra}")
        };
        let k = [("K", "sk-test-k")];
        let e = err_at(&p("models = [\"a\", \"b\", \"a\"]"), &k, "provider[0].models[2]");
        assert!(e.contains("duplicate"), "{e}");
        err_at(&p("models = [\"a\"]\nroutes = [\"X\", \"X\"]"), &k, "provider[0].routes[1]");
        let two = format!("{}\n{}", p("models = [\"a\"]"), p("models = [\"b\"]"));
        err_at(&two, &k, "provider[1].name");
        let e = err_at(
            &p("models = [\"a\"]\nheaders = { \"X-Title\" = \"a\\r\\nX-Evil: 1\" }"),
            &k,
            "provider[0].headers.X-Title",
        );
        assert!(e.contains("control characters"), "{e}");
        err_at(&p("models = [\"a\"]\nheaders = { \"Bad Name\" = \"v\" }"), &k, "provider[0].headers.Bad Name");
        err_at(&p("models = [\"a\\u0000\"]"), &k, "provider[0].models[0]");
        err_at("region = \"eu\\nwest\"", &[], "region");
        let m = "[[alerts.maintenance]]\nprovider = \"nope\"\nstart = \"2026-12-01T02:00:00Z\"\nend = \"2026-12-01T04:00:00Z\"";
        let e = err_at(m, &[], "alerts.maintenance[0].provider");
        assert!(e.contains("not a configured provider"), "{e}");
        // A provider skipped for its missing key is still a known name.
        let skipped = m.replace("nope", "gemini");
        Config::from_toml(&skipped, &env(&[])).expect("a window for a built-in provider without its key is fine");
    }

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

    #[test]
    fn retention_of_every_table_has_a_default_a_range_and_an_env_override() {
        let c = Config::from_toml("", &env(&[])).expect("defaults");
        let r = &c.storage.retention;
        assert_eq!(
            (r.rollups_days, r.outbox_days, r.breaker_transitions_days, r.credit_readings_days),
            (400, 30, 180, 90)
        );
        assert_eq!((r.alert_state_days, r.provider_status_days, r.batch_size), (30, 180, 5_000));
        assert_eq!(r.every, HOUR);
        let c = Config::from_toml(
            "[storage.retention]\noutbox_days = 7\nevery = \"10m\"",
            &env(&[("VIGIL_STORAGE_RETENTION_ROLLUPS_DAYS", "120")]),
        )
        .expect("set");
        assert_eq!((c.storage.retention.rollups_days, c.storage.retention.outbox_days), (120, 7));
        assert_eq!(c.storage.retention.every, 10 * MINUTE);
        for (key, bad) in [
            ("rollups_days", "0"),
            ("outbox_days", "3651"),
            ("breaker_transitions_days", "0"),
            ("credit_readings_days", "0"),
            ("alert_state_days", "0"),
            ("provider_status_days", "0"),
            ("batch_size", "99"),
            ("every", "\"10s\""),
        ] {
            err_at(&format!("[storage.retention]\n{key} = {bad}"), &[], &format!("storage.retention.{key}"));
        }
        err_at("[storage.retention]\nforever = true", &[], "storage.retention.forever");
        err_at("", &[("VIGIL_STORAGE_RETENTION_BATCH_SIZE", "many")], "VIGIL_STORAGE_RETENTION_BATCH_SIZE");
        let e = err_at(
            "[baseline]\nwindow = \"30d\"\n[storage.retention]\nrollups_days = 20",
            &[],
            "storage.retention.rollups_days",
        );
        assert!(e.contains("shorter than baseline.window"), "{e}");
        // The printed config carries the section and reads back.
        let shown = c.redacted_toml();
        assert!(shown.contains("[storage.retention]") && shown.contains("rollups_days = 120"), "{shown}");
        Config::from_toml(&shown, &env(&[])).expect("reads back");
    }

    #[test]
    fn every_secret_can_come_from_a_file_with_its_trailing_newline_removed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = |name: &str, body: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, format!("{body}\n")).expect("write");
            p.display().to_string()
        };
        let seed = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
        let text = format!(
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
        );
        let db = file("db", "postgres://vigil:db-from-file@db.example/vigil");
        let region = file("region", "eu-west-1");
        let c = Config::from_toml(
            &text,
            &env(&[("DATABASE_URL_FILE", db.as_str()), ("VIGIL_REGION_FILE", region.as_str())]),
        )
        .expect("valid");
        let exposed = |s: &SecretString| s.expose_secret().to_string();
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

    #[test]
    fn models_lists_are_read_every_6h_by_default_within_bounds_or_off() {
        let keys = env(&[("OPENAI_API_KEY", "sk-test-1")]);
        let c = Config::from_toml("", &keys).expect("valid");
        assert_eq!(c.deprecation.models_every, Some(Duration::from_secs(6 * 3600)));
        let c = Config::from_toml("[deprecation]\nmodels_every = \"off\"\n", &keys).expect("valid");
        assert_eq!(c.deprecation.models_every, None);
        assert!(c.redacted_toml().contains("models_every = \"off\""), "{}", c.redacted_toml());
        let mut with_env = keys.clone();
        with_env.insert("VIGIL_DEPRECATION_MODELS_EVERY".into(), "30m".into());
        let c = Config::from_toml("", &with_env).expect("valid");
        assert_eq!(c.deprecation.models_every, Some(Duration::from_secs(1800)));
        for bad in ["8d", "10ms", "often"] {
            let e = Config::from_toml(&format!("[deprecation]\nmodels_every = \"{bad}\"\n"), &keys).expect_err(bad);
            assert!(e.to_string().contains("deprecation.models_every"), "{bad}: {e}");
        }
    }
}
