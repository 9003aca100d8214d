//! Slack incoming webhook: Block Kit blocks plus a plain-text fallback.

use super::notifier::check_response;
use super::notifier::http_client;
use super::notifier::transport_error;
use super::notifier::DeliveryError;
use super::notifier::Notifier;
use super::notifier::NotifierError;
use crate::config::SlackConfig;
use crate::decide::alert::AlertStatus;
use crate::decide::alert::Notification;
use crate::decide::alert::Severity;
use async_trait::async_trait;
use secrecy::{ExposeSecret, SecretString};
use serde_json::{json, Value};
use std::time::Duration;
use uuid::Uuid;

/// Slack limits section text to 3,000 characters and a message to 50 blocks.
const MAX_SECTION: usize = 2900;
const MAX_ALERT_BLOCKS: usize = 40;

/// Posts to one Slack incoming webhook.
pub struct SlackNotifier {
    name: String,
    url: SecretString,
    http: reqwest::Client,
}

impl SlackNotifier {
    /// Builds the channel.
    pub fn new(cfg: &SlackConfig, timeout: Duration) -> Result<Self, NotifierError> {
        url::Url::parse(cfg.webhook_url.expose_secret())
            .map_err(|e| NotifierError { channel: cfg.name.clone(), message: format!("bad webhook URL: {e}") })?;
        Ok(SlackNotifier {
            name: cfg.name.clone(),
            url: cfg.webhook_url.clone(),
            http: http_client(&cfg.name, timeout)?,
        })
    }
}

/// Escapes the three characters Slack mrkdwn treats as control.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

fn clip(s: String) -> String {
    if s.chars().count() <= MAX_SECTION {
        s
    } else {
        let mut t: String = s.chars().take(MAX_SECTION).collect();
        t.push('…');
        t
    }
}

fn icon(n: &Notification, sev: Severity) -> &'static str {
    match (n.status, sev) {
        (AlertStatus::Resolved, _) => ":white_check_mark:",
        (_, Severity::Critical) => ":rotating_light:",
        (_, Severity::Error) => ":red_circle:",
        (_, Severity::Warning) => ":warning:",
        (_, Severity::Info) => ":information_source:",
    }
}

/// The webhook body: `text` fallback, then title section, divider, one section per alert, context.
pub fn payload(n: &Notification) -> Value {
    let mut blocks = vec![
        json!({"type": "section", "text": {"type": "mrkdwn", "text": clip(format!("{} *{}*", icon(n, n.severity()), esc(&n.title())))}}),
        json!({"type": "divider"}),
    ];
    for a in n.alerts.iter().take(MAX_ALERT_BLOCKS) {
        let mut text = format!(
            "{} *{}* `{}` — {}\n{} · {} · since {}",
            icon(n, a.severity),
            esc(&a.subject()),
            a.kind.as_str(),
            esc(&a.summary),
            a.severity.as_str(),
            a.scope.describe(),
            a.since.format("%Y-%m-%d %H:%M UTC")
        );
        if let (Some(cur), Some(base)) = (a.current, a.baseline) {
            text.push_str(&format!(" · current {cur:.2} vs {base:.2}"));
        }
        blocks.push(json!({"type": "section", "text": {"type": "mrkdwn", "text": clip(text)}}));
    }
    if n.alerts.len() > MAX_ALERT_BLOCKS {
        let more = n.alerts.len() - MAX_ALERT_BLOCKS;
        blocks.push(json!({"type": "section", "text": {"type": "mrkdwn", "text": format!("…and {more} more")}}));
    }
    let mut context = format!("vigil · region {}", esc(&n.region));
    if let Some(url) = &n.status_url {
        context.push_str(&format!(" · <{}|status page>", esc(url)));
    }
    blocks.push(json!({"type": "context", "elements": [{"type": "mrkdwn", "text": context}]}));
    json!({"text": n.text(), "blocks": blocks})
}

#[async_trait]
impl Notifier for SlackNotifier {
    fn name(&self) -> &str {
        &self.name
    }

    async fn send(&self, n: &Notification, _idempotency_key: Uuid) -> Result<(), DeliveryError> {
        let resp = self
            .http
            .post(self.url.expose_secret())
            .json(&payload(n))
            .send()
            .await
            .map_err(|e| transport_error(&self.name, e))?;
        let (_, body) = check_response(&self.name, resp).await?;
        if body.trim() != "ok" {
            tracing::warn!(channel = %self.name, body = %body.chars().take(100).collect::<String>(), "slack answered 2xx without \"ok\"");
        }
        Ok(())
    }
}
