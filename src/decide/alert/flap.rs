//! Flap detection, Nagios-style: the weighted share of state changes over the last N probes.
//! Recent changes weigh more (1.2) than old ones (0.8), so a target that just calmed down
//! leaves the flapping state sooner than one that just started changing enters it.

/// Weighted state-change rate of `states` (oldest first) over a window of `window` probes, in 0..=1.2.
///
/// The divisor is always `window - 1`: a history shorter than the window cannot look like flapping
/// just because it is short.
pub fn change_rate<I>(states: I, window: usize) -> f64
where
    I: IntoIterator<Item = bool>,
{
    let transitions = window.saturating_sub(1).max(1);
    let states: Vec<bool> = states.into_iter().collect();
    let skip = states.len().saturating_sub(window);
    let states = &states[skip..];
    let mut sum = 0.0;
    for (i, pair) in states.windows(2).enumerate() {
        if pair[0] != pair[1] {
            // The i-th transition of a full window; younger histories are aligned to the newest end.
            let pos = i + (window - states.len().min(window));
            let w = if transitions == 1 { 1.2 } else { 0.8 + 0.4 * (pos as f64) / ((transitions - 1) as f64) };
            sum += w;
        }
    }
    sum / transitions as f64
}

/// Hysteresis: enter above `high`, leave under `low`.
pub fn next_flapping(was: bool, rate: f64, high: f64, low: f64) -> bool {
    if was {
        rate >= low
    } else {
        rate > high
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steady_states_do_not_flap_and_alternating_ones_do() {
        assert_eq!(change_rate(vec![true; 20], 20), 0.0);
        let alternating: Vec<bool> = (0..20).map(|i| i % 2 == 0).collect();
        assert!((change_rate(alternating, 20) - 1.0).abs() < 1e-9);
        // One outage (fail for 5, then ok): two changes in 20 probes stay far below 0.4.
        let outage: Vec<bool> = (0..20).map(|i| (5..10).contains(&i)).collect();
        assert!(change_rate(outage, 20) < 0.15);
    }

    #[test]
    fn recent_changes_weigh_more_than_old_ones() {
        let old: Vec<bool> = (0..20).map(|i| i < 1).collect();
        let new: Vec<bool> = (0..20).map(|i| i >= 19).collect();
        assert!(change_rate(new, 20) > change_rate(old, 20));
    }

    #[test]
    fn a_short_history_is_never_flapping() {
        assert!(change_rate(vec![true, false, true], 20) < 0.2);
    }

    #[test]
    fn hysteresis_between_the_thresholds() {
        assert!(!next_flapping(false, 0.3, 0.4, 0.2));
        assert!(next_flapping(false, 0.45, 0.4, 0.2));
        assert!(next_flapping(true, 0.3, 0.4, 0.2));
        assert!(!next_flapping(true, 0.1, 0.4, 0.2));
    }
}
