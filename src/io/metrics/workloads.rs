//! The long-prompt probes' series (`[[probe.workload]]`): runs by size and outcome, and the
//! time to first token of each size's latest successful run. Labelled by the target and the size
//! asked (`input_tokens`, one value per configured size: bounded); they never touch the tiny
//! probe's series or its baselines' gauges.

use super::{labels, TARGET_LABELS};
use crate::vocab::sample::Outcome;
use crate::vocab::workload::WorkloadRun;
use prometheus::{GaugeVec, IntCounterVec, Opts, Registry};

/// Long-prompt probe series.
pub(super) struct WorkloadMetrics {
    runs: IntCounterVec,
    ttft: GaugeVec,
}

impl WorkloadMetrics {
    pub(super) fn new() -> Result<Self, prometheus::Error> {
        let with = |extra: &[&'static str]| -> Vec<&'static str> {
            TARGET_LABELS.iter().copied().chain(extra.iter().copied()).collect()
        };
        Ok(WorkloadMetrics {
            runs: IntCounterVec::new(
                Opts::new("vigil_workload_runs_total", "Long-prompt probe runs, by size asked and outcome."),
                &with(&["input_tokens", "outcome"]),
            )?,
            ttft: GaugeVec::new(
                Opts::new(
                    "vigil_workload_ttft_seconds",
                    "Time to first token of the size's latest successful long-prompt probe run.",
                ),
                &with(&["input_tokens"]),
            )?,
        })
    }

    pub(super) fn register(&self, registry: &Registry) -> Result<(), prometheus::Error> {
        registry.register(Box::new(self.runs.clone()))?;
        registry.register(Box::new(self.ttft.clone()))?;
        Ok(())
    }

    pub(super) fn observe(&self, run: &WorkloadRun) {
        let l = labels(&run.sample.target);
        let size = run.input_tokens.to_string();
        let outcome = run.sample.outcome.as_str();
        self.runs.with_label_values(&[l[0], l[1], l[2], l[3], size.as_str(), outcome]).inc();
        if let (Outcome::Ok, Some(ms)) = (run.sample.outcome, run.sample.ttft_ms) {
            self.ttft.with_label_values(&[l[0], l[1], l[2], l[3], size.as_str()]).set(ms / 1000.0);
        }
    }
}
