//! The published view of this region: what the monitor builds after each change and every
//! reader (HTTP, status page, metrics) shares without touching the decision stages.

use crate::decide::baseline::Baseline;
use crate::decide::breaker::Explanation;
use crate::decide::export::Thresholds;
use crate::vocab::sample::Sample;
use crate::vocab::target::{Name, Target, TargetKey};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

/// A target's three baselines as `/v1/targets` shows them: an object keyed `tokens_per_s`,
/// `ttfb`, `ttft` (the fields are in that order so the JSON reads as the map it replaced did).
/// Three fields, not a map: a map's node was about 800 bytes a target, 8 MB at 10,000.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct ViewBaselines {
    /// Tokens per second.
    pub tokens_per_s: Baseline,
    /// Time to first byte, ms.
    pub ttfb: Baseline,
    /// Time to first token, ms.
    pub ttft: Baseline,
}

/// One target as `GET /v1/targets` explains it.
#[derive(Debug, Clone, Serialize)]
pub struct TargetView {
    /// Which target: id, provider, model and route, spelled as every output spells them.
    #[serde(flatten)]
    pub key: TargetKey,
    /// Region.
    pub region: Name,
    /// The most recent sample (shared with the monitor, which keeps it between publishes).
    #[serde(serialize_with = "shared_sample")]
    pub last_sample: Option<Arc<Sample>>,
    /// TTFB, TTFT and tokens/s baselines over the window.
    pub baselines: ViewBaselines,
    /// Probes and failed probes in the window.
    pub probes: i64,
    /// Failed probes in the window.
    pub errors: i64,
    /// Breaker state, why, since when, and when the next half-open probe is due.
    pub breaker: Explanation,
    /// Its health: the one judgement every reader shows (`decide::health`).
    pub health: crate::vocab::health::Health,
    /// Its state changes too often: changes are not paged, routers demote it (= `health.flapping`).
    pub flapping: bool,
    /// Its latest rate-limit headroom and whether it is low (null when its provider never sent
    /// rate-limit headers).
    #[serde(serialize_with = "crate::decide::ratelimit::shared_view::serialize")]
    pub ratelimit: Option<Arc<crate::decide::ratelimit::HeadroomView>>,
    /// Its long-prompt probes' TTFT and deadline per size (`[[probe.workload]]`), smallest first.
    pub workloads: Vec<crate::decide::workload::WorkloadDeadline>,
}

/// Serializes a shared sample as the sample itself.
fn shared_sample<S: serde::Serializer>(sample: &Option<Arc<Sample>>, s: S) -> Result<S::Ok, S::Error> {
    sample.as_deref().serialize(s)
}

/// What readers see; replaced as a whole on each publish.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// The router export (shared: a request serves it without a copy).
    pub thresholds: Option<Arc<Thresholds>>,
    /// Every target, explained (shared with the monitor, which rebuilds only the changed ones).
    pub targets: Vec<Arc<TargetView>>,
    /// The latest sample of each target in the other regions sharing the store (status page).
    pub elsewhere: Arc<Vec<Sample>>,
    /// The other regions' published view of each target (`target_status`): their health as they
    /// judged it, which the status page shows in their columns.
    pub elsewhere_health: Arc<Vec<crate::vocab::records::TargetStatus>>,
    /// The latest credit reading of each watched provider, by provider (status page), as the
    /// pipeline last read them from shared storage: readers never query the store for them.
    pub credits: Arc<BTreeMap<String, crate::vocab::records::BalanceReading>>,
    /// Targets flapping now (from the alert stage).
    pub flapping: crate::decide::alert::FlappingSet,
    /// The adaptive probe plan, when probing is cost-aware.
    pub probe_plan: Option<Arc<crate::decide::adaptive::ProbePlan>>,
    /// Drills active at the publish (status page).
    pub drills: Arc<Vec<crate::vocab::drill::Drill>>,
}

impl Snapshot {
    /// True when `target` is flapping (alert changes are not paged).
    pub fn is_flapping(&self, target: &Target) -> bool {
        self.flapping.is_flapping(target)
    }
}

/// Shared handle to the latest snapshot.
pub type SharedSnapshot = Arc<RwLock<Snapshot>>;
