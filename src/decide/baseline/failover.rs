//! The vocabulary baselines are judged in: the metrics that get one, and the one meaning of
//! "over the failover threshold" that the breaker, the status page, the alerts and the export share.

use crate::vocab::sample::Sample;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The metrics that get baselines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Time to first byte, ms.
    Ttfb,
    /// Time to first content token, ms.
    Ttft,
    /// Generation speed, tokens per second.
    TokensPerS,
}

impl Metric {
    /// Every metric, in storage order.
    pub const ALL: [Metric; 3] = [Metric::Ttfb, Metric::Ttft, Metric::TokensPerS];

    /// The stored name (`ttfb`, `ttft`, `tokens_per_s`).
    pub fn as_str(self) -> &'static str {
        match self {
            Metric::Ttfb => "ttfb",
            Metric::Ttft => "ttft",
            Metric::TokensPerS => "tokens_per_s",
        }
    }

    /// This metric's value in a sample, in published units (ms or tok/s).
    pub fn value(self, sample: &Sample) -> Option<f64> {
        match self {
            Metric::Ttfb => sample.ttfb_ms,
            Metric::Ttft => sample.ttft_ms,
            Metric::TokensPerS => sample.tokens_per_s,
        }
    }

    /// How people write it in alerts and reasons (`TTFB`, `TTFT`, `tokens/s`).
    pub fn label(self) -> &'static str {
        match self {
            Metric::Ttfb => "TTFB",
            Metric::Ttft => "TTFT",
            Metric::TokensPerS => "tokens/s",
        }
    }

    /// Index of this metric in a series' per-metric arrays.
    pub(super) fn slot(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Metric {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Metric::ALL.into_iter().find(|m| m.as_str() == s).ok_or_else(|| format!("unknown metric {s:?}"))
    }
}

/// The P95s a probe's latency is judged against.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LatencyP95 {
    /// P95 of time to first byte, ms.
    pub ttfb: Option<f64>,
    /// P95 of time to first token, ms.
    pub ttft: Option<f64>,
}

/// One probe's worst latency against its threshold.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Excess {
    /// The metric with the highest value/threshold ratio.
    pub metric: Metric,
    /// The probe's value, ms.
    pub value: f64,
    /// `factor` × that metric's P95, ms.
    pub threshold: f64,
}

impl Excess {
    /// The value is over the threshold.
    pub fn exceeded(&self) -> bool {
        self.value > self.threshold
    }
}

/// The threshold of one metric: `factor` × its P95 (what the router export publishes).
pub fn failover_threshold(p95: f64, factor: f64) -> f64 {
    factor * p95
}

/// The one meaning of "over the threshold" that the breaker, the status page, the latency
/// alerts and the export share: a probe is over when its TTFB *or* its TTFT is above `factor` ×
/// that metric's own P95 (a provider that answers headers at once but queues generation is as
/// slow for a user as one that is slow to answer). Returns the metric with the worst
/// value/threshold ratio, over or not; `None` when neither metric has both a value and a P95.
pub fn worst_excess(ttfb_ms: Option<f64>, ttft_ms: Option<f64>, p95: LatencyP95, factor: f64) -> Option<Excess> {
    let mut worst: Option<Excess> = None;
    for (metric, value, base) in [(Metric::Ttfb, ttfb_ms, p95.ttfb), (Metric::Ttft, ttft_ms, p95.ttft)] {
        let (Some(value), Some(base)) = (value, base) else { continue };
        let e = Excess { metric, value, threshold: failover_threshold(base, factor) };
        let ratio = |e: &Excess| e.value / e.threshold.max(f64::MIN_POSITIVE);
        if worst.as_ref().is_none_or(|w| ratio(&e) > ratio(w)) {
            worst = Some(e);
        }
    }
    worst
}

/// Whether a probe is over its threshold in the sense of [`worst_excess`].
pub fn exceeds_failover(ttfb_ms: Option<f64>, ttft_ms: Option<f64>, p95: LatencyP95, factor: f64) -> bool {
    worst_excess(ttfb_ms, ttft_ms, p95, factor).is_some_and(|e| e.exceeded())
}
