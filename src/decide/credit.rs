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

/// What the credit projection says of one provider, as the router export needs it: when the
/// balance reaches zero and how far ahead that demotes it (`balance.demote_within`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CreditOutlook {
    /// When the balance reaches zero at the current burn rate (the last reading's time when it
    /// is at zero already).
    pub zero_at: DateTime<Utc>,
    /// `balance.demote_within` (`None`: `off`).
    pub demote_within: Option<std::time::Duration>,
}

/// The outlook of readings (oldest first): `None` while the balance is not projected to run out
/// (not burning, too few readings) and for an empty list.
pub fn outlook(readings: &[(DateTime<Utc>, f64)], demote_within: Option<std::time::Duration>) -> Option<CreditOutlook> {
    let &(at, last) = readings.last()?;
    if last <= 0.0 {
        return Some(CreditOutlook { zero_at: at, demote_within });
    }
    let zero_at = burn_rate(readings)?.zero_at?;
    Some(CreditOutlook { zero_at, demote_within })
}

impl CreditOutlook {
    /// The reason to demote the provider as of `now` (`credit empty in 4 h`), or `None` when the
    /// projected zero lies beyond `demote_within` or demotion is off.
    pub fn demotion(&self, now: DateTime<Utc>) -> Option<String> {
        let within = chrono::Duration::from_std(self.demote_within?).ok()?;
        let left = self.zero_at - now;
        (left <= within).then(|| format!("credit empty {}", in_words(left)))
    }
}

/// `in 40 min`, `in 4.5 h`, `in 17 h`, or `now` once past.
fn in_words(left: chrono::Duration) -> String {
    let minutes = left.num_seconds() as f64 / 60.0;
    match minutes {
        m if m < 1.0 => "now".to_string(),
        m if m < 60.0 => format!("in {} min", m.floor()),
        m if m < 600.0 => {
            let h = (m / 6.0).floor() / 10.0;
            if h.fract() == 0.0 {
                format!("in {h:.0} h")
            } else {
                format!("in {h:.1} h")
            }
        }
        m => format!("in {:.0} h", (m / 60.0).floor()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use std::time::Duration;

    fn at(minutes: i64) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).single().expect("time") + chrono::Duration::minutes(minutes)
    }

    #[test]
    fn a_projection_within_demote_within_demotes_with_hours_in_words() {
        // $2 an hour from $10: empty 5 h after the last reading.
        let readings = [(at(0), 12.0), (at(60), 10.0)];
        let o = outlook(&readings, Some(Duration::from_secs(6 * 3600))).expect("burning");
        assert_eq!(o.zero_at, at(60 + 5 * 60));
        assert_eq!(o.demotion(at(60)).as_deref(), Some("credit empty in 5 h"));
        assert_eq!(o.demotion(at(90)).as_deref(), Some("credit empty in 4.5 h"));
        assert_eq!(o.demotion(at(60 + 5 * 60 - 40)).as_deref(), Some("credit empty in 40 min"));
        assert_eq!(o.demotion(at(60 + 5 * 60 + 1)).as_deref(), Some("credit empty now"));
        let far = outlook(&readings, Some(Duration::from_secs(4 * 3600))).expect("burning");
        assert_eq!(far.demotion(at(60)), None, "5 h left is beyond 4 h");
        assert_eq!(far.demotion(at(120)).as_deref(), Some("credit empty in 4 h"));
        let off = outlook(&readings, None).expect("burning");
        assert_eq!(off.demotion(at(359)), None, "demote_within = off never demotes");
        let slow = [(at(0), 100.0), (at(60), 99.0)];
        let o = outlook(&slow, Some(Duration::from_secs(30 * 86_400))).expect("burning");
        assert_eq!(o.demotion(at(60)).as_deref(), Some("credit empty in 99 h"));
    }

    #[test]
    fn no_projection_without_a_burn_and_an_empty_balance_demotes_at_once() {
        let six = Some(Duration::from_secs(6 * 3600));
        assert_eq!(outlook(&[], six), None);
        assert_eq!(outlook(&[(at(0), 10.0)], six), None, "one reading has no rate");
        assert_eq!(outlook(&[(at(0), 10.0), (at(60), 11.0)], six), None, "a top-up is no burn");
        let empty = outlook(&[(at(0), 0.0)], six).expect("empty");
        assert_eq!(empty.demotion(at(5)).as_deref(), Some("credit empty now"));
    }
}
