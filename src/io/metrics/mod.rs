//! Every Prometheus metric vigil exports, defined once. Names and labels are a public contract
//! (docs/METRICS.md); dashboards and alert rules depend on them.
//!
//! Per-target series are plain numbers in one map (`targets`), written straight into the
//! exposition text: a sample costs one map lookup, and a scrape one pass over the targets. The
//! few instance-level metrics (alerts, storage, lag, build, process, canary) stay in a
//! `prometheus` registry.

mod checks;
mod exposition;
mod targets;
mod workloads;

use crate::config::Detail;
use crate::vocab::ratelimit::RateLimitKind;
use crate::vocab::sample::Outcome;
use crate::vocab::sample::Sample;
use crate::vocab::target::Target;
use exposition::Out;
use prometheus::core::Collector;
use prometheus::{
    GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGaugeVec, Opts, Registry,
    TextEncoder,
};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use targets::{Gauge, Hist, Series};

/// `vigil_pipeline_step_seconds{step, region}`.
fn step_histogram() -> Result<HistogramVec, prometheus::Error> {
    HistogramVec::new(
        HistogramOpts::new(
            "vigil_pipeline_step_seconds",
            "Time the pipeline spent in one step (publish, evaluate, persist, reply, ...), by step.",
        )
        .buckets(STEP_BUCKETS.to_vec()),
        &["step", "region"],
    )
}

/// Per-target labels, in this order everywhere.
const TARGET_LABELS: [&str; 4] = ["provider", "model", "route", "region"];
/// TTFB/TTFT buckets below `metrics.detail = "full"`: where LLM APIs answer (fast hosts ~0.2 s, typical 0.5–1 s,
/// slow 2 s, degraded beyond 5 s). Few on purpose: each bucket is a series per target.
const LLM_BUCKETS: [f64; 5] = [0.2, 0.5, 1.0, 2.0, 5.0];
/// Latency buckets with `metrics.detail = "full"`: 25 ms to 30 s.
const FULL_BUCKETS: [f64; 22] = [
    0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 7.5, 10.0, 15.0, 20.0,
    30.0,
];
/// Scheduling lag buckets: the target is p99 < 50 ms, so resolve the milliseconds.
const LAG_BUCKETS: [f64; 12] = [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0];
/// Pipeline step buckets: the budget for a minute's evaluation and for a publish is 100 ms at
/// 10,000 targets, so resolve below it and show how far past it a slow step went.
const STEP_BUCKETS: [f64; 11] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0];
/// The pipeline's steps timed by `vigil_pipeline_step_seconds`, present from the start at zero.
pub const PIPELINE_STEPS: [&str; 9] =
    ["replan", "canary", "check", "workload", "adopt", "reply", "publish", "persist", "evaluate"];
/// Phases of `vigil_probe_phase_seconds`, in [`Series::phases`] order.
const PHASES: [&str; 7] = ["dns", "connect", "tls", "proxy", "ttfb", "ttft", "total"];
/// Phases exported with `compact` (the last TTFB, TTFT and total, which the rules use); from
/// `standard` on every phase is.
const COMPACT_PHASES: [&str; 3] = ["ttfb", "ttft", "total"];
/// Baseline metrics and quantiles, in [`Series::baseline`] order.
const BASELINE_METRICS: [&str; 2] = ["ttfb", "ttft"];
const BASELINE_QUANTILES: [&str; 3] = ["0.5", "0.95", "0.99"];
/// The baseline quantile exported with `compact`: the one the breaker and the failover line use.
const COMPACT_QUANTILE: &str = "0.95";
/// The baseline quantile only `full` exports (no dashboard or rule reads it).
const FULL_QUANTILE: &str = "0.99";

/// The registry, the per-target series, and every other metric.
pub struct Metrics {
    /// Instance-level metrics (few series): alerts, storage, lag, build, process, canary.
    registry: Registry,
    detail: Detail,
    /// Upper bounds of the per-target latency histograms.
    bounds: &'static [f64],
    credit: GaugeVec,
    thresholds: ThresholdMetrics,
    alerts: IntCounterVec,
    delivery_failures: IntCounterVec,
    abandoned: IntCounterVec,
    spooled: IntGaugeVec,
    outbox_depth: IntGaugeVec,
    lag: Histogram,
    steps: HistogramVec,
    stored: IntCounter,
    panics: IntCounterVec,
    records_spooled: IntGaugeVec,
    rejected: IntCounterVec,
    /// Live members of the region (this one included), and whether this one leads.
    replicas: ReplicaGauges,
    region: String,
    adaptive: AdaptiveMetrics,
    canary: CanaryMetrics,
    golden: checks::CheckMetrics,
    workloads: workloads::WorkloadMetrics,
    /// Per-target series ([`targets`]), written straight into the exposition text.
    targets: Mutex<BTreeMap<Target, Series>>,
    /// Size of the last exposition, to allocate the next one at once.
    last_len: AtomicUsize,
    /// Size of the last gzip exposition, likewise.
    last_gzip_len: AtomicUsize,
    /// With replicas, the region's members: per-target gauges are exposed by the target's owner only.
    roster: std::sync::OnceLock<crate::decide::roster::SharedRoster>,
}

fn labels(t: &Target) -> [&str; 4] {
    [&t.provider, &t.model, t.route_label(), &t.region]
}

fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// `vigil_region_members` and `vigil_region_leader` of this instance's region (1 and 1 alone).
struct ReplicaGauges {
    members: IntGaugeVec,
    leader: IntGaugeVec,
    region: String,
}

impl ReplicaGauges {
    fn new(region: &str) -> Result<Self, prometheus::Error> {
        let gauge = |name: &str, help: &str| IntGaugeVec::new(Opts::new(name, help), &["region"]);
        let members = gauge(
            "vigil_region_members",
            "Live instances sharing this region's targets (replicas), this one included.",
        )?;
        let leader = gauge(
            "vigil_region_leader",
            "1 on the region's leading replica (it pages and runs the region's once-only work), else 0.",
        )?;
        let gauges = ReplicaGauges { members, leader, region: region.to_string() };
        gauges.set(1, true);
        Ok(gauges)
    }

    fn set(&self, live: usize, leads: bool) {
        self.members.with_label_values(&[&self.region]).set(i64::try_from(live).unwrap_or(i64::MAX));
        self.leader.with_label_values(&[&self.region]).set(i64::from(leads));
    }

    fn register(&self, registry: &Registry) -> Result<(), prometheus::Error> {
        registry.register(Box::new(self.members.clone()))?;
        registry.register(Box::new(self.leader.clone()))
    }
}

impl Metrics {
    /// Creates and registers every metric with the default (`standard`) per-target detail.
    pub fn new(region: &str) -> Result<Metrics, prometheus::Error> {
        Metrics::with_detail(region, Detail::default())
    }

    /// Creates and registers every metric with the given per-target detail.
    pub fn with_detail(region: &str, detail: Detail) -> Result<Metrics, prometheus::Error> {
        let registry = Registry::new();
        let lag = HistogramVec::new(
            HistogramOpts::new("vigil_probe_schedule_lag_seconds", "Probe start minus its scheduled time.")
                .buckets(LAG_BUCKETS.to_vec()),
            &["region"],
        )?;
        let steps = step_histogram()?;
        let stored = IntCounterVec::new(
            Opts::new("vigil_samples_stored_total", "Samples written to storage since start."),
            &["region"],
        )?;
        let m = Metrics {
            bounds: match detail {
                Detail::Compact | Detail::Standard | Detail::Histograms => &LLM_BUCKETS,
                Detail::Full => &FULL_BUCKETS,
            },
            credit: GaugeVec::new(
                Opts::new("vigil_credit_remaining_usd", "Provider credit left, in USD."),
                &["provider", "region"],
            )?,
            thresholds: ThresholdMetrics::new()?,
            alerts: IntCounterVec::new(
                Opts::new("vigil_alerts_total", "Alert notifications delivered."),
                &["kind", "channel", "region"],
            )?,
            delivery_failures: IntCounterVec::new(
                Opts::new("vigil_alert_delivery_failures_total", "Failed alert delivery attempts."),
                &["channel", "region"],
            )?,
            abandoned: IntCounterVec::new(
                Opts::new(
                    "vigil_alerts_abandoned_total",
                    "Alert notifications given up (permanent rejection, delivery deadline passed, channel gone).",
                ),
                &["channel", "region"],
            )?,
            spooled: IntGaugeVec::new(
                Opts::new("vigil_samples_spooled", "Samples waiting on disk because storage is unreachable."),
                &["region"],
            )?,
            outbox_depth: IntGaugeVec::new(
                Opts::new("vigil_outbox_depth", "Alert notifications waiting for delivery."),
                &["region"],
            )?,
            lag: lag.with_label_values(&[region]),
            steps: steps.clone(),
            stored: stored.with_label_values(&[region]),
            panics: IntCounterVec::new(
                Opts::new(
                    "vigil_task_panics_total",
                    "Panics caught inside a task that kept running (the pipeline judging one sample).",
                ),
                &["task", "region"],
            )?,
            records_spooled: IntGaugeVec::new(
                Opts::new(
                    "vigil_records_spooled",
                    "Breaker transitions, outbox items and states waiting on disk because storage is unreachable.",
                ),
                &["region"],
            )?,
            rejected: IntCounterVec::new(
                Opts::new(
                    "vigil_provider_values_rejected_total",
                    "Implausible values from providers (negative, non-finite or absurd) dropped from samples, by field.",
                ),
                &["field", "region"],
            )?,
            replicas: ReplicaGauges::new(region)?,
            region: region.to_string(),
            adaptive: AdaptiveMetrics::new()?,
            canary: CanaryMetrics::new()?,
            golden: checks::CheckMetrics::new()?,
            workloads: workloads::WorkloadMetrics::new()?,
            registry,
            detail,
            targets: Mutex::new(BTreeMap::new()),
            last_len: AtomicUsize::new(0),
            last_gzip_len: AtomicUsize::new(0),
            roster: std::sync::OnceLock::new(),
        };
        let build = GaugeVec::new(
            Opts::new("vigil_build_info", "Always 1; labels carry the version."),
            &["version", "region"],
        )?;
        build.with_label_values(&[env!("CARGO_PKG_VERSION"), region]).set(1.0);
        m.zero_instance_series();
        let collectors: Vec<Box<dyn Collector>> = vec![
            Box::new(m.credit.clone()),
            Box::new(m.alerts.clone()),
            Box::new(m.delivery_failures.clone()),
            Box::new(m.abandoned.clone()),
            Box::new(m.spooled.clone()),
            Box::new(m.outbox_depth.clone()),
            Box::new(lag),
            Box::new(steps),
            Box::new(stored),
            Box::new(m.panics.clone()),
            Box::new(m.records_spooled.clone()),
            Box::new(m.rejected.clone()),
            Box::new(build),
        ];
        for c in collectors {
            m.registry.register(c)?;
        }
        m.adaptive.register(&m.registry, region)?;
        m.replicas.register(&m.registry)?;
        m.thresholds.register(&m.registry)?;
        m.canary.register(&m.registry)?;
        m.golden.register(&m.registry)?;
        m.workloads.register(&m.registry)?;
        #[cfg(target_os = "linux")]
        m.registry.register(Box::new(prometheus::process_collector::ProcessCollector::for_self()))?;
        Ok(m)
    }

    /// Instance-level series exist from the start, so dashboards and absent() see them at zero.
    fn zero_instance_series(&self) {
        let region = self.region.as_str();
        self.spooled.with_label_values(&[region]).set(0);
        self.outbox_depth.with_label_values(&[region]).set(0);
        self.records_spooled.with_label_values(&[region]).set(0);
        self.panics.with_label_values(&["pipeline", region]);
        for step in PIPELINE_STEPS {
            self.steps.with_label_values(&[step, region]);
        }
        for field in crate::io::probe::scrub::REJECTABLE_FIELDS {
            self.rejected.with_label_values(&[field, region]);
        }
    }

    /// The per-target detail this registry exports.
    pub fn detail(&self) -> Detail {
        self.detail
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<Target, Series>> {
        self.targets.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on the target's series, creating the entry the first time.
    fn with_target<R>(&self, t: &Target, f: impl FnOnce(&mut Series) -> R) -> R {
        let mut map = self.lock();
        if let Some(s) = map.get_mut(t) {
            return f(s);
        }
        f(map.entry(t.clone()).or_default())
    }

    /// Records one sample.
    pub fn observe(&self, s: &Sample) {
        self.lag.observe(s.schedule_lag_s());
        for field in &s.rejected {
            self.rejected.with_label_values(&[*field, self.region.as_str()]).inc();
        }
        let full = self.detail == Detail::Full;
        let histograms = self.detail >= Detail::Histograms;
        let standard = self.detail >= Detail::Standard;
        let bounds = self.bounds;
        self.with_target(&s.target, |h| {
            let outcome = s.outcome;
            match h.outcomes.iter_mut().find(|(o, _)| *o == outcome) {
                Some((_, n)) => *n += 1,
                None => h.outcomes.push((outcome, 1)),
            }
            let ok = outcome == Outcome::Ok;
            h.success = Gauge::from(if ok { 1.0 } else { 0.0 });
            if ok {
                h.last_success = Gauge::from(s.started_at.timestamp_millis() as f64 / 1000.0);
            }
            let secs = |v: Option<f64>| v.map(|ms| ms / 1000.0);
            let observe = |hist: &mut Option<Box<Hist>>, v: Option<f64>| {
                if let Some(v) = secs(v) {
                    hist.get_or_insert_with(|| Box::new(Hist::new(bounds.len()))).observe(bounds, v);
                }
            };
            if ok && histograms {
                observe(&mut h.ttfb, s.ttfb_ms);
                observe(&mut h.ttft, s.ttft_ms);
                if full {
                    observe(&mut h.duration, s.total_ms);
                }
            }
            let values = [s.dns_ms, s.connect_ms, s.tls_ms, s.proxy_ms, s.ttfb_ms, s.ttft_ms, s.total_ms];
            for ((phase, slot), v) in PHASES.iter().zip(h.phases.iter_mut()).zip(values) {
                if standard || COMPACT_PHASES.contains(phase) {
                    // A phase that did not happen this time must not keep showing an old value.
                    *slot = secs(v).into();
                }
            }
            if standard {
                h.tokens = s.tokens_per_s.into();
                h.last_status = Gauge::from(f64::from(s.status.unwrap_or(0)));
            }
            if let Some(c) = s.cost_usd.filter(|c| *c > 0.0) {
                h.cost = Gauge::from(h.cost.get().unwrap_or(0.0) + c);
            }
            // The last reading of each allowance stands until a response says it again: a
            // probe that never reached the provider says nothing about its limits.
            for (i, kind) in RateLimitKind::ALL.into_iter().enumerate() {
                if let Some(a) = s.ratelimit.get(kind) {
                    let count = |n: Option<u64>| n.map(|n| n as f64);
                    h.ratelimit_remaining[i] = count(a.remaining).into();
                    h.ratelimit_ratio[i] = a.fraction().into();
                    if standard {
                        h.ratelimit_limit[i] = count(a.limit).into();
                        h.ratelimit_reset[i] = a.reset_at.map(|r| r.timestamp_millis() as f64 / 1000.0).into();
                    }
                }
            }
        });
    }

    /// Counts a panic caught inside `task`, which kept running.
    pub fn task_panicked(&self, task: &str) {
        self.panics.with_label_values(&[task, &self.region]).inc();
    }

    /// Records how long one pipeline step (one of [`PIPELINE_STEPS`]) took.
    pub fn step_took(&self, step: &str, took: std::time::Duration) {
        self.steps.with_label_values(&[step, &self.region]).observe(took.as_secs_f64());
    }

    /// Sets how many records wait in the storage link's spool.
    pub fn set_records_spooled(&self, n: u64) {
        self.records_spooled.with_label_values(&[&self.region]).set(to_i64(n));
    }

    /// Makes every target visible at zero before its first probe, so rate() and absent() behave.
    pub fn register_target(&self, t: &Target) {
        let full = self.detail == Detail::Full;
        self.with_target(t, |h| {
            // Only `ok` up front: other outcomes appear when first seen, keeping series per target low.
            if !h.outcomes.iter().any(|(o, _)| *o == Outcome::Ok) {
                h.outcomes.push((Outcome::Ok, 0));
            }
            if full {
                if h.cost.get().is_none() {
                    h.cost = Gauge::from(0.0);
                }
                h.skipped.get_or_insert(0);
            }
        });
    }

    /// Counts a probe skipped because the previous one of the target was still running.
    pub fn skipped(&self, t: &Target) {
        self.with_target(t, |h| *h.skipped.get_or_insert(0) += 1);
    }

    /// Sets a target's baseline quantile (`metric`: ttfb|ttft; `quantile`: 0.5|0.95|0.99), or
    /// clears it: `compact` exports the 0.95 quantile, `standard` and `histograms` also the 0.5,
    /// `full` every one.
    pub fn set_baseline(&self, t: &Target, metric: &str, quantile: &str, seconds: Option<f64>) {
        let shown = match self.detail {
            Detail::Compact => quantile == COMPACT_QUANTILE,
            Detail::Standard | Detail::Histograms => quantile != FULL_QUANTILE,
            Detail::Full => true,
        };
        if !shown {
            return;
        }
        let (Some(mi), Some(qi)) = (
            BASELINE_METRICS.iter().position(|m| *m == metric),
            BASELINE_QUANTILES.iter().position(|q| *q == quantile),
        ) else {
            return;
        };
        self.with_target(t, |h| h.baseline[mi][qi] = seconds.into());
    }

    /// Sets a target's breaker state (0 closed, 1 half-open, 2 open).
    pub fn set_circuit(&self, t: &Target, state: i64) {
        self.with_target(t, |h| h.circuit = Gauge::from(state as f64));
    }

    /// Sets whether a target is flapping.
    pub fn set_flapping(&self, t: &Target, flapping: bool) {
        self.with_target(t, |h| h.flapping = Gauge::from(if flapping { 1.0 } else { 0.0 }));
    }

    /// Exposes per-target gauges only for the targets `roster` gives this replica (set once).
    pub fn follow_roster(&self, roster: crate::decide::roster::SharedRoster) {
        let _ = self.roster.set(roster);
    }

    /// Sets the region's live members and whether this one leads.
    pub fn set_members(&self, live: usize, leads: bool) {
        self.replicas.set(live, leads);
    }

    /// Sets a provider's remaining credit.
    pub fn set_credit(&self, provider: &str, usd: f64) {
        self.credit.with_label_values(&[provider, &self.region]).set(usd);
    }

    /// Publishes the thresholds the config sets (`balance.min_usd` of every watched provider,
    /// `baseline.failover_factor`, `alerts.latency_factor`, `ratelimit.low_fraction`), so the Prometheus rules and the
    /// dashboards compare with the deployment's own numbers instead of constants of their own.
    pub fn set_thresholds(&self, config: &crate::config::Config) {
        let t = &self.thresholds;
        let region = self.region.as_str();
        t.failover_factor.with_label_values(&[region]).set(config.baseline.failover_factor);
        t.latency_factor.with_label_values(&[region]).set(config.alerts.latency_factor);
        t.ratelimit_low.with_label_values(&[region]).set(config.ratelimit.low_fraction);
        t.credit_min.reset();
        for (provider, balance) in config.credit_watch() {
            t.credit_min.with_label_values(&[provider.name.as_str(), region]).set(balance.min_usd);
        }
    }

    /// Creates the alert, delivery-failure and abandoned counters of every channel at zero, for
    /// every alert kind, so `increase()` and `absent()` see them before the first alert.
    pub fn register_alert_channels(&self, channels: &[String]) {
        for channel in channels {
            self.delivery_failures.with_label_values(&[channel, &self.region]);
            self.abandoned.with_label_values(&[channel, &self.region]);
            for kind in crate::decide::alert::AlertKind::ALL {
                self.alerts.with_label_values(&[kind.as_str(), channel, &self.region]);
            }
        }
    }

    /// Counts a delivered alert notification.
    pub fn alert_sent(&self, kind: &str, channel: &str) {
        self.alerts.with_label_values(&[kind, channel, &self.region]).inc();
    }

    /// Counts a failed delivery attempt.
    pub fn delivery_failed(&self, channel: &str) {
        self.delivery_failures.with_label_values(&[channel, &self.region]).inc();
    }

    /// Counts an alert notification given up on a channel.
    pub fn alert_abandoned(&self, channel: &str) {
        self.abandoned.with_label_values(&[channel, &self.region]).inc();
    }

    /// Sets the spool backlog.
    pub fn set_spooled(&self, n: u64) {
        self.spooled.with_label_values(&[&self.region]).set(to_i64(n));
    }

    /// Brings `vigil_samples_stored_total` up to `n`, the writer's count since start.
    pub fn set_stored(&self, n: u64) {
        // Under the handle lock, so two scrapes at once cannot both add the same difference.
        let _guard = self.lock();
        let now = self.stored.get();
        if n > now {
            self.stored.inc_by(n - now);
        }
    }

    /// Sets the alert outbox depth.
    pub fn set_outbox_depth(&self, n: i64) {
        self.outbox_depth.with_label_values(&[&self.region]).set(n);
    }

    /// Publishes the adaptive probe plan: each target's interval and the day's projected spend.
    pub fn set_probe_plan(&self, plan: &crate::decide::adaptive::ProbePlan, targets: &[Target]) {
        let a = &self.adaptive;
        a.budget.with_label_values(&[&self.region]).set(plan.budget_usd);
        a.projected.with_label_values(&[&self.region]).set(plan.projected_usd);
        let mut map = self.lock();
        // The planner's plan lists its targets in their order: read side by side, no target's id
        // is spelled (10,000 a minute); where they differ, the target is looked up by its id.
        for (i, t) in targets.iter().enumerate() {
            let beside = plan.targets.get(i).filter(|p| t.has_id(&p.target));
            let Some(p) = beside.or_else(|| plan.get(&t.id())) else { continue };
            let every = Gauge::from(p.every.as_secs_f64());
            match map.get_mut(t) {
                Some(s) => s.interval = every,
                None => map.entry(t.clone()).or_default().interval = every,
            }
        }
    }

    /// Prometheus text exposition of everything.
    pub fn render(&self) -> String {
        let mut out = Out::text(self.last_len.load(Ordering::Relaxed) + 4096);
        self.render_into(&mut out);
        self.last_len.store(out.text.len(), Ordering::Relaxed);
        out.into_text()
    }

    /// The exposition gzip-compressed as it is written, never held whole as text; `None` only
    /// if the compressor failed. The per-target map stays locked while its text is compressed
    /// (level 1, tens of ms at 10,000 targets): a sample observed meanwhile waits that long to
    /// be counted, as it waited for the render alone before.
    pub fn render_gzip(&self) -> Option<Vec<u8>> {
        let mut out = Out::gzip(self.last_gzip_len.load(Ordering::Relaxed) + 4096, exposition::CHUNK);
        self.render_into(&mut out);
        let body = out.finish_gzip()?;
        self.last_gzip_len.store(body.len(), Ordering::Relaxed);
        Some(body)
    }

    fn render_into(&self, out: &mut Out) {
        let targets = self.lock();
        // With peers, the owned targets are decided once per scrape (not once per gauge family);
        // alone, a replica shows every target and hashes nothing.
        let now = chrono::Utc::now();
        let owned: Option<std::collections::HashSet<&Target>> = self.roster.get().and_then(|r| {
            r.read().ok().filter(|r| r.peers() > 0).map(|r| targets.keys().filter(|t| r.owns(&t.id(), now)).collect())
        });
        let shown = |t: &Target| owned.as_ref().is_none_or(|o| o.contains(t));
        targets::render(out, &targets, self.bounds, &shown);
        drop(targets);
        // Encoding into a String cannot fail for the text format.
        let _ = TextEncoder::new().encode_utf8(&self.registry.gather(), &mut out.text);
        out.spill();
    }
}

/// The model-change canary (`crate::vocab::canary`): its runs never touch the probe series above.
struct CanaryMetrics {
    runs: IntCounterVec,
    score: GaugeVec,
    last_run: GaugeVec,
}

impl CanaryMetrics {
    fn new() -> Result<Self, prometheus::Error> {
        let with = |extra: &[&'static str]| -> Vec<&'static str> {
            TARGET_LABELS.iter().copied().chain(extra.iter().copied()).collect()
        };
        Ok(CanaryMetrics {
            runs: IntCounterVec::new(
                Opts::new("vigil_canary_runs_total", "Model-change canary runs, by outcome."),
                &with(&["outcome"]),
            )?,
            score: GaugeVec::new(
                Opts::new("vigil_canary_score", "Exact-match score (0..1) of the target's last completed canary run."),
                &TARGET_LABELS,
            )?,
            last_run: GaugeVec::new(
                Opts::new("vigil_canary_last_run_timestamp_seconds", "Unix time of the target's last canary run."),
                &TARGET_LABELS,
            )?,
        })
    }

    fn register(&self, registry: &Registry) -> Result<(), prometheus::Error> {
        registry.register(Box::new(self.runs.clone()))?;
        registry.register(Box::new(self.score.clone()))?;
        registry.register(Box::new(self.last_run.clone()))?;
        Ok(())
    }
}

impl Metrics {
    /// Records one golden check run: its verdict, and whether the check passes.
    pub fn observe_check(&self, run: &crate::vocab::check::CheckRun) {
        self.golden.observe(run);
    }

    /// Records one long-prompt probe run: its outcome, and for a successful run its TTFT.
    pub fn observe_workload(&self, run: &crate::vocab::workload::WorkloadRun) {
        self.workloads.observe(run);
    }

    /// Records one canary run: its outcome, and for a completed run its score.
    pub fn observe_canary(&self, run: &crate::vocab::canary::CanaryRun) {
        let s = &run.sample;
        let l = labels(&s.target);
        let c = &self.canary;
        c.runs.with_label_values(&[l[0], l[1], l[2], l[3], s.outcome.as_str()]).inc();
        c.last_run.with_label_values(&l).set(s.started_at.timestamp() as f64);
        if !s.outcome.is_failure() {
            c.score.with_label_values(&l).set(run.score());
        }
    }
}

/// The configured thresholds the rules in deploy/prometheus/rules.yml read
/// ([`Metrics::set_thresholds`]).
struct ThresholdMetrics {
    credit_min: GaugeVec,
    failover_factor: GaugeVec,
    latency_factor: GaugeVec,
    ratelimit_low: GaugeVec,
}

impl ThresholdMetrics {
    fn new() -> Result<Self, prometheus::Error> {
        Ok(ThresholdMetrics {
            credit_min: GaugeVec::new(
                Opts::new("vigil_credit_min_usd", "balance.min_usd: credit_low fires under this balance, in USD."),
                &["provider", "region"],
            )?,
            failover_factor: GaugeVec::new(
                Opts::new(
                    "vigil_baseline_failover_factor",
                    "baseline.failover_factor: a TTFB or TTFT above this times its baseline P95 is over the failover line.",
                ),
                &["region"],
            )?,
            latency_factor: GaugeVec::new(
                Opts::new(
                    "vigil_alert_latency_factor",
                    "alerts.latency_factor: a probe slower than this times its baseline P95 counts towards latency_degraded.",
                ),
                &["region"],
            )?,
            ratelimit_low: GaugeVec::new(
                Opts::new(
                    "vigil_ratelimit_low_fraction",
                    "ratelimit.low_fraction: ratelimit_low fires when a target's rate-limit headroom ratio is under this.",
                ),
                &["region"],
            )?,
        })
    }

    fn register(&self, registry: &Registry) -> Result<(), prometheus::Error> {
        registry.register(Box::new(self.credit_min.clone()))?;
        registry.register(Box::new(self.failover_factor.clone()))?;
        registry.register(Box::new(self.latency_factor.clone()))?;
        registry.register(Box::new(self.ratelimit_low.clone()))?;
        Ok(())
    }
}

/// Cost-aware adaptive probing (`crate::decide::adaptive`): kept in its own block. Each target's
/// interval is a per-target series ([`targets`]).
struct AdaptiveMetrics {
    projected: GaugeVec,
    budget: GaugeVec,
}

impl AdaptiveMetrics {
    fn new() -> Result<Self, prometheus::Error> {
        Ok(AdaptiveMetrics {
            projected: GaugeVec::new(
                Opts::new(
                    "vigil_probe_projected_spend_usd",
                    "Probe spend today (UTC) so far plus the plan's projection to the end of the day.",
                ),
                &["region"],
            )?,
            budget: GaugeVec::new(
                Opts::new("vigil_probe_budget_usd", "probe.daily_budget_usd, the spend the plan keeps under."),
                &["region"],
            )?,
        })
    }

    fn register(&self, registry: &Registry, region: &str) -> Result<(), prometheus::Error> {
        registry.register(Box::new(self.projected.clone()))?;
        registry.register(Box::new(self.budget.clone()))?;
        self.projected.with_label_values(&[region]).set(0.0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> Target {
        of_model("m")
    }

    fn of_model(model: &str) -> Target {
        Target::new("p".into(), model.into(), None, "eu".into())
    }

    /// With a peer, a replica writes gauges only for the targets it owns and counters for all;
    /// the two replicas' gauges cover every target once between them.
    #[test]
    fn with_replicas_each_target_s_gauges_come_from_its_owner_only() {
        use crate::decide::roster::Roster;
        use crate::vocab::member::Member;
        let now = chrono::Utc::now();
        let member = |id: &str| Member {
            region: "eu".into(),
            id: id.into(),
            host: "h".into(),
            started_at: now - chrono::Duration::hours(1),
            heartbeat_at: now,
            active_from: now - chrono::Duration::hours(1),
        };
        let rows = vec![member("a"), member("b")];
        let targets: Vec<Target> = (0..40).map(|i| of_model(&format!("m{i}"))).collect();
        let mut gauges_of = Vec::new();
        for me in ["a", "b"] {
            let m = Metrics::new("eu").expect("registry");
            let roster = Roster::read(member(me), rows.clone(), now, std::time::Duration::from_secs(60));
            m.follow_roster(std::sync::Arc::new(std::sync::RwLock::new(roster)));
            for t in &targets {
                let mut s = Sample::new(t.clone(), now, now);
                s.ttft_ms = Some(300.0);
                m.observe(&s);
                m.set_circuit(t, 0);
            }
            let text = m.render();
            let count = |prefix: &str| text.lines().filter(|l| l.starts_with(prefix)).count();
            assert_eq!(count("vigil_probes_total{"), 40, "counters for every target it probed");
            let shown: Vec<String> = text
                .lines()
                .filter(|l| l.starts_with("vigil_circuit_state{"))
                .filter_map(|l| l.split("model=\"").nth(1)?.split('"').next().map(String::from))
                .collect();
            assert!(!shown.is_empty() && shown.len() < 40, "{me} owns a share: {shown:?}");
            assert_eq!(count("vigil_probe_success{"), shown.len());
            gauges_of.extend(shown);
        }
        assert_eq!(gauges_of.len(), 40, "no target's gauges on both replicas");
        gauges_of.sort();
        gauges_of.dedup();
        assert_eq!(gauges_of.len(), 40, "every target's gauges on one of them");
    }

    #[test]
    fn the_gzip_exposition_is_the_text_compressed_a_chunk_at_a_time() {
        use std::io::Read;
        let m = Metrics::new("eu").expect("registry");
        let now = chrono::Utc::now();
        for i in 0..50 {
            let mut s = Sample::new(of_model(&format!("m{i}")), now, now);
            s.ttfb_ms = Some(f64::from(i) * 7.5);
            s.ttft_ms = Some(300.0 + f64::from(i));
            m.observe(&s);
        }
        // The process's own figures (CPU, memory, threads) move between two renders.
        let steady = |text: &str| text.lines().filter(|l| !l.starts_with("process_")).collect::<Vec<_>>().join("\n");
        let text = steady(&m.render());
        let unzip = |body: &[u8]| {
            let mut back = String::new();
            flate2::read::GzDecoder::new(body).read_to_string(&mut back).expect("a gzip stream");
            steady(&back)
        };
        assert_eq!(unzip(&m.render_gzip().expect("compressed")), text);
        // Chunks far smaller than the text: it is handed over in many pieces, never held whole.
        let mut out = Out::gzip(0, 100);
        m.render_into(&mut out);
        assert!(out.text.len() < 100 + 512, "at most a chunk and a line wait: {}", out.text.len());
        assert_eq!(unzip(&out.finish_gzip().expect("compressed")), text);
        assert!(text.len() > 20_000, "the text spans many chunks: {}", text.len());
    }

    #[test]
    fn baselines_are_plain_gauges_labelled_q() {
        let m = Metrics::new("eu").expect("registry");
        let t = target();
        m.set_baseline(&t, "ttft", "0.95", Some(0.312));
        m.set_baseline(&t, "ttft", "0.5", Some(0.2));
        let text = m.render();
        assert!(text.contains("# TYPE vigil_baseline_seconds gauge\n"), "{text}");
        assert!(
            text.contains(
                r#"vigil_baseline_seconds{metric="ttft",model="m",provider="p",q="0.95",region="eu",route=""} 0.312"#
            ),
            "{text}"
        );
        assert!(text.contains(r#"q="0.5""#), "the P50 by default: {text}");
        let compact = Metrics::with_detail("eu", Detail::Compact).expect("registry");
        compact.set_baseline(&t, "ttft", "0.5", Some(0.2));
        compact.set_baseline(&t, "ttft", "0.99", Some(0.9));
        assert!(!compact.render().contains("vigil_baseline_seconds{"), "compact keeps only the P95");
        m.set_baseline(&t, "ttft", "0.99", Some(0.9));
        assert!(!m.render().contains(r#"q="0.99""#), "the P99 needs full");
        m.set_baseline(&t, "ttft", "0.95", None);
        m.set_baseline(&t, "ttft", "0.5", None);
        assert!(!m.render().contains("vigil_baseline_seconds{"), "a baseline that went away is removed");
        let full = Metrics::with_detail("eu", Detail::Full).expect("registry");
        full.set_baseline(&t, "ttfb", "0.5", Some(0.1));
        assert!(full.render().contains(r#"q="0.5""#), "full detail keeps every quantile");
    }

    #[test]
    fn configured_thresholds_are_exported_for_the_rules() {
        let text = "[[provider]]\nname = \"s\"\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1\"\napi_key_env = \"K\"\nmodels = [\"m\"]\nbalance = { min_usd = 5.0 }\n[baseline]\nfailover_factor = 3.0\n[alerts]\nlatency_factor = 1.75\n";
        let env: std::collections::BTreeMap<String, String> = [("K".to_string(), "sk-test-k".to_string())].into();
        let config = crate::config::Config::from_toml(text, &env).expect("valid");
        let m = Metrics::new("eu").expect("registry");
        m.set_thresholds(&config);
        let text = m.render();
        for line in [
            r#"vigil_credit_min_usd{provider="s",region="eu"} 5"#,
            r#"vigil_baseline_failover_factor{region="eu"} 3"#,
            r#"vigil_alert_latency_factor{region="eu"} 1.75"#,
            r#"vigil_ratelimit_low_fraction{region="eu"} 0.1"#,
        ] {
            assert!(text.contains(line), "{line} missing:\n{text}");
        }
    }

    #[test]
    fn success_and_last_success_follow_the_outcome() {
        let m = Metrics::new("eu").expect("registry");
        let t = target();
        let at = chrono::DateTime::from_timestamp(1_700_000_000, 0).expect("time");
        let mut s = Sample::new(t.clone(), at, at);
        s.outcome = Outcome::Ok;
        s.ttfb_ms = Some(150.0);
        m.observe(&s);
        let text = m.render();
        assert!(text.contains(r#"vigil_probe_success{model="m",provider="p",region="eu",route=""} 1"#), "{text}");
        assert!(
            text.contains(
                r#"vigil_probe_last_success_timestamp_seconds{model="m",provider="p",region="eu",route=""} 1700000000"#
            ),
            "{text}"
        );
        let later = at + chrono::Duration::seconds(60);
        let mut failed = Sample::new(t, later, later);
        failed.outcome = Outcome::Timeout;
        m.observe(&failed);
        let text = m.render();
        assert!(text.contains(r#"vigil_probe_success{model="m",provider="p",region="eu",route=""} 0"#), "{text}");
        assert!(text.contains("} 1700000000\n"), "the last success time stays: {text}");
        assert!(text.contains(r#"outcome="timeout""#), "{text}");
    }

    #[test]
    fn rate_limit_gauges_keep_the_last_reading_per_kind_and_compact_keeps_remaining_and_ratio() {
        use crate::vocab::ratelimit::{Allowance, Headroom};
        let t = target();
        let at = chrono::DateTime::from_timestamp(1_700_000_000, 0).expect("time");
        let mut s = Sample::new(t.clone(), at, at);
        s.ratelimit = Headroom {
            requests: Some(Allowance {
                remaining: Some(5),
                limit: Some(100),
                reset_at: Some(at + chrono::Duration::seconds(30)),
            }),
            tokens: Some(Allowance { remaining: Some(7000), limit: None, reset_at: None }),
        };
        let line = |name: &str, kind: &str, v: &str| {
            format!(r#"{name}{{kind="{kind}",model="m",provider="p",region="eu",route=""}} {v}"#)
        };
        for (detail, full) in [(Detail::Standard, true), (Detail::Compact, false)] {
            let m = Metrics::with_detail("eu", detail).expect("registry");
            m.observe(&s);
            let mut failed = Sample::new(t.clone(), at, at);
            failed.outcome = Outcome::Timeout;
            m.observe(&failed);
            let text = m.render();
            assert!(text.contains("# TYPE vigil_ratelimit_remaining gauge\n"), "{text}");
            assert!(text.contains(&line("vigil_ratelimit_remaining", "requests", "5")), "{text}");
            assert!(text.contains(&line("vigil_ratelimit_headroom_ratio", "requests", "0.05")), "{text}");
            assert!(text.contains(&line("vigil_ratelimit_remaining", "tokens", "7000")), "no limit: {text}");
            assert!(!text.contains(r#"vigil_ratelimit_headroom_ratio{kind="tokens""#), "no limit, no ratio: {text}");
            assert_eq!(text.contains(&line("vigil_ratelimit_limit", "requests", "100")), full, "{text}");
            let reset = line("vigil_ratelimit_reset_timestamp_seconds", "requests", "1700000030");
            assert_eq!(text.contains(&reset), full, "{text}");
        }
    }

    #[test]
    fn stored_is_a_counter_and_alert_counters_start_at_zero() {
        let m = Metrics::new("eu").expect("registry");
        m.set_stored(5);
        m.set_stored(3);
        m.register_alert_channels(&["ops".to_string()]);
        let text = m.render();
        assert!(text.contains("# TYPE vigil_samples_stored_total counter\n"), "{text}");
        assert!(text.contains(r#"vigil_samples_stored_total{region="eu"} 5"#), "never goes down: {text}");
        assert!(text.contains(r#"vigil_alerts_total{channel="ops",kind="errors",region="eu"} 0"#), "{text}");
        assert!(text.contains(r#"vigil_alert_delivery_failures_total{channel="ops",region="eu"} 0"#), "{text}");
        assert!(text.contains(r#"vigil_alerts_abandoned_total{channel="ops",region="eu"} 0"#), "{text}");
        #[cfg(target_os = "linux")]
        assert!(text.contains("process_resident_memory_bytes "), "{text}");
    }
}
