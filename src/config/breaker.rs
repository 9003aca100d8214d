//! `[breaker]`: when a target's circuit opens and for how long; bounded so a typo cannot leave a
//! breaker that never trips or never closes. Also how a rate limit (429) is treated: a short
//! backoff that demotes the target, and a count of 429s in a row before they trip the breaker.

use crate::config::parse::k_of_n;
use crate::config::parse::{count_in, duration_in, DAY, HOUR, SECOND};
use crate::config::ConfigError;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// `[breaker]`.
#[derive(Debug, Clone)]
pub struct BreakerConfig {
    /// Failed probes in a row that open the breaker (the shorthand for `failure_k` = `failure_n`)…
    pub consecutive_failures: u32,
    /// …within this window (in-a-row counting only).
    pub failure_window: Duration,
    /// The breaker opens when `failure_k` of the last `failure_n` judged probes failed; k = n is
    /// `consecutive_failures`.
    pub failure_k: u32,
    /// See `failure_k`.
    pub failure_n: u32,
    /// Consecutive probes with TTFB above factor × P95 that open it.
    pub latency_trips: u32,
    /// Time open before a half-open probe.
    pub open_for: Duration,
    /// A 429 demotes its target for this long, or for the `Retry-After` it carried when longer.
    pub rate_limit_backoff: Duration,
    /// 429s in a row that are excused before they count as failures (once the backoff is over).
    pub rate_limit_trips: u32,
}

/// `[breaker]` as written.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawBreaker {
    consecutive_failures: u32,
    failure_window: String,
    /// 0: not set (then `consecutive_failures` decides).
    failure_k: u32,
    /// 0: not set.
    failure_n: u32,
    latency_trips: u32,
    open_for: String,
    rate_limit_backoff: String,
    rate_limit_trips: u32,
    /// Whether the file (or its variable) set `consecutive_failures`: beside `failure_k` and
    /// `failure_n` that is an error, its default is not.
    #[serde(skip)]
    pub(super) consecutive_failures_given: bool,
}

impl Default for RawBreaker {
    fn default() -> Self {
        RawBreaker {
            consecutive_failures: 3,
            failure_window: "120s".into(),
            failure_k: 0,
            failure_n: 0,
            latency_trips: 2,
            open_for: "5m".into(),
            rate_limit_backoff: "2m".into(),
            rate_limit_trips: 3,
            consecutive_failures_given: false,
        }
    }
}

/// `[breaker]`, validated; every error names its key.
pub(super) fn validate(raw: &RawBreaker) -> Result<BreakerConfig, ConfigError> {
    let (failure_k, failure_n) = k_of_n(
        ("breaker.consecutive_failures", raw.consecutive_failures, raw.consecutive_failures_given),
        ("breaker.failure_k", raw.failure_k),
        ("breaker.failure_n", raw.failure_n),
    )?;
    Ok(BreakerConfig {
        consecutive_failures: failure_k,
        failure_window: duration_in("breaker.failure_window", &raw.failure_window, SECOND, DAY)?,
        failure_k,
        failure_n,
        latency_trips: count_in("breaker.latency_trips", raw.latency_trips, 1, 1000)?,
        open_for: duration_in("breaker.open_for", &raw.open_for, SECOND, DAY)?,
        rate_limit_backoff: duration_in("breaker.rate_limit_backoff", &raw.rate_limit_backoff, SECOND, HOUR)?,
        rate_limit_trips: count_in("breaker.rate_limit_trips", raw.rate_limit_trips, 1, 1000)?,
    })
}

#[cfg(test)]
mod tests {
    use crate::config::test_util::{env, err_at};
    use crate::config::Config;
    use std::time::Duration;

    #[test]
    fn consecutive_failures_is_k_of_n_with_k_equal_to_n_and_the_pair_is_checked() {
        let c = Config::from_toml("", &env(&[])).expect("defaults");
        let b = &c.breaker;
        assert_eq!((b.consecutive_failures, b.failure_k, b.failure_n), (3, 3, 3));
        assert_eq!((b.rate_limit_backoff, b.rate_limit_trips), (Duration::from_secs(120), 3));
        let c = Config::from_toml("[breaker]\nfailure_k = 3\nfailure_n = 6", &env(&[])).expect("valid");
        assert_eq!((c.breaker.failure_k, c.breaker.failure_n, c.breaker.consecutive_failures), (3, 6, 3));
        let c = Config::from_toml("[breaker]\nconsecutive_failures = 4", &env(&[])).expect("valid");
        assert_eq!((c.breaker.failure_k, c.breaker.failure_n), (4, 4));
        let both = "[breaker]\nconsecutive_failures = 3\nfailure_k = 3\nfailure_n = 6";
        let e = err_at(both, &[], "breaker.failure_k");
        assert!(e.contains("not both"), "{e}");
        err_at("[breaker]\nfailure_k = 3", &[], "breaker.failure_n");
        err_at("[breaker]\nfailure_n = 6", &[], "breaker.failure_k");
        let one = err_at("[breaker]\nfailure_k = 1\nfailure_n = 6", &[], "breaker.failure_k");
        assert!(one.contains("a single failure"), "{one}");
        err_at("[breaker]\nfailure_k = 4\nfailure_n = 3", &[], "breaker.failure_n");
        err_at("[breaker]\nfailure_k = 4\nfailure_n = 101", &[], "breaker.failure_n");
        // The variable counts as setting it.
        err_at(
            "[breaker]\nfailure_k = 3\nfailure_n = 6",
            &[("VIGIL_BREAKER_CONSECUTIVE_FAILURES", "3")],
            "breaker.failure_k",
        );
        let c = Config::from_toml("", &env(&[("VIGIL_BREAKER_FAILURE_K", "2"), ("VIGIL_BREAKER_FAILURE_N", "5")]))
            .expect("variables");
        assert_eq!((c.breaker.failure_k, c.breaker.failure_n), (2, 5));
    }

    #[test]
    fn the_rate_limit_backoff_and_trips_are_bounded() {
        let c = Config::from_toml("[breaker]\nrate_limit_backoff = \"30s\"\nrate_limit_trips = 1", &env(&[]))
            .expect("valid");
        assert_eq!((c.breaker.rate_limit_backoff, c.breaker.rate_limit_trips), (Duration::from_secs(30), 1));
        for bad in ["\"0s\"", "\"2h\"", "\"soon\""] {
            err_at(&format!("[breaker]\nrate_limit_backoff = {bad}"), &[], "breaker.rate_limit_backoff");
        }
        for bad in ["0", "1001"] {
            err_at(&format!("[breaker]\nrate_limit_trips = {bad}"), &[], "breaker.rate_limit_trips");
        }
    }
}
