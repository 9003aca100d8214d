//! PagerDuty Events API v2: one trigger or resolve event per alert, keyed by its stable dedup_key.

use super::notifier::{check_response, http_client, transport_error, DeliveryError, Notifier, NotifierError};
use super::{Alert, AlertStatus, Notification};
use crate::config::PagerDutyConfig;
use async_trait::async_trait;
use secrecy::{ExposeSecret, SecretString};
use serde_json::{json, Value};
use std::time::Duration;
use url::Url;
use uuid::Uuid;

/// Sends events to one PagerDuty integration.
pub struct PagerDutyNotifier {
    name: String,
    routing_key: SecretString,
    events_url: Url,
    http: reqwest::Client,
}

impl PagerDutyNotifier {
    /// Builds the channel.
    pub fn new(cfg: &PagerDutyConfig, timeout: Duration) -> Result<Self, NotifierError> {
        Ok(PagerDutyNotifier {
            name: cfg.name.clone(),
            routing_key: cfg.routing_key.clone(),
            events_url: cfg.events_url.clone(),
            http: http_client(&cfg.name, timeout)?,
        })
    }
}

fn clip(s: &str, max: usize) -> String {
    s.chars().take(max).collect()
}

/// The event for one alert: `trigger` with a payload while firing, `resolve` once cleared.
pub fn event(routing_key: &str, n: &Notification, a: &Alert) -> Value {
    if a.status == AlertStatus::Resolved {
        return json!({"routing_key": routing_key, "dedup_key": a.dedup_key, "event_action": "resolve"});
    }
    let summary = format!("{} {}: {} [{}]", a.kind.as_str(), a.subject(), a.summary, a.scope.describe());
    let mut details = json!({
        "kind": a.kind.as_str(),
        "scope": a.scope.describe(),
        "since": a.since.to_rfc3339(),
        "region": a.region,
    });
    for (k, v) in [("current", a.current), ("baseline", a.baseline)] {
        if let Some(v) = v {
            details[k] = json!(v);
        }
    }
    if n.test {
        details["test"] = json!(true);
    }
    let mut ev = json!({
        "routing_key": routing_key,
        "dedup_key": a.dedup_key,
        "event_action": "trigger",
        "client": "vigil",
        "payload": {
            "summary": clip(&summary, 1024),
            "source": format!("vigil/{}", a.region),
            "severity": a.severity.as_str(),
            "timestamp": a.since.to_rfc3339(),
            "component": a.target.clone().unwrap_or_else(|| a.provider.clone()),
            "group": if a.provider.is_empty() { a.region.clone() } else { a.provider.clone() },
            "class": a.kind.as_str(),
            "custom_details": details,
        },
    });
    if let Some(url) = &n.status_url {
        ev["client_url"] = json!(url);
        ev["links"] = json!([{"href": url, "text": "vigil status page"}]);
    }
    ev
}

impl PagerDutyNotifier {
    async fn post(&self, ev: &Value) -> Result<(), DeliveryError> {
        let resp = self
            .http
            .post(self.events_url.clone())
            .json(ev)
            .send()
            .await
            .map_err(|e| transport_error(&self.name, e))?;
        check_response(&self.name, resp).await.map(|_| ())
    }
}

#[async_trait]
impl Notifier for PagerDutyNotifier {
    fn name(&self) -> &str {
        &self.name
    }

    /// Events are idempotent per dedup_key, so a retry re-sends every event of the notification.
    async fn send(&self, n: &Notification, _idempotency_key: Uuid) -> Result<(), DeliveryError> {
        let key = self.routing_key.expose_secret();
        for a in &n.alerts {
            self.post(&event(key, n, a)).await?;
        }
        if n.test {
            // A test incident is closed at once so nobody stays paged.
            for a in &n.alerts {
                let mut resolved = a.clone();
                resolved.status = AlertStatus::Resolved;
                self.post(&event(key, n, &resolved)).await?;
            }
        }
        Ok(())
    }
}
