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
    /// How long a target's level may stay shifted (held out while it is in trouble) before the
    /// baseline adopts it; `None` (`"off"`): only `vigil baselines adopt` adopts.
    pub adopt_after: Option<Duration>,
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
    adopt_after: String,
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
            // A day: longer than any incident worth a page, short enough that a provider that
            // really became slower is judged by its new level the next day.
            adopt_after: "24h".into(),
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
        adopt_after: match b.adopt_after.trim() {
            "off" => None,
            s => Some(duration_in("baseline.adopt_after", s, MINUTE, 90 * DAY)?),
        },
    })
}

#[cfg(test)]
mod tests {
    use crate::config::test_util::{env, err_at};
    use crate::config::Config;
    use std::time::Duration;

    #[test]
    fn adopt_after_is_a_day_by_default_off_or_a_duration_in_range() {
        let load = |text: &str| Config::from_toml(text, &env(&[])).expect("valid");
        assert_eq!(load("").baseline.adopt_after, Some(Duration::from_secs(86_400)));
        assert_eq!(load("[baseline]\nadopt_after = \"off\"").baseline.adopt_after, None);
        assert_eq!(load("[baseline]\nadopt_after = \"90m\"").baseline.adopt_after, Some(Duration::from_secs(5400)));
        for bad in ["\"10s\"", "\"91d\"", "\"soon\"", "3"] {
            err_at(&format!("[baseline]\nadopt_after = {bad}"), &[], "baseline.adopt_after");
        }
    }
}
