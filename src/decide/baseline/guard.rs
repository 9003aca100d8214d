//! The baseline guard: what a target measures while it is in trouble is held out of the baseline
//! that judges it, so an outage or a slowdown never teaches the baseline that it is normal (and a
//! half-open trial is judged against the level from before the trouble). A shift that lasts
//! `baseline.adopt_after` is adopted, once, with the levels before and after; `vigil baselines
//! adopt TARGET` adopts at once.

use super::codec::{index_for, quantiles, sparse_insert, sparse_total, to_recorded, Sparse, BASELINE, SCALE};
use super::Metric;
use crate::vocab::sample::{Outcome, Sample};
use crate::vocab::target::Target;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Held samples are counted so that, once adopted, they are this share (in percent) of the
/// window's values: three quarters puts both the P50 and the P95 on the new level (a P95 moves
/// once a twentieth of the values are new, a P50 only past half).
pub const ADOPTED_SHARE_PERCENT: u32 = 75;
const ADOPTED_SHARE: f64 = ADOPTED_SHARE_PERCENT as f64 / 100.0;

/// What a target measured while in trouble, kept beside (not in) its baseline.
#[derive(Debug, Clone)]
pub(super) struct Shift {
    /// The first held sample's start.
    pub(super) since: DateTime<Utc>,
    /// Held values per metric (`Metric::slot` order), bucketed as the baselines bucket them.
    pub(super) held: [Sparse; 3],
    /// Held samples, failed ones included.
    pub(super) samples: u64,
}

impl Shift {
    pub(super) fn new(since: DateTime<Utc>) -> Self {
        Shift { since, held: Default::default(), samples: 0 }
    }

    /// Holds one sample's values (ok samples only, as the baselines take them).
    pub(super) fn hold(&mut self, sample: &Sample, weight: u32) {
        self.samples += 1;
        if sample.outcome != Outcome::Ok || weight == 0 {
            return;
        }
        for metric in Metric::ALL {
            if let Some(index) = metric.value(sample).and_then(to_recorded).map(index_for) {
                sparse_insert(&mut self.held[metric.slot()], index, weight);
            }
        }
    }

    /// Held values of a metric.
    pub(super) fn count(&self, metric: Metric) -> u64 {
        sparse_total(&self.held[metric.slot()])
    }

    /// P50 and P95 of the held values of a metric.
    pub(super) fn level(&self, metric: Metric) -> Level {
        let h = &self.held[metric.slot()];
        let total = sparse_total(h);
        if total == 0 {
            return Level::default();
        }
        // At the grain the baseline it is compared with is published at.
        let [p50, p95, _] =
            quantiles(BASELINE, std::iter::empty(), &BASELINE.coarsen(h.iter().copied()), total, [0.5, 0.95, 0.99]);
        Level { p50: Some(p50 as f64 / SCALE), p95: Some(p95 as f64 / SCALE) }
    }
}

/// A latency level: P50 and P95 in ms (`None` while unknown).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Level {
    /// Median, ms.
    pub p50: Option<f64>,
    /// 95th percentile, ms.
    pub p95: Option<f64>,
}

impl Level {
    fn describe(&self) -> String {
        let ms = |v: Option<f64>| v.map_or("–".to_string(), |v| format!("{v:.0} ms"));
        format!("p50 {} p95 {}", ms(self.p50), ms(self.p95))
    }
}

/// A held level taken into a target's baseline (the `baseline_shift` notice).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Adoption {
    /// The target.
    pub target: Target,
    /// Start of the shift (the first held sample).
    pub since: DateTime<Utc>,
    /// When it was adopted.
    pub at: DateTime<Utc>,
    /// The metric the levels describe: TTFT, or TTFB for targets without tokens.
    pub metric: Metric,
    /// The baseline's level before.
    pub before: Level,
    /// The held samples' level, now the baseline's.
    pub after: Level,
    /// Held ok samples taken in.
    pub samples: u64,
    /// How many times each counts (so they are [`ADOPTED_SHARE_PERCENT`] % of the window).
    pub weight: u32,
    /// Adopted on request (`vigil baselines adopt`) rather than after `baseline.adopt_after`.
    pub by_request: bool,
}

impl Adoption {
    /// One line for humans: `ttft p50 180 ms p95 240 ms → p50 540 ms p95 720 ms (held since …)`.
    pub fn describe(&self) -> String {
        let how = if self.by_request { "adopted on request" } else { "adopted after baseline.adopt_after" };
        format!(
            "baseline of {} moved: {} {} → {} ({} samples held since {}; {how})",
            self.target.id(),
            self.metric.label(),
            self.before.describe(),
            self.after.describe(),
            self.samples,
            self.since.format("%Y-%m-%d %H:%M:%S UTC"),
        )
    }
}

/// The weight that makes `held` values [`ADOPTED_SHARE_PERCENT`] % of a window already holding `window`.
pub(super) fn adopted_weight(window: u64, held: u64) -> u32 {
    if held == 0 {
        return 1;
    }
    let wanted = window as f64 * ADOPTED_SHARE / (1.0 - ADOPTED_SHARE);
    (wanted / held as f64).ceil().clamp(1.0, f64::from(u32::MAX)) as u32
}

/// Scales every count of a sparse histogram by `weight` (saturating).
pub(super) fn weighted(h: &Sparse, weight: u32) -> Sparse {
    h.iter().map(|&(i, c)| (i, c.saturating_mul(weight))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adopted_values_become_three_quarters_of_the_window() {
        assert_eq!(adopted_weight(0, 10), 1, "an empty window takes the held values as they are");
        assert_eq!(adopted_weight(100, 300), 1, "already three quarters");
        assert_eq!(adopted_weight(1000, 100), 30);
        let w = u64::from(adopted_weight(10_080, 77));
        assert!(w * 77 >= 3 * 10_080 && (w - 1) * 77 < 3 * 10_080, "the smallest weight that reaches the share");
        assert_eq!(adopted_weight(5, 0), 1);
    }

    #[test]
    fn weighting_scales_counts_and_saturates() {
        assert_eq!(weighted(&vec![(1, 2), (5, u32::MAX)], 3), vec![(1, 6), (5, u32::MAX)]);
    }
}
