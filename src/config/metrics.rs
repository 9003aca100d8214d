//! `[metrics]`: how much per-target detail `/metrics` exports, because series count (and so
//! scrape size) grows with every target and each detail level multiplies it.

use crate::config::{invalid, ConfigError};
use serde::{Deserialize, Serialize};

/// `[metrics]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MetricsConfig {
    /// Per-target series: `compact` (default, at most 10 per target), `histograms` (at most 25) or `full`.
    pub detail: crate::config::Detail,
}

/// How much per-target detail `/metrics` carries (`metrics.detail`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Detail {
    /// Last values as gauges, no per-target histogram: at most 10 series per target (outcomes
    /// seen, success, last success time, breaker, last TTFB/TTFT/total, P95 baselines, cost),
    /// so a scrape of 1,000 targets stays under 1 MB.
    #[default]
    Compact,
    /// `compact` plus TTFB/TTFT histograms with 5 buckets tuned to LLM latencies: at most 25
    /// series per target.
    Histograms,
    /// Everything: 22-bucket histograms (also total duration), every phase, tokens/s, last
    /// status, P50/P95/P99 baselines, skipped probes at zero.
    Full,
}

impl Detail {
    /// The config spelling (`compact`, `histograms`, `full`).
    pub fn as_str(self) -> &'static str {
        match self {
            Detail::Compact => "compact",
            Detail::Histograms => "histograms",
            Detail::Full => "full",
        }
    }
}

/// `[metrics]` as written.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawMetrics {
    detail: String,
}

impl Default for RawMetrics {
    fn default() -> Self {
        RawMetrics { detail: "compact".into() }
    }
}

/// `[metrics]`, validated.
pub(super) fn validate(raw: &RawMetrics) -> Result<MetricsConfig, ConfigError> {
    let detail = match raw.detail.trim() {
        "compact" => crate::config::Detail::Compact,
        "histograms" => crate::config::Detail::Histograms,
        "full" => crate::config::Detail::Full,
        other => {
            return Err(invalid("metrics.detail", format!("{other:?} must be \"compact\", \"histograms\" or \"full\"")))
        }
    };
    Ok(MetricsConfig { detail })
}

#[cfg(test)]
mod tests {
    use crate::config::test_util::env;
    use crate::config::Config;

    #[test]
    fn metrics_detail_is_compact_by_default_and_checked() {
        let keys = env(&[("OPENAI_API_KEY", "sk-test-1")]);
        let c = Config::from_toml("", &keys).expect("valid");
        assert_eq!(c.metrics.detail, crate::config::Detail::Compact);
        let c = Config::from_toml("[metrics]\ndetail = \"full\"", &keys).expect("valid");
        assert_eq!(c.metrics.detail, crate::config::Detail::Full);
        let c = Config::from_toml("[metrics]\ndetail = \"histograms\"", &keys).expect("valid");
        assert_eq!(c.metrics.detail, crate::config::Detail::Histograms);
        let e = Config::from_toml("[metrics]\ndetail = \"all\"", &keys).expect_err("refused");
        assert!(e.to_string().contains("metrics.detail"), "{e}");
    }
}
