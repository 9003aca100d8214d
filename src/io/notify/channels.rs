//! Builds the configured alert channels (slack, email, pagerduty, webhook, alertmanager) and
//! sends `vigil alert-test` through them.

use super::alertmanager::AlertmanagerNotifier;
use super::email::EmailNotifier;
use super::notifier::DeliveryError;
use super::notifier::Notifier;
use super::notifier::NotifierError;
use super::pagerduty::PagerDutyNotifier;
use super::slack::SlackNotifier;
use super::webhook::WebhookNotifier;
use crate::config::AlertsConfig;
use crate::decide::alert::Alert;
use crate::decide::alert::AlertKind;
use crate::decide::alert::Notification;
use crate::decide::alert::Severity;
use chrono::{DateTime, Utc};
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

/// Builds every configured channel, in config order (slack, email, pagerduty, webhook, alertmanager).
pub fn build_notifiers(cfg: &AlertsConfig, timeout: Duration) -> Result<Vec<Arc<dyn Notifier>>, NotifierError> {
    let mut out: Vec<Arc<dyn Notifier>> = Vec::new();
    for c in &cfg.slack {
        out.push(Arc::new(SlackNotifier::new(c, timeout)?));
    }
    for c in &cfg.email {
        out.push(Arc::new(EmailNotifier::new(c, timeout)?));
    }
    for c in &cfg.pagerduty {
        out.push(Arc::new(PagerDutyNotifier::new(c, timeout)?));
    }
    for c in &cfg.webhook {
        out.push(Arc::new(WebhookNotifier::new(c, timeout)?));
    }
    for c in &cfg.alertmanager {
        out.push(Arc::new(AlertmanagerNotifier::new(c, timeout)?));
    }
    Ok(out)
}

/// The message `vigil alert-test` sends.
pub fn test_notification(region: &str, now: DateTime<Utc>, status_url: Option<String>) -> Notification {
    let mut a = Alert::new(
        AlertKind::Errors,
        region,
        "vigil",
        None,
        "test notification from `vigil alert-test`: this channel works".into(),
    );
    a.severity = Severity::Info;
    a.since = now;
    a.dedup_key = format!("vigil:{region}:alert-test:{}", now.timestamp());
    Notification {
        incident: a.dedup_key.clone(),
        subject: "vigil".into(),
        opened_at: Some(now),
        test: true,
        status_url,
        ..Notification::firing(format!("alert-test-{}", now.timestamp_millis()), region, "vigil", vec![a], now)
    }
}

/// Sends a test notification through each channel (or those whose name equals `name_filter`),
/// directly, not through the outbox. An empty result means no channel matched.
pub async fn alert_test(
    channels: &[Arc<dyn Notifier>],
    name_filter: Option<&str>,
    region: &str,
    now: DateTime<Utc>,
) -> Vec<(String, Result<(), DeliveryError>)> {
    let n = test_notification(region, now, None);
    let mut out = Vec::new();
    for c in channels.iter().filter(|c| name_filter.is_none_or(|f| c.name() == f)) {
        let r = c.send(&n, Uuid::new_v4()).await;
        match &r {
            Ok(()) => tracing::info!(channel = c.name(), "test notification delivered"),
            Err(e) => tracing::warn!(channel = c.name(), error = %e, "test notification failed"),
        }
        out.push((c.name().to_string(), r));
    }
    out
}
