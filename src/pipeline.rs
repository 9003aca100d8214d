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

/// How often the pipeline checks whether a snapshot is due.
const PUBLISH_EVERY: Duration = Duration::from_secs(1);
/// Longest a snapshot (and the breakers' tick) waits when nothing urgent happened: rebuilding it
/// walks every target, so at a 60 s interval it is rebuilt every 5 s, not every second.
const PUBLISH_AT_MOST_EVERY: Duration = Duration::from_secs(5);
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
    /// A breaker moved since the last snapshot: publish at the next check, not when due.
    urgent: bool,
    /// A load or an expiry read is under way (asked, not yet answered).
    loading: bool,
    expiring: bool,
    alerts: Alerting,
    /// What the link last read from shared storage.
    context: Context,
    /// The last sample seen of each target in each other region, as shown on the status page.
    elsewhere: std::collections::HashMap<Target, Sample>,
    provider_status: crate::provider_status::SharedProviderStatus,
    /// Cost-aware adaptive probing, when the scheduler follows a plan.
    planner: Option<crate::adaptive::Planner>,
    /// Targets whose last probe failed (in trouble for the planner at once).
    failing: std::collections::HashSet<Target>,
    /// When the plan was last made, and whether a newer failure still waits for a replan
    /// (at most one a second, so a mass outage does not replan once per failing sample).
    planned_at: Option<DateTime<Utc>>,
    replan_due: bool,
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
    /// `provider_incident`: which of the providers' own incidents page (off by default).
    provider_rule: crate::alert::provider_incident::ProviderIncidentRule,
    /// Retirement notices from the providers' models lists, when they are polled.
    model_lists: Option<crate::model_lists::SharedModelNotices>,
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
            provider_rule: Default::default(),
            model_lists: None,
            canaries: Vec::new(),
        }
    }

    /// Also pages the providers' own open incidents on the components `rule` names.
    pub fn with_provider_incidents(mut self, rule: crate::alert::provider_incident::ProviderIncidentRule) -> Self {
        self.provider_rule = rule;
        self
    }

    /// The published set of flapping targets (readers call `is_flapping`).
    pub fn flapping(&self) -> crate::alert::FlappingSet {
        self.flapping.clone()
    }

    /// Also evaluates `credit_low` from the stored balance readings of these providers.
    pub fn with_credit(mut self, config: &crate::config::Config) -> Self {
        self.credit = config.credit_watch().map(|(p, b)| (p.name.clone(), b.min_usd, b.warn_hours)).collect();
        self
    }

    /// Also judges `model_deprecated` from what the models-list poller publishes into `notices`.
    pub fn with_model_lists(mut self, notices: crate::model_lists::SharedModelNotices) -> Self {
        self.model_lists = Some(notices);
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
    /// The adaptive probe planner whose plan the scheduler follows, if any.
    pub planner: Option<crate::adaptive::Planner>,
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
            urgent: false,
            loading: false,
            expiring: false,
            alerts: s.alerts,
            context: Context::default(),
            elsewhere: Default::default(),
            provider_status: s.provider_status,
            planner: s.planner,
            failing: Default::default(),
            planned_at: None,
            replan_due: false,
            canary: None,
            canary_shown: Default::default(),
        }
    }

    /// Plans the probes again from what is known at `now`: costs, today's spend (evaluated plus
    /// the round not yet evaluated) and which targets are in trouble (degraded, half-open, open,
    /// last probe failed, or part of an open incident); publishes the plan and its gauges.
    pub fn replan(&mut self, now: DateTime<Utc>) {
        let Some(planner) = self.planner.as_mut() else { return };
        self.planned_at = Some(now);
        self.replan_due = false;
        let engine = &self.alerts.engine;
        let pending: f64 = self.alerts.round.iter().filter_map(|(s, _)| s.cost_usd).filter(|c| c.is_finite()).sum();
        let spent = engine.spent_today(now) + pending;
        let unwell: std::collections::HashSet<Target> = engine
            .target_statuses(now)
            .into_iter()
            .filter(|s| s.state != crate::store::TargetHealth::Ok)
            .map(|s| s.target)
            .collect();
        let open = engine.open_incidents();
        let monitor = &self.monitor;
        let failing = &self.failing;
        let in_trouble = |t: &Target| {
            unwell.contains(t)
                || failing.contains(t)
                || monitor.breaker(t).is_some_and(|b| b.state() != crate::breaker::State::Closed)
                || open.iter().any(|k| {
                    *k == crate::alert::incident::target_key(&t.provider, &t.model, t.route.as_deref())
                        || *k == crate::alert::incident::provider_key(&t.provider)
                })
        };
        let plan = planner.replan(spent, &in_trouble, now);
        self.metrics.set_probe_plan(&plan, planner.targets());
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
        self.metrics.observe_canary(&run);
        self.link.store(Record::Canary(vec![run.clone()]));
        self.alerts.canaries.push(run);
    }

    /// Evaluates the alert rules over the samples and breaker changes since the last call and
    /// hands the notifications to the link for the outbox (the step tests drive directly).
    pub fn evaluate_alerts(&mut self, now: DateTime<Utc>) {
        let a = &mut self.alerts;
        let mut round = std::mem::take(&mut a.round);
        let changes = std::mem::take(&mut a.changes);
        // What the models lists say joins what the responses said: the rule weighs both alike,
        // and only for targets whose probes still work.
        if let Some(lists) = a.model_lists.as_ref().and_then(|l| l.read().ok()) {
            for (sample, _) in &mut round {
                let t = &sample.target;
                sample.deprecation.extend(lists.of(&t.provider, &t.model).iter().cloned());
            }
        }
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
        if a.provider_rule.enabled {
            if let Ok(snap) = self.provider_status.read() {
                a.engine.read_provider_pages(crate::alert::provider_incident::reading(
                    &a.provider_rule,
                    &a.region,
                    &snap,
                ));
            }
        }
        let canaries = canaries.iter().collect();
        let mut notes = a.engine.evaluate(&rules::Round { probes, breaker: changes, credits, canaries }, now);
        // What the provider itself admits goes with the page ("OpenAI reports: …").
        if let Ok(snap) = self.provider_status.read() {
            for alert in notes.iter_mut().flat_map(|n| n.alerts.iter_mut()) {
                if alert.status != crate::alert::AlertStatus::Firing
                    || alert.provider.is_empty()
                    || alert.kind == crate::alert::AlertKind::ProviderIncident
                {
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
        self.replan(now);
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
        // Only this target's breaker: the others are moved by the periodic publish.
        if let Some(t) = self.monitor.tick_target(&sample.target, now) {
            self.record_transition(&sample.target, t);
        }
        let weight = self.planner.as_mut().map_or(1, |p| p.weight(&sample.target));
        let failed = sample.outcome.is_failure();
        let newly_failing = if failed {
            self.failing.insert(sample.target.clone())
        } else {
            self.failing.remove(&sample.target);
            false
        };
        if let Some(p) = self.planner.as_mut() {
            p.observe_cost(&sample.target, sample.cost_usd);
        }
        if let Some(t) = self.monitor.observe_weighted(&sample, weight, now) {
            self.record_transition(&sample.target, t);
        }
        let baseline = rules::Baseline {
            ttfb_p95_ms: self.monitor.baseline(&sample.target, Metric::Ttfb, now).p95,
            ttft_p95_ms: self.monitor.baseline(&sample.target, Metric::Ttft, now).p95,
        };
        self.alerts.round.push((sample, baseline));
        if newly_failing {
            // A failing target goes back to the fast interval now, not at the next evaluation.
            if self.planned_at.is_some_and(|at| now - at < chrono::Duration::seconds(1)) {
                self.replan_due = true;
            } else {
                self.replan(now);
            }
        }
    }

    fn record_transition(&mut self, target: &Target, t: crate::breaker::Transition) {
        self.urgent = true;
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
        if self.replan_due {
            self.replan(now);
        }
        self.urgent = false;
        let transitions = self.monitor.tick(now);
        let mut snapshot = self.monitor.publish(now, Some(&self.metrics));
        // The status page keeps showing a region that went quiet, with its age, for a while.
        let shown_from = now - ELSEWHERE_SHOWN_FOR;
        self.elsewhere.retain(|_, s| s.started_at >= shown_from);
        let mut shown: Vec<Sample> = self.elsewhere.values().cloned().collect();
        shown.sort_by(|x, y| x.target.cmp(&y.target));
        snapshot.elsewhere = Arc::new(shown);
        snapshot.probe_plan = self.planner.as_ref().map(|p| p.current());
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
        // A twelfth of the probe interval, between 1 s and 5 s: each target changes once per
        // interval, so a snapshot is never more than a twelfth of a round behind.
        let publish_every = (self.alerts.every / 12).clamp(PUBLISH_EVERY, PUBLISH_AT_MOST_EVERY);
        let mut published: Option<tokio::time::Instant> = None;
        let mut persist = tokio::time::interval(PERSIST_EVERY);
        if self.loaded {
            persist.tick().await;
        }
        let every = self.alerts.every;
        let mut evaluate = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        self.guarded("replan", |p| p.replan(Utc::now()));
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
                _ = publish.tick() => {
                    if self.urgent || published.is_none_or(|at| at.elapsed() >= publish_every) {
                        published = Some(tokio::time::Instant::now());
                        self.guarded("publish", |p| p.publish(Utc::now()));
                    }
                }
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
