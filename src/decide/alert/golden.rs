//! `check_failed`: a target's golden checks (`[[provider.check]]`) say its answers broke a
//! team's own assertion or TTFT budget. One facet per target (its dedup key is the target's, like
//! every per-target kind): it holds while the latest judged run of any of the target's checks
//! failed, and its summary names each failing check with what was asked and what came back. A
//! run whose request failed (`error`) leaves the check's verdict as it was: the regular probes'
//! `errors` and `breaker_open` speak for a provider that does not answer. The verdicts are part
//! of the engine's saved state, so a restart neither forgets a failing check nor re-pages it.

use super::{Alert, AlertKind};
use crate::vocab::check::{CheckRun, CheckVerdict};
use crate::vocab::target::Target;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The last judged verdict of one check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Judged {
    failed: bool,
    why: String,
}

/// One target's checks as last judged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct TargetChecks {
    target: Target,
    checks: BTreeMap<String, Judged>,
}

/// Every target's checks, by target id (kept in the engine's saved state).
pub(crate) type Golden = BTreeMap<String, TargetChecks>;

/// Takes this round's runs into `state` and returns a verdict (alert, holds) for every target
/// with a judged check.
pub(crate) fn verdicts(region: &str, state: &mut Golden, runs: &[&CheckRun]) -> Vec<(Alert, bool)> {
    for run in runs.iter().filter(|r| !r.check.starts_with(crate::vocab::capability::CHECK_PREFIX)) {
        let failed = match run.verdict {
            CheckVerdict::Passed => false,
            CheckVerdict::Failed => true,
            CheckVerdict::Error => continue,
        };
        let t = run.target();
        let entry = state
            .entry(format!("{}|{}", t.region, t.id()))
            .or_insert_with(|| TargetChecks { target: t.clone(), checks: BTreeMap::new() });
        entry.checks.insert(run.check.clone(), Judged { failed, why: run.why.clone() });
    }
    state
        .values()
        .map(|tc| {
            let failing: Vec<String> =
                tc.checks.iter().filter(|(_, j)| j.failed).map(|(name, j)| format!("{name:?}: {}", j.why)).collect();
            let holds = !failing.is_empty();
            let summary = if holds {
                format!("golden check failed on {}: {}", tc.target.id(), failing.join("; "))
            } else {
                format!("every golden check of {} passes", tc.target.id())
            };
            let t = &tc.target;
            (Alert::new(AlertKind::CheckFailed, region, &t.provider, Some(t), summary), holds)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::sample::Sample;

    fn run(model: &str, check: &str, verdict: CheckVerdict, why: &str) -> CheckRun {
        let t = Target::new("p".into(), model.into(), None, "eu".into());
        let now = chrono::Utc::now();
        CheckRun {
            sample: Sample::new(t, now, now),
            check: check.into(),
            verdict,
            why: why.into(),
            answer: String::new(),
        }
    }

    #[test]
    fn a_failing_check_holds_its_target_until_it_passes_and_errors_change_nothing() {
        let mut state = Golden::new();
        let bad = run("m", "refund", CheckVerdict::Failed, "asked for \"yes\", got \"no\"");
        let ok = run("m", "json", CheckVerdict::Passed, "");
        let v = verdicts("eu", &mut state, &[&bad, &ok]);
        assert_eq!(v.len(), 1);
        assert!(v[0].1, "holds");
        assert!(v[0].0.summary.contains("\"refund\": asked for \"yes\", got \"no\""), "{}", v[0].0.summary);
        assert!(!v[0].0.summary.contains("json"), "only the failing check is named: {}", v[0].0.summary);
        let error = run("m", "refund", CheckVerdict::Error, "the request failed (timeout)");
        assert!(verdicts("eu", &mut state, &[&error])[0].1, "an error leaves the verdict as it was");
        let fixed = run("m", "refund", CheckVerdict::Passed, "");
        let v = verdicts("eu", &mut state, &[&fixed]);
        assert!(!v[0].1, "clears once every check passes: {}", v[0].0.summary);
        assert_eq!(v[0].0.kind, AlertKind::CheckFailed);
    }
}
