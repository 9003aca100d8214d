//! Rollup percentiles agree with exact percentiles of the raw values within 1 %, over a simulated
//! week at one probe a minute, including a persist → load round trip through V2 serialization and
//! a window sliding over nine days through a real SQLite store.

use chrono::{DateTime, Duration, TimeZone, Utc};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use vigil::config::BaselineConfig;
use vigil::decide::baseline::{Baseline, Baselines, Metric};
use vigil::vocab::sample::{Outcome, Sample};
use vigil::vocab::target::Target;

const MINUTES_PER_WEEK: i64 = 7 * 24 * 60;

/// Latency shape: log-normal around a median, with occasional spikes.
struct Shape {
    median: f64,
    sigma: f64,
    spike_chance: f64,
    spike_factor: f64,
}

fn standard_normal(rng: &mut StdRng) -> f64 {
    let u1: f64 = 1.0 - rng.random::<f64>();
    let u2: f64 = rng.random();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

fn draw(rng: &mut StdRng, s: &Shape) -> f64 {
    let v = s.median * (s.sigma * standard_normal(rng)).exp();
    if rng.random::<f64>() < s.spike_chance {
        v * s.spike_factor * (1.0 + rng.random::<f64>())
    } else {
        v
    }
}

fn exact(values: &mut [f64], q: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
    values[rank - 1]
}

fn config() -> BaselineConfig {
    BaselineConfig {
        window: std::time::Duration::from_secs(7 * 86_400),
        failover_factor: 2.0,
        min_samples_p50: 30,
        min_samples_p95: 300,
        min_samples_p99: 2000,
        adopt_after: None,
    }
}

struct Week {
    targets: Vec<Target>,
    raw: Vec<[Vec<f64>; 3]>,
    baselines: Baselines,
    now: DateTime<Utc>,
}

fn simulate_week() -> Week {
    let mut rng = StdRng::seed_from_u64(20_261_130);
    let start = Utc.with_ymd_and_hms(2026, 11, 23, 0, 0, 0).single().expect("valid time");
    // (ttfb, extra time to first token, tokens/s) per target.
    let shapes = [
        (
            Shape { median: 180.0, sigma: 0.25, spike_chance: 0.01, spike_factor: 8.0 },
            Shape { median: 60.0, sigma: 0.4, spike_chance: 0.02, spike_factor: 5.0 },
            Shape { median: 65.0, sigma: 0.15, spike_chance: 0.01, spike_factor: 0.3 },
        ),
        (
            Shape { median: 420.0, sigma: 0.6, spike_chance: 0.03, spike_factor: 4.0 },
            Shape { median: 900.0, sigma: 0.8, spike_chance: 0.05, spike_factor: 3.0 },
            Shape { median: 39.0, sigma: 0.3, spike_chance: 0.0, spike_factor: 1.0 },
        ),
        (
            Shape { median: 35.0, sigma: 0.1, spike_chance: 0.002, spike_factor: 100.0 },
            Shape { median: 8.0, sigma: 1.0, spike_chance: 0.01, spike_factor: 50.0 },
            Shape { median: 700.0, sigma: 0.5, spike_chance: 0.02, spike_factor: 0.1 },
        ),
    ];
    let mut baselines = Baselines::new(&config());
    let mut targets = Vec::new();
    let mut raw = Vec::new();
    for (i, (ttfb, gap, tps)) in shapes.iter().enumerate() {
        let target = Target::new(
            "openrouter".into(),
            "meta-llama/llama-3-70b-instruct".into(),
            Some(format!("host-{i}").into()),
            "eu-west-1".into(),
        );
        let mut values: [Vec<f64>; 3] = Default::default();
        for minute in 0..MINUTES_PER_WEEK {
            let at = start + Duration::minutes(minute) + Duration::milliseconds(rng.random_range(0..59_000));
            let mut s = Sample::new(target.clone(), at, at);
            let b = draw(&mut rng, ttfb);
            let t = b + draw(&mut rng, gap);
            let k = draw(&mut rng, tps);
            s.ttfb_ms = Some(b);
            s.ttft_ms = Some(t);
            s.tokens_per_s = Some(k);
            if rng.random::<f64>() < 0.005 {
                // Failed probes carry odd timings; baselines must ignore them.
                s.outcome = Outcome::Timeout;
                s.ttfb_ms = Some(10_000.0);
            } else {
                values[0].push(b);
                values[1].push(t);
                values[2].push(k);
            }
            baselines.record(&s);
        }
        targets.push(target);
        raw.push(values);
    }
    let now = start + Duration::minutes(MINUTES_PER_WEEK) - Duration::seconds(1);
    Week { targets, raw, baselines, now }
}

fn assert_within_one_percent(label: &str, got: &Baseline, raw: &mut [f64]) -> f64 {
    assert_eq!(got.count, raw.len() as u64, "{label}: every ok value counted");
    let mut worst: f64 = 0.0;
    for (q, value) in [(0.5, got.p50), (0.95, got.p95), (0.99, got.p99)] {
        let want = exact(raw, q);
        let have = value.unwrap_or_else(|| panic!("{label} p{q}: published above the minimum count"));
        let err = (have - want).abs() / want;
        assert!(err <= 0.01, "{label} p{q}: rollup {have} vs exact {want} ({:.3} %)", err * 100.0);
        worst = worst.max(err);
    }
    worst
}

#[test]
fn a_week_of_rollups_matches_exact_percentiles_within_one_percent() {
    let mut week = simulate_week();
    week.baselines.refresh(week.now);
    let mut worst: f64 = 0.0;
    for (target, raw) in week.targets.iter().zip(week.raw.iter_mut()) {
        for (metric, values) in Metric::ALL.into_iter().zip(raw.iter_mut()) {
            let got = week.baselines.get(target, metric, week.now);
            worst = worst.max(assert_within_one_percent(&format!("{target} {metric}"), &got, values));
        }
    }
    println!("worst relative error over {} series: {:.4} %", week.targets.len() * 3, worst * 100.0);
}

#[test]
fn the_week_survives_persist_and_load_through_v2_bytes() {
    let mut week = simulate_week();
    let rollups = week.baselines.dirty_rollups();
    assert_eq!(rollups.len(), week.targets.len() * 5 * 168, "per target × hour: 3 histograms, probes, errors");
    assert!(rollups.iter().all(|r| r.histogram.len() < 1024), "hourly rollups stay small");

    let mut restarted = Baselines::new(&config());
    let report = restarted.load(&rollups, week.now);
    assert_eq!((report.loaded, report.skipped.len()), (rollups.len(), 0));
    restarted.refresh(week.now);
    week.baselines.refresh(week.now);
    for (target, raw) in week.targets.iter().zip(week.raw.iter_mut()) {
        for (metric, values) in Metric::ALL.into_iter().zip(raw.iter_mut()) {
            let loaded = restarted.get(target, metric, week.now);
            assert_eq!(loaded, week.baselines.get(target, metric, week.now), "{target} {metric}: same as before");
            assert_within_one_percent(&format!("{target} {metric} after load"), &loaded, values);
        }
    }
    // An hour later the first hour has left the window once its stored rollups are read back.
    let later = week.now + Duration::hours(1);
    let before = restarted.get(&week.targets[0], Metric::Ttfb, week.now).count;
    let (from, until) = restarted.expiring(later).expect("the oldest hour is due to expire");
    assert_eq!(until - from, Duration::hours(1));
    let expiring: Vec<_> = rollups.iter().filter(|r| r.hour >= from && r.hour < until).cloned().collect();
    restarted.expire(&expiring, until);
    let first_hour = before - restarted.get(&week.targets[0], Metric::Ttfb, later).count;
    assert!((50..=60).contains(&first_hour), "dropped {first_hour} values of the oldest hour");
    assert!(restarted.expiring(later).is_none(), "nothing left to expire");
}

/// Nine simulated days through a real SQLite store, persisting and expiring every hour the way
/// the daemon does: the last seven days' percentiles and counts match the raw samples exactly
/// (counts) and within 1 % (percentiles), although only two hours per series stay in memory.
#[tokio::test]
async fn a_window_sliding_over_nine_days_through_sqlite_matches_the_raw_samples() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}", dir.path().join("vigil.db").display());
    let store = vigil::io::store::open(&url).await.expect("sqlite opens");
    store.migrate().await.expect("migrations run");

    let mut rng = StdRng::seed_from_u64(9);
    let start = Utc.with_ymd_and_hms(2026, 11, 14, 0, 0, 0).single().expect("valid time");
    let shape = Shape { median: 250.0, sigma: 0.5, spike_chance: 0.02, spike_factor: 6.0 };
    let targets: Vec<Target> = (0..2)
        .map(|i| Target::new("groq".into(), "llama-3.1-8b-instant".into(), None, format!("region-{i}").into()))
        .collect();
    let mut baselines = Baselines::new(&config());
    let mut raw: Vec<(DateTime<Utc>, usize, f64, bool)> = Vec::new();
    let minutes = 9 * 24 * 60;
    for minute in 0..minutes {
        let at = start + Duration::minutes(minute) + Duration::seconds(rng.random_range(0..50));
        for (i, t) in targets.iter().enumerate() {
            let mut s = Sample::new(t.clone(), at, at);
            let v = draw(&mut rng, &shape);
            s.ttfb_ms = Some(v);
            let failed = rng.random::<f64>() < 0.01;
            if failed {
                s.outcome = Outcome::ServerError;
            }
            raw.push((at, i, v, failed));
            baselines.record(&s);
        }
        if minute % 60 == 59 {
            // What Monitor::persist and Monitor::expire do every minute, once an hour here.
            let now = at + Duration::seconds(5);
            let dirty = baselines.dirty_rollups();
            store.upsert_rollups(&dirty).await.expect("rollups stored");
            baselines.mark_persisted(&dirty);
            baselines.refresh(now);
            if let Some((from, until)) = baselines.expiring(now) {
                let rollups = store.rollups_between(None, from, Some(until)).await.expect("expiring hours read");
                baselines.expire(&rollups, until);
            }
        }
    }
    let now = start + Duration::minutes(minutes) - Duration::seconds(1);
    baselines.refresh(now);
    let window_start = baselines.window_start(now);
    assert!(baselines.late_samples() == 0, "no sample was too late");
    for (i, t) in targets.iter().enumerate() {
        let in_window: Vec<_> = raw.iter().filter(|r| r.1 == i && r.0 >= window_start).collect();
        let mut ok: Vec<f64> = in_window.iter().filter(|r| !r.3).map(|r| r.2).collect();
        let errors = in_window.iter().filter(|r| r.3).count() as i64;
        assert_eq!(
            baselines.window_counts(t),
            (in_window.len() as i64, errors),
            "{t}: probes and errors in the window"
        );
        let got = baselines.get(t, Metric::Ttfb, now);
        assert_within_one_percent(&format!("{t} ttfb after two days of expiry"), &got, &mut ok);
    }

    // A restart loads the same window from the store and agrees.
    let mut restarted = Baselines::new(&config());
    let report = vigil::io::store::load_window(store.as_ref(), &mut restarted, None, now).await.expect("window loads");
    assert!(report.skipped.is_empty(), "{:?}", report.skipped);
    restarted.refresh(now);
    for t in &targets {
        assert_eq!(restarted.get(t, Metric::Ttfb, now), baselines.get(t, Metric::Ttfb, now), "{t} after restart");
        assert_eq!(restarted.window_counts(t), baselines.window_counts(t), "{t} counts after restart");
    }
}
