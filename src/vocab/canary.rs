//! The silent model-change canary: a second, rare probe per target with fixed deterministic
//! questions ([`prompt`]), its record ([`CanaryRun`]: the timed probe's [`Sample`] plus what the
//! answers and the provider's own model identity said), the change statistic ([`detect`]) and
//! the task that runs it on its own clock and concurrency, apart from the regular probes ([`runner`]).
//!
//! A canary run is a sample kept apart: it travels on its own channel to the pipeline, which
//! stores it in `canary_runs` (never in `samples`), publishes it for readers and hands it to the
//! alert engine for `model_changed`; it never reaches baselines, breakers or latency metrics.

use crate::vocab::sample::Sample;
use crate::vocab::target::Target;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

/// What the provider said about the model that answered, read from the stream.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelIdentity {
    /// The `model` field echoed back (OpenAI-compatible, Anthropic `message.model`, Gemini `modelVersion`).
    pub model: Option<String>,
    /// OpenAI's `system_fingerprint`.
    pub system_fingerprint: Option<String>,
    /// OpenRouter's upstream `provider`.
    pub upstream: Option<String>,
}

/// Log-probabilities of the answer's tokens, where the API returned them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Logprobs {
    /// Tokens with a log-probability.
    pub tokens: u32,
    /// Their sum (natural log).
    pub sum: f64,
}

impl Logprobs {
    /// Mean log-probability per token, when any was returned.
    pub fn mean(&self) -> Option<f64> {
        (self.tokens > 0).then(|| self.sum / f64::from(self.tokens))
    }
}

/// One canary run of one target: the timed probe and what its answers said.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CanaryRun {
    /// The probe as measured (outcome, timings, tokens, cost); its id is the run's id.
    pub sample: Sample,
    /// Version of the question set ([`prompt::PROMPT_VERSION`]).
    pub prompt_version: u32,
    /// Questions answered exactly.
    pub correct: u32,
    /// Questions asked.
    pub total: u32,
    /// Fingerprint of the normalised answers ([`prompt::Scored::fingerprint`]); empty on failure.
    pub answers_fingerprint: String,
    /// The normalised answers, in question order (empty on failure).
    pub answers: Vec<String>,
    /// The provider's model identity.
    pub identity: ModelIdentity,
    /// Log-probabilities, where returned.
    pub logprobs: Option<Logprobs>,
}

impl CanaryRun {
    /// Exact-match score in 0..=1 (0 for a failed run).
    pub fn score(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            f64::from(self.correct) / f64::from(self.total)
        }
    }

    /// Target probed.
    pub fn target(&self) -> &Target {
        &self.sample.target
    }
}

/// The latest canary run of each target, published by the pipeline for the status page and
/// `/v1/canary`; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct SharedCanary(Arc<RwLock<BTreeMap<Target, CanaryRun>>>);

impl SharedCanary {
    /// Records a run as its target's latest.
    pub fn publish(&self, run: &CanaryRun) {
        // A poisoned lock still holds valid runs.
        let mut g = self.0.write().unwrap_or_else(|e| e.into_inner());
        g.insert(run.sample.target.clone(), run.clone());
    }

    /// The latest run of every target, in target order.
    pub fn latest(&self) -> Vec<CanaryRun> {
        self.0.read().map(|m| m.values().cloned().collect()).unwrap_or_default()
    }
}
