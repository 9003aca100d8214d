//! One incident per target (or per provider, or per instance-wide kind): the facets the rules
//! found holding are grouped by subject; an incident notifies once when it opens, again only
//! when a new kind joins it (an update in place), as a reminder after `renotify`, and once when
//! every facet has cleared. While a target flaps, changes are not notified and it does not resolve.

use super::settings::RuleConfig;
use super::Alert;
use super::AlertKind;
use super::AlertStatus;
use super::Notification;
use super::Scope;
use super::Seen;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};

/// What an incident is about, and its key (the PagerDuty `dedup_key`, the lease key).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Subject {
    /// Incident key: `vigil:provider:model:route` for a target, `vigil:provider` for a provider
    /// (the same in every region, so regions sharing storage agree on it); the facet's own
    /// dedup key (with the region) for instance-wide kinds.
    pub key: String,
    /// Provider; empty for instance-wide incidents.
    pub provider: String,
    /// Human label: the target id, the provider, or `region R`.
    pub label: String,
    /// Whether regions sharing storage share this incident (one page for all of them).
    pub shared: bool,
}

fn bounded(key: String) -> String {
    if key.len() <= 255 {
        key
    } else {
        format!("vigil:{}", hex::encode(Sha256::digest(key.as_bytes())))
    }
}

/// The incident key of a target, the same in every region.
pub fn target_key(provider: &str, model: &str, route: Option<&str>) -> String {
    bounded(format!("vigil:{provider}:{model}:{}", route.unwrap_or("")))
}

/// The incident key of a provider-wide incident.
pub fn provider_key(provider: &str) -> String {
    bounded(format!("vigil:{provider}"))
}

impl Subject {
    /// The subject a facet belongs to. `fold(provider)` says the provider is down as a whole;
    /// `open(key)` says an incident with that key is already open (a target keeps its own).
    pub fn of(a: &Alert, fold: impl Fn(&str) -> bool, open: impl Fn(&str) -> bool) -> Subject {
        if a.provider.is_empty() {
            return Subject { key: a.dedup_key.clone(), provider: String::new(), label: a.subject(), shared: false };
        }
        let provider = Subject {
            key: provider_key(&a.provider),
            provider: a.provider.clone(),
            label: a.provider.clone(),
            shared: true,
        };
        let Some(target) = &a.target else { return provider };
        let key = target_key(&a.provider, a.model.as_deref().unwrap_or(""), a.route.as_deref());
        if !open(&key) && fold(&a.provider) {
            return provider;
        }
        Subject { key, provider: a.provider.clone(), label: target.clone(), shared: true }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Incident {
    subject: Subject,
    opened: DateTime<Utc>,
    notified: bool,
    last_notified: Option<DateTime<Utc>>,
    /// Kinds as last notified.
    kinds: BTreeSet<AlertKind>,
    /// Facets as last seen, for the resolve message.
    alerts: Vec<Alert>,
    /// Regions probing its targets, this one included.
    #[serde(default)]
    regions: u32,
}

/// The open incidents of one region.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Incidents {
    open: BTreeMap<String, Incident>,
}

/// What kind of message an incident sends.
#[derive(Clone, Copy, PartialEq)]
enum Message {
    Open,
    Update,
    Reminder,
    Resolve,
}

impl Incidents {
    /// Keys of the open incidents.
    pub fn keys(&self) -> Vec<String> {
        self.open.keys().cloned().collect()
    }

    /// An incident with this key is open.
    pub fn contains(&self, key: &str) -> bool {
        self.open.contains_key(key)
    }

    /// A provider-wide incident for `provider` is open.
    pub fn has_provider(&self, provider: &str) -> bool {
        self.open.contains_key(&provider_key(provider))
    }

    /// Applies this round's facets (grouped by subject, with whether each held this round) and returns the notifications.
    pub fn step(
        &mut self,
        facets: BTreeMap<Subject, Vec<(Alert, bool)>>,
        now: DateTime<Utc>,
        cfg: &RuleConfig,
        maintenance: &dyn Fn(&str) -> bool,
        probing: &dyn Fn(&[Alert]) -> u32,
    ) -> Vec<Notification> {
        let renotify = chrono::Duration::from_std(cfg.renotify).unwrap_or(chrono::Duration::hours(1));
        let mut out = Vec::new();
        let holding: BTreeSet<String> = facets.keys().map(|s| s.key.clone()).collect();
        for (subject, facets) in facets {
            // A reminder says it still holds: not while every facet is only waiting out its hysteresis.
            let holds_now = facets.iter().any(|(_, h)| *h);
            let mut alerts: Vec<Alert> = facets.into_iter().map(|(a, _)| a).collect();
            alerts.sort_by(|a, b| (a.severity, a.kind, &a.dedup_key).cmp(&(b.severity, b.kind, &b.dedup_key)));
            let silenced = !subject.provider.is_empty() && maintenance(&subject.provider);
            let kinds: BTreeSet<AlertKind> = alerts.iter().map(|a| a.kind).collect();
            let inc = self.open.entry(subject.key.clone()).or_insert_with(|| Incident {
                subject: subject.clone(),
                opened: now,
                notified: false,
                last_notified: None,
                kinds: BTreeSet::new(),
                alerts: Vec::new(),
                regions: 1,
            });
            inc.alerts = alerts;
            let flapping = kinds.contains(&AlertKind::Flapping);
            let was_flapping = inc.kinds.contains(&AlertKind::Flapping);
            let send = if silenced {
                if !inc.notified {
                    tracing::info!(provider = %subject.provider, incident = %subject.key,
                        "incident opened inside a maintenance window; not notified");
                }
                None
            } else if !inc.notified {
                Some(Message::Open)
            } else if kinds.difference(&inc.kinds).next().is_some() && !was_flapping {
                Some(Message::Update)
            } else if !flapping && holds_now && inc.last_notified.is_none_or(|last| now - last >= renotify) {
                Some(Message::Reminder)
            } else {
                None
            };
            if !silenced {
                // A kind that left is dropped quietly; one that joins later is news again.
                inc.kinds = kinds;
            }
            inc.regions = probing(&inc.alerts);
            if let Some(send) = send {
                inc.notified = true;
                inc.last_notified = Some(now);
                out.push(notification(cfg, inc, send, now));
            }
        }
        let cleared: Vec<String> = self.open.keys().filter(|k| !holding.contains(*k)).cloned().collect();
        for key in cleared {
            if let Some(mut inc) = self.open.remove(&key) {
                if inc.notified {
                    // A resolve is sent whenever its opening was: it closes the incident and wakes nobody.
                    for a in &mut inc.alerts {
                        a.status = AlertStatus::Resolved;
                        a.summary = format!("resolved: {}", a.summary);
                    }
                    out.push(notification(cfg, &inc, Message::Resolve, now));
                }
            }
        }
        out
    }
}

fn notification(cfg: &RuleConfig, inc: &Incident, send: Message, now: DateTime<Utc>) -> Notification {
    let status = if send == Message::Resolve { AlertStatus::Resolved } else { AlertStatus::Firing };
    let mut h = Sha256::new();
    h.update(format!(
        "{}|{}|{}|{}|{}",
        cfg.region,
        inc.subject.key,
        status.as_str(),
        inc.opened.to_rfc3339(),
        now.to_rfc3339()
    ));
    for a in &inc.alerts {
        h.update(format!("|{}", a.dedup_key));
    }
    Notification {
        key: hex::encode(h.finalize()),
        region: cfg.region.clone(),
        provider: inc.subject.provider.clone(),
        incident: inc.subject.key.clone(),
        subject: inc.subject.label.clone(),
        shared: inc.subject.shared,
        opened_at: Some(inc.opened),
        status,
        reminder: send == Message::Reminder,
        update: send == Message::Update,
        test: false,
        created_at: now,
        status_url: cfg.status_url.clone(),
        seen: seen(inc, status),
        alerts: inc.alerts.clone(),
    }
}

/// Where other regions probe the same target: in how many of them it is seen, as far as this
/// region knows (the owning region's delivery worker refines it from the sightings).
fn seen(inc: &Incident, status: AlertStatus) -> Option<Seen> {
    if inc.regions <= 1 {
        return None;
    }
    let affected = if status == AlertStatus::Resolved {
        0
    } else {
        inc.alerts
            .iter()
            .map(|a| match a.scope {
                Scope::Global { affected, .. } => affected,
                Scope::Regional => 1,
            })
            .max()
            .unwrap_or(1)
    };
    Some(Seen { affected, regions: inc.regions })
}
