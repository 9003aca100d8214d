//! How much earlier vigil saw the providers' incidents than the providers announced them: each
//! incident opened on a provider's status page this week is matched with vigil's first breaker
//! opening for a target of that provider in the [`LOOKBACK`] before the announcement.
//!
//! The rule: the provider's `created_at` is when the incident appeared on its page. vigil "saw
//! it first" when any of its breakers for that provider opened in `[created_at − LOOKBACK,
//! created_at)`; the lead is `created_at` minus the earliest such opening. An opening in
//! `[created_at, created_at + LOOKBACK)` counts as "seen after". Breaker openings, not single
//! failed probes, so one stray error does not claim an early detection.

use crate::vocab::provider_status::ProviderIncident;
use crate::vocab::records::BreakerTransition;
use chrono::{DateTime, Duration, Utc};
use serde::Serialize;
use std::collections::BTreeMap;

/// How far before (and after) an announcement a breaker opening is taken to be the same incident.
pub const LOOKBACK: Duration = Duration::hours(2);

/// One provider's incidents of the week against vigil's detections.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ProviderLead {
    /// Provider name.
    pub provider: String,
    /// Incidents the provider opened this week.
    pub incidents: u64,
    /// Of those, how many vigil's breakers caught before the announcement.
    pub seen_first: u64,
    /// How many vigil caught only after the announcement (within [`LOOKBACK`]).
    pub seen_after: u64,
    /// Median lead of the incidents seen first, in seconds.
    pub median_lead_s: Option<i64>,
    /// Longest lead, in seconds.
    pub max_lead_s: Option<i64>,
}

/// Matches `incidents` with breaker `transitions` (any region), per provider, sorted by name.
pub fn lead_times(incidents: &[ProviderIncident], transitions: &[BreakerTransition]) -> Vec<ProviderLead> {
    let mut by: BTreeMap<String, (ProviderLead, Vec<i64>)> = BTreeMap::new();
    for i in incidents {
        let (lead, leads) = by
            .entry(i.provider.clone())
            .or_insert_with(|| (ProviderLead { provider: i.provider.clone(), ..ProviderLead::default() }, Vec::new()));
        lead.incidents += 1;
        let openings = transitions
            .iter()
            .filter(|t| t.target.provider == i.provider && t.to_state == crate::vocab::breaker::State::Open)
            .map(|t| t.at);
        let before: Option<DateTime<Utc>> =
            openings.clone().filter(|at| *at >= i.created_at - LOOKBACK && *at < i.created_at).min();
        match before {
            Some(first) => {
                lead.seen_first += 1;
                leads.push((i.created_at - first).num_seconds());
            }
            None => {
                if openings.into_iter().any(|at| at >= i.created_at && at < i.created_at + LOOKBACK) {
                    lead.seen_after += 1;
                }
            }
        }
    }
    by.into_values()
        .map(|(mut lead, mut leads)| {
            leads.sort_unstable();
            lead.median_lead_s = leads.get(leads.len() / 2).copied().filter(|_| !leads.is_empty());
            lead.max_lead_s = leads.last().copied();
            lead
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::target::Target;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).expect("time").with_timezone(&Utc)
    }

    fn incident(provider: &str, id: &str, created: &str) -> ProviderIncident {
        ProviderIncident {
            provider: provider.into(),
            id: id.into(),
            name: id.into(),
            status: "resolved".into(),
            impact: "major".into(),
            created_at: at(created),
            updated_at: None,
            resolved_at: None,
            components: vec![],
            shortlink: None,
        }
    }

    fn opened(provider: &str, when: &str, to: &str) -> BreakerTransition {
        BreakerTransition {
            target: Target::new(provider.into(), "m".into(), None, "eu".into()),
            from_state: crate::vocab::breaker::State::Closed,
            to_state: to.parse().expect("breaker state"),
            at: at(when),
            reason: "errors".into(),
        }
    }

    #[test]
    fn counts_incidents_seen_before_and_after_the_announcement() {
        let incidents = [
            incident("openai", "a", "2026-11-28T14:10:00Z"),
            incident("openai", "b", "2026-11-29T09:00:00Z"),
            incident("openai", "c", "2026-11-30T20:00:00Z"),
            incident("groq", "d", "2026-11-30T20:00:00Z"),
        ];
        let transitions = [
            opened("openai", "2026-11-28T14:02:00Z", "open"),
            opened("openai", "2026-11-28T14:05:00Z", "open"),
            opened("openai", "2026-11-29T08:00:00Z", "open"),
            opened("openai", "2026-11-30T20:30:00Z", "open"),
            opened("openai", "2026-11-30T19:59:00Z", "half_open"),
            opened("groq", "2026-11-30T16:00:00Z", "open"),
        ];
        let leads = lead_times(&incidents, &transitions);
        assert_eq!(leads.len(), 2);
        let groq = &leads[0];
        assert_eq!(
            (groq.provider.as_str(), groq.incidents, groq.seen_first, groq.seen_after),
            ("groq", 1, 0, 0),
            "4 h before is another incident"
        );
        let openai = &leads[1];
        assert_eq!((openai.incidents, openai.seen_first, openai.seen_after), (3, 2, 1));
        assert_eq!(openai.max_lead_s, Some(3600), "b: an hour early");
        assert_eq!(openai.median_lead_s, Some(3600), "a: 8 min (earliest opening), b: 60 min");
    }

    #[test]
    fn no_incidents_no_rows() {
        assert!(lead_times(&[], &[opened("openai", "2026-11-28T14:02:00Z", "open")]).is_empty());
    }
}
