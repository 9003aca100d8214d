//! The rule engine: pure, with `now` injected. Each round it is fed the round's samples (with
//! their baselines and what other regions see), breaker transitions and credit readings, and
//! returns the notifications to enqueue: one per incident that opened, grew, was re-sent or
//! resolved. Rules judge *facets* (errors, breaker, latency, model gone, adherence, flapping…)
//! with their own evidence and hysteresis; [`super::incident`] folds the facets of one target
//! (or of a whole provider) into one incident. Its state is plain serde data so it survives a
//! restart through `Store::save_alert_state`.

use super::flap;
use super::incident::Incidents;
use super::incident::Subject;
use super::settings::RuleConfig;
use super::Alert;
use super::AlertKind;
use super::Notification;
use super::Scope;
use super::Severity;
use crate::decide::baseline::{worst_excess, LatencyP95};
use crate::decide::credit::burn_rate;
use crate::vocab::breaker::State;
use crate::vocab::sample::{Outcome, Sample};
use crate::vocab::target::Target;
use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

/// Target identity across regions: (provider, model, route).
pub type ModelKey = (crate::vocab::target::Name, crate::vocab::target::Name, Option<crate::vocab::target::Name>);

/// Baseline P95s of one target in this region (`None` while too few samples).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BaselineP95 {
    /// TTFB P95, ms.
    pub ttfb_p95_ms: Option<f64>,
    /// TTFT P95, ms.
    pub ttft_p95_ms: Option<f64>,
}

/// What the other regions see for the same target (from their `target_status` rows).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Elsewhere {
    /// Other regions probing the target (with a fresh row).
    pub regions: u32,
    /// Of those, how many see it failing (down or half-open).
    pub failing: u32,
    /// …how many see it over their own latency threshold.
    pub over_latency: u32,
    /// …how many have its breaker open or half-open.
    pub breaker_open: u32,
    /// …how many see it flapping.
    pub flapping: u32,
}

/// One sample of this round with its context.
#[derive(Debug, Clone)]
pub struct RoundProbe<'a> {
    /// The sample.
    pub sample: &'a Sample,
    /// The target's baseline in this region.
    pub baseline: BaselineP95,
    /// Other regions' view of the same target.
    pub elsewhere: Elsewhere,
}

/// A breaker transition as the breaker reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct BreakerChange {
    /// Target (with region).
    pub target: Target,
    /// Previous state.
    pub from: State,
    /// New state.
    pub to: State,
    /// Why, for humans.
    pub reason: String,
}

/// Recent credit readings of one provider, oldest first, with its thresholds.
#[derive(Debug, Clone, PartialEq)]
pub struct CreditCheck {
    /// Provider name.
    pub provider: String,
    /// (time, USD left), oldest first; the last is the current balance.
    pub readings: Vec<(DateTime<Utc>, f64)>,
    /// `balance.min_usd`.
    pub min_usd: f64,
    /// `balance.warn_hours`.
    pub warn_hours: f64,
}

/// Everything one evaluation looks at.
#[derive(Debug, Clone, Default)]
pub struct Round<'a> {
    /// This round's samples (one per target).
    pub probes: Vec<RoundProbe<'a>>,
    /// Breaker transitions since the last round.
    pub breaker: Vec<BreakerChange>,
    /// Credit readings taken since the last round.
    pub credits: Vec<CreditCheck>,
    /// Canary runs finished since the last round (judged for `model_changed` only).
    pub canaries: Vec<&'a crate::vocab::canary::CanaryRun>,
    /// Golden check runs finished since the last round (judged for `check_failed` only).
    pub checks: Vec<&'a crate::vocab::check::CheckRun>,
    /// Shifts the baselines adopted since the last round (`baseline_shift`).
    pub shifts: Vec<crate::decide::baseline::Adoption>,
    /// Each chain with a `ttft_slo` or `total_slo`, as the router export judged it now (`chain_slo_at_risk`).
    pub chains: Vec<ChainSloCheck>,
    /// Each chain's head in the last published export (`chain_head_changed`).
    pub heads: Vec<super::chain_head::ChainHeadCheck>,
}

/// One chain's latency budgets as the router export judged them.
#[derive(Debug, Clone, PartialEq)]
pub struct ChainSloCheck {
    /// Chain name.
    pub chain: String,
    /// To a first token, against `ttft_slo` (none without one).
    pub ttft: Option<SloBudget>,
    /// To a complete answer, against `total_slo` (none without one).
    pub total: Option<SloBudget>,
}

/// One latency budget of a chain: its SLO and the worst case with every member failing over in turn.
#[derive(Debug, Clone, PartialEq)]
pub struct SloBudget {
    /// The SLO, ms.
    pub slo_ms: f64,
    /// The worst case, ms.
    pub worst_case_ms: f64,
    /// Whether the worst case is within the SLO.
    pub meets: bool,
    /// The member at which the running sum passes the SLO.
    pub breaking_member: Option<String>,
}

impl SloBudget {
    /// `worst case 2600 ms to a first token …, over ttft_slo 2000 ms, broken at M` (or within it).
    fn describe(&self, what: &str, key: &str) -> String {
        let (worst, slo) = (self.worst_case_ms, self.slo_ms);
        if self.meets {
            return format!("worst case {worst:.0} ms to {what}, within {key} {slo:.0} ms");
        }
        let breaking = self
            .breaking_member
            .as_deref()
            .map(|m| format!(", broken at {m}"))
            .unwrap_or_else(|| ": nothing in the chain can answer".to_string());
        format!(
            "worst case {worst:.0} ms to {what} if every member fails over in turn, over {key} {slo:.0} ms{breaking}"
        )
    }
}

/// `chain_slo_at_risk`: holds while a chain's worst case is over its `ttft_slo` or its
/// `total_slo`, naming the member that breaks each; resolves (after `resolve_after`
/// evaluations) once both are met again.
fn chain_verdicts(region: &str, round: &Round<'_>, out: &mut Vec<Verdict>) {
    for c in &round.chains {
        let budgets: Vec<(&SloBudget, &str, &str)> = [
            c.ttft.as_ref().map(|b| (b, "a first token", "ttft_slo")),
            c.total.as_ref().map(|b| (b, "a complete answer", "total_slo")),
        ]
        .into_iter()
        .flatten()
        .collect();
        let Some(&(first, _, _)) = budgets.first() else { continue };
        let broken: Vec<&(&SloBudget, &str, &str)> = budgets.iter().filter(|(b, _, _)| !b.meets).collect();
        // Broken budgets alone say why it fires; a met chain says how far it is within each.
        let said: Vec<String> = match broken.is_empty() {
            true => budgets.iter().map(|(b, what, key)| b.describe(what, key)).collect(),
            false => broken.iter().map(|(b, what, key)| b.describe(what, key)).collect(),
        };
        let summary = format!("chain {}: {}", c.chain, said.join("; "));
        let shown = broken.first().map_or(first, |(b, _, _)| *b);
        let mut a = Alert::for_chain(AlertKind::ChainSloAtRisk, region, &c.chain, summary);
        a.current = Some(shown.worst_case_ms);
        a.baseline = Some(shown.slo_ms);
        out.push(Verdict { alert: a, holds: !broken.is_empty() });
    }
}

/// One ok probe judged against the latency threshold.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Judged {
    /// Over the threshold on TTFB or TTFT.
    slow: bool,
    /// The worse metric's name, value and threshold (the name borrowed while judged here: a
    /// state copied every minute copies no name).
    metric: std::borrow::Cow<'static, str>,
    value: f64,
    threshold: f64,
}

/// One target's memory. Fields that read back as their default are not written when they hold
/// it (a healthy target's are most of them): the state is stored whole every minute, and at
/// 10,000 targets that left out a quarter of its 3 MB. Each such field has read back as its default
/// when absent (`default`) since it was added, so an older build reads the shorter state too.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct History {
    target: Option<Target>,
    /// Last outcomes with their start times and error text, newest last.
    recent: VecDeque<(DateTime<Utc>, Outcome, Option<String>)>,
    /// Last ok probes judged against the latency threshold (only while a baseline exists).
    #[serde(default, skip_serializing_if = "VecDeque::is_empty")]
    judged: VecDeque<Judged>,
    /// Last adherence verdicts.
    adherence: VecDeque<bool>,
    /// Failed-or-not of the last probes, for flap detection.
    #[serde(default)]
    states: VecDeque<bool>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    flapping: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    breaker: Option<State>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    breaker_reason: String,
    /// Other regions probing the target at the last probe (from their published status).
    #[serde(default, skip_serializing_if = "is_zero")]
    regions_elsewhere: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl History {
    fn slow_count(&self) -> usize {
        self.judged.iter().filter(|j| j.slow).count()
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Tracked {
    alert: Alert,
    clear_streak: u32,
}

/// The engine's memory; serialized as one JSON document per region.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct EngineState {
    /// Each target's history by its history key: hashed, as every probe of a round looks its
    /// target's up (ordered keys cost a dozen comparisons of long common prefixes per lookup);
    /// written sorted, so the stored text does not depend on the hasher.
    /// Shared with the copies handed to storage (copy on write): a copy of the state costs a
    /// reference count per target, and only a history a round changes is copied, and only while
    /// the link still holds the last copy.
    #[serde(serialize_with = "sorted", deserialize_with = "shared")]
    histories: HashMap<Arc<str>, Arc<History>>,
    /// Facets currently holding, by facet key.
    #[serde(default)]
    facets: BTreeMap<String, Tracked>,
    #[serde(default)]
    incidents: Incidents,
    budget_day: Option<NaiveDate>,
    spent_usd: f64,
    /// Last reading-based credit verdict per provider.
    credit_reading_low: BTreeMap<String, bool>,
    #[serde(default)]
    unhealthy_streak: u32,
    /// Each target's canary history for `model_changed`, by history key.
    #[serde(default)]
    canary: BTreeMap<String, crate::decide::canary::detect::Detector>,
    /// Each chain's head as last evaluated (`chain_head_changed`).
    #[serde(default)]
    heads: super::chain_head::Heads,
    /// Each target's golden checks as last judged (`check_failed`).
    #[serde(default)]
    golden: super::golden::Golden,
    /// Each target's capabilities as last judged (`capability_lost`).
    #[serde(default)]
    capabilities: super::capability::Capabilities,
}

/// Writes a map in key order.
fn sorted<S: serde::Serializer>(map: &HashMap<Arc<str>, Arc<History>>, s: S) -> Result<S::Ok, S::Error> {
    s.collect_map(map.iter().map(|(k, v)| (&**k, &**v)).collect::<BTreeMap<_, _>>())
}

/// The histories as saved (a map of key to history), each put behind its own `Arc`.
fn shared<'de, D: serde::Deserializer<'de>>(d: D) -> Result<HashMap<Arc<str>, Arc<History>>, D::Error> {
    let saved = HashMap::<String, History>::deserialize(d)?;
    Ok(saved.into_iter().map(|(k, v)| (Arc::from(k), Arc::new(v))).collect())
}

/// A rule's answer for one facet this round.
struct Verdict {
    alert: Alert,
    holds: bool,
}

/// The alert rule engine.
#[derive(Debug, Clone)]
pub struct AlertEngine {
    cfg: RuleConfig,
    state: EngineState,
    /// The providers' status pages as read for the next evaluation (`provider_incident`).
    pages: Option<super::provider_incident::ProviderIncidentReading>,
    /// Kinds with an open facet (a bit per [`AlertKind`]), taken at each evaluation's start and
    /// added to as facets open: most rules ask "is this target's facet open?" of every target,
    /// and a kind with none open answers without spelling 10,000 dedup keys a minute.
    open_kinds: u64,
}

/// The bit of `kind` in [`AlertEngine::open_kinds`].
fn kind_bit(kind: AlertKind) -> u64 {
    1u64 << ((kind as u32) % 64)
}

fn is_network(o: Outcome) -> bool {
    matches!(o, Outcome::Timeout | Outcome::DnsError | Outcome::ConnectError | Outcome::TlsError)
}

/// Failures that count for `errors`; auth, model and payment failures have their own kinds.
fn is_generic_failure(o: Outcome) -> bool {
    o.is_failure() && !matches!(o, Outcome::AuthError | Outcome::ModelUnavailable | Outcome::PaymentRequired)
}

fn push_capped<T>(q: &mut VecDeque<T>, v: T, cap: usize) {
    q.push_back(v);
    while q.len() > cap.max(1) {
        q.pop_front();
    }
}

/// Global when this region sees it and `affected` other regions do too.
fn scope_of(regions_elsewhere: u32, affected_elsewhere: u32, here: bool) -> Scope {
    if here && affected_elsewhere > 0 {
        Scope::Global { affected: affected_elsewhere + 1, regions: regions_elsewhere + 1 }
    } else {
        Scope::Regional
    }
}

/// The scope of a facet of `kind`, from what the other regions publish.
fn scope_for(kind: AlertKind, e: Elsewhere, here: bool) -> Scope {
    let affected = match kind {
        AlertKind::LatencyDegraded => e.over_latency,
        AlertKind::BreakerOpen => e.breaker_open,
        AlertKind::Flapping => e.flapping,
        _ => e.failing,
    };
    scope_of(e.regions, affected, here)
}

impl AlertEngine {
    /// A fresh engine.
    pub fn new(cfg: RuleConfig) -> Self {
        AlertEngine { cfg, state: EngineState::default(), pages: None, open_kinds: 0 }
    }

    /// An engine resuming from saved state; unreadable state starts fresh (and says why).
    pub fn restore(cfg: RuleConfig, saved: Option<&crate::vocab::records::StateJson>) -> Self {
        let state = match saved.map(|v| serde_json::from_reader::<_, EngineState>(v.reader())) {
            Some(Ok(s)) => s,
            Some(Err(e)) => {
                tracing::warn!(region = %cfg.region, error = %e, "saved alert state unreadable; starting fresh");
                EngineState::default()
            }
            None => EngineState::default(),
        };
        AlertEngine { cfg, state, pages: None, open_kinds: 0 }
    }

    /// What the providers' status pages say, taken into the next [`AlertEngine::evaluate`] as
    /// `provider_incident` facets (one per matching open incident; an incident a successfully
    /// read page no longer lists clears like any facet).
    pub fn read_provider_pages(&mut self, reading: super::provider_incident::ProviderIncidentReading) {
        self.pages = Some(reading);
    }

    fn provider_incident_verdicts(&mut self, out: &mut Vec<Verdict>) {
        let Some(reading) = self.pages.take() else { return };
        let open: BTreeSet<&str> = reading.open.iter().map(|a| a.dedup_key.as_str()).collect();
        for t in self.state.facets.values().filter(|t| t.alert.kind == AlertKind::ProviderIncident) {
            if !open.contains(t.alert.dedup_key.as_str()) && reading.read.contains(&t.alert.provider) {
                out.push(Verdict { alert: t.alert.clone(), holds: false });
            }
        }
        out.extend(reading.open.into_iter().map(|alert| Verdict { alert, holds: true }));
    }

    /// State to persist with `Store::save_alert_state`.
    pub fn state_json(&self) -> Result<crate::vocab::records::StateJson, serde_json::Error> {
        crate::vocab::records::StateJson::of(&self.state)
    }

    /// [`state_json`](Self::state_json) written when storage first reads it: a copy of the state
    /// now, whose text is written off the caller's task.
    pub fn state_deferred(&self) -> crate::vocab::records::StateJson {
        crate::vocab::records::StateJson::deferred(self.state.clone())
    }

    /// The thresholds in use.
    pub fn config(&self) -> &RuleConfig {
        &self.cfg
    }

    /// Facets currently holding (silenced ones included), most severe first.
    pub fn firing(&self) -> Vec<Alert> {
        let mut v: Vec<Alert> = self.state.facets.values().map(|t| t.alert.clone()).collect();
        v.sort_by(|a, b| (a.severity, a.kind, &a.dedup_key).cmp(&(b.severity, b.kind, &b.dedup_key)));
        v
    }

    /// Keys of the incidents currently open in this region.
    pub fn open_incidents(&self) -> Vec<String> {
        self.state.incidents.keys()
    }

    /// True when `target` (of this region) is flapping.
    pub fn is_flapping(&self, target: &Target) -> bool {
        self.state.histories.get(Self::history_key(target).as_str()).is_some_and(|h| h.flapping)
    }

    /// Every target of this region that is flapping.
    pub fn flapping_targets(&self) -> Vec<Target> {
        self.state.histories.values().filter(|h| h.flapping).filter_map(|h| h.target.clone()).collect()
    }

    /// Whether `target` (of this region) has the latency alert's sustained evidence: `latency_k`
    /// of its last `latency_n` ok probes over `latency_factor` × P95 (published in `target_status`
    /// for the scope of latency incidents; the target's health is the monitor's judgement).
    pub fn over_latency(&self, target: &Target) -> bool {
        self.state
            .histories
            .get(Self::history_key(target).as_str())
            .is_some_and(|h| h.slow_count() >= self.cfg.latency_k)
    }

    /// The targets [`over_latency`](Self::over_latency) holds for, in one pass over the histories
    /// (asked of every target each minute, it spelled 10,000 keys).
    pub fn over_latency_targets(&self) -> HashSet<&Target> {
        let k = self.cfg.latency_k;
        self.state.histories.values().filter(|h| h.slow_count() >= k).filter_map(|h| h.target.as_ref()).collect()
    }

    /// The breaker state the engine last heard of for `target` (from the transitions it was fed).
    pub fn breaker_heard(&self, target: &Target) -> Option<State> {
        self.state.histories.get(Self::history_key(target).as_str()).and_then(|h| h.breaker)
    }

    /// Every target the engine heard a breaker transition of, with the state it last heard.
    pub fn breakers_heard(&self) -> impl Iterator<Item = (&Target, State)> {
        self.state.histories.values().filter_map(|h| Some((h.target.as_ref()?, h.breaker?)))
    }

    /// Ids of this region's targets with an open `latency_degraded` or `errors` facet: in trouble,
    /// so the monitor holds their samples out of their baselines.
    pub fn in_trouble(&self) -> Vec<String> {
        self.state
            .facets
            .values()
            .filter(|f| matches!(f.alert.kind, AlertKind::LatencyDegraded | AlertKind::Errors))
            .filter(|f| f.alert.region == self.cfg.region)
            .filter_map(|f| f.alert.target.clone())
            .collect()
    }

    /// Probe spend of the UTC day of `now` as evaluated so far (what `probe_budget_exceeded` compares).
    pub fn spent_today(&self, now: DateTime<Utc>) -> f64 {
        if self.state.budget_day == Some(now.date_naive()) {
            self.state.spent_usd
        } else {
            0.0
        }
    }

    /// Adds spend made outside the probe rounds (long-prompt workload runs) to the UTC day's
    /// tally at `at`: the next round's `probe_budget_exceeded` judgement and the planner's
    /// [`spent_today`](Self::spent_today) count it, and it is saved with the alert state.
    pub fn add_spend(&mut self, usd: f64, at: DateTime<Utc>) {
        if !usd.is_finite() || usd < 0.0 {
            return;
        }
        let day = at.date_naive();
        if self.state.budget_day != Some(day) {
            self.state.budget_day = Some(day);
            self.state.spent_usd = 0.0;
        }
        self.state.spent_usd += usd;
    }

    /// Feeds one round and returns the notifications to enqueue, one per incident that changed.
    pub fn evaluate(&mut self, round: &Round<'_>, now: DateTime<Utc>) -> Vec<Notification> {
        self.open_kinds = self.state.facets.values().fold(0, |bits, f| bits | kind_bit(f.alert.kind));
        let mut verdicts = Vec::new();
        self.track_budget(round, now, &mut verdicts);
        // Each probe's history key, spelled once for every rule that reads its history.
        let keys: Vec<String> = round.probes.iter().map(|p| Self::history_key(&p.sample.target)).collect();
        for (p, key) in round.probes.iter().zip(&keys) {
            self.record(p, key);
        }
        for c in &round.breaker {
            let h = Arc::make_mut(self.state.histories.entry(Self::history_key(&c.target).into()).or_default());
            h.target.get_or_insert_with(|| c.target.clone());
            h.breaker = Some(c.to);
            h.breaker_reason = format!("{} → {}: {}", c.from, c.to, c.reason);
        }
        let suspect = self.region_verdict(round, &mut verdicts);
        if !suspect {
            self.target_verdicts(round, &keys, &mut verdicts, now);
            self.deprecation_verdicts(round, now, &mut verdicts);
            let samples = round.probes.iter().map(|p| p.sample);
            let open = |t: &Target| self.tracked(AlertKind::RateLimitLow, t);
            let low = super::ratelimit::verdicts(&self.cfg.region, samples, self.cfg.ratelimit_low_fraction, open);
            verdicts.extend(low.into_iter().map(|(alert, holds)| Verdict { alert, holds }));
        }
        self.credit_verdicts(round, suspect, &mut verdicts);
        self.provider_incident_verdicts(&mut verdicts);
        self.canary_verdicts(round, &mut verdicts);
        let golden = super::golden::verdicts(&self.cfg.region, &mut self.state.golden, &round.checks);
        verdicts.extend(golden.into_iter().map(|(alert, holds)| Verdict { alert, holds }));
        let lost = super::capability::verdicts(&self.cfg.region, &mut self.state.capabilities, &round.checks);
        verdicts.extend(lost.into_iter().map(|(alert, holds)| Verdict { alert, holds }));
        self.shift_verdicts(round, &mut verdicts);
        chain_verdicts(&self.cfg.region, round, &mut verdicts);
        self.head_verdicts(round, &mut verdicts);
        self.settle(&mut verdicts, now);
        self.incidents(now)
    }

    /// Applies the verdicts gathered so far, in order. Each rule reads back only the facets of
    /// its own kinds, so applying a rule's verdicts before the next rule runs changes nothing;
    /// gathered to the end, they were 40,000 verdicts (35 MB) at once at 10,000 targets.
    fn settle(&mut self, verdicts: &mut Vec<Verdict>, now: DateTime<Utc>) {
        for v in verdicts.drain(..) {
            self.apply(v, now);
        }
    }

    fn history_key(t: &Target) -> String {
        format!("{}|{t}", t.region)
    }

    fn record(&mut self, p: &RoundProbe<'_>, key: &str) {
        let s = p.sample;
        let n = self.cfg.error_probes as usize;
        let cfg = &self.cfg;
        if !self.state.histories.contains_key(key) {
            let new = History { target: Some(s.target.clone()), ..History::default() };
            self.state.histories.insert(key.into(), Arc::new(new));
        }
        let Some(h) = self.state.histories.get_mut(key) else { return };
        let h = Arc::make_mut(h);
        h.target.get_or_insert_with(|| s.target.clone());
        h.regions_elsewhere = p.elsewhere.regions;
        push_capped(&mut h.recent, (s.started_at, s.outcome, s.error.clone()), cfg.error_n.max(1) as usize);
        if s.outcome == Outcome::Ok {
            if let Some(j) = judge(s, p.baseline, cfg.latency_factor) {
                tracing::debug!(target = %s.target, metric = %j.metric, value = j.value, threshold = j.threshold,
                    slow = j.slow, "latency judged");
                push_capped(&mut h.judged, j, cfg.latency_n);
            }
        }
        if let Some(ok) = s.adherence_ok {
            push_capped(&mut h.adherence, ok, n);
        }
        push_capped(&mut h.states, s.outcome.is_failure(), cfg.flap_window);
        let rate = flap::change_rate(h.states.iter().copied(), cfg.flap_window);
        let was = h.flapping;
        h.flapping = flap::next_flapping(was, rate, cfg.flap_high, cfg.flap_low);
        if h.flapping != was {
            tracing::info!(target = %s.target, provider = %s.target.provider, model = %s.target.model,
                region = %s.target.region, rate, flapping = h.flapping, "flap state changed");
        }
    }

    fn track_budget(&mut self, round: &Round<'_>, now: DateTime<Utc>, out: &mut Vec<Verdict>) {
        let today = now.date_naive();
        if self.state.budget_day != Some(today) {
            self.state.budget_day = Some(today);
            self.state.spent_usd = 0.0;
        }
        if round.probes.is_empty() {
            return;
        }
        self.state.spent_usd += round.probes.iter().filter_map(|p| p.sample.cost_usd).sum::<f64>();
        let spent = self.state.spent_usd;
        let budget = self.cfg.daily_budget_usd;
        let mut a = Alert::new(
            AlertKind::ProbeBudgetExceeded,
            &self.cfg.region,
            "",
            None,
            format!("probes spent ${spent:.4} today (UTC), over probe.daily_budget_usd ${budget:.2}"),
        );
        a.current = Some(spent);
        a.baseline = Some(budget);
        out.push(Verdict { alert: a, holds: spent > budget });
    }

    /// Returns whether the round looks like this instance's own network failing (per-target
    /// rules are then held back); the alert itself needs `unhealthy_rounds` such rounds in a row.
    fn region_verdict(&mut self, round: &Round<'_>, out: &mut Vec<Verdict>) -> bool {
        let total = round.probes.len();
        if total == 0 {
            return false;
        }
        let outcomes: Vec<Outcome> = round.probes.iter().map(|p| p.sample.outcome).collect();
        let network = outcomes.iter().filter(|o| is_network(**o)).count();
        let failing = outcomes.iter().filter(|o| o.is_failure()).count();
        let suspect = total >= self.cfg.unhealthy_min_targets
            && ((network as f64) / (total as f64) >= self.cfg.unhealthy_fraction || failing == total);
        self.state.unhealthy_streak = if suspect { self.state.unhealthy_streak + 1 } else { 0 };
        let holds = self.state.unhealthy_streak >= self.cfg.unhealthy_rounds;
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for o in outcomes.iter().filter(|o| o.is_failure()) {
            *counts.entry(o.as_str()).or_default() += 1;
        }
        let detail: Vec<String> = counts.iter().map(|(k, v)| format!("{k} ×{v}")).collect();
        let mut a = Alert::new(
            AlertKind::RegionUnhealthy,
            &self.cfg.region,
            "",
            None,
            format!(
                "{failing} of {total} targets failed in the same round from this instance ({}): likely this instance's own network, per-provider alerts held back",
                detail.join(", ")
            ),
        );
        a.current = Some(failing as f64);
        a.baseline = Some(total as f64);
        out.push(Verdict { alert: a, holds });
        suspect
    }

    /// `model_deprecated` from the retirement notices the probes' responses carried (a hard
    /// fact: one response saying so is enough); it clears once the responses stop saying it.
    fn deprecation_verdicts(&self, round: &Round<'_>, now: DateTime<Utc>, out: &mut Vec<Verdict>) {
        let region = &self.cfg.region;
        for p in round.probes.iter().filter(|p| !p.sample.outcome.is_failure()) {
            let t = &p.sample.target;
            let notices: Vec<_> = p.sample.deprecation.iter().map(|n| (t.clone(), n.clone())).collect();
            let fired = super::deprecation::evaluate(region, &notices, now, self.cfg.deprecation_warn_days);
            match fired.into_iter().next() {
                Some(alert) => out.push(Verdict { alert, holds: true }),
                // A verdict that does not hold matters only to an open facet.
                None if !self.tracked(AlertKind::ModelDeprecated, t) => {}
                None => {
                    let quiet = "no retirement announced".to_string();
                    let alert = Alert::new(AlertKind::ModelDeprecated, region, &t.provider, Some(t), quiet);
                    out.push(Verdict { alert, holds: false });
                }
            }
        }
    }

    /// `model_changed` from the canary runs: the facet holds on the run the statistic calls a
    /// change (an event, not a state: the new behaviour becomes the target's reference) and
    /// clears after `resolve_after` further runs like any other facet, so one change is one
    /// incident; failed runs are skipped (they say nothing about which model answers).
    fn canary_verdicts(&mut self, round: &Round<'_>, out: &mut Vec<Verdict>) {
        use crate::decide::canary::detect::Verdict as Seen;
        let region = self.cfg.region.clone();
        for run in &round.canaries {
            let Some(obs) = crate::decide::canary::detect::observation(run) else { continue };
            let t = run.target();
            let detector = self.state.canary.entry(Self::history_key(t)).or_default();
            let (change, holds) = match detector.observe(obs, &self.cfg.canary) {
                Seen::Changed(c) => {
                    tracing::warn!(target = %t, provider = %t.provider, model = %t.model, region = %t.region,
                        change = %c.describe(), "canary: model changed");
                    (Some(c), true)
                }
                Seen::Learning(_) | Seen::Quiet => (None, false),
            };
            let summary = match &change {
                Some(c) => format!("model behind {} changed: {}", t.id(), c.describe()),
                None => "canary answers match the target's history".to_string(),
            };
            let mut alert = Alert::new(AlertKind::ModelChanged, &region, &t.provider, Some(t), summary);
            alert.current = Some(run.score());
            out.push(Verdict { alert, holds });
        }
    }

    /// `baseline_shift`: holds on the round a target's baseline adopted a shifted level (an event,
    /// like `model_changed`), and clears after `resolve_after` evaluations without another.
    fn shift_verdicts(&self, round: &Round<'_>, out: &mut Vec<Verdict>) {
        let region = &self.cfg.region;
        let mut adopted = BTreeSet::new();
        for a in &round.shifts {
            let t = &a.target;
            let mut alert = Alert::new(AlertKind::BaselineShift, region, &t.provider, Some(t), a.describe());
            alert.current = a.after.p95;
            alert.baseline = a.before.p95;
            adopted.insert(alert.dedup_key.clone());
            out.push(Verdict { alert, holds: true });
        }
        for t in self.state.facets.values() {
            if t.alert.kind == AlertKind::BaselineShift && !adopted.contains(&t.alert.dedup_key) {
                out.push(Verdict { alert: t.alert.clone(), holds: false });
            }
        }
    }

    /// `chain_head_changed`: a notice when a chain's head moved since the last evaluation.
    fn head_verdicts(&mut self, round: &Round<'_>, out: &mut Vec<Verdict>) {
        let open: Vec<Alert> = self
            .state
            .facets
            .values()
            .filter(|t| t.alert.kind == AlertKind::ChainHeadChanged)
            .map(|t| t.alert.clone())
            .collect();
        let (region, enabled) = (&self.cfg.region, self.cfg.chain_head_changed);
        let found = super::chain_head::verdicts(region, enabled, &mut self.state.heads, &round.heads, &open);
        out.extend(found.into_iter().map(|(alert, holds)| Verdict { alert, holds }));
    }

    /// The per-target rules over this round's probes (`keys`: each probe's history key).
    fn target_verdicts(&mut self, round: &Round<'_>, keys: &[String], out: &mut Vec<Verdict>, now: DateTime<Utc>) {
        let region = self.cfg.region.clone();
        let n = self.cfg.error_probes as usize;
        let mut elsewhere: HashMap<&str, Elsewhere> = HashMap::new();
        // auth is per provider (one credential): any refused probe of the provider this round.
        let mut auth: BTreeMap<&str, Option<&Sample>> = BTreeMap::new();
        for (p, key) in round.probes.iter().zip(keys) {
            let s = p.sample;
            let t = &s.target;
            // Only another region's view is worth keeping: the default is what a miss reads.
            if p.elsewhere != Elsewhere::default() {
                elsewhere.insert(key, p.elsewhere);
            }
            let entry = auth.entry(&t.provider).or_insert(None);
            if s.outcome == Outcome::AuthError && entry.is_none() {
                *entry = Some(s);
            }
            let Some(h) = self.state.histories.get(key.as_str()) else { continue };
            let e = p.elsewhere;

            out.extend(self.errors_verdict(h, s, e, &region));

            // model_unavailable: a hard fact, the latest probe says the model is gone.
            let gone = s.outcome == Outcome::ModelUnavailable;
            if gone || self.tracked(AlertKind::ModelUnavailable, t) {
                let mut a = Alert::new(
                    AlertKind::ModelUnavailable,
                    &region,
                    &t.provider,
                    Some(t),
                    format!(
                        "model {} is not served{}",
                        t.model,
                        s.error.as_deref().map(|e| format!(": {}", truncate(e, 200))).unwrap_or_default()
                    ),
                );
                a.scope = scope_for(AlertKind::ModelUnavailable, e, gone);
                out.push(Verdict { alert: a, holds: gone });
            }

            // adherence_failed: the last N replies that were judged all disobeyed the prompt.
            if s.adherence_ok.is_some() {
                let judged = h.adherence.len().min(n);
                let holds = judged >= n && h.adherence.iter().rev().take(n).all(|ok| !ok);
                if holds || self.tracked(AlertKind::AdherenceFailed, t) {
                    let summary =
                        format!("the last {judged} replies did not follow the probe's system prompt (JSON shape)");
                    let mut a = Alert::new(AlertKind::AdherenceFailed, &region, &t.provider, Some(t), summary);
                    a.scope = scope_for(AlertKind::AdherenceFailed, e, holds);
                    out.push(Verdict { alert: a, holds });
                }
            }

            // latency_degraded: k of the last n ok probes over factor × baseline P95.
            if s.outcome == Outcome::Ok {
                if let Some(v) = self.latency_verdict(h, t, e, &region) {
                    out.push(v);
                }
            }
            self.settle(out, now);
        }
        self.standing_verdicts(&elsewhere, out);
        for (provider, refused) in auth {
            if refused.is_none() && !self.tracked_key(AlertKind::AuthError, provider, None) {
                continue;
            }
            let detail = refused.and_then(|s| s.error.as_deref()).map(|e| format!(": {}", truncate(e, 200)));
            let a = Alert::new(
                AlertKind::AuthError,
                &region,
                provider,
                None,
                format!("the API key was refused{}", detail.unwrap_or_default()),
            );
            out.push(Verdict { alert: a, holds: refused.is_some() });
        }
    }

    /// `errors`: `error_k` of the last `error_n` probes failed (generic failures); when k = n
    /// (`error_probes`, in a row) the first and last of them also lie within the window.
    fn errors_verdict(&self, h: &History, s: &Sample, e: Elsewhere, region: &str) -> Option<Verdict> {
        let (k, n) = (self.cfg.error_k as usize, self.cfg.error_n as usize);
        let t = &s.target;
        // Counted first: on a quiet minute no target needs the lists below.
        let window = || h.recent.iter().rev().take(n);
        let (len, failing) = (window().count(), window().filter(|(_, o, _)| is_generic_failure(*o)).count());
        let errors_hold = if k >= n {
            let span_ok = match (window().next_back(), window().next()) {
                (Some(first), Some(newest)) => {
                    (newest.0 - first.0).to_std().unwrap_or(Duration::ZERO) <= self.cfg.error_window
                }
                _ => false,
            };
            len >= n && failing == len && span_ok
        } else {
            failing >= k
        };
        if !errors_hold && !self.tracked(AlertKind::Errors, t) {
            return None;
        }
        let last: Vec<_> = window().collect();
        let failed: Vec<_> = last.iter().filter(|(_, o, _)| is_generic_failure(*o)).collect();
        let detail = s.error.as_deref().map(|e| format!(": {}", truncate(e, 200))).unwrap_or_default();
        let summary = if k >= n {
            let outcomes: Vec<&str> = last.iter().rev().map(|(_, o, _)| o.as_str()).collect();
            format!("{} consecutive failed probes ({}){detail}", last.len(), outcomes.join(", "))
        } else {
            let outcomes: Vec<&str> = failed.iter().rev().map(|(_, o, _)| o.as_str()).collect();
            format!("{} of the last {} probes failed ({}){detail}", failed.len(), last.len(), outcomes.join(", "))
        };
        let mut a = Alert::new(AlertKind::Errors, region, &t.provider, Some(t), summary);
        a.current = Some(if k >= n { last.len() } else { failed.len() } as f64);
        a.scope = scope_for(AlertKind::Errors, e, errors_hold);
        Some(Verdict { alert: a, holds: errors_hold })
    }

    /// Whether a facet of `kind` is open for `t`. A verdict that does not hold changes something
    /// only then (it counts towards the facet's resolve), so none is built otherwise: building an
    /// alert, its summary and key for every target and rule each minute was most of an
    /// evaluation at 10,000 targets (docs/BENCHMARKS.md).
    fn tracked(&self, kind: AlertKind, t: &Target) -> bool {
        self.tracked_key(kind, &t.provider, Some(t))
    }

    /// [`AlertEngine::tracked`] for any alert's subject: a provider-wide one (`auth_error`) has
    /// no target.
    fn tracked_key(&self, kind: AlertKind, provider: &str, target: Option<&Target>) -> bool {
        self.open_kinds & kind_bit(kind) != 0
            && self.state.facets.contains_key(&super::key_of(kind, &self.cfg.region, provider, target))
    }

    /// Breaker and flapping facets: per known target, whether or not it was probed this round.
    fn standing_verdicts(&self, elsewhere: &HashMap<&str, Elsewhere>, out: &mut Vec<Verdict>) {
        let region = &self.cfg.region;
        for (key, h) in &self.state.histories {
            let Some(t) = &h.target else { continue };
            if &t.region != region {
                continue;
            }
            let e = elsewhere.get(&**key).copied().unwrap_or_default();
            if let Some(state) = h.breaker.filter(|s| *s != State::Closed || self.tracked(AlertKind::BreakerOpen, t)) {
                let open = state != State::Closed;
                let mut a = Alert::new(
                    AlertKind::BreakerOpen,
                    region,
                    &t.provider,
                    Some(t),
                    format!("circuit breaker {state} ({})", h.breaker_reason),
                );
                a.scope = scope_for(AlertKind::BreakerOpen, e, open);
                out.push(Verdict { alert: a, holds: open });
            }
            if !h.flapping && !self.tracked(AlertKind::Flapping, t) {
                continue;
            }
            let rate = flap::change_rate(h.states.iter().copied(), self.cfg.flap_window);
            let mut a = Alert::new(
                AlertKind::Flapping,
                region,
                &t.provider,
                Some(t),
                format!(
                    "state changed at a weighted rate of {:.0} % over the last {} probes (flapping above {:.0} %, calm under {:.0} %); changes are not paged while it flaps",
                    rate * 100.0,
                    self.cfg.flap_window,
                    self.cfg.flap_high * 100.0,
                    self.cfg.flap_low * 100.0
                ),
            );
            a.current = Some(rate);
            a.baseline = Some(self.cfg.flap_high);
            a.scope = scope_for(AlertKind::Flapping, e, h.flapping);
            out.push(Verdict { alert: a, holds: h.flapping });
        }
    }

    fn latency_verdict(&self, h: &History, t: &Target, e: Elsewhere, region: &str) -> Option<Verdict> {
        let (k, n) = (self.cfg.latency_k, self.cfg.latency_n);
        if h.judged.is_empty() {
            return None;
        }
        let slow = h.slow_count();
        let holds = h.judged.len() >= k && slow >= k;
        if !holds && !self.tracked(AlertKind::LatencyDegraded, t) {
            return None;
        }
        let mut values: Vec<f64> = h.judged.iter().map(|j| j.value).collect();
        values.sort_by(f64::total_cmp);
        let median = values[values.len() / 2];
        let worst = h
            .judged
            .iter()
            .filter(|j| j.slow)
            .max_by(|a, b| (a.value / a.threshold).total_cmp(&(b.value / b.threshold)));
        let mut a = match worst.filter(|_| holds) {
            Some(j) => {
                let mut a = Alert::new(
                    AlertKind::LatencyDegraded,
                    region,
                    &t.provider,
                    Some(t),
                    format!(
                        "{slow} of the last {} ok probes over {} × baseline P95 (worst {} {:.0} ms over {:.0} ms; median of the window {median:.0} ms)",
                        h.judged.len().min(n),
                        self.cfg.latency_factor,
                        j.metric,
                        j.value,
                        j.threshold
                    ),
                );
                a.current = Some(median);
                a.baseline = Some(j.threshold);
                a
            }
            None => Alert::new(
                AlertKind::LatencyDegraded,
                region,
                &t.provider,
                Some(t),
                "latency back within baseline".into(),
            ),
        };
        a.scope = scope_for(AlertKind::LatencyDegraded, e, holds);
        Some(Verdict { alert: a, holds })
    }

    fn credit_verdicts(&mut self, round: &Round<'_>, suspect: bool, out: &mut Vec<Verdict>) {
        let region = self.cfg.region.clone();
        let mut per_provider: BTreeMap<String, Option<Alert>> = BTreeMap::new();
        for c in &round.credits {
            let Some(&(_, balance)) = c.readings.last() else { continue };
            let rate = burn_rate(&c.readings);
            let low = balance < c.min_usd;
            let runs_out = rate.as_ref().and_then(|r| r.hours_to_zero).is_some_and(|h| h <= c.warn_hours);
            self.state.credit_reading_low.insert(c.provider.clone(), low || runs_out);
            let burn = rate
                .as_ref()
                .filter(|r| r.usd_per_hour > 0.0)
                .map(|r| {
                    let when = r
                        .zero_at
                        .map(|z| {
                            format!(
                                "; projected to run out at {} (in {:.1} h)",
                                z.format("%Y-%m-%d %H:%M UTC"),
                                r.hours_to_zero.unwrap_or(0.0)
                            )
                        })
                        .unwrap_or_default();
                    format!(", burning ${:.2}/h{when}", r.usd_per_hour)
                })
                .unwrap_or_default();
            let mut a = Alert::new(
                AlertKind::CreditLow,
                &region,
                &c.provider,
                None,
                if low {
                    format!("credit ${balance:.2} is under balance.min_usd ${:.2}{burn}", c.min_usd)
                } else {
                    format!("credit ${balance:.2}{burn} (within balance.warn_hours {} h)", c.warn_hours)
                },
            );
            if low {
                a.severity = Severity::Error;
            }
            a.current = Some(balance);
            a.baseline = Some(c.min_usd);
            per_provider.insert(c.provider.clone(), Some(a));
        }
        if !suspect {
            for p in &round.probes {
                let s = p.sample;
                let provider = s.target.provider.as_str();
                if s.outcome != Outcome::PaymentRequired {
                    // A provider with neither a 402 nor a low reading nor an open credit facet has
                    // no verdict to give: one per provider was 10,000 alerts (3.6 MB) a minute
                    // where every target is a provider of its own.
                    let open = self.tracked_key(AlertKind::CreditLow, provider, None);
                    if open || self.state.credit_reading_low.get(provider).copied().unwrap_or(false) {
                        per_provider.entry(provider.to_string()).or_insert(None);
                    }
                    continue;
                }
                let mut a = Alert::new(
                    AlertKind::CreditLow,
                    &region,
                    &s.target.provider,
                    None,
                    format!(
                        "a probe of {} was refused for lack of credit (402){}",
                        s.target.id(),
                        s.error.as_deref().map(|e| format!(": {}", truncate(e, 200))).unwrap_or_default()
                    ),
                );
                a.severity = Severity::Critical;
                per_provider.insert(provider.to_string(), Some(a));
            }
        }
        for (provider, alert) in per_provider {
            let reading_low = self.state.credit_reading_low.get(&provider).copied().unwrap_or(false);
            let holds = alert.as_ref().is_some_and(|a| a.severity == Severity::Critical) || reading_low;
            let alert = alert.unwrap_or_else(|| {
                Alert::new(AlertKind::CreditLow, &region, &provider, None, "credit back above the thresholds".into())
            });
            out.push(Verdict { alert, holds });
        }
    }

    /// Facet lifecycle: holds at once, leaves after `resolve_after` clear evaluations.
    fn apply(&mut self, v: Verdict, now: DateTime<Utc>) {
        let key = v.alert.dedup_key.clone();
        match (self.state.facets.get_mut(&key), v.holds) {
            (None, true) => {
                let mut alert = v.alert;
                alert.since = now;
                self.open_kinds |= kind_bit(alert.kind);
                self.state.facets.insert(key, Tracked { alert, clear_streak: 0 });
            }
            (Some(t), true) => {
                t.clear_streak = 0;
                let since = t.alert.since;
                t.alert = v.alert;
                t.alert.since = since;
            }
            (Some(t), false) => {
                t.clear_streak += 1;
                if t.clear_streak >= self.cfg.resolve_after {
                    self.state.facets.remove(&key);
                }
            }
            (None, false) => {}
        }
    }

    /// Folds the holding facets into incidents and returns what changed.
    fn incidents(&mut self, now: DateTime<Utc>) -> Vec<Notification> {
        // Targets of this region per provider: a provider whose every target (two or more) is in
        // trouble at once is one provider incident.
        let mut troubled: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
        for f in self.state.facets.values() {
            if let Some(t) = &f.alert.target {
                troubled.entry(f.alert.provider.as_str()).or_default().insert(t.clone());
            }
        }
        // Only providers with a target in trouble are counted: on a quiet minute that is none,
        // and spelling every target's id every minute was most of an evaluation.
        let mut known: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
        for h in self.state.histories.values() {
            if let Some(t) =
                h.target.as_ref().filter(|t| t.region == self.cfg.region && troubled.contains_key(t.provider.as_str()))
            {
                known.entry(t.provider.as_str()).or_default().insert(t.id());
            }
        }
        let provider_wide: BTreeSet<String> = known
            .iter()
            .filter(|(p, all)| all.len() >= 2 && troubled.get(*p).is_some_and(|t| t.len() >= all.len()))
            .map(|(p, _)| p.to_string())
            .collect();
        let mut facets: BTreeMap<Subject, Vec<(Alert, bool)>> = BTreeMap::new();
        for f in self.state.facets.values() {
            let subject = Subject::of(
                &f.alert,
                |p| provider_wide.contains(p) || self.state.incidents.has_provider(p),
                |s| self.state.incidents.contains(s),
            );
            facets.entry(subject).or_default().push((f.alert.clone(), f.clear_streak == 0));
        }
        let cfg = &self.cfg;
        let maintenance = |p: &str| cfg.maintenance.iter().any(|w| w.provider == p && w.start <= now && now < w.end);
        // Regions probing what an incident is about: this one plus the most any of its targets has
        // elsewhere. Read once per evaluation, when an incident first asks: asking every target
        // for every incident spelled each target's id once per open incident.
        let histories = &self.state.histories;
        // An incident is about facets, so only their providers' targets are asked of; a target
        // no other region probes adds nothing (the answer is at least this region).
        let asked: BTreeSet<&str> = self.state.facets.values().map(|f| f.alert.provider.as_str()).collect();
        type Most<'a> = (HashMap<String, u32>, HashMap<&'a str, u32>);
        let elsewhere: std::cell::OnceCell<Most<'_>> = std::cell::OnceCell::new();
        let probing = |alerts: &[Alert]| {
            let (by_target, by_provider) = elsewhere.get_or_init(|| {
                let (mut by_target, mut by_provider) = (HashMap::<String, u32>::new(), HashMap::<&str, u32>::new());
                let seen = histories.values().filter_map(|h| Some((h.target.as_ref()?, h.regions_elsewhere)));
                for (t, regions) in seen.filter(|(t, r)| *r > 0 && asked.contains(t.provider.as_str())) {
                    let most = by_provider.entry(t.provider.as_str()).or_default();
                    *most = (*most).max(regions);
                    let most = by_target.entry(t.id()).or_default();
                    *most = (*most).max(regions);
                }
                (by_target, by_provider)
            });
            let regions = |a: &Alert| match &a.target {
                Some(t) => by_target.get(t).copied(),
                None => by_provider.get(a.provider.as_str()).copied(),
            };
            1 + alerts.iter().filter_map(regions).max().unwrap_or(0)
        };
        self.state.incidents.step(facets, now, cfg, &maintenance, &probing)
    }
}

/// Judges one ok probe against the target's baseline ([`crate::decide::baseline::worst_excess`] with
/// `latency_factor`); `None` while there is no baseline.
fn judge(s: &Sample, b: BaselineP95, factor: f64) -> Option<Judged> {
    let p95 = LatencyP95 { ttfb: b.ttfb_p95_ms, ttft: b.ttft_p95_ms };
    let e = worst_excess(s.ttfb_ms, s.ttft_ms, p95, factor)?;
    Some(Judged { slow: e.exceeded(), metric: e.metric.label().into(), value: e.value, threshold: e.threshold })
}

/// Cuts `s` to `max` characters with an ellipsis.
pub(crate) fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(max).collect();
        t.push('…');
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::MaintenanceWindow;
    use crate::decide::alert::AlertStatus;

    fn t0() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-30T10:00:00Z").expect("time").with_timezone(&Utc)
    }

    fn at(minutes: i64) -> DateTime<Utc> {
        t0() + chrono::Duration::minutes(minutes)
    }

    fn cfg() -> RuleConfig {
        RuleConfig { latency_factor: 2.0, ..RuleConfig::with_defaults("eu-west-1") }
    }

    fn target(provider: &str, model: &str) -> Target {
        Target::new(provider.into(), model.into(), None, "eu-west-1".into())
    }

    fn sample(t: &Target, outcome: Outcome, when: DateTime<Utc>) -> Sample {
        let mut s = Sample::new(t.clone(), when, when);
        s.outcome = outcome;
        if outcome == Outcome::Ok {
            s.ttfb_ms = Some(150.0);
            s.ttft_ms = Some(300.0);
        } else {
            s.error = Some(format!("{outcome} from upstream"));
        }
        s
    }

    /// Runs one round of the given samples with default context.
    fn round(engine: &mut AlertEngine, samples: &[Sample], now: DateTime<Utc>) -> Vec<Notification> {
        let probes = samples
            .iter()
            .map(|s| RoundProbe { sample: s, baseline: BaselineP95::default(), elsewhere: Elsewhere::default() })
            .collect();
        engine.evaluate(&Round { probes, ..Round::default() }, now)
    }

    fn kinds(ns: &[Notification]) -> Vec<(String, AlertStatus, Vec<AlertKind>)> {
        ns.iter().map(|n| (n.provider.clone(), n.status, n.alerts.iter().map(|a| a.kind).collect())).collect()
    }

    /// Four healthy targets of four providers plus `bad` with the given outcome.
    fn fleet(bad: Outcome, when: DateTime<Utc>) -> Vec<Sample> {
        let mut v: Vec<Sample> = ["openai", "anthropic", "groq", "gemini"]
            .iter()
            .map(|p| sample(&target(p, "m"), Outcome::Ok, when))
            .collect();
        v.push(sample(&target("openrouter", "m"), bad, when));
        v
    }

    #[test]
    fn a_copy_handed_to_storage_keeps_its_histories_while_the_engine_goes_on() {
        // The copy shares each history with the engine until a round changes it.
        let mut e = AlertEngine::new(cfg());
        let (a, b) = (target("groq", "a"), target("groq", "b"));
        round(&mut e, &[sample(&a, Outcome::Ok, at(0)), sample(&b, Outcome::Ok, at(0))], at(0));
        let then = e.state_json().expect("state").text().expect("text");
        let copy = e.state_deferred();
        round(&mut e, &[sample(&a, Outcome::Timeout, at(1))], at(1));
        let now = e.state_json().expect("state").text().expect("text");
        assert_ne!(now, then, "the round changed a's history");
        assert_eq!(copy.text().expect("text"), then, "the copy is the state as it was when taken");
        // Restored from either text, the engine reads back the state it was saved from.
        let back = AlertEngine::restore(cfg(), Some(&crate::vocab::records::StateJson::from_text(&now).expect("json")));
        assert_eq!(back.state_json().expect("state").text().expect("text"), now);
        assert!(now.find("groq/a").expect("a") < now.find("groq/b").expect("b"), "histories written in key order");
    }

    #[test]
    fn a_healthy_targets_defaults_are_left_out_of_the_state_and_read_back() {
        let mut e = AlertEngine::new(cfg());
        let (a, b) = (target("groq", "a"), target("groq", "b"));
        round(&mut e, &[sample(&a, Outcome::Ok, at(0)), sample(&b, Outcome::Timeout, at(0))], at(0));
        let text = e.state_json().expect("state").text().expect("text");
        let state: serde_json::Value = serde_json::from_str(&text).expect("json");
        let healthy = &state["histories"][AlertEngine::history_key(&a).as_str()];
        for field in ["judged", "flapping", "breaker", "breaker_reason", "regions_elsewhere"] {
            assert!(healthy.get(field).is_none(), "{field} written at its default: {healthy}");
        }
        for field in ["target", "recent", "adherence", "states"] {
            assert!(healthy.get(field).is_some(), "{field} missing: {healthy}");
        }
        // What is left out reads back as what it was, and the state written again is the same.
        let back =
            AlertEngine::restore(cfg(), Some(&crate::vocab::records::StateJson::from_text(&text).expect("json")));
        assert_eq!(back.state_json().expect("state").text().expect("text"), text);
        // A state written in full (as builds before this one wrote it) reads back to the same.
        let mut full = state.clone();
        let h = &mut full["histories"][AlertEngine::history_key(&a).as_str()];
        h["judged"] = serde_json::json!([]);
        h["flapping"] = serde_json::json!(false);
        h["breaker"] = serde_json::Value::Null;
        h["breaker_reason"] = serde_json::json!("");
        h["regions_elsewhere"] = serde_json::json!(0);
        let older = crate::vocab::records::StateJson::from_text(&full.to_string()).expect("json");
        assert_eq!(AlertEngine::restore(cfg(), Some(&older)).state_json().expect("state").text().expect("text"), text);
    }

    #[test]
    fn a_facet_opened_by_a_targets_first_probe_of_a_round_hears_its_second() {
        // Incident mode probes a target more often than rounds run: one round may hold two of
        // its probes. The second one's verdict counts towards clearing the facet the first
        // opened (no facet of that kind was open when the round started).
        let resolved_after = |second: Outcome| {
            let mut e = AlertEngine::new(cfg());
            let t = target("groq", "llama");
            let first = sample(&t, Outcome::ModelUnavailable, at(0));
            let fired = round(&mut e, &[first, sample(&t, second, at(0) + chrono::Duration::seconds(20))], at(0));
            assert_eq!(kinds(&fired), vec![("groq".into(), AlertStatus::Firing, vec![AlertKind::ModelUnavailable])]);
            (1..10)
                .find(|m| {
                    let n = round(&mut e, &[sample(&t, Outcome::Ok, at(*m))], at(*m));
                    kinds(&n) == vec![("groq".into(), AlertStatus::Resolved, vec![AlertKind::ModelUnavailable])]
                })
                .expect("resolves")
        };
        let resolve_after = i64::from(cfg().resolve_after);
        assert_eq!(resolved_after(Outcome::ModelUnavailable), resolve_after, "still gone: every clear round counts");
        assert_eq!(resolved_after(Outcome::Ok), resolve_after - 1, "the round's own ok probe counted once");
    }

    #[test]
    fn a_sunset_header_within_the_warning_window_fires_model_deprecated_once_and_clears() {
        use crate::vocab::notice::{DeprecationSource, Notice};
        let mut e = AlertEngine::new(cfg());
        let sunset = Notice { source: DeprecationSource::SunsetHeader, date: at(10 * 24 * 60) };
        let far = Notice { source: DeprecationSource::SunsetHeader, date: at(90 * 24 * 60) };
        let announcing = |when, n: &Notice| {
            let mut v = fleet(Outcome::Ok, when);
            v[0].deprecation = vec![n.clone()];
            v
        };
        assert!(round(&mut e, &announcing(at(0), &far), at(0)).is_empty(), "90 days ahead is outside warn_days");
        let fired = round(&mut e, &announcing(at(1), &sunset), at(1));
        assert_eq!(kinds(&fired), vec![("openai".into(), AlertStatus::Firing, vec![AlertKind::ModelDeprecated])]);
        assert!(fired[0].alerts[0].summary.contains("2026-12-10"), "{}", fired[0].alerts[0].summary);
        assert!(round(&mut e, &announcing(at(2), &sunset), at(2)).is_empty(), "not repeated");
        let mut cleared = Vec::new();
        for m in 3..8 {
            cleared.extend(round(&mut e, &fleet(Outcome::Ok, at(m)), at(m)));
        }
        assert_eq!(kinds(&cleared), vec![("openai".into(), AlertStatus::Resolved, vec![AlertKind::ModelDeprecated])]);
    }

    #[test]
    fn headroom_under_the_fraction_fires_ratelimit_low_once_and_it_resolves_when_the_limit_is_back() {
        use crate::vocab::ratelimit::{Allowance, Headroom};
        let mut e = AlertEngine::new(cfg());
        let with_left = |when, remaining: u64| {
            let mut v = fleet(Outcome::Ok, when);
            v[2].ratelimit = Headroom {
                requests: Some(Allowance { remaining: Some(remaining), limit: Some(1000), reset_at: None }),
                tokens: None,
            };
            v
        };
        assert!(round(&mut e, &with_left(at(0), 500), at(0)).is_empty(), "half left is fine");
        let fired = round(&mut e, &with_left(at(1), 20), at(1));
        assert_eq!(kinds(&fired), vec![("groq".into(), AlertStatus::Firing, vec![AlertKind::RateLimitLow])]);
        assert_eq!(fired[0].alerts[0].severity, Severity::Warning);
        assert!(
            fired[0].alerts[0].summary.starts_with("requests: 20 of 1000 left (2.0 %)"),
            "{}",
            fired[0].alerts[0].summary
        );
        assert!(round(&mut e, &with_left(at(2), 10), at(2)).is_empty(), "not repeated while it holds");
        // Timeouts without headers say nothing: the incident stays open.
        let mut silent = fleet(Outcome::Ok, at(3));
        silent[2] = sample(&target("groq", "m"), Outcome::Timeout, at(3));
        assert!(round(&mut e, &silent, at(3)).iter().all(|n| n.status != AlertStatus::Resolved));
        let mut cleared = Vec::new();
        for m in 4..9 {
            cleared.extend(round(&mut e, &with_left(at(m), 900), at(m)));
        }
        let resolved: Vec<_> =
            kinds(&cleared).into_iter().filter(|(_, _, k)| k.contains(&AlertKind::RateLimitLow)).collect();
        assert_eq!(resolved, vec![("groq".into(), AlertStatus::Resolved, vec![AlertKind::RateLimitLow])]);
    }

    #[test]
    fn errors_fire_once_renotify_after_the_interval_and_resolve_after_clear_probes() {
        let mut e = AlertEngine::new(cfg());
        assert!(round(&mut e, &fleet(Outcome::ServerError, at(0)), at(0)).is_empty(), "one failure is not enough");
        let fired = round(&mut e, &fleet(Outcome::Timeout, at(1)), at(1));
        assert_eq!(kinds(&fired), vec![("openrouter".into(), AlertStatus::Firing, vec![AlertKind::Errors])]);
        assert!(fired[0].alerts[0].summary.contains("server_error, timeout"), "{}", fired[0].alerts[0].summary);
        for m in 2..60 {
            assert!(round(&mut e, &fleet(Outcome::ServerError, at(m)), at(m)).is_empty(), "minute {m}: no repeat");
        }
        let again = round(&mut e, &fleet(Outcome::ServerError, at(61)), at(61));
        assert_eq!(again.len(), 1);
        assert!(again[0].reminder);
        assert_eq!(again[0].alerts[0].since, at(1), "since stays the first firing time");
        assert!(round(&mut e, &fleet(Outcome::Ok, at(62)), at(62)).is_empty());
        assert!(round(&mut e, &fleet(Outcome::Ok, at(63)), at(63)).is_empty(), "hysteresis holds the alert");
        let resolved = round(&mut e, &fleet(Outcome::Ok, at(64)), at(64));
        assert_eq!(kinds(&resolved), vec![("openrouter".into(), AlertStatus::Resolved, vec![AlertKind::Errors])]);
        assert_eq!(resolved[0].alerts[0].dedup_key, fired[0].alerts[0].dedup_key);
        assert!(e.firing().is_empty());
    }

    #[test]
    fn k_of_n_errors_page_one_failure_in_three_and_never_a_single_failure() {
        let k_of_n = RuleConfig { error_k: 3, error_n: 10, ..cfg() };
        // In a row (the default, 2): one failure in three never pages.
        let mut in_a_row = AlertEngine::new(cfg());
        let mut e = AlertEngine::new(k_of_n.clone());
        let mut fired = Vec::new();
        for m in 0..30 {
            let bad = if m % 3 == 1 { Outcome::ServerError } else { Outcome::Ok };
            let sent = round(&mut in_a_row, &fleet(bad, at(m)), at(m));
            assert!(sent.iter().all(|n| n.alerts.iter().all(|a| a.kind != AlertKind::Errors)), "minute {m}");
            fired.extend(round(&mut e, &fleet(bad, at(m)), at(m)).into_iter().map(|n| (m, n)));
        }
        let pages: Vec<_> = fired.iter().filter(|(_, n)| n.status == AlertStatus::Firing && !n.update).collect();
        assert_eq!(pages.len(), 1, "one page: {:?}", kinds(&fired.iter().map(|(_, n)| n.clone()).collect::<Vec<_>>()));
        let (m, page) = pages[0];
        assert_eq!(*m, 7, "the third failure (minutes 1, 4, 7)");
        assert_eq!(page.alerts[0].kind, AlertKind::Errors);
        assert!(
            page.alerts[0]
                .summary
                .starts_with("3 of the last 8 probes failed (server_error, server_error, server_error)"),
            "{}",
            page.alerts[0].summary
        );
        // A single failure, or two far apart, never page.
        let mut lone = AlertEngine::new(k_of_n);
        for m in 0..60 {
            let bad = if m % 6 == 0 { Outcome::Timeout } else { Outcome::Ok };
            assert!(
                round(&mut lone, &fleet(bad, at(m)), at(m))
                    .iter()
                    .all(|n| n.alerts.iter().all(|a| a.kind != AlertKind::Errors)),
                "minute {m}"
            );
        }
    }

    #[test]
    fn a_flap_inside_the_hysteresis_keeps_the_alert_without_new_messages() {
        let mut e = AlertEngine::new(cfg());
        round(&mut e, &fleet(Outcome::ServerError, at(0)), at(0));
        assert_eq!(round(&mut e, &fleet(Outcome::ServerError, at(1)), at(1)).len(), 1);
        assert!(round(&mut e, &fleet(Outcome::Ok, at(2)), at(2)).is_empty());
        assert!(round(&mut e, &fleet(Outcome::ServerError, at(3)), at(3)).is_empty());
        assert!(round(&mut e, &fleet(Outcome::ServerError, at(4)), at(4)).is_empty(), "still the same incident");
        assert_eq!(e.firing().len(), 1);
    }

    #[test]
    fn failures_further_apart_than_the_window_do_not_fire() {
        let mut e = AlertEngine::new(cfg());
        round(&mut e, &fleet(Outcome::ServerError, at(0)), at(0));
        assert!(round(&mut e, &fleet(Outcome::ServerError, at(5)), at(5)).is_empty());
    }

    #[test]
    fn alerts_of_one_provider_in_one_evaluation_form_one_message() {
        let mut e = AlertEngine::new(cfg());
        let a = target("openrouter", "llama");
        let b = target("openrouter", "mixtral");
        let ok = target("openai", "gpt");
        let ok2 = target("groq", "llama");
        let ok3 = target("gemini", "flash");
        let mk = |when| {
            vec![
                sample(&a, Outcome::Ok, when),
                sample(&b, Outcome::ModelUnavailable, when),
                sample(&ok, Outcome::Ok, when),
                sample(&ok2, Outcome::Ok, when),
                sample(&ok3, Outcome::Ok, when),
            ]
        };
        let first = round(&mut e, &mk(at(0)), at(0));
        assert_eq!(kinds(&first), vec![("openrouter".into(), AlertStatus::Firing, vec![AlertKind::ModelUnavailable])]);
        let second = round(&mut e, &mk(at(1)), at(1));
        assert!(second.is_empty(), "model_unavailable is not repeated: {second:?}");
        let mut c = mk(at(2));
        c[2] = sample(&ok, Outcome::AuthError, at(2));
        let third = round(&mut e, &c, at(2));
        assert_eq!(kinds(&third), vec![("openai".into(), AlertStatus::Firing, vec![AlertKind::AuthError])]);
        // Two targets of one provider failing together arrive in one notification.
        let mut e = AlertEngine::new(cfg());
        let both = |when| {
            vec![
                sample(&a, Outcome::ServerError, when),
                sample(&b, Outcome::StreamError, when),
                sample(&ok, Outcome::Ok, when),
                sample(&ok2, Outcome::Ok, when),
                sample(&ok3, Outcome::Ok, when),
            ]
        };
        round(&mut e, &both(at(0)), at(0));
        let grouped = round(&mut e, &both(at(1)), at(1));
        assert_eq!(grouped.len(), 1);
        assert_eq!(grouped[0].alerts.len(), 2);
        assert!(grouped[0].title().contains("openrouter"));
    }

    #[test]
    fn most_targets_failing_at_once_raise_one_region_alert_instead_of_per_provider_ones() {
        let mut e = AlertEngine::new(cfg());
        let providers = ["openrouter", "openai", "anthropic", "groq", "gemini"];
        let down = |when| -> Vec<Sample> {
            providers
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    let o = if i < 4 { Outcome::ConnectError } else { Outcome::Ok };
                    sample(&target(p, "m"), o, when)
                })
                .collect()
        };
        let mut all = Vec::new();
        for m in 0..5 {
            all.extend(round(&mut e, &down(at(m)), at(m)));
        }
        assert_eq!(kinds(&all), vec![(String::new(), AlertStatus::Firing, vec![AlertKind::RegionUnhealthy])]);
        assert!(all[0].alerts[0].summary.starts_with("4 of 5 targets failed"), "{}", all[0].alerts[0].summary);
        assert!(e.firing().iter().all(|a| a.kind == AlertKind::RegionUnhealthy));
    }

    #[test]
    fn one_provider_failing_is_not_a_region_problem() {
        let mut e = AlertEngine::new(cfg());
        round(&mut e, &fleet(Outcome::ConnectError, at(0)), at(0));
        let n = round(&mut e, &fleet(Outcome::ConnectError, at(1)), at(1));
        assert_eq!(kinds(&n), vec![("openrouter".into(), AlertStatus::Firing, vec![AlertKind::Errors])]);
    }

    fn credit(readings: &[(i64, f64)]) -> CreditCheck {
        CreditCheck {
            provider: "openrouter".into(),
            readings: readings.iter().map(|(m, v)| (at(*m), *v)).collect(),
            min_usd: 20.0,
            warn_hours: 24.0,
        }
    }

    #[test]
    fn a_five_dollar_reading_fires_credit_low_exactly_once() {
        let mut e = AlertEngine::new(cfg());
        let mut sent = Vec::new();
        for i in 0..10 {
            let now = at(i * 5);
            let r = Round { credits: vec![credit(&[(i * 5, 5.0)])], ..Round::default() };
            sent.extend(e.evaluate(&r, now));
        }
        assert_eq!(kinds(&sent), vec![("openrouter".into(), AlertStatus::Firing, vec![AlertKind::CreditLow])]);
        let a = &sent[0].alerts[0];
        assert_eq!((a.current, a.baseline), (Some(5.0), Some(20.0)));
        assert!(a.summary.contains("$5.00 is under balance.min_usd $20.00"), "{}", a.summary);
    }

    #[test]
    fn a_burn_rate_reaching_zero_within_warn_hours_fires_and_says_when() {
        let mut e = AlertEngine::new(cfg());
        // $100 falling $5 per hour: $80 at 14:00, zero 16 h later, inside 24 h.
        let readings: Vec<(i64, f64)> = (0..=4).map(|h| (h * 60, 100.0 - 5.0 * h as f64)).collect();
        let n = e.evaluate(&Round { credits: vec![credit(&readings)], ..Round::default() }, at(240));
        assert_eq!(n.len(), 1);
        let s = &n[0].alerts[0].summary;
        assert!(s.contains("burning $5.00/h"), "{s}");
        assert!(s.contains("run out at 2026-12-01 06:00 UTC (in 16.0 h)"), "{s}");
    }

    #[test]
    fn a_slow_burn_with_plenty_left_stays_quiet() {
        let mut e = AlertEngine::new(cfg());
        let readings: Vec<(i64, f64)> = (0..=4).map(|h| (h * 60, 100.0 - 0.5 * h as f64)).collect();
        assert!(e.evaluate(&Round { credits: vec![credit(&readings)], ..Round::default() }, at(240)).is_empty());
    }

    #[test]
    fn a_402_from_a_probe_raises_credit_low_at_once() {
        let mut e = AlertEngine::new(cfg());
        let n = round(&mut e, &fleet(Outcome::PaymentRequired, at(0)), at(0));
        assert_eq!(kinds(&n), vec![("openrouter".into(), AlertStatus::Firing, vec![AlertKind::CreditLow])]);
        assert_eq!(n[0].alerts[0].severity, Severity::Critical);
    }

    #[test]
    fn a_402_clears_after_resolve_after_good_rounds_and_other_providers_give_no_credit_verdict() {
        let mut e = AlertEngine::new(cfg());
        let paid = target("openrouter", "m");
        let others: Vec<Target> = (0..50).map(|i| target(&format!("p{i}"), "m")).collect();
        let with_others = |o: Outcome, m: i64| {
            let mut round = vec![sample(&paid, o, at(m))];
            round.extend(others.iter().map(|t| sample(t, Outcome::Ok, at(m))));
            round
        };
        let fired = round(&mut e, &with_others(Outcome::PaymentRequired, 0), at(0));
        assert_eq!(kinds(&fired), vec![("openrouter".into(), AlertStatus::Firing, vec![AlertKind::CreditLow])]);
        // Only the provider with an open credit facet is judged again, and clears like any facet.
        let resolved = (1..10)
            .find(|m| {
                let n = round(&mut e, &with_others(Outcome::Ok, *m), at(*m));
                assert!(n.iter().all(|n| n.alerts.iter().all(|a| a.provider == "openrouter")), "{n:?}");
                kinds(&n) == vec![("openrouter".into(), AlertStatus::Resolved, vec![AlertKind::CreditLow])]
            })
            .expect("resolves");
        assert_eq!(resolved, i64::from(cfg().resolve_after));
    }

    #[test]
    fn maintenance_silences_notifications_but_records_the_alert() {
        let mut c = cfg();
        c.maintenance = vec![MaintenanceWindow { provider: "openrouter".into(), start: at(0), end: at(30) }];
        let mut e = AlertEngine::new(c);
        for m in 0..30 {
            assert!(round(&mut e, &fleet(Outcome::ServerError, at(m)), at(m)).is_empty(), "minute {m}");
        }
        assert_eq!(e.firing().len(), 1, "recorded while silenced");
        let after = round(&mut e, &fleet(Outcome::ServerError, at(30)), at(30));
        assert_eq!(kinds(&after), vec![("openrouter".into(), AlertStatus::Firing, vec![AlertKind::Errors])]);
        assert!(!after[0].reminder);
    }

    #[test]
    fn state_survives_a_restart_without_repeating_or_losing_the_alert() {
        let mut e = AlertEngine::new(cfg());
        round(&mut e, &fleet(Outcome::ServerError, at(0)), at(0));
        assert_eq!(round(&mut e, &fleet(Outcome::ServerError, at(1)), at(1)).len(), 1);
        let saved = e.state_json().expect("state serializes").text().expect("text");
        let parsed = crate::vocab::records::StateJson::from_text(&saved).expect("state is JSON");
        let mut e = AlertEngine::restore(cfg(), Some(&parsed));
        assert!(round(&mut e, &fleet(Outcome::ServerError, at(2)), at(2)).is_empty());
        for m in 3..5 {
            round(&mut e, &fleet(Outcome::Ok, at(m)), at(m));
        }
        let resolved = round(&mut e, &fleet(Outcome::Ok, at(5)), at(5));
        assert_eq!(kinds(&resolved), vec![("openrouter".into(), AlertStatus::Resolved, vec![AlertKind::Errors])]);
    }

    fn slo(chain: &str, worst: f64, breaking: Option<&str>) -> ChainSloCheck {
        let budget = SloBudget {
            slo_ms: 2000.0,
            worst_case_ms: worst,
            meets: worst <= 2000.0,
            breaking_member: breaking.map(String::from),
        };
        ChainSloCheck { chain: chain.into(), ttft: Some(budget), total: None }
    }

    #[test]
    fn a_chain_over_its_total_slo_warns_naming_that_budget_and_resolves_once_both_are_met() {
        let mut e = AlertEngine::new(cfg());
        let total = |worst: f64, breaking: Option<&str>| SloBudget {
            slo_ms: 30_000.0,
            worst_case_ms: worst,
            meets: worst <= 30_000.0,
            breaking_member: breaking.map(String::from),
        };
        let check = |ttft: f64, all: f64, breaking: Option<&str>| ChainSloCheck {
            total: Some(total(all, breaking)),
            ..slo("chat", ttft, None)
        };
        let over = |e: &mut AlertEngine, c: ChainSloCheck, m: i64| {
            e.evaluate(&Round { chains: vec![c], ..Round::default() }, at(m))
        };
        assert!(over(&mut e, check(1500.0, 20_000.0, None), 0).is_empty(), "both budgets met");
        let n = over(&mut e, check(1500.0, 40_000.0, Some("anthropic/claude")), 1);
        assert_eq!(n.len(), 1, "{n:?}");
        let a = &n[0].alerts[0];
        assert_eq!(
            (a.kind, a.status, a.chain.as_deref()),
            (AlertKind::ChainSloAtRisk, AlertStatus::Firing, Some("chat"))
        );
        assert_eq!(
            a.summary,
            "chain chat: worst case 40000 ms to a complete answer if every member fails over in turn, \
             over total_slo 30000 ms, broken at anthropic/claude"
        );
        assert_eq!((a.current, a.baseline), (Some(40_000.0), Some(30_000.0)), "the broken budget's figures");
        // Still at risk while the first-token budget breaks too; both named, one incident.
        let mut later = Vec::new();
        for m in 2..2 + i64::from(cfg().resolve_after) + 1 {
            later.extend(over(&mut e, check(2500.0, 20_000.0, None), m));
        }
        assert!(later.iter().all(|n| n.alerts.iter().all(|a| a.status != AlertStatus::Resolved)), "{later:?}");
        let mut resolved = Vec::new();
        for m in 10..10 + i64::from(cfg().resolve_after) + 1 {
            resolved.extend(over(&mut e, check(1500.0, 20_000.0, None), m));
        }
        let gone = resolved.iter().filter(|n| n.alerts.iter().all(|a| a.status == AlertStatus::Resolved)).count();
        assert_eq!(gone, 1, "{resolved:?}");
    }

    #[test]
    fn a_chain_over_its_ttft_slo_warns_naming_the_member_and_resolves_when_it_meets_again() {
        let mut e = AlertEngine::new(cfg());
        let over = |e: &mut AlertEngine, chains: Vec<ChainSloCheck>, m: i64| {
            e.evaluate(&Round { chains, ..Round::default() }, at(m))
        };
        let n = over(&mut e, vec![slo("chat", 1500.0, None), slo("batch", 2600.0, Some("anthropic/claude"))], 0);
        assert_eq!(n.len(), 1, "only the chain over its SLO: {n:?}");
        let a = &n[0].alerts[0];
        assert_eq!((a.kind, a.severity, a.status), (AlertKind::ChainSloAtRisk, Severity::Warning, AlertStatus::Firing));
        assert_eq!(a.chain.as_deref(), Some("batch"));
        assert_eq!(a.subject(), "chain batch");
        assert!(a.summary.contains("2600 ms") && a.summary.contains("broken at anthropic/claude"), "{}", a.summary);
        assert_eq!((a.current, a.baseline), (Some(2600.0), Some(2000.0)));
        // Two chains over the SLO are two incidents, not one.
        let both = over(&mut e, vec![slo("chat", 2100.0, Some("openai/gpt")), slo("batch", 2600.0, Some("x/y"))], 1);
        assert_eq!(both.len(), 1, "chat opens its own incident; batch is already open: {both:?}");
        assert_eq!(both[0].alerts[0].chain.as_deref(), Some("chat"));
        let mut resolved = Vec::new();
        for m in 2..2 + i64::from(cfg().resolve_after) + 1 {
            resolved.extend(over(&mut e, vec![slo("chat", 2100.0, Some("openai/gpt")), slo("batch", 1900.0, None)], m));
        }
        let gone: Vec<_> =
            resolved.iter().filter(|n| n.alerts.iter().all(|a| a.status == AlertStatus::Resolved)).collect();
        assert_eq!(gone.len(), 1, "{resolved:?}");
        assert_eq!(gone[0].alerts[0].chain.as_deref(), Some("batch"));
    }

    #[test]
    fn a_chain_head_move_is_one_notice_that_survives_a_restart_and_resolves_by_itself() {
        use crate::decide::alert::chain_head::ChainHeadCheck;
        use crate::vocab::chain_head::PerMtok;
        let on = RuleConfig { chain_head_changed: true, ..cfg() };
        let head = |target: &str, input: f64| ChainHeadCheck {
            chain: "chat".into(),
            head: Some(target.into()),
            price: Some(PerMtok { input, output: input * 4.0 }),
            tokens_per_day: None,
        };
        let eval = |e: &mut AlertEngine, h: ChainHeadCheck, m: i64| {
            e.evaluate(&Round { heads: vec![h], ..Round::default() }, at(m))
        };
        let mut e = AlertEngine::new(on.clone());
        assert!(eval(&mut e, head("openrouter/m", 1.0), 0).is_empty(), "a first sight is no news");
        // A restart between two evaluations: the saved state remembers the head.
        let saved = crate::vocab::records::StateJson::from_text(&e.state_json().expect("state").text().expect("text"));
        let mut e = AlertEngine::restore(on.clone(), Some(&saved.expect("json")));
        let n = eval(&mut e, head("anthropic/c", 3.1), 1);
        assert_eq!(n.len(), 1, "{n:?}");
        let a = &n[0].alerts[0];
        assert_eq!((a.kind, a.severity, a.status), (AlertKind::ChainHeadChanged, Severity::Info, AlertStatus::Firing));
        assert_eq!(n[0].subject, "chain chat");
        assert!(
            a.summary.starts_with("chain chat: now anthropic/c, 3.1× the input price of openrouter/m"),
            "{}",
            a.summary
        );
        let mut later = Vec::new();
        for m in 2..2 + i64::from(on.resolve_after) + 1 {
            later.extend(eval(&mut e, head("anthropic/c", 3.1), m));
        }
        assert_eq!(later.len(), 1, "only the resolve: {later:?}");
        assert_eq!(later[0].status, AlertStatus::Resolved);
        // Switched off (the default), a move is followed but not sent.
        let mut off = AlertEngine::new(cfg());
        assert!(eval(&mut off, head("openrouter/m", 1.0), 0).is_empty());
        assert!(eval(&mut off, head("anthropic/c", 3.1), 1).is_empty());
    }

    #[test]
    fn spend_outside_the_rounds_counts_toward_the_daily_budget() {
        // The test config's budget is $5: $4.9 of workload runs, then one $0.5 probe.
        let mut e = AlertEngine::new(cfg());
        let t = target("openai", "gpt");
        e.add_spend(4.9, at(0));
        e.add_spend(f64::NAN, at(0));
        e.add_spend(-5.0, at(0));
        assert!((e.spent_today(at(0)) - 4.9).abs() < 1e-9, "{}", e.spent_today(at(0)));
        let mut s = sample(&t, Outcome::Ok, at(1));
        s.cost_usd = Some(0.5);
        let sent = round(&mut e, &[s], at(1));
        assert_eq!(kinds(&sent), vec![(String::new(), AlertStatus::Firing, vec![AlertKind::ProbeBudgetExceeded])]);
        assert_eq!(e.spent_today(at(24 * 60)), 0.0, "a new UTC day starts at zero");
    }

    #[test]
    fn spending_over_the_daily_budget_fires_once_and_clears_next_day() {
        let mut e = AlertEngine::new(cfg());
        let t = target("openai", "gpt");
        let mut sent = Vec::new();
        for m in 0..12 {
            let mut s = sample(&t, Outcome::Ok, at(m));
            s.cost_usd = Some(0.5);
            sent.extend(round(&mut e, &[s], at(m)));
        }
        assert_eq!(kinds(&sent), vec![(String::new(), AlertStatus::Firing, vec![AlertKind::ProbeBudgetExceeded])]);
        assert_eq!(sent[0].alerts[0].current, Some(5.5));
        let tomorrow = at(24 * 60);
        let mut later = Vec::new();
        for i in 0..3 {
            let when = tomorrow + chrono::Duration::minutes(i);
            let mut s = sample(&t, Outcome::Ok, when);
            s.cost_usd = Some(0.01);
            later.extend(round(&mut e, &[s], when));
        }
        assert_eq!(kinds(&later), vec![(String::new(), AlertStatus::Resolved, vec![AlertKind::ProbeBudgetExceeded])]);
    }

    #[test]
    fn a_provider_incident_pages_once_survives_failed_reads_and_resolves_after_a_good_one() {
        use crate::decide::alert::provider_incident::ProviderIncidentReading;
        let mut e = AlertEngine::new(cfg());
        let mut a = Alert::new(AlertKind::ProviderIncident, "eu", "openai", None, "OpenAI reports: outage".into());
        a.dedup_key = "vigil:eu:openai:::provider_incident:x1".into();
        let open = |read: bool| ProviderIncidentReading {
            open: vec![a.clone()],
            read: if read { ["openai".to_string()].into() } else { Default::default() },
        };
        let gone = |read: bool| ProviderIncidentReading {
            open: vec![],
            read: if read { ["openai".to_string()].into() } else { Default::default() },
        };
        let mut sent = Vec::new();
        for m in 0..3 {
            e.read_provider_pages(open(true));
            sent.extend(round(&mut e, &[], at(m)));
        }
        assert_eq!(kinds(&sent), vec![("openai".to_string(), AlertStatus::Firing, vec![AlertKind::ProviderIncident])]);
        assert_eq!(sent[0].incident, "vigil:openai", "folded into the provider's incident");
        // The page fails to read: nothing is known, nothing clears.
        for m in 3..10 {
            e.read_provider_pages(gone(false));
            assert!(round(&mut e, &[], at(m)).is_empty());
        }
        // Read again without the incident: it clears after resolve_after evaluations.
        let mut later = Vec::new();
        for m in 10..14 {
            e.read_provider_pages(gone(true));
            later.extend(round(&mut e, &[], at(m)));
        }
        assert_eq!(
            kinds(&later),
            vec![("openai".to_string(), AlertStatus::Resolved, vec![AlertKind::ProviderIncident])]
        );
        // An evaluation without any reading (backtests) leaves provider facets alone.
        assert!(round(&mut e, &[], at(15)).is_empty());
    }

    #[test]
    fn repeated_adherence_failures_fire() {
        let mut e = AlertEngine::new(cfg());
        let t = target("openai", "gpt");
        let mut sent = Vec::new();
        for m in 0..3 {
            let mut s = sample(&t, Outcome::Ok, at(m));
            s.adherence_ok = Some(false);
            sent.extend(round(&mut e, &[s], at(m)));
        }
        assert_eq!(kinds(&sent), vec![("openai".into(), AlertStatus::Firing, vec![AlertKind::AdherenceFailed])]);
    }

    fn at_s(seconds: i64) -> DateTime<Utc> {
        t0() + chrono::Duration::seconds(seconds)
    }

    /// A latency probe with a baseline P95 of 110 ms TTFT (threshold 2 × 110 = 220 ms).
    fn timed(t: &Target, ttft: f64, when: DateTime<Utc>) -> Sample {
        let mut s = sample(t, Outcome::Ok, when);
        s.ttfb_ms = None;
        s.ttft_ms = Some(ttft);
        s
    }

    fn with_baseline(s: &Sample, e: Elsewhere) -> RoundProbe<'_> {
        RoundProbe { sample: s, baseline: BaselineP95 { ttfb_p95_ms: None, ttft_p95_ms: Some(110.0) }, elsewhere: e }
    }

    /// Runs one target's TTFTs (one per minute) and returns every notification.
    fn run_latency(e: &mut AlertEngine, ttfts: &[f64], elsewhere: Elsewhere) -> Vec<(usize, Notification)> {
        let t = target("openrouter", "llama");
        let mut out = Vec::new();
        for (i, v) in ttfts.iter().enumerate() {
            let s = timed(&t, *v, at(i as i64));
            let n = e.evaluate(&Round { probes: vec![with_baseline(&s, elsewhere)], ..Round::default() }, at(i as i64));
            out.extend(n.into_iter().map(|n| (i, n)));
        }
        out
    }

    #[test]
    fn a_single_slow_probe_never_pages() {
        let mut e = AlertEngine::new(cfg());
        let mut v = vec![100.0; 30];
        v[10] = 602.0;
        assert!(run_latency(&mut e, &v, Elsewhere::default()).is_empty());
        // Two slow probes close together are still not three.
        v[12] = 650.0;
        assert!(run_latency(&mut AlertEngine::new(cfg()), &v, Elsewhere::default()).is_empty());
    }

    #[test]
    fn a_heavy_tail_with_unchanged_distribution_never_pages_in_a_day() {
        use rand::{RngExt, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        // A day at 60 s: body 90–110 ms, 1 % of probes at 3–5 × P50 at random, and a regular
        // 3 % spike (every 33rd probe) that never clusters.
        let v: Vec<f64> = (0..1440)
            .map(|i| {
                if i % 33 == 0 || rng.random_bool(0.01) {
                    rng.random_range(300.0..500.0)
                } else {
                    rng.random_range(90.0..110.0)
                }
            })
            .collect();
        let pages = run_latency(&mut AlertEngine::new(cfg()), &v, Elsewhere::default());
        assert!(pages.is_empty(), "{:?}", pages.iter().map(|(i, n)| (i, n.title())).collect::<Vec<_>>());
    }

    #[test]
    fn ttft_tripled_and_staying_pages_within_three_probes_and_resolves_once() {
        let mut e = AlertEngine::new(cfg());
        let mut v = vec![100.0; 10];
        v.extend(vec![300.0; 10]);
        v.extend(vec![100.0; 10]);
        let got = run_latency(&mut e, &v, Elsewhere { regions: 2, over_latency: 2, ..Elsewhere::default() });
        let firing: Vec<_> = got.iter().filter(|(_, n)| n.status == AlertStatus::Firing).collect();
        assert_eq!(firing.len(), 1, "{got:?}");
        let (i, n) = firing[0];
        assert!(*i <= 12, "detected at probe {i}, the slow phase started at probe 10");
        let a = &n.alerts[0];
        assert_eq!(a.kind, AlertKind::LatencyDegraded);
        assert_eq!(a.scope, Scope::Global { affected: 3, regions: 3 }, "others over their own thresholds too");
        assert!(a.summary.starts_with("3 of the last 5 ok probes over 2 × baseline P95"), "{}", a.summary);
        assert_eq!(n.incident, "vigil:openrouter:llama:");
        let resolved: Vec<_> = got.iter().filter(|(_, n)| n.status == AlertStatus::Resolved).collect();
        assert_eq!(resolved.len(), 1, "{got:?}");
    }

    #[test]
    fn ttft_doubled_pages_within_three_probes() {
        let mut e = AlertEngine::new(cfg());
        let mut v = vec![100.0; 10];
        v.extend(vec![230.0; 10]);
        let got = run_latency(&mut e, &v, Elsewhere::default());
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].0, 12, "the third doubled probe pages");
        assert_eq!(got[0].1.alerts[0].scope, Scope::Regional);
    }

    fn breaker(t: &Target, from: State, to: State) -> BreakerChange {
        BreakerChange { target: t.clone(), from, to, reason: "3 failed probes in 120s".into() }
    }

    #[test]
    fn errors_breaker_and_latency_of_one_target_are_one_incident() {
        let mut e = AlertEngine::new(cfg());
        let t = target("groq", "llama");
        let others: Vec<Target> = ["openai", "anthropic", "gemini"].iter().map(|p| target(p, "m")).collect();
        let mut sent = Vec::new();
        let mut step = |e: &mut AlertEngine, m: i64, o: Outcome, changes: Vec<BreakerChange>| {
            let mut samples: Vec<Sample> = others.iter().map(|x| timed(x, 100.0, at(m))).collect();
            samples.push(if o == Outcome::Ok { timed(&t, 100.0, at(m)) } else { sample(&t, o, at(m)) });
            let probes = samples.iter().map(|s| with_baseline(s, Elsewhere::default())).collect();
            let n = e.evaluate(&Round { probes, breaker: changes, ..Round::default() }, at(m));
            sent.extend(n.into_iter().map(|n| (m, n)));
        };
        step(&mut e, 0, Outcome::ServerError, vec![]);
        step(&mut e, 1, Outcome::ServerError, vec![]);
        step(&mut e, 2, Outcome::ServerError, vec![breaker(&t, State::Closed, State::Open)]);
        for m in 3..6 {
            step(&mut e, m, Outcome::ServerError, vec![]);
        }
        step(
            &mut e,
            6,
            Outcome::Ok,
            vec![breaker(&t, State::Open, State::HalfOpen), breaker(&t, State::HalfOpen, State::Closed)],
        );
        for m in 7..12 {
            step(&mut e, m, Outcome::Ok, vec![]);
        }
        let summary: Vec<(i64, AlertStatus, bool, Vec<AlertKind>)> =
            sent.iter().map(|(m, n)| (*m, n.status, n.update, n.alerts.iter().map(|a| a.kind).collect())).collect();
        assert_eq!(
            summary,
            vec![
                (1, AlertStatus::Firing, false, vec![AlertKind::Errors]),
                (2, AlertStatus::Firing, true, vec![AlertKind::Errors, AlertKind::BreakerOpen]),
                (8, AlertStatus::Resolved, false, vec![AlertKind::Errors, AlertKind::BreakerOpen]),
            ],
            "one page, one update in place, one resolve"
        );
        assert!(sent.iter().all(|(_, n)| n.incident == "vigil:groq:llama:"));
        assert!(sent[1].1.title().starts_with("[UPDATE] groq/llama: breaker_open, errors"), "{}", sent[1].1.title());
    }

    #[test]
    fn kinds_joining_in_one_evaluation_are_one_page() {
        let mut e = AlertEngine::new(cfg());
        let t = target("groq", "llama");
        let others: Vec<Target> = ["openai", "anthropic", "gemini"].iter().map(|p| target(p, "m")).collect();
        let mut sent = Vec::new();
        for m in 0..2 {
            let mut samples: Vec<Sample> = others.iter().map(|x| timed(x, 100.0, at(m))).collect();
            samples.push(sample(&t, Outcome::ServerError, at(m)));
            // The breaker opens on the probe that makes `errors` hold.
            let changes = if m == 1 { vec![breaker(&t, State::Closed, State::Open)] } else { vec![] };
            let probes = samples.iter().map(|s| with_baseline(s, Elsewhere::default())).collect();
            sent.extend(e.evaluate(&Round { probes, breaker: changes, ..Round::default() }, at(m)));
        }
        assert_eq!(sent.len(), 1, "one message: {:?}", kinds(&sent));
        assert!(!sent[0].update);
        assert!(sent[0].title().starts_with("[FIRING] groq/llama: breaker_open, errors"), "{}", sent[0].title());
    }

    #[test]
    fn every_model_of_a_provider_failing_is_one_provider_incident() {
        let mut e = AlertEngine::new(cfg());
        let models: Vec<Target> = ["a", "b", "c"].iter().map(|m| target("deepinfra", m)).collect();
        let ok: Vec<Target> = ["openai", "anthropic", "gemini", "groq"].iter().map(|p| target(p, "m")).collect();
        let mut sent = Vec::new();
        for m in 0..10 {
            let bad = if m < 5 { Outcome::ServerError } else { Outcome::Ok };
            let mut samples: Vec<Sample> = ok.iter().map(|t| sample(t, Outcome::Ok, at(m))).collect();
            samples.extend(models.iter().map(|t| sample(t, bad, at(m))));
            sent.extend(round(&mut e, &samples, at(m)));
        }
        assert_eq!(
            kinds(&sent),
            vec![
                ("deepinfra".into(), AlertStatus::Firing, vec![AlertKind::Errors; 3]),
                ("deepinfra".into(), AlertStatus::Resolved, vec![AlertKind::Errors; 3]),
            ]
        );
        assert_eq!(sent[0].incident, "vigil:deepinfra");
        assert_eq!(sent[0].subject, "deepinfra");
    }

    #[test]
    fn a_flapping_target_sends_one_flapping_notice_and_no_change_pages() {
        let mut e = AlertEngine::new(cfg());
        let t = target("together", "m");
        let ok: Vec<Target> = ["openai", "anthropic", "gemini", "groq"].iter().map(|p| target(p, "m")).collect();
        let mut sent = Vec::new();
        // Ok/fail alternating for 60 probes, the breaker opening and closing along, then calm.
        for m in 0..120 {
            let o = if m < 60 && m % 2 == 1 { Outcome::ServerError } else { Outcome::Ok };
            let mut samples: Vec<Sample> = ok.iter().map(|x| timed(x, 100.0, at_s(m * 10))).collect();
            samples.push(if o == Outcome::Ok { timed(&t, 100.0, at_s(m * 10)) } else { sample(&t, o, at_s(m * 10)) });
            let changes = match (m < 56, m % 8) {
                (true, 3) => vec![breaker(&t, State::Closed, State::Open)],
                (true, 6) => {
                    vec![breaker(&t, State::Open, State::HalfOpen), breaker(&t, State::HalfOpen, State::Closed)]
                }
                _ => vec![],
            };
            let probes = samples.iter().map(|s| with_baseline(s, Elsewhere::default())).collect();
            let n = e.evaluate(&Round { probes, breaker: changes, ..Round::default() }, at_s(m * 10));
            if m == 40 {
                assert!(e.is_flapping(&t));
                assert_eq!(e.flapping_targets(), vec![t.clone()]);
            }
            sent.extend(n.into_iter().map(|n| (m, n)));
        }
        let summary: Vec<(AlertStatus, bool, Vec<AlertKind>)> = sent
            .iter()
            .map(|(_, n)| (n.status, n.update, n.alerts.iter().map(|a| a.kind).collect::<Vec<_>>()))
            .collect();
        let flap_notices =
            summary.iter().filter(|(s, _, k)| *s == AlertStatus::Firing && k.contains(&AlertKind::Flapping)).count();
        assert_eq!(flap_notices, 1, "{summary:?}");
        let opens = summary.iter().filter(|(s, u, _)| *s == AlertStatus::Firing && !u).count();
        assert_eq!(opens, 1, "one incident page for the whole flapping phase: {summary:?}");
        let resolves = summary.iter().filter(|(s, _, _)| *s == AlertStatus::Resolved).count();
        assert_eq!(resolves, 1, "{summary:?}");
        assert!(!e.is_flapping(&t));
    }

    #[test]
    fn a_breaker_open_in_every_region_is_global() {
        let mut e = AlertEngine::new(cfg());
        let t = target("groq", "llama");
        let s = sample(&t, Outcome::ServerError, at(0));
        let elsewhere = Elsewhere { regions: 2, failing: 2, breaker_open: 2, ..Elsewhere::default() };
        let r = Round {
            probes: vec![with_baseline(&s, elsewhere)],
            breaker: vec![breaker(&t, State::Closed, State::Open)],
            ..Round::default()
        };
        let n = e.evaluate(&r, at(0));
        assert_eq!(n.len(), 1);
        assert_eq!(n[0].alerts[0].kind, AlertKind::BreakerOpen);
        assert_eq!(n[0].alerts[0].scope, Scope::Global { affected: 3, regions: 3 });
        // Seen nowhere else: regional.
        let mut e = AlertEngine::new(cfg());
        let r = Round { probes: vec![with_baseline(&s, Elsewhere { regions: 2, ..Elsewhere::default() })], ..r };
        assert_eq!(e.evaluate(&r, at(0))[0].alerts[0].scope, Scope::Regional);
    }

    #[test]
    fn region_unhealthy_needs_two_rounds() {
        let mut e = AlertEngine::new(cfg());
        let down: Vec<Sample> =
            ["a", "b", "c", "d"].iter().map(|p| sample(&target(p, "m"), Outcome::ConnectError, at(0))).collect();
        assert!(round(&mut e, &down, at(0)).is_empty(), "one bad round is one sample per target");
        let up: Vec<Sample> =
            ["a", "b", "c", "d"].iter().map(|p| sample(&target(p, "m"), Outcome::Ok, at(1))).collect();
        assert!(round(&mut e, &up, at(1)).is_empty());
    }
}
