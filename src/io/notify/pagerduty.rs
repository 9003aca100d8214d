//! PagerDuty Events API v2: one trigger or resolve event per incident, keyed by the incident's
//! stable key, so an update re-triggers the same PagerDuty incident instead of opening another.

use super::notifier::check_response;
use super::notifier::http_client;
use super::notifier::transport_error;
use super::notifier::DeliveryError;
use super::notifier::Notifier;
use super::notifier::NotifierError;
use crate::config::PagerDutyConfig;
use crate::decide::alert::Alert;
use crate::decide::alert::AlertStatus;
use crate::decide::alert::Notification;
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

/// The event for one notification: `trigger` with a payload while firing (its summary names
/// every kind of the incident), `resolve` once every facet cleared; `dedup_key` is the incident key.
pub fn event(routing_key: &str, n: &Notification) -> Value {
    let dedup_key = n.incident_key();
    if n.status == AlertStatus::Resolved {
        return json!({"routing_key": routing_key, "dedup_key": dedup_key, "event_action": "resolve"});
    }
    let Some(first) = n.alerts.first() else {
        return json!({"routing_key": routing_key, "dedup_key": dedup_key, "event_action": "resolve"});
    };
    let mut kinds: Vec<&str> = n.alerts.iter().map(|a| a.kind.as_str()).collect();
    kinds.sort_unstable();
    kinds.dedup();
    let scope =
        n.seen.map(|s| format!("in {} of {} regions", s.affected, s.regions)).unwrap_or_else(|| first.scope.describe());
    let summary = format!("{}: {} — {} [{scope}]", n.subject, kinds.join(", "), first.summary);
    let facets: Vec<Value> = n.alerts.iter().map(facet).collect();
    let mut details = json!({
        "kinds": kinds,
        "scope": scope,
        "since": n.opened_at.unwrap_or(first.since).to_rfc3339(),
        "region": n.region,
        "facets": facets,
    });
    if n.update {
        details["update"] = json!(true);
    }
    if n.test {
        details["test"] = json!(true);
    }
    let mut ev = json!({
        "routing_key": routing_key,
        "dedup_key": dedup_key,
        "event_action": "trigger",
        "client": "vigil",
        "payload": {
            "summary": clip(&summary, 1024),
            "source": format!("vigil/{}", n.region),
            "severity": n.severity().as_str(),
            "timestamp": n.opened_at.unwrap_or(first.since).to_rfc3339(),
            "component": if n.subject.is_empty() { first.subject() } else { n.subject.clone() },
            "group": if n.provider.is_empty() { n.region.clone() } else { n.provider.clone() },
            "class": kinds.join(","),
            "custom_details": details,
        },
    });
    if let Some(url) = &n.status_url {
        ev["client_url"] = json!(url);
        ev["links"] = json!([{"href": url, "text": "vigil status page"}]);
    }
    ev
}

fn facet(a: &Alert) -> Value {
    let mut v = json!({"kind": a.kind.as_str(), "severity": a.severity.as_str(), "summary": a.summary,
        "scope": a.scope.describe(), "since": a.since.to_rfc3339()});
    for (k, x) in [("current", a.current), ("baseline", a.baseline)] {
        if let Some(x) = x {
            v[k] = json!(x);
        }
    }
    v
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

    /// Events are idempotent per dedup_key, so a retry simply re-sends the event.
    async fn send(&self, n: &Notification, _idempotency_key: Uuid) -> Result<(), DeliveryError> {
        let key = self.routing_key.expose_secret();
        self.post(&event(key, n)).await?;
        if n.test {
            // A test incident is closed at once so nobody stays paged.
            let mut resolved = n.clone();
            resolved.status = AlertStatus::Resolved;
            self.post(&event(key, &resolved)).await?;
        }
        Ok(())
    }
}
