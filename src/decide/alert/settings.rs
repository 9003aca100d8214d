//! The alert engine's settings, gathered from the config sections they come from (alerts,
//! breaker, probe, deprecation, canary, ratelimit) so the engine never reads the whole config.

use crate::config::Config;
use crate::config::MaintenanceWindow;
use std::time::Duration;

/// Rule thresholds, taken from the validated config.
#[derive(Debug, Clone)]
pub struct RuleConfig {
    /// Region label of this instance.
    pub region: String,
    /// A probe is slow when its TTFB or TTFT is above this × the target's baseline P95.
    pub latency_factor: f64,
    /// latency_degraded needs this many slow probes…
    pub latency_k: usize,
    /// …among the last this many ok probes.
    pub latency_n: usize,
    /// Judged replies in a row for `adherence_failed`.
    pub error_probes: u32,
    /// `errors` holds when `error_k` of the last `error_n` probes failed…
    pub error_k: u32,
    /// …(see `error_k`)…
    pub error_n: u32,
    /// …and, when k = n (in a row), all within this span (`breaker.failure_window`, 120 s by default).
    pub error_window: Duration,
    /// Evaluations a facet must stay clear before it leaves its incident.
    pub resolve_after: u32,
    /// Re-send a firing incident no more often than this.
    pub renotify: Duration,
    /// Daily probe spend guard.
    pub daily_budget_usd: f64,
    /// region_unhealthy: at least this share of the round's targets failed with network-ish outcomes…
    pub unhealthy_fraction: f64,
    /// …out of at least this many targets…
    pub unhealthy_min_targets: usize,
    /// …in this many rounds in a row.
    pub unhealthy_rounds: u32,
    /// Probes the flap detector looks at.
    pub flap_window: usize,
    /// Weighted change rate above which a target starts flapping.
    pub flap_high: f64,
    /// …and under which it stops.
    pub flap_low: f64,
    /// Per-provider windows during which notifications are held back.
    pub maintenance: Vec<MaintenanceWindow>,
    /// Link put in messages.
    pub status_url: Option<String>,
    /// `model_deprecated` fires this many days before an announced retirement.
    pub deprecation_warn_days: u32,
    /// The `model_changed` statistic's windows and thresholds (`[probe.canary]`).
    pub canary: crate::config::DetectorConfig,
    /// `alerts.chain_head_changed`: notice when a chain's head moves (off by default).
    pub chain_head_changed: bool,
    /// `ratelimit.low_fraction`: `ratelimit_low` holds under this headroom (0: off).
    pub ratelimit_low_fraction: f64,
}

impl RuleConfig {
    /// The settings an empty config gives in `region` (the documented defaults, taken from the
    /// config's own), for tests and benches.
    #[cfg(any(test, feature = "test-support"))]
    pub fn with_defaults(region: &str) -> Self {
        let toml = format!("region = {}", toml::Value::String(region.to_string()));
        let env = std::collections::BTreeMap::<String, String>::new();
        match Config::from_toml(&toml, &env) {
            Ok(config) => Self::from_config(&config),
            Err(e) => panic!("the built-in defaults do not validate: {e}"),
        }
    }

    /// Rule thresholds from the config.
    pub fn from_config(c: &Config) -> Self {
        RuleConfig {
            region: c.region.clone(),
            latency_factor: c.alerts.latency_factor,
            latency_k: c.alerts.latency_k.max(1),
            latency_n: c.alerts.latency_n.max(c.alerts.latency_k).max(1),
            error_probes: c.alerts.error_probes.max(1),
            error_k: c.alerts.error_k.max(1),
            error_n: c.alerts.error_n.max(c.alerts.error_k).max(1),
            error_window: c.breaker.failure_window,
            resolve_after: c.alerts.resolve_after.max(1),
            renotify: c.alerts.renotify,
            daily_budget_usd: c.probe.daily_budget_usd,
            unhealthy_fraction: 0.6,
            unhealthy_min_targets: 3,
            unhealthy_rounds: 2,
            flap_window: c.alerts.flap_window.max(2),
            flap_high: c.alerts.flap_high,
            flap_low: c.alerts.flap_low,
            maintenance: c.alerts.maintenance.clone(),
            status_url: c.alerts.status_url.clone(),
            deprecation_warn_days: c.deprecation.warn_days,
            canary: c.canary.detector(),
            chain_head_changed: c.chain_head.enabled,
            ratelimit_low_fraction: c.ratelimit.low_fraction,
        }
    }
}
