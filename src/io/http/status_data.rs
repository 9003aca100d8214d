//! What the status page shows, gathered (by `status_page`) and drawn (by `status_html`): one
//! row per target, one cell per region, the credit lines.

use super::trend::TrendSeries;
use crate::decide::baseline::Baseline;
use crate::decide::breaker::Explanation;
use crate::vocab::health::Health;
use crate::vocab::sample::{Outcome, Sample};
use crate::vocab::target::Name;
use chrono::{DateTime, Utc};
use std::sync::Arc;

/// Everything the page shows.
#[derive(Debug, Clone, Default)]
pub struct StatusData {
    /// This instance's region.
    pub region: String,
    /// Column order: this region first, then the others sharing the store.
    pub regions: Vec<String>,
    /// One row per target (provider, model, route).
    pub rows: Vec<StatusRow>,
    /// Watched credit balances.
    pub credits: Vec<Credit>,
    /// `baseline.failover_factor`, as the published export states it: the legend's "degraded =
    /// … over N× the P95" (the judgement itself is the monitor's; see `decide::health`).
    pub failover_factor: Option<f64>,
    /// Samples a P95 needs before it is published.
    pub min_samples: u64,
    /// Seconds between automatic reloads.
    pub refresh_s: u64,
    /// Hours the trend covers.
    pub trend_hours: i64,
    /// What the providers' own status pages say (section shown when any is polled).
    pub providers: Vec<crate::vocab::provider_status::ProviderStatus>,
    /// The adaptive probe plan's budget line, when probing is cost-aware.
    pub probe_plan: Option<Arc<crate::decide::adaptive::ProbePlan>>,
    /// The latest canary run of each target (section shown when the canary has run).
    pub canary: Vec<crate::vocab::canary::CanaryRun>,
    /// The latest run of each golden check (section shown when any has run).
    pub checks: Vec<crate::vocab::check::CheckRun>,
    /// Drills running now, every region's (section shown while any runs).
    pub drills: Vec<crate::vocab::drill::Drill>,
    /// Each target's long-prompt probe sizes, as (target id, size) in target then size order
    /// (section shown when any has run).
    pub workloads: Vec<(String, crate::decide::workload::WorkloadDeadline)>,
}

/// One target across the regions.
#[derive(Debug, Clone, Default)]
pub struct StatusRow {
    /// Provider name.
    pub provider: Name,
    /// Model (empty for plain HTTP targets).
    pub model: Name,
    /// Pinned upstream route.
    pub route: Option<Name>,
    /// One per entry of [`StatusData::regions`]; `None` where that region does not probe it.
    pub cells: Vec<Option<Cell>>,
    /// Hourly TTFT P50 in this region, oldest first.
    pub trend: TrendSeries,
}

/// One target in one region.
#[derive(Debug, Clone, Default)]
pub struct Cell {
    /// The latest probe, if any yet.
    pub last: Option<ShownProbe>,
    /// TTFB baseline (known for this region only).
    pub ttfb: Option<Baseline>,
    /// TTFT baseline (known for this region only).
    pub ttft: Option<Baseline>,
    /// Breaker (known for this region only).
    pub breaker: Option<Explanation>,
    /// Its health as that region judged it (the one judgement; `waiting` where none is known).
    pub health: Health,
    /// Its interval in the adaptive plan (known for this region only).
    pub probe: Option<crate::decide::adaptive::TargetPlan>,
    /// Its latest rate-limit headroom (known for this region only; none when never sent).
    pub ratelimit: Option<std::sync::Arc<crate::decide::ratelimit::HeadroomView>>,
}

/// What the page shows of a sample.
#[derive(Debug, Clone)]
pub struct ShownProbe {
    /// When it started.
    pub at: DateTime<Utc>,
    /// How it ended.
    pub outcome: Outcome,
    /// HTTP status.
    pub status: Option<u16>,
    /// Time to first byte.
    pub ttfb_ms: Option<f64>,
    /// Time to first token.
    pub ttft_ms: Option<f64>,
    /// The failure's detail.
    pub error: Option<String>,
}

/// One provider's credit.
#[derive(Debug, Clone)]
pub struct Credit {
    /// Provider name.
    pub provider: String,
    /// `balance.min_usd`.
    pub min_usd: f64,
    /// The latest reading (when, USD left).
    pub reading: Option<(DateTime<Utc>, f64)>,
}

impl From<&Sample> for ShownProbe {
    fn from(s: &Sample) -> Self {
        ShownProbe {
            at: s.started_at,
            outcome: s.outcome,
            status: s.status,
            ttfb_ms: s.ttfb_ms,
            ttft_ms: s.ttft_ms,
            error: s.error.clone(),
        }
    }
}
