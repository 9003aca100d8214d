//! `[probe.canary]`: the silent model-change canary and the settings of its statistic. Kept apart
//! from `[probe]` because the canary runs its own schedule and its own concurrency limit.

use crate::config::parse::{count_in, duration_in, number_in, size_in, DAY, MINUTE};
use crate::config::ConfigError;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// `[probe.canary]`: the silent model-change canary (docs/CANARY.md).
#[derive(Debug, Clone, PartialEq)]
pub struct CanaryConfig {
    /// Off unless `enabled = true`.
    pub enabled: bool,
    /// One canary run per target every `interval`.
    pub interval: Duration,
    /// Output budget of one run.
    pub max_tokens: u32,
    /// `seed` sent where the API has one.
    pub seed: u64,
    /// Ask OpenAI-compatible APIs for log-probabilities.
    pub logprobs: bool,
    /// Most canary runs in flight at once (apart from the regular probes' limit).
    pub concurrency: usize,
    /// Runs the statistic's reference window holds.
    pub reference_runs: usize,
    /// Runs of the recent window a change must hold through.
    pub recent_runs: usize,
    /// Significance of the score test.
    pub alpha: f64,
    /// Smallest exact-match score difference that counts.
    pub min_delta: f64,
}

impl CanaryConfig {
    /// The statistic's settings.
    pub fn detector(&self) -> crate::config::DetectorConfig {
        crate::config::DetectorConfig {
            reference: self.reference_runs,
            recent: self.recent_runs,
            min_reference: (self.reference_runs / 2).max(1),
            alpha: self.alpha,
            min_delta: self.min_delta,
            ..Default::default()
        }
    }
}

impl Default for CanaryConfig {
    fn default() -> Self {
        CanaryConfig {
            enabled: false,
            interval: Duration::from_secs(15 * 60),
            max_tokens: 64,
            seed: 7,
            logprobs: false,
            concurrency: 2,
            reference_runs: 16,
            recent_runs: 4,
            alpha: 1e-4,
            min_delta: 0.2,
        }
    }
}

/// Window sizes and thresholds of the statistic.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DetectorConfig {
    /// Most reference runs kept.
    pub reference: usize,
    /// Runs in the recent window (a change must hold through all of them).
    pub recent: usize,
    /// Fewest reference runs before any test runs.
    pub min_reference: usize,
    /// Significance of the score test, per evaluation.
    pub alpha: f64,
    /// Smallest score difference (0..1) that counts, whatever the p-value.
    pub min_delta: f64,
    /// Share of reference runs one fingerprint must hold for the answers test to apply.
    pub stable_share: f64,
}

impl Default for DetectorConfig {
    fn default() -> Self {
        DetectorConfig { reference: 16, recent: 4, min_reference: 8, alpha: 1e-4, min_delta: 0.2, stable_share: 0.8 }
    }
}

/// `[probe.canary]` as written.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawCanary {
    enabled: bool,
    interval: String,
    max_tokens: u32,
    seed: u64,
    logprobs: bool,
    concurrency: usize,
    reference_runs: usize,
    recent_runs: usize,
    alpha: f64,
    min_delta: f64,
}

impl Default for RawCanary {
    fn default() -> Self {
        let d = CanaryConfig::default();
        RawCanary {
            enabled: d.enabled,
            interval: "15m".into(),
            max_tokens: d.max_tokens,
            seed: d.seed,
            logprobs: d.logprobs,
            concurrency: d.concurrency,
            reference_runs: d.reference_runs,
            recent_runs: d.recent_runs,
            alpha: d.alpha,
            min_delta: d.min_delta,
        }
    }
}

/// `[probe.canary]`, validated; every error names its key.
pub(super) fn validate(c: &RawCanary) -> Result<CanaryConfig, ConfigError> {
    Ok(CanaryConfig {
        enabled: c.enabled,
        interval: duration_in("probe.canary.interval", &c.interval, MINUTE, 7 * DAY)?,
        max_tokens: count_in("probe.canary.max_tokens", c.max_tokens, 16, 1024)?,
        seed: c.seed,
        logprobs: c.logprobs,
        concurrency: size_in("probe.canary.concurrency", c.concurrency, 1, 64)?,
        reference_runs: size_in("probe.canary.reference_runs", c.reference_runs, 4, 1000)?,
        recent_runs: size_in("probe.canary.recent_runs", c.recent_runs, 2, 100)?,
        alpha: number_in("probe.canary.alpha", c.alpha, 0.0, 0.05, true)?,
        min_delta: number_in("probe.canary.min_delta", c.min_delta, 0.0, 1.0, true)?,
    })
}
