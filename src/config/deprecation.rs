//! `[deprecation]`: how early retirement warnings fire and how often the providers' models
//! lists are read, since those reads cost requests against every provider's API.

use crate::config::parse::{count_in, duration_in, DAY, SECOND};
use crate::config::ConfigError;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// `[deprecation]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeprecationConfig {
    /// Warn this many days before an announced retirement date (`model_deprecated`).
    pub warn_days: u32,
    /// How often the providers' models lists are read (`deprecation.models_every`); `None` = off.
    pub models_every: Option<Duration>,
}

/// `[deprecation]` as written.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawDeprecation {
    warn_days: u32,
    models_every: String,
}

impl Default for RawDeprecation {
    fn default() -> Self {
        RawDeprecation { warn_days: crate::vocab::notice::DEFAULT_WARN_DAYS, models_every: "6h".into() }
    }
}

/// `[deprecation]`, validated; `models_every = "off"` turns the reads off.
pub(super) fn validate(raw: &RawDeprecation) -> Result<DeprecationConfig, ConfigError> {
    let models_every = match raw.models_every.trim() {
        "off" => None,
        every => Some(duration_in("deprecation.models_every", every, SECOND, 7 * DAY)?),
    };
    Ok(DeprecationConfig { warn_days: count_in("deprecation.warn_days", raw.warn_days, 0, 3650)?, models_every })
}

#[cfg(test)]
mod tests {
    use crate::config::test_util::env;
    use crate::config::Config;
    use std::time::Duration;

    #[test]
    fn models_lists_are_read_every_6h_by_default_within_bounds_or_off() {
        let keys = env(&[("OPENAI_API_KEY", "sk-test-1")]);
        let c = Config::from_toml("", &keys).expect("valid");
        assert_eq!(c.deprecation.models_every, Some(Duration::from_secs(6 * 3600)));
        let c = Config::from_toml("[deprecation]\nmodels_every = \"off\"\n", &keys).expect("valid");
        assert_eq!(c.deprecation.models_every, None);
        assert!(c.redacted_toml().contains("models_every = \"off\""), "{}", c.redacted_toml());
        let mut with_env = keys.clone();
        with_env.insert("VIGIL_DEPRECATION_MODELS_EVERY".into(), "30m".into());
        let c = Config::from_toml("", &with_env).expect("valid");
        assert_eq!(c.deprecation.models_every, Some(Duration::from_secs(1800)));
        for bad in ["8d", "10ms", "often"] {
            let e = Config::from_toml(&format!("[deprecation]\nmodels_every = \"{bad}\"\n"), &keys).expect_err(bad);
            assert!(e.to_string().contains("deprecation.models_every"), "{bad}: {e}");
        }
    }
}
