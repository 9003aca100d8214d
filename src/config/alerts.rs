//! `[alerts]`: the rules' thresholds, the notification channels and the maintenance windows.
//! Every channel's target is a secret (webhook URLs embed tokens, SMTP URLs passwords), so each
//! is read from a variable or a file at load and a missing one fails the start, naming its key.

use crate::config::env::secret_from;
use crate::config::parse::{count_in, duration_in, k_of_n, parse_duration, DAY, SECOND};
use crate::config::{invalid, ConfigError, Env};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};
use std::time::Duration;
use url::Url;

/// Where the runbooks live unless `alerts.runbook_url` says otherwise: docs/OPERATIONS.md of the
/// project's repository. The Prometheus rules (deploy/prometheus/rules.yml) carry the same URL,
/// so the Helm value `runbookUrl` and the kustomize `vigil-runbook` ConfigMap replace both.
pub const DEFAULT_RUNBOOK_URL: &str = "https://github.com/vigil-monitor/vigil/blob/main/docs/OPERATIONS.md";

/// `[alerts]`.
#[derive(Debug, Clone)]
pub struct AlertsConfig {
    /// Re-send a firing alert no more often than this.
    pub renotify: Duration,
    /// Judged replies in a row that fire `adherence_failed` (and demote, `decide::health`):
    /// `error_probes` as written, else `error_k`.
    pub error_probes: u32,
    /// `errors` fires when `error_k` of the last `error_n` probes failed (`error_probes` = N is
    /// k = n = N: N in a row, within `breaker.failure_window`).
    pub error_k: u32,
    /// See `error_k`.
    pub error_n: u32,
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
    /// The runbook page (absolute, no `#`): each Alertmanager alert links `<runbook_url>#vigil_<kind>`.
    pub runbook_url: String,
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
    /// Regional quorum: a shared incident pages only when seen in this many regions (or in every
    /// region probing it, when fewer do); below it, it goes to the `notice_channels` only (1: off).
    pub min_regions: u32,
    /// Channels of class `notice` (by name): they get the incidents below `min_regions`, page
    /// channels (every other one) the rest.
    pub notice_channels: Vec<String>,
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
    /// `alerts.runbook_url`: the alerts' `runbook_url` annotation is this plus `#vigil_<kind>`.
    pub runbook_url: String,
}

/// `[alerts]` as written.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawAlerts {
    renotify: String,
    error_probes: u32,
    /// 0: not set (then `error_probes` decides).
    error_k: u32,
    /// 0: not set.
    error_n: u32,
    resolve_after: u32,
    latency_factor: f64,
    latency_k: usize,
    latency_n: usize,
    flap_window: usize,
    flap_high: f64,
    flap_low: f64,
    delivery_deadline: String,
    status_url: String,
    runbook_url: String,
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
    min_regions: u32,
    notice_channels: Vec<String>,
    /// Read by the status pages' validation.
    pub(super) provider_incident: bool,
    /// Read by the status pages' validation.
    pub(super) provider_incident_components: Vec<String>,
    /// Read by `chain_cost::notice` (the `chain_head_changed` notice and its channels).
    pub(super) chain_head_changed: bool,
    pub(super) chain_head_channels: Vec<String>,
    /// Whether the file (or `VIGIL_ALERTS_ERROR_PROBES`) set `error_probes`: setting it beside
    /// `error_k`/`error_n` is an error, its default beside them is not.
    #[serde(skip)]
    pub(super) error_probes_given: bool,
}

impl Default for RawAlerts {
    fn default() -> Self {
        RawAlerts {
            renotify: "1h".into(),
            error_probes: 2,
            error_k: 0,
            error_n: 0,
            resolve_after: 3,
            latency_factor: 1.5,
            latency_k: 3,
            latency_n: 5,
            flap_window: 20,
            flap_high: 0.4,
            flap_low: 0.2,
            delivery_deadline: "24h".into(),
            status_url: String::new(),
            runbook_url: DEFAULT_RUNBOOK_URL.into(),
            slack: vec![],
            email: vec![],
            pagerduty: vec![],
            webhook: vec![],
            alertmanager: vec![],
            maintenance: vec![],
            min_regions: 1,
            notice_channels: vec![],
            provider_incident: false,
            provider_incident_components: vec![],
            chain_head_changed: false,
            chain_head_channels: vec![],
            error_probes_given: false,
        }
    }
}

/// `[[alerts.slack]]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSlack {
    name: Option<String>,
    webhook_url_env: Option<String>,
    webhook_url_file: Option<String>,
}

/// `[[alerts.email]]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEmail {
    name: Option<String>,
    smtp_url_env: Option<String>,
    smtp_url_file: Option<String>,
    from: String,
    to: Vec<String>,
}

/// `[[alerts.pagerduty]]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPagerDuty {
    name: Option<String>,
    routing_key_env: Option<String>,
    routing_key_file: Option<String>,
    events_url: Option<String>,
}

/// `[[alerts.maintenance]]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMaintenance {
    provider: String,
    start: String,
    end: String,
}

/// `[[alerts.webhook]]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWebhook {
    name: Option<String>,
    url_env: Option<String>,
    url_file: Option<String>,
    secret_env: Option<String>,
    secret_file: Option<String>,
}

/// `[[alerts.alertmanager]]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAlertmanager {
    name: Option<String>,
    url_env: Option<String>,
    url_file: Option<String>,
    repost_every: Option<String>,
    ends_after: Option<String>,
}

/// `[alerts]`, validated: channels first (their secrets read from `env`), then the windows,
/// then the rules' thresholds, each error naming its key.
pub(super) fn validate(mut raw: RawAlerts, env: &dyn Env) -> Result<AlertsConfig, ConfigError> {
    let slack = slack(std::mem::take(&mut raw.slack), env)?;
    let email = email(std::mem::take(&mut raw.email), env)?;
    let pagerduty = pagerduty(std::mem::take(&mut raw.pagerduty), env)?;
    let webhook = webhook(std::mem::take(&mut raw.webhook), env)?;
    let runbook_url = runbook_url(&raw.runbook_url)?;
    let alertmanager = alertmanager(std::mem::take(&mut raw.alertmanager), env, &runbook_url)?;
    let maintenance = maintenance(std::mem::take(&mut raw.maintenance))?;
    check_rules(&raw)?;
    let (error_k, error_n) = k_of_n(
        ("alerts.error_probes", raw.error_probes, raw.error_probes_given),
        ("alerts.error_k", raw.error_k),
        ("alerts.error_n", raw.error_n),
    )?;
    let names = slack.iter().map(|c| &c.name).chain(email.iter().map(|c| &c.name));
    let names = names.chain(pagerduty.iter().map(|c| &c.name)).chain(webhook.iter().map(|c| &c.name));
    let names: Vec<&String> = names.chain(alertmanager.iter().map(|c| &c.name)).collect();
    for (i, n) in raw.notice_channels.iter().enumerate() {
        if !names.contains(&n) {
            let known: Vec<&str> = names.iter().map(|s| s.as_str()).collect();
            let known = if known.is_empty() { "none configured".to_string() } else { known.join(", ") };
            return Err(invalid(
                format!("alerts.notice_channels[{i}]"),
                format!("{n:?} is not a configured channel (channels: {known})"),
            ));
        }
    }
    Ok(AlertsConfig {
        renotify: duration_in("alerts.renotify", &raw.renotify, SECOND, 30 * DAY)?,
        error_probes: if raw.error_k == 0 { error_k } else { raw.error_k },
        error_k,
        error_n,
        resolve_after: count_in("alerts.resolve_after", raw.resolve_after, 1, 1000)?,
        latency_factor: raw.latency_factor,
        latency_k: raw.latency_k,
        latency_n: raw.latency_n,
        flap_window: raw.flap_window,
        flap_high: raw.flap_high,
        flap_low: raw.flap_low,
        delivery_deadline: duration_in("alerts.delivery_deadline", &raw.delivery_deadline, SECOND, 30 * DAY)?,
        status_url: Some(raw.status_url).filter(|s| !s.is_empty()),
        runbook_url,
        slack,
        email,
        pagerduty,
        webhook,
        alertmanager,
        maintenance,
        min_regions: count_in("alerts.min_regions", raw.min_regions, 1, 100)?,
        notice_channels: raw.notice_channels,
    })
}

/// Every maintenance window names a configured provider (`known`, skipped ones included).
pub(super) fn check_maintenance_providers(raw: &RawAlerts, known: &[&str]) -> Result<(), ConfigError> {
    for (i, m) in raw.maintenance.iter().enumerate() {
        if !known.contains(&m.provider.as_str()) {
            return Err(invalid(
                format!("alerts.maintenance[{i}].provider"),
                format!("{:?} is not a configured provider (known: {})", m.provider, known.join(", ")),
            ));
        }
    }
    Ok(())
}

/// The channel's own name, else its kind (`slack`, then `slack-1`, `slack-2`, …).
fn channel_name(n: Option<String>, kind: &str, i: usize) -> String {
    n.unwrap_or_else(|| if i == 0 { kind.to_string() } else { format!("{kind}-{i}") })
}

/// `[[alerts.slack]]`: each webhook URL read from its variable or file.
fn slack(raw: Vec<RawSlack>, env: &dyn Env) -> Result<Vec<SlackConfig>, ConfigError> {
    let mut slack = Vec::new();
    for (i, s) in raw.into_iter().enumerate() {
        let webhook_url = secret_from(
            env,
            &format!("alerts.slack[{i}].webhook_url"),
            s.webhook_url_env.as_deref(),
            s.webhook_url_file.as_deref(),
        )?;
        slack.push(SlackConfig { name: channel_name(s.name, "slack", i), webhook_url });
    }
    Ok(slack)
}

/// `[[alerts.email]]`: each SMTP URL read from its variable or file; at least one recipient.
fn email(raw: Vec<RawEmail>, env: &dyn Env) -> Result<Vec<EmailConfig>, ConfigError> {
    let mut email = Vec::new();
    for (i, e) in raw.into_iter().enumerate() {
        let smtp_url = secret_from(
            env,
            &format!("alerts.email[{i}].smtp_url"),
            e.smtp_url_env.as_deref(),
            e.smtp_url_file.as_deref(),
        )?;
        if e.to.is_empty() {
            return Err(invalid(format!("alerts.email[{i}].to"), "needs at least one recipient"));
        }
        email.push(EmailConfig { name: channel_name(e.name, "email", i), smtp_url, from: e.from, to: e.to });
    }
    Ok(email)
}

/// `[[alerts.pagerduty]]`: each routing key read from its variable or file; the Events API URL.
fn pagerduty(raw: Vec<RawPagerDuty>, env: &dyn Env) -> Result<Vec<PagerDutyConfig>, ConfigError> {
    let mut pagerduty = Vec::new();
    for (i, p) in raw.into_iter().enumerate() {
        let routing_key = secret_from(
            env,
            &format!("alerts.pagerduty[{i}].routing_key"),
            p.routing_key_env.as_deref(),
            p.routing_key_file.as_deref(),
        )?;
        let url = p.events_url.unwrap_or_else(|| "https://events.pagerduty.com/v2/enqueue".into());
        let events_url =
            Url::parse(&url).map_err(|e| invalid(format!("alerts.pagerduty[{i}].events_url"), e.to_string()))?;
        pagerduty.push(PagerDutyConfig { name: channel_name(p.name, "pagerduty", i), routing_key, events_url });
    }
    Ok(pagerduty)
}

/// `[[alerts.webhook]]`: each URL and optional signing secret read from its variable or file.
fn webhook(raw: Vec<RawWebhook>, env: &dyn Env) -> Result<Vec<WebhookConfig>, ConfigError> {
    let mut webhook = Vec::new();
    for (i, w) in raw.into_iter().enumerate() {
        let url = secret_from(env, &format!("alerts.webhook[{i}].url"), w.url_env.as_deref(), w.url_file.as_deref())?;
        let secret = match (&w.secret_env, &w.secret_file) {
            (None, None) => None,
            (var, file) => {
                Some(secret_from(env, &format!("alerts.webhook[{i}].secret"), var.as_deref(), file.as_deref())?)
            }
        };
        webhook.push(WebhookConfig { name: channel_name(w.name, "webhook", i), url, secret });
    }
    Ok(webhook)
}

/// `alerts.runbook_url`: an absolute http(s) URL without a fragment (vigil appends `#<anchor>`),
/// because Alertmanager, Grafana and PagerDuty show it where a relative path leads nowhere.
fn runbook_url(raw: &str) -> Result<String, ConfigError> {
    let raw = raw.trim();
    let url =
        Url::parse(raw).map_err(|e| invalid("alerts.runbook_url", format!("{raw:?} is not an absolute URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid("alerts.runbook_url", format!("{raw:?} must be an http or https URL")));
    }
    if url.fragment().is_some() {
        return Err(invalid(
            "alerts.runbook_url",
            format!("{raw:?} must not carry a #fragment: vigil appends one per kind"),
        ));
    }
    Ok(raw.to_string())
}

/// `[[alerts.alertmanager]]`: each URL read and parsed; `endsAt` must outlast a re-post.
fn alertmanager(
    raw: Vec<RawAlertmanager>,
    env: &dyn Env,
    runbook_url: &str,
) -> Result<Vec<AlertmanagerConfig>, ConfigError> {
    let mut alertmanager = Vec::new();
    for (i, a) in raw.into_iter().enumerate() {
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
        let name = channel_name(a.name, "alertmanager", i);
        alertmanager.push(AlertmanagerConfig {
            name,
            url,
            repost_every,
            ends_after,
            runbook_url: runbook_url.to_string(),
        });
    }
    Ok(alertmanager)
}

/// `[[alerts.maintenance]]`: RFC 3339 windows that end after they start.
fn maintenance(raw: Vec<RawMaintenance>) -> Result<Vec<MaintenanceWindow>, ConfigError> {
    let mut maintenance = Vec::new();
    for (i, m) in raw.into_iter().enumerate() {
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
    Ok(maintenance)
}

/// The latency and flap detectors' thresholds must make sense together.
fn check_rules(raw: &RawAlerts) -> Result<(), ConfigError> {
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
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::test_util::{env, err, err_at};
    use crate::config::Config;

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

    #[test]
    fn regional_quorum_defaults_off_and_notice_channels_must_be_configured() {
        let c = Config::from_toml("", &env(&[])).expect("valid");
        assert_eq!((c.alerts.min_regions, c.alerts.notice_channels.len()), (1, 0));
        let hooks = "[[alerts.webhook]]\nname = \"oncall\"\nurl_env = \"H\"\n[[alerts.webhook]]\nname = \"tickets\"\nurl_env = \"H\"";
        let text = format!("[alerts]\nmin_regions = 2\nnotice_channels = [\"tickets\"]\n{hooks}");
        let c = Config::from_toml(&text, &env(&[("H", "http://127.0.0.1:9/h")])).expect("valid");
        assert_eq!((c.alerts.min_regions, c.alerts.notice_channels.as_slice()), (2, &["tickets".to_string()][..]));
        let unknown = format!("[alerts]\nnotice_channels = [\"tickets\", \"slack\"]\n{hooks}");
        assert_eq!(
            err(&unknown, &[("H", "http://127.0.0.1:9/h")]),
            "alerts.notice_channels[1]: \"slack\" is not a configured channel (channels: oncall, tickets)"
        );
        for bad in ["0", "101"] {
            let e = err(&format!("[alerts]\nmin_regions = {bad}"), &[]);
            assert!(e.starts_with("alerts.min_regions: "), "{e}");
        }
    }

    #[test]
    fn runbook_url_is_absolute_by_default_and_checked() {
        let c = Config::from_toml("", &env(&[])).expect("valid");
        assert_eq!(c.alerts.runbook_url, super::DEFAULT_RUNBOOK_URL);
        let text = "[alerts]\nrunbook_url = \"https://wiki.example.com/vigil/runbook\"\n[[alerts.alertmanager]]\nurl_env = \"AM\"";
        let c = Config::from_toml(text, &env(&[("AM", "http://127.0.0.1:9093")])).expect("valid");
        assert_eq!(c.alerts.alertmanager[0].runbook_url, "https://wiki.example.com/vigil/runbook");
        for bad in ["docs/OPERATIONS.md", "ftp://x.example/r", "https://x.example/r#vigil"] {
            let e = err(&format!("[alerts]\nrunbook_url = \"{bad}\""), &[]);
            assert!(e.starts_with("alerts.runbook_url: "), "{e}");
        }
    }

    #[test]
    fn error_probes_is_k_of_n_with_k_equal_to_n_and_setting_both_names_the_key() {
        let c = Config::from_toml("", &env(&[])).expect("defaults");
        assert_eq!((c.alerts.error_probes, c.alerts.error_k, c.alerts.error_n), (2, 2, 2));
        let c = Config::from_toml("[alerts]\nerror_probes = 4", &env(&[])).expect("valid");
        assert_eq!((c.alerts.error_probes, c.alerts.error_k, c.alerts.error_n), (4, 4, 4));
        let c = Config::from_toml("[alerts]\nerror_k = 3\nerror_n = 10", &env(&[])).expect("valid");
        assert_eq!((c.alerts.error_k, c.alerts.error_n), (3, 10));
        assert_eq!(c.alerts.error_probes, 3, "adherence_failed takes k replies in a row");
        let both = err_at("[alerts]\nerror_probes = 2\nerror_k = 3\nerror_n = 10", &[], "alerts.error_k");
        assert!(both.contains("alerts.error_probes") && both.contains("not both"), "{both}");
        let e = err_at("[alerts]\nerror_k = 3\nerror_n = 10", &[("VIGIL_ALERTS_ERROR_PROBES", "2")], "alerts.error_k");
        assert!(e.contains("not both"), "{e}");
        err_at("[alerts]\nerror_k = 3", &[], "alerts.error_n");
        err_at("[alerts]\nerror_n = 10", &[], "alerts.error_k");
        let single = err_at("[alerts]\nerror_k = 1\nerror_n = 3", &[], "alerts.error_k");
        assert!(single.contains("at least 2"), "{single}");
        err_at("[alerts]\nerror_k = 4\nerror_n = 3", &[], "alerts.error_n");
        err_at("[alerts]\nerror_k = 3\nerror_n = 101", &[], "alerts.error_n");
        // error_probes = 1 stays what it was: every generic failure fires (an explicit choice).
        let c = Config::from_toml("[alerts]\nerror_probes = 1", &env(&[])).expect("valid");
        assert_eq!((c.alerts.error_k, c.alerts.error_n), (1, 1));
    }

    #[test]
    fn check_config_output_with_k_of_n_reads_back() {
        let c = Config::from_toml(
            "[alerts]\nerror_k = 3\nerror_n = 10\n[breaker]\nfailure_k = 3\nfailure_n = 6",
            &env(&[]),
        )
        .expect("valid");
        let again = Config::from_toml(&c.redacted_toml(), &env(&[])).expect("check-config output reads back");
        assert_eq!((again.alerts.error_k, again.alerts.error_n), (3, 10));
        assert_eq!((again.breaker.failure_k, again.breaker.failure_n), (3, 6));
        let plain = Config::from_toml("", &env(&[])).expect("defaults");
        let again = Config::from_toml(&plain.redacted_toml(), &env(&[])).expect("reads back");
        assert_eq!((again.alerts.error_k, again.alerts.error_n, again.breaker.failure_k), (2, 2, 3));
    }
}
