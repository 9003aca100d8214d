//! Parses the Atlassian Statuspage v2 `summary.json` document (also served by pages hosted
//! elsewhere that keep the same API) into vigil's component and incident records. Unknown fields
//! are ignored and optional ones may be missing; a document without the `status` object or with
//! the wrong shape is rejected as malformed. Each list keeps a bounded number of entries, the
//! rest skipped as they are read, so what a capped body costs stays small whatever it holds.

use crate::io::bounded::AtMost;
use crate::vocab::provider_status::ProviderComponent;
use crate::vocab::provider_status::ProviderIncident;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use thiserror::Error;

/// Path of the summary document under a page's base URL.
pub const SUMMARY_PATH: &str = "api/v2/summary.json";

/// Why a status document was refused.
#[derive(Debug, Error)]
pub enum ParseError {
    /// Not JSON, or not the Statuspage summary shape.
    #[error("not a Statuspage summary document: {0}")]
    Malformed(String),
}

/// What one summary document says.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// The page's own name ("OpenAI").
    pub page_name: Option<String>,
    /// `none`, `minor`, `major`, `critical` or `maintenance`.
    pub indicator: String,
    /// One line ("All Systems Operational").
    pub description: String,
    /// Components, groups left out (their members carry the state).
    pub components: Vec<ProviderComponent>,
    /// Unresolved incidents, newest first.
    pub incidents: Vec<ProviderIncident>,
}

/// Entries kept of each list of a summary (the rest are skipped as read): far more than any
/// real page has, few enough that a capped body of a million empty entries stays small.
const MAX_COMPONENTS: usize = 500;
/// See [`MAX_COMPONENTS`]: open incidents kept (newest first, as pages list them).
const MAX_INCIDENTS: usize = 50;
/// See [`MAX_COMPONENTS`]: components an incident, or one of its updates, names.
const MAX_PER_INCIDENT: usize = 50;
/// See [`MAX_COMPONENTS`]: updates of an incident read for the components they name.
const MAX_UPDATES: usize = 20;

#[derive(Deserialize)]
struct RawSummary {
    #[serde(default)]
    page: Option<RawPage>,
    status: RawStatus,
    #[serde(default)]
    components: AtMost<RawComponent, MAX_COMPONENTS>,
    #[serde(default)]
    incidents: AtMost<RawIncident, MAX_INCIDENTS>,
}

#[derive(Deserialize)]
struct RawPage {
    #[serde(default)]
    name: Option<String>,
}

#[derive(Deserialize)]
struct RawStatus {
    indicator: String,
    #[serde(default)]
    description: String,
}

#[derive(Deserialize)]
struct RawComponent {
    id: String,
    name: String,
    status: String,
    #[serde(default)]
    updated_at: Option<DateTime<Utc>>,
    #[serde(default)]
    group: bool,
}

#[derive(Deserialize)]
struct RawIncident {
    id: String,
    name: String,
    status: String,
    #[serde(default)]
    impact: Option<String>,
    created_at: DateTime<Utc>,
    #[serde(default)]
    updated_at: Option<DateTime<Utc>>,
    #[serde(default)]
    resolved_at: Option<DateTime<Utc>>,
    #[serde(default)]
    shortlink: Option<String>,
    #[serde(default)]
    components: AtMost<RawNamed, MAX_PER_INCIDENT>,
    #[serde(default)]
    incident_updates: AtMost<RawUpdate, MAX_UPDATES>,
}

#[derive(Deserialize)]
struct RawNamed {
    name: String,
}

#[derive(Deserialize)]
struct RawUpdate {
    #[serde(default)]
    affected_components: Option<AtMost<RawAffected, MAX_PER_INCIDENT>>,
}

#[derive(Deserialize)]
struct RawAffected {
    name: String,
}

/// Longest text kept from a provider's page (names, titles); longer text is cut.
const MAX_TEXT: usize = 300;

/// Provider text goes into alerts and HTML: cut it and drop control characters.
fn clean(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).take(MAX_TEXT).collect()
}

/// Parses `body` for `provider`.
pub fn parse_summary(provider: &str, body: &[u8]) -> Result<Summary, ParseError> {
    let raw: RawSummary = serde_json::from_slice(body).map_err(|e| ParseError::Malformed(e.to_string()))?;
    let components = raw
        .components
        .into_iter()
        .filter(|c| !c.group)
        .map(|c| ProviderComponent {
            provider: provider.to_string(),
            id: clean(&c.id),
            name: clean(&c.name),
            status: clean(&c.status),
            updated_at: c.updated_at,
        })
        .collect();
    let mut incidents: Vec<ProviderIncident> = raw
        .incidents
        .into_iter()
        .map(|i| {
            // Incidents list their components directly; some pages only name them in the updates.
            let mut names: Vec<String> = i.components.iter().map(|c| clean(&c.name)).collect();
            for u in &i.incident_updates {
                for a in u.affected_components.iter().flatten() {
                    let n = clean(&a.name);
                    if !names.contains(&n) {
                        names.push(n);
                    }
                }
            }
            ProviderIncident {
                provider: provider.to_string(),
                id: clean(&i.id),
                name: clean(&i.name),
                status: clean(&i.status),
                impact: i.impact.as_deref().map(clean).unwrap_or_else(|| "none".into()),
                created_at: i.created_at,
                updated_at: i.updated_at,
                resolved_at: i.resolved_at,
                components: names,
                shortlink: i.shortlink.as_deref().map(clean),
            }
        })
        .collect();
    incidents.sort_by_key(|i| std::cmp::Reverse(i.created_at));
    Ok(Summary {
        page_name: raw.page.and_then(|p| p.name).map(|n| clean(&n)).filter(|n| !n.is_empty()),
        indicator: clean(&raw.status.indicator),
        description: clean(&raw.status.description),
        components,
        incidents,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_documented_summary_fixture() {
        let body = include_bytes!("../../../../tests/fixtures/statuspage/summary_incident.json");
        let s = parse_summary("openai", body).expect("valid fixture");
        assert_eq!(s.page_name.as_deref(), Some("OpenAI"));
        assert_eq!(s.indicator, "major");
        assert_eq!(s.incidents.len(), 1);
        let i = &s.incidents[0];
        assert_eq!(i.name, "Elevated error rates on Chat Completions");
        assert_eq!(i.status, "investigating");
        assert_eq!(i.impact, "major");
        assert!(i.is_open());
        assert_eq!(i.components, vec!["Chat Completions".to_string()]);
        assert!(s.components.iter().any(|c| c.name == "Chat Completions" && c.status == "partial_outage"));
        assert!(s.components.iter().all(|c| c.name != "APIs"), "groups are left out");
    }

    #[test]
    fn a_green_page_has_no_incident() {
        let body = include_bytes!("../../../../tests/fixtures/statuspage/summary_operational.json");
        let s = parse_summary("openai", body).expect("valid fixture");
        assert_eq!(s.indicator, "none");
        assert!(s.incidents.is_empty());
    }

    #[test]
    fn malformed_documents_are_refused() {
        let body = include_bytes!("../../../../tests/fixtures/statuspage/summary_malformed.json");
        assert!(parse_summary("openai", body).is_err());
        assert!(parse_summary("openai", b"<html>maintenance</html>").is_err());
        assert!(parse_summary("openai", br#"{"components":[]}"#).is_err(), "no status object");
    }

    #[test]
    fn provider_text_is_cut_and_stripped_of_control_characters() {
        let long = "x".repeat(5000);
        let body = format!(
            r#"{{"status":{{"indicator":"minor","description":"a\u0007b"}},"incidents":[{{"id":"1","name":"{long}","status":"investigating","created_at":"2026-12-01T14:02:00Z"}}]}}"#
        );
        let s = parse_summary("p", body.as_bytes()).expect("valid");
        assert_eq!(s.description, "ab");
        assert_eq!(s.incidents[0].name.len(), MAX_TEXT);
        assert_eq!(s.incidents[0].impact, "none");
    }
}
