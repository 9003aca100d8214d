//! `[metrics]`: how much per-target detail `/metrics` exports, because series count (and so
//! scrape size) grows with every target and each detail level multiplies it. Each level
//! exports everything the one before it does.

use crate::config::{invalid, ConfigError};
use serde::{Deserialize, Serialize};

/// `[metrics]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MetricsConfig {
    /// Per-target series: `compact`, `standard` (default), `histograms` or `full` (docs/METRICS.md).
    pub detail: crate::config::Detail,
}

/// How much per-target detail `/metrics` carries (`metrics.detail`); ordered, each level a
/// superset of the one before (the series counts per level are in docs/METRICS.md, kept equal
/// to a live scrape by `tests/it/metrics_scrape.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Detail {
    /// Last values as gauges, no per-target histogram (outcomes seen, success, last success
    /// time, breaker, plan interval, last TTFB/TTFT/total, P95 baselines, cost), so a scrape of
    /// 1,000 targets stays under 1 MB.
    Compact,
    /// `compact` plus what the shipped dashboards show: the connection phases (dns, connect,
    /// tls, proxy), tokens/s, the last HTTP status and the P50 baselines.
    #[default]
    Standard,
    /// `standard` plus TTFB/TTFT histograms with 5 buckets tuned to LLM latencies.
    Histograms,
    /// Everything: 22-bucket histograms (also total duration), P99 baselines, skipped probes
    /// and cost at zero.
    Full,
}

impl Detail {
    /// The config spelling (`compact`, `histograms`, `full`).
    pub fn as_str(self) -> &'static str {
        match self {
            Detail::Compact => "compact",
            Detail::Standard => "standard",
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
        RawMetrics { detail: "standard".into() }
    }
}

/// `[metrics]`, validated.
pub(super) fn validate(raw: &RawMetrics) -> Result<MetricsConfig, ConfigError> {
    let detail = match raw.detail.trim() {
        "compact" => crate::config::Detail::Compact,
        "standard" => crate::config::Detail::Standard,
        "histograms" => crate::config::Detail::Histograms,
        "full" => crate::config::Detail::Full,
        other => {
            return Err(invalid(
                "metrics.detail",
                format!("{other:?} must be \"compact\", \"standard\", \"histograms\" or \"full\""),
            ))
        }
    };
    Ok(MetricsConfig { detail })
}

#[cfg(test)]
mod tests {
    use crate::config::test_util::env;
    use crate::config::Config;

    #[test]
    fn metrics_detail_is_standard_by_default_and_checked() {
        use crate::config::Detail;
        let keys = env(&[("OPENAI_API_KEY", "sk-test-1")]);
        let c = Config::from_toml("", &keys).expect("valid");
        assert_eq!(c.metrics.detail, Detail::Standard);
        let c = Config::from_toml("[metrics]\ndetail = \"compact\"", &keys).expect("valid");
        assert_eq!(c.metrics.detail, Detail::Compact);
        assert!(
            Detail::Compact < Detail::Standard
                && Detail::Standard < Detail::Histograms
                && Detail::Histograms < Detail::Full
        );
        let c = Config::from_toml("[metrics]\ndetail = \"full\"", &keys).expect("valid");
        assert_eq!(c.metrics.detail, crate::config::Detail::Full);
        let c = Config::from_toml("[metrics]\ndetail = \"histograms\"", &keys).expect("valid");
        assert_eq!(c.metrics.detail, crate::config::Detail::Histograms);
        let e = Config::from_toml("[metrics]\ndetail = \"all\"", &keys).expect_err("refused");
        assert!(e.to_string().contains("metrics.detail"), "{e}");
    }
}
