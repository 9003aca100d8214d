//! The one place the order of the stages lives: every sample is counted in the metrics, handed
//! to the store writer, then fed to baselines and breakers (and from there to alerts).
//! A periodic tick moves breakers, publishes snapshots for readers and persists state.

use crate::alert::rules::{self, AlertEngine, BreakerChange};
use crate::baseline::Metric;
use crate::metrics::Metrics;
use crate::monitor::{Monitor, SharedSnapshot};
use crate::sample::Sample;
use crate::store::Store;
use crate::target::Target;
use chrono::Utc;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// How often snapshots are rebuilt and breakers ticked.
const PUBLISH_EVERY: Duration = Duration::from_secs(1);
/// How often rollups and breaker states are written.
const PERSIST_EVERY: Duration = Duration::from_secs(60);
/// How long another region's last sample stays on the status page after it stops reporting.
const ELSEWHERE_SHOWN_FOR: chrono::Duration = chrono::Duration::hours(1);

/// Consumes samples from the scheduler and fans them out in a fixed order.
pub struct Pipeline {
    metrics: Arc<Metrics>,
    writer: Option<mpsc::Sender<Sample>>,
    monitor: Option<Monitor>,
    store: Option<Arc<dyn Store>>,
    snapshot: SharedSnapshot,
    /// False while stored state could not be loaded: persisting then would overwrite it.
    loaded: bool,
    alerts: Option<Alerting>,
    /// The last sample seen of each target in each other region, read with each alert evaluation.
    elsewhere: std::collections::HashMap<Target, Sample>,
    /// The same, as published for the status page.
    elsewhere_shown: Arc<Vec<Sample>>,
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
}

impl Pipeline {
    /// A pipeline feeding `metrics` and, when given, the store writer's channel.
    pub fn new(metrics: Arc<Metrics>, writer: Option<mpsc::Sender<Sample>>) -> Self {
        Pipeline {
            metrics,
            writer,
            monitor: None,
            store: None,
            snapshot: SharedSnapshot::default(),
            loaded: true,
            alerts: None,
            elsewhere: Default::default(),
            elsewhere_shown: Arc::default(),
        }
    }

    /// Adds the decision stage, its store for persistence and the snapshot readers share.
    /// `loaded` says whether the monitor's stored state was restored.
    pub fn with_monitor(
        mut self,
        monitor: Monitor,
        store: Arc<dyn Store>,
        snapshot: SharedSnapshot,
        loaded: bool,
    ) -> Self {
        self.monitor = Some(monitor);
        self.store = Some(store);
        self.snapshot = snapshot;
        self.loaded = loaded;
        self
    }

    /// Adds the alert stage.
    pub fn with_alerts(mut self, alerts: Alerting) -> Self {
        self.alerts = Some(alerts);
        self
    }

    /// Evaluates the alert rules over the samples and breaker changes since the last call and
    /// writes the notifications to the outbox (the step tests drive directly).
    pub async fn evaluate_alerts(&mut self) {
        let (Some(a), Some(store)) = (self.alerts.as_mut(), &self.store) else { return };
        let now = Utc::now();
        let round = std::mem::take(&mut a.round);
        let changes = std::mem::take(&mut a.changes);
        let recent = now - chrono::Duration::from_std(a.every * 3).unwrap_or_default();
        // The status page's view of other regions (their latest samples).
        match latest_elsewhere(store.as_ref(), &a.region, recent).await {
            Ok(latest) => self.elsewhere.extend(latest.into_iter().map(|s| (s.target.clone(), s))),
            Err(e) => tracing::debug!(error = %e, "other regions' samples not read"),
        }
        // The scope: publish this region's view of each target, read the others'.
        let mine = a.engine.target_statuses(now);
        let elsewhere = match exchange_target_status(store.as_ref(), &mine, recent).await {
            Ok(rows) => crate::alert::scope::elsewhere_from(&rows, &a.region, recent),
            Err(e) => {
                tracing::debug!(error = %e, "other regions' status not read; alerts are scoped regional");
                Default::default()
            }
        };
        // The status page keeps showing a region that went quiet, with its age, for a while.
        let shown_from = now - ELSEWHERE_SHOWN_FOR;
        self.elsewhere.retain(|_, s| s.started_at >= shown_from);
        let mut shown: Vec<Sample> = self.elsewhere.values().cloned().collect();
        shown.sort_by(|x, y| x.target.cmp(&y.target));
        self.elsewhere_shown = Arc::new(shown);
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
        let mut credits = Vec::new();
        for (provider, min_usd, warn_hours) in &a.credit {
            // A day of readings is enough to measure the burn rate the projection needs.
            match store.balances(provider, now - chrono::Duration::hours(24)).await {
                Ok(r) if !r.is_empty() => credits.push(rules::CreditCheck {
                    provider: provider.clone(),
                    readings: r.iter().map(|b| (b.at, b.remaining_usd)).collect(),
                    min_usd: *min_usd,
                    warn_hours: *warn_hours,
                }),
                Ok(_) => {}
                Err(e) => tracing::warn!(provider = %provider, error = %e, "credit readings not read"),
            }
        }
        let notes = a.engine.evaluate(&rules::Round { probes, breaker: changes, credits }, now);
        a.flapping.set(a.engine.flapping_targets());
        for t in a.engine.flapping_targets() {
            self.metrics.set_flapping(&t, true);
        }
        for t in a.flapping_before.difference(&a.flapping.targets()) {
            self.metrics.set_flapping(t, false);
        }
        a.flapping_before = a.flapping.targets();
        if !notes.is_empty() {
            if let Err(e) = crate::alert::outbox::enqueue(store.as_ref(), &notes, &a.channels, now).await {
                tracing::error!(error = %e, notifications = notes.len(), "alerts not written to the outbox");
            }
        }
        if let Err(e) = store.save_alert_state(&a.region, &a.engine.state_json()).await {
            tracing::warn!(error = %e, "alert state not saved; will retry next round");
        }
    }

    /// Processes one sample (the step tests drive directly).
    pub async fn process(&mut self, sample: Sample) {
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
        let mut transitions = self.monitor.as_mut().map(|m| m.tick(now)).unwrap_or_default();
        if let Some(t) = self.monitor.as_mut().and_then(|m| m.observe(&sample, now)) {
            transitions.push((sample.target.clone(), t));
        }
        for (target, t) in transitions {
            self.record_transition(&target, t).await;
        }
        if let Some(a) = self.alerts.as_mut() {
            let baseline = self.monitor.as_mut().map_or(rules::Baseline::default(), |m| rules::Baseline {
                ttfb_p95_ms: m.baseline(&sample.target, Metric::Ttfb, now).p95,
                ttft_p95_ms: m.baseline(&sample.target, Metric::Ttft, now).p95,
            });
            a.round.push((sample.clone(), baseline));
        }
        if let Some(tx) = &self.writer {
            // The writer spools when storage is down, so this only blocks if the writer itself is stuck.
            if tx.send(sample).await.is_err() {
                tracing::error!("store writer stopped; sample not stored");
            }
        }
    }

    async fn record_transition(&mut self, target: &Target, t: crate::breaker::Transition) {
        if let Some(a) = self.alerts.as_mut() {
            a.changes.push(BreakerChange { target: target.clone(), from: t.from, to: t.to, reason: t.reason.clone() });
        }
        tracing::warn!(target = %target, provider = %target.provider, model = %target.model, region = %target.region,
            from = %t.from, to = %t.to, reason = %t.reason, "circuit breaker");
        self.metrics.set_circuit(target, t.to.gauge());
        if let Some(store) = &self.store {
            if let Err(e) = store.append_transition(&t.to_record(target)).await {
                tracing::warn!(target = %target, error = %e, "breaker transition not stored");
            }
            if let Some(b) = self.monitor.as_ref().and_then(|m| m.breaker(target)) {
                if let Err(e) = store.save_breaker(&b.to_record(target)).await {
                    tracing::warn!(target = %target, error = %e, "breaker state not stored; retried at the next persist");
                }
            }
        }
    }

    /// Ticks breakers and publishes a fresh snapshot for the HTTP layer and the gauges.
    pub async fn publish(&mut self) {
        let now = Utc::now();
        let Some(monitor) = self.monitor.as_mut() else { return };
        let transitions = monitor.tick(now);
        let mut snapshot = monitor.publish(now, Some(&self.metrics));
        snapshot.elsewhere = self.elsewhere_shown.clone();
        if let Some(a) = &self.alerts {
            snapshot.flapping = a.flapping.clone();
        }
        if let Ok(mut s) = self.snapshot.write() {
            *s = snapshot;
        }
        for (target, t) in transitions {
            self.record_transition(&target, t).await;
        }
    }

    /// Writes rollups and breaker states (what fails is retried next time).
    pub async fn persist(&mut self) {
        if let (Some(m), Some(store)) = (self.monitor.as_mut(), &self.store) {
            if !self.loaded {
                match m.load(store.as_ref(), Utc::now()).await {
                    Ok(()) => self.loaded = true,
                    Err(e) => {
                        tracing::warn!(error = %e, "stored baselines still unreadable; not persisting over them");
                        return;
                    }
                }
            }
            if let Err(e) = m.persist(store.as_ref()).await {
                tracing::warn!(error = %e, "baselines not persisted; will retry");
            }
            if let Err(e) = m.expire(store.as_ref(), Utc::now()).await {
                tracing::warn!(error = %e, "hours leaving the baseline window not read back; the window reaches further back until they are");
            }
        }
    }

    /// Runs until the scheduler's channel closes (after shutdown has drained every probe).
    pub async fn run(mut self, mut rx: mpsc::Receiver<Sample>) {
        let mut publish = tokio::time::interval(PUBLISH_EVERY);
        let mut persist = tokio::time::interval(PERSIST_EVERY);
        persist.tick().await;
        let every = self.alerts.as_ref().map_or(PERSIST_EVERY, |a| a.every);
        let mut evaluate = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        loop {
            tokio::select! {
                sample = rx.recv() => match sample {
                    Some(s) => self.process(s).await,
                    None => break,
                },
                _ = publish.tick() => self.publish().await,
                _ = persist.tick() => self.persist().await,
                _ = evaluate.tick(), if self.alerts.is_some() => self.evaluate_alerts().await,
            }
        }
        self.evaluate_alerts().await;
        self.publish().await;
        self.persist().await;
    }
}

/// The latest sample of each target in every region but `region`, among those started since
/// `since`: what other instances sharing this store saw. Read from shared storage, never pushed.
pub async fn latest_elsewhere(
    store: &dyn Store,
    region: &str,
    since: chrono::DateTime<Utc>,
) -> Result<Vec<Sample>, crate::store::StoreError> {
    let q = crate::store::SampleQuery { since: Some(since), ..crate::store::SampleQuery::default() };
    let samples = store.samples(&q).await?;
    // Samples come oldest first, so the last one seen per (target, region) is its latest.
    let mut latest: std::collections::HashMap<Target, Sample> = Default::default();
    for s in samples.into_iter().filter(|s| s.target.region != region) {
        latest.insert(s.target.clone(), s);
    }
    let mut out: Vec<Sample> = latest.into_values().collect();
    out.sort_by(|a, b| a.target.cmp(&b.target));
    Ok(out)
}

/// Writes this region's per-target status and reads every region's rows written since `since`:
/// the one store round-trip the scope needs (kept apart so it can move off the pipeline).
pub async fn exchange_target_status(
    store: &dyn Store,
    mine: &[crate::store::TargetStatus],
    since: chrono::DateTime<Utc>,
) -> Result<Vec<crate::store::TargetStatus>, crate::store::StoreError> {
    if !mine.is_empty() {
        store.publish_target_status(mine).await?;
    }
    store.target_statuses(since).await
}
