//! What a failover costs: `[[chain]] tokens_per_day` (the traffic a chain carries, so the weekly
//! summary can say what each head's time implied in spend) and the `chain_head_changed` notice
//! (`alerts.chain_head_changed`, off by default, sent only to `alerts.chain_head_channels`, else
//! to `alerts.notice_channels`: a notice, never a page).

use crate::config::parse::count_in;
use crate::config::{invalid, AlertsConfig, ConfigError};
use serde::{Deserialize, Serialize};

/// Most tokens a day a chain may declare (a trillion): keeps every product finite.
const MAX_TOKENS_PER_DAY: u64 = 1_000_000_000_000;

/// `tokens_per_day = { input = 40_000_000, output = 8_000_000 }`: the traffic a chain carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokensPerDay {
    /// Input (prompt) tokens a day.
    #[serde(default)]
    pub input: u64,
    /// Output (completion) tokens a day.
    #[serde(default)]
    pub output: u64,
}

/// `chain[i].tokens_per_day`, checked: each count a whole number from 0 to a trillion, not both 0.
pub(super) fn tokens_per_day(i: usize, raw: Option<TokensPerDay>) -> Result<Option<TokensPerDay>, ConfigError> {
    let Some(t) = raw else { return Ok(None) };
    let key = |f: &str| format!("chain[{i}].tokens_per_day.{f}");
    count_in(&key("input"), t.input, 0, MAX_TOKENS_PER_DAY)?;
    count_in(&key("output"), t.output, 0, MAX_TOKENS_PER_DAY)?;
    if t.input == 0 && t.output == 0 {
        return Err(invalid(format!("chain[{i}].tokens_per_day"), "needs input or output tokens above 0"));
    }
    Ok(Some(t))
}

/// The `chain_head_changed` notice, validated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChainHeadNotice {
    /// `alerts.chain_head_changed`: send a notice when a chain's head moves (off by default).
    pub enabled: bool,
    /// The channels it goes to: `alerts.chain_head_channels`, else `alerts.notice_channels`.
    pub channels: Vec<String>,
}

/// `alerts.chain_head_changed` and `alerts.chain_head_channels` against the configured channels:
/// every name configured; switched on, it needs somewhere to go other than the page channels.
pub(super) fn notice(
    enabled: bool,
    channels: Vec<String>,
    alerts: &AlertsConfig,
) -> Result<ChainHeadNotice, ConfigError> {
    let names: Vec<&str> = alerts
        .slack
        .iter()
        .map(|c| c.name.as_str())
        .chain(alerts.email.iter().map(|c| c.name.as_str()))
        .chain(alerts.pagerduty.iter().map(|c| c.name.as_str()))
        .chain(alerts.webhook.iter().map(|c| c.name.as_str()))
        .chain(alerts.alertmanager.iter().map(|c| c.name.as_str()))
        .collect();
    for (i, n) in channels.iter().enumerate() {
        if !names.contains(&n.as_str()) {
            let known = if names.is_empty() { "none configured".to_string() } else { names.join(", ") };
            return Err(invalid(
                format!("alerts.chain_head_channels[{i}]"),
                format!("{n:?} is not a configured channel (channels: {known})"),
            ));
        }
    }
    let channels = if channels.is_empty() { alerts.notice_channels.clone() } else { channels };
    if enabled && channels.is_empty() {
        return Err(invalid(
            "alerts.chain_head_channels",
            "chain_head_changed is a notice, not a page: name the channels it goes to (or set alerts.notice_channels)",
        ));
    }
    Ok(ChainHeadNotice { enabled, channels })
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use std::collections::BTreeMap;

    const HOOKS: &str = "[[alerts.webhook]]\nname = \"oncall\"\nurl_env = \"HOOK\"\n\
                         [[alerts.webhook]]\nname = \"finops\"\nurl_env = \"HOOK\"\n";

    fn load(text: &str) -> Result<Config, String> {
        let env: BTreeMap<String, String> = [
            ("HOOK".to_string(), "http://127.0.0.1:9/hook".to_string()),
            ("OPENAI_API_KEY".to_string(), "sk-test-openai".to_string()),
        ]
        .into();
        Config::from_toml(text, &env).map_err(|e| e.to_string())
    }

    #[test]
    fn the_notice_is_off_by_default_and_goes_only_to_its_own_channels() {
        let c = load(HOOKS).expect("defaults");
        assert!(!c.chain_head.enabled && c.chain_head.channels.is_empty());
        let c = load(&format!("[alerts]\nchain_head_changed = true\nchain_head_channels = [\"finops\"]\n{HOOKS}"))
            .expect("own channel");
        assert!(c.chain_head.enabled);
        assert_eq!(c.chain_head.channels, ["finops"]);
        let c = load(&format!("[alerts]\nchain_head_changed = true\nnotice_channels = [\"finops\"]\n{HOOKS}"))
            .expect("the notice channels stand in");
        assert_eq!(c.chain_head.channels, ["finops"]);
        let e = load(&format!("[alerts]\nchain_head_changed = true\n{HOOKS}")).expect_err("nowhere to go");
        assert!(e.starts_with("alerts.chain_head_channels: chain_head_changed is a notice, not a page"), "{e}");
        let e =
            load(&format!("[alerts]\nchain_head_channels = [\"finops\", \"slack\"]\n{HOOKS}")).expect_err("unknown");
        assert_eq!(
            e,
            "alerts.chain_head_channels[1]: \"slack\" is not a configured channel (channels: oncall, finops)"
        );
    }

    #[test]
    fn tokens_per_day_is_optional_and_checked() {
        let chain = |extra: &str| {
            format!("[[provider]]\nname = \"openai\"\nmodels = [\"gpt-4o-mini\"]\n[[chain]]\nname = \"chat\"\ntargets = [\"openai/gpt-4o-mini\"]\n{extra}")
        };
        let c = load(&chain("")).expect("without");
        assert_eq!(c.chains[0].tokens_per_day, None);
        let c = load(&chain("tokens_per_day = { input = 40_000_000, output = 8_000_000 }\n")).expect("with");
        let t = c.chains[0].tokens_per_day.expect("set");
        assert_eq!((t.input, t.output), (40_000_000, 8_000_000));
        let c = load(&chain("tokens_per_day = { input = 1_000_000 }\n")).expect("input only");
        assert_eq!(c.chains[0].tokens_per_day.map(|t| t.output), Some(0));
        for (bad, key) in [
            ("{ input = -1 }", "chain[0].tokens_per_day"),
            ("{ input = 1.5 }", "chain[0].tokens_per_day"),
            ("{ input = 1, output = 10_000_000_000_000 }", "chain[0].tokens_per_day.output"),
            ("{ input = 0, output = 0 }", "chain[0].tokens_per_day"),
            ("{ prompt = 5 }", "chain[0].tokens_per_day"),
            ("5", "chain[0].tokens_per_day"),
        ] {
            let e = load(&chain(&format!("tokens_per_day = {bad}\n"))).expect_err(bad);
            assert!(e.starts_with(key), "{bad}: {e}");
        }
    }
}
