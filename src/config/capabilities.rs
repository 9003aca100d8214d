//! `[probe.capabilities]`: capability probes (docs/CHECKS.md#capability-probes), off by
//! default, on their own interval: does each chat target still call a declared function, answer
//! in JSON mode, follow a JSON Schema?

use crate::config::parse::{duration_in, DAY};
use crate::config::ConfigError;
use crate::vocab::capability::Capability;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// `[probe.capabilities]`, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct CapabilitiesConfig {
    /// Off unless `enabled = true`.
    pub enabled: bool,
    /// One run of each capability per target every `every`.
    pub every: Duration,
    /// The capabilities asked (`checks`), each once.
    pub checks: Vec<Capability>,
}

impl Default for CapabilitiesConfig {
    fn default() -> Self {
        CapabilitiesConfig { enabled: false, every: Duration::from_secs(3600), checks: Capability::ALL.to_vec() }
    }
}

/// `[probe.capabilities]` as written.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawCapabilities {
    enabled: bool,
    every: String,
    checks: Vec<String>,
}

impl Default for RawCapabilities {
    fn default() -> Self {
        RawCapabilities {
            enabled: false,
            every: "1h".into(),
            checks: Capability::ALL.iter().map(|c| c.as_str().to_string()).collect(),
        }
    }
}

/// A list of capability names (`probe.capabilities.checks`, `[[chain]] requires`), each known
/// and named once; the error names `key`.
pub(super) fn names(key: &str, raw: &[String]) -> Result<Vec<Capability>, ConfigError> {
    let mut out: Vec<Capability> = Vec::new();
    for name in raw {
        let known: Vec<&str> = Capability::ALL.iter().map(|c| c.as_str()).collect();
        let c = Capability::parse(name.trim())
            .ok_or_else(|| super::invalid(key, format!("unknown capability {name:?} (known: {})", known.join(", "))))?;
        if out.contains(&c) {
            return Err(super::invalid(key, format!("{name:?} is named twice")));
        }
        out.push(c);
    }
    Ok(out)
}

/// `[probe.capabilities]` validated.
pub(super) fn validate(raw: &RawCapabilities) -> Result<CapabilitiesConfig, ConfigError> {
    let every = duration_in("probe.capabilities.every", &raw.every, Duration::from_secs(10), 7 * DAY)?;
    let checks = names("probe.capabilities.checks", &raw.checks)?;
    if raw.enabled && checks.is_empty() {
        return Err(super::invalid(
            "probe.capabilities.checks",
            "empty: name at least one of tools, json, json_schema",
        ));
    }
    Ok(CapabilitiesConfig { enabled: raw.enabled, every, checks })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_of(e: ConfigError) -> String {
        match e {
            ConfigError::Invalid { key, .. } => key,
            other => other.to_string(),
        }
    }

    #[test]
    fn defaults_and_errors_name_the_key() {
        let d = validate(&RawCapabilities::default()).expect("defaults");
        assert_eq!(d, CapabilitiesConfig::default());
        let bad = |raw: RawCapabilities| key_of(validate(&raw).expect_err("refused"));
        let with = |checks: &[&str]| RawCapabilities {
            enabled: true,
            checks: checks.iter().map(|c| c.to_string()).collect(),
            ..RawCapabilities::default()
        };
        assert_eq!(bad(with(&["tools", "vision"])), "probe.capabilities.checks");
        assert_eq!(bad(with(&["json", "json"])), "probe.capabilities.checks");
        assert_eq!(bad(with(&[])), "probe.capabilities.checks");
        assert_eq!(
            bad(RawCapabilities { every: "1s".into(), ..RawCapabilities::default() }),
            "probe.capabilities.every"
        );
        assert_eq!(validate(&with(&["json"])).expect("ok").checks, vec![Capability::Json]);
    }
}
