//! `[ratelimit]`: when a provider's rate-limit headroom counts as low (`ratelimit_low`, the
//! status page's and the router export's `low` mark).

use crate::config::parse::number_in;
use crate::config::ConfigError;
use serde::{Deserialize, Serialize};

/// `[ratelimit]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimitConfig {
    /// Headroom (remaining / limit of the tighter of the request and token allowances) under
    /// which a target's rate limit is low; 0 turns the judgement (and `ratelimit_low`) off.
    pub low_fraction: f64,
}

/// `[ratelimit]` as written.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawRateLimit {
    low_fraction: f64,
}

impl Default for RawRateLimit {
    fn default() -> Self {
        RawRateLimit { low_fraction: crate::vocab::ratelimit::DEFAULT_LOW_FRACTION }
    }
}

/// `[ratelimit]`, validated: `low_fraction` from 0 (off) up to, not including, 1 (always low).
pub(super) fn validate(raw: &RawRateLimit) -> Result<RateLimitConfig, ConfigError> {
    let low_fraction = number_in("ratelimit.low_fraction", raw.low_fraction, 0.0, 1.0, false)?;
    if low_fraction >= 1.0 {
        return Err(crate::config::invalid(
            "ratelimit.low_fraction",
            "must be under 1 (at 1 every target with a limit would always be low)",
        ));
    }
    Ok(RateLimitConfig { low_fraction })
}

#[cfg(test)]
mod tests {
    use crate::config::test_util::{env, err_at};
    use crate::config::Config;

    #[test]
    fn low_fraction_defaults_to_a_tenth_is_set_by_file_or_env_and_kept_within_0_to_1() {
        let keys = env(&[("OPENAI_API_KEY", "sk-test-1")]);
        assert_eq!(Config::from_toml("", &keys).expect("valid").ratelimit.low_fraction, 0.1);
        let c = Config::from_toml("[ratelimit]\nlow_fraction = 0.25\n", &keys).expect("valid");
        assert_eq!(c.ratelimit.low_fraction, 0.25);
        assert!(c.redacted_toml().contains("low_fraction = 0.25"), "{}", c.redacted_toml());
        assert_eq!(
            Config::from_toml("[ratelimit]\nlow_fraction = 0\n", &keys).expect("off").ratelimit.low_fraction,
            0.0
        );
        let mut with_env = keys.clone();
        with_env.insert("VIGIL_RATELIMIT_LOW_FRACTION".into(), "0.05".into());
        assert_eq!(Config::from_toml("", &with_env).expect("valid").ratelimit.low_fraction, 0.05);
        for bad in ["1", "1.5", "-0.1", "nan"] {
            let text = format!("[ratelimit]\nlow_fraction = {bad}\n");
            err_at(&text, &[("OPENAI_API_KEY", "sk-test-1")], "ratelimit.low_fraction");
        }
        err_at("[ratelimit]\nlow = 0.1\n", &[], "ratelimit.low");
    }
}
