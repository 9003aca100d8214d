//! The one place the order of the stages lives: every sample is handed to the store writer
//! first (so nothing later can lose it), counted in the metrics, then fed to baselines and
//! breakers (and from there to alerts). A periodic tick moves breakers, publishes snapshots for
//! readers and hands state to the storage link.
//!
//! The pipeline never awaits the database: records go to the [`Link`](crate::io::store::link) and
//! its answers (stored state, other regions' samples, credit readings) are picked up between
//! samples, so decisions, metrics and alerts keep running from memory whatever storage does.
//! A panic while judging one sample is caught, logged and counted; the sample is already with
//! the writer and the stages keep their state.
//!
//! Every stage is always there: a feature turned off is a stage with nothing to do (a planner
//! with no budget plans the base interval, a canary channel nobody sends on, an empty list of
//! retirement notices), so the step methods have one shape to test.

use crate::decide::alert::rules::{self, AlertEngine, BreakerChange};
use crate::decide::baseline::{Hours, Metric};
use crate::decide::snapshot::SharedSnapshot;
use crate::io::http::adopt::{AdoptOutcome, AdoptRequest};
use crate::io::metrics::Metrics;
use crate::io::store::link::{Context, LinkHandle, Query, Record, Reply};
use crate::run::monitor::{Monitor, Part};
use crate::vocab::breaker::State;
use crate::vocab::health::HealthState;
use crate::vocab::ready::Liveness;
use crate::vocab::records::{BalanceReading, TargetStatus};
use crate::vocab::sample::Sample;
use crate::vocab::target::Target;
use chrono::{DateTime, Utc};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// How often the pipeline checks whether a snapshot is due.
const PUBLISH_EVERY: Duration = Duration::from_secs(1);
/// Longest a snapshot (and the breakers' tick) waits when nothing urgent happened: rebuilding it
/// walks every target, so at a 60 s interval it is rebuilt every 5 s, not every second.
const PUBLISH_AT_MOST_EVERY: Duration = Duration::from_secs(5);
/// How often each target's breaker state and its rollups of ended hours are handed to the link.
const PERSIST_EVERY: Duration = Duration::from_secs(60);
/// The parts of the targets a persist hands over in turn, one every `PERSIST_EVERY / PERSIST_PARTS`
/// ([`crate::run::monitor::Part`]): each target still once every `PERSIST_EVERY`.
const PERSIST_PARTS: u32 = 10;
/// How often each target's rollups of the hour under way are handed to the link. They change with
/// every probe: written every minute they were four of every five rows stored at 10,000 targets.
/// A SIGKILL loses at most this much of the hour from the stored baselines (the samples are kept;
/// `vigil baselines --rebuild`); a stop, and the hour's end, write it at once (docs/ARCHITECTURE.md).
const OPEN_HOUR_EVERY: Duration = Duration::from_secs(300);
/// [`OPEN_HOUR_EVERY`] in rounds of [`PERSIST_EVERY`].
const OPEN_HOUR_ROUNDS: u32 = (OPEN_HOUR_EVERY.as_secs() / PERSIST_EVERY.as_secs()) as u32;
/// The periodic persists before the turns repeat: every part in every round.
const PERSIST_TURNS: u32 = PERSIST_PARTS * OPEN_HOUR_ROUNDS;
/// How long another region's last sample stays on the status page after it stops reporting.
const ELSEWHERE_SHOWN_FOR: chrono::Duration = chrono::Duration::hours(1);

/// What periodic persist `turn` (of [`PERSIST_TURNS`], one every
/// `PERSIST_EVERY / PERSIST_PARTS`) hands over at `now`: the next of the [`PERSIST_PARTS`] parts
/// of the targets, and in one round of [`OPEN_HOUR_ROUNDS`] their hour under way too, else only
/// hours ended by `now`. Part `i` carries its open hour in rounds where
/// `(round + i) % OPEN_HOUR_ROUNDS == 0`, so every minute writes a fifth of the open hours, not
/// all of them one minute in five.
fn persist_turn(turn: u32, now: DateTime<Utc>) -> (Part, Hours) {
    let (index, round) = (turn % PERSIST_PARTS, turn / PERSIST_PARTS);
    let hours = if (round + index) % OPEN_HOUR_ROUNDS == 0 { Hours::All } else { Hours::EndedBy(now) };
    (Part { index, of: PERSIST_PARTS }, hours)
}

/// Consumes samples from the scheduler and fans them out in a fixed order.
pub struct Pipeline {
    metrics: Arc<Metrics>,
    writer: mpsc::Sender<Sample>,
    monitor: Monitor,
    link: LinkHandle,
    snapshot: SharedSnapshot,
    liveness: Arc<Liveness>,
    /// False until the stored window (rollups, long-prompt runs) and breakers are restored:
    /// persisting before would overwrite them. Asked for at the first persist, after the start.
    loaded: bool,
    /// Whether the stored breakers are restored (at start, or with the window when storage was
    /// down then): until they are, the monitor's are all closed.
    breakers_restored: bool,
    /// Whether each target's newest stored samples are restored (the first part of the load):
    /// a load cut short after them does not read them again.
    newest_restored: bool,
    /// A breaker moved since the last snapshot: publish at the next check, not when due.
    urgent: bool,
    /// A load or an expiry read is under way (asked, not yet answered).
    loading: bool,
    expiring: bool,
    /// The next periodic persist, counted in `0..PERSIST_TURNS`: which part of
    /// the targets it hands over, and whether with the hour under way.
    persist_turn: u32,
    /// The end of the last stored hour folded in: a load that failed part way resumes there
    /// (folding an hour twice would count its probes twice).
    read_until: Option<DateTime<Utc>>,
    /// A read of the stored window failed (storage down): snapshots are published from what is
    /// known, as they are until the first read is answered otherwise.
    load_failed: bool,
    alerts: Alerting,
    /// What the link last read from shared storage.
    context: Context,
    /// The last sample seen of each target in each other region, as shown on the status page.
    elsewhere: std::collections::HashMap<Target, Sample>,
    /// The other regions' latest published view of each target (status page), kept like `elsewhere`.
    elsewhere_health: std::collections::HashMap<Target, TargetStatus>,
    /// The latest credit reading of each watched provider, as shown on the status page.
    credits: Arc<std::collections::BTreeMap<String, BalanceReading>>,
    provider_status: crate::vocab::provider_status::SharedProviderStatus,
    /// Cost-aware adaptive probing: the plan the scheduler follows.
    planner: crate::decide::adaptive::Planner,
    /// Targets whose last probe failed (in trouble for the planner at once).
    failing: std::collections::HashSet<Target>,
    /// When the plan was last made, and whether a newer failure still waits for a replan
    /// (at most one a second, so a mass outage does not replan once per failing sample).
    planned_at: Option<DateTime<Utc>>,
    replan_due: bool,
    /// Canary runs from the canary task, and where the latest of each target is published.
    canary: mpsc::Receiver<crate::vocab::canary::CanaryRun>,
    canary_shown: crate::vocab::canary::SharedCanary,
    /// Golden check runs from the check task, and where the latest of each check is published.
    golden: mpsc::Receiver<crate::vocab::check::CheckRun>,
    golden_shown: crate::vocab::check::SharedChecks,
    /// Long-prompt probe runs from the workload task.
    workloads: mpsc::Receiver<crate::vocab::workload::WorkloadRun>,
    /// Requests to adopt a target's held level at once (`POST /-/baselines/adopt`).
    adopt: mpsc::Receiver<AdoptRequest>,
    /// Replicas: the region's members, and the other members' samples read back from storage
    /// (judged here, never stored or counted again); without replicas nothing arrives.
    roster: Option<crate::decide::roster::SharedRoster>,
    peers: mpsc::Receiver<Sample>,
    /// This instance's own recent samples, so their read-back among the peers' is skipped.
    own: std::collections::HashMap<uuid::Uuid, DateTime<Utc>>,
}

/// The alert stage: samples and breaker changes of one probe interval are evaluated together,
/// so `region_unhealthy` sees a whole round, and the notifications go to the outbox.
pub struct Alerting {
    engine: AlertEngine,
    channels: Vec<String>,
    region: String,
    /// The round's samples, shared with the monitor's latest sample of each target.
    round: Vec<(Arc<Sample>, rules::BaselineP95)>,
    changes: Vec<BreakerChange>,
    every: Duration,
    /// Providers whose credit is watched: (name, `balance.min_usd`, `balance.warn_hours`).
    credit: Vec<(String, f64, f64)>,
    /// Targets flapping now, shared with readers (status page, `/v1/targets`, export).
    flapping: crate::decide::alert::FlappingSet,
    flapping_before: std::collections::BTreeSet<Target>,
    /// `provider_incident`: which of the providers' own incidents page (off by default).
    provider_rule: crate::decide::alert::provider_incident::ProviderIncidentRule,
    /// Retirement notices from the providers' models lists (empty when they are not polled).
    model_lists: crate::io::feeds::model_lists::SharedModelNotices,
    /// Canary runs since the last evaluation (judged for `model_changed` only).
    canaries: Vec<crate::vocab::canary::CanaryRun>,
    /// Golden check runs since the last evaluation (judged for `check_failed` only).
    checks: Vec<crate::vocab::check::CheckRun>,
    /// False while the saved alert state is unread (a start on dark storage): the engine
    /// neither evaluates nor saves, or its empty state would replace the stored one and an open
    /// incident would never resolve.
    restored: bool,
    /// The saved alert state has been asked of the link and not yet answered.
    restoring: bool,
    /// `alerts.chain_head_channels` (else the notice channels): where `chain_head_changed` goes.
    head_channels: Vec<String>,
    /// `[[chain]] tokens_per_day` (input, output) by chain, for the notice's daily spend.
    traffic: std::collections::BTreeMap<String, (f64, f64)>,
    /// Each chain's head as last handed to the link (`chain_heads`), so only moves are stored.
    heads_stored: std::collections::BTreeMap<String, Option<String>>,
    /// A follower's notifications of the last few intervals, held in case the leader died
    /// before sending them; and whether this member led at the last evaluation.
    held: Vec<crate::decide::alert::Notification>,
    led: bool,
}

/// The `chain_slo_at_risk` inputs: every chain with a `ttft_slo` or `total_slo`, as the last
/// published export judged it.
fn chain_checks(snapshot: &SharedSnapshot) -> Vec<rules::ChainSloCheck> {
    let Ok(snap) = snapshot.read() else { return Vec::new() };
    let Some(doc) = snap.thresholds.as_ref() else { return Vec::new() };
    doc.chains
        .iter()
        .filter_map(|c| {
            let s = &c.slo;
            let budget = |slo: Option<f64>, worst: f64, meets: Option<bool>, breaking: &Option<String>| {
                Some(rules::SloBudget {
                    slo_ms: slo?,
                    worst_case_ms: worst,
                    meets: meets?,
                    breaking_member: breaking.clone(),
                })
            };
            let ttft = budget(s.ttft_ms, s.worst_case_ttft_ms, s.meets, &s.breaking_member);
            let total = budget(s.total_ms, s.worst_case_total_ms, s.total_meets, &s.total_breaking_member);
            (ttft.is_some() || total.is_some()).then(|| rules::ChainSloCheck { chain: c.name.clone(), ttft, total })
        })
        .collect()
}

/// The `chain_head_changed` inputs: each chain's head (first entry of its order) in the last
/// published export, with its price and the chain's `tokens_per_day`.
fn head_checks(
    snapshot: &SharedSnapshot,
    traffic: &std::collections::BTreeMap<String, (f64, f64)>,
) -> Vec<crate::decide::alert::chain_head::ChainHeadCheck> {
    let Ok(snap) = snapshot.read() else { return Vec::new() };
    let Some(doc) = snap.thresholds.as_ref() else { return Vec::new() };
    doc.chains
        .iter()
        .map(|c| {
            let head = c.order.first();
            crate::decide::alert::chain_head::ChainHeadCheck {
                chain: c.name.clone(),
                head: head.map(|e| e.key.target.to_string()),
                price: head.and_then(|e| e.price.as_ref()).map(|p| p.per_mtok()),
                tokens_per_day: traffic.get(&c.name).copied(),
            }
        })
        .collect()
}

/// The records of the heads that moved since `stored` last saw them (every head the first
/// time: a start records where each chain stands), as of `now`.
fn moved_heads(
    region: &str,
    checks: &[crate::decide::alert::chain_head::ChainHeadCheck],
    stored: &mut std::collections::BTreeMap<String, Option<String>>,
    now: DateTime<Utc>,
) -> Vec<crate::vocab::chain_head::ChainHead> {
    let mut out = Vec::new();
    for c in checks {
        if stored.get(&c.chain) == Some(&c.head) {
            continue;
        }
        stored.insert(c.chain.clone(), c.head.clone());
        out.push(crate::vocab::chain_head::ChainHead {
            region: region.to_string(),
            chain: c.chain.clone(),
            at: now,
            target: c.head.clone(),
            price: c.price,
        });
    }
    out
}

/// Whether a target's health puts it in trouble for the plan: flapping, degraded, half-open or
/// down (an open or half-open breaker judges it down or half-open).
fn health_in_trouble(health: &crate::vocab::health::Health) -> bool {
    health.flapping || matches!(health.state, HealthState::Degraded | HealthState::HalfOpen | HealthState::Down)
}

/// Hands one evaluation's notifications to the link with the engine state that made them:
/// `chain_head_changed` to its own channels, everything else to every channel.
fn hand_over(a: &Alerting, link: &LinkHandle, notes: &[crate::decide::alert::Notification], now: DateTime<Utc>) {
    let items = items_of(a, notes, now);
    // Its text is written by the storage link, off this task.
    let state = a.engine.state_deferred();
    match items.is_empty() {
        // Pages and the state that remembers them travel together (one transaction).
        false => link.store(Record::Evaluated { region: a.region.clone(), state, items }),
        true => link.store(Record::AlertState { region: a.region.clone(), state }),
    }
}

/// Logs a probe's outcome: a failure as a warning with why, a success at debug.
fn log_outcome(sample: &Sample) {
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
}

/// The outbox items of `notes`: `chain_head_changed` for its own channels, everything else for every channel.
fn items_of(
    a: &Alerting,
    notes: &[crate::decide::alert::Notification],
    now: DateTime<Utc>,
) -> Vec<crate::vocab::records::OutboxItem> {
    let (heads, pages): (Vec<_>, Vec<_>) =
        notes.iter().cloned().partition(|n| n.primary_kind() == crate::decide::alert::AlertKind::ChainHeadChanged);
    let mut items = crate::io::notify::outbox::items_for(&pages, &a.channels, now);
    let head_channels: Vec<String> = a.head_channels.iter().filter(|c| a.channels.contains(c)).cloned().collect();
    items.extend(crate::io::notify::outbox::items_for(&heads, &head_channels, now));
    items
}

impl Alerting {
    /// The alert stage the config describes: evaluating once per probe interval for `channels`,
    /// watching the credit of the providers on the credit-watch list, paging the providers' own
    /// incidents when `[status_pages]` asks, and judging `model_deprecated` from what the
    /// models-list poller publishes into `model_lists`.
    pub fn new(
        config: &crate::config::Config,
        engine: AlertEngine,
        channels: Vec<String>,
        model_lists: crate::io::feeds::model_lists::SharedModelNotices,
    ) -> Self {
        Alerting {
            engine,
            channels,
            region: config.region.clone(),
            round: Vec::new(),
            changes: Vec::new(),
            every: config.probe.interval,
            credit: config.credit_watch().map(|(p, b)| (p.name.clone(), b.min_usd, b.warn_hours)).collect(),
            flapping: crate::decide::alert::FlappingSet::default(),
            flapping_before: Default::default(),
            provider_rule: crate::decide::alert::provider_incident::ProviderIncidentRule::from_config(
                &config.status_pages,
            ),
            model_lists,
            canaries: Vec::new(),
            checks: Vec::new(),
            restored: true,
            restoring: false,
            head_channels: config.chain_head.channels.clone(),
            traffic: crate::decide::chain_cost::traffic_of(&config.chains),
            heads_stored: Default::default(),
            held: Vec::new(),
            led: true,
        }
    }

    /// The same stage for a start whose read of the saved alert state failed: it asks the link
    /// again at each evaluation and judges nothing until the state is read.
    pub fn awaiting_saved_state(mut self) -> Self {
        self.restored = false;
        self
    }

    /// The published set of flapping targets (readers call `is_flapping`).
    pub fn flapping(&self) -> crate::decide::alert::FlappingSet {
        self.flapping.clone()
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
    /// Whether the monitor's breakers and drills were restored at start ([`Monitor::load_state`]);
    /// each target's newest samples and the stored window always come through the link.
    pub restored: bool,
    /// The storage link's pipeline end.
    pub link: LinkHandle,
    /// Where snapshots are published for readers.
    pub snapshot: SharedSnapshot,
    /// Heartbeats for `/readyz`.
    pub liveness: Arc<Liveness>,
    /// The alert stage.
    pub alerts: Alerting,
    /// The providers' own status pages, as last read (notes on alerts).
    pub provider_status: crate::vocab::provider_status::SharedProviderStatus,
    /// The adaptive probe planner whose plan the scheduler follows.
    pub planner: crate::decide::adaptive::Planner,
    /// Canary runs from the canary task (nothing arrives when the canary is off).
    pub canary: mpsc::Receiver<crate::vocab::canary::CanaryRun>,
    /// Where the latest canary run of each target is published for readers.
    pub canary_shown: crate::vocab::canary::SharedCanary,
    /// Golden check runs from the check task (nothing arrives without `[[provider.check]]`).
    pub golden: mpsc::Receiver<crate::vocab::check::CheckRun>,
    /// Where the latest run of each golden check is published for readers.
    pub golden_shown: crate::vocab::check::SharedChecks,
    /// Long-prompt probe runs from the workload task (nothing arrives without `[[probe.workload]]`).
    pub workloads: mpsc::Receiver<crate::vocab::workload::WorkloadRun>,
    /// Requests to adopt a held baseline level, from HTTP (nothing arrives in a process without one).
    pub adopt: mpsc::Receiver<AdoptRequest>,
    /// The region's members, when replicas share its targets (`None`: this instance alone).
    pub roster: Option<crate::decide::roster::SharedRoster>,
    /// The other members' samples, read back from storage (nothing arrives without replicas).
    pub peers: mpsc::Receiver<Sample>,
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
            loaded: false,
            breakers_restored: s.restored,
            newest_restored: false,
            urgent: false,
            loading: false,
            expiring: false,
            persist_turn: 0,
            load_failed: false,
            read_until: None,
            alerts: s.alerts,
            context: Context::default(),
            elsewhere: Default::default(),
            elsewhere_health: Default::default(),
            credits: Arc::default(),
            provider_status: s.provider_status,
            planner: s.planner,
            failing: Default::default(),
            planned_at: None,
            replan_due: false,
            canary: s.canary,
            canary_shown: s.canary_shown,
            golden: s.golden,
            golden_shown: s.golden_shown,
            workloads: s.workloads,
            adopt: s.adopt,
            roster: s.roster,
            peers: s.peers,
            own: Default::default(),
        }
    }

    /// Adopts a target's held level on request and answers with the outcome.
    fn adopt_on_request(&mut self, request: AdoptRequest, now: DateTime<Utc>) {
        let outcome = match self.monitor.target_by_id(&request.target).cloned() {
            None => AdoptOutcome::UnknownTarget { target: request.target },
            Some(t) => match self.monitor.adopt(&t, now) {
                Some(adoption) => {
                    // The notice goes out with the next evaluation; the export shows the new level now.
                    self.urgent = true;
                    AdoptOutcome::Adopted { adoption }
                }
                None => AdoptOutcome::NothingHeld { target: request.target },
            },
        };
        // The asker may have gone (timed out); the adoption stands either way.
        let _ = request.reply.send(outcome);
    }

    /// Plans the probes again from what is known at `now`: costs, today's spend (evaluated plus
    /// the round not yet evaluated) and which targets are in trouble (degraded, half-open, open,
    /// last probe failed, or part of an open incident); publishes the plan and its gauges.
    pub fn replan(&mut self, now: DateTime<Utc>) {
        self.replan_judged(now, None);
    }

    /// [`replan`](Self::replan) with each target's health already judged at `now` (`unwell`: the
    /// targets whose health is in trouble, from the evaluation's statuses): the minute's
    /// evaluation judges every target once, for both its statuses and its plan.
    fn replan_judged(&mut self, now: DateTime<Utc>, unwell: Option<&HashSet<Target>>) {
        let planner = &mut self.planner;
        self.planned_at = Some(now);
        self.replan_due = false;
        let engine = &self.alerts.engine;
        let pending: f64 = self.alerts.round.iter().filter_map(|(s, _)| s.cost_usd).filter(|c| c.is_finite()).sum();
        let spent = engine.spent_today(now) + pending;
        // A set, so each target spells its two keys once whatever the number of open incidents.
        let open: std::collections::HashSet<String> = engine.open_incidents().into_iter().collect();
        let monitor = &self.monitor;
        let failing = &self.failing;
        // The statuses judged the monitor's targets: they answer for the plan's when they are
        // the same list (a target the planner learned of from a sample alone is judged here).
        let unwell = unwell.filter(|_| planner.targets() == monitor.targets());
        let in_trouble = |t: &Target| {
            let unwell = match unwell {
                Some(set) => set.contains(t),
                None => health_in_trouble(&monitor.health(t, now)),
            };
            unwell
                || failing.contains(t)
                || (!open.is_empty()
                    && (open.contains(&crate::decide::alert::incident::target_key(
                        &t.provider,
                        &t.model,
                        t.route.as_deref(),
                    )) || open.contains(&crate::decide::alert::incident::provider_key(&t.provider))))
        };
        let plan = planner.replan(spent, &in_trouble, now);
        self.metrics.set_probe_plan(&plan, planner.targets());
    }

    /// Takes one canary run (the step tests drive directly): it is stored through the link
    /// (`canary_runs`, never `samples`), published for readers and judged for `model_changed`;
    /// it reaches neither the baselines, the breakers nor the latency metrics.
    pub fn process_canary(&mut self, run: crate::vocab::canary::CanaryRun) {
        self.canary_shown.publish(&run);
        self.metrics.observe_canary(&run);
        self.link.store(Record::Canary(vec![run.clone()]));
        self.alerts.canaries.push(run);
    }

    /// Takes one golden check run (the step tests drive directly): stored through the link
    /// (`check_runs`, never `samples`), published for readers and judged for `check_failed`; it
    /// reaches neither the baselines, the breakers nor the latency metrics.
    pub fn process_check(&mut self, run: crate::vocab::check::CheckRun) {
        self.golden_shown.publish(&run);
        self.metrics.observe_check(&run);
        self.monitor.observe_capability(&run);
        self.link.store(Record::Check(vec![run.clone()]));
        self.alerts.checks.push(run);
    }

    /// Takes one long-prompt probe run (the step tests drive directly): stored through the link
    /// (`workload_runs`, never `samples`), into its own TTFT series per target and size (never
    /// the baselines, breakers, health or alerts: those are the tiny probe's) and its cost into
    /// today's spend the planner counts.
    pub fn process_workload(&mut self, run: crate::vocab::workload::WorkloadRun) {
        self.monitor.observe_workload(&run);
        self.metrics.observe_workload(&run);
        if let Some(c) = run.sample.cost_usd {
            // Spent like a probe's: in the day's tally the plan and `probe_budget_exceeded` read.
            self.alerts.engine.add_spend(c, run.sample.started_at);
        }
        self.link.store(Record::Workload(vec![run]));
    }

    /// Evaluates the alert rules over the samples and breaker changes since the last call and
    /// hands the notifications to the link for the outbox (the step tests drive directly).
    pub fn evaluate_alerts(&mut self, now: DateTime<Utc>) {
        let heads = head_checks(&self.snapshot, &self.alerts.traffic);
        let moved = moved_heads(&self.alerts.region, &heads, &mut self.alerts.heads_stored, now);
        if !moved.is_empty() && self.leads(now) {
            self.link.store(Record::ChainHeads(moved));
        }
        if !self.alerts.restored {
            self.await_saved_state(now);
            return;
        }
        let a = &mut self.alerts;
        let mut round = std::mem::take(&mut a.round);
        let mut changes = std::mem::take(&mut a.changes);
        // The engine hears of breakers through transitions; after a kill its saved state can be
        // older than the stored breakers (an open it heard of, a close it did not). Whatever it
        // last heard that is not the breaker's state now is corrected here, or its breaker_open
        // facet would hold for good. Only once the stored breakers are restored: before that the
        // monitor's own are all closed and would tell the engine so.
        if self.breakers_restored {
            let watched: HashSet<&Target> = self.monitor.targets().iter().collect();
            let mut stale = Vec::new();
            for (t, heard) in a.engine.breakers_heard().filter(|(t, _)| watched.contains(t)) {
                let now_state = self.monitor.breaker(t).map_or(State::Closed, |b| b.state());
                if heard != now_state && !changes.iter().any(|c| &c.target == t) {
                    let reason =
                        "the breaker's stored state (the alert state saved before a restart was older)".to_string();
                    stale.push(BreakerChange { target: t.clone(), from: heard, to: now_state, reason });
                }
            }
            changes.extend(stale);
        }
        // What the models lists say joins what the responses said: the rule weighs both alike,
        // and only for targets whose probes still work.
        if let Ok(lists) = a.model_lists.read() {
            for (sample, _) in &mut round {
                let listed = lists.of(&sample.target.provider, &sample.target.model);
                // Copied (from the one the monitor shares) only when the lists add something.
                if !listed.is_empty() {
                    Arc::make_mut(sample).deprecation.extend(listed.iter().cloned());
                }
            }
        }
        let canaries = std::mem::take(&mut a.canaries);
        let checks = std::mem::take(&mut a.checks);
        let recent = now - chrono::Duration::from_std(a.every * 3).unwrap_or_default();
        // The scope: the other regions' published view of each target (read by the link).
        let elsewhere = crate::decide::alert::scope::elsewhere_from(&self.context.statuses, &a.region, recent);
        let probes = round
            .iter()
            .map(|(sample, baseline)| {
                let t = &sample.target;
                // One region alone (the common case) has nothing to look up: no key to spell.
                let seen = (!elsewhere.is_empty())
                    .then(|| elsewhere.get(&(t.provider.clone(), t.model.clone(), t.route.clone())).copied());
                rules::RoundProbe { sample, baseline: *baseline, elsewhere: seen.flatten().unwrap_or_default() }
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
                a.engine.read_provider_pages(crate::decide::alert::provider_incident::reading(
                    &a.provider_rule,
                    &a.region,
                    &snap,
                ));
            }
        }
        let canaries = canaries.iter().collect();
        let checks = checks.iter().collect();
        let shifts = self.monitor.take_adoptions();
        let chains = chain_checks(&self.snapshot);
        let round = rules::Round { probes, breaker: changes, credits, canaries, checks, shifts, chains, heads };
        let mut notes = a.engine.evaluate(&round, now);
        // What the provider itself admits goes with the page ("OpenAI reports: …").
        if let Ok(snap) = self.provider_status.read() {
            for alert in notes.iter_mut().flat_map(|n| n.alerts.iter_mut()) {
                if alert.status != crate::decide::alert::AlertStatus::Firing
                    || alert.provider.is_empty()
                    || alert.kind == crate::decide::alert::AlertKind::ProviderIncident
                {
                    continue;
                }
                if let Some(note) = crate::vocab::provider_status::annotation_for(&alert.provider, &snap, now) {
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
        // Targets in an open latency or error incident are in trouble: the baselines hold their samples.
        self.monitor.set_incidents(a.engine.in_trouble());
        // This region's view of each target: stored for the other regions' scope and status
        // pages, and what the plan that follows reads each target's health from.
        let slow = a.engine.over_latency_targets();
        let statuses = self.monitor.statuses(now, |t| slow.contains(t));
        let unwell: HashSet<Target> =
            statuses.iter().filter(|s| health_in_trouble(&s.health)).map(|s| s.target.clone()).collect();
        self.deliver(notes, statuses, now);
        self.replan_judged(now, Some(&unwell));
    }

    /// Whether this instance leads its region now (always, without replicas): only the leader
    /// stores what the region shares (breakers, rollups, alert state, the region's view of each
    /// target) and sends the pages; the others judge the same samples and keep the same state
    /// warm, so a takeover neither re-pages an open incident nor forgets an open breaker.
    fn leads(&self, now: DateTime<Utc>) -> bool {
        self.roster.as_ref().is_none_or(|r| r.read().map_or(true, |r| r.leads(now)))
    }

    /// Hands one evaluation's notifications and this region's view to the link when leading;
    /// holds them (three intervals) when following. On taking the lead, what was held goes to the
    /// link too, which sends only what the old leader had not.
    fn deliver(
        &mut self,
        notes: Vec<crate::decide::alert::Notification>,
        statuses: Vec<TargetStatus>,
        now: DateTime<Utc>,
    ) {
        let leads = self.leads(now);
        let a = &mut self.alerts;
        let hold_for = chrono::Duration::from_std(a.every * 3).unwrap_or_default();
        a.held.retain(|n| now - n.created_at <= hold_for);
        if !leads {
            a.held.extend(notes);
            a.led = false;
            return;
        }
        if !a.led {
            a.led = true;
            let held = std::mem::take(&mut a.held);
            tracing::info!(region = %a.region, held = held.len(), "this replica now leads the region");
            if !held.is_empty() {
                let items = items_of(a, &held, now);
                self.link.store(Record::Takeover { region: a.region.clone(), since: now - hold_for * 2, items });
            }
        }
        self.link.store(Record::TargetStatus(statuses));
        hand_over(a, &self.link, &notes, now);
    }

    /// Processes one sample (the step tests drive directly). A panic in the decision stages is
    /// caught here: the sample is already with the writer, and the next sample is judged as usual.
    pub async fn process(&mut self, sample: Sample) {
        // The writer spools when storage is down, so this only waits if the writer itself is stuck.
        if self.writer.send(sample.clone()).await.is_err() {
            tracing::error!(target = %sample.target, "store writer stopped; sample not stored");
        }
        // Only while there are peers: their samples are read back from then on, ours among them.
        if self.roster.as_ref().is_some_and(|r| r.read().is_ok_and(|r| r.peers() > 0)) {
            self.own.insert(sample.id, sample.started_at);
        }
        self.judge_guarded(sample, true);
        self.liveness.processed(Utc::now());
    }

    /// Judges another member's sample read back from storage (its own read-back is skipped):
    /// baselines, breakers and alerts only; it was stored and counted where it was probed.
    pub fn process_peer(&mut self, sample: Sample) {
        if self.own.remove(&sample.id).is_none() {
            self.judge_guarded(sample, false);
        }
    }

    /// [`Pipeline::judge`], with a panic caught, logged and counted.
    fn judge_guarded(&mut self, sample: Sample, own: bool) {
        let target = sample.target.clone();
        let judged = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.judge(sample, own)));
        if let Err(payload) = judged {
            let why = crate::run::watchdog::panic_message(payload);
            tracing::error!(target = %target, provider = %target.provider, model = %target.model,
                region = %target.region, panic = %why, "judging a sample panicked; sample stored, stages kept");
            self.metrics.task_panicked("pipeline");
        }
    }

    /// Runs one periodic step, timed (`vigil_pipeline_step_seconds`); a panic in it is logged and
    /// counted, and the loop goes on.
    fn guarded(&mut self, step: &str, f: impl FnOnce(&mut Self)) {
        let started = std::time::Instant::now();
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(self)));
        self.metrics.step_took(step, started.elapsed());
        if let Err(payload) = outcome {
            let why = crate::run::watchdog::panic_message(payload);
            tracing::error!(step, panic = %why, "a pipeline step panicked; stages kept");
            self.metrics.task_panicked("pipeline");
        }
    }

    fn judge(&mut self, sample: Sample, own: bool) {
        // A peer's sample was counted and logged by the member that probed it.
        if own {
            self.metrics.observe(&sample);
            log_outcome(&sample);
        }
        let now = Utc::now();
        // An open breaker whose wait is over is half-open before its deciding probe is judged,
        // so the history always shows open → half_open → verdict.
        // Only this target's breaker: the others are moved by the periodic publish.
        if let Some(t) = self.monitor.tick_target(&sample.target, now) {
            self.record_transition(&sample.target, t);
        }
        let weight = self.planner.weight(&sample.target);
        let failed = sample.outcome.is_failure();
        let newly_failing = if failed {
            self.failing.insert(sample.target.clone())
        } else {
            self.failing.remove(&sample.target);
            false
        };
        self.planner.observe_cost(&sample.target, sample.cost_usd);
        let sample = Arc::new(sample);
        if let Some(t) = self.monitor.observe_weighted(&sample, weight, now) {
            self.record_transition(&sample.target, t);
        }
        let baseline = rules::BaselineP95 {
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

    fn record_transition(&mut self, target: &Target, t: crate::decide::breaker::Transition) {
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
        if !self.leads(Utc::now()) {
            return;
        }
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
        self.monitor.read_credit(&self.context.credits);
        let mut snapshot = self.monitor.publish(now, Some(&self.metrics));
        // The status page keeps showing a region that went quiet, with its age, for a while.
        let shown_from = now - ELSEWHERE_SHOWN_FOR;
        self.elsewhere.retain(|_, s| s.started_at >= shown_from);
        self.elsewhere_health.retain(|_, s| s.updated_at >= shown_from);
        snapshot.elsewhere_health = Arc::new(self.elsewhere_health.values().cloned().collect());
        let mut shown: Vec<Sample> = self.elsewhere.values().cloned().collect();
        shown.sort_by(|x, y| x.target.cmp(&y.target));
        snapshot.elsewhere = Arc::new(shown);
        snapshot.credits = self.credits.clone();
        snapshot.probe_plan = Some(self.planner.current());
        if let Ok(mut s) = self.snapshot.write() {
            *s = snapshot;
        }
        for (target, t) in transitions {
            self.record_transition(&target, t);
        }
    }

    /// While the saved alert state is unread: ask for it (once at a time) and let this round's
    /// samples and breaker changes go; the first evaluation after the state is read corrects
    /// what the engine last heard of each breaker. Canary runs wait for that evaluation.
    fn await_saved_state(&mut self, now: DateTime<Utc>) {
        let a = &mut self.alerts;
        if !a.restoring {
            a.restoring = true;
            self.link.ask(Query::AlertState { region: a.region.clone() });
        }
        let skipped = a.round.len();
        a.round.clear();
        a.changes.clear();
        tracing::warn!(region = %a.region, samples = skipped, "saved alert state still unread; alerts not evaluated this round");
        self.replan(now);
    }

    /// Hands changed rollups and breaker states to the link, and asks for what must be read
    /// back (stored state not yet restored; hours leaving the baseline window).
    pub fn persist(&mut self, now: DateTime<Utc>) {
        self.persist_of(now, Part::WHOLE, Hours::All);
    }

    /// [`persist`](Self::persist) of the next turn ([`persist_turn`]).
    fn persist_next_part(&mut self, now: DateTime<Utc>) {
        let (part, hours) = persist_turn(self.persist_turn, now);
        if self.loaded {
            self.persist_turn = (self.persist_turn + 1) % PERSIST_TURNS;
        }
        self.persist_of(now, part, hours);
    }

    fn persist_of(&mut self, now: DateTime<Utc>, part: Part, hours: Hours) {
        if !self.loaded {
            if !self.loading {
                self.loading = true;
                let q = self.monitor.load_query(now, self.read_until, !self.breakers_restored, !self.newest_restored);
                self.link.ask(q);
            }
            return;
        }
        // Followers drop theirs: the leader stores the same state from the same samples.
        let leads = self.leads(now);
        for record in self.monitor.take_dirty_of(part, hours).into_iter().filter(|_| leads) {
            self.link.store(record);
        }
        let keep_from = now - chrono::Duration::minutes(10);
        self.own.retain(|_, at| *at >= keep_from);
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
            // The hour's read-ahead place is given back as the reply drops, after the fold.
            Reply::LoadedHour { until, rollups, .. } => {
                self.monitor.restore_hour(&rollups, now);
                self.read_until = Some(until);
            }
            Reply::LoadedNewest { samples, done } => {
                self.monitor.restore_newest(samples, now);
                self.newest_restored |= done;
            }
            Reply::LoadedWorkloads(runs) => self.monitor.restore_workloads(&runs, now),
            Reply::Loaded(breakers) => {
                self.monitor.restore_breakers(&breakers, now);
                self.loaded = true;
                self.breakers_restored = true;
                self.loading = false;
                tracing::info!("stored baselines and breakers restored");
            }
            Reply::LoadFailed(e) => {
                self.loading = false;
                self.load_failed = true;
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
            Reply::AlertState(saved) => {
                let a = &mut self.alerts;
                a.engine = AlertEngine::restore(a.engine.config().clone(), saved.as_ref());
                a.restored = true;
                a.restoring = false;
                tracing::info!(region = %a.region, open = a.engine.open_incidents().len(), "saved alert state read; alerts evaluated from the next round");
            }
            Reply::AlertStateFailed(e) => {
                self.alerts.restoring = false;
                tracing::warn!(error = %e, "saved alert state still unreadable; not evaluating or saving over it");
            }
            Reply::Context(c) => {
                self.elsewhere.extend(c.elsewhere.iter().map(|s| (s.target.clone(), s.clone())));
                self.elsewhere_health.extend(c.statuses.iter().map(|s| (s.target.clone(), s.clone())));
                // Readings come oldest first: the last is the one shown. A read that found none
                // (storage down) leaves the last known shown; readers drop it once a day old.
                let mut credits = (*self.credits).clone();
                credits.extend(c.credits.iter().filter_map(|(p, r)| Some((p.clone(), r.last()?.clone()))));
                self.credits = Arc::new(credits);
                if let Some(drills) = &c.drills {
                    self.monitor.set_drills(drills.clone());
                }
                self.context = c;
            }
        }
    }

    /// Whether snapshots are published now: not while the stored window is being read after a
    /// start, so the export is judged on the whole week as it was before the restart (probes and
    /// samples go on meanwhile); once it is read, or when it cannot be, always.
    fn publishes(&self) -> bool {
        self.loaded || self.load_failed
    }

    /// Runs until the scheduler's channel closes (after shutdown has drained every probe).
    pub async fn run(mut self, mut rx: mpsc::Receiver<Sample>) {
        let mut publish = tokio::time::interval(PUBLISH_EVERY);
        // A twelfth of the probe interval, between 1 s and 5 s: each target changes once per
        // interval, so a snapshot is never more than a twelfth of a round behind.
        let publish_every = (self.alerts.every / 12).clamp(PUBLISH_EVERY, PUBLISH_AT_MOST_EVERY);
        let mut published: Option<tokio::time::Instant> = None;
        // Its first tick is at once: it asks for the stored window, which folds in while samples
        // are judged.
        let mut persist = tokio::time::interval(PERSIST_EVERY / PERSIST_PARTS);
        let every = self.alerts.every;
        let mut evaluate = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        self.guarded("replan", |p| p.replan(Utc::now()));
        let mut canary_open = true;
        let mut golden_open = true;
        let mut workloads_open = true;
        let mut adopt_open = true;
        loop {
            tokio::select! {
                sample = rx.recv() => match sample {
                    Some(s) => self.process(s).await,
                    None => break,
                },
                run = self.canary.recv(), if canary_open => match run {
                    Some(run) => self.guarded("canary", |p| p.process_canary(run)),
                    // The canary task ended (off, or stopping): nothing more comes.
                    None => canary_open = false,
                },
                run = self.golden.recv(), if golden_open => match run {
                    Some(run) => self.guarded("check", |p| p.process_check(run)),
                    None => golden_open = false,
                },
                run = self.workloads.recv(), if workloads_open => match run {
                    Some(run) => self.guarded("workload", |p| p.process_workload(run)),
                    None => workloads_open = false,
                },
                Some(sample) = self.peers.recv() => self.process_peer(sample),
                request = self.adopt.recv(), if adopt_open => match request {
                    Some(r) => self.guarded("adopt", |p| p.adopt_on_request(r, Utc::now())),
                    None => adopt_open = false,
                },
                Some(reply) = self.link.reply() => self.guarded("reply", |p| p.on_reply(reply, Utc::now())),
                _ = publish.tick() => {
                    if self.publishes() && (self.urgent || published.is_none_or(|at| at.elapsed() >= publish_every)) {
                        published = Some(tokio::time::Instant::now());
                        self.guarded("publish", |p| p.publish(Utc::now()));
                    }
                }
                _ = persist.tick() => self.guarded("persist", |p| p.persist_next_part(Utc::now())),
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

#[cfg(test)]
mod tests {
    //! Step tests: the pipeline's step methods driven directly with injected time, over a real
    //! storage link to an SQLite file in a temp dir.
    use super::*;
    use crate::io::store::link::{ContextPlan, Link};
    use crate::io::store::spool::SpoolOf;
    use crate::io::store::Store;
    use crate::vocab::target::Target;
    use tokio_util::sync::CancellationToken;

    const CONFIG: &str = r#"
region = "eu"
[probe]
interval = "5s"
timeout = "5s"
[[provider]]
name = "openrouter"
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
api_key_env = "OPENROUTER_TEST_KEY"
models = ["m"]
balance = { min_usd = 5.0 }
"#;

    fn t0() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-30T12:00:00Z").expect("time").with_timezone(&Utc)
    }

    #[test]
    fn a_start_records_every_head_and_later_only_the_moves() {
        use crate::decide::alert::chain_head::ChainHeadCheck;
        let check = |chain: &str, head: Option<&str>| ChainHeadCheck {
            chain: chain.into(),
            head: head.map(str::to_string),
            price: None,
            tokens_per_day: None,
        };
        let mut stored = std::collections::BTreeMap::new();
        let first = moved_heads("eu", &[check("chat", Some("a/m")), check("batch", None)], &mut stored, t0());
        assert_eq!(
            first.iter().map(|h| (h.chain.as_str(), h.target.clone())).collect::<Vec<_>>(),
            [("chat", Some("a/m".to_string())), ("batch", None)]
        );
        assert!(moved_heads("eu", &[check("chat", Some("a/m")), check("batch", None)], &mut stored, t0()).is_empty());
        let later = t0() + chrono::Duration::seconds(5);
        let moved = moved_heads("eu", &[check("chat", Some("b/m")), check("batch", None)], &mut stored, later);
        assert_eq!((moved.len(), moved[0].target.as_deref(), moved[0].at), (1, Some("b/m"), later));
        assert_eq!(moved[0].region, "eu");
    }

    fn target(region: &str) -> Target {
        Target::new("openrouter".into(), "m".into(), None, region.into())
    }

    fn sample(region: &str, at: DateTime<Utc>, outcome: crate::vocab::sample::Outcome) -> Sample {
        let mut s = Sample::new(target(region), at, at);
        s.outcome = outcome;
        s.ttfb_ms = Some(120.0);
        s.ttft_ms = Some(250.0);
        s
    }

    fn reading(at: DateTime<Utc>, usd: f64) -> BalanceReading {
        BalanceReading { provider: "openrouter".into(), region: "eu".into(), at, remaining_usd: usd }
    }

    /// A pipeline over a real link to a fresh SQLite store; the samples it hands to the writer
    /// arrive on the returned receiver.
    struct Rig {
        pipeline: Pipeline,
        store: Arc<dyn Store>,
        snapshot: SharedSnapshot,
        written: mpsc::Receiver<Sample>,
        stop: CancellationToken,
        _dir: tempfile::TempDir,
    }

    async fn rig(seed: impl AsyncFnOnce(&dyn Store)) -> Rig {
        let dir = tempfile::tempdir().expect("tempdir");
        let env =
            std::collections::BTreeMap::from([("OPENROUTER_TEST_KEY".to_string(), "sk-test-pipeline".to_string())]);
        let config = crate::config::Config::from_toml(CONFIG, &env).expect("config");
        let store =
            crate::io::store::open(&format!("sqlite://{}", dir.path().join("v.db").display())).await.expect("open");
        store.migrate().await.expect("migrate");
        seed(store.as_ref()).await;
        let engine = AlertEngine::restore(crate::decide::alert::settings::RuleConfig::from_config(&config), None);
        let alerts = Alerting::new(&config, engine, Vec::new(), Default::default());
        assert_eq!(alerts.credit_providers(), ["openrouter"], "the credit-watch list");
        let plan = ContextPlan {
            region: "eu".into(),
            every: config.probe.interval,
            credit_providers: alerts.credit_providers(),
        };
        let spool = SpoolOf::open(dir.path().join("records"), 1 << 20).expect("spool");
        let (link, handle) = Link::new(store.clone(), spool, Some(plan));
        let stop = CancellationToken::new();
        tokio::spawn(link.run(stop.clone()));
        let (writer, written) = mpsc::channel(64);
        let snapshot = SharedSnapshot::default();
        let targets = vec![target("eu")];
        let planner =
            crate::run::app::planner_for(&config, targets.clone(), crate::decide::adaptive::SharedPlan::default());
        let (_canary_tx, canary) = mpsc::channel(1);
        let (_golden_tx, golden) = mpsc::channel(1);
        let (_workload_tx, workloads) = mpsc::channel(1);
        let (_adopt_tx, adopt) = mpsc::channel(1);
        let (_peers_tx, peers) = mpsc::channel(1);
        let pipeline = Pipeline::new(Stages {
            metrics: Arc::new(Metrics::new("eu").expect("metrics")),
            writer,
            monitor: Monitor::new(&config, targets, t0()),
            restored: false,
            link: handle,
            snapshot: snapshot.clone(),
            liveness: Arc::new(Liveness::new(t0(), config.probe.interval, Duration::from_secs(10))),
            alerts,
            provider_status: Default::default(),
            planner,
            canary,
            canary_shown: Default::default(),
            golden,
            golden_shown: Default::default(),
            workloads,
            adopt,
            roster: None,
            peers,
        });
        Rig { pipeline, store, snapshot, written, stop, _dir: dir }
    }

    /// The link's next answer (it works in its own task).
    async fn next_reply(p: &mut Pipeline) -> Reply {
        tokio::time::timeout(Duration::from_secs(10), p.link.reply())
            .await
            .expect("a reply in time")
            .expect("link open")
    }

    #[tokio::test]
    async fn the_context_read_from_storage_is_published_for_readers() {
        let now = Utc::now();
        let mut r = rig(async |s: &dyn Store| {
            s.insert_balance(&reading(now - chrono::Duration::hours(2), 40.0)).await.expect("reading");
            s.insert_balance(&reading(now - chrono::Duration::minutes(5), 38.5)).await.expect("reading");
            s.insert_samples(&[sample("us", now, crate::vocab::sample::Outcome::Ok)]).await.expect("sample");
        })
        .await;
        // The link reads the context as it starts.
        let reply = next_reply(&mut r.pipeline).await;
        assert!(matches!(reply, Reply::Context(_)), "{reply:?}");
        r.pipeline.on_reply(reply, now);
        assert!(r.snapshot.read().expect("snapshot").credits.is_empty(), "nothing published before the next publish");
        r.pipeline.publish(now);
        {
            let snap = r.snapshot.read().expect("snapshot");
            let latest = snap.credits.get("openrouter").expect("the watched provider's reading");
            assert_eq!(latest.remaining_usd, 38.5, "the newest reading is shown");
            let regions: Vec<&str> = snap.elsewhere.iter().map(|s| s.target.region.as_str()).collect();
            assert_eq!(regions, ["us"], "the other region's latest sample, not this region's");
        }
        // A later read that finds nothing (storage down) keeps the last known figures shown,
        // while another region that went quiet leaves the page after an hour.
        r.pipeline.on_reply(Reply::Context(Context::default()), now);
        r.pipeline.publish(now + chrono::Duration::minutes(61));
        let snap = r.snapshot.read().expect("snapshot");
        assert_eq!(snap.credits.get("openrouter").map(|b| b.remaining_usd), Some(38.5));
        assert!(snap.elsewhere.is_empty(), "a region quiet for over an hour is no longer shown");
        r.stop.cancel();
    }

    /// Three failed probes a second apart: enough to open the breaker.
    async fn three_failures(p: &mut Pipeline, now: DateTime<Utc>) {
        for i in 0..3 {
            p.process(sample("eu", now + chrono::Duration::seconds(i), crate::vocab::sample::Outcome::ServerError))
                .await;
        }
    }

    #[tokio::test]
    async fn the_rounds_sample_is_the_one_the_snapshot_shows_not_a_copy() {
        let mut r = rig(async |_: &dyn Store| {}).await;
        let now = Utc::now();
        r.pipeline.process(sample("eu", now, crate::vocab::sample::Outcome::Ok)).await;
        r.pipeline.publish(now);
        let snap = r.snapshot.read().expect("snapshot").clone();
        let shown = snap.targets.iter().find_map(|v| v.last_sample.clone()).expect("the latest sample is shown");
        let (judged, _) = r.pipeline.alerts.round.first().expect("the sample waits for the evaluation");
        assert!(Arc::ptr_eq(judged, &shown), "one copy of the sample for the round and the published view");
    }

    #[tokio::test]
    async fn failing_probes_open_the_breaker_which_is_published_and_stored() {
        let mut r = rig(async |_: &dyn Store| {}).await;
        let now = Utc::now();
        three_failures(&mut r.pipeline, now).await;
        for _ in 0..3 {
            let handed = r.written.try_recv().expect("every sample is handed to the writer first");
            assert!(handed.outcome.is_failure());
        }
        r.pipeline.publish(now);
        {
            let snap = r.snapshot.read().expect("snapshot");
            let view = snap.targets.iter().find(|v| v.region == "eu").expect("this region's target");
            assert_eq!(view.breaker.state, crate::vocab::breaker::State::Open, "three failures in a row open it");
            assert!(snap.probe_plan.is_some(), "the plan is always published");
        }
        r.pipeline.evaluate_alerts(now);
        let mut stored = Vec::new();
        for _ in 0..100 {
            stored = r.store.load_breakers(Some("eu")).await.expect("breakers");
            if !stored.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(stored.len(), 1, "the open breaker reached the store through the link");
        assert_eq!(stored[0].state, crate::vocab::breaker::State::Open);
        let transitions = r.store.transitions("eu", None, 10).await.expect("transitions");
        assert_eq!(transitions.len(), 1, "{transitions:?}");
        r.stop.cancel();
    }

    #[tokio::test]
    async fn the_evaluations_plan_reads_the_health_its_statuses_judged_and_agrees_with_a_plain_replan() {
        use crate::decide::adaptive::Mode;
        let mut r = rig(async |_: &dyn Store| {}).await;
        let now = Utc::now();
        let mode = |p: &Pipeline| p.planner.current().get(&target("eu").id()).map(|t| t.mode);
        r.pipeline.process(sample("eu", now, crate::vocab::sample::Outcome::Ok)).await;
        r.pipeline.evaluate_alerts(now);
        assert!(r.pipeline.alerts.restored, "the rig's engine starts restored");
        let calm = mode(&r.pipeline).expect("planned");
        assert_ne!(calm, Mode::Incident, "a target whose probe answered is calm");
        // Its next probe fails: the health the statuses judged puts it in incident mode.
        let later = now + chrono::Duration::seconds(60);
        r.pipeline.process(sample("eu", later, crate::vocab::sample::Outcome::ServerError)).await;
        r.pipeline.evaluate_alerts(later);
        assert_eq!(mode(&r.pipeline), Some(Mode::Incident));
        r.pipeline.replan(later);
        assert_eq!(mode(&r.pipeline), Some(Mode::Incident), "a plain replan judges it alike");
        let again = later + chrono::Duration::seconds(60);
        r.pipeline.process(sample("eu", again, crate::vocab::sample::Outcome::Ok)).await;
        r.pipeline.evaluate_alerts(again);
        assert_eq!(mode(&r.pipeline), Some(calm), "answering again, it is calm again");
        r.stop.cancel();
    }

    #[tokio::test]
    async fn an_alert_engine_that_missed_a_breaker_closing_is_told_once_stored_state_is_restored() {
        let mut r = rig(async |_: &dyn Store| {}).await;
        let now = Utc::now();
        three_failures(&mut r.pipeline, now).await;
        r.pipeline.evaluate_alerts(now);
        let t = target("eu");
        assert_eq!(r.pipeline.alerts.engine.breaker_heard(&t), Some(State::Open), "heard of the trip");
        // A restart restored breakers newer than the engine's saved state: this one had closed.
        let closed = crate::vocab::records::BreakerRecord {
            target: t.clone(),
            state: State::Closed,
            since: now,
            detail: serde_json::json!({}).into(),
        };
        r.pipeline.monitor.restore_breakers(std::slice::from_ref(&closed), now);
        r.pipeline.breakers_restored = false;
        r.pipeline.evaluate_alerts(now + chrono::Duration::seconds(5));
        assert_eq!(r.pipeline.alerts.engine.breaker_heard(&t), Some(State::Open), "not before the restore is done");
        r.pipeline.breakers_restored = true;
        r.pipeline.evaluate_alerts(now + chrono::Duration::seconds(10));
        assert_eq!(r.pipeline.alerts.engine.breaker_heard(&t), Some(State::Closed), "told the stored state");
        r.stop.cancel();
    }

    /// Answers the pipeline's load question until the last reply of it.
    async fn finish_load(p: &mut Pipeline, now: DateTime<Utc>) {
        loop {
            let reply = next_reply(p).await;
            let last = matches!(reply, Reply::Loaded(_) | Reply::LoadFailed(_));
            p.on_reply(reply, now);
            if last {
                return;
            }
        }
    }

    #[tokio::test]
    async fn each_targets_newest_stored_samples_come_through_the_link_and_a_probe_since_the_start_keeps_its_own() {
        use crate::vocab::sample::Outcome;
        let now = Utc::now();
        let stored = sample("eu", now - chrono::Duration::minutes(3), Outcome::ServerError);
        let kept = stored.clone();
        let mut r = rig(async |s: &dyn Store| {
            s.insert_samples(std::slice::from_ref(&kept)).await.expect("sample stored");
        })
        .await;
        // The start reads no sample: the first question to the link asks for them, ahead of the week.
        r.pipeline.monitor.load_state(r.store.as_ref(), now).await.expect("state restored");
        r.pipeline.breakers_restored = true;
        r.pipeline.persist(now);
        let (samples, done) = loop {
            match next_reply(&mut r.pipeline).await {
                Reply::LoadedNewest { samples, done } => break (samples, done),
                Reply::LoadedHour { .. } | Reply::Loaded(_) => panic!("the newest samples come first"),
                other => r.pipeline.on_reply(other, now),
            }
        };
        assert!(done, "one target: one reply");
        assert_eq!(samples.len(), 1);
        // Stored to the microsecond.
        let micros = |at: DateTime<Utc>| at.timestamp_micros();
        assert_eq!(samples[0].1.iter().map(|s| micros(s.started_at)).collect::<Vec<_>>(), [micros(stored.started_at)]);
        r.pipeline.on_reply(Reply::LoadedNewest { samples, done }, now);
        finish_load(&mut r.pipeline, now).await;
        r.pipeline.publish(now);
        let last = |r: &Rig| {
            r.snapshot.read().expect("snapshot").targets[0].last_sample.as_ref().map(|s| micros(s.started_at))
        };
        assert_eq!(last(&r), Some(micros(stored.started_at)), "the stored newest sample is the target's last probe");
        assert!(r.pipeline.newest_restored, "a load cut short after them does not read them again");
        let q = r.pipeline.monitor.load_query(now, None, false, !r.pipeline.newest_restored);
        assert!(matches!(q, Query::Load { newest: None, .. }), "{q:?}");

        // On another start, a probe that lands before the stored samples keeps its own word.
        let mut again = rig(async |s: &dyn Store| {
            s.insert_samples(std::slice::from_ref(&stored)).await.expect("sample stored");
        })
        .await;
        let fresh = sample("eu", now, Outcome::Ok);
        again.pipeline.process(fresh.clone()).await;
        again.pipeline.persist(now);
        finish_load(&mut again.pipeline, now).await;
        again.pipeline.publish(now);
        assert_eq!(last(&again), Some(micros(fresh.started_at)), "not read over by the older stored one");
        r.stop.cancel();
        again.stop.cancel();
    }

    #[tokio::test]
    async fn breakers_restored_at_start_are_kept_when_the_stored_window_arrives() {
        let now = Utc::now();
        let t = target("eu");
        let stored = crate::vocab::records::BreakerRecord {
            target: t.clone(),
            state: State::Open,
            since: now - chrono::Duration::minutes(2),
            detail: serde_json::json!({}).into(),
        };
        let mut r = rig(async |s: &dyn Store| s.save_breaker(&stored).await.expect("breaker stored")).await;
        // The start restores the stored breaker before the first probe…
        r.pipeline.monitor.load_state(r.store.as_ref(), now).await.expect("state restored");
        r.pipeline.breakers_restored = true;
        assert_eq!(r.pipeline.monitor.breaker(&t).map(|b| b.state()), Some(State::Open));
        assert!(!r.pipeline.publishes(), "no snapshot from a window not yet read");
        // …and it moves on while the week of rollups is still being read.
        let closed = crate::vocab::records::BreakerRecord { state: State::Closed, since: now, ..stored.clone() };
        r.pipeline.monitor.restore_breakers(std::slice::from_ref(&closed), now);
        r.pipeline.persist(now);
        finish_load(&mut r.pipeline, now).await;
        assert!(r.pipeline.loaded && r.pipeline.publishes(), "the window is read");
        assert_eq!(
            r.pipeline.monitor.breaker(&t).map(|b| b.state()),
            Some(State::Closed),
            "the stored breaker is not read over the newer one"
        );
        r.stop.cancel();
    }

    #[tokio::test]
    async fn a_load_cut_short_resumes_after_the_hours_it_folded_in() {
        use chrono::DurationRound;
        let now = Utc::now();
        let hour = (now - chrono::Duration::hours(2)).duration_trunc(chrono::Duration::hours(1)).expect("an hour");
        let probes = crate::vocab::records::Rollup {
            target: target("eu"),
            metric: crate::decide::baseline::PROBES.into(),
            hour,
            count: 60,
            histogram: Vec::new(),
        };
        let mut r =
            rig(async |s: &dyn Store| s.upsert_rollups(std::slice::from_ref(&probes)).await.expect("stored")).await;
        // The first load read up to that hour, folded it in, then a read timed out.
        let until = hour + chrono::Duration::hours(1);
        r.pipeline
            .on_reply(Reply::LoadedHour { until, rollups: vec![probes.clone()], read_ahead: Default::default() }, now);
        r.pipeline.on_reply(Reply::LoadFailed("store call timed out after 3s".into()), now);
        r.pipeline.persist(now);
        finish_load(&mut r.pipeline, now).await;
        assert!(r.pipeline.loaded);
        r.pipeline.publish(now);
        let samples = r.snapshot.read().ok().and_then(|s| {
            s.thresholds.as_ref()?.targets.iter().find(|t| t.key.provider == "openrouter").map(|t| t.samples)
        });
        assert_eq!(samples, Some(60), "the hour is counted once, not read again");
        r.stop.cancel();
    }

    #[tokio::test]
    async fn a_window_that_cannot_be_read_does_not_hold_the_snapshots_back() {
        let mut r = rig(async |_: &dyn Store| {}).await;
        let now = Utc::now();
        r.pipeline.on_reply(Reply::LoadFailed("storage down".into()), now);
        assert!(!r.pipeline.loaded && r.pipeline.publishes(), "published from what is known");
        r.stop.cancel();
    }

    #[tokio::test]
    async fn each_timed_step_is_counted_under_its_name() {
        let mut r = rig(async |_: &dyn Store| {}).await;
        let now = Utc::now();
        r.pipeline.guarded("publish", |p| p.publish(now));
        r.pipeline.guarded("evaluate", |p| p.evaluate_alerts(now));
        r.pipeline.guarded("evaluate", |p| p.evaluate_alerts(now));
        let text = r.pipeline.metrics.render();
        let count = |step: &str| {
            text.lines()
                .find(|l| l.starts_with("vigil_pipeline_step_seconds_count") && l.contains(&format!("step=\"{step}\"")))
                .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        };
        assert_eq!(count("publish"), Some(1), "{text}");
        assert_eq!(count("evaluate"), Some(2));
        assert_eq!(count("persist"), Some(0), "every step is there from the start");
        r.stop.cancel();
    }

    #[test]
    fn each_part_is_persisted_every_turn_round_and_with_its_hour_under_way_one_round_in_five() {
        let now = t0();
        let turns: Vec<(Part, Hours)> = (0..PERSIST_TURNS).map(|t| persist_turn(t, now)).collect();
        for index in 0..PERSIST_PARTS {
            let mine: Vec<&Hours> = turns.iter().filter(|(p, _)| p.index == index).map(|(_, h)| h).collect();
            assert_eq!(mine.len(), OPEN_HOUR_ROUNDS as usize, "part {index} once a round");
            assert_eq!(mine.iter().filter(|h| ***h == Hours::All).count(), 1, "part {index}: its open hour once");
        }
        for (round, turns) in turns.chunks(PERSIST_PARTS as usize).enumerate() {
            let open = turns.iter().filter(|(_, h)| *h == Hours::All).count();
            assert_eq!(open, 2, "round {round}: a fifth of the open hours every minute");
            assert!(turns
                .iter()
                .all(|(p, h)| p.of == PERSIST_PARTS && (*h == Hours::All || *h == Hours::EndedBy(now))));
        }
    }

    #[tokio::test]
    async fn the_hour_under_way_is_stored_in_its_parts_open_turn_an_ended_hour_at_its_next_turn_and_all_at_a_stop() {
        use crate::decide::baseline::PROBES;
        use crate::vocab::sample::Outcome;
        use chrono::DurationRound;
        use chrono::Timelike;
        // The pipeline judges samples at the real time: start clear of an hour's turn.
        while Utc::now().minute() == 59 && Utc::now().second() >= 50 {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let mut r = rig(async |_: &dyn Store| {}).await;
        let open = Utc::now().duration_trunc(chrono::Duration::hours(1)).expect("an hour");
        let (ended, now) = (open - chrono::Duration::hours(1), open + chrono::Duration::minutes(1));
        r.pipeline.persist(now);
        finish_load(&mut r.pipeline, now).await;
        let index =
            (0..PERSIST_PARTS).find(|i| Part { index: *i, of: PERSIST_PARTS }.holds(&target("eu"))).expect("a part");
        let open_turn = (0..PERSIST_TURNS)
            .find(|t| t % PERSIST_PARTS == index && persist_turn(*t, now).1 == Hours::All)
            .expect("an open turn");
        let closed_turn = (open_turn + PERSIST_PARTS) % PERSIST_TURNS;
        let stored = async |r: &Rig, hour: DateTime<Utc>, want: Option<i64>| {
            let mut have = None;
            for _ in 0..100 {
                let rollups = r.store.rollups_between(Some("eu"), ended, None).await.expect("rollups");
                have = rollups.iter().find(|x| x.hour == hour && x.metric.as_str() == PROBES).map(|x| x.count);
                if have == want {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            have
        };
        // Two probes of the hour that ended and one of the hour under way: a turn that is not the
        // part's open one stores the ended hour and leaves the open one for later.
        for at in [ended + chrono::Duration::minutes(30), ended + chrono::Duration::minutes(59)] {
            r.pipeline.process(sample("eu", at, Outcome::Ok)).await;
        }
        r.pipeline.process(sample("eu", open + chrono::Duration::seconds(10), Outcome::Ok)).await;
        r.pipeline.persist_turn = closed_turn;
        r.pipeline.persist_next_part(now);
        assert_eq!(stored(&r, ended, Some(2)).await, Some(2), "the ended hour, at the part's next turn");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(stored(&r, open, None).await, None, "the hour under way waits for the part's open turn");
        // Every other part's turns leave it too.
        for turn in (0..PERSIST_TURNS).filter(|t| t % PERSIST_PARTS != index) {
            r.pipeline.persist_turn = turn;
            r.pipeline.persist_next_part(now);
        }
        r.pipeline.persist_turn = open_turn;
        r.pipeline.persist_next_part(now);
        assert_eq!(stored(&r, open, Some(1)).await, Some(1), "the hour under way, at the part's open turn");
        assert_eq!(r.pipeline.persist_turn, (open_turn + 1) % PERSIST_TURNS, "turns go on");
        // A stop stores what changed since, whatever the turn.
        r.pipeline.process(sample("eu", open + chrono::Duration::seconds(40), Outcome::Ok)).await;
        r.pipeline.persist_turn = closed_turn;
        r.pipeline.persist_next_part(now);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(stored(&r, open, Some(1)).await, Some(1), "not before the part's next open turn");
        r.pipeline.persist(now);
        assert_eq!(stored(&r, open, Some(2)).await, Some(2), "a stop writes the hour under way at once");
        r.stop.cancel();
    }

    #[tokio::test]
    async fn persist_restores_stored_state_before_writing_over_it() {
        let mut r = rig(async |_: &dyn Store| {}).await;
        let now = Utc::now();
        r.pipeline.process(sample("eu", now, crate::vocab::sample::Outcome::Ok)).await;
        // Not loaded yet: the first persist asks for the stored state and writes nothing.
        r.pipeline.persist(now);
        assert!(r.pipeline.loading);
        finish_load(&mut r.pipeline, now).await;
        assert!(r.pipeline.loaded && !r.pipeline.loading, "restored from the (empty) store");
        r.pipeline.persist(now);
        let hour_ago = now - chrono::Duration::hours(2);
        let mut rollups = Vec::new();
        for _ in 0..100 {
            rollups = r.store.rollups_between(Some("eu"), hour_ago, None).await.expect("rollups");
            if !rollups.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(rollups.iter().any(|x| x.target == target("eu")), "the probe's rollup was stored: {rollups:?}");
        r.stop.cancel();
    }

    #[tokio::test]
    async fn a_canary_run_is_published_and_stored_but_never_reaches_the_baselines() {
        let mut r = rig(async |_: &dyn Store| {}).await;
        let now = Utc::now();
        let shown = r.pipeline.canary_shown.clone();
        let run = crate::vocab::canary::CanaryRun {
            sample: sample("eu", now, crate::vocab::sample::Outcome::Ok),
            prompt_version: 1,
            correct: 4,
            total: 4,
            answers_fingerprint: "f".into(),
            answers: vec!["a".into()],
            identity: Default::default(),
            logprobs: None,
        };
        r.pipeline.process_canary(run);
        assert!(shown.latest().iter().any(|c| c.sample.target == target("eu")), "published for readers");
        r.pipeline.publish(now);
        let snap = r.snapshot.read().expect("snapshot");
        let view = snap.targets.iter().find(|v| v.region == "eu").expect("target");
        assert_eq!((view.probes, view.last_sample.is_none()), (0, true), "not a probe of the baselines");
        r.stop.cancel();
    }

    #[tokio::test]
    async fn a_workload_run_gets_its_own_series_is_stored_and_counts_as_spent_but_never_reaches_the_baselines() {
        let mut r = rig(async |_: &dyn Store| {}).await;
        let now = Utc::now();
        let mut s = sample("eu", now, crate::vocab::sample::Outcome::Ok);
        s.ttft_ms = Some(2500.0);
        s.cost_usd = Some(0.25);
        let id = s.id;
        r.pipeline.process_workload(crate::vocab::workload::WorkloadRun { sample: s, input_tokens: 8000 });
        r.pipeline.replan(now);
        assert!(r.pipeline.planner.current().spent_usd >= 0.25, "what it cost is spent today");
        r.pipeline.publish(now);
        {
            let snap = r.snapshot.read().expect("snapshot");
            let view = snap.targets.iter().find(|v| v.region == "eu").expect("target");
            assert_eq!((view.probes, view.last_sample.is_none()), (0, true), "not a probe of the baselines");
            assert_eq!(view.workloads.iter().map(|w| (w.input_tokens, w.runs)).collect::<Vec<_>>(), [(8000, 1)]);
            let doc = snap.thresholds.as_ref().expect("export");
            assert_eq!(doc.targets[0].workloads, view.workloads, "the export carries the same sizes");
            assert_eq!(doc.targets[0].ttft_ms.p50, None, "the tiny probe's series saw nothing");
        }
        let mut stored = Vec::new();
        for _ in 0..100 {
            stored = r.store.workload_runs(Some("eu"), now - chrono::Duration::hours(1), 10).await.expect("runs");
            if !stored.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(stored.iter().map(|w| (w.sample.id, w.input_tokens)).collect::<Vec<_>>(), [(id, 8000)]);
        let samples = r.store.count_samples(&crate::io::store::SampleQuery::default()).await.expect("count");
        assert_eq!(samples, 0, "never in samples");
        r.stop.cancel();
    }
}
