//! The demo's misbehaving host: a schedule of trouble by time since the demo started, so
//! latency and breaker alerts fire in the first two minutes, an errors alert at minute 8, the
//! first incident resolves 12–17 minutes in, and the host stops calling functions from minute
//! 25 to 35 (a `capability_lost` page, README), and it all keeps recurring.

use std::time::Duration;

/// Model of the misbehaving host.
pub const MODEL: &str = super::profiles::MIXTRAL;
/// Route of the misbehaving host (OpenRouter `provider.order`).
pub const ROUTE: &str = "Anyscale";
/// Degradations recur this often…
pub const DEGRADE_EVERY: Duration = Duration::from_secs(20 * 60);
/// …starting this far into each period…
pub const DEGRADE_FROM: Duration = Duration::from_secs(60);
/// …and lasting this long (long enough for the latency rule's 5 recent probes at 60 s).
pub const DEGRADE_FOR: Duration = Duration::from_secs(6 * 60);
/// How much slower the host answers while degraded (well over `failover_factor` × P95).
pub const DEGRADE_FACTOR: f64 = 5.0;
/// Failures recur this often…
pub const FAIL_EVERY: Duration = Duration::from_secs(60 * 60);
/// …starting this far into each hour (after the first degradation)…
pub const FAIL_FROM: Duration = Duration::from_secs(8 * 60);
/// …and lasting this long (three probes at 60 s: the errors alert and the breaker both trip).
pub const FAIL_FOR: Duration = Duration::from_secs(3 * 60 + 30);

/// The host answers function-calling requests in text this often…
pub const DROP_TOOLS_EVERY: Duration = Duration::from_secs(60 * 60);
/// …starting this far into each hour (after the first errors incident has resolved)…
pub const DROP_TOOLS_FROM: Duration = Duration::from_secs(25 * 60);
/// …and lasting this long (several of the demo's two-minute capability runs).
pub const DROP_TOOLS_FOR: Duration = Duration::from_secs(10 * 60);

/// Whether the misbehaving host answers a request declaring a function in text instead of
/// calling it, `elapsed` after the demo started.
pub fn drops_tools(elapsed: Duration) -> bool {
    within(elapsed, DROP_TOOLS_EVERY, DROP_TOOLS_FROM, DROP_TOOLS_FOR)
}

/// What the misbehaving host does at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trouble {
    /// Answers as its profile says.
    None,
    /// Answers [`DEGRADE_FACTOR`] times slower.
    Degraded,
    /// Answers 503 (overloaded).
    Failing,
}

fn within(elapsed: Duration, every: Duration, from: Duration, for_: Duration) -> bool {
    let into = Duration::from_nanos((elapsed.as_nanos() % every.as_nanos().max(1)) as u64);
    into >= from && into < from + for_
}

/// The trouble `elapsed` after the demo started; failing wins over degraded.
pub fn at(elapsed: Duration) -> Trouble {
    if within(elapsed, FAIL_EVERY, FAIL_FROM, FAIL_FOR) {
        Trouble::Failing
    } else if within(elapsed, DEGRADE_EVERY, DEGRADE_FROM, DEGRADE_FOR) {
        Trouble::Degraded
    } else {
        Trouble::None
    }
}

/// Whether `(model, route)` is the misbehaving host.
pub fn is_troubled(model: &str, route: &str) -> bool {
    model == MODEL && route.eq_ignore_ascii_case(ROUTE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn minute(m: u64) -> Duration {
        Duration::from_secs(m * 60)
    }

    #[test]
    fn degrades_in_the_first_minutes_then_every_twenty_and_fails_briefly_every_hour() {
        assert_eq!(at(minute(0)), Trouble::None);
        assert_eq!(at(minute(2)), Trouble::Degraded);
        assert_eq!(at(minute(6)), Trouble::Degraded);
        assert_eq!(at(minute(7)), Trouble::None);
        assert_eq!(at(minute(8)), Trouble::Failing);
        assert_eq!(at(minute(11)), Trouble::Failing);
        assert_eq!(at(minute(12)), Trouble::None);
        assert_eq!(at(minute(22)), Trouble::Degraded);
        assert_eq!(at(minute(42)), Trouble::Degraded);
        assert_eq!(at(minute(68)), Trouble::Failing);
        let failing = (0..60 * 60).filter(|s| at(Duration::from_secs(*s)) == Trouble::Failing).count();
        assert_eq!(failing, 210, "three and a half minutes an hour");
        assert!(is_troubled(MODEL, "anyscale") && !is_troubled(MODEL, "Together"));
    }

    #[test]
    fn stops_calling_functions_from_minute_twenty_five_to_thirty_five_each_hour() {
        assert!(!drops_tools(minute(0)) && !drops_tools(minute(24)));
        assert!(drops_tools(minute(25)) && drops_tools(minute(34)));
        assert!(!drops_tools(minute(35)) && drops_tools(minute(85)));
        // Never while the host fails outright, so the loss is its own incident.
        assert!(
            (0..3600).all(|s| !(drops_tools(Duration::from_secs(s)) && at(Duration::from_secs(s)) == Trouble::Failing))
        );
    }
}
