//! Cost-aware adaptive probing: the pure planner ([`plan`]) and the bookkeeping around it that
//! the pipeline keeps ([`Planner`]): each target's expected cost per probe, today's spend, the
//! plan published to the scheduler and readers, and the weight each sample carries into the
//! baselines so a stretched interval does not bias percentiles.

pub mod plan;

use crate::config::{AdaptiveConfig, ProbeConfig, ProviderConfig, WorkloadConfig};
use crate::vocab::target::{ByTarget, Target};
use chrono::{DateTime, Utc};
pub use plan::{plan_reserving, Mode, PlanInput, PlanSettings, ProbePlan, TargetPlan};
use std::sync::{Arc, RwLock};

/// Input tokens a probe is assumed to send before its first priced sample says what it costs
/// (the probe's system and user prompts with the chat framing are about this size).
pub const ASSUMED_INPUT_TOKENS: u32 = 60;
/// Weight of the newest priced sample in a target's expected cost per probe.
const COST_SMOOTHING: f64 = 0.2;

/// The latest plan, shared by the pipeline (writer), the scheduler and the HTTP readers.
pub type SharedPlan = Arc<RwLock<Arc<ProbePlan>>>;

/// What the pipeline keeps to plan: settings, expected costs and baseline weight carry-overs.
#[derive(Debug)]
pub struct Planner {
    settings: PlanSettings,
    /// Expected USD per probe by target: the configured or built-in price at
    /// [`ASSUMED_INPUT_TOKENS`] and `probe.max_tokens` until samples say otherwise.
    cost: ByTarget<f64>,
    /// Fractional baseline weight not yet recorded, by target.
    carry: ByTarget<f64>,
    targets: Vec<Target>,
    /// Each target's id, beside `targets`: a plan is keyed by id, and spelling 10,000 ids at
    /// every replan was a share of the minute's evaluation.
    ids: Vec<String>,
    shared: SharedPlan,
    /// The long-prompt probes' projected spend a day, set aside before every plan.
    reserved_per_day: f64,
}

/// The price of `t` at its provider `p` (configured, then built in), if any.
fn price_for(p: &ProviderConfig, t: &Target) -> Option<crate::config::Price> {
    crate::decide::price_table::price_of(p, &t.model, t.route.as_deref(), None).map(|x| x.0)
}

/// Each target with its provider's settings ([`crate::config::by_name`]).
fn with_provider<'a>(
    providers: &'a [Arc<ProviderConfig>],
    targets: &'a [Target],
) -> impl Iterator<Item = (&'a Target, &'a ProviderConfig)> {
    let by_name = crate::config::by_name(providers);
    targets.iter().filter_map(move |t| Some((t, &***by_name.get(t.provider.as_str())?)))
}

impl Planner {
    /// A planner for `targets` on `settings`, pricing each probe from `providers` at
    /// `max_tokens` (`probe.max_tokens`), publishing into `shared`.
    pub fn new(
        settings: PlanSettings,
        providers: &[Arc<ProviderConfig>],
        max_tokens: u32,
        targets: Vec<Target>,
        shared: SharedPlan,
    ) -> Self {
        let cost = with_provider(providers, &targets)
            .filter_map(|(t, p)| Some((t.clone(), price_for(p, t)?.cost(ASSUMED_INPUT_TOKENS, max_tokens))))
            .collect();
        Self::with_settings(settings, targets, shared).priced(cost)
    }

    /// A planner with explicit settings and no prices yet (tests and tools).
    pub fn with_settings(settings: PlanSettings, targets: Vec<Target>, shared: SharedPlan) -> Self {
        let ids = targets.iter().map(Target::id).collect();
        Planner {
            settings,
            cost: ByTarget::default(),
            carry: ByTarget::default(),
            targets,
            ids,
            shared,
            reserved_per_day: 0.0,
        }
    }

    fn priced(mut self, cost: ByTarget<f64>) -> Self {
        self.cost = cost;
        self
    }

    /// This planner setting `usd_per_day` aside for the long-prompt probes
    /// ([`workloads_per_day`]) before planning the ordinary ones.
    pub fn reserving(mut self, usd_per_day: f64) -> Self {
        self.reserved_per_day = if usd_per_day.is_finite() { usd_per_day.max(0.0) } else { 0.0 };
        self
    }

    /// The targets planned.
    pub fn targets(&self) -> &[Target] {
        &self.targets
    }

    /// The settings in use.
    pub fn settings(&self) -> PlanSettings {
        self.settings
    }

    /// Takes a sample's cost into the target's expected cost per probe.
    pub fn observe_cost(&mut self, target: &Target, cost_usd: Option<f64>) {
        let Some(c) = cost_usd.filter(|c| c.is_finite() && *c >= 0.0) else { return };
        // A target with a cost is planned; only a first cost needs the scan of every target.
        if let Some(e) = self.cost.get_mut(target) {
            *e += COST_SMOOTHING * (c - *e);
            return;
        }
        if !self.targets.contains(target) {
            self.targets.push(target.clone());
            self.ids.push(target.id());
        }
        self.cost.insert(target.clone(), c);
    }

    /// How many base-interval samples the next sample of `target` stands for in the baselines:
    /// `every / base` of its current plan, carried over as a fraction so a burst of three
    /// probes a round records one of them, and a target stretched to three rounds records three.
    pub fn weight(&mut self, target: &Target) -> u32 {
        let id = target.id();
        let w = self.current().get(&id).map_or(1.0, TargetPlan::weight);
        let carry = match self.carry.get_mut(target) {
            Some(c) => c,
            None => self.carry.entry(target.clone()).or_insert(0.0),
        };
        *carry += w;
        let whole = (*carry + 1e-9).floor().clamp(0.0, 1_000_000.0);
        *carry -= whole;
        whole as u32
    }

    /// The plan now published.
    pub fn current(&self) -> Arc<ProbePlan> {
        self.shared.read().map(|p| p.clone()).unwrap_or_default()
    }

    /// Plans every known target at `now`, given today's spend so far and which targets are in
    /// trouble, and publishes the plan.
    pub fn replan(
        &mut self,
        spent_today: f64,
        in_trouble: &dyn Fn(&Target) -> bool,
        now: DateTime<Utc>,
    ) -> Arc<ProbePlan> {
        let inputs: Vec<PlanInput> = self
            .targets
            .iter()
            .zip(&self.ids)
            .map(|(t, id)| PlanInput {
                target: id.clone(),
                cost_per_probe: self.cost.get(t).copied(),
                in_trouble: in_trouble(t),
            })
            .collect();
        let made = Arc::new(plan::plan_reserving(&self.settings, &inputs, spent_today, self.reserved_per_day, now));
        let before = self.current();
        for t in &made.targets {
            let was = before.get(&t.target).map(|b| (b.mode, b.every));
            if was.is_some_and(|w| w != (t.mode, t.every)) {
                tracing::info!(target = %t.target, mode = ?t.mode, every_s = t.every.as_secs_f64(),
                    projected_usd = made.projected_usd, "probe interval changed");
            }
        }
        if let Ok(mut w) = self.shared.write() {
            *w = made.clone();
        }
        made
    }
}

/// What every `[[probe.workload]]` is projected to cost a day over the `targets` it runs on, at
/// each target's configured or built-in price (an unpriced target counts nothing, as an unpriced
/// ordinary probe does).
pub fn workloads_per_day(providers: &[Arc<ProviderConfig>], workloads: &[WorkloadConfig], targets: &[Target]) -> f64 {
    let mut total = 0.0;
    for (t, p) in with_provider(providers, targets) {
        let Some(price) = price_for(p, t) else { continue };
        total += workloads
            .iter()
            .filter(|w| w.applies_to(p, &t.model))
            .map(|w| crate::decide::workload::daily_cost_usd(w, &price))
            .sum::<f64>();
    }
    total
}

/// The planner's settings from `[probe]` and `[probe.adaptive]`.
pub fn settings_of(probe: &ProbeConfig, adaptive: &AdaptiveConfig) -> PlanSettings {
    PlanSettings {
        base: probe.interval,
        max_interval: adaptive.max_interval,
        incident_interval: adaptive.incident_interval,
        daily_budget_usd: probe.daily_budget_usd,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn target(model: &str) -> Target {
        Target::new("p".into(), model.into(), None, "eu".into())
    }

    #[test]
    fn weights_carry_fractions_so_a_burst_records_once_per_round() {
        let settings = PlanSettings {
            base: Duration::from_secs(60),
            max_interval: Duration::from_secs(300),
            incident_interval: Duration::from_secs(20),
            daily_budget_usd: 1.0,
        };
        let (hot, dear) = (target("hot"), target("dear"));
        let mut p = Planner::with_settings(settings, vec![hot.clone(), dear.clone()], SharedPlan::default());
        p.observe_cost(&dear, Some(0.001));
        p.observe_cost(&hot, Some(0.0));
        let now = chrono::DateTime::parse_from_rfc3339("2026-12-01T00:00:00Z").expect("time").to_utc();
        let plan = p.replan(0.0, &|t| t == &hot, now);
        assert_eq!(plan.get(&dear.id()).map(|t| t.stretch), Some(2));
        let hot_weights: Vec<u32> = (0..6).map(|_| p.weight(&hot)).collect();
        assert_eq!(hot_weights.iter().sum::<u32>(), 2, "six probes at 20 s stand for two minutes: {hot_weights:?}");
        assert_eq!(p.weight(&dear), 2);
        assert_eq!(p.weight(&target("unplanned")), 1);
    }
}
