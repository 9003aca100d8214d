//! Regional or global: turns the other regions' published `target_status` rows into what the
//! rule engine needs per target ([`Elsewhere`]). Pure; the rows are read elsewhere.

use super::rules::Elsewhere;
use super::rules::ModelKey;
use crate::vocab::breaker::State;
use crate::vocab::health::HealthState;
use crate::vocab::records::TargetStatus;
use chrono::{DateTime, Utc};
use std::collections::HashMap;

/// Per target, what the regions other than `region` see, counting only rows written at or after `fresh_since`.
pub fn elsewhere_from(rows: &[TargetStatus], region: &str, fresh_since: DateTime<Utc>) -> HashMap<ModelKey, Elsewhere> {
    let mut out: HashMap<ModelKey, Elsewhere> = HashMap::new();
    for r in rows.iter().filter(|r| r.target.region != region && r.updated_at >= fresh_since) {
        let t = &r.target;
        let e = out.entry((t.provider.clone(), t.model.clone(), t.route.clone())).or_default();
        e.regions += 1;
        e.failing += u32::from(matches!(r.health.state, HealthState::Down | HealthState::HalfOpen));
        e.over_latency += u32::from(r.over_latency);
        e.breaker_open += u32::from(r.breaker != State::Closed);
        e.flapping += u32::from(r.health.flapping);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::health::Health;
    use crate::vocab::target::Target;

    fn row(region: &str, state: HealthState, over: bool, breaker: State, age_s: i64) -> TargetStatus {
        let now = DateTime::parse_from_rfc3339("2026-12-01T10:00:00Z").expect("t").with_timezone(&Utc);
        TargetStatus {
            target: Target::new("p".into(), "m".into(), None, region.into()),
            health: Health { state, flapping: region == "me", ..Health::default() },
            over_latency: over,
            breaker,
            updated_at: now - chrono::Duration::seconds(age_s),
        }
    }

    #[test]
    fn counts_other_fresh_regions_by_what_they_see() {
        let rows = vec![
            row("eu", HealthState::Down, false, State::Open, 1),
            row("us", HealthState::Degraded, true, State::Closed, 2),
            row("ap", HealthState::HalfOpen, false, State::HalfOpen, 3),
            row("sa", HealthState::Down, false, State::Open, 600),
            row("me", HealthState::Ok, false, State::Closed, 1),
        ];
        let now = DateTime::parse_from_rfc3339("2026-12-01T10:00:00Z").expect("t").with_timezone(&Utc);
        let e = elsewhere_from(&rows, "eu", now - chrono::Duration::seconds(60));
        let got = e.get(&("p".into(), "m".into(), None)).copied().expect("target");
        assert_eq!(got, Elsewhere { regions: 3, failing: 1, over_latency: 1, breaker_open: 1, flapping: 1 });
    }
}
