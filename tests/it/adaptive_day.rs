//! A simulated UTC day of cost-aware adaptive probing (time injected, no sleeping): targets with
//! mixed prices under a daily budget the fixed schedule would overrun, and a one-target incident.
//! The day runs the planner and the scheduler's own decision of which probe is due
//! (`vigil::decide::adaptive::plan::{plan, due, burst_offsets}`, as the pipeline and `Scheduler` use
//! them), and real circuit breakers judge the probes. Proven: the day's spend stays within the
//! budget (the fixed schedule's does not), the incident target is probed at the incident interval
//! until it recovers, and the incident is detected (breaker open) no later than with fixed intervals.

use chrono::{DateTime, TimeZone, Utc};
use std::time::Duration;
use vigil::decide::adaptive::plan::{burst_offsets, due, phase_for, plan, PlanInput, PlanSettings};
use vigil::decide::breaker::{Breaker, BreakerSettings, Probe};
use vigil::run::scheduler::offset_for;
use vigil::vocab::breaker::State;
use vigil::vocab::sample::Outcome;

const BASE: Duration = Duration::from_secs(60);

struct Sim {
    id: &'static str,
    cost: Option<f64>,
    breaker: Breaker,
    last_failed: bool,
    probes: Vec<DateTime<Utc>>,
    opened: Vec<DateTime<Utc>>,
}

struct Day {
    spent: f64,
    targets: Vec<Sim>,
}

fn midnight() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).single().expect("valid time")
}

fn incident() -> (DateTime<Utc>, DateTime<Utc>) {
    let start = Utc.with_ymd_and_hms(2026, 12, 1, 13, 0, 10).single().expect("valid time");
    (start, start + chrono::Duration::minutes(30))
}

const INCIDENT_TARGET: &str = "acme/small";

fn settings() -> PlanSettings {
    PlanSettings {
        base: BASE,
        max_interval: Duration::from_secs(300),
        incident_interval: Duration::from_secs(20),
        daily_budget_usd: 2.0,
    }
}

/// Runs the day; `adaptive = false` is today's fixed schedule (every target once a round).
fn run_day(adaptive: bool) -> Day {
    let breaker = BreakerSettings {
        consecutive_failures: 2,
        failure_n: 2,
        failure_window: chrono::Duration::seconds(120),
        latency_trips: 0,
        failover_factor: 2.0,
        open_for: chrono::Duration::seconds(60),
        rate_limit: vigil::decide::health::RateLimitRule { backoff: chrono::Duration::seconds(120), trips: 3 },
    };
    let start = midnight();
    // Per-probe costs: at base interval these cost 0.03, 0.14, 2.88 and 1.44 USD a day (4.49).
    let mk = |id: &'static str, cost: Option<f64>| Sim {
        id,
        cost,
        breaker: Breaker::new(breaker, start),
        last_failed: false,
        probes: Vec::new(),
        opened: Vec::new(),
    };
    let mut day = Day {
        spent: 0.0,
        targets: vec![
            mk("cheap/tiny", Some(0.00002)),
            mk(INCIDENT_TARGET, Some(0.0001)),
            mk("acme/large", Some(0.002)),
            mk("dear/xl", Some(0.001)),
            mk("local/free", None),
        ],
    };
    let s = settings();
    let positions = if adaptive { s.burst() } else { 1 };
    let (fault_from, fault_until) = incident();
    let replan = |day: &Day, now: DateTime<Utc>| {
        let inputs: Vec<PlanInput> = day
            .targets
            .iter()
            .map(|t| PlanInput {
                target: t.id.to_string(),
                cost_per_probe: t.cost,
                in_trouble: t.last_failed || t.breaker.state() != State::Closed,
            })
            .collect();
        plan(&s, &inputs, day.spent, now)
    };
    let mut current = replan(&day, start);
    for round in 0..1440u64 {
        let round_start = start + chrono::Duration::seconds(60 * round as i64);
        if adaptive {
            // The pipeline replans at every evaluation (once per base interval).
            current = replan(&day, round_start);
        }
        let mut events: Vec<(DateTime<Utc>, usize, u32)> = Vec::new();
        for (i, t) in day.targets.iter().enumerate() {
            let offsets = burst_offsets(offset_for(t.id, BASE), BASE, positions);
            for (position, off) in (0..positions).zip(offsets) {
                let at = round_start + chrono::Duration::from_std(off).expect("offset");
                events.push((at, i, position));
            }
        }
        events.sort();
        for (at, i, position) in events {
            let id = day.targets[i].id;
            let wanted = if adaptive {
                let p = current.get(id).expect("planned");
                due(round, phase_for(id), p.stretch, p.burst, position, positions)
            } else {
                true
            };
            if !wanted {
                continue;
            }
            let failed = id == INCIDENT_TARGET && at >= fault_from && at < fault_until;
            let t = &mut day.targets[i];
            t.probes.push(at);
            day.spent += t.cost.unwrap_or(0.0);
            let _ = t.breaker.tick(at);
            let outcome = if failed { Outcome::ServerError } else { Outcome::Ok };
            let probe = Probe {
                id: uuid::Uuid::now_v7(),
                at,
                outcome,
                ttfb_ms: Some(200.0),
                ttft_ms: None,
                retry_after_s: None,
            };
            if let Some(tr) =
                t.breaker.observe(probe, vigil::decide::baseline::LatencyP95 { ttfb: Some(250.0), ttft: None }, at)
            {
                if tr.to == State::Open {
                    t.opened.push(at);
                }
            }
            let newly_failing = failed && !t.last_failed;
            t.last_failed = failed;
            if adaptive && newly_failing {
                // The pipeline replans as soon as a target starts failing.
                current = replan(&day, at);
            }
        }
    }
    day
}

fn target<'a>(day: &'a Day, id: &str) -> &'a Sim {
    day.targets.iter().find(|t| t.id == id).expect("target")
}

fn gaps(probes: &[DateTime<Utc>], from: DateTime<Utc>, until: DateTime<Utc>) -> Vec<i64> {
    let inside: Vec<&DateTime<Utc>> = probes.iter().filter(|p| **p >= from && **p <= until).collect();
    inside.windows(2).map(|w| (*w[1] - *w[0]).num_seconds()).collect()
}

#[test]
fn a_simulated_day_keeps_the_budget_probes_the_incident_fast_and_detects_it_no_later() {
    let fixed = run_day(false);
    let adaptive = run_day(true);
    let budget = settings().daily_budget_usd;
    println!("spend: fixed ${:.4}, adaptive ${:.4} (budget ${budget:.2})", fixed.spent, adaptive.spent);
    assert!(fixed.spent > budget, "the fixed schedule overruns the budget, so the plan has work to do");
    assert!(adaptive.spent <= budget, "adaptive spend ${} within ${budget}", adaptive.spent);

    // Cheap and unpriced targets keep the base interval all day; the dearest one stretches,
    // never past max_interval.
    for id in ["cheap/tiny", "local/free"] {
        let t = target(&adaptive, id);
        assert_eq!(t.probes.len(), 1440, "{id} probed once a minute");
    }
    let large = target(&adaptive, "acme/large");
    let large_gaps = gaps(&large.probes, midnight(), midnight() + chrono::Duration::days(1));
    assert!(large.probes.len() < 1440 / 2, "acme/large stretched: {} probes", large.probes.len());
    assert!(large_gaps.iter().all(|g| *g <= 300), "never past max_interval: {:?}", large_gaps.iter().max());

    // The incident target: at the incident interval from its first failure until it recovers.
    let (from, until) = incident();
    let hit = target(&adaptive, INCIDENT_TARGET);
    let first_fail = *hit.probes.iter().find(|p| **p >= from).expect("probed during the incident");
    let during = gaps(&hit.probes, first_fail, until);
    println!("incident target gaps during the incident: {during:?}");
    assert!(!during.is_empty() && during.iter().all(|g| *g <= 20), "probed every 20 s: {during:?}");
    let fixed_hit = target(&fixed, INCIDENT_TARGET);
    assert!(
        hit.probes.iter().filter(|p| **p >= from && **p < until).count()
            > 2 * fixed_hit.probes.iter().filter(|p| **p >= from && **p < until).count(),
        "more probes of the incident target during the incident than the fixed schedule"
    );
    // Back to the base interval once it recovered (the breaker closes at its trial probe).
    let later = gaps(&hit.probes, until + chrono::Duration::minutes(10), until + chrono::Duration::hours(2));
    assert!(later.iter().all(|g| *g == 60), "base interval after recovery: {later:?}");

    // Detection: the breaker opens no later than with fixed intervals.
    let detect = |d: &Day| {
        let t = target(d, INCIDENT_TARGET);
        let opened = *t.opened.iter().find(|o| **o >= from).expect("breaker opened");
        (opened - from).num_seconds()
    };
    let (fixed_s, adaptive_s) = (detect(&fixed), detect(&adaptive));
    println!("detection: fixed {fixed_s} s, adaptive {adaptive_s} s after the incident began");
    assert!(adaptive_s <= fixed_s, "adaptive {adaptive_s} s vs fixed {fixed_s} s");
}
