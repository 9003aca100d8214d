//! `[probe]`: how often, how long and how many probes run, plus the cost-aware adaptive
//! intervals. Everything is bounded at load because the scheduler does arithmetic on it.

use crate::config::canary::RawCanary;
use crate::config::parse::{count_in, duration_in, number_in, size_in, DAY, HOUR, SECOND};
use crate::config::{invalid, ConfigError, Env};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// `[probe]`.
#[derive(Debug, Clone)]
pub struct ProbeConfig {
    /// `probe.ca_file`: extra CA certificates every probe trusts (besides the system and built-in roots).
    pub ca_file: Option<std::path::PathBuf>,
    /// Its certificates, read at load.
    pub ca_certs: Vec<rustls::pki_types::CertificateDer<'static>>,
    /// HTTP proxy for probes (`probe.proxy`, `HTTPS_PROXY`/`HTTP_PROXY`, `NO_PROXY`).
    pub proxy: crate::config::proxy::ProxyConfig,
    /// One round every `interval`.
    pub interval: Duration,
    /// Whole-probe limit.
    pub timeout: Duration,
    /// DNS + TCP + TLS limit.
    pub connect_timeout: Duration,
    /// Request sent → first content token limit.
    pub ttft_timeout: Duration,
    /// `max_tokens` sent with each probe.
    pub max_tokens: u32,
    /// Most probes in flight at once.
    pub concurrency: usize,
    /// Probe spend guard per UTC day.
    pub daily_budget_usd: f64,
    /// Largest response body read, so a runaway stream cannot exhaust memory.
    pub max_body_bytes: usize,
}

/// The intervals of cost-aware adaptive probing (the budget is `probe.daily_budget_usd`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdaptiveConfig {
    /// `probe.max_interval`: the longest a calm target is stretched to under the daily budget.
    pub max_interval: Duration,
    /// `probe.incident_interval`: how often a target in trouble is probed (at most `probe.interval`).
    pub incident_interval: Duration,
}

/// `[probe]` as written.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawProbe {
    interval: String,
    timeout: String,
    connect_timeout: String,
    ttft_timeout: String,
    max_tokens: u32,
    concurrency: usize,
    daily_budget_usd: f64,
    max_body_kb: usize,
    proxy: Option<String>,
    ca_file: Option<String>,
    /// Read by `[status_pages]`'s validation.
    pub(super) status_page_every: String,
    max_interval: String,
    incident_interval: String,
    /// `[probe.canary]`, validated on its own.
    pub(super) canary: RawCanary,
    /// `[probe.capabilities]`, validated on its own.
    pub(super) capabilities: crate::config::capabilities::RawCapabilities,
    /// `[[probe.workload]]`, validated once the providers are known.
    #[serde(skip_serializing)]
    pub(super) workload: Vec<crate::config::workloads::RawWorkload>,
}

impl Default for RawProbe {
    fn default() -> Self {
        RawProbe {
            interval: "60s".into(),
            timeout: "10s".into(),
            connect_timeout: "3s".into(),
            ttft_timeout: "8s".into(),
            max_tokens: 16,
            concurrency: 256,
            daily_budget_usd: 5.0,
            max_body_kb: 1024,
            proxy: None,
            ca_file: None,
            status_page_every: "3m".into(),
            max_interval: "5m".into(),
            // Empty: the base interval.
            incident_interval: String::new(),
            canary: RawCanary::default(),
            capabilities: Default::default(),
            workload: Vec::new(),
        }
    }
}

/// `[probe]` and its adaptive intervals, validated; a timeout longer than the interval is refused
/// so a target is never probed twice at once.
pub(super) fn validate(p: &RawProbe, env: &dyn Env) -> Result<(ProbeConfig, AdaptiveConfig), ConfigError> {
    let ms = Duration::from_millis;
    let ca_file = p.ca_file.as_deref().map(std::path::PathBuf::from);
    let ca_certs = match &ca_file {
        Some(path) => crate::config::tls::load_certs(path).map_err(|e| invalid("probe.ca_file", e))?,
        None => Vec::new(),
    };
    let probe = ProbeConfig {
        ca_file,
        ca_certs,
        proxy: crate::config::proxy::from_env(p.proxy.as_deref(), env)?,
        interval: duration_in("probe.interval", &p.interval, SECOND, DAY)?,
        timeout: duration_in("probe.timeout", &p.timeout, ms(10), HOUR)?,
        connect_timeout: duration_in("probe.connect_timeout", &p.connect_timeout, ms(10), HOUR)?,
        ttft_timeout: duration_in("probe.ttft_timeout", &p.ttft_timeout, ms(10), HOUR)?,
        max_tokens: count_in("probe.max_tokens", p.max_tokens, 1, 100_000)?,
        concurrency: size_in("probe.concurrency", p.concurrency, 1, 4096)?,
        daily_budget_usd: number_in("probe.daily_budget_usd", p.daily_budget_usd, 0.0, 1_000_000.0, true)?,
        // 1 GiB at most: the byte count then fits every usize vigil runs on.
        max_body_bytes: size_in("probe.max_body_kb", p.max_body_kb, 1, 1 << 20)? * 1024,
    };
    let adaptive = adaptive_intervals(p, &probe)?;
    if probe.timeout > probe.interval {
        return Err(invalid(
            "probe.timeout",
            "must not exceed probe.interval (a target is never probed twice at once)",
        ));
    }
    Ok((probe, adaptive))
}

/// `probe.max_interval` (from `interval` up to a day) and `probe.incident_interval` (from
/// `probe.timeout` up to `interval`, empty = `interval`), so a target is never probed twice at once.
fn adaptive_intervals(p: &RawProbe, probe: &ProbeConfig) -> Result<AdaptiveConfig, ConfigError> {
    let max = duration_in("probe.max_interval", &p.max_interval, probe.interval.max(SECOND), DAY.max(probe.interval))?;
    let fast = if p.incident_interval.trim().is_empty() {
        probe.interval
    } else {
        duration_in("probe.incident_interval", &p.incident_interval, probe.timeout, probe.interval)?
    };
    Ok(AdaptiveConfig { max_interval: max, incident_interval: fast })
}

#[cfg(test)]
mod tests {
    use crate::config::test_util::{env, err_at};
    use crate::config::Config;
    use std::time::Duration;

    #[test]
    fn adaptive_intervals_default_to_five_minutes_and_the_base_interval_and_are_bounded() {
        let c = Config::from_toml("", &env(&[("OPENAI_API_KEY", "sk-test-1")])).expect("valid");
        assert_eq!(c.adaptive.max_interval, Duration::from_secs(300));
        assert_eq!(c.adaptive.incident_interval, c.probe.interval, "no faster probing unless asked");
        let c = Config::from_toml(
            "[probe]\ninterval = \"30s\"\nmax_interval = \"2m\"\nincident_interval = \"10s\"\n\
             [[provider]]\nname = \"openai\"\nstatus_page_components = [\"Chat Completions\"]\n",
            &env(&[("OPENAI_API_KEY", "sk-test-1")]),
        )
        .expect("valid");
        assert_eq!(
            (c.adaptive.max_interval, c.adaptive.incident_interval),
            (Duration::from_secs(120), Duration::from_secs(10))
        );
        assert_eq!(c.status_pages.pages[0].components, Some(vec!["Chat Completions".to_string()]));
        err_at("[probe]\ninterval = \"60s\"\nmax_interval = \"30s\"", &[], "probe.max_interval");
        err_at("[probe]\nmax_interval = \"2d\"", &[], "probe.max_interval");
        err_at("[probe]\nincident_interval = \"2m\"", &[], "probe.incident_interval");
        err_at("[probe]\ntimeout = \"10s\"\nincident_interval = \"5s\"", &[], "probe.incident_interval");
    }
}
