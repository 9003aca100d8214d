//! Long-prompt probes (`[[probe.workload]]`): one run sends a nonce-first prompt of about
//! `input_tokens` tokens to one target. Its record ([`WorkloadRun`]: the timed probe's
//! [`Sample`] and the size asked) travels on its own channel to the pipeline, which stores it in
//! `workload_runs` (never `samples`) and keeps its time to first token in a series of its own per
//! target and size (`decide::workload`): the tiny probe's baselines never see it.

use crate::vocab::sample::Sample;
use crate::vocab::target::Target;
use serde::{Deserialize, Serialize};

/// One run of one workload size on one target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadRun {
    /// The probe as measured (outcome, timings, tokens as the provider counted them, cost); its
    /// id is the run's id.
    pub sample: Sample,
    /// The size asked (`input_tokens` of its `[[probe.workload]]`): the series it belongs to.
    pub input_tokens: u32,
}

impl WorkloadRun {
    /// Target probed.
    pub fn target(&self) -> &Target {
        &self.sample.target
    }
}
