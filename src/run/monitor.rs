//! The decision stage: turns each sample into baselines, window error counts, breaker state and
//! the target's health (judged here once per sample, by `decide::health`), persists them, and
//! publishes read-only snapshots (router export, target explanations) that the HTTP layer and
//! the metrics read.

use crate::config::Config;
use crate::decide::baseline::{Baseline, Baselines, Hours, LatencyP95, Metric};
use crate::decide::breaker::{Breaker, BreakerSettings, Probe, Transition};
use crate::decide::export::{self, ExportParams, TargetStats};
use crate::decide::health::{
    self, Backoff, BreakerView, CapabilityRule, Deadlines, Failover, ProbeVerdict, RateLimitRule, Replies,
};
use crate::decide::ratelimit::HeadroomView;
use crate::decide::snapshot::{Snapshot, TargetView, ViewBaselines};
use crate::io::metrics::Metrics;
use crate::io::store::link::{Newest, Query, Record};
use crate::io::store::{SampleQuery, Store, StoreError};
use crate::vocab::breaker::State;
use crate::vocab::health::Health;
use crate::vocab::ratelimit::Headroom;
use crate::vocab::records::{BreakerRecord, Rollup, TargetStatus};
use crate::vocab::sample::Sample;
use crate::vocab::target::{ByTarget, Target, TargetKey, TargetSet};
use chrono::{DateTime, Utc};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Baselines, counts and breakers of this region's targets.
pub struct Monitor {
    region: String,
    probe_interval: std::time::Duration,
    baseline_window: std::time::Duration,
    failover: Failover,
    settings: Arc<BreakerSettings>,
    baselines: Baselines,
    breakers: ByTarget<Breaker>,
    /// Each target's latest sample, shared with the published views that show it.
    last: ByTarget<Arc<Sample>>,
    /// What each target's latest probe said, judged once when it arrived.
    verdicts: ByTarget<ProbeVerdict>,
    /// Each target's last judged replies per capability (system prompt obeyed), for the health rule.
    replies: ByTarget<Replies>,
    /// How many failed replies in a row demote (`alerts.error_probes`, as `adherence_failed`).
    capability: CapabilityRule,
    /// How long a 429 demotes (`breaker.rate_limit_backoff`, or its `Retry-After` when longer).
    rate_limit: RateLimitRule,
    /// The backoff after each target's latest 429, until it is over and published as such.
    backoffs: ByTarget<Backoff>,
    cost: ByTarget<f64>,
    targets: Vec<Target>,
    chains: Vec<crate::config::chain::ChainConfig>,
    /// How a router calls each configured provider (the export's router formats).
    router_providers: crate::decide::router_formats::provider::RouterProviders,
    /// `probe.ttft_timeout` (capped by `probe.timeout`), what a chain member without a deadline
    /// counts for in its chain's worst case.
    ttft_timeout: std::time::Duration,
    /// `probe.timeout`, what each chain member counts for in its chain's worst case to a
    /// complete answer.
    total_timeout: std::time::Duration,
    /// `balance.demote_within` of each provider on the credit-watch list.
    demote_within: BTreeMap<String, Option<std::time::Duration>>,
    /// The credit projections as of the last readings (providers projected to run out).
    credit: BTreeMap<String, crate::decide::credit::CreditOutlook>,
    /// Each target's capabilities as its capability probes last judged them (chains' `requires`).
    capabilities: BTreeMap<String, BTreeMap<crate::vocab::capability::Capability, bool>>,
    flapping: crate::decide::alert::FlappingSet,
    /// Ids of the targets with an open latency or error incident in this region (from the last
    /// evaluation): their samples are held out of their baselines like those of an open breaker.
    incidents: std::collections::HashSet<String>,
    /// Shifts adopted since the alert engine last took them (the `baseline_shift` notices).
    adopted: Vec<crate::decide::baseline::Adoption>,
    /// Each breaker's [`Breaker::fingerprint`] as last handed to the link, so unchanged ones are
    /// not rewritten.
    persisted: ByTarget<u64>,
    /// What the last publish built, kept so the next rebuilds only what changed since.
    built: Built,
    /// The stored drills as last read (every region's); the export drops the active ones.
    drills: Vec<crate::vocab::drill::Drill>,
    /// The configured providers by name, whose prices the chain entries publish (a lookup per
    /// target and publish: a scan of 10,000 providers there cost more than the probes).
    providers: HashMap<String, Arc<crate::config::ProviderConfig>>,
    /// OpenRouter's published prices, shared with the prober (none until [`Monitor::price_with`]).
    published: Option<crate::io::probe::PublishedPrices>,
    /// Each target's latest rate-limit reading (each allowance as last said) and when it was read.
    headroom: ByTarget<(Headroom, DateTime<Utc>)>,
    /// `ratelimit.low_fraction`: headroom under it is low.
    low_fraction: f64,
    /// The long-prompt probes' TTFT series per target and size, apart from the baselines.
    workloads: crate::decide::workload::WorkloadBaselines,
}

/// The per-target parts of the last publish, in `Monitor::targets` order. A target's parts
/// change only when a sample or breaker move reaches it, when the baseline window passes an
/// hour, when the flapping set changes, or when stored state is loaded: at a 60 s interval a
/// publish every 5 s finds a twelfth of the targets changed, and rebuilds only those.
#[derive(Default)]
struct Built {
    stats: Vec<TargetStats>,
    views: Vec<Arc<TargetView>>,
    /// Targets changed since the last publish.
    changed: TargetSet,
    /// The stats' places in the last export's order, the next one's starting point.
    order: Vec<usize>,
    /// Everything must be rebuilt (nothing built yet, or state loaded).
    all: bool,
    /// The baseline window's hours at the last publish.
    window: Option<(DateTime<Utc>, DateTime<Utc>)>,
    /// The flapping targets at the last publish.
    flapping: std::collections::BTreeSet<Target>,
    /// The last publish set the gauges (a publish without metrics, as `vigil thresholds` does, did not).
    gauges: bool,
}

impl Built {
    /// Whether the parts of target `i` (`t`) can be reused as they are.
    fn reusable(&self, i: usize, t: &Target) -> bool {
        !self.all && i < self.views.len() && !self.changed.contains(t)
    }
}

/// One of `of` parts of the targets, by a hash of the target that is fixed for the process: a
/// persist hands the storage link one part at a time, so what waits to be written is a part's,
/// not every target's (at 10,000 targets every target's hour changes every minute, and the
/// whole hand-off at once stood 40 MiB over the daemon's level).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    /// Which part, `0..of`.
    pub index: u32,
    /// How many parts.
    pub of: u32,
}

impl Part {
    /// Every target.
    pub const WHOLE: Part = Part { index: 0, of: 1 };

    /// Whether `t` is in this part.
    pub fn holds(&self, t: &Target) -> bool {
        if self.of <= 1 {
            return true;
        }
        // SipHash with fixed keys: the same part for a target all through the process.
        let mut h = std::hash::DefaultHasher::new();
        std::hash::Hash::hash(t, &mut h);
        std::hash::Hasher::finish(&h) % u64::from(self.of) == u64::from(self.index)
    }
}

impl Monitor {
    /// An empty monitor for `targets` following the config's `[baseline]` and `[breaker]`.
    pub fn new(config: &Config, targets: Vec<Target>, now: DateTime<Utc>) -> Self {
        let failover = Failover::of(&config.baseline);
        let settings = Arc::new(BreakerSettings::from_config(&config.breaker, failover));
        let breakers = targets.iter().map(|t| (t.clone(), Breaker::new(Arc::clone(&settings), now))).collect();
        Monitor {
            region: config.region.clone(),
            probe_interval: config.probe.interval,
            baseline_window: config.baseline.window,
            failover,
            baselines: Baselines::new(&config.baseline),
            breakers,
            last: ByTarget::default(),
            verdicts: ByTarget::default(),
            replies: ByTarget::default(),
            capability: CapabilityRule::of(&config.alerts),
            rate_limit: settings.rate_limit,
            settings,
            backoffs: ByTarget::default(),
            cost: ByTarget::default(),
            targets,
            chains: config.chains.clone(),
            router_providers: config.providers.iter().map(|p| (&**p).into()).collect(),
            // A probe waits for its first token no longer than its whole timeout either.
            ttft_timeout: config.probe.ttft_timeout.min(config.probe.timeout),
            total_timeout: config.probe.timeout,
            demote_within: config.credit_watch().map(|(p, b)| (p.name.clone(), b.demote_within)).collect(),
            credit: BTreeMap::new(),
            capabilities: BTreeMap::new(),
            flapping: Default::default(),
            incidents: Default::default(),
            adopted: Vec::new(),
            persisted: ByTarget::default(),
            built: Built { all: true, ..Built::default() },
            drills: Vec::new(),
            providers: crate::config::owned_by_name(&config.providers),
            published: None,
            headroom: ByTarget::default(),
            low_fraction: config.ratelimit.low_fraction,
            workloads: crate::decide::workload::WorkloadBaselines::new(&config.baseline),
        }
    }

    /// Prices the chain entries with OpenRouter's published prices too (the prober's table,
    /// refreshed by its own task), as samples are priced.
    pub fn price_with(&mut self, published: crate::io::probe::PublishedPrices) {
        self.published = Some(published);
        self.built.all = true;
    }

    /// A target's price as its chain entries publish it: configured, published, then built in.
    fn price_of(&self, t: &Target) -> Option<export::EntryPrice> {
        let p = self.providers.get(t.provider.as_str())?;
        let table = self.published.as_ref().and_then(|x| x.read().ok());
        let endpoints = table.as_ref().and_then(|g| g.get(&(t.provider.clone(), t.model.clone())));
        let (price, source) =
            crate::decide::price_table::price_of(p, &t.model, t.route.as_deref(), endpoints.map(Vec::as_slice))?;
        Some(export::EntryPrice {
            input_per_mtok: price.input_per_mtok,
            output_per_mtok: price.output_per_mtok,
            source: source.kind().to_string(),
        })
    }

    /// The stored drills, as the storage link last read them; the next publish honours them.
    pub fn set_drills(&mut self, drills: Vec<crate::vocab::drill::Drill>) {
        self.drills = drills;
    }

    /// Restores rollups, counts and breaker states from the store (after a restart or upgrade):
    /// everything at once, for the CLI. The daemon restores [`Monitor::load_state`] at start
    /// and the week of rollups through the storage link while it already probes.
    pub async fn load(&mut self, store: &dyn Store, now: DateTime<Utc>) -> Result<(), StoreError> {
        let report = crate::io::store::load_window(store, &mut self.baselines, Some(&self.region), now).await?;
        for skipped in &report.skipped {
            tracing::warn!(error = %skipped, "unreadable rollup skipped");
        }
        self.load_state(store, now).await?;
        self.load_newest(store, now).await?;
        let since = self.workloads.window_start(now);
        let runs = store.workload_runs(Some(&self.region), since, crate::io::store::link::WORKLOAD_LOAD_LIMIT).await?;
        self.restore_workloads(&runs, now);
        tracing::info!(rollups = report.loaded, breakers = self.breakers.len(), "baselines and breakers restored");
        Ok(())
    }

    /// Restores what the first probes are judged against: breaker states and the running
    /// drills, two reads. Each target's newest samples (one read each: seconds at 10,000 targets
    /// on a start that checks a big SQLite file beside it) and the week of rollups (a minute or
    /// more) come later, through the storage link ([`Monitor::load_query`]).
    pub async fn load_state(&mut self, store: &dyn Store, now: DateTime<Utc>) -> Result<(), StoreError> {
        self.restore_breakers(&store.load_breakers(Some(&self.region)).await?, now);
        self.drills = store.drills(now).await?;
        self.built.all = true;
        Ok(())
    }

    /// The question that restores, through the storage link, each target's newest samples
    /// unless they were (`newest`), this region's stored window (rollups, long-prompt runs) from
    /// `resume` on (the end of the hours already folded in, if any), and its breakers too unless
    /// [`Monitor::load_state`] restored them.
    pub fn load_query(&self, now: DateTime<Utc>, resume: Option<DateTime<Utc>>, breakers: bool, newest: bool) -> Query {
        let (from, until) = self.baselines.window_hours(now);
        let from = resume.map_or(from, |r| r.max(from));
        let newest = newest.then(|| Newest { targets: self.targets.clone(), per_target: self.newest_per_target() });
        Query::Load { region: self.region.clone(), from, until, breakers, newest }
    }

    /// How many of a target's newest samples a restore reads: the last N replies' capability
    /// verdicts need N.
    fn newest_per_target(&self) -> i64 {
        i64::from(self.capability.replies.max(1))
    }

    /// Folds one hour of stored rollups in (an answer to [`Monitor::load_query`]).
    pub fn restore_hour(&mut self, rollups: &[Rollup], now: DateTime<Utc>) {
        for skipped in &self.baselines.load_hour(rollups, now).skipped {
            tracing::warn!(error = %skipped, "unreadable rollup skipped");
        }
        self.built.all = true;
    }

    /// Rebuilds the long-prompt probes' series from stored runs (an answer to
    /// [`Monitor::load_query`]); runs seen since the start and newer than every stored one stay.
    pub fn restore_workloads(&mut self, runs: &[crate::vocab::workload::WorkloadRun], now: DateTime<Utc>) {
        self.workloads.load(runs, now);
        self.built.all = true;
    }

    /// Takes one long-prompt probe run into its target's series for that size (never into the
    /// baselines, breakers or health: those are the tiny probe's).
    pub fn observe_workload(&mut self, run: &crate::vocab::workload::WorkloadRun) {
        self.workloads.record(run);
        self.built.changed.insert(run.target().clone());
    }

    /// Restores stored breaker states (the last answer to [`Monitor::load_query`]).
    pub fn restore_breakers(&mut self, records: &[BreakerRecord], now: DateTime<Utc>) {
        for record in records {
            if !self.breakers.contains_key(&record.target) {
                continue; // a target no longer configured
            }
            match Breaker::from_record(Arc::clone(&self.settings), record) {
                Ok(b) => {
                    self.breakers.insert(record.target.clone(), b);
                }
                Err(e) => {
                    tracing::warn!(target = %record.target, error = %e, "stored breaker state unreadable; starting closed")
                }
            }
        }
        self.baselines.refresh(now);
        self.built.all = true;
    }

    /// The question for hours that left the baseline window, if any.
    pub fn expiring_query(&self, now: DateTime<Utc>) -> Option<Query> {
        self.baselines.expiring(now).map(|(from, until)| Query::Expiring { region: self.region.clone(), from, until })
    }

    /// Subtracts the stored rollups of hours that left the window (the answer to [`Monitor::expiring_query`]).
    pub fn expire_with(&mut self, rollups: &[Rollup], until: DateTime<Utc>) {
        let report = self.baselines.expire(rollups, until);
        self.built.all = true;
        tracing::debug!(rollups = report.loaded, %until, "expired hours left the baseline window");
    }

    /// Changed rollups and changed breaker states, as records for the storage link; they count as
    /// persisted from here on (the link keeps them until they are stored, or spools them). A
    /// healthy breaker does not change between probes, so most rounds write none.
    pub fn take_dirty(&mut self) -> Vec<Record> {
        self.take_dirty_of(Part::WHOLE, Hours::All)
    }

    /// [`take_dirty`](Self::take_dirty) for the targets of one `part`: their changed breakers,
    /// and their changed rollups of the `hours` asked for (the rest stay changed for later).
    pub fn take_dirty_of(&mut self, part: Part, hours: Hours) -> Vec<Record> {
        let mut out = Vec::new();
        let rollups = self.baselines.dirty_rollups_of(|t| part.holds(t), hours);
        if !rollups.is_empty() {
            self.baselines.mark_persisted(&rollups);
            out.push(Record::Rollups(rollups));
        }
        for (t, b) in self.breakers.iter().filter(|(t, _)| part.holds(t)) {
            // Compared by fingerprint, not as records: a record's detail is a JSON tree, and
            // building one per target per persist to compare it cost ten times the memory.
            let print = b.fingerprint();
            match self.persisted.get_mut(t) {
                Some(p) if *p == print => continue,
                Some(p) => *p = print,
                None => {
                    self.persisted.insert(t.clone(), print);
                }
            }
            out.push(Record::Breaker(b.to_record(t)));
        }
        out
    }

    /// Reads each target's newest stored samples at once (`vigil thresholds`; the daemon reads
    /// them through the storage link) and restores them ([`Monitor::restore_newest`]).
    async fn load_newest(&mut self, store: &dyn Store, now: DateTime<Utc>) -> Result<(), StoreError> {
        for t in self.targets.clone() {
            if self.last.contains_key(&t) {
                continue;
            }
            let q = SampleQuery::newest_of(&self.region, &t, self.newest_per_target());
            let newest_first = store.samples(&q).await?;
            self.restore_newest([(t, newest_first)], now);
        }
        Ok(())
    }

    /// Restores the newest stored samples of each target, newest first (last probe and cost,
    /// and the last N replies' capability verdicts), so an export built after a restart or by
    /// `vigil thresholds` judges and ranks exactly as the running daemon did. A target probed
    /// since the start keeps what its own probe said.
    pub fn restore_newest(&mut self, read: impl IntoIterator<Item = (Target, Vec<Sample>)>, now: DateTime<Utc>) {
        for (t, newest_first) in read {
            let t = &t;
            if self.last.contains_key(t) {
                continue;
            }
            let replies = self.replies.entry(t.clone()).or_default();
            for s in newest_first.iter().rev() {
                replies.record(s, self.capability);
            }
            for s in newest_first.iter().rev() {
                self.read_headroom(s);
            }
            if let Some(s) = newest_first.into_iter().next() {
                if let Some(c) = s.cost_usd {
                    self.cost.insert(t.clone(), c);
                }
                let deadlines = self.deadlines(t, now);
                self.verdicts.insert(t.clone(), health::verdict(&s, &deadlines));
                if let Some(b) = self.rate_limit.backoff(&s) {
                    self.backoffs.insert(t.clone(), b);
                }
                self.last.insert(t.clone(), Arc::new(s));
                self.built.changed.insert(t.clone());
            }
        }
    }

    /// Takes what a sample's rate-limit headers said into its target's latest reading (a probe
    /// that never reached the provider says nothing and leaves it as it was).
    fn read_headroom(&mut self, s: &Sample) {
        if s.ratelimit.is_empty() {
            return;
        }
        let held = self.headroom.get(&s.target).map(|(h, _)| *h).unwrap_or_default();
        self.headroom.insert(s.target.clone(), (held.updated(&s.ratelimit), s.started_at));
    }

    /// Rebuilds baselines and counts from raw samples (`vigil baselines --rebuild`).
    pub fn rebuild(&mut self, samples: &[Sample], now: DateTime<Utc>) {
        self.baselines.rebuild_from_samples(samples);
        self.baselines.refresh(now);
        self.built.all = true;
    }

    /// Feeds one sample; returns the breaker transition it caused, if any.
    pub fn observe(&mut self, sample: &Sample, now: DateTime<Utc>) -> Option<Transition> {
        self.observe_weighted(&Arc::new(sample.clone()), 1, now)
    }

    /// As [`Monitor::observe`], the sample counting `weight` times in the baselines' percentiles;
    /// kept as the target's latest sample without a copy.
    pub fn observe_weighted(&mut self, shared: &Arc<Sample>, weight: u32, now: DateTime<Utc>) -> Option<Transition> {
        let sample: &Sample = shared;
        // Judge against the baseline as it was before this probe joined it (breaker and health alike).
        let deadlines = self.deadlines(&sample.target, now);
        let p95 = LatencyP95 { ttfb: deadlines.ttfb.published(), ttft: deadlines.ttft.published() };
        let verdict = health::verdict(sample, &deadlines);
        // Keys are cloned only for a target seen the first time: a sample arrives every 60 ms
        // at 1,000 targets, and each clone of a target is four allocations.
        let t = &sample.target;
        if !self.breakers.contains_key(t) {
            self.breakers.insert(t.clone(), Breaker::new(Arc::clone(&self.settings), now));
        }
        let mut transition = None;
        let mut in_trouble = !self.incidents.is_empty() && self.incidents.contains(&t.id());
        if let Some(breaker) = self.breakers.get_mut(t) {
            // A sample taken with the breaker open or half-open (or the one that opens it) is
            // trouble: it must not teach the baseline that judges the next trial.
            in_trouble |= breaker.state() != State::Closed;
            transition = breaker.observe(Probe::from(sample), p95, now);
            in_trouble |= breaker.state() != State::Closed;
        }
        if let Some(adoption) = self.baselines.record_guarded(sample, weight, in_trouble) {
            self.adopted_shift(adoption);
        }
        if let Some(c) = sample.cost_usd {
            match self.cost.get_mut(t) {
                Some(v) => *v = c,
                None => {
                    self.cost.insert(t.clone(), c);
                }
            }
        }
        match self.last.get_mut(t) {
            Some(v) => *v = Arc::clone(shared),
            None => {
                self.last.insert(t.clone(), Arc::clone(shared));
            }
        }
        self.read_headroom(sample);
        match self.verdicts.get_mut(t) {
            Some(v) => *v = verdict,
            None => {
                self.verdicts.insert(t.clone(), verdict);
            }
        }
        if let Some(b) = self.rate_limit.backoff(sample) {
            self.backoffs.insert(t.clone(), b);
        }
        match self.replies.get_mut(t) {
            Some(r) => r.record(sample, self.capability),
            None => self.replies.entry(t.clone()).or_default().record(sample, self.capability),
        }
        if !self.built.changed.contains(t) {
            self.built.changed.insert(t.clone());
        }
        transition
    }

    /// Takes a capability probe's verdict (a run whose request failed says nothing) into what
    /// the chains' `requires` read at the next publish.
    pub fn observe_capability(&mut self, run: &crate::vocab::check::CheckRun) {
        use crate::vocab::check::CheckVerdict;
        let Some(capability) = crate::vocab::capability::Capability::of_check(&run.check) else { return };
        let passing = match run.verdict {
            CheckVerdict::Passed => true,
            CheckVerdict::Failed => false,
            CheckVerdict::Error => return,
        };
        self.capabilities.entry(run.target().id()).or_default().insert(capability, passing);
    }

    /// Notes the targets with an open latency or error incident (by id), after each evaluation.
    pub fn set_incidents(&mut self, ids: impl IntoIterator<Item = String>) {
        self.incidents = ids.into_iter().collect();
    }

    /// Adopts what a target has held out of its baseline now (`vigil baselines adopt`); `None`
    /// when nothing is held for it.
    pub fn adopt(&mut self, target: &Target, now: DateTime<Utc>) -> Option<crate::decide::baseline::Adoption> {
        let adoption = self.baselines.adopt(target, now, true)?;
        self.adopted_shift(adoption.clone());
        Some(adoption)
    }

    /// The targets this region probes, in config order.
    pub fn targets(&self) -> &[Target] {
        &self.targets
    }

    /// A configured target by its id (`provider/model[@route]`).
    pub fn target_by_id(&self, id: &str) -> Option<&Target> {
        self.targets.iter().find(|t| t.id() == id)
    }

    fn adopted_shift(&mut self, adoption: crate::decide::baseline::Adoption) {
        let t = &adoption.target;
        tracing::warn!(target = %t, provider = %t.provider, model = %t.model, region = %t.region,
            since = %adoption.since, weight = adoption.weight, by_request = adoption.by_request,
            "{}", adoption.describe());
        self.baselines.refresh(adoption.at);
        self.built.changed.insert(t.clone());
        self.adopted.push(adoption);
    }

    /// The shifts adopted since the last call, for the alert engine's `baseline_shift` facet.
    pub fn take_adoptions(&mut self) -> Vec<crate::decide::baseline::Adoption> {
        std::mem::take(&mut self.adopted)
    }

    /// Moves open breakers whose wait is over to half-open.
    pub fn tick(&mut self, now: DateTime<Utc>) -> Vec<(Target, Transition)> {
        let moved: Vec<(Target, Transition)> =
            self.breakers.iter_mut().filter_map(|(t, b)| b.tick(now).map(|tr| (t.clone(), tr))).collect();
        self.built.changed.extend(moved.iter().map(|(t, _)| t.clone()));
        moved
    }

    /// Moves one target's breaker to half-open if its wait is over (before judging its probe;
    /// the other targets are moved by the periodic [`tick`](Self::tick)).
    pub fn tick_target(&mut self, target: &Target, now: DateTime<Utc>) -> Option<Transition> {
        let moved = self.breakers.get_mut(target).and_then(|b| b.tick(now));
        if moved.is_some() {
            self.built.changed.insert(target.clone());
        }
        moved
    }

    /// A target's failover deadlines as of `now` (provisional ones while its P95 is unpublished).
    fn deadlines(&mut self, t: &Target, now: DateTime<Utc>) -> Deadlines {
        let (ttfb, ttft) = (self.baselines.get(t, Metric::Ttfb, now), self.baselines.get(t, Metric::Ttft, now));
        let (ttfb_bound, ttft_bound) =
            (self.p95_bound(t, Metric::Ttfb, &ttfb, now), self.p95_bound(t, Metric::Ttft, &ttft, now));
        Deadlines { ttfb: self.failover.deadline(&ttfb, ttfb_bound), ttft: self.failover.deadline(&ttft, ttft_bound) }
    }

    /// The provisional P95 bound of a metric whose P95 is not yet published.
    fn p95_bound(
        &mut self,
        t: &Target,
        metric: Metric,
        base: &Baseline,
        now: DateTime<Utc>,
    ) -> Option<health::P95Bound> {
        match base.p95 {
            Some(_) => None,
            None => health::p95_upper_bound(base.count, |q| self.baselines.quantile_any(t, metric, q, now)),
        }
    }

    /// A target's health at `now`: its breaker, its latest probe's verdict, the capabilities its
    /// last replies all failed, the flapping mark and its latest 429's backoff, through the one rule.
    pub fn health(&self, t: &Target, now: DateTime<Utc>) -> Health {
        let b = self.breakers.get(t);
        let breaker = BreakerView { state: b.map_or(State::Closed, |b| b.state()), reason: b.and_then(|b| b.reason()) };
        let failing = self.replies.get(t).map(|r| r.failures(self.capability)).unwrap_or_default();
        health::judge(breaker, self.verdicts.get(t), &failing, self.flapping.is_flapping(t), self.backoffs.get(t), now)
    }

    /// This region's view of each target it probes, to publish for the other regions
    /// (`target_status`); `over_latency` is the latency alert's sustained evidence.
    pub fn statuses(&self, now: DateTime<Utc>, over_latency: impl Fn(&Target) -> bool) -> Vec<TargetStatus> {
        self.targets
            .iter()
            .map(|t| TargetStatus {
                target: t.clone(),
                health: self.health(t, now),
                over_latency: over_latency(t),
                breaker: self.breakers.get(t).map_or(State::Closed, |b| b.state()),
                updated_at: now,
            })
            .collect()
    }

    /// Projects each watched provider's credit from its readings (oldest first, as the storage
    /// link reads them): the export demotes a provider projected empty within its
    /// `balance.demote_within`. A provider without readings keeps its last projection.
    pub fn read_credit(&mut self, readings: &BTreeMap<String, Vec<crate::vocab::records::BalanceReading>>) {
        for (provider, within) in &self.demote_within {
            let Some(rs) = readings.get(provider) else { continue };
            let points: Vec<(DateTime<Utc>, f64)> = rs.iter().map(|r| (r.at, r.remaining_usd)).collect();
            match crate::decide::credit::outlook(&points, *within) {
                Some(o) => self.credit.insert(provider.clone(), o),
                None => self.credit.remove(provider),
            };
        }
    }

    /// The current breaker of a target.
    pub fn breaker(&self, target: &Target) -> Option<&Breaker> {
        self.breakers.get(target)
    }

    /// Current baseline of one metric.
    pub fn baseline(&mut self, target: &Target, metric: Metric, now: DateTime<Utc>) -> Baseline {
        self.baselines.get(target, metric, now)
    }

    /// Builds the router export and the target explanations, and updates the baseline and breaker
    /// gauges, rebuilding only the targets that changed since the last publish.
    pub fn publish(&mut self, now: DateTime<Utc>, metrics: Option<&Metrics>) -> Snapshot {
        self.baselines.refresh(now);
        let window = Some(self.baselines.window_hours(now));
        let flapping = self.flapping.targets();
        let mut built = std::mem::take(&mut self.built);
        // Past an hour boundary every window moved; a first publish with metrics sets every gauge.
        built.all |= built.window != window || (metrics.is_some() && !built.gauges);
        built.window = window;
        built.gauges = metrics.is_some();
        built.changed.extend(flapping.symmetric_difference(&built.flapping).cloned());
        // A backoff that ran out changes its target's health with no sample arriving.
        let over: Vec<Target> = self.backoffs.iter().filter(|(_, b)| b.until <= now).map(|(t, _)| t.clone()).collect();
        for t in over {
            self.backoffs.remove(&t);
            built.changed.insert(t);
        }
        built.flapping = flapping;
        if built.all {
            built.stats.clear();
            built.views.clear();
        }
        // Taken out and put back, so the loop can borrow the rest of the monitor without a clone.
        let targets = std::mem::take(&mut self.targets);
        // Sized to the targets once: grown by doubling, the stats (about 650 bytes each) kept up
        // to two thirds more room than they used (4 MB of 10 at 10,000 targets).
        let more = targets.len().saturating_sub(built.stats.len());
        built.stats.reserve_exact(more);
        built.views.reserve_exact(more);
        for (i, t) in targets.iter().enumerate() {
            if built.reusable(i, t) {
                continue;
            }
            let (stats, view) = self.build_target(t, now, metrics);
            if i < built.views.len() {
                built.stats[i] = stats;
                built.views[i] = Arc::new(view);
            } else {
                built.stats.push(stats);
                built.views.push(Arc::new(view));
            }
        }
        self.targets = targets;
        built.all = false;
        built.changed.clear();
        let params = ExportParams {
            region: self.region.clone(),
            generated_at: now,
            probe_interval: self.probe_interval,
            window: self.baseline_window,
            failover: self.failover,
            breaker: export::BreakerParams {
                consecutive_failures: self.settings.consecutive_failures,
                failure_window_s: self.settings.failure_window.num_seconds().max(0) as u64,
                latency_trips: self.settings.latency_trips,
                open_for_s: self.settings.open_for.num_seconds().max(0) as u64,
                failover_factor: self.failover.factor,
                failure_k: self.settings.consecutive_failures,
                failure_n: self.settings.failure_n,
                rate_limit_backoff_s: self.settings.rate_limit.backoff.num_seconds().max(0) as u64,
                rate_limit_trips: self.settings.rate_limit.trips,
            },
            chains: self.chains.clone(),
            providers: self.router_providers.clone(),
            ttft_timeout: self.ttft_timeout,
            total_timeout: self.total_timeout,
            credit: self.credit.clone(),
            drills: self.drills.clone(),
            capabilities: self.capabilities.clone(),
        };
        let snapshot = Snapshot {
            thresholds: Some(Arc::new(export::build_ordered(&params, &built.stats, &mut built.order))),
            targets: built.views.clone(),
            elsewhere: Arc::default(),
            elsewhere_health: Arc::default(),
            credits: Arc::default(),
            flapping: self.flapping.clone(),
            probe_plan: None,
            drills: Arc::new(self.drills.iter().filter(|d| d.active_at(now)).cloned().collect()),
        };
        self.built = built;
        snapshot
    }

    /// One target's export statistics and explanation as of `now`; sets its gauges.
    fn build_target(&mut self, t: &Target, now: DateTime<Utc>, metrics: Option<&Metrics>) -> (TargetStats, TargetView) {
        let b = ViewBaselines {
            tokens_per_s: self.baselines.get(t, Metric::TokensPerS, now),
            ttfb: self.baselines.get(t, Metric::Ttfb, now),
            ttft: self.baselines.get(t, Metric::Ttft, now),
        };
        let (probes, errors) = self.baselines.window_counts(t);
        let breaker = self.breakers.get(t).map(|b| b.explain());
        let state = breaker.as_ref().map_or(State::Closed, |e| e.state);
        if let Some(m) = metrics {
            for (name, base) in [("ttfb", b.ttfb), ("ttft", b.ttft)] {
                for (q, v) in [("0.5", base.p50), ("0.95", base.p95), ("0.99", base.p99)] {
                    m.set_baseline(t, name, q, v.map(|ms| ms / 1000.0));
                }
            }
            m.set_circuit(t, state.gauge());
        }
        let (ttfb, ttft) = (b.ttfb, b.ttft);
        let (ttfb_p95_bound, ttft_p95_bound) =
            (self.p95_bound(t, Metric::Ttfb, &ttfb, now), self.p95_bound(t, Metric::Ttft, &ttft, now));
        let health = self.health(t, now);
        // Shared by the stats, the export row, its chain entries and the view: 128 bytes in each of
        // 10,000 rows of each, mostly empty, when held inline.
        let ratelimit =
            self.headroom.get(t).and_then(|(h, at)| HeadroomView::of(h, *at, self.low_fraction)).map(Arc::new);
        let workloads = self.workloads.of(t, now);
        let stats = TargetStats {
            target: t.clone(),
            ttfb,
            ttft,
            tokens_per_s: b.tokens_per_s,
            probes: u64::try_from(probes).unwrap_or(0),
            errors: u64::try_from(errors).unwrap_or(0),
            breaker: state,
            next_half_open: breaker.as_ref().and_then(|e| e.next_half_open),
            cost_per_probe_usd: self.cost.get(t).copied(),
            ttfb_p95_bound,
            ttft_p95_bound,
            health: health.clone(),
            price: self.price_of(t),
            ratelimit: ratelimit.clone(),
            workloads: workloads.clone(),
        };
        let view = TargetView {
            key: TargetKey::from(t),
            region: t.region.clone(),
            last_sample: self.last.get(t).cloned(),
            baselines: b,
            probes,
            errors,
            breaker: breaker.unwrap_or_else(|| Breaker::new(Arc::clone(&self.settings), now).explain()),
            flapping: health.flapping,
            health,
            ratelimit,
            workloads,
        };
        (stats, view)
    }

    /// Reads which targets flap from the alert stage's published set (router export, `/v1/targets`).
    pub fn watch_flapping(&mut self, set: crate::decide::alert::FlappingSet) {
        self.flapping = set;
        self.built.all = true;
    }

    /// Subtracts the hours that left the window, read back from the store (a no-op within an hour).
    pub async fn expire(&mut self, store: &dyn Store, now: DateTime<Utc>) -> Result<(), StoreError> {
        if let Some((from, until)) = self.baselines.expiring(now) {
            let rollups = store.rollups_between(Some(&self.region), from, Some(until)).await?;
            let report = self.baselines.expire(&rollups, until);
            self.built.all = true;
            tracing::debug!(rollups = report.loaded, %from, %until, "expired hours left the baseline window");
        }
        Ok(())
    }

    /// Writes changed rollups, counts and breaker states; what fails stays dirty for the next try.
    pub async fn persist(&mut self, store: &dyn Store) -> Result<(), StoreError> {
        let rollups = self.baselines.dirty_rollups();
        if !rollups.is_empty() {
            store.upsert_rollups(&rollups).await?;
            self.baselines.mark_persisted(&rollups);
        }
        for (t, b) in &self.breakers {
            store.save_breaker(&b.to_record(t)).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    //! Snapshot publishing: what readers (HTTP, the router export, the gauges) see after each
    //! publish, with injected time.
    use super::*;
    use crate::vocab::sample::Outcome;

    fn t0() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-30T12:00:00Z").expect("time").with_timezone(&Utc)
    }

    fn at(secs: i64) -> DateTime<Utc> {
        t0() + chrono::Duration::seconds(secs)
    }

    fn target(model: &str) -> Target {
        Target::new("p".into(), model.into(), None, "eu".into())
    }

    fn monitor() -> Monitor {
        let text = "region = \"eu\"\n[probe]\ninterval = \"5s\"\ntimeout = \"5s\"\n";
        let config = Config::from_toml(text, &std::collections::BTreeMap::new()).expect("config");
        Monitor::new(&config, vec![target("a"), target("b")], t0())
    }

    fn probe(model: &str, secs: i64, outcome: Outcome, ttfb_ms: f64) -> Sample {
        let mut s = Sample::new(target(model), at(secs), at(secs));
        s.outcome = outcome;
        s.ttfb_ms = Some(ttfb_ms);
        s.ttft_ms = Some(ttfb_ms * 2.0);
        s.cost_usd = Some(0.001);
        s
    }

    #[test]
    fn a_snapshot_explains_every_configured_target_even_before_its_first_probe() {
        let mut m = monitor();
        m.observe(&probe("a", 0, Outcome::Ok, 200.0), at(0));
        let snap = m.publish(at(1), None);
        let ids: Vec<&str> = snap.targets.iter().map(|v| v.key.model.as_str()).collect();
        assert_eq!(ids, ["a", "b"], "in config order");
        let (a, b) = (&snap.targets[0], &snap.targets[1]);
        assert_eq!(a.last_sample.as_ref().and_then(|s| s.ttfb_ms), Some(200.0));
        assert_eq!((a.probes, a.errors), (1, 0));
        assert!(b.last_sample.is_none() && b.probes == 0);
        assert_eq!(b.breaker.state, State::Closed, "an unprobed target is explained as closed");
        let thresholds = snap.thresholds.expect("the router export is built on every publish");
        assert_eq!(thresholds.region, "eu");
        assert_eq!(thresholds.targets.len(), 2);
        assert!(snap.elsewhere.is_empty() && snap.credits.is_empty(), "the pipeline adds what it read");
    }

    #[test]
    fn an_open_breaker_is_published_to_readers_and_the_gauges() {
        let mut m = monitor();
        let metrics = Metrics::new("eu").expect("metrics");
        let mut moved = Vec::new();
        for i in 0..3 {
            moved.extend(m.observe(&probe("a", i, Outcome::ServerError, 0.0), at(i)));
        }
        assert_eq!(moved.last().map(|t| t.to), Some(State::Open), "three failures in a row open it");
        let snap = m.publish(at(3), Some(&metrics));
        let a = snap.targets.iter().find(|v| v.key.model == "a").expect("a");
        assert_eq!(a.breaker.state, State::Open);
        assert!(a.breaker.next_half_open.is_some(), "readers see when it is tried again");
        assert_eq!((a.probes, a.errors), (3, 3));
        let exported = snap.thresholds.expect("export");
        let row = exported.targets.iter().find(|t| t.key.model == "a").expect("a exported");
        assert_eq!(row.breaker, State::Open, "routers skip it");
        let text = metrics.render();
        assert!(text.contains(r#"vigil_circuit_state{model="a",provider="p",region="eu",route=""} 2"#), "{text}");
        // Its wait over, the periodic tick half-opens it; the next publish says so.
        let later = a.breaker.next_half_open.expect("next") + chrono::Duration::seconds(1);
        assert_eq!(m.tick(later).len(), 1);
        let snap = m.publish(later, Some(&metrics));
        assert_eq!(snap.targets[0].breaker.state, State::HalfOpen);
    }

    /// The issue's scenario at a 1 s interval (`min_samples_p95 = 40`): the target is made 3×
    /// slower at t = 60 s and stays slow until t = 90 s. Before the guard its P95 learned the
    /// slowdown and a trial passed at t = 67 s while it was still slow.
    fn slowdown(adopt_after: &str, slow_until: i64) -> (Monitor, Vec<(i64, State)>) {
        let text = format!(
            "region = \"eu\"\n[probe]\ninterval = \"1s\"\ntimeout = \"900ms\"\n\
             [baseline]\nmin_samples_p95 = 40\nadopt_after = \"{adopt_after}\"\n[breaker]\nopen_for = \"3s\"\n"
        );
        let config = Config::from_toml(&text, &std::collections::BTreeMap::new()).expect("config");
        let mut m = Monitor::new(&config, vec![target("a")], t0());
        let mut states = Vec::new();
        for i in 0..slow_until + 30 {
            let ttfb = if (60..slow_until).contains(&i) { 270.0 } else { 90.0 + (i % 5) as f64 };
            m.tick_target(&target("a"), at(i));
            m.observe(&probe("a", i, Outcome::Ok, ttfb), at(i));
            states.push((i, m.breaker(&target("a")).map_or(State::Closed, |b| b.state())));
        }
        (m, states)
    }

    #[test]
    fn a_slow_target_stays_out_for_the_whole_slowdown_and_comes_back_after_it() {
        let (mut m, states) = slowdown("24h", 90);
        let during: Vec<_> = states.iter().filter(|(i, _)| (62..90).contains(i)).collect();
        assert!(
            during.iter().all(|(_, s)| *s != State::Closed),
            "never closed while slow (trials judged against the level before): {during:?}"
        );
        assert_eq!(states.last().map(|s| s.1), Some(State::Closed), "back after the slowdown");
        let p95 = m.baseline(&target("a"), Metric::Ttft, at(120)).p95.expect("p95");
        assert!(p95 < 200.0, "the slowdown never joined the baseline: TTFT P95 {p95}");
        assert!(m.take_adoptions().is_empty(), "30 s is no lasting shift");
    }

    #[test]
    fn a_lasting_shift_is_adopted_after_adopt_after_and_the_target_comes_back() {
        // Slow from 60 s to 200 s: a shift, adopted a minute after it began.
        let (mut m, states) = slowdown("1m", 200);
        let adopted = m.take_adoptions();
        assert_eq!(adopted.len(), 1, "{adopted:?}");
        let a = &adopted[0];
        assert!(a.at - a.since >= chrono::Duration::seconds(60) && a.at < at(130), "{a:?}");
        assert!(a.after.p95.is_some_and(|p| p > 500.0), "the slow level: {a:?}");
        let back = states.iter().find(|(i, s)| *i > 62 && *s == State::Closed).map(|s| s.0);
        assert!(back.is_some_and(|i| i < 140), "judged against the adopted level, it passes its trial: {states:?}");
        let p95 = m.baseline(&target("a"), Metric::Ttft, at(230)).p95.expect("p95");
        assert!(p95 > 500.0, "the baseline describes the new level: {p95}");
    }

    #[test]
    fn a_held_level_is_adopted_on_request_and_the_notice_is_queued() {
        let text =
            "region = \"eu\"\n[probe]\ninterval = \"1s\"\ntimeout = \"900ms\"\n[baseline]\nadopt_after = \"off\"\n";
        let config = Config::from_toml(text, &std::collections::BTreeMap::new()).expect("config");
        let mut m = Monitor::new(&config, vec![target("a")], t0());
        m.observe(&probe("a", 0, Outcome::Ok, 100.0), at(0));
        assert!(m.adopt(&target("a"), at(1)).is_none(), "not in trouble: nothing held");
        m.set_incidents([target("a").id()]);
        m.observe(&probe("a", 2, Outcome::Ok, 400.0), at(2));
        assert_eq!(m.baseline(&target("a"), Metric::Ttfb, at(3)).count, 1, "held out during the incident");
        assert_eq!(m.target_by_id("p/a"), Some(&target("a")));
        let a = m.adopt(&target("a"), at(3)).expect("adopted");
        assert!(a.by_request && a.samples == 1);
        assert_eq!(m.take_adoptions(), vec![a]);
        assert!(m.baseline(&target("a"), Metric::Ttfb, at(3)).count >= 4, "weighted to three quarters");
    }

    #[test]
    fn a_publish_rebuilds_what_changed_and_reuses_the_rest() {
        let mut m = monitor();
        let metrics = Metrics::new("eu").expect("metrics");
        m.observe(&probe("a", 0, Outcome::Ok, 200.0), at(0));
        m.observe(&probe("b", 0, Outcome::Ok, 300.0), at(0));
        let first = m.publish(at(1), Some(&metrics));
        // Only `a` is probed again: `b`'s explanation is the very same one, `a`'s is new.
        m.observe(&probe("a", 5, Outcome::ServerError, 0.0), at(5));
        let second = m.publish(at(6), Some(&metrics));
        assert!(Arc::ptr_eq(&first.targets[1], &second.targets[1]), "unchanged b is reused");
        assert!(!Arc::ptr_eq(&first.targets[0], &second.targets[0]), "a is rebuilt");
        assert_eq!((second.targets[0].probes, second.targets[0].errors), (2, 1));
        let row = |snap: &Snapshot, model: &str| {
            let t = snap.thresholds.as_ref().expect("export");
            t.targets.iter().find(|r| r.key.model == model).cloned().expect("row")
        };
        assert_ne!(row(&first, "a"), row(&second, "a"), "the export sees a's new probe");
        assert_eq!(row(&first, "b"), row(&second, "b"), "and b as it was");
        // The flapping set changing rebuilds the targets that joined or left it.
        let set = crate::decide::alert::FlappingSet::default();
        m.watch_flapping(set.clone());
        let third = m.publish(at(7), Some(&metrics));
        set.set([target("b")]);
        let fourth = m.publish(at(8), Some(&metrics));
        assert!(fourth.targets[1].flapping && !fourth.targets[0].flapping);
        assert!(Arc::ptr_eq(&third.targets[0], &fourth.targets[0]), "a did not change");
        // Past the hour every window moved: everything is rebuilt.
        let next_hour = m.publish(at(3600), Some(&metrics));
        assert!(next_hour.targets.iter().zip(&fourth.targets).all(|(n, o)| !Arc::ptr_eq(n, o)));
        assert_eq!(next_hour.targets[1].probes, 1, "b's probe is still in the 7-day window");
    }

    #[test]
    fn replies_ignoring_the_system_prompt_n_times_degrade_the_health_and_keep_the_breaker_closed() {
        let text = "region = \"eu\"\n[probe]\ninterval = \"5s\"\ntimeout = \"5s\"\n[alerts]\nerror_probes = 3\n";
        let config = Config::from_toml(text, &std::collections::BTreeMap::new()).expect("config");
        let mut m = Monitor::new(&config, vec![target("a")], t0());
        let disobeying = |secs: i64| {
            let mut s = probe("a", secs, Outcome::Ok, 200.0);
            s.adherence_ok = Some(false);
            s
        };
        for i in 0..2 {
            m.observe(&disobeying(i), at(i));
        }
        assert!(m.health(&target("a"), at(9)).is_clean(), "two of three: not yet");
        m.observe(&disobeying(2), at(2));
        let h = m.health(&target("a"), at(9));
        assert_eq!(h.state, crate::vocab::health::HealthState::Degraded);
        assert_eq!(h.reason.as_deref(), Some("replies ignore the system prompt (last 3 of 3)"));
        let snap = m.publish(at(3), None);
        assert_eq!(snap.targets[0].health, h, "readers see the one judgement");
        let doc = snap.thresholds.expect("export");
        assert_eq!(doc.targets[0].breaker, State::Closed, "it answers: the breaker does not count it");
        let mut obeying = probe("a", 4, Outcome::Ok, 200.0);
        obeying.adherence_ok = Some(true);
        m.observe(&obeying, at(4));
        assert!(m.health(&target("a"), at(9)).is_clean(), "one obeying reply clears it");
    }

    #[test]
    fn changed_state_is_handed_to_the_link_once() {
        let mut m = monitor();
        m.observe(&probe("a", 0, Outcome::Ok, 200.0), at(0));
        let first = m.take_dirty();
        assert!(first.iter().any(|r| matches!(r, Record::Rollups(_))), "the new probe's rollup");
        assert_eq!(first.iter().filter(|r| matches!(r, Record::Breaker(_))).count(), 2, "every breaker once");
        assert!(m.take_dirty().is_empty(), "nothing changed since: nothing to write");
        m.observe(&probe("a", 1, Outcome::Ok, 210.0), at(1));
        let again = m.take_dirty();
        assert!(again.iter().all(|r| matches!(r, Record::Rollups(_))), "a healthy breaker does not change: {again:?}");
        m.observe(&probe("a", 2, Outcome::ServerError, 0.0), at(2));
        let failed: Vec<_> = m
            .take_dirty()
            .into_iter()
            .filter_map(|r| match r {
                Record::Breaker(b) => Some(b),
                _ => None,
            })
            .collect();
        assert_eq!(failed.len(), 1, "only the breaker that counted a failure: {failed:?}");
        assert_eq!(failed[0].target, target("a"));
        let detail: serde_json::Value = failed[0].detail.parse().expect("detail is JSON");
        assert_eq!(detail["failures"].as_array().map(Vec::len), Some(1), "{detail}");
        assert!(m.take_dirty().is_empty(), "written once");
    }

    #[test]
    fn handed_over_a_part_at_a_time_every_change_is_written_once_by_the_part_of_its_target() {
        let models: Vec<String> = (0..40).map(|i| format!("m{i}")).collect();
        let targets: Vec<Target> = models.iter().map(|m| target(m)).collect();
        let config = Config::from_toml("region = \"eu\"\n", &std::collections::BTreeMap::new()).expect("config");
        let mut m = Monitor::new(&config, targets.clone(), t0());
        for (i, model) in models.iter().enumerate() {
            m.observe(&probe(model, i as i64, Outcome::Ok, 200.0), at(40));
        }
        let of = 4;
        let mut written: Vec<(Target, u32)> = Vec::new();
        for index in 0..of {
            let part = Part { index, of };
            for record in m.take_dirty_of(part, Hours::All) {
                let ts: Vec<Target> = match record {
                    Record::Rollups(rs) => rs.into_iter().map(|r| r.target).collect(),
                    Record::Breaker(b) => vec![b.target],
                    other => panic!("only rollups and breakers: {other:?}"),
                };
                for t in ts {
                    assert!(part.holds(&t), "{t} handed over with part {index} but not in it");
                    written.push((t, index));
                }
            }
        }
        for t in &targets {
            let parts: std::collections::BTreeSet<u32> =
                written.iter().filter(|(w, _)| w == t).map(|(_, i)| *i).collect();
            assert_eq!(parts.len(), 1, "{t}: in exactly one part: {parts:?}");
            // Four rollups (TTFB, TTFT, probes, errors: the probe streamed no tokens) and the
            // breaker, once each.
            assert_eq!(written.iter().filter(|(w, _)| w == t).count(), 5, "{t}");
        }
        let sizes: Vec<usize> = (0..of).map(|i| written.iter().filter(|(_, p)| *p == i).count()).collect();
        assert!(sizes.iter().all(|n| *n > 0), "the targets spread over the parts: {sizes:?}");
        assert!(m.take_dirty().is_empty(), "nothing left once every part was handed over");
    }
}
