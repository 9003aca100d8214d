//! Time for `vigil alerts backtest` to replay a week of 100 targets at 60 s (1,008,000 samples)
//! through the daemon's rule engine and baselines, in memory (storage reads not included).
//!
//! Run with `cargo bench --bench backtest`; it prints samples, incidents and seconds.

use chrono::{DateTime, Duration, Utc};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::time::Instant;
use vigil::config::BaselineConfig;
use vigil::decide::alert::backtest::replay;
use vigil::decide::alert::settings::RuleConfig;
use vigil::vocab::sample::{Outcome, Sample};
use vigil::vocab::target::Target;

fn week(targets: usize, end: DateTime<Utc>) -> Vec<Sample> {
    let mut rng = StdRng::seed_from_u64(3);
    let minutes = 7 * 24 * 60;
    let start = end - Duration::minutes(minutes);
    let mut out = Vec::with_capacity(targets * minutes as usize);
    let ts: Vec<Target> = (0..targets)
        .map(|i| Target::new(format!("p{}", i / 4).into(), format!("m{}", i % 4).into(), None, "eu".into()))
        .collect();
    for m in 0..minutes {
        for (i, t) in ts.iter().enumerate() {
            let at = start + Duration::minutes(m) + Duration::milliseconds(i as i64 * 10);
            let mut s = Sample::new(t.clone(), at, at);
            // One in 500 probes fails, in short bursts, so incidents open and close all week.
            if (m + i as i64 * 37) % 500 < 3 {
                s.outcome = Outcome::ServerError;
            } else {
                s.outcome = Outcome::Ok;
                let v: f64 =
                    if rng.random_bool(0.02) { rng.random_range(300.0..500.0) } else { rng.random_range(90.0..120.0) };
                s.ttfb_ms = Some(v * 0.6);
                s.ttft_ms = Some(v);
            }
            out.push(s);
        }
    }
    out
}

fn main() {
    let end = Utc::now();
    let samples = week(100, end);
    let baseline = BaselineConfig {
        window: std::time::Duration::from_secs(7 * 86400),
        failover_factor: 2.0,
        min_samples_p50: 100,
        min_samples_p95: 300,
        min_samples_p99: 1000,
        adopt_after: None,
    };
    let started = Instant::now();
    let report = replay(
        RuleConfig::with_defaults("eu"),
        &baseline,
        std::time::Duration::from_secs(60),
        &[],
        &samples,
        &[],
        None,
    );
    let secs = started.elapsed().as_secs_f64();
    println!(
        "backtest replay: {} samples, {} rounds, {} incidents ({} messages) in {:.2} s ({:.0} samples/s)",
        report.samples,
        report.rounds,
        report.pages,
        report.notifications,
        secs,
        report.samples as f64 / secs
    );
}
