//! Every Prometheus metric vigil exports, defined once. Names and labels are a public contract
//! (SPEC.md); dashboards and alert rules depend on them.

use crate::sample::Sample;
use crate::target::Target;
use prometheus::{
    Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry, TextEncoder,
};

/// Per-target labels, in this order everywhere.
const TARGET_LABELS: [&str; 4] = ["provider", "model", "route", "region"];
/// Latency buckets resolving 50 ms to 30 s.
const LATENCY_BUCKETS: [f64; 22] = [
    0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 7.5, 10.0, 15.0, 20.0,
    30.0,
];
/// Scheduling lag buckets: the target is p99 < 50 ms, so resolve the milliseconds.
const LAG_BUCKETS: [f64; 12] = [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0];
/// The `# TYPE` line the encoder writes for the baseline gauge, and the one served instead.
const BASELINE_GAUGE_TYPE: &str = "# TYPE vigil_baseline_seconds gauge\n";
const BASELINE_UNTYPED_TYPE: &str = "# TYPE vigil_baseline_seconds untyped\n";

/// The registry and every metric in it.
pub struct Metrics {
    registry: Registry,
    ttfb: HistogramVec,
    ttft: HistogramVec,
    duration: HistogramVec,
    phase: GaugeVec,
    tokens_per_second: GaugeVec,
    probes: IntCounterVec,
    last_status: GaugeVec,
    cost: prometheus::CounterVec,
    baseline: GaugeVec,
    circuit: GaugeVec,
    flapping: GaugeVec,
    credit: GaugeVec,
    alerts: IntCounterVec,
    delivery_failures: IntCounterVec,
    spooled: IntGaugeVec,
    outbox_depth: IntGaugeVec,
    lag: HistogramVec,
    skipped: IntCounterVec,
    stored: IntGaugeVec,
    panics: IntCounterVec,
    records_spooled: IntGaugeVec,
    rejected: IntCounterVec,
    region: String,
    adaptive: AdaptiveMetrics,
}

fn labels(t: &Target) -> [&str; 4] {
    [&t.provider, &t.model, t.route_label(), &t.region]
}

impl Metrics {
    /// Creates and registers every metric.
    pub fn new(region: &str) -> Result<Metrics, prometheus::Error> {
        let registry = Registry::new();
        let hist = |name: &str, help: &str| {
            HistogramVec::new(HistogramOpts::new(name, help).buckets(LATENCY_BUCKETS.to_vec()), &TARGET_LABELS)
        };
        let with = |extra: &[&'static str]| -> Vec<&'static str> {
            TARGET_LABELS.iter().copied().chain(extra.iter().copied()).collect()
        };
        let m = Metrics {
            ttfb: hist("vigil_probe_ttfb_seconds", "Request sent to first response byte (status line).")?,
            ttft: hist("vigil_probe_ttft_seconds", "Request sent to first content token.")?,
            duration: hist("vigil_probe_duration_seconds", "Request sent to end of stream.")?,
            phase: GaugeVec::new(
                Opts::new(
                    "vigil_probe_phase_seconds",
                    "Phases of the last probe (dns, connect, tls, ttfb, ttft, total).",
                ),
                &with(&["phase"]),
            )?,
            tokens_per_second: GaugeVec::new(
                Opts::new("vigil_probe_tokens_per_second", "Generation speed after the first token, last probe."),
                &TARGET_LABELS,
            )?,
            probes: IntCounterVec::new(
                Opts::new("vigil_probes_total", "Probes run, by outcome."),
                &with(&["outcome"]),
            )?,
            last_status: GaugeVec::new(
                Opts::new("vigil_probe_last_status", "HTTP status of the last probe (0 when none arrived)."),
                &TARGET_LABELS,
            )?,
            cost: prometheus::CounterVec::new(
                Opts::new("vigil_probe_cost_usd_total", "What the probes cost, in USD."),
                &TARGET_LABELS,
            )?,
            baseline: GaugeVec::new(
                Opts::new("vigil_baseline_seconds", "Rolling-window percentiles of TTFB and TTFT."),
                &with(&["metric", "quantile"]),
            )?,
            circuit: GaugeVec::new(
                Opts::new("vigil_circuit_state", "Circuit breaker: 0 closed, 1 half-open, 2 open."),
                &TARGET_LABELS,
            )?,
            flapping: GaugeVec::new(
                Opts::new("vigil_target_flapping", "1 while the target flaps (alert changes are not paged), else 0."),
                &TARGET_LABELS,
            )?,
            credit: GaugeVec::new(
                Opts::new("vigil_credit_remaining_usd", "Provider credit left, in USD."),
                &["provider", "region"],
            )?,
            alerts: IntCounterVec::new(
                Opts::new("vigil_alerts_total", "Alert notifications delivered."),
                &["kind", "channel", "region"],
            )?,
            delivery_failures: IntCounterVec::new(
                Opts::new("vigil_alert_delivery_failures_total", "Failed alert delivery attempts."),
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
            lag: HistogramVec::new(
                HistogramOpts::new("vigil_probe_schedule_lag_seconds", "Probe start minus its scheduled time.")
                    .buckets(LAG_BUCKETS.to_vec()),
                &["region"],
            )?,
            skipped: IntCounterVec::new(
                Opts::new(
                    "vigil_probes_skipped_total",
                    "Probes not started because the previous probe of the target was still running.",
                ),
                &TARGET_LABELS,
            )?,
            stored: IntGaugeVec::new(
                Opts::new("vigil_samples_stored", "Samples written to storage since start."),
                &["region"],
            )?,
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
            region: region.to_string(),
            adaptive: AdaptiveMetrics::new()?,
            registry,
        };
        let build = GaugeVec::new(
            Opts::new("vigil_build_info", "Always 1; labels carry the version."),
            &["version", "region"],
        )?;
        build.with_label_values(&[env!("CARGO_PKG_VERSION"), region]).set(1.0);
        // Instance-level gauges exist from the start, so dashboards and absent() see them at zero.
        m.spooled.with_label_values(&[region]).set(0);
        m.outbox_depth.with_label_values(&[region]).set(0);
        m.stored.with_label_values(&[region]).set(0);
        m.records_spooled.with_label_values(&[region]).set(0);
        m.panics.with_label_values(&["pipeline", region]);
        for field in crate::probe::scrub::REJECTABLE_FIELDS {
            m.rejected.with_label_values(&[field, region]);
        }
        for c in [
            Box::new(m.ttfb.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(m.ttft.clone()),
            Box::new(m.duration.clone()),
            Box::new(m.phase.clone()),
            Box::new(m.tokens_per_second.clone()),
            Box::new(m.probes.clone()),
            Box::new(m.last_status.clone()),
            Box::new(m.cost.clone()),
            Box::new(m.baseline.clone()),
            Box::new(m.circuit.clone()),
            Box::new(m.flapping.clone()),
            Box::new(m.credit.clone()),
            Box::new(m.alerts.clone()),
            Box::new(m.delivery_failures.clone()),
            Box::new(m.spooled.clone()),
            Box::new(m.outbox_depth.clone()),
            Box::new(m.lag.clone()),
            Box::new(m.skipped.clone()),
            Box::new(m.stored.clone()),
            Box::new(m.panics.clone()),
            Box::new(m.records_spooled.clone()),
            Box::new(m.rejected.clone()),
            Box::new(build),
        ] {
            m.registry.register(c)?;
        }
        m.adaptive.register(&m.registry, region)?;
        Ok(m)
    }

    /// Records one sample.
    pub fn observe(&self, s: &Sample) {
        let l = labels(&s.target);
        self.probes.with_label_values(&[l[0], l[1], l[2], l[3], s.outcome.as_str()]).inc();
        self.last_status.with_label_values(&l).set(f64::from(s.status.unwrap_or(0)));
        self.lag.with_label_values(&[&self.region]).observe(s.schedule_lag_s());
        let secs = |v: Option<f64>| v.map(|ms| ms / 1000.0);
        if s.outcome == crate::sample::Outcome::Ok {
            if let Some(v) = secs(s.ttfb_ms) {
                self.ttfb.with_label_values(&l).observe(v);
            }
            if let Some(v) = secs(s.ttft_ms) {
                self.ttft.with_label_values(&l).observe(v);
            }
            if let Some(v) = secs(s.total_ms) {
                self.duration.with_label_values(&l).observe(v);
            }
        }
        let phases = [
            ("dns", s.dns_ms),
            ("connect", s.connect_ms),
            ("tls", s.tls_ms),
            ("proxy", s.proxy_ms),
            ("ttfb", s.ttfb_ms),
            ("ttft", s.ttft_ms),
            ("total", s.total_ms),
        ];
        for (phase, v) in phases {
            let g = self.phase.with_label_values(&[l[0], l[1], l[2], l[3], phase]);
            match secs(v) {
                Some(v) => g.set(v),
                // A phase that did not happen this time must not keep showing an old value.
                None => {
                    let _ = self.phase.remove_label_values(&[l[0], l[1], l[2], l[3], phase]);
                }
            }
        }
        match s.tokens_per_s {
            Some(v) => self.tokens_per_second.with_label_values(&l).set(v),
            None => {
                let _ = self.tokens_per_second.remove_label_values(&l);
            }
        }
        if let Some(c) = s.cost_usd.filter(|c| *c > 0.0) {
            self.cost.with_label_values(&l).inc_by(c);
        }
        for field in &s.rejected {
            self.rejected.with_label_values(&[*field, self.region.as_str()]).inc();
        }
    }

    /// Counts a panic caught inside `task`, which kept running.
    pub fn task_panicked(&self, task: &str) {
        self.panics.with_label_values(&[task, &self.region]).inc();
    }

    /// Sets how many records wait in the storage link's spool.
    pub fn set_records_spooled(&self, n: u64) {
        self.records_spooled.with_label_values(&[&self.region]).set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Makes every target visible at zero before its first probe, so rate() and absent() behave.
    pub fn register_target(&self, t: &Target) {
        let l = labels(t);
        // Only `ok` up front: other outcomes appear when first seen, keeping series per target low.
        self.probes.with_label_values(&[l[0], l[1], l[2], l[3], "ok"]);
        self.cost.with_label_values(&l);
        self.skipped.with_label_values(&l);
    }

    /// Counts a probe skipped because the previous one of the target was still running.
    pub fn skipped(&self, t: &Target) {
        self.skipped.with_label_values(&labels(t)).inc();
    }

    /// Sets a target's baseline quantile (`metric`: ttfb|ttft; `quantile`: 0.5|0.95|0.99), or clears it.
    pub fn set_baseline(&self, t: &Target, metric: &str, quantile: &str, seconds: Option<f64>) {
        let l = labels(t);
        let values = [l[0], l[1], l[2], l[3], metric, quantile];
        match seconds {
            Some(v) => self.baseline.with_label_values(&values).set(v),
            None => {
                let _ = self.baseline.remove_label_values(&values);
            }
        }
    }

    /// Sets a target's breaker state (0 closed, 1 half-open, 2 open).
    pub fn set_circuit(&self, t: &Target, state: i64) {
        self.circuit.with_label_values(&labels(t)).set(state as f64);
    }

    /// Sets whether a target is flapping.
    pub fn set_flapping(&self, t: &Target, flapping: bool) {
        self.flapping.with_label_values(&labels(t)).set(if flapping { 1.0 } else { 0.0 });
    }

    /// Sets a provider's remaining credit.
    pub fn set_credit(&self, provider: &str, usd: f64) {
        self.credit.with_label_values(&[provider, &self.region]).set(usd);
    }

    /// Counts a delivered alert notification.
    pub fn alert_sent(&self, kind: &str, channel: &str) {
        self.alerts.with_label_values(&[kind, channel, &self.region]).inc();
    }

    /// Counts a failed delivery attempt.
    pub fn delivery_failed(&self, channel: &str) {
        self.delivery_failures.with_label_values(&[channel, &self.region]).inc();
    }

    /// Sets the spool backlog.
    pub fn set_spooled(&self, n: u64) {
        self.spooled.with_label_values(&[&self.region]).set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Sets how many samples have been stored since start.
    pub fn set_stored(&self, n: u64) {
        self.stored.with_label_values(&[&self.region]).set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Sets the alert outbox depth.
    pub fn set_outbox_depth(&self, n: i64) {
        self.outbox_depth.with_label_values(&[&self.region]).set(n);
    }

    /// Publishes the adaptive probe plan: each target's interval and the day's projected spend.
    pub fn set_probe_plan(&self, plan: &crate::adaptive::ProbePlan, targets: &[Target]) {
        let a = &self.adaptive;
        a.budget.with_label_values(&[&self.region]).set(plan.budget_usd);
        a.projected.with_label_values(&[&self.region]).set(plan.projected_usd);
        for t in targets {
            if let Some(p) = plan.get(&t.id()) {
                a.interval.with_label_values(&labels(t)).set(p.every.as_secs_f64());
            }
        }
    }

    /// Prometheus text exposition of everything.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        // Encoding into a Vec cannot fail for the text format.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        let text = String::from_utf8(buf).unwrap_or_default();
        // promtool rejects a `quantile` label on anything but a summary. The baseline keeps the
        // SPEC's name and labels (dashboards and alert rules query them) and is declared untyped,
        // which promtool accepts and PromQL treats exactly like a gauge. The crate's encoder
        // cannot write untyped families, hence the edit of its output.
        text.replacen(BASELINE_GAUGE_TYPE, BASELINE_UNTYPED_TYPE, 1)
    }
}

/// Cost-aware adaptive probing (`crate::adaptive`): kept in its own block.
struct AdaptiveMetrics {
    interval: GaugeVec,
    projected: GaugeVec,
    budget: GaugeVec,
}

impl AdaptiveMetrics {
    fn new() -> Result<Self, prometheus::Error> {
        Ok(AdaptiveMetrics {
            interval: GaugeVec::new(
                Opts::new("vigil_probe_interval_seconds", "Time between two probes of the target in the current plan."),
                &TARGET_LABELS,
            )?,
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
        registry.register(Box::new(self.interval.clone()))?;
        registry.register(Box::new(self.projected.clone()))?;
        registry.register(Box::new(self.budget.clone()))?;
        self.projected.with_label_values(&[region]).set(0.0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn baselines_are_served_untyped_so_promtool_accepts_their_quantile_label() {
        let m = Metrics::new("eu").expect("registry");
        let t = Target { provider: "p".into(), model: "m".into(), route: None, region: "eu".into() };
        m.set_baseline(&t, "ttft", "0.95", Some(0.312));
        m.set_circuit(&t, 0);
        let text = m.render();
        assert!(text.contains("# TYPE vigil_baseline_seconds untyped\n"), "{text}");
        assert!(!text.contains("# TYPE vigil_baseline_seconds gauge"), "{text}");
        assert!(
            text.contains(r#"vigil_baseline_seconds{metric="ttft",model="m",provider="p",quantile="0.95",region="eu",route=""} 0.312"#),
            "{text}"
        );
        assert!(text.contains("# TYPE vigil_circuit_state gauge\n"), "other gauges stay gauges");
    }
}
