//! `[breaker]`: when a target's circuit opens and for how long; bounded so a typo cannot leave a
//! breaker that never trips or never closes.

use crate::config::parse::{count_in, duration_in, DAY, SECOND};
use crate::config::ConfigError;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// `[breaker]`.
#[derive(Debug, Clone)]
pub struct BreakerConfig {
    /// Failed probes in a row that open the breaker…
    pub consecutive_failures: u32,
    /// …within this window.
    pub failure_window: Duration,
    /// Consecutive probes with TTFB above factor × P95 that open it.
    pub latency_trips: u32,
    /// Time open before a half-open probe.
    pub open_for: Duration,
}

/// `[breaker]` as written.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawBreaker {
    consecutive_failures: u32,
    failure_window: String,
    latency_trips: u32,
    open_for: String,
}

impl Default for RawBreaker {
    fn default() -> Self {
        RawBreaker { consecutive_failures: 3, failure_window: "120s".into(), latency_trips: 2, open_for: "5m".into() }
    }
}

/// `[breaker]`, validated; every error names its key.
pub(super) fn validate(raw: &RawBreaker) -> Result<BreakerConfig, ConfigError> {
    Ok(BreakerConfig {
        consecutive_failures: count_in("breaker.consecutive_failures", raw.consecutive_failures, 1, 1000)?,
        failure_window: duration_in("breaker.failure_window", &raw.failure_window, SECOND, DAY)?,
        latency_trips: count_in("breaker.latency_trips", raw.latency_trips, 1, 1000)?,
        open_for: duration_in("breaker.open_for", &raw.open_for, SECOND, DAY)?,
    })
}
