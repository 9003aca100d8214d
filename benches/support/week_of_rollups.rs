//! A week of stored hourly rollups as the daemon writes them (three histograms and the probe and
//! error counts per target and hour, 60 log-normal values with spikes per hour): the baselines
//! bench loads them, the daemon bench starts on them.

use chrono::{DateTime, Utc};
use hdrhistogram::serialization::{Serializer, V2Serializer};
use hdrhistogram::Histogram;
use rand::rngs::StdRng;
use rand::RngExt;
use vigil::decide::baseline::{Metric, ERRORS, HIGHEST, LOWEST, PROBES, SIGFIG};
use vigil::vocab::records::Rollup;
use vigil::vocab::target::Target;

/// Probes per target and hour (one a minute).
pub const PER_HOUR: usize = 60;
/// Distinct hours drawn: targets and hours pick from these.
pub const POOL: usize = 256;

/// A standard normal draw (Box–Muller).
pub fn normal(rng: &mut StdRng) -> f64 {
    let u1: f64 = 1.0 - rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * rng.random::<f64>()).cos()
}

/// [`POOL`] V2-serialized hours per metric (TTFB ms, TTFT ms, tokens/s): [`PER_HOUR`] values
/// around each `(median, sigma)` of `shapes`, one in a hundred five times the median.
pub fn rollup_pool(rng: &mut StdRng, shapes: [(f64, f64); 3]) -> Vec<[Vec<u8>; 3]> {
    let mut h = Histogram::<u64>::new_with_bounds(LOWEST, HIGHEST, SIGFIG).expect("histogram bounds are valid");
    (0..POOL)
        .map(|_| {
            shapes.map(|(median, sigma)| {
                h.reset();
                for _ in 0..PER_HOUR {
                    let spike = if rng.random::<f64>() < 0.01 { 5.0 } else { 1.0 };
                    let v = median * spike * (sigma * normal(rng)).exp();
                    h.saturating_record((v * 1000.0).round() as u64);
                }
                let mut bytes = Vec::new();
                V2Serializer::new().serialize(&h, &mut bytes).expect("serializing to a Vec cannot fail");
                bytes
            })
        })
        .collect()
}

fn rollup(t: &Target, metric: &str, hour: DateTime<Utc>, count: i64, histogram: Vec<u8>) -> Rollup {
    Rollup { target: t.clone(), metric: metric.into(), hour, count, histogram }
}

/// One target's stored hour: three histograms plus probe and error counts.
pub fn hour_rollups(t: &Target, hour: DateTime<Utc>, pick: &[Vec<u8>; 3], out: &mut Vec<Rollup>) {
    for m in Metric::ALL {
        out.push(rollup(t, m.as_str(), hour, PER_HOUR as i64, pick[m as usize].clone()));
    }
    out.push(rollup(t, PROBES, hour, PER_HOUR as i64, Vec::new()));
    out.push(rollup(t, ERRORS, hour, 0, Vec::new()));
}
