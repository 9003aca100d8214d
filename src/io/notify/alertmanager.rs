//! Alertmanager as a channel: each facet of an incident is one Alertmanager alert posted to the
//! v2 API (`POST /api/v2/alerts`), labelled so one Alertmanager silences, inhibits, groups
//! (`group_by: [incident]`) and routes vigil's pages together with the Prometheus rules'.
//! Every facet carries the incident's severity (its loudest facet's, as vigil's PagerDuty
//! channel sends it) in `severity`, so a route that matches on severity takes the whole incident
//! and one notification carries all its facets; the facet's own is `facet_severity`.
//! Firing alerts carry an `endsAt` `ends_after` ahead and are re-posted every `repost_every`
//! (from the delivery worker's step), so if vigil stops, Alertmanager resolves them on its own;
//! a resolve posts `endsAt` = now.

use super::notifier::check_response;
use super::notifier::http_client;
use super::notifier::transport_error;
use super::notifier::DeliveryError;
use super::notifier::Notifier;
use super::notifier::NotifierError;
use crate::config::AlertmanagerConfig;
use crate::decide::alert::Alert;
use crate::decide::alert::AlertStatus;
use crate::decide::alert::Notification;
use crate::decide::alert::Scope;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use secrecy::{ExposeSecret, SecretString};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;
use uuid::Uuid;

/// Posts incidents to one Alertmanager.
pub struct AlertmanagerNotifier {
    name: String,
    url: SecretString,
    repost_every: Duration,
    ends_after: Duration,
    runbook_url: String,
    http: reqwest::Client,
    /// Firing incidents (by key) with their last notification and when they were last posted.
    firing: Mutex<BTreeMap<String, (Notification, DateTime<Utc>)>>,
}

impl AlertmanagerNotifier {
    /// Builds the channel.
    pub fn new(cfg: &AlertmanagerConfig, timeout: Duration) -> Result<Self, NotifierError> {
        url::Url::parse(cfg.url.expose_secret())
            .map_err(|e| NotifierError { channel: cfg.name.clone(), message: format!("bad URL: {e}") })?;
        Ok(AlertmanagerNotifier {
            name: cfg.name.clone(),
            url: cfg.url.clone(),
            repost_every: cfg.repost_every,
            ends_after: cfg.ends_after,
            runbook_url: cfg.runbook_url.clone(),
            http: http_client(&cfg.name, timeout)?,
            firing: Mutex::new(BTreeMap::new()),
        })
    }

    fn endpoint(&self) -> String {
        format!("{}/api/v2/alerts", self.url.expose_secret().trim_end_matches('/'))
    }

    async fn post(&self, body: &Value) -> Result<(), DeliveryError> {
        let resp =
            self.http.post(self.endpoint()).json(body).send().await.map_err(|e| transport_error(&self.name, e))?;
        check_response(&self.name, resp).await.map(|_| ())
    }
}

/// The labels of one facet: what Alertmanager identifies, groups, silences, inhibits and routes
/// by; `chain` names the `[[chain]]` a chain-level facet is about (`chain_slo_at_risk`), so a
/// route can send a chain's alerts to the team that owns it.
pub fn labels(n: &Notification, a: &Alert) -> Value {
    let scope = match a.scope {
        Scope::Regional => "regional",
        Scope::Global { .. } => "global",
    };
    json!({
        "alertname": a.kind.alertname(),
        "severity": n.severity().as_str(),
        "facet_severity": a.severity.as_str(),
        "region": n.region,
        "provider": a.provider,
        "model": a.model.clone().unwrap_or_default(),
        "route": a.route.clone().unwrap_or_default(),
        "chain": a.chain.clone().unwrap_or_default(),
        "kind": a.kind.as_str(),
        "scope": scope,
        "incident": n.incident_key(),
        "source": "vigil",
    })
}

/// The v2 API body for a notification: one alert per facet, `endsAt` = `ends_at`
/// (in the future while firing; now on resolve). A re-post carries the same labels, so it updates
/// the same Alertmanager alert; `runbook_url` is the runbook page, each facet linking its kind's
/// entry (`#vigil_<kind>`).
pub fn payload(n: &Notification, ends_at: DateTime<Utc>, runbook_url: &str) -> Value {
    let seen = n.seen.map(|s| format!("in {} of {} regions", s.affected, s.regions));
    let alerts: Vec<Value> = n
        .alerts
        .iter()
        .map(|a| {
            let mut v = json!({
                "labels": labels(n, a),
                "annotations": {
                    "summary": a.summary,
                    "title": n.title(),
                    "subject": if n.subject.is_empty() { a.subject() } else { n.subject.clone() },
                    "scope": seen.clone().unwrap_or_else(|| a.scope.describe()),
                    "description": description(a, seen.as_deref()),
                    "runbook_url": format!("{runbook_url}#{}", a.kind.alertname()),
                },
                "startsAt": a.since.to_rfc3339(),
                "endsAt": ends_at.to_rfc3339(),
            });
            if let Some(url) = &n.status_url {
                v["generatorURL"] = json!(url);
            }
            v
        })
        .collect();
    Value::Array(alerts)
}

/// The `description` annotation: what the kind means, then where and since when.
fn description(a: &Alert, seen: Option<&str>) -> String {
    let scope = seen.map_or_else(|| a.scope.describe(), |s| format!("seen {s}"));
    format!(
        "{} {} in {}, {scope}, since {}.",
        a.kind.meaning(),
        a.subject(),
        a.region,
        a.since.format("%Y-%m-%d %H:%M:%SZ")
    )
}

/// The alerts of `previous` whose labels are not in `body` (a facet that left the incident, or
/// every facet when the incident's severity changed), ended `now`, so none lingers until its
/// old `endsAt` under labels vigil no longer posts.
fn ended_since(previous: &Notification, body: &Value, now: DateTime<Utc>, runbook_url: &str) -> Vec<Value> {
    let posted: Vec<&Value> = body.as_array().map(|a| a.iter().map(|v| &v["labels"]).collect()).unwrap_or_default();
    match payload(previous, now, runbook_url) {
        Value::Array(old) => old.into_iter().filter(|v| !posted.contains(&&v["labels"])).collect(),
        _ => Vec::new(),
    }
}

#[async_trait]
impl Notifier for AlertmanagerNotifier {
    fn name(&self) -> &str {
        &self.name
    }

    async fn send(&self, n: &Notification, _idempotency_key: Uuid) -> Result<(), DeliveryError> {
        let now = Utc::now();
        let key = n.incident_key();
        let firing = n.status == AlertStatus::Firing && !n.test;
        let ends_at = if firing {
            now + chrono::Duration::from_std(self.ends_after).unwrap_or(chrono::Duration::minutes(5))
        } else {
            now
        };
        let mut body = payload(n, ends_at, &self.runbook_url);
        // Alerts of the last post that this one does not carry end now, not at their old endsAt.
        let previous = self.firing.lock().unwrap_or_else(|e| e.into_inner()).get(&key).map(|(p, _)| p.clone());
        if let Some(prev) = previous {
            let ended = ended_since(&prev, &body, now, &self.runbook_url);
            if let Some(list) = body.as_array_mut() {
                list.extend(ended);
            }
        }
        self.post(&body).await?;
        let mut g = self.firing.lock().unwrap_or_else(|e| e.into_inner());
        if firing {
            g.insert(key, (n.clone(), now));
        } else {
            g.remove(&key);
        }
        Ok(())
    }

    /// Re-posts every firing incident not posted for `repost_every`, so Alertmanager keeps it open.
    async fn tick(&self, now: DateTime<Utc>) -> Result<(), DeliveryError> {
        let every = chrono::Duration::from_std(self.repost_every).unwrap_or(chrono::Duration::minutes(1));
        let due: Vec<(String, Notification)> = self
            .firing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|(_, (_, at))| now - *at >= every)
            .map(|(k, (n, _))| (k.clone(), n.clone()))
            .collect();
        if due.is_empty() {
            return Ok(());
        }
        let ends_at = now + chrono::Duration::from_std(self.ends_after).unwrap_or(chrono::Duration::minutes(5));
        let mut body = Vec::new();
        for (_, n) in &due {
            if let Value::Array(a) = payload(n, ends_at, &self.runbook_url) {
                body.extend(a);
            }
        }
        self.post(&Value::Array(body)).await?;
        let mut g = self.firing.lock().unwrap_or_else(|e| e.into_inner());
        for (k, _) in due {
            if let Some(entry) = g.get_mut(&k) {
                entry.1 = now;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::alert::AlertKind;

    #[test]
    fn a_chain_facet_is_labelled_with_its_chain_and_a_target_facet_with_none() {
        let chain = Alert::for_chain(AlertKind::ChainSloAtRisk, "eu-west-1", "chat", "over".into());
        let n = Notification::firing("k", "eu-west-1", "", vec![chain.clone()], Utc::now());
        let l = labels(&n, &chain);
        assert_eq!(
            (&l["chain"], &l["kind"], &l["provider"]),
            (&json!("chat"), &json!("chain_slo_at_risk"), &json!(""))
        );
        let body = payload(&n, Utc::now(), "https://example.test/runbook");
        assert_eq!(body[0]["labels"]["chain"], "chat", "{body}");
        let target = Alert::new(AlertKind::Errors, "eu-west-1", "groq", None, "down".into());
        let n = Notification::firing("k", "eu-west-1", "groq", vec![target.clone()], Utc::now());
        assert_eq!(labels(&n, &target)["chain"], "", "an empty label is no label in Alertmanager");
    }
}
