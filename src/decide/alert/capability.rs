//! `capability_lost`: a target's capability probe (`[probe.capabilities]`) says it no longer
//! does what it did: a capability it passed before (a function call, JSON mode, a schema) now
//! fails. A capability it never had is shown, never paged: the chains' `requires` keep traffic
//! that needs it away. One facet per target (its dedup key is the target's); it holds while any
//! capability it had fails its last judged run, and names each with what was asked and what came
//! back. A run whose request failed changes nothing. Part of the engine's saved state, so a
//! restart neither forgets what a target could do nor re-pages.

use super::{Alert, AlertKind};
use crate::vocab::capability::Capability;
use crate::vocab::check::{CheckRun, CheckVerdict};
use crate::vocab::target::Target;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What the probes of one capability of one target said.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Seen {
    /// It passed at least once.
    had: bool,
    /// Its last judged run failed.
    failed: bool,
    why: String,
}

/// One target's capabilities as last judged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct TargetCapabilities {
    target: Target,
    seen: BTreeMap<Capability, Seen>,
}

/// Every target's capabilities, by target id (kept in the engine's saved state).
pub(crate) type Capabilities = BTreeMap<String, TargetCapabilities>;

/// Takes this round's capability runs into `state` (other runs are ignored) and returns a
/// verdict (alert, holds) for every target with a judged capability.
pub(crate) fn verdicts(region: &str, state: &mut Capabilities, runs: &[&CheckRun]) -> Vec<(Alert, bool)> {
    for run in runs {
        let Some(capability) = Capability::of_check(&run.check) else { continue };
        let failed = match run.verdict {
            CheckVerdict::Passed => false,
            CheckVerdict::Failed => true,
            CheckVerdict::Error => continue,
        };
        let t = run.target();
        let entry = state
            .entry(format!("{}|{}", t.region, t.id()))
            .or_insert_with(|| TargetCapabilities { target: t.clone(), seen: BTreeMap::new() });
        let seen = entry.seen.entry(capability).or_default();
        seen.had |= !failed;
        seen.failed = failed;
        seen.why = run.why.clone();
    }
    state
        .values()
        .map(|tc| {
            let lost: Vec<String> =
                tc.seen.iter().filter(|(_, s)| s.had && s.failed).map(|(c, s)| format!("{c}: {}", s.why)).collect();
            let holds = !lost.is_empty();
            let summary = if holds {
                format!("{} lost a capability it had: {}", tc.target.id(), lost.join("; "))
            } else {
                format!("{} does everything it did", tc.target.id())
            };
            let t = &tc.target;
            (Alert::new(AlertKind::CapabilityLost, region, &t.provider, Some(t), summary), holds)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::sample::Sample;

    fn run(capability: Capability, verdict: CheckVerdict, why: &str) -> CheckRun {
        let t = Target::new("p".into(), "m".into(), None, "eu".into());
        let now = chrono::Utc::now();
        let check = capability.check_name();
        CheckRun { sample: Sample::new(t, now, now), check, verdict, why: why.into(), answer: String::new() }
    }

    #[test]
    fn only_a_capability_the_target_had_is_lost_and_it_clears_when_back() {
        let mut state = Capabilities::new();
        let never = run(Capability::JsonSchema, CheckVerdict::Failed, "asked for a JSON object, got \"Paris\"");
        let v = verdicts("eu", &mut state, &[&never]);
        assert!(!v[0].1, "never had it: shown, not paged");
        let had = run(Capability::Tools, CheckVerdict::Passed, "");
        let golden = CheckRun { check: "refund".into(), ..run(Capability::Tools, CheckVerdict::Failed, "x") };
        assert!(!verdicts("eu", &mut state, &[&had, &golden])[0].1, "a golden check is not a capability");
        let lost = run(Capability::Tools, CheckVerdict::Failed, "asked to call get_weather, got text \"sunny\"");
        let v = verdicts("eu", &mut state, &[&lost]);
        assert!(v[0].1);
        assert!(v[0].0.summary.contains("tools: asked to call get_weather"), "{}", v[0].0.summary);
        assert!(!v[0].0.summary.contains("json_schema"), "{}", v[0].0.summary);
        let error = run(Capability::Tools, CheckVerdict::Error, "the request failed (timeout)");
        assert!(verdicts("eu", &mut state, &[&error])[0].1, "a failed request changes nothing");
        assert!(!verdicts("eu", &mut state, &[&had])[0].1, "clears once it is back");
        assert_eq!(v[0].0.kind, AlertKind::CapabilityLost);
    }

    /// The state is saved as JSON with the engine's: capabilities as map keys read back.
    #[test]
    fn the_state_round_trips_as_json() {
        let mut state = Capabilities::new();
        let had = run(Capability::Tools, CheckVerdict::Passed, "");
        let lost = run(Capability::JsonSchema, CheckVerdict::Failed, "asked for a JSON object, got \"x\"");
        verdicts("eu", &mut state, &[&had, &lost]);
        let text = serde_json::to_string(&state).expect("saves");
        assert!(text.contains("\"tools\"") && text.contains("\"json_schema\""), "{text}");
        let back: Capabilities = serde_json::from_str(&text).expect("reads back");
        assert_eq!(back, state);
    }
}
