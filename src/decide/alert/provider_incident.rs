//! The `provider_incident` alert (off by default): fires when a provider's own status page
//! opens an incident on a component you depend on, and resolves when the page closes it. A pure
//! reading of one provider status snapshot ([`reading`]); the alert engine pages each incident
//! once and resolves it after a good read no longer lists it, without any I/O.

use super::Alert;
use super::AlertKind;
use super::AlertStatus;
use super::Severity;
use crate::config::StatusPagesConfig;
use crate::vocab::provider_status::{ProviderIncident, ProviderStatus, ProviderStatusSnapshot};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// `alerts.provider_incident` and its component filters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProviderIncidentRule {
    /// Off unless `alerts.provider_incident = true`.
    pub enabled: bool,
    /// Lower-cased component names (`alerts.provider_incident_components`); empty = every incident.
    pub components: Vec<String>,
    /// Per provider (`[[provider]] status_page_components`), replacing `components` for it.
    pub per_provider: BTreeMap<String, Vec<String>>,
}

fn lowered(list: &[String]) -> Vec<String> {
    list.iter().map(|c| c.trim().to_lowercase()).collect()
}

impl ProviderIncidentRule {
    /// The rule `config` asks for.
    pub fn from_config(config: &StatusPagesConfig) -> Self {
        ProviderIncidentRule {
            enabled: config.alert,
            components: lowered(&config.alert_components),
            per_provider: config
                .pages
                .iter()
                .filter_map(|p| p.components.as_ref().map(|c| (p.provider.clone(), lowered(c))))
                .collect(),
        }
    }

    /// True when the incident names a component in the filter (or the filter is empty).
    /// An incident that names no component at all matches only an empty filter.
    pub fn matches(&self, incident: &ProviderIncident) -> bool {
        let filter = self.per_provider.get(&incident.provider).unwrap_or(&self.components);
        filter.is_empty() || incident.components.iter().any(|c| filter.contains(&c.trim().to_lowercase()))
    }
}

/// What the provider pages say now, as the alert engine takes it each evaluation: one firing
/// alert per open incident that matches the rule, and the providers whose page was read
/// successfully at the last poll (only their incidents that are gone may clear; a page that
/// failed to read keeps its incidents as they were).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProviderIncidentReading {
    /// Alerts holding now.
    pub open: Vec<Alert>,
    /// Providers whose last poll succeeded.
    pub read: std::collections::BTreeSet<String>,
}

/// The reading of `snap` under `rule` (empty when the rule is off).
pub fn reading(rule: &ProviderIncidentRule, region: &str, snap: &ProviderStatusSnapshot) -> ProviderIncidentReading {
    let mut out = ProviderIncidentReading::default();
    if !rule.enabled {
        return out;
    }
    for (name, page) in &snap.providers {
        if page.last_error.is_none() && page.fetched_at.is_some() {
            out.read.insert(name.clone());
        }
        for i in page.incidents.iter().filter(|i| i.is_open() && rule.matches(i)) {
            out.open.push(alert(region, page, i));
        }
    }
    out
}

/// Stable per (region, provider, incident): the same incident always folds into one page.
fn incident_key(region: &str, provider: &str, id: &str) -> String {
    let key = format!("vigil:{region}:{provider}:::provider_incident:{id}");
    if key.len() <= 255 {
        key
    } else {
        format!("vigil:{}", hex::encode(Sha256::digest(key.as_bytes())))
    }
}

/// The firing alert about `incident` as `page` names it (the engine resolves it once a good read
/// no longer lists it).
fn alert(region: &str, page: &ProviderStatus, incident: &ProviderIncident) -> Alert {
    let who = if page.page_name.is_empty() { page.provider.as_str() } else { page.page_name.as_str() };
    let on =
        if incident.components.is_empty() { String::new() } else { format!(" on {}", incident.components.join(", ")) };
    let summary = format!("{who} reports: {}{on} ({} impact, {})", incident.name, incident.impact, incident.status);
    let mut a = Alert::new(AlertKind::ProviderIncident, region, &page.provider, None, summary);
    a.status = AlertStatus::Firing;
    a.severity =
        if matches!(incident.impact.as_str(), "major" | "critical") { Severity::Error } else { Severity::Warning };
    a.since = incident.created_at;
    a.dedup_key = incident_key(region, &page.provider, &incident.id);
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, TimeZone, Utc};

    fn at(h: u32, m: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 1, h, m, 0).single().expect("valid time")
    }

    fn incident(id: &str, components: &[&str], impact: &str) -> ProviderIncident {
        ProviderIncident {
            provider: "openai".into(),
            id: id.into(),
            name: format!("Incident {id}"),
            status: "investigating".into(),
            impact: impact.into(),
            created_at: at(14, 2),
            updated_at: None,
            resolved_at: None,
            components: components.iter().map(|c| c.to_string()).collect(),
            shortlink: None,
        }
    }

    fn snap(incidents: Vec<ProviderIncident>, error: Option<&str>) -> ProviderStatusSnapshot {
        let page = ProviderStatus {
            provider: "openai".into(),
            page_name: "OpenAI".into(),
            indicator: "major".into(),
            incidents,
            fetched_at: Some(at(14, 10)),
            last_error: error.map(String::from),
            ..ProviderStatus::default()
        };
        ProviderStatusSnapshot { providers: BTreeMap::from([("openai".to_string(), page)]) }
    }

    fn rule(components: &[&str]) -> ProviderIncidentRule {
        ProviderIncidentRule {
            enabled: true,
            components: components.iter().map(|c| c.to_lowercase()).collect(),
            per_provider: BTreeMap::new(),
        }
    }

    #[test]
    fn off_by_default() {
        let next = snap(vec![incident("a", &["Chat Completions"], "major")], None);
        let off = ProviderIncidentRule::from_config(&StatusPagesConfig::default());
        assert!(reading(&off, "eu", &next).open.is_empty());
    }

    #[test]
    fn an_open_incident_on_a_watched_component_reads_as_one_firing_alert() {
        let next =
            snap(vec![incident("a", &["Chat Completions"], "major"), incident("b", &["Fine-tuning"], "minor")], None);
        let alerts = reading(&rule(&["chat completions"]), "eu", &next).open;
        assert_eq!(alerts.len(), 1, "only the watched component: {alerts:?}");
        let a = &alerts[0];
        assert_eq!(a.kind, AlertKind::ProviderIncident);
        assert_eq!(a.status, AlertStatus::Firing);
        assert_eq!(a.severity, Severity::Error);
        assert_eq!(a.since, at(14, 2));
        assert_eq!(a.summary, "OpenAI reports: Incident a on Chat Completions (major impact, investigating)");
        assert!(a.dedup_key.ends_with(":provider_incident:a"), "{}", a.dedup_key);
        // Paging once and resolving after a good read are the engine's (`rules`) job.
        assert_eq!(reading(&rule(&["chat completions"]), "eu", &next).open[0].dedup_key, a.dedup_key, "stable key");
    }

    #[test]
    fn a_minor_incident_is_a_warning() {
        let next = snap(vec![incident("a", &["Chat Completions"], "minor")], None);
        let alerts = reading(&rule(&[]), "eu", &next).open;
        assert_eq!(alerts.len(), 1);
        assert_eq!(alerts[0].severity, Severity::Warning);
    }

    #[test]
    fn an_empty_filter_takes_every_incident_and_a_filter_skips_unnamed_ones() {
        let next = snap(vec![incident("a", &[], "none")], None);
        assert_eq!(reading(&rule(&[]), "eu", &next).open.len(), 1);
        assert!(reading(&rule(&["API"]), "eu", &next).open.is_empty());
    }

    #[test]
    fn a_reading_holds_matching_open_incidents_and_names_pages_read_well() {
        let next =
            snap(vec![incident("a", &["Chat Completions"], "major"), incident("b", &["Fine-tuning"], "minor")], None);
        let r = reading(&rule(&["chat completions"]), "eu", &next);
        assert_eq!(r.open.len(), 1);
        assert!(r.open[0].dedup_key.ends_with(":provider_incident:a"));
        assert!(r.read.contains("openai"));
        let failed = reading(&rule(&[]), "eu", &snap(vec![incident("a", &[], "minor")], Some("HTTP 503")));
        assert_eq!(failed.open.len(), 1, "a failed read keeps the last reading's incidents");
        assert!(failed.read.is_empty(), "but cannot clear any");
        let off = ProviderIncidentRule::default();
        assert_eq!(reading(&off, "eu", &next), ProviderIncidentReading::default());
    }

    #[test]
    fn a_provider_filter_replaces_the_global_one_for_that_provider() {
        let mut r = rule(&["embeddings"]);
        r.per_provider.insert("openai".into(), vec!["chat completions".into()]);
        assert!(r.matches(&incident("a", &["Chat Completions"], "major")));
        assert!(!r.matches(&incident("b", &["Embeddings"], "major")));
        let mut other = incident("c", &["Embeddings"], "major");
        other.provider = "groq".into();
        assert!(r.matches(&other), "other providers keep the global filter");
    }
}
