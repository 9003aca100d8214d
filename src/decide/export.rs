//! The router export (`GET /v1/thresholds`, `vigil thresholds`): thresholds and failover rank per
//! target, and per `[[chain]]` the order to use now.
//!
//! A pure function of its inputs: baselines, error counts, breaker states, the last probe and probe
//! costs go in, the document comes out. `rank` orders the targets serving the same model in this
//! region, best first: closed before half_open before open, then targets whose replies pass every
//! capability check before those failing one (`Health::failing`: they ignore the system prompt),
//! then lower error rate, then lower P95 TTFT (unknown last), then lower cost (unknown last). A
//! chain keeps its configured order for targets whose health (`decide::health`, judged by the
//! monitor) is clean, moves the others (waiting, half_open, flapping, last probe failed or over
//! its failover deadline, replies failing a capability) behind them, and drops open ones, each
//! with the health's reason; nothing here judges health again. A target under an active drill
//! (`ExportParams::drills`, `vigil drill`) is dropped from that chain whatever its health, with
//! the reason `drill (until …)`.
//!
//! The published failover deadlines (provisional ones with the confidence reached) are the
//! health rule's own ([`Failover::deadline`]).

use crate::config::chain::{ChainConfig, ChainMember, SkippedMember};
use crate::decide::baseline::Baseline;
use crate::decide::credit::CreditOutlook;
use crate::decide::health::{Failover, P95Bound};
use crate::decide::ratelimit::HeadroomView;
use crate::decide::router_formats::provider::RouterProviders;
use crate::decide::workload::WorkloadDeadline;
use crate::vocab::breaker::State;
use crate::vocab::drill::Drill;
use crate::vocab::health::Health;
use crate::vocab::target::{Name, Target, TargetKey};
use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize, Serializer};
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Schema version of the document (2: chains, breaker parameters, provisional deadlines, `half_open`).
pub const SCHEMA_VERSION: u32 = 2;
/// The document expires after this many probe intervals.
pub const EXPIRES_AFTER_INTERVALS: u32 = 3;

/// The breaker rules, as a router needs them to act like vigil's own breaker.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BreakerParams {
    /// Failed requests in a row that open it…
    pub consecutive_failures: u32,
    /// …when the first and last lie within this many seconds.
    pub failure_window_s: u64,
    /// Requests in a row over the failover deadline that open it.
    pub latency_trips: u32,
    /// Seconds open before one trial request (half_open).
    pub open_for_s: u64,
    /// Failover deadline = factor × P95.
    pub failover_factor: f64,
    /// It opens when `failure_k` of the last `failure_n` requests failed (k = n: in a row, the
    /// window above applying).
    pub failure_k: u32,
    /// See `failure_k`.
    pub failure_n: u32,
    /// A 429 backs a target off (demotes it) for at least this many seconds, longer when its
    /// `Retry-After` says so.
    pub rate_limit_backoff_s: u64,
    /// 429s in a row before they count as failures (once the backoff is over).
    pub rate_limit_trips: u32,
}

/// Document-wide inputs.
#[derive(Debug, Clone)]
pub struct ExportParams {
    /// Region of this instance.
    pub region: String,
    /// When the document is generated.
    pub generated_at: DateTime<Utc>,
    /// Probe interval (`expires_at` = `generated_at` + 3 × interval).
    pub probe_interval: Duration,
    /// Baseline window.
    pub window: Duration,
    /// The failover rule: deadline = factor × P95 (or its provisional bound).
    pub failover: Failover,
    /// Breaker rules published for routers.
    pub breaker: BreakerParams,
    /// Configured failover chains.
    pub chains: Vec<ChainConfig>,
    /// How a router calls each configured provider (for the router-native formats).
    pub providers: RouterProviders,
    /// The probe's own wait for a first token (`probe.ttft_timeout`, capped by `probe.timeout`):
    /// what a chain entry without a published TTFT deadline counts for in the chain's worst case.
    pub ttft_timeout: Duration,
    /// The probe's whole-request limit (`probe.timeout`): what each chain entry counts for in the
    /// chain's worst case to a complete answer (vigil learns no whole-reply deadline per target).
    pub total_timeout: Duration,
    /// Per provider, the credit projection (providers not projected to run out are absent).
    pub credit: BTreeMap<String, CreditOutlook>,
    /// Stored drills; those active at `generated_at` drop their target from their chain.
    pub drills: Vec<Drill>,
    /// Each target's capabilities as its capability probes last judged them (target id →
    /// capability → passing); a chain's `requires` demotes a member whose entry says `false`.
    pub capabilities: BTreeMap<String, BTreeMap<crate::vocab::capability::Capability, bool>>,
}

/// Everything known about one target over the window.
#[derive(Debug, Clone)]
pub struct TargetStats {
    /// The target (its region is reported).
    pub target: Target,
    /// TTFB baseline.
    pub ttfb: Baseline,
    /// TTFT baseline.
    pub ttft: Baseline,
    /// Tokens/s baseline.
    pub tokens_per_s: Baseline,
    /// Probes in the window, every outcome.
    pub probes: u64,
    /// Failed probes in the window.
    pub errors: u64,
    /// Breaker state now.
    pub breaker: State,
    /// When an open breaker will let one probe through.
    pub next_half_open: Option<DateTime<Utc>>,
    /// What one probe costs, when known.
    pub cost_per_probe_usd: Option<f64>,
    /// Upper bound on the TTFB P95 while the P95 is not yet published.
    pub ttfb_p95_bound: Option<P95Bound>,
    /// Upper bound on the TTFT P95 while the P95 is not yet published.
    pub ttft_p95_bound: Option<P95Bound>,
    /// Its health, as the monitor judged it (chains demote what is not clean).
    pub health: Health,
    /// Its price, when known (configured, published or built in; `decide::price_table`).
    pub price: Option<EntryPrice>,
    /// Its latest rate-limit headroom, judged against `ratelimit.low_fraction` (none when its
    /// provider never sent rate-limit headers).
    pub ratelimit: Option<Arc<HeadroomView>>,
    /// Its long-prompt probes' TTFT and deadline per size, smallest first (`[[probe.workload]]`).
    pub workloads: Vec<WorkloadDeadline>,
}

/// What a target costs, as its chain entries publish it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EntryPrice {
    /// USD per million input tokens.
    pub input_per_mtok: f64,
    /// USD per million output tokens.
    pub output_per_mtok: f64,
    /// Where it came from: `config`, `published` (OpenRouter's endpoints) or `built-in`.
    pub source: String,
}

impl EntryPrice {
    /// The price as the chain-head records keep it.
    pub fn per_mtok(&self) -> crate::vocab::chain_head::PerMtok {
        crate::vocab::chain_head::PerMtok { input: self.input_per_mtok, output: self.output_per_mtok }
    }
}

/// P50/P95/P99 in the document.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    /// Median.
    pub p50: Option<f64>,
    /// 95th percentile.
    pub p95: Option<f64>,
    /// 99th percentile.
    pub p99: Option<f64>,
}

/// Median only (tokens/s).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Median {
    /// Median.
    pub p50: Option<f64>,
}

/// What a provisional deadline rests on.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ProvisionalBasis {
    /// Samples behind the bounds (the fewer of TTFB's and TTFT's).
    pub samples: u64,
    /// Probability the true P95 is at or below the bound (the lower of the two).
    pub confidence: f64,
    /// Upper bound on the TTFB P95 used for `failover_ttfb_ms` (when provisional).
    pub ttfb_p95_upper_ms: Option<f64>,
    /// Upper bound on the TTFT P95 used for `failover_ttft_ms` (when provisional).
    pub ttft_p95_upper_ms: Option<f64>,
}

/// One target in the document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TargetThresholds {
    /// Which target: `target`, `provider`, `model`, `route`.
    #[serde(flatten)]
    pub key: TargetKey,
    /// Region measured from.
    pub region: Name,
    /// The API its probes call: `chat`, `embeddings` (TTFT is the whole answer) or `responses`.
    pub endpoint: crate::config::Endpoint,
    /// Probes in the window (every outcome).
    pub samples: u64,
    /// TTFB percentiles, ms.
    pub ttfb_ms: Percentiles,
    /// TTFT percentiles, ms.
    pub ttft_ms: Percentiles,
    /// Generation speed.
    pub tokens_per_s: Median,
    /// Failed probes / probes over the window (null with no probes).
    pub error_rate: Option<f64>,
    /// factor × TTFB P95 (or its provisional bound); null below the minimum sample count.
    pub failover_ttfb_ms: Option<f64>,
    /// factor × TTFT P95 (or its provisional bound); null below the minimum sample count.
    pub failover_ttft_ms: Option<f64>,
    /// Whether a deadline rests on a provisional P95 bound.
    pub provisional: bool,
    /// The bounds behind provisional deadlines (null when none is provisional).
    pub provisional_basis: Option<Box<ProvisionalBasis>>,
    /// Breaker state.
    pub breaker: State,
    /// Alternating good and failed probes.
    pub flapping: bool,
    /// Failover order among targets serving the same model here, 1 = best.
    pub rank: u32,
    /// Seconds left of a 429's backoff (max of `breaker.rate_limit_backoff` and its
    /// `Retry-After`), null when none runs.
    pub retry_after_s: Option<u64>,
    /// The outcome class of the last probe when it failed (`rate_limited`, `server_error`,
    /// `timeout`, …), null otherwise.
    pub last_failure_class: Option<String>,
    /// The provider's rate-limit headroom as the latest probe read it (null when it sends none).
    #[serde(default, with = "crate::decide::ratelimit::shared_view")]
    pub ratelimit: Option<Arc<HeadroomView>>,
    /// Per long-prompt probe size (`[[probe.workload]]`), smallest first: its TTFT percentiles and
    /// its own failover deadline, so a router picks the size nearest its traffic (empty without
    /// workloads).
    #[serde(default)]
    pub workloads: Vec<WorkloadDeadline>,
    /// When an open breaker lets one probe through (for LiteLLM's cooldown; not in the document).
    #[serde(skip)]
    pub next_half_open: Option<DateTime<Utc>>,
}

/// Where a target stands in a chain now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChainStatus {
    /// In configured order.
    Healthy,
    /// Usable, but behind every healthy target.
    Demoted,
    /// Breaker open: skip it.
    Dropped,
}

/// One target of a chain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChainEntry {
    /// Which target: `target`, `provider`, `model`, `route` (the chain's region is on [`ChainOrder`]).
    #[serde(flatten)]
    pub key: TargetKey,
    /// 1-based place in the configured order (routes of one member follow their `rank`).
    pub position: u32,
    /// healthy, demoted or dropped.
    pub status: ChainStatus,
    /// Breaker state.
    pub breaker: State,
    /// Alternating good and failed probes.
    pub flapping: bool,
    /// Why it is demoted or dropped (null when healthy).
    pub reason: Option<String>,
    /// Abandon the request without a first byte by then.
    pub failover_ttfb_ms: Option<f64>,
    /// Abandon the request without a first token by then.
    pub failover_ttft_ms: Option<f64>,
    /// Whether a deadline is provisional.
    pub provisional: bool,
    /// Seconds left of a 429's backoff, null when none runs.
    pub retry_after_s: Option<u64>,
    /// The outcome class of the last probe when it failed, null otherwise.
    pub last_failure_class: Option<String>,
    /// What it costs per million tokens, null when not known.
    pub price: Option<EntryPrice>,
    /// The provider's rate-limit headroom as the latest probe read it (null when it sends none).
    #[serde(default, with = "crate::decide::ratelimit::shared_view")]
    pub ratelimit: Option<Arc<HeadroomView>>,
}

/// One chain: the order to use now in this region.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChainOrder {
    /// Chain name.
    pub name: String,
    /// Region this order is for.
    pub region: String,
    /// Healthy targets in configured order, then demoted ones: try them in this order.
    pub order: Vec<ChainEntry>,
    /// Targets whose breaker is open: skip them.
    pub dropped: Vec<ChainEntry>,
    /// Configured members with nothing to publish here (provider without key, no data yet).
    pub skipped: Vec<SkippedMember>,
    /// Where the configured order came from: `config` or `env:VAR` (`targets_env`).
    pub order_from: String,
    /// The chain's worst-case times to a first token and to a complete answer, and its SLOs.
    pub slo: ChainSlo,
}

/// A chain's latency budget: the worst case when every member of `order` fails over in turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChainSlo {
    /// `ttft_slo` in ms (null when the chain has none).
    pub ttft_ms: Option<f64>,
    /// Sum over `order` of each entry's `failover_ttft_ms`, or the probe's first-token wait where it has none.
    pub worst_case_ttft_ms: f64,
    /// Whether the worst case is within `ttft_ms` (null without an SLO; false with nothing in order).
    pub meets: Option<bool>,
    /// The first entry of `order` at which the running sum passes `ttft_ms` (null when it meets).
    pub breaking_member: Option<String>,
    /// `total_slo` in ms (null when the chain has none).
    pub total_ms: Option<f64>,
    /// Sum over `order` of the whole-request limit (`probe.timeout`) each entry may take.
    pub worst_case_total_ms: f64,
    /// Whether the worst case to a complete answer is within `total_ms` (null without a
    /// `total_slo`; false with nothing in order).
    pub total_meets: Option<bool>,
    /// The first entry of `order` at which the running sum passes `total_ms` (null when it meets).
    pub total_breaking_member: Option<String>,
}

/// The thresholds document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Thresholds {
    /// 2 for this shape.
    pub schema_version: u32,
    /// When generated.
    #[serde(serialize_with = "rfc3339_secs")]
    pub generated_at: DateTime<Utc>,
    /// When a router should stop trusting it.
    #[serde(serialize_with = "rfc3339_secs")]
    pub expires_at: DateTime<Utc>,
    /// Region of this instance.
    pub region: String,
    /// Baseline window, `7d` style.
    pub window: String,
    /// Router threshold = factor × P95.
    pub failover_factor: f64,
    /// Probe interval in seconds (how often the document can change).
    pub probe_interval_s: u64,
    /// The breaker rules.
    pub breaker: BreakerParams,
    /// Targets, by model then rank.
    pub targets: Vec<TargetThresholds>,
    /// Failover chains, in configured order.
    pub chains: Vec<ChainOrder>,
    /// How a router calls each configured provider (the router-native formats; not in the document).
    #[serde(skip)]
    pub providers: RouterProviders,
}

fn rfc3339_secs<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&t.to_rfc3339_opts(SecondsFormat::Secs, true))
}

/// A duration as the config writes it: `7d`, `12h`, `30m` or `45s`.
pub fn format_window(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0 => "0s".into(),
        _ if s.is_multiple_of(86_400) => format!("{}d", s / 86_400),
        _ if s.is_multiple_of(3_600) => format!("{}h", s / 3_600),
        _ if s.is_multiple_of(60) => format!("{}m", s / 60),
        _ => format!("{s}s"),
    }
}

fn error_rate(t: &TargetStats) -> Option<f64> {
    (t.probes > 0).then(|| t.errors.min(t.probes) as f64 / t.probes as f64)
}

/// Ascending with `None` last.
fn cmp_known_first(a: Option<f64>, b: Option<f64>) -> Ordering {
    match (a, b) {
        (Some(x), Some(y)) => x.total_cmp(&y),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

/// Failover order of two targets serving the same model (less = better).
pub fn failover_order(a: &TargetStats, b: &TargetStats) -> Ordering {
    a.breaker
        .cmp(&b.breaker)
        // A target that answers, but not as asked, goes behind every one that answers as asked.
        .then_with(|| a.health.failing.is_empty().cmp(&b.health.failing.is_empty()).reverse())
        .then_with(|| cmp_known_first(error_rate(a), error_rate(b)))
        .then_with(|| cmp_known_first(a.ttft.p95, b.ttft.p95))
        .then_with(|| cmp_known_first(a.cost_per_probe_usd, b.cost_per_probe_usd))
        .then_with(|| a.target.cmp(&b.target))
}

/// The target and its published row, computed once per document.
struct Judged<'a> {
    stats: &'a TargetStats,
    row: TargetThresholds,
}

/// Each provider's endpoint by name, looked up once per target: a scan of the providers per
/// target was a third of the whole daemon's CPU at 10,000 targets.
type Endpoints<'p> = std::collections::HashMap<&'p str, crate::config::Endpoint>;

fn judge<'a>(params: &ExportParams, endpoints: &Endpoints<'_>, t: &'a TargetStats) -> Judged<'a> {
    let fb = params.failover.deadline(&t.ttfb, t.ttfb_p95_bound);
    let ft = params.failover.deadline(&t.ttft, t.ttft_p95_bound);
    let basis = (fb.bound.is_some() || ft.bound.is_some()).then(|| {
        let bounds = [fb.bound, ft.bound];
        let used = bounds.iter().flatten();
        Box::new(ProvisionalBasis {
            samples: used.clone().map(|b| b.samples).min().unwrap_or(0),
            confidence: used.map(|b| b.confidence).fold(1.0, f64::min),
            ttfb_p95_upper_ms: fb.bound.map(|b| b.value),
            ttft_p95_upper_ms: ft.bound.map(|b| b.value),
        })
    });
    let pct = |b: &Baseline| Percentiles { p50: b.p50, p95: b.p95, p99: b.p99 };
    let row = TargetThresholds {
        key: TargetKey::from(&t.target),
        region: t.target.region.clone(),
        endpoint: endpoints.get(t.target.provider.as_str()).copied().unwrap_or(crate::config::Endpoint::Chat),
        samples: t.probes,
        ttfb_ms: pct(&t.ttfb),
        ttft_ms: pct(&t.ttft),
        tokens_per_s: Median { p50: t.tokens_per_s.p50 },
        error_rate: error_rate(t),
        failover_ttfb_ms: fb.ms,
        failover_ttft_ms: ft.ms,
        provisional: basis.is_some(),
        provisional_basis: basis,
        breaker: t.breaker,
        flapping: t.health.flapping,
        rank: 0,
        retry_after_s: t.health.backoff_until.map(|u| {
            let ms = (u - params.generated_at).num_milliseconds().max(0) as u64;
            ms.div_ceil(1000).max(1)
        }),
        last_failure_class: t.health.last_failure_class.clone(),
        ratelimit: t.ratelimit.clone(),
        workloads: t.workloads.clone(),
        next_half_open: t.next_half_open,
    };
    Judged { stats: t, row }
}

fn entry(j: &Judged<'_>, position: u32, status: ChainStatus, reason: Option<String>) -> ChainEntry {
    ChainEntry {
        key: j.row.key.clone(),
        position,
        status,
        breaker: j.row.breaker,
        flapping: j.row.flapping,
        reason,
        failover_ttfb_ms: j.row.failover_ttfb_ms,
        failover_ttft_ms: j.row.failover_ttft_ms,
        provisional: j.row.provisional,
        retry_after_s: j.row.retry_after_s,
        last_failure_class: j.row.last_failure_class.clone(),
        price: j.stats.price.clone(),
        ratelimit: j.row.ratelimit.clone(),
    }
}

/// One target's place in a chain before health and credit sort it.
struct Slot<'j, 'a> {
    judged: &'j Judged<'a>,
    /// 1-based place in the configured order.
    position: u32,
    /// For a member demoted for credit, the id of the fallback standing in for it.
    stands_in: Option<String>,
    /// The member as the chain spells it (the fallback's spelling for a target standing in):
    /// what a drill names.
    member: String,
}

/// Where each configured target of a chain goes, before health and credit sort it: in
/// configured order, except that a member demoted for credit (its provider's projection within
/// `balance.demote_within`) with a `fallback_for_credit` gets the fallback's targets in its
/// place, ahead of it. Each slot carries its 1-based configured position (a fallback from outside
/// the chain takes the position of the member it stands in for) and, for a member whose fallback
/// stands in, the fallback's id.
fn slots<'j, 'a>(
    params: &ExportParams,
    chain: &ChainConfig,
    judged: &'j [Judged<'a>],
) -> (Vec<Slot<'j, 'a>>, Vec<SkippedMember>) {
    let mine = |m: &ChainMember| judged.iter().filter(|j| m.matches(&j.stats.target)).collect::<Vec<_>>();
    // Routes of one member follow their rank (judged is sorted by model, then rank).
    let mut position = 0u32;
    let mut positions: Vec<(&str, u32)> = Vec::new();
    let mut skipped = Vec::new();
    for m in &chain.members {
        let found = mine(m);
        if found.is_empty() {
            skipped.push(SkippedMember {
                target: m.spelled.clone(),
                reason: format!("not probed in region {}", params.region),
            });
        }
        for j in found {
            position += 1;
            positions.push((j.row.key.target.as_str(), position));
        }
    }
    let place = |id: &str| positions.iter().find(|(t, _)| *t == id).map(|(_, p)| *p);
    let mut out: Vec<Slot<'j, 'a>> = Vec::new();
    let placed = |out: &[Slot<'j, 'a>], id: &str| out.iter().any(|s| s.judged.row.key.target == id);
    for m in &chain.members {
        let found = mine(m);
        let first = found.first().and_then(|j| place(&j.row.key.target)).unwrap_or(0);
        let demoted = credit_reason(params, &m.provider).is_some();
        let fallback = chain.fallback_for_credit.iter().find(|f| f.member.spelled == m.spelled && demoted);
        let mut stands_in = None;
        if let Some(f) = fallback {
            for j in mine(&f.fallback) {
                if !placed(&out, &j.row.key.target) {
                    out.push(Slot {
                        judged: j,
                        position: place(&j.row.key.target).unwrap_or(first),
                        stands_in: None,
                        member: f.fallback.spelled.clone(),
                    });
                    stands_in = Some(f.fallback.spelled.clone());
                }
            }
        }
        for j in found {
            if !placed(&out, &j.row.key.target) {
                let position = place(&j.row.key.target).unwrap_or(first);
                out.push(Slot { judged: j, position, stands_in: stands_in.clone(), member: m.spelled.clone() });
            }
        }
    }
    (out, skipped)
}

/// `no tools, json (capability probe failed)` when `target` last failed a capability `chain`
/// requires; a capability not yet probed demotes nothing.
fn capability_reason(params: &ExportParams, chain: &ChainConfig, target: &str) -> Option<String> {
    let seen = params.capabilities.get(target)?;
    let missing: Vec<&str> =
        chain.requires.iter().filter(|c| seen.get(c) == Some(&false)).map(|c| c.as_str()).collect();
    (!missing.is_empty()).then(|| format!("no {} (capability probe failed)", missing.join(", ")))
}

/// `credit empty in 4 h` when `provider`'s credit projection demotes it now.
fn credit_reason(params: &ExportParams, provider: &str) -> Option<String> {
    params.credit.get(provider).and_then(|o| o.demotion(params.generated_at))
}

fn chain_order(params: &ExportParams, chain: &ChainConfig, judged: &[Judged<'_>]) -> ChainOrder {
    let mut healthy = Vec::new();
    let mut demoted = Vec::new();
    let mut dropped = Vec::new();
    let (slots, not_probed) = slots(params, chain, judged);
    let mut skipped = chain.skipped.clone();
    skipped.extend(not_probed);
    for Slot { judged: j, position, stands_in, member } in slots {
        let drilled = params
            .drills
            .iter()
            .find(|d| d.active_at(params.generated_at) && d.names(&chain.name, &member, &j.stats.target));
        if let Some(d) = drilled {
            dropped.push(entry(j, position, ChainStatus::Dropped, Some(d.reason())));
            continue;
        }
        if j.stats.breaker == State::Open {
            let mut reason = j.stats.health.reason.clone().unwrap_or_else(|| "breaker open".to_string());
            if let Some(at) = j.stats.next_half_open {
                reason.push_str(&format!(" (trial probe at {})", at.to_rfc3339_opts(SecondsFormat::Secs, true)));
            }
            dropped.push(entry(j, position, ChainStatus::Dropped, Some(reason)));
            continue;
        }
        let health = &j.stats.health;
        let credit = credit_reason(params, &j.stats.target.provider).map(|why| match stands_in {
            Some(f) => format!("{why}; {f} stands in"),
            None => why,
        });
        let lacking = capability_reason(params, chain, &j.stats.target.id());
        let reasons: Vec<String> =
            health.reason.iter().cloned().chain(credit.iter().cloned()).chain(lacking.iter().cloned()).collect();
        if health.is_clean() && credit.is_none() && lacking.is_none() {
            healthy.push(entry(j, position, ChainStatus::Healthy, None));
        } else {
            let reason = (!reasons.is_empty()).then(|| reasons.join("; "));
            demoted.push(entry(j, position, ChainStatus::Demoted, reason));
        }
    }
    healthy.extend(demoted);
    let slo = chain_slo(params, chain, &healthy);
    ChainOrder {
        name: chain.name.clone(),
        region: params.region.clone(),
        order: healthy,
        dropped,
        skipped,
        order_from: chain.order_from.clone(),
        slo,
    }
}

/// The worst cases of `order`: every entry fails over in turn, at its TTFT deadline (or at
/// `probe.ttft_timeout` where none is published) for the first token, at the whole-request limit
/// (`probe.timeout`) for a complete answer, summed in order, against `ttft_slo` and `total_slo`.
fn chain_slo(params: &ExportParams, chain: &ChainConfig, order: &[ChainEntry]) -> ChainSlo {
    let ttft_timeout_ms = params.ttft_timeout.as_secs_f64() * 1000.0;
    let total_timeout_ms = params.total_timeout.as_secs_f64() * 1000.0;
    let ttft = Budget::judge(chain.ttft_slo, order, |e| e.failover_ttft_ms.unwrap_or(ttft_timeout_ms));
    let total = Budget::judge(chain.total_slo, order, |_| total_timeout_ms);
    ChainSlo {
        ttft_ms: ttft.limit,
        worst_case_ttft_ms: ttft.sum,
        meets: ttft.meets,
        breaking_member: ttft.breaking,
        total_ms: total.limit,
        worst_case_total_ms: total.sum,
        total_meets: total.meets,
        total_breaking_member: total.breaking,
    }
}

/// One latency budget of a chain judged over its order.
struct Budget {
    /// The SLO in ms, when set.
    limit: Option<f64>,
    /// The worst case: every entry's cost summed in order.
    sum: f64,
    /// Whether the sum is within the limit (false with nothing to try).
    meets: Option<bool>,
    /// The first entry at which the running sum passes the limit.
    breaking: Option<String>,
}

impl Budget {
    /// Sums `cost` over `order` against `slo`.
    fn judge(slo: Option<Duration>, order: &[ChainEntry], cost: impl Fn(&ChainEntry) -> f64) -> Budget {
        let limit = slo.map(|d| d.as_secs_f64() * 1000.0);
        let mut sum = 0.0;
        let mut breaking = None;
        for e in order {
            sum += cost(e);
            if breaking.is_none() && limit.is_some_and(|l| sum > l) {
                breaking = Some(e.key.target.to_string());
            }
        }
        Budget { limit, sum, meets: limit.map(|l| !order.is_empty() && sum <= l), breaking }
    }
}

/// Builds the document from scratch; targets from other regions than `params.region` are left
/// out. The daemon keeps its last order ([`build_ordered`]).
#[cfg(test)]
pub fn build(params: &ExportParams, targets: &[TargetStats]) -> Thresholds {
    build_ordered(params, targets, &mut Vec::new())
}

/// Whether `order` holds each of `0..n` once.
fn is_permutation(order: &[usize], n: usize) -> bool {
    let mut seen = vec![false; n];
    order.len() == n && order.iter().all(|&i| i < n && !std::mem::replace(&mut seen[i], true))
}

/// [`build`], ranking from a hint: `order` holds the places in `targets` in the order the last
/// build over them ranked them (anything else is ignored) and is left holding this build's.
/// From one publish to the next a few of 10,000 targets move, and a sort handed the last order
/// checks it in one pass where one from scratch compared names a hundred thousand times (about
/// a quarter of each publish's CPU).
pub fn build_ordered(params: &ExportParams, targets: &[TargetStats], order: &mut Vec<usize>) -> Thresholds {
    if !is_permutation(order, targets.len()) {
        *order = (0..targets.len()).collect();
    }
    order.sort_by(|&a, &b| {
        let (a, b) = (&targets[a], &targets[b]);
        a.target.model.cmp(&b.target.model).then_with(|| failover_order(a, b))
    });
    let here: Vec<&TargetStats> =
        order.iter().map(|&i| &targets[i]).filter(|t| t.target.region == params.region).collect();
    let mut judged: Vec<Judged<'_>> = Vec::with_capacity(here.len());
    let endpoints: Endpoints<'_> = params.providers.iter().map(|p| (p.name.as_str(), p.endpoint)).collect();
    let mut rank = 0;
    for (i, t) in here.iter().enumerate() {
        rank = if i > 0 && here[i - 1].target.model == t.target.model { rank + 1 } else { 1 };
        let mut j = judge(params, &endpoints, t);
        j.row.rank = rank;
        judged.push(j);
    }
    let chains = params.chains.iter().map(|c| chain_order(params, c, &judged)).collect();
    let interval = chrono::Duration::from_std(params.probe_interval).unwrap_or(chrono::Duration::zero());
    Thresholds {
        schema_version: SCHEMA_VERSION,
        generated_at: params.generated_at,
        expires_at: params.generated_at + interval * EXPIRES_AFTER_INTERVALS as i32,
        region: params.region.clone(),
        window: format_window(params.window),
        failover_factor: params.failover.factor,
        probe_interval_s: params.probe_interval.as_secs().max(1),
        breaker: params.breaker,
        targets: judged.into_iter().map(|j| j.row).collect(),
        chains,
        providers: params.providers.clone(),
    }
}

/// `?model=`, `?provider=`, `?chain=` of `GET /v1/thresholds` and `vigil thresholds`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Filter {
    /// Only targets (and chain entries) of this model id.
    pub model: Option<String>,
    /// Only targets (and chain entries) of this provider.
    pub provider: Option<String>,
    /// Only this chain, and the targets it names.
    pub chain: Option<String>,
}

/// A filter naming a chain the document does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no chain named {0:?}")]
pub struct UnknownChain(pub String);

impl Thresholds {
    /// The document narrowed by `f` (chains left without entries are left out); only what is
    /// kept is copied, so a router asking for one model of 10,000 targets copies a few rows, not
    /// the document.
    pub fn filtered(&self, f: &Filter) -> Result<Thresholds, UnknownChain> {
        let mut chains: Vec<&ChainOrder> = self.chains.iter().collect();
        let mut members: Option<Vec<&str>> = None;
        if let Some(name) = &f.chain {
            chains.retain(|c| &c.name == name);
            let Some(c) = chains.first() else { return Err(UnknownChain(name.clone())) };
            members = Some(c.order.iter().chain(&c.dropped).map(|e| e.key.target.as_str()).collect());
        }
        let keep = |provider: &str, model: &str| {
            f.model.as_deref().is_none_or(|m| m == model) && f.provider.as_deref().is_none_or(|p| p == provider)
        };
        let targets = self
            .targets
            .iter()
            .filter(|t| members.as_ref().is_none_or(|m| m.contains(&t.key.target.as_str())))
            .filter(|t| keep(&t.key.provider, &t.key.model))
            .cloned()
            .collect();
        let mut chains: Vec<ChainOrder> = chains.into_iter().cloned().collect();
        if f.model.is_some() || f.provider.is_some() {
            for c in &mut chains {
                c.order.retain(|e| keep(&e.key.provider, &e.key.model));
                c.dropped.retain(|e| keep(&e.key.provider, &e.key.model));
            }
            chains.retain(|c| !c.order.is_empty() || !c.dropped.is_empty());
        }
        Ok(Thresholds { targets, chains, providers: self.providers.clone(), ..self.head() })
    }

    /// Whether `other` says the same as this document, its timestamps aside (compared in place:
    /// a copy to compare was 3.6 MB at 10,000 targets).
    pub fn same_apart_from_time(&self, other: &Thresholds) -> bool {
        Thresholds { generated_at: other.generated_at, expires_at: other.expires_at, ..self.head() } == other.head()
            && self.targets == other.targets
            && self.chains == other.chains
            && self.providers == other.providers
    }

    /// The document without its targets, chains and providers.
    fn head(&self) -> Thresholds {
        Thresholds {
            schema_version: self.schema_version,
            generated_at: self.generated_at,
            expires_at: self.expires_at,
            region: self.region.clone(),
            window: self.window.clone(),
            failover_factor: self.failover_factor,
            probe_interval_s: self.probe_interval_s,
            breaker: self.breaker,
            targets: Vec::new(),
            chains: Vec::new(),
            providers: RouterProviders::default(),
        }
    }

    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// YAML that YAML 1.1 loaders read back as the JSON document (timestamps quoted).
    pub fn to_yaml(&self) -> Result<String, serde_json::Error> {
        Ok(crate::decide::router_formats::yaml::to_string(&serde_json::to_value(self)?))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::config::chain::ChainMember;
    use crate::decide::health::{p95_upper_bound, BreakerView, ProbeVerdict};
    use chrono::TimeZone;
    use serde_json::Value;

    const SPEC_EXAMPLE: &str = r#"{
      "schema_version": 2,
      "generated_at": "2026-11-30T12:00:00Z",
      "expires_at": "2026-11-30T12:03:00Z",
      "region": "eu-west-1",
      "window": "7d",
      "failover_factor": 2.0,
      "probe_interval_s": 60,
      "breaker": {"consecutive_failures": 2, "failure_window_s": 120, "latency_trips": 2, "open_for_s": 300, "failover_factor": 2.0,
                  "failure_k": 2, "failure_n": 2, "rate_limit_backoff_s": 120, "rate_limit_trips": 3},
      "targets": [
        {
          "target": "openrouter/meta-llama/llama-3-70b-instruct@DeepInfra",
          "provider": "openrouter", "model": "meta-llama/llama-3-70b-instruct", "route": "DeepInfra",
          "region": "eu-west-1",
          "endpoint": "chat",
          "samples": 10080,
          "ttfb_ms": {"p50": 180.0, "p95": 310.0, "p99": 520.0},
          "ttft_ms": {"p50": 240.0, "p95": 400.0, "p99": 800.0},
          "tokens_per_s": {"p50": 65.0},
          "error_rate": 0.0004,
          "failover_ttfb_ms": 620.0,
          "failover_ttft_ms": 800.0,
          "provisional": false,
          "provisional_basis": null,
          "breaker": "closed",
          "flapping": false,
          "rank": 1,
          "retry_after_s": null,
          "last_failure_class": null,
          "ratelimit": null,
          "workloads": []
        }
      ],
      "chains": []
    }"#;

    const LLAMA: &str = "meta-llama/llama-3-70b-instruct";

    /// The parameters the export and router-format tests share (eu-west-1, 60 s, 7 days, factor 2).
    pub(crate) fn params() -> ExportParams {
        ExportParams {
            region: "eu-west-1".into(),
            generated_at: Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).single().expect("valid time"),
            probe_interval: Duration::from_secs(60),
            window: Duration::from_secs(7 * 86_400),
            failover: Failover { factor: 2.0, provisional_min_samples: 30 },
            breaker: BreakerParams {
                consecutive_failures: 2,
                failure_window_s: 120,
                latency_trips: 2,
                open_for_s: 300,
                failover_factor: 2.0,
                failure_k: 2,
                failure_n: 2,
                rate_limit_backoff_s: 120,
                rate_limit_trips: 3,
            },
            chains: vec![],
            providers: Default::default(),
            ttft_timeout: Duration::from_secs(10),
            total_timeout: Duration::from_secs(15),
            credit: BTreeMap::new(),
            drills: vec![],
            capabilities: BTreeMap::new(),
        }
    }

    fn baseline(count: u64, p50: f64, p95: f64, p99: f64) -> Baseline {
        Baseline { count, p50: Some(p50), p95: Some(p95), p99: Some(p99) }
    }

    fn target(provider: &str, model: &str, route: Option<&str>) -> Target {
        Target::new(provider.into(), model.into(), route.map(Into::into), "eu-west-1".into())
    }

    fn stats(route: &str, model: &str) -> TargetStats {
        TargetStats {
            target: target("openrouter", model, Some(route)),
            ttfb: baseline(10_000, 180.0, 310.0, 520.0),
            ttft: baseline(10_000, 240.0, 400.0, 800.0),
            tokens_per_s: baseline(10_000, 65.0, 80.0, 90.0),
            probes: 10_000,
            errors: 4,
            breaker: State::Closed,
            next_half_open: None,
            cost_per_probe_usd: Some(0.00002),
            ttfb_p95_bound: None,
            ttft_p95_bound: None,
            health: health(State::Closed, None, Some(ProbeVerdict::Within), false),
            price: None,
            ratelimit: None,
            workloads: Vec::new(),
        }
    }

    /// Health as the monitor judges it, through the one rule.
    fn health(state: State, reason: Option<&str>, last: Option<ProbeVerdict>, flapping: bool) -> Health {
        crate::decide::health::judge(BreakerView { state, reason }, last.as_ref(), &[], flapping, None, Utc::now())
    }

    fn keys(v: &Value) -> Value {
        match v {
            Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), keys(v))).collect()),
            Value::Array(a) => Value::Array(a.iter().map(keys).collect()),
            _ => Value::Null,
        }
    }

    fn ranks(doc: &Thresholds) -> Vec<(String, u32)> {
        doc.targets.iter().map(|t| (t.key.route.as_deref().unwrap_or_default().to_string(), t.rank)).collect()
    }

    #[test]
    fn the_document_has_the_documented_shape_and_values() {
        let doc = build(&params(), &[stats("DeepInfra", LLAMA)]);
        let got: Value = serde_json::from_str(&doc.to_json()).expect("valid JSON");
        let mut want: Value = serde_json::from_str(SPEC_EXAMPLE).expect("example parses");
        assert_eq!(keys(&got), keys(&want), "same field names, nesting and order-free structure");
        want["targets"][0]["samples"] = Value::from(10_000);
        assert_eq!(got, want);
        assert!(doc.to_json().contains("\"generated_at\": \"2026-11-30T12:00:00Z\""));
    }

    #[test]
    fn a_build_from_the_last_order_or_from_any_hint_ranks_as_one_from_scratch() {
        let routes = ["DeepInfra", "Lepton", "Together", "Groq", "Fireworks", "Novita"];
        let mut all: Vec<TargetStats> = routes
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let mut s = stats(r, if i % 2 == 0 { LLAMA } else { "qwen/qwen-2.5-72b" });
                s.ttft.p95 = Some(400.0 + 10.0 * (routes.len() - i) as f64);
                s
            })
            .collect();
        let p = params();
        let mut order = Vec::new();
        let first = build_ordered(&p, &all, &mut order);
        assert_eq!(first, build(&p, &all));
        assert_eq!(
            ranks(&first),
            [("Fireworks", 1), ("Together", 2), ("DeepInfra", 3), ("Novita", 1), ("Groq", 2), ("Lepton", 3)]
                .map(|(r, n)| (r.to_string(), n))
        );
        let kept = order.clone();
        let same = build_ordered(&p, &all, &mut order);
        assert_eq!((&same, &order), (&first, &kept), "nothing moved, nothing reordered");
        // One target slows down and drops behind its model's others; the hint was the old order.
        all[4].ttft.p95 = Some(900.0);
        let moved = build_ordered(&p, &all, &mut order);
        assert_eq!(moved, build(&p, &all));
        assert_eq!(
            ranks(&moved)[..3],
            [("Together", 1), ("DeepInfra", 2), ("Fireworks", 3)].map(|(r, n)| (r.to_string(), n))
        );
        // A hint that is not a permutation of the places (stale, short, repeated) is dropped.
        for mut hint in [vec![0, 0, 1, 2, 3, 4], vec![5, 4, 3], vec![9, 1, 2, 3, 4, 5], vec![]] {
            assert_eq!(build_ordered(&p, &all, &mut hint), moved, "{hint:?}");
            assert_eq!(hint, order, "left holding the new order");
        }
    }

    #[test]
    fn too_few_samples_give_null_percentiles_and_null_thresholds() {
        let mut young = stats("Lepton", LLAMA);
        young.probes = 12;
        young.errors = 0;
        young.ttfb = Baseline { count: 12, p50: None, p95: None, p99: None };
        young.ttft = Baseline { count: 12, p50: None, p95: None, p99: None };
        young.tokens_per_s = Baseline { count: 12, ..Baseline::default() };
        young.ttft_p95_bound = p95_upper_bound(12, |_| Some(500.0));
        let doc = build(&params(), &[young]);
        let t: Value = serde_json::to_value(&doc.targets[0]).expect("json");
        assert_eq!(t["samples"], 12);
        assert_eq!(t["error_rate"], 0.0);
        for key in ["failover_ttfb_ms", "failover_ttft_ms"] {
            assert!(t[key].is_null(), "{key}: below 30 samples nothing is published");
        }
        assert_eq!(t["provisional"], false);
        assert!(t["ttft_ms"]["p95"].is_null() && t["tokens_per_s"]["p50"].is_null());
    }

    #[test]
    fn a_young_target_gets_a_provisional_deadline_from_30_samples() {
        let mut young = stats("Lepton", LLAMA);
        young.probes = 42;
        young.ttfb = Baseline { count: 42, p50: Some(150.0), p95: None, p99: None };
        young.ttft = Baseline { count: 42, p50: Some(200.0), p95: None, p99: None };
        young.ttfb_p95_bound = p95_upper_bound(42, |_| Some(260.0));
        young.ttft_p95_bound = p95_upper_bound(42, |_| Some(450.0));
        let doc = build(&params(), &[young]);
        let t = &doc.targets[0];
        assert_eq!(t.failover_ttfb_ms, Some(520.0));
        assert_eq!(t.failover_ttft_ms, Some(900.0));
        assert!(t.provisional);
        let basis = t.provisional_basis.as_deref().expect("basis");
        assert_eq!(basis.samples, 42);
        assert_eq!(basis.ttft_p95_upper_ms, Some(450.0));
        assert!((basis.confidence - (1.0 - 0.95f64.powi(42))).abs() < 1e-9);
        // Once the P95 is stable the bound is no longer used.
        let doc = build(&params(), &[stats("Lepton", LLAMA)]);
        assert!(!doc.targets[0].provisional && doc.targets[0].provisional_basis.is_none());
    }

    #[test]
    fn breaker_state_ranks_before_error_rate() {
        let mut open = stats("A", LLAMA);
        open.breaker = State::Open;
        open.errors = 0;
        let mut half = stats("B", LLAMA);
        half.breaker = State::HalfOpen;
        half.errors = 0;
        let mut closed = stats("C", LLAMA);
        closed.errors = 900;
        let doc = build(&params(), &[open, half, closed]);
        assert_eq!(ranks(&doc), [("C".into(), 1), ("B".into(), 2), ("A".into(), 3)]);
        assert!(doc.to_json().contains("\"breaker\": \"half_open\""), "one spelling: half_open");
    }

    #[test]
    fn error_rate_ranks_before_ttft_p95() {
        let mut fast_flaky = stats("A", LLAMA);
        fast_flaky.errors = 50;
        fast_flaky.ttft.p95 = Some(100.0);
        let mut slow_steady = stats("B", LLAMA);
        slow_steady.errors = 1;
        slow_steady.ttft.p95 = Some(900.0);
        let doc = build(&params(), &[fast_flaky, slow_steady]);
        assert_eq!(ranks(&doc), [("B".into(), 1), ("A".into(), 2)]);
    }

    #[test]
    fn a_target_ignoring_the_system_prompt_ranks_after_clean_ones_and_is_demoted_with_the_reason() {
        use crate::decide::health::{Capability, CapabilityFailure};
        let ignores = [CapabilityFailure { capability: Capability::SystemPrompt, replies: 3 }];
        // A: fastest, no errors, cheapest — rank 1 by every other key — but its replies ignore the prompt.
        let mut a = stats("A", LLAMA);
        (a.errors, a.ttft.p95, a.cost_per_probe_usd) = (0, Some(100.0), Some(0.0));
        a.health = crate::decide::health::judge(
            BreakerView { state: State::Closed, reason: None },
            Some(&ProbeVerdict::Within),
            &ignores,
            false,
            None,
            Utc::now(),
        );
        let mut b = stats("B", LLAMA);
        b.errors = 40;
        let mut c = stats("C", LLAMA);
        c.breaker = State::HalfOpen;
        c.health = health(State::HalfOpen, None, Some(ProbeVerdict::Within), false);
        let mut p = params();
        p.chains = vec![ChainConfig {
            name: "llama".into(),
            members: vec![member("openrouter", LLAMA, Some("A")), member("openrouter", LLAMA, Some("B"))],
            ..ChainConfig::new("", vec![])
        }];
        let doc = build(&p, &[a, b, c]);
        assert_eq!(ranks(&doc), [("B".into(), 1), ("A".into(), 2), ("C".into(), 3)], "the breaker still ranks first");
        let row = doc.targets.iter().find(|t| t.key.route.as_deref() == Some("A")).expect("A");
        assert_eq!(row.breaker, State::Closed, "it answers: the breaker stays closed");
        let chain = &doc.chains[0];
        let got: Vec<(&str, ChainStatus, Option<&str>)> =
            chain.order.iter().map(|e| (e.key.route.as_deref().unwrap_or(""), e.status, e.reason.as_deref())).collect();
        assert_eq!(
            got,
            [
                ("B", ChainStatus::Healthy, None),
                ("A", ChainStatus::Demoted, Some("replies ignore the system prompt (last 3 of 3)"))
            ]
        );
    }

    #[test]
    fn ttft_p95_ranks_before_cost_and_unknown_p95_goes_last() {
        let mut unknown = stats("A", LLAMA);
        unknown.ttft.p95 = None;
        unknown.cost_per_probe_usd = Some(0.0);
        let mut slow_cheap = stats("B", LLAMA);
        slow_cheap.ttft.p95 = Some(500.0);
        slow_cheap.cost_per_probe_usd = Some(0.00001);
        let mut fast_dear = stats("C", LLAMA);
        fast_dear.ttft.p95 = Some(300.0);
        fast_dear.cost_per_probe_usd = Some(0.001);
        let doc = build(&params(), &[unknown, slow_cheap, fast_dear]);
        assert_eq!(ranks(&doc), [("C".into(), 1), ("B".into(), 2), ("A".into(), 3)]);
    }

    #[test]
    fn cost_breaks_ties_with_unknown_cost_last() {
        let mut dear = stats("A", LLAMA);
        dear.cost_per_probe_usd = Some(0.002);
        let mut cheap = stats("B", LLAMA);
        cheap.cost_per_probe_usd = Some(0.001);
        let mut unknown = stats("C", LLAMA);
        unknown.cost_per_probe_usd = None;
        let doc = build(&params(), &[dear, unknown, cheap]);
        assert_eq!(ranks(&doc), [("B".into(), 1), ("A".into(), 2), ("C".into(), 3)]);
    }

    #[test]
    fn each_model_is_ranked_on_its_own_and_other_regions_are_left_out() {
        let mixtral = "mistralai/mixtral-8x22b-instruct";
        let mut worse = stats("Together", LLAMA);
        worse.errors = 9;
        let mut elsewhere = stats("Lepton", LLAMA);
        elsewhere.target.region = "us-east-1".into();
        elsewhere.errors = 0;
        let doc = build(&params(), &[worse, stats("Anyscale", mixtral), elsewhere, stats("DeepInfra", LLAMA)]);
        let got: Vec<(String, String, u32)> = doc
            .targets
            .iter()
            .map(|t| (t.key.model.to_string(), t.key.route.as_deref().unwrap_or_default().to_string(), t.rank))
            .collect();
        assert_eq!(
            got,
            [
                (LLAMA.into(), "DeepInfra".into(), 1),
                (LLAMA.into(), "Together".into(), 2),
                (mixtral.into(), "Anyscale".into(), 1)
            ]
        );
    }

    #[test]
    fn expiry_window_and_yaml_follow_the_params() {
        let p = ExportParams {
            probe_interval: Duration::from_secs(30),
            window: Duration::from_secs(36 * 3600),
            ..params()
        };
        let doc = build(&p, &[stats("DeepInfra", LLAMA)]);
        assert_eq!(doc.expires_at, p.generated_at + chrono::Duration::seconds(90));
        assert_eq!(doc.window, "36h");
        assert_eq!(format_window(Duration::from_secs(90)), "90s");
        assert_eq!(format_window(Duration::from_secs(300)), "5m");
        let yaml = doc.to_yaml().expect("yaml");
        let back: Value = serde_norway::from_str(&yaml).expect("yaml parses");
        assert_eq!(back["expires_at"], "2026-11-30T12:01:30Z");
        assert_eq!(back["targets"][0]["failover_ttft_ms"], 800.0);
    }

    // ------------------------------------------------------------ chains

    fn member(provider: &str, model: &str, route: Option<&str>) -> ChainMember {
        let t = target(provider, model, route);
        ChainMember { spelled: t.id(), provider: provider.into(), model: model.into(), route: route.map(String::from) }
    }

    fn three() -> (ExportParams, Vec<TargetStats>) {
        let mut p = params();
        p.chains = vec![ChainConfig {
            name: "chat".into(),
            members: vec![
                member("openrouter", "openai/gpt-4o", None),
                member("openai", "gpt-4o-2024-08-06", None),
                member("anthropic", "claude-sonnet-4-20250514", None),
            ],
            skipped: vec![SkippedMember {
                target: "gemini/gemini-2.0-flash".into(),
                reason: "GEMINI_API_KEY is not set".into(),
            }],
            ..ChainConfig::new("", vec![])
        }];
        let mk =
            |provider: &str, model: &str| TargetStats { target: target(provider, model, None), ..stats("x", model) };
        let all = vec![
            mk("anthropic", "claude-sonnet-4-20250514"),
            mk("openai", "gpt-4o-2024-08-06"),
            mk("openrouter", "openai/gpt-4o"),
        ];
        (p, all)
    }

    fn order(doc: &Thresholds) -> Vec<(String, ChainStatus)> {
        doc.chains[0].order.iter().map(|e| (e.key.provider.to_string(), e.status)).collect()
    }

    #[test]
    fn a_healthy_chain_keeps_its_configured_order_across_providers() {
        let (p, all) = three();
        let doc = build(&p, &all);
        assert_eq!(
            order(&doc),
            [
                ("openrouter".into(), ChainStatus::Healthy),
                ("openai".into(), ChainStatus::Healthy),
                ("anthropic".into(), ChainStatus::Healthy)
            ]
        );
        assert_eq!(doc.targets.iter().map(|t| t.rank).collect::<Vec<_>>(), [1, 1, 1], "rank stays per model");
        let c = &doc.chains[0];
        assert_eq!((c.name.as_str(), c.region.as_str()), ("chat", "eu-west-1"));
        assert_eq!(c.order[2].position, 3);
        assert_eq!(c.order[0].failover_ttft_ms, Some(800.0));
        assert_eq!(c.skipped[0].target, "gemini/gemini-2.0-flash");
    }

    #[test]
    fn each_chain_entry_carries_its_price_where_known() {
        let (p, mut all) = three();
        all[0].price = Some(EntryPrice { input_per_mtok: 3.0, output_per_mtok: 15.0, source: "config".into() });
        let doc = build(&p, &all);
        let c = &doc.chains[0];
        assert_eq!(c.order[0].price, None, "openrouter: no price known");
        let anthropic = c.order[2].price.as_ref().expect("anthropic's price");
        assert_eq!((anthropic.input_per_mtok, anthropic.output_per_mtok), (3.0, 15.0));
        let json: Value = serde_json::from_str(&doc.to_json()).expect("json");
        assert_eq!(json["chains"][0]["order"][0]["price"], Value::Null);
        assert_eq!(
            json["chains"][0]["order"][2]["price"],
            serde_json::json!({"input_per_mtok": 3.0, "output_per_mtok": 15.0, "source": "config"})
        );
    }

    #[test]
    fn slow_failing_half_open_and_flapping_targets_are_demoted_and_open_ones_dropped() {
        let (p, mut all) = three();
        // openrouter: last TTFT 960 ms against a P95 of 400 ms (deadline 800 ms).
        all[2].health = health(
            State::Closed,
            None,
            Some(ProbeVerdict::Slow { over: vec!["ttft".into()], reason: "ttft p95 2.4x baseline".into() }),
            false,
        );
        let doc = build(&p, &all);
        assert_eq!(
            order(&doc),
            [
                ("openai".into(), ChainStatus::Healthy),
                ("anthropic".into(), ChainStatus::Healthy),
                ("openrouter".into(), ChainStatus::Demoted)
            ]
        );
        assert_eq!(doc.chains[0].order[2].reason.as_deref(), Some("ttft p95 2.4x baseline"));
        assert_eq!(doc.chains[0].order[2].position, 1);

        all[1].health = health(State::Closed, None, Some(ProbeVerdict::Failed("server_error".into())), false);
        let doc = build(&p, &all);
        assert_eq!(order(&doc)[0].0, "anthropic");
        assert_eq!(doc.chains[0].order[2].reason.as_deref(), Some("last probe failed: server_error"));

        let why = "2 failed probes within 120s: server_error, server_error";
        all[1].breaker = State::Open;
        all[1].health = health(State::Open, Some(why), Some(ProbeVerdict::Failed("server_error".into())), false);
        all[1].next_half_open = Some(p.generated_at + chrono::Duration::minutes(5));
        all[0].health = health(State::Closed, None, Some(ProbeVerdict::Within), true);
        all[2].breaker = State::HalfOpen;
        all[2].health = health(State::HalfOpen, None, Some(ProbeVerdict::Within), false);
        let doc = build(&p, &all);
        let c = &doc.chains[0];
        assert_eq!(
            order(&doc),
            [("openrouter".into(), ChainStatus::Demoted), ("anthropic".into(), ChainStatus::Demoted)],
            "demoted ones keep configured order among themselves"
        );
        assert_eq!(c.order[0].reason.as_deref(), Some("breaker half_open: the next probe decides"));
        assert_eq!(c.order[1].reason.as_deref(), Some("flapping"));
        assert_eq!(c.dropped.len(), 1);
        assert_eq!(c.dropped[0].status, ChainStatus::Dropped);
        assert_eq!(
            c.dropped[0].reason.as_deref(),
            Some("breaker open: 2 failed probes within 120s: server_error, server_error (trial probe at 2026-11-30T12:05:00Z)")
        );
    }

    fn credit_in(p: &mut ExportParams, provider: &str, hours: i64, within_h: Option<u64>) {
        let outlook = CreditOutlook {
            zero_at: p.generated_at + chrono::Duration::hours(hours),
            demote_within: within_h.map(|h| Duration::from_secs(h * 3600)),
        };
        p.credit.insert(provider.into(), outlook);
    }

    fn reasons(doc: &Thresholds) -> Vec<(String, u32, Option<String>)> {
        doc.chains[0].order.iter().map(|e| (e.key.provider.to_string(), e.position, e.reason.clone())).collect()
    }

    #[test]
    fn a_provider_projected_empty_within_demote_within_is_demoted_with_the_hours_left() {
        let (mut p, all) = three();
        credit_in(&mut p, "openrouter", 4, Some(6));
        let doc = build(&p, &all);
        assert_eq!(
            reasons(&doc),
            [
                ("openai".into(), 2, None),
                ("anthropic".into(), 3, None),
                ("openrouter".into(), 1, Some("credit empty in 4 h".into()))
            ]
        );
        assert_eq!(doc.chains[0].order[2].status, ChainStatus::Demoted);
        assert_eq!(doc.targets.iter().map(|t| t.rank).collect::<Vec<_>>(), [1, 1, 1], "rank is not about credit");
        // Beyond demote_within, or with it off: nothing moves.
        for within in [Some(3), None] {
            let (mut p, all) = three();
            credit_in(&mut p, "openrouter", 4, within);
            assert_eq!(order(&build(&p, &all))[0], ("openrouter".into(), ChainStatus::Healthy), "{within:?}");
        }
        // A health reason and the credit both show; an open breaker still drops.
        let (mut p, mut all) = three();
        credit_in(&mut p, "openrouter", 4, Some(6));
        credit_in(&mut p, "openai", 1, Some(6));
        all[2].health = health(State::Closed, None, Some(ProbeVerdict::Failed("server_error".into())), false);
        all[1].breaker = State::Open;
        all[1].health = health(State::Open, Some("2 failed probes"), None, false);
        let doc = build(&p, &all);
        assert_eq!(
            reasons(&doc),
            [
                ("anthropic".into(), 3, None),
                ("openrouter".into(), 1, Some("last probe failed: server_error; credit empty in 4 h".into()))
            ]
        );
        assert_eq!(doc.chains[0].dropped[0].key.provider, "openai");
    }

    #[test]
    fn a_fallback_for_credit_takes_the_demoted_members_place() {
        use crate::config::chain::CreditFallback;
        let (mut p, mut all) = three();
        let anthropic = member("anthropic", "claude-sonnet-4-20250514", None);
        p.chains[0].fallback_for_credit =
            vec![CreditFallback { member: member("openrouter", "openai/gpt-4o", None), fallback: anthropic.clone() }];
        let doc = build(&p, &all);
        assert_eq!(order(&doc)[0].0, "openrouter", "no credit trouble: the configured order");
        credit_in(&mut p, "openrouter", 2, Some(6));
        let doc = build(&p, &all);
        assert_eq!(
            reasons(&doc),
            [
                ("anthropic".into(), 3, None),
                ("openai".into(), 2, None),
                (
                    "openrouter".into(),
                    1,
                    Some("credit empty in 2 h; anthropic/claude-sonnet-4-20250514 stands in".into())
                )
            ]
        );
        // A fallback from outside the chain joins it in the member's place while it is demoted.
        let mini = member("openai", "gpt-4o-mini", None);
        p.chains[0].fallback_for_credit[0].fallback = mini;
        all.push(TargetStats { target: target("openai", "gpt-4o-mini", None), ..stats("x", "gpt-4o-mini") });
        let doc = build(&p, &all);
        assert_eq!(
            doc.chains[0].order.iter().map(|e| (e.key.target.as_str(), e.position)).collect::<Vec<_>>(),
            [
                ("openai/gpt-4o-mini", 1),
                ("openai/gpt-4o-2024-08-06", 2),
                ("anthropic/claude-sonnet-4-20250514", 3),
                ("openrouter/openai/gpt-4o", 1)
            ]
        );
        // The fallback is no healthier for standing in: an unhealthy one is demoted like any other.
        let last = all.len() - 1;
        all[last].health = health(State::Closed, None, Some(ProbeVerdict::Failed("timeout".into())), false);
        let doc = build(&p, &all);
        assert_eq!(order(&doc)[0].0, "openai");
        assert_eq!(doc.chains[0].order[0].key.model, "gpt-4o-2024-08-06");
        assert_eq!(doc.chains[0].order[2].key.model, "gpt-4o-mini", "demoted ones keep their slots' order");
    }

    #[test]
    fn the_chain_slo_sums_the_deadlines_in_order_and_names_the_member_that_breaks_it() {
        let (mut p, mut all) = three();
        let doc = build(&p, &all);
        let slo = &doc.chains[0].slo;
        assert_eq!(
            (slo.ttft_ms, slo.worst_case_ttft_ms, slo.meets, slo.breaking_member.as_deref()),
            (None, 2400.0, None, None)
        );
        // To a complete answer each entry may take the whole-request limit (15 s here).
        assert_eq!(
            (slo.total_ms, slo.worst_case_total_ms, slo.total_meets, slo.total_breaking_member.as_deref()),
            (None, 45_000.0, None, None)
        );
        assert_eq!(doc.chains[0].order_from, "config");
        p.chains[0].total_slo = Some(Duration::from_secs(45));
        assert_eq!(build(&p, &all).chains[0].slo.total_meets, Some(true), "45 s is within 45 s");
        p.chains[0].total_slo = Some(Duration::from_secs(40));
        let slo = build(&p, &all).chains[0].slo.clone();
        let third = doc.chains[0].order[2].key.target.to_string();
        assert_eq!(
            (slo.total_ms, slo.total_meets, slo.total_breaking_member),
            (Some(40_000.0), Some(false), Some(third))
        );
        assert_eq!(slo.meets, None, "the first-token budget is judged on its own");
        p.chains[0].total_slo = Some(Duration::from_secs(20));
        let slo = build(&p, &all).chains[0].slo.clone();
        let second = doc.chains[0].order[1].key.target.to_string();
        assert_eq!(slo.total_breaking_member, Some(second), "the running sum passes 20 s at the second entry");
        p.chains[0].total_slo = None;
        p.chains[0].ttft_slo = Some(Duration::from_secs(3));
        p.chains[0].order_from = "env:LLM_PROVIDER_ORDER".into();
        let doc = build(&p, &all);
        assert_eq!(doc.chains[0].slo.meets, Some(true));
        assert_eq!(doc.chains[0].order_from, "env:LLM_PROVIDER_ORDER");
        p.chains[0].ttft_slo = Some(Duration::from_secs(2));
        let slo = build(&p, &all).chains[0].slo.clone();
        assert_eq!(
            (slo.ttft_ms, slo.meets, slo.breaking_member.as_deref()),
            (Some(2000.0), Some(false), Some("anthropic/claude-sonnet-4-20250514"))
        );
        // No deadline yet: the probe's TTFT timeout (10 s here) counts; a dropped member does not.
        all[1].ttft = Baseline { count: 3, p50: None, p95: None, p99: None };
        all[0].breaker = State::Open;
        all[0].health = health(State::Open, Some("2 failed probes"), None, false);
        p.chains[0].ttft_slo = Some(Duration::from_secs(12));
        let slo = build(&p, &all).chains[0].slo.clone();
        assert_eq!((slo.worst_case_ttft_ms, slo.meets, slo.breaking_member), (10_800.0, Some(true), None));
        // Nothing left to try cannot meet any SLO.
        for t in &mut all {
            t.breaker = State::Open;
            t.health = health(State::Open, Some("down"), None, false);
        }
        let slo = build(&p, &all).chains[0].slo.clone();
        assert_eq!((slo.worst_case_ttft_ms, slo.meets), (0.0, Some(false)));
        let json: Value = serde_json::to_value(&build(&p, &all).chains[0]).expect("json");
        assert_eq!(
            json["slo"],
            serde_json::json!({"ttft_ms": 12000.0, "worst_case_ttft_ms": 0.0, "meets": false, "breaking_member": null,
                "total_ms": null, "worst_case_total_ms": 0.0, "total_meets": null, "total_breaking_member": null})
        );
    }

    #[test]
    fn a_rate_limited_member_is_demoted_for_its_backoff_with_retry_after_and_its_failure_class() {
        let (p, mut all) = three();
        let b = crate::decide::health::Backoff {
            since: p.generated_at - chrono::Duration::seconds(10),
            until: p.generated_at + chrono::Duration::milliseconds(289_500),
            retry_after_s: Some(300.0),
        };
        let limited = ProbeVerdict::Failed("rate_limited".into());
        all[2].health = crate::decide::health::judge(
            BreakerView { state: State::Closed, reason: None },
            Some(&limited),
            &[],
            false,
            Some(&b),
            p.generated_at,
        );
        all[1].health = health(State::Closed, None, Some(ProbeVerdict::Failed("timeout".into())), false);
        let doc = build(&p, &all);
        let c = &doc.chains[0];
        let got: Vec<(&str, ChainStatus, Option<u64>, Option<&str>)> = c
            .order
            .iter()
            .map(|e| (e.key.provider.as_str(), e.status, e.retry_after_s, e.last_failure_class.as_deref()))
            .collect();
        assert_eq!(
            got,
            [
                ("anthropic", ChainStatus::Healthy, None, None),
                ("openrouter", ChainStatus::Demoted, Some(290), Some("rate_limited")),
                ("openai", ChainStatus::Demoted, None, Some("timeout")),
            ]
        );
        assert_eq!(c.order[1].reason.as_deref(), Some("rate limited (429), backing off until 2026-11-30T12:04:49Z"));
        let row = doc.targets.iter().find(|t| t.key.provider == "openrouter").expect("row");
        assert_eq!((row.retry_after_s, row.last_failure_class.as_deref()), (Some(290), Some("rate_limited")));
        let json: Value = serde_json::from_str(&doc.to_json()).expect("json");
        assert_eq!(json["chains"][0]["order"][0]["retry_after_s"], Value::Null, "present, null when none runs");
    }

    #[test]
    fn rate_limit_headroom_is_published_on_rows_and_chain_entries_without_moving_the_order() {
        use crate::vocab::ratelimit::{Allowance, Headroom};
        let (p, mut all) = three();
        let before: Vec<Name> = build(&p, &all).chains[0].order.iter().map(|e| e.key.target.clone()).collect();
        let h = Headroom {
            requests: Some(Allowance { remaining: Some(3), limit: Some(100), reset_at: Some(p.generated_at) }),
            tokens: None,
        };
        all[0].ratelimit = HeadroomView::of(&h, p.generated_at, 0.1).map(Arc::new);
        let doc = build(&p, &all);
        let after: Vec<Name> = doc.chains[0].order.iter().map(|e| e.key.target.clone()).collect();
        assert_eq!(before, after, "headroom is for routers to read, not a demotion");
        let json: Value = serde_json::from_str(&doc.to_json()).expect("json");
        let id = all[0].target.id();
        let row = json["targets"].as_array().and_then(|r| r.iter().find(|t| t["target"] == id.as_str())).expect("row");
        assert_eq!(row["ratelimit"]["low"], true, "{row}");
        assert_eq!(row["ratelimit"]["requests"]["remaining"], 3, "{row}");
        assert_eq!(row["ratelimit"]["tokens"], Value::Null, "{row}");
        let entry = json["chains"][0]["order"].as_array().and_then(|o| o.iter().find(|e| e["target"] == id.as_str()));
        assert_eq!(entry.expect("entry")["ratelimit"]["headroom"], 0.03);
        let other = json["targets"].as_array().and_then(|r| r.iter().find(|t| t["target"] != id.as_str()));
        assert_eq!(other.expect("another row")["ratelimit"], Value::Null, "present, null when never sent");
        let back: Thresholds = serde_json::from_str(&doc.to_json()).expect("the document reads back");
        let shown = |d: &Thresholds| d.targets.iter().map(|t| t.ratelimit.as_deref().cloned()).collect::<Vec<_>>();
        assert_eq!(shown(&back), shown(&doc), "a shared view reads back as the view it wrote");
    }

    #[test]
    fn a_row_holds_its_rarely_set_parts_behind_a_pointer() {
        // Every publish builds 10,000 rows beside the document they replace; the rate-limit view
        // (128 bytes) and the provisional basis (48), mostly empty, were a third of each row.
        const ROW_BYTES: usize = 360;
        let row = std::mem::size_of::<TargetThresholds>();
        assert!(row <= ROW_BYTES, "a row is {row} bytes");
        assert_eq!(std::mem::size_of::<Option<Arc<HeadroomView>>>(), 8);
    }

    #[test]
    fn an_active_drill_drops_its_target_from_its_chain_whatever_its_health_until_it_ends() {
        let (mut p, all) = three();
        let at = p.generated_at;
        let drill = |chain: &str, target: &str| Drill {
            id: uuid::Uuid::nil(),
            chain: chain.into(),
            target: target.into(),
            region: "us-east-1".into(),
            started_at: at - chrono::Duration::minutes(1),
            until: at + chrono::Duration::minutes(10),
            ended_at: None,
        };
        p.drills = vec![drill("chat", "openrouter/openai/gpt-4o"), drill("other", "openai")];
        let doc = build(&p, &all);
        assert_eq!(
            order(&doc),
            [("openai".into(), ChainStatus::Healthy), ("anthropic".into(), ChainStatus::Healthy)],
            "another chain's drill drops nothing here"
        );
        let d = &doc.chains[0].dropped;
        assert_eq!(d.len(), 1);
        assert_eq!((d[0].key.provider.as_str(), d[0].status, d[0].position), ("openrouter", ChainStatus::Dropped, 1));
        assert_eq!(d[0].reason.as_deref(), Some("drill (until 2026-11-30T12:10:00Z)"));
        assert_eq!(doc.targets.len(), 3, "the target itself is still published with its thresholds");

        p.drills[0].ended_at = Some(at);
        assert_eq!(order(&build(&p, &all)).len(), 3, "ended early: back in its place");
        p.drills[0].ended_at = None;
        p.generated_at = at + chrono::Duration::minutes(10);
        let doc = build(&p, &all);
        assert_eq!(order(&doc)[0], ("openrouter".into(), ChainStatus::Healthy), "run out: back at the head");
    }

    #[test]
    fn a_member_without_its_route_expands_to_every_route_in_rank_order() {
        let mut p = params();
        p.chains = vec![ChainConfig {
            name: "llama".into(),
            members: vec![member("openrouter", LLAMA, None)],
            ..ChainConfig::new("", vec![])
        }];
        let mut worse = stats("Together", LLAMA);
        worse.errors = 900;
        let doc = build(&p, &[worse, stats("DeepInfra", LLAMA)]);
        let got: Vec<(Option<String>, u32)> =
            doc.chains[0].order.iter().map(|e| (e.key.route.as_deref().map(String::from), e.position)).collect();
        assert_eq!(got, [(Some("DeepInfra".into()), 1), (Some("Together".into()), 2)]);
    }

    #[test]
    fn filters_narrow_targets_and_chains() {
        let (p, all) = three();
        let doc = build(&p, &all);
        let f = doc.filtered(&Filter { provider: Some("openai".into()), ..Filter::default() }).expect("ok");
        assert_eq!(f.targets.len(), 1);
        assert_eq!(f.chains[0].order.len(), 1);
        let f = doc.filtered(&Filter { model: Some("nothing".into()), ..Filter::default() }).expect("ok");
        assert!(f.targets.is_empty() && f.chains.is_empty());
        let f = doc.filtered(&Filter { chain: Some("chat".into()), ..Filter::default() }).expect("ok");
        assert_eq!((f.targets.len(), f.chains.len()), (3, 1));
        assert_eq!(
            doc.filtered(&Filter { chain: Some("nope".into()), ..Filter::default() }),
            Err(UnknownChain("nope".into()))
        );
    }
}
