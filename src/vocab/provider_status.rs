//! The providers' own status pages: what each provider says about itself (overall indicator,
//! component states, open incidents), polled in its own task ([`poller`]) from the Statuspage v2
//! JSON API ([`statuspage`]) and published to readers as a [`ProviderStatusSnapshot`], so alerts,
//! the status page and `/v1/targets` can quote the provider without touching storage.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

/// One incident as the provider reported it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProviderIncident {
    /// vigil's provider name.
    pub provider: String,
    /// The status page's incident id.
    pub id: String,
    /// Title ("Elevated error rates on Chat Completions").
    pub name: String,
    /// `investigating`, `identified`, `monitoring`, `resolved` or `postmortem`.
    pub status: String,
    /// `none`, `minor`, `major` or `critical`.
    pub impact: String,
    /// When the provider opened it.
    pub created_at: DateTime<Utc>,
    /// Last update on the page.
    pub updated_at: Option<DateTime<Utc>>,
    /// When the provider closed it.
    pub resolved_at: Option<DateTime<Utc>>,
    /// Names of the components it affects.
    pub components: Vec<String>,
    /// Link to the incident.
    pub shortlink: Option<String>,
}

impl ProviderIncident {
    /// Still open: neither resolved nor in postmortem, and no resolution time.
    pub fn is_open(&self) -> bool {
        self.resolved_at.is_none() && !matches!(self.status.as_str(), "resolved" | "postmortem" | "completed")
    }
}

/// One component's state as the provider reported it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProviderComponent {
    /// vigil's provider name.
    pub provider: String,
    /// The status page's component id.
    pub id: String,
    /// Display name ("Chat Completions").
    pub name: String,
    /// `operational`, `degraded_performance`, `partial_outage`, `major_outage` or `under_maintenance`.
    pub status: String,
    /// Last change on the page.
    pub updated_at: Option<DateTime<Utc>>,
}

/// Everything known about one provider's page.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ProviderStatus {
    /// vigil's provider name.
    pub provider: String,
    /// The page's own name ("OpenAI"); the provider name until the first good read.
    pub page_name: String,
    /// The page polled.
    pub page_url: String,
    /// `none`, `minor`, `major`, `critical` or `maintenance`; `unknown` before the first good read.
    pub indicator: String,
    /// The page's one-line summary ("All Systems Operational").
    pub description: String,
    /// Components, in the page's order.
    pub components: Vec<ProviderComponent>,
    /// Open incidents, newest first.
    pub incidents: Vec<ProviderIncident>,
    /// Last successful read.
    pub fetched_at: Option<DateTime<Utc>>,
    /// After this the reading is stale and is no longer quoted (three poll periods after the read).
    pub fresh_until: Option<DateTime<Utc>>,
    /// Why the last poll failed, when it did (reading kept from the previous good poll).
    pub last_error: Option<String>,
}

impl ProviderStatus {
    /// True when a good reading is recent enough to quote at `now`.
    pub fn is_fresh(&self, now: DateTime<Utc>) -> bool {
        self.fresh_until.is_some_and(|t| now <= t)
    }
}

/// What readers see: one entry per polled provider, replaced as a whole on each publish.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ProviderStatusSnapshot {
    /// By provider name.
    pub providers: BTreeMap<String, ProviderStatus>,
}

/// Shared handle to the latest provider status snapshot.
pub type SharedProviderStatus = Arc<RwLock<ProviderStatusSnapshot>>;

/// Newest-first open incidents, ordered by impact then age for quoting.
fn most_relevant(status: &ProviderStatus) -> Vec<&ProviderIncident> {
    let mut open: Vec<&ProviderIncident> = status.incidents.iter().filter(|i| i.is_open()).collect();
    open.sort_by(|a, b| impact_rank(&b.impact).cmp(&impact_rank(&a.impact)).then(b.created_at.cmp(&a.created_at)));
    open
}

/// Orders Statuspage impacts; unknown words rank lowest.
pub fn impact_rank(impact: &str) -> u8 {
    match impact {
        "critical" => 4,
        "major" => 3,
        "minor" => 2,
        "none" => 1,
        _ => 0,
    }
}

/// "14:02 UTC" on the day of `now`, else "2026-11-29 14:02 UTC".
fn since_label(at: DateTime<Utc>, now: DateTime<Utc>) -> String {
    if at.date_naive() == now.date_naive() {
        at.format("%H:%M UTC").to_string()
    } else {
        at.format("%Y-%m-%d %H:%M UTC").to_string()
    }
}

/// The line to add to a vigil alert about `provider`, quoting the provider's own open incident
/// ("OpenAI reports: Elevated error rates on Chat Completions, investigating since 14:02 UTC"),
/// or its non-green overall status when it has no open incident. `None` when the provider's page
/// is not polled, its last good reading is stale, or it reports nothing wrong.
pub fn annotation_for(provider: &str, snap: &ProviderStatusSnapshot, now: DateTime<Utc>) -> Option<String> {
    let status = snap.providers.get(provider)?;
    if !status.is_fresh(now) {
        return None;
    }
    let who = if status.page_name.is_empty() { provider } else { status.page_name.as_str() };
    let open = most_relevant(status);
    if let Some(first) = open.first() {
        let mut line = format!(
            "{who} reports: {}, {} since {}",
            first.name.trim(),
            first.status,
            since_label(first.created_at, now)
        );
        if open.len() > 1 {
            line.push_str(&format!(
                " (and {} more open incident{})",
                open.len() - 1,
                if open.len() > 2 { "s" } else { "" }
            ));
        }
        return Some(line);
    }
    match status.indicator.as_str() {
        "" | "none" | "unknown" => None,
        _ => {
            let hurt: Vec<String> = status
                .components
                .iter()
                .filter(|c| c.status != "operational")
                .map(|c| format!("{}: {}", c.name, c.status.replace('_', " ")))
                .collect();
            let mut line = format!("{who} reports: {}", status.description.trim());
            if !hurt.is_empty() {
                line.push_str(&format!(" ({})", hurt.join(", ")));
            }
            Some(line)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(h: u32, m: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 1, h, m, 0).single().expect("valid time")
    }

    fn incident(id: &str, name: &str, status: &str, impact: &str, created: DateTime<Utc>) -> ProviderIncident {
        ProviderIncident {
            provider: "openai".into(),
            id: id.into(),
            name: name.into(),
            status: status.into(),
            impact: impact.into(),
            created_at: created,
            updated_at: None,
            resolved_at: None,
            components: vec!["Chat Completions".into()],
            shortlink: None,
        }
    }

    fn snap(status: ProviderStatus) -> ProviderStatusSnapshot {
        ProviderStatusSnapshot { providers: BTreeMap::from([(status.provider.clone(), status)]) }
    }

    fn openai(incidents: Vec<ProviderIncident>, indicator: &str) -> ProviderStatus {
        ProviderStatus {
            provider: "openai".into(),
            page_name: "OpenAI".into(),
            page_url: "https://status.example".into(),
            indicator: indicator.into(),
            description: "Partial System Outage".into(),
            components: vec![ProviderComponent {
                provider: "openai".into(),
                id: "c1".into(),
                name: "Chat Completions".into(),
                status: "partial_outage".into(),
                updated_at: None,
            }],
            incidents,
            fetched_at: Some(at(14, 10)),
            fresh_until: Some(at(14, 19)),
            last_error: None,
        }
    }

    #[test]
    fn quotes_the_open_incident_with_its_status_and_start() {
        let s = snap(openai(
            vec![incident("i1", "Elevated error rates on Chat Completions", "investigating", "major", at(14, 2))],
            "major",
        ));
        assert_eq!(
            annotation_for("openai", &s, at(14, 12)).as_deref(),
            Some("OpenAI reports: Elevated error rates on Chat Completions, investigating since 14:02 UTC")
        );
    }

    #[test]
    fn the_worst_incident_comes_first_and_the_rest_are_counted() {
        let s = snap(openai(
            vec![
                incident("i1", "Slow fine-tuning jobs", "identified", "minor", at(13, 0)),
                incident("i2", "Chat Completions down", "investigating", "critical", at(12, 0)),
                incident("i3", "Old one", "resolved", "critical", at(11, 0)),
            ],
            "critical",
        ));
        let line = annotation_for("openai", &s, at(14, 12)).expect("an annotation");
        assert!(line.starts_with("OpenAI reports: Chat Completions down, investigating since 12:00 UTC"), "{line}");
        assert!(line.ends_with("(and 1 more open incident)"), "{line}");
    }

    #[test]
    fn an_incident_from_another_day_carries_its_date() {
        let s = snap(openai(
            vec![incident("i1", "Outage", "monitoring", "major", at(14, 2) - chrono::Duration::days(1))],
            "major",
        ));
        let line = annotation_for("openai", &s, at(14, 12)).expect("an annotation");
        assert!(line.ends_with("monitoring since 2026-11-30 14:02 UTC"), "{line}");
    }

    #[test]
    fn no_incident_but_a_red_component_quotes_the_page_summary() {
        let s = snap(openai(vec![], "minor"));
        assert_eq!(
            annotation_for("openai", &s, at(14, 12)).as_deref(),
            Some("OpenAI reports: Partial System Outage (Chat Completions: partial outage)")
        );
    }

    #[test]
    fn nothing_for_green_pages_stale_readings_or_unpolled_providers() {
        let mut green = openai(vec![], "none");
        green.components[0].status = "operational".into();
        assert_eq!(annotation_for("openai", &snap(green), at(14, 12)), None);
        let stale = snap(openai(vec![incident("i1", "Outage", "investigating", "major", at(14, 2))], "major"));
        assert_eq!(annotation_for("openai", &stale, at(14, 20)), None, "past fresh_until");
        assert_eq!(annotation_for("groq", &stale, at(14, 12)), None);
    }
}
