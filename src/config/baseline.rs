//! `[baseline]`: the rolling window and the sample counts below which a quantile is not
//! published, so the router never acts on a P95 drawn from a handful of probes.

use crate::config::parse::{count_in, duration_in, number_in, DAY, MINUTE};
use crate::config::ConfigError;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// `[baseline]`.
#[derive(Debug, Clone)]
pub struct BaselineConfig {
    /// Rolling window.
    pub window: Duration,
    /// Router threshold = factor × P95.
    pub failover_factor: f64,
    /// Fewest samples for a published P50.
    pub min_samples_p50: u64,
    /// Fewest samples for a published P95.
    pub min_samples_p95: u64,
    /// Fewest samples for a published P99.
    pub min_samples_p99: u64,
}

/// `[baseline]` as written.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawBaseline {
    window: String,
    failover_factor: f64,
    min_samples_p50: u64,
    min_samples_p95: u64,
    min_samples_p99: u64,
}

impl Default for RawBaseline {
    fn default() -> Self {
        // A P95 needs a few hundred samples to be stable and a P99 about two thousand
        // (≈ 5 h and ≈ 33 h at one probe a minute); below that the quantile is null.
        RawBaseline {
            window: "7d".into(),
            failover_factor: 2.0,
            min_samples_p50: 30,
            min_samples_p95: 300,
            min_samples_p99: 2000,
        }
    }
}

/// `baseline.window`, from a minute to 90 days (storage retention is checked against it too).
pub(super) fn window(raw: &RawBaseline) -> Result<Duration, ConfigError> {
    duration_in("baseline.window", &raw.window, MINUTE, 90 * DAY)
}

/// `[baseline]`, validated; every error names its key.
pub(super) fn validate(b: &RawBaseline) -> Result<BaselineConfig, ConfigError> {
    let samples = |key: &str, n: u64| count_in(key, n, 1, 100_000_000);
    Ok(BaselineConfig {
        window: window(b)?,
        failover_factor: number_in("baseline.failover_factor", b.failover_factor, 1.0, 100.0, false)?,
        min_samples_p50: samples("baseline.min_samples_p50", b.min_samples_p50)?,
        min_samples_p95: samples("baseline.min_samples_p95", b.min_samples_p95)?,
        min_samples_p99: samples("baseline.min_samples_p99", b.min_samples_p99)?,
    })
}
