//! The golden checks' series (`[[provider.check]]`): runs by verdict and whether each check's
//! last judged run passed. Labelled by the target and the check's `name`, never its prompt.

use super::{labels, TARGET_LABELS};
use crate::vocab::check::{CheckRun, CheckVerdict};
use prometheus::{GaugeVec, IntCounterVec, Opts, Registry};

/// Golden check series; they never touch the probe series.
pub(super) struct CheckMetrics {
    runs: IntCounterVec,
    passing: GaugeVec,
}

impl CheckMetrics {
    pub(super) fn new() -> Result<Self, prometheus::Error> {
        let with = |extra: &[&'static str]| -> Vec<&'static str> {
            TARGET_LABELS.iter().copied().chain(extra.iter().copied()).collect()
        };
        Ok(CheckMetrics {
            runs: IntCounterVec::new(
                Opts::new("vigil_check_runs_total", "Golden check runs, by check and verdict (passed, failed, error)."),
                &with(&["check", "verdict"]),
            )?,
            passing: GaugeVec::new(
                Opts::new(
                    "vigil_check_passing",
                    "1 when the check's last judged run passed, 0 when it failed (a failed request changes nothing).",
                ),
                &with(&["check"]),
            )?,
        })
    }

    pub(super) fn register(&self, registry: &Registry) -> Result<(), prometheus::Error> {
        registry.register(Box::new(self.runs.clone()))?;
        registry.register(Box::new(self.passing.clone()))?;
        Ok(())
    }

    pub(super) fn observe(&self, run: &CheckRun) {
        let l = labels(&run.sample.target);
        let check = run.check.as_str();
        self.runs.with_label_values(&[l[0], l[1], l[2], l[3], check, run.verdict.as_str()]).inc();
        match run.verdict {
            CheckVerdict::Passed => self.passing.with_label_values(&[l[0], l[1], l[2], l[3], check]).set(1.0),
            CheckVerdict::Failed => self.passing.with_label_values(&[l[0], l[1], l[2], l[3], check]).set(0.0),
            CheckVerdict::Error => {}
        }
    }
}
