//! `[[probe.workload]]`: long-prompt probes (docs/CONFIGURATION.md#probeworkload). Each entry
//! sends, on its own interval, a nonce-first prompt of about `input_tokens` tokens to every chat
//! target (or those its `providers`/`models` filters name), so the time to first token of a
//! real-sized prompt (prefill) is measured apart from the tiny probe's. Bounded at load; errors
//! name the key (`probe.workload[1].input_tokens`).

use super::parse::{duration_in, DAY, MINUTE};
use super::{invalid, ConfigError, ProviderConfig, ProviderKind};
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;

/// Smallest prompt size accepted: below this the tiny probe already measures it.
pub const MIN_INPUT_TOKENS: u32 = 256;
/// Largest prompt size accepted (about 800 KB of text).
pub const MAX_INPUT_TOKENS: u32 = 200_000;
/// How often a workload runs per target when `every` is not given.
pub const DEFAULT_WORKLOAD_EVERY: Duration = Duration::from_secs(15 * 60);
/// Output budget of a workload run when `max_tokens` is not given: the answer is one word.
pub const DEFAULT_WORKLOAD_MAX_TOKENS: u32 = 16;
/// Limit of one run (connect to last byte, and to the first token) when `timeout` is not given:
/// prefilling a long prompt takes far longer than the tiny probe's first-token wait.
pub const DEFAULT_WORKLOAD_TIMEOUT: Duration = Duration::from_secs(120);

/// One long-prompt probe size.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadConfig {
    /// About this many input tokens are sent (see `decide::workload::prompt`).
    pub input_tokens: u32,
    /// One run per target every `every`.
    pub every: Duration,
    /// Output budget.
    pub max_tokens: u32,
    /// Whole-run limit, also the first-token limit.
    pub timeout: Duration,
    /// Only these providers' targets (every chat provider when empty).
    pub providers: Vec<String>,
    /// Only these models (every model when empty).
    pub models: Vec<String>,
}

impl WorkloadConfig {
    /// Whether the workload runs on `model` of `provider` (only on targets answering a chat turn:
    /// a plain `http` target sends no prompt, an embeddings one answers no text).
    pub fn applies_to(&self, provider: &ProviderConfig, model: &str) -> bool {
        provider.chats()
            && (self.providers.is_empty() || self.providers.contains(&provider.name))
            && (self.models.is_empty() || self.models.iter().any(|m| m == model))
    }
}

/// One `[[probe.workload]]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWorkload {
    input_tokens: Option<u32>,
    every: Option<String>,
    max_tokens: Option<u32>,
    timeout: Option<String>,
    #[serde(default)]
    providers: Vec<String>,
    #[serde(default)]
    models: Vec<String>,
}

/// Every `[[probe.workload]]`, validated against the configured providers (`providers`) and
/// those skipped for a missing key (`skipped`, which a filter may name).
pub(super) fn validate(
    raw: &[RawWorkload],
    providers: &[Arc<ProviderConfig>],
    skipped: &[(String, String)],
) -> Result<Vec<WorkloadConfig>, ConfigError> {
    let mut out: Vec<WorkloadConfig> = Vec::with_capacity(raw.len());
    for (i, rw) in raw.iter().enumerate() {
        let at = format!("probe.workload[{i}]");
        let w = one(&at, rw, providers, skipped)?;
        if out.iter().any(|o| o.input_tokens == w.input_tokens) {
            return Err(invalid(
                format!("{at}.input_tokens"),
                format!("{} is given twice: one entry per size (its series and deadline are per size)", w.input_tokens),
            ));
        }
        out.push(w);
    }
    Ok(out)
}

fn one(
    at: &str,
    rw: &RawWorkload,
    providers: &[Arc<ProviderConfig>],
    skipped: &[(String, String)],
) -> Result<WorkloadConfig, ConfigError> {
    let key = |field: &str| format!("{at}.{field}");
    let input_tokens = rw.input_tokens.ok_or_else(|| invalid(key("input_tokens"), "missing: the prompt size"))?;
    if !(MIN_INPUT_TOKENS..=MAX_INPUT_TOKENS).contains(&input_tokens) {
        return Err(invalid(
            key("input_tokens"),
            format!("{input_tokens} is out of range: must be from {MIN_INPUT_TOKENS} to {MAX_INPUT_TOKENS}"),
        ));
    }
    let every = match &rw.every {
        Some(s) => duration_in(&key("every"), s, MINUTE, 7 * DAY)?,
        None => DEFAULT_WORKLOAD_EVERY,
    };
    let max_tokens = rw.max_tokens.unwrap_or(DEFAULT_WORKLOAD_MAX_TOKENS);
    if !(1..=4096).contains(&max_tokens) {
        return Err(invalid(key("max_tokens"), format!("{max_tokens} is out of range: must be from 1 to 4096")));
    }
    let timeout = match &rw.timeout {
        Some(s) => duration_in(&key("timeout"), s, Duration::from_secs(1), Duration::from_secs(15 * 60))?,
        None => DEFAULT_WORKLOAD_TIMEOUT,
    };
    // One run of a size per target at a time.
    let timeout = timeout.min(every);
    for name in &rw.providers {
        match providers.iter().find(|p| &p.name == name) {
            Some(p) if p.kind == ProviderKind::Http => {
                return Err(invalid(key("providers"), format!("{name:?} is kind = \"http\": it sends no prompt")));
            }
            Some(p) if !p.chats() => {
                return Err(invalid(
                    key("providers"),
                    format!("{name:?} is an embeddings endpoint: it answers no text"),
                ));
            }
            Some(_) => {}
            None if skipped.iter().any(|(s, _)| s == name) => {}
            None => return Err(invalid(key("providers"), format!("{name:?} is not a configured provider"))),
        }
    }
    let chosen = |p: &&Arc<ProviderConfig>| rw.providers.is_empty() || rw.providers.contains(&p.name);
    let served = |m: &String| providers.iter().filter(chosen).any(|p| p.models.contains(m));
    let some_skipped = rw.providers.iter().any(|n| skipped.iter().any(|(s, _)| s == n))
        || (rw.providers.is_empty() && !skipped.is_empty());
    if let Some(m) = rw.models.iter().find(|m| m.trim().is_empty() || (!served(m) && !some_skipped)) {
        return Err(invalid(key("models"), format!("{m:?} is not a model of the providers it runs on")));
    }
    Ok(WorkloadConfig {
        input_tokens,
        every,
        max_tokens,
        timeout,
        providers: rw.providers.clone(),
        models: rw.models.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(tokens: u32) -> RawWorkload {
        RawWorkload { input_tokens: Some(tokens), ..Default::default() }
    }

    fn provider(name: &str, kind: ProviderKind) -> ProviderConfig {
        let url = url::Url::parse("http://127.0.0.1:9/v1").expect("url");
        ProviderConfig { models: vec!["m".into()], ..ProviderConfig::new(name, kind, url) }
    }

    fn key_of(e: ConfigError) -> String {
        match e {
            ConfigError::Invalid { key, .. } => key,
            other => other.to_string(),
        }
    }

    #[test]
    fn defaults_bounds_and_filters() {
        let ps = [provider("a", ProviderKind::Openai), provider("site", ProviderKind::Http)].map(Arc::new);
        let got = validate(&[raw(8000)], &ps, &[]).expect("valid");
        assert_eq!(got[0].every, DEFAULT_WORKLOAD_EVERY);
        assert_eq!(got[0].max_tokens, DEFAULT_WORKLOAD_MAX_TOKENS);
        assert_eq!(got[0].timeout, DEFAULT_WORKLOAD_TIMEOUT);
        assert!(got[0].applies_to(&ps[0], "m"));
        assert!(!got[0].applies_to(&ps[1], "m"), "a plain http target sends no prompt");
        let short = RawWorkload { every: Some("1m".into()), ..raw(256) };
        assert_eq!(validate(&[short], &ps, &[]).expect("valid")[0].timeout, MINUTE, "never longer than its interval");
        let only = RawWorkload { models: vec!["m".into()], providers: vec!["a".into()], ..raw(1000) };
        let w = &validate(&[only], &ps, &[]).expect("valid")[0];
        assert!(w.applies_to(&ps[0], "m") && !w.applies_to(&ps[0], "other"));
        let later = RawWorkload { providers: vec!["nokey".into()], models: vec!["x".into()], ..raw(1000) };
        assert!(validate(&[later], &ps, &[("nokey".into(), "NOKEY_API_KEY".into())]).is_ok());
    }

    #[test]
    fn each_bad_field_is_named() {
        let ps = [provider("a", ProviderKind::Openai), provider("site", ProviderKind::Http)].map(Arc::new);
        let bad = |rws: Vec<RawWorkload>| key_of(validate(&rws, &ps, &[]).expect_err("refused"));
        assert_eq!(bad(vec![raw(255)]), "probe.workload[0].input_tokens");
        assert_eq!(bad(vec![raw(200_001)]), "probe.workload[0].input_tokens");
        assert_eq!(bad(vec![RawWorkload::default()]), "probe.workload[0].input_tokens");
        assert_eq!(bad(vec![raw(8000), raw(8000)]), "probe.workload[1].input_tokens");
        assert_eq!(bad(vec![RawWorkload { every: Some("30s".into()), ..raw(8000) }]), "probe.workload[0].every");
        assert_eq!(bad(vec![RawWorkload { every: Some("8d".into()), ..raw(8000) }]), "probe.workload[0].every");
        assert_eq!(bad(vec![RawWorkload { max_tokens: Some(0), ..raw(8000) }]), "probe.workload[0].max_tokens");
        assert_eq!(bad(vec![RawWorkload { timeout: Some("1h".into()), ..raw(8000) }]), "probe.workload[0].timeout");
        let http = RawWorkload { providers: vec!["site".into()], ..raw(8000) };
        assert_eq!(bad(vec![raw(1000), http]), "probe.workload[1].providers");
        assert_eq!(
            bad(vec![RawWorkload { providers: vec!["nope".into()], ..raw(8000) }]),
            "probe.workload[0].providers"
        );
        assert_eq!(bad(vec![RawWorkload { models: vec!["other".into()], ..raw(8000) }]), "probe.workload[0].models");
    }
}
