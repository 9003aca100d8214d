//! The one place the order of the stages lives: every sample is handed to the store writer
//! first (so nothing later can lose it), counted in the metrics, then fed to baselines and
//! breakers (and from there to alerts). A periodic tick moves breakers, publishes snapshots for
//! readers and hands state to the storage link.
//!
//! The pipeline never awaits the database: records go to the [`Link`](crate::store::link) and
//! its answers (stored state, other regions' samples, credit readings) are picked up between
//! samples, so decisions, metrics and alerts keep running from memory whatever storage does.
//! A panic while judging one sample is caught, logged and counted; the sample is already with
//! the writer and the stages keep their state.

use crate::alert::rules::{self, AlertEngine, BreakerChange};
use crate::baseline::Metric;
use crate::metrics::Metrics;
use crate::monitor::{Monitor, SharedSnapshot};
use crate::sample::Sample;
use crate::store::link::{Context, LinkHandle, Record, Reply};
use crate::target::Target;
use crate::watchdog::Liveness;
use chrono::{DateTime, Utc};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// How often snapshots are rebuilt and breakers ticked.
const PUBLISH_EVERY: Duration = Duration::from_secs(1);
/// How often rollups and breaker states are handed to the link.
const PERSIST_EVERY: Duration = Duration::from_secs(60);
/// How long another region's last sample stays on the status page after it stops reporting.
const ELSEWHERE_SHOWN_FOR: chrono::Duration = chrono::Duration::hours(1);

/// Consumes samples from the scheduler and fans them out in a fixed order.
pub struct Pipeline {
    metrics: Arc<Metrics>,
    writer: mpsc::Sender<Sample>,
    monitor: Monitor,
    link: LinkHandle,
    snapshot: SharedSnapshot,
    liveness: Arc<Liveness>,
    /// False until stored state is restored: persisting before would overwrite it.
    loaded: bool,
    /// A load or an expiry read is under way (asked, not yet answered).
    loading: bool,
    expiring: bool,
    alerts: Alerting,
    /// What the link last read from shared storage.
    context: Context,
    /// The last sample seen of each target in each other region, as shown on the status page.
    elsewhere: std::collections::HashMap<Target, Sample>,
    provider_status: crate::provider_status::SharedProviderStatus,
    /// Canary runs from the canary task, and where the latest of each target is published.
    canary: Option<(mpsc::Receiver<crate::canary::CanaryRun>, crate::canary::SharedCanary)>,
    canary_shown: crate::canary::SharedCanary,
}

/// The alert stage: samples and breaker changes of one probe interval are evaluated together,
/// so `region_unhealthy` sees a whole round, and the notifications go to the outbox.
pub struct Alerting {
    engine: AlertEngine,
    channels: Vec<String>,
    region: String,
    round: Vec<(Sample, rules::Baseline)>,
    changes: Vec<BreakerChange>,
    every: Duration,
    /// Providers whose credit is watched: (name, `balance.min_usd`, `balance.warn_hours`).
    credit: Vec<(String, f64, f64)>,
    /// Targets flapping now, shared with readers (status page, `/v1/targets`, export).
    flapping: crate::alert::FlappingSet,
    flapping_before: std::collections::BTreeSet<Target>,
    /// Canary runs since the last evaluation (judged for `model_changed` only).
    canaries: Vec<crate::canary::CanaryRun>,
}

impl Alerting {
    /// An alert stage evaluating once per `every` (the probe interval) for `channels`.
    pub fn new(engine: AlertEngine, channels: Vec<String>, region: &str, every: Duration) -> Self {
        Alerting {
            engine,
            channels,
            region: region.to_string(),
            round: Vec::new(),
            changes: Vec::new(),
            every,
            credit: Vec::new(),
            flapping: crate::alert::FlappingSet::default(),
            flapping_before: Default::default(),
            canaries: Vec::new(),
        }
    }

    /// The published set of flapping targets (readers call `is_flapping`).
    pub fn flapping(&self) -> crate::alert::FlappingSet {
        self.flapping.clone()
    }

    /// Also evaluates `credit_low` from the stored balance readings of these providers.
    pub fn with_credit(mut self, providers: &[crate::config::ProviderConfig]) -> Self {
        self.credit = providers
            .iter()
            .filter_map(|p| p.balance.as_ref().map(|b| (p.name.clone(), b.min_usd, b.warn_hours)))
            .collect();
        self
    }

    /// The providers whose credit readings the link must read.
    pub fn credit_providers(&self) -> Vec<String> {
        self.credit.iter().map(|(p, _, _)| p.clone()).collect()
    }
}

/// What the pipeline is built from.
pub struct Stages {
    /// Prometheus registry.
    pub metrics: Arc<Metrics>,
    /// The sample writer's channel.
    pub writer: mpsc::Sender<Sample>,
    /// Baselines and breakers.
    pub monitor: Monitor,
    /// Whether the monitor's stored state was restored at start.
    pub loaded: bool,
    /// The storage link's pipeline end.
    pub link: LinkHandle,
    /// Where snapshots are published for readers.
    pub snapshot: SharedSnapshot,
    /// Heartbeats for `/readyz`.
    pub liveness: Arc<Liveness>,
    /// The alert stage.
    pub alerts: Alerting,
    /// The providers' own status pages, as last read (notes on alerts).
    pub provider_status: crate::provider_status::SharedProviderStatus,
}

impl Pipeline {
    /// A pipeline over its stages.
    pub fn new(s: Stages) -> Self {
        let mut monitor = s.monitor;
        monitor.watch_flapping(s.alerts.flapping());
        Pipeline {
            metrics: s.metrics,
            writer: s.writer,
            monitor,
            link: s.link,
            snapshot: s.snapshot,
            liveness: s.liveness,
            loaded: s.loaded,
            loading: false,
            expiring: false,
            alerts: s.alerts,
            context: Context::default(),
            elsewhere: Default::default(),
            provider_status: s.provider_status,
            canary: None,
            canary_shown: Default::default(),
        }
    }

    /// Also takes canary runs from `rx`: each is stored through the link (`canary_runs`, never
    /// `samples`), published in `shown` for readers and judged for `model_changed`; none reaches
    /// the baselines, the breakers or the latency metrics.
    pub fn with_canary(
        mut self,
        rx: mpsc::Receiver<crate::canary::CanaryRun>,
        shown: crate::canary::SharedCanary,
    ) -> Self {
        self.canary_shown = shown.clone();
        self.canary = Some((rx, shown));
        self
    }

    /// Takes one canary run (the step tests drive directly).
    pub fn process_canary(&mut self, run: crate::canary::CanaryRun) {
        self.canary_shown.publish(&run);
        self.link.store(Record::Canary(vec![run.clone()]));
        self.alerts.canaries.push(run);
    }

    /// Evaluates the alert rules over the samples and breaker changes since the last call and
    /// hands the notifications to the link for the outbox (the step tests drive directly).
    pub fn evaluate_alerts(&mut self, now: DateTime<Utc>) {
        let a = &mut self.alerts;
        let round = std::mem::take(&mut a.round);
        let changes = std::mem::take(&mut a.changes);
        let canaries = std::mem::take(&mut a.canaries);
        let recent = now - chrono::Duration::from_std(a.every * 3).unwrap_or_default();
        // The scope: the other regions' published view of each target (read by the link).
        let elsewhere = crate::alert::scope::elsewhere_from(&self.context.statuses, &a.region, recent);
        let probes = round
            .iter()
            .map(|(sample, baseline)| {
                let t = &sample.target;
                let key = (t.provider.clone(), t.model.clone(), t.route.clone());
                rules::Probe {
                    sample,
                    baseline: *baseline,
                    elsewhere: elsewhere.get(&key).copied().unwrap_or_default(),
                }
            })
            .collect();
        let credits = a
            .credit
            .iter()
            .filter_map(|(provider, min_usd, warn_hours)| {
                let readings = self.context.credits.get(provider).filter(|r| !r.is_empty())?;
                Some(rules::CreditCheck {
                    provider: provider.clone(),
                    readings: readings.iter().map(|b| (b.at, b.remaining_usd)).collect(),
                    min_usd: *min_usd,
                    warn_hours: *warn_hours,
                })
            })
            .collect();
        let canaries = canaries.iter().collect();
        let mut notes = a.engine.evaluate(&rules::Round { probes, breaker: changes, credits, canaries }, now);
        // What the provider itself admits goes with the page ("OpenAI reports: …").
        if let Ok(snap) = self.provider_status.read() {
            for alert in notes.iter_mut().flat_map(|n| n.alerts.iter_mut()) {
                if alert.status != crate::alert::AlertStatus::Firing || alert.provider.is_empty() {
                    continue;
                }
                if let Some(note) = crate::provider_status::annotation_for(&alert.provider, &snap, now) {
                    alert.summary = format!("{} — {note}", alert.summary);
                }
            }
        }
        let flapping = a.engine.flapping_targets();
        for t in &flapping {
            self.metrics.set_flapping(t, true);
        }
        a.flapping.set(flapping);
        for t in a.flapping_before.difference(&a.flapping.targets()) {
            self.metrics.set_flapping(t, false);
        }
        a.flapping_before = a.flapping.targets();
        // This region's view of each target, for the other regions' scope.
        self.link.store(Record::TargetStatus(a.engine.target_statuses(now)));
        let items = crate::alert::outbox::items_for(&notes, &a.channels, now);
        if !items.is_empty() {
            self.link.store(Record::Outbox(items));
        }
        self.link.store(Record::AlertState { region: a.region.clone(), state: a.engine.state_json() });
    }

    /// Processes one sample (the step tests drive directly). A panic in the decision stages is
    /// caught here: the sample is already with the writer, and the next sample is judged as usual.
    pub async fn process(&mut self, sample: Sample) {
        // The writer spools when storage is down, so this only waits if the writer itself is stuck.
        if self.writer.send(sample.clone()).await.is_err() {
            tracing::error!(target = %sample.target, "store writer stopped; sample not stored");
        }
        let target = sample.target.clone();
        let judged = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.judge(sample)));
        if let Err(payload) = judged {
            let why = crate::watchdog::panic_message(payload);
            tracing::error!(target = %target, provider = %target.provider, model = %target.model,
                region = %target.region, panic = %why, "judging a sample panicked; sample stored, stages kept");
            self.metrics.task_panicked("pipeline");
        }
        self.liveness.processed(Utc::now());
    }

    /// Runs one periodic step; a panic in it is logged and counted, and the loop goes on.
    fn guarded(&mut self, step: &str, f: impl FnOnce(&mut Self)) {
        if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(self))) {
            let why = crate::watchdog::panic_message(payload);
            tracing::error!(step, panic = %why, "a pipeline step panicked; stages kept");
            self.metrics.task_panicked("pipeline");
        }
    }

    fn judge(&mut self, sample: Sample) {
        self.metrics.observe(&sample);
        if sample.outcome.is_failure() {
            tracing::warn!(
                target = %sample.target, provider = %sample.target.provider, model = %sample.target.model,
                region = %sample.target.region, outcome = %sample.outcome, status = ?sample.status,
                error = sample.error.as_deref().unwrap_or(""), "probe failed"
            );
        } else {
            tracing::debug!(
                target = %sample.target, outcome = %sample.outcome, ttfb_ms = ?sample.ttfb_ms.map(|v| v.round()),
                ttft_ms = ?sample.ttft_ms.map(|v| v.round()), "probe ok"
            );
        }
        let now = Utc::now();
        // An open breaker whose wait is over is half-open before its deciding probe is judged,
        // so the history always shows open → half_open → verdict.
        let mut transitions = self.monitor.tick(now);
        if let Some(t) = self.monitor.observe(&sample, now) {
            transitions.push((sample.target.clone(), t));
        }
        for (target, t) in transitions {
            self.record_transition(&target, t);
        }
        let baseline = rules::Baseline {
            ttfb_p95_ms: self.monitor.baseline(&sample.target, Metric::Ttfb, now).p95,
            ttft_p95_ms: self.monitor.baseline(&sample.target, Metric::Ttft, now).p95,
        };
        self.alerts.round.push((sample, baseline));
    }

    fn record_transition(&mut self, target: &Target, t: crate::breaker::Transition) {
        self.alerts.changes.push(BreakerChange {
            target: target.clone(),
            from: t.from,
            to: t.to,
            reason: t.reason.clone(),
        });
        tracing::warn!(target = %target, provider = %target.provider, model = %target.model, region = %target.region,
            from = %t.from, to = %t.to, reason = %t.reason, "circuit breaker");
        self.metrics.set_circuit(target, t.to.gauge());
        self.link.store(Record::Transition(t.to_record(target)));
        if let Some(b) = self.monitor.breaker(target) {
            self.link.store(Record::Breaker(b.to_record(target)));
        }
    }

    /// Ticks breakers and publishes a fresh snapshot for the HTTP layer and the gauges.
    pub fn publish(&mut self, now: DateTime<Utc>) {
        let transitions = self.monitor.tick(now);
        let mut snapshot = self.monitor.publish(now, Some(&self.metrics));
        // The status page keeps showing a region that went quiet, with its age, for a while.
        let shown_from = now - ELSEWHERE_SHOWN_FOR;
        self.elsewhere.retain(|_, s| s.started_at >= shown_from);
        let mut shown: Vec<Sample> = self.elsewhere.values().cloned().collect();
        shown.sort_by(|x, y| x.target.cmp(&y.target));
        snapshot.elsewhere = Arc::new(shown);
        if let Ok(mut s) = self.snapshot.write() {
            *s = snapshot;
        }
        for (target, t) in transitions {
            self.record_transition(&target, t);
        }
    }

    /// Hands changed rollups and breaker states to the link, and asks for what must be read
    /// back (stored state not yet restored; hours leaving the baseline window).
    pub fn persist(&mut self, now: DateTime<Utc>) {
        if !self.loaded {
            if !self.loading {
                self.loading = true;
                self.link.ask(self.monitor.load_query(now));
            }
            return;
        }
        for record in self.monitor.take_dirty() {
            self.link.store(record);
        }
        if !self.expiring {
            if let Some(q) = self.monitor.expiring_query(now) {
                self.expiring = true;
                self.link.ask(q);
            }
        }
    }

    /// Takes one answer of the link.
    pub fn on_reply(&mut self, reply: Reply, now: DateTime<Utc>) {
        match reply {
            Reply::LoadedHour(rollups) => self.monitor.restore_hour(&rollups, now),
            Reply::Loaded(breakers) => {
                self.monitor.restore_breakers(&breakers, now);
                self.loaded = true;
                self.loading = false;
                tracing::info!("stored baselines and breakers restored");
            }
            Reply::LoadFailed(e) => {
                self.loading = false;
                tracing::warn!(error = %e, "stored baselines still unreadable; not persisting over them");
            }
            Reply::Expiring { rollups, until } => {
                self.monitor.expire_with(&rollups, until);
                self.expiring = false;
            }
            Reply::ExpiringFailed(e) => {
                self.expiring = false;
                tracing::warn!(error = %e, "hours leaving the baseline window not read back; the window reaches further back until they are");
            }
            Reply::Context(c) => {
                self.elsewhere.extend(c.elsewhere.iter().map(|s| (s.target.clone(), s.clone())));
                self.context = c;
            }
        }
    }

    /// Runs until the scheduler's channel closes (after shutdown has drained every probe).
    pub async fn run(mut self, mut rx: mpsc::Receiver<Sample>) {
        let mut publish = tokio::time::interval(PUBLISH_EVERY);
        let mut persist = tokio::time::interval(PERSIST_EVERY);
        if self.loaded {
            persist.tick().await;
        }
        let every = self.alerts.every;
        let mut evaluate = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        let mut canary_rx = self.canary.take().map(|(rx, _)| rx);
        loop {
            let canary = async {
                match canary_rx.as_mut() {
                    Some(rx) => rx.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                sample = rx.recv() => match sample {
                    Some(s) => self.process(s).await,
                    None => break,
                },
                Some(run) = canary => self.guarded("canary", |p| p.process_canary(run)),
                Some(reply) = self.link.reply() => self.guarded("reply", |p| p.on_reply(reply, Utc::now())),
                _ = publish.tick() => self.guarded("publish", |p| p.publish(Utc::now())),
                _ = persist.tick() => self.guarded("persist", |p| p.persist(Utc::now())),
                _ = evaluate.tick() => self.guarded("evaluate", |p| p.evaluate_alerts(Utc::now())),
            }
        }
        while let Some(reply) = self.link.try_reply() {
            self.on_reply(reply, Utc::now());
        }
        let now = Utc::now();
        self.evaluate_alerts(now);
        self.publish(now);
        self.persist(now);
    }
}
