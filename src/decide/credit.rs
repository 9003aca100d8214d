//! Credit projection: how fast a provider's balance is burning and when it runs out.

use chrono::{DateTime, Utc};

/// Spend speed and when the balance hits zero at that speed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BurnRate {
    /// USD spent per hour (negative when the balance grows).
    pub usd_per_hour: f64,
    /// Hours until zero at this rate (`None` when not burning).
    pub hours_to_zero: Option<f64>,
    /// The moment it reaches zero.
    pub zero_at: Option<DateTime<Utc>>,
}

/// Least-squares burn rate over readings (oldest first) since the last top-up.
///
/// A reading above its predecessor is a top-up, so only the readings after it describe the
/// current spending. Needs two readings at different times.
pub fn burn_rate(readings: &[(DateTime<Utc>, f64)]) -> Option<BurnRate> {
    let start = readings.windows(2).rposition(|w| w[1].1 > w[0].1).map(|i| i + 1).unwrap_or(0);
    let rs = readings.get(start..)?;
    let (&(t_last, last), &(t0, _)) = (rs.last()?, rs.first()?);
    if rs.len() < 2 || t_last <= t0 {
        return None;
    }
    let hours = |t: DateTime<Utc>| (t - t0).num_milliseconds() as f64 / 3_600_000.0;
    let n = rs.len() as f64;
    let mean_x = rs.iter().map(|(t, _)| hours(*t)).sum::<f64>() / n;
    let mean_y = rs.iter().map(|(_, v)| *v).sum::<f64>() / n;
    let sxx = rs.iter().map(|(t, _)| (hours(*t) - mean_x).powi(2)).sum::<f64>();
    let sxy = rs.iter().map(|(t, v)| (hours(*t) - mean_x) * (v - mean_y)).sum::<f64>();
    if sxx <= 0.0 {
        return None;
    }
    let usd_per_hour = -sxy / sxx;
    if usd_per_hour <= 0.0 {
        return Some(BurnRate { usd_per_hour, hours_to_zero: None, zero_at: None });
    }
    let hours_to_zero = (last.max(0.0)) / usd_per_hour;
    let zero_at = t_last + chrono::Duration::milliseconds((hours_to_zero * 3_600_000.0) as i64);
    Some(BurnRate { usd_per_hour, hours_to_zero: Some(hours_to_zero), zero_at: Some(zero_at) })
}
