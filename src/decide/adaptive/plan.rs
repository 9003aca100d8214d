//! The cost-aware probe planner: a pure function of the budget, each target's cost per probe and
//! health, what was spent today and `now`, deciding each target's probe interval for the rest of
//! the UTC day so the projected spend stays under `probe.daily_budget_usd`.
//!
//! Cheap targets keep the base interval; the most expensive ones are stretched first (to a whole
//! number of base intervals, never past `probe.max_interval`); a target in trouble (degraded,
//! half-open, open, failing, or part of an open incident) is probed every
//! `probe.incident_interval` whatever it costs, and its cost is reserved before anyone else's.

use chrono::{DateTime, Duration as ChronoDuration, Utc};
use serde::Serialize;
use std::collections::HashMap;
use std::time::Duration;

/// The settings the planner follows (from `[probe]`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlanSettings {
    /// `probe.interval`: one round per base interval.
    pub base: Duration,
    /// `probe.max_interval`: no calm target is probed less often than this.
    pub max_interval: Duration,
    /// `probe.incident_interval`: how often a target in trouble is probed (at most `base`).
    pub incident_interval: Duration,
    /// `probe.daily_budget_usd`: probe spend per UTC day.
    pub daily_budget_usd: f64,
}

impl PlanSettings {
    /// Base intervals a calm target may be stretched to (at least 1).
    pub fn max_stretch(&self) -> u32 {
        let base = self.base.as_secs_f64().max(1e-3);
        (self.max_interval.as_secs_f64() / base).floor().clamp(1.0, f64::from(u32::MAX)) as u32
    }

    /// Probes per base interval for a target in trouble (at least 1).
    pub fn burst(&self) -> u32 {
        let fast = self.incident_interval.as_secs_f64().max(1e-3);
        (self.base.as_secs_f64() / fast).floor().clamp(1.0, 1000.0) as u32
    }
}

/// One target as the planner sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanInput {
    /// Target id (`provider/model@route`).
    pub target: String,
    /// Expected USD per probe; `None` when no price is known (the target keeps the base interval).
    pub cost_per_probe: Option<f64>,
    /// Degraded, half-open, open, failing or in an open incident: probed at the incident interval.
    pub in_trouble: bool,
}

/// Why a target has the interval it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Probed every base interval.
    Base,
    /// Probed every few base intervals to stay under the budget.
    Stretched,
    /// In trouble: probed every incident interval until it recovers.
    Incident,
    /// No known price: probed every base interval and not counted in the projection.
    Unpriced,
}

/// One target's plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TargetPlan {
    /// Target id.
    pub target: String,
    /// Why this interval.
    pub mode: Mode,
    /// Time between two probes of this target.
    #[serde(serialize_with = "seconds")]
    pub every: Duration,
    /// Probed in one base interval of every `stretch` (1 unless stretched).
    pub stretch: u32,
    /// Probes per base interval (1 unless in trouble with a shorter incident interval).
    pub burst: u32,
    /// Expected USD per probe, when a price is known.
    pub cost_per_probe_usd: Option<f64>,
    /// What this target is projected to cost from `at` to the end of the UTC day at this interval.
    pub projected_rest_of_day_usd: Option<f64>,
}

impl TargetPlan {
    /// How much one sample of this target stands for in a baseline, in base intervals
    /// (`every / base`): a stretched target's samples count more, a burst's less.
    pub fn weight(&self) -> f64 {
        f64::from(self.stretch) / f64::from(self.burst.max(1))
    }
}

fn seconds<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// The day's plan for every target.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ProbePlan {
    /// When it was made.
    pub at: DateTime<Utc>,
    /// `probe.daily_budget_usd`.
    pub budget_usd: f64,
    /// Spent today (UTC) before `at`.
    pub spent_usd: f64,
    /// What the long-prompt probes (`[[probe.workload]]`) are projected to cost until the end of
    /// the UTC day: set aside before the ordinary probes are planned (in `projected_usd`).
    pub reserved_usd: f64,
    /// Spent plus what every priced target is projected to cost until the end of the UTC day.
    pub projected_usd: f64,
    /// Even every calm target at `probe.max_interval` (and those in trouble at their interval)
    /// projects over the budget; `probe_budget_exceeded` will likely fire.
    pub over_budget: bool,
    /// One entry per target, in input order.
    pub targets: Vec<TargetPlan>,
    /// Target id → position in `targets`, built by [`plan`] (the only maker of a non-empty
    /// plan): every sample asks for its target's weight, and a scan of 1,000 ids per sample was
    /// a visible share of the daemon's CPU.
    #[serde(skip)]
    index: HashMap<String, usize>,
}

impl ProbePlan {
    /// The entry of `target`, if planned.
    pub fn get(&self, target: &str) -> Option<&TargetPlan> {
        self.index.get(target).and_then(|&i| self.targets.get(i))
    }
}

/// Seconds left in the UTC day of `now`.
fn rest_of_day(now: DateTime<Utc>) -> f64 {
    let midnight = now.date_naive().and_hms_opt(0, 0, 0).map(|t| t.and_utc() + ChronoDuration::days(1));
    midnight.map_or(0.0, |m| (m - now).num_milliseconds().max(0) as f64 / 1000.0)
}

/// Plans every target for the rest of the UTC day of `now`, given `spent_usd` already spent today.
///
/// Among calm priced targets the plan looks for the highest per-second spend cap such that
/// stretching every target above it (each to the fewest whole base intervals that bring it under
/// the cap, at most `max_stretch`) projects within the budget: so the dearest targets stretch
/// first and the cheap ones keep the base interval.
pub fn plan(settings: &PlanSettings, inputs: &[PlanInput], spent_usd: f64, now: DateTime<Utc>) -> ProbePlan {
    plan_reserving(settings, inputs, spent_usd, 0.0, now)
}

/// [`plan`] with `reserved_per_day_usd` set aside first: the long-prompt probes'
/// (`[[probe.workload]]`) projected spend a day, of which the rest of the UTC day's share joins
/// the fixed spend, so the ordinary probes stretch to fit what is left.
pub fn plan_reserving(
    settings: &PlanSettings,
    inputs: &[PlanInput],
    spent_usd: f64,
    reserved_per_day_usd: f64,
    now: DateTime<Utc>,
) -> ProbePlan {
    let rest = rest_of_day(now);
    let base = settings.base.as_secs_f64().max(1e-3);
    let kmax = settings.max_stretch();
    let burst = settings.burst();
    let spent = if spent_usd.is_finite() { spent_usd.max(0.0) } else { 0.0 };
    let cost = |c: Option<f64>| c.filter(|c| c.is_finite() && *c >= 0.0);
    // Per-probe costs of calm priced targets; the rest is fixed.
    let reserved = match reserved_per_day_usd {
        r if r.is_finite() && r > 0.0 => r * rest / 86_400.0,
        _ => 0.0,
    };
    let mut fixed = reserved;
    let mut calm: Vec<(usize, f64)> = Vec::new();
    for (i, t) in inputs.iter().enumerate() {
        match (cost(t.cost_per_probe), t.in_trouble) {
            (Some(c), true) => fixed += c * rest * f64::from(burst) / base,
            (Some(c), false) => calm.push((i, c)),
            (None, _) => {}
        }
    }
    let available = settings.daily_budget_usd - spent - fixed;
    let projection =
        |k: &dyn Fn(f64) -> u32| calm.iter().map(|(_, c)| c * rest / (base * f64::from(k(*c)))).sum::<f64>();
    let stretch_for = |cap: f64| {
        move |c: f64| {
            if c <= 0.0 {
                return 1;
            }
            if cap <= 0.0 {
                return kmax;
            }
            ((c / base / cap).ceil().clamp(1.0, f64::from(kmax))) as u32
        }
    };
    let unstretched = projection(&|_| 1);
    let cap = if unstretched <= available {
        f64::INFINITY
    } else if projection(&stretch_for(0.0)) > available {
        0.0
    } else {
        // Bisect the cap on a log scale: the projection only grows with it.
        // At `hi` nothing stretches; at `lo` every priced target is at the longest stretch.
        let per_s = calm.iter().map(|(_, c)| c / base).filter(|c| *c > 0.0);
        let mut hi = per_s.clone().fold(0.0, f64::max);
        let mut lo = per_s.fold(f64::INFINITY, f64::min) / f64::from(kmax) / 2.0;
        for _ in 0..80 {
            let mid = (lo * hi).sqrt();
            if projection(&stretch_for(mid)) <= available {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        lo
    };
    let k_of = stretch_for(cap);
    let mut projected = spent + fixed;
    let targets: Vec<TargetPlan> = inputs
        .iter()
        .map(|t| {
            let c = cost(t.cost_per_probe);
            let (mode, stretch, n) = match (c, t.in_trouble) {
                (_, true) => (Mode::Incident, 1, burst),
                (None, false) => (Mode::Unpriced, 1, 1),
                (Some(c), false) => {
                    let k = if cap.is_infinite() { 1 } else { k_of(c) };
                    (if k > 1 { Mode::Stretched } else { Mode::Base }, k, 1)
                }
            };
            let every = settings.base.mul_f64(f64::from(stretch) / f64::from(n));
            let rest_cost = c.map(|c| c * rest * f64::from(n) / (base * f64::from(stretch)));
            if !t.in_trouble {
                projected += rest_cost.unwrap_or(0.0);
            }
            TargetPlan {
                target: t.target.clone(),
                mode,
                every,
                stretch,
                burst: n,
                cost_per_probe_usd: c,
                projected_rest_of_day_usd: rest_cost,
            }
        })
        .collect();
    let mut index = HashMap::with_capacity(targets.len());
    for (i, t) in targets.iter().enumerate() {
        index.entry(t.target.clone()).or_insert(i);
    }
    ProbePlan {
        at: now,
        budget_usd: settings.daily_budget_usd,
        spent_usd: spent,
        reserved_usd: reserved,
        projected_usd: projected,
        over_budget: projected > settings.daily_budget_usd + 1e-9,
        targets,
        index,
    }
}

/// A stable phase per target for stretched schedules, so stretched targets spread over rounds.
pub fn phase_for(target: &str) -> u64 {
    // FNV-1a, fixed across builds (as the scheduler's offsets).
    target.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)) >> 7
}

/// Whether a target stretched to `stretch` base intervals is probed in round number `round`.
pub fn due_in_round(round: u64, phase: u64, stretch: u32) -> bool {
    stretch <= 1 || round.wrapping_add(phase).is_multiple_of(u64::from(stretch))
}

/// Whether position `position` (of `max_burst` evenly spaced in a round, see [`burst_offsets`])
/// of round `round` probes a target that the plan now gives `stretch` and `burst`. Asked when
/// the position comes due, so a plan made a second ago applies at once: a target that just
/// failed gets its next probe at the next position, not a round later.
pub fn due(round: u64, phase: u64, stretch: u32, burst: u32, position: u32, max_burst: u32) -> bool {
    let step = (max_burst.max(1) / burst.clamp(1, max_burst.max(1))).max(1);
    if !position.is_multiple_of(step) {
        return false;
    }
    position > 0 || burst > 1 || due_in_round(round, phase, stretch)
}

/// Offsets inside one round of a target probed `burst` times per base interval, starting at its
/// stable `offset` and evenly spaced (each taken modulo the base interval).
pub fn burst_offsets(offset: Duration, base: Duration, burst: u32) -> Vec<Duration> {
    let n = burst.max(1);
    let base_ns = base.as_nanos().max(1);
    (0..n)
        .map(|j| {
            let at = offset.as_nanos() + base_ns * u128::from(j) / u128::from(n);
            Duration::from_nanos((at % base_ns) as u64)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(h: u32, m: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 1, h, m, 0).single().expect("valid time")
    }

    fn settings(budget: f64) -> PlanSettings {
        PlanSettings {
            base: Duration::from_secs(60),
            max_interval: Duration::from_secs(300),
            incident_interval: Duration::from_secs(20),
            daily_budget_usd: budget,
        }
    }

    fn input(id: &str, cost: Option<f64>, in_trouble: bool) -> PlanInput {
        PlanInput { target: id.into(), cost_per_probe: cost, in_trouble }
    }

    #[test]
    fn a_workloads_daily_cost_leaves_less_for_the_ordinary_probes() {
        // 1,440 probes a day at $0.001 = $1.44 a target: two fit a $3 budget unstretched.
        let inputs = [input("a", Some(0.001), false), input("b", Some(0.001), false)];
        let free = plan(&settings(3.0), &inputs, 0.0, at(0, 0));
        assert!(free.targets.iter().all(|t| t.stretch == 1) && !free.over_budget);
        assert_eq!(free.reserved_usd, 0.0);
        // A workload projected at $2 a day leaves $1: both stretch to fit it.
        let tight = plan_reserving(&settings(3.0), &inputs, 0.0, 2.0, at(0, 0));
        assert!((tight.reserved_usd - 2.0).abs() < 1e-9, "the whole day is left at midnight");
        assert!(tight.targets.iter().all(|t| t.stretch >= 2), "{:?}", tight.targets);
        assert!(tight.projected_usd <= 3.0 + 1e-9 && !tight.over_budget, "{}", tight.projected_usd);
        // At noon only half the day's reservation is still to be spent.
        let noon = plan_reserving(&settings(3.0), &inputs, 0.0, 2.0, at(12, 0));
        assert!((noon.reserved_usd - 1.0).abs() < 1e-9);
        // A reservation larger than the budget leaves every calm target at its longest stretch.
        let over = plan_reserving(&settings(3.0), &inputs, 0.0, 10.0, at(0, 0));
        assert!(over.over_budget && over.targets.iter().all(|t| t.stretch == 5));
    }

    #[test]
    fn under_budget_nothing_stretches() {
        // 1,440 probes a day at $0.0001 = $0.144 per target.
        let p =
            plan(&settings(1.0), &[input("a", Some(0.0001), false), input("b", Some(0.0002), false)], 0.0, at(0, 0));
        assert!(p.targets.iter().all(|t| t.mode == Mode::Base && t.every == Duration::from_secs(60)));
        assert!((p.projected_usd - 0.432).abs() < 1e-9, "{}", p.projected_usd);
        assert!(!p.over_budget);
    }

    #[test]
    fn the_expensive_target_stretches_first_and_the_cheap_one_keeps_the_base_interval() {
        // cheap: $0.144/day at base; dear: $1.44/day at base; budget $1.
        let p = plan(
            &settings(1.0),
            &[input("cheap", Some(0.0001), false), input("dear", Some(0.001), false)],
            0.0,
            at(0, 0),
        );
        let cheap = p.get("cheap").expect("planned");
        let dear = p.get("dear").expect("planned");
        assert_eq!((cheap.mode, cheap.stretch), (Mode::Base, 1));
        assert_eq!(
            (dear.mode, dear.stretch),
            (Mode::Stretched, 2),
            "the fewest intervals that fit: 1.44 / 2 + 0.144 ≤ 1"
        );
        assert_eq!(dear.every, Duration::from_secs(120));
        assert!(p.projected_usd <= 1.0 && !p.over_budget, "{}", p.projected_usd);
    }

    #[test]
    fn never_past_max_interval_and_says_when_the_budget_cannot_be_kept() {
        let p = plan(&settings(0.1), &[input("dear", Some(0.01), false)], 0.0, at(0, 0));
        let dear = p.get("dear").expect("planned");
        assert_eq!(dear.every, Duration::from_secs(300), "max_interval caps the stretch");
        assert!(p.over_budget, "14.4/5 = $2.88 > $0.10");
        assert!((p.projected_usd - 2.88).abs() < 1e-9);
    }

    #[test]
    fn a_target_in_trouble_goes_fast_whatever_it_costs_and_others_make_room() {
        let inputs = [input("a", Some(0.001), true), input("b", Some(0.001), false)];
        let p = plan(&settings(5.0), &inputs, 0.0, at(0, 0));
        let a = p.get("a").expect("planned");
        assert_eq!((a.mode, a.every, a.burst), (Mode::Incident, Duration::from_secs(20), 3));
        // a: 3 × 1440 × 0.001 = 4.32; b must fit in 0.68: 1.44 / 3 = 0.48.
        let b = p.get("b").expect("planned");
        assert_eq!((b.mode, b.stretch), (Mode::Stretched, 3));
        assert!(p.projected_usd <= 5.0, "{}", p.projected_usd);
    }

    #[test]
    fn spending_so_far_and_the_hour_count() {
        // At 12:00 half the day is left; $0.9 of $1 already spent leaves $0.1.
        let p = plan(&settings(1.0), &[input("a", Some(0.0001), false)], 0.9, at(12, 0));
        let a = p.get("a").expect("planned");
        // 720 probes × 0.0001 = 0.072 fits.
        assert_eq!(a.stretch, 1);
        assert!((a.projected_rest_of_day_usd.expect("priced") - 0.072).abs() < 1e-9);
        assert!((p.projected_usd - 0.972).abs() < 1e-9);
        let p = plan(&settings(1.0), &[input("a", Some(0.0001), false)], 0.95, at(12, 0));
        assert_eq!(p.get("a").expect("planned").stretch, 2);
    }

    #[test]
    fn unpriced_targets_keep_the_base_interval_and_bad_numbers_are_unpriced() {
        let p = plan(
            &settings(0.0),
            &[input("u", None, false), input("nan", Some(f64::NAN), false), input("neg", Some(-1.0), false)],
            f64::NAN,
            at(0, 0),
        );
        assert!(p.targets.iter().all(|t| t.mode == Mode::Unpriced && t.every == Duration::from_secs(60)));
        assert_eq!(p.projected_usd, 0.0);
    }

    #[test]
    fn weights_rounds_and_bursts() {
        let p =
            plan(&settings(1.0), &[input("dear", Some(0.001), false), input("hot", Some(0.0), true)], 0.0, at(0, 0));
        assert!((p.get("dear").expect("planned").weight() - 2.0).abs() < 1e-12);
        assert!((p.get("hot").expect("planned").weight() - 1.0 / 3.0).abs() < 1e-12);
        let rounds: Vec<u64> = (0..6).filter(|r| due_in_round(*r, 1, 3)).collect();
        assert_eq!(rounds, vec![2, 5]);
        assert!((0..4).all(|r| due_in_round(r, 7, 1)));
        let offs = burst_offsets(Duration::from_secs(50), Duration::from_secs(60), 3);
        assert_eq!(offs, vec![Duration::from_secs(50), Duration::from_secs(10), Duration::from_secs(30)]);
        // Three positions a round: calm targets take the first (in their stretched rounds only),
        // targets in trouble all three.
        assert!(due(2, 1, 3, 1, 0, 3) && !due(3, 1, 3, 1, 0, 3) && !due(2, 1, 3, 1, 1, 3));
        assert!((0..3).all(|j| due(3, 1, 1, 3, j, 3)));
        assert!(due(0, 0, 1, 1, 0, 1) && !due(0, 0, 1, 1, 1, 2));
    }
}
