//! `[[provider.check]]`: a team's own golden prompts, each with one assertion (a regex, a JSON
//! Schema, or exact text after normalisation), an optional TTFT budget and its own interval.
//! Parsed here and validated with errors naming the key (`provider[0].check[1].regex`); the
//! verdict itself is decided in `decide::check`.

use super::parse::{duration_in, no_controls};
use super::{invalid, ConfigError};
use serde::Deserialize;
use std::collections::HashSet;
use std::time::Duration;

/// How often a check runs when `every` is not given.
pub const DEFAULT_CHECK_EVERY: Duration = Duration::from_secs(15 * 60);
/// Output budget of a check when `max_tokens` is not given.
pub const DEFAULT_CHECK_MAX_TOKENS: u32 = 256;
/// Longest prompt accepted, in bytes: a golden prompt is a short request, not a workload.
const MAX_PROMPT_BYTES: usize = 32 * 1024;

/// What the answer must satisfy.
#[derive(Debug, Clone)]
pub enum Assertion {
    /// The answer contains a match of this pattern (`regex`).
    Regex(regex::Regex),
    /// The answer parses as JSON (a fenced ```json block is unwrapped) and validates against
    /// this schema (`json_schema`), checked to compile at load.
    JsonSchema(serde_json::Value),
    /// The answer equals this text after both are normalised (`exact`; see `decide::check::normalise`).
    Exact(String),
}

impl Assertion {
    /// `regex`, `json_schema` or `exact`, as shown.
    pub fn kind(&self) -> &'static str {
        match self {
            Assertion::Regex(_) => "regex",
            Assertion::JsonSchema(_) => "json_schema",
            Assertion::Exact(_) => "exact",
        }
    }
}

/// One golden check of a provider's targets.
#[derive(Debug, Clone)]
pub struct CheckConfig {
    /// Name, unique within the provider; shown and used as a metric label (never the prompt).
    pub name: String,
    /// The system turn, if any.
    pub system: Option<String>,
    /// The user turn.
    pub prompt: String,
    /// What the answer must satisfy.
    pub assertion: Assertion,
    /// Longest time to a first token that still passes, when set.
    pub ttft_budget: Option<Duration>,
    /// How often it runs per target.
    pub every: Duration,
    /// Output budget.
    pub max_tokens: u32,
    /// The provider's models it runs on (every model when empty).
    pub models: Vec<String>,
}

impl CheckConfig {
    /// Whether the check runs on `model` of its provider.
    pub fn applies_to(&self, model: &str) -> bool {
        self.models.is_empty() || self.models.iter().any(|m| m == model)
    }
}

/// One `[[provider.check]]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCheck {
    name: String,
    system: Option<String>,
    prompt: String,
    regex: Option<String>,
    json_schema: Option<String>,
    exact: Option<String>,
    ttft_budget: Option<String>,
    every: Option<String>,
    max_tokens: Option<u32>,
    #[serde(default)]
    models: Vec<String>,
}

/// Provider `i`'s checks, validated; `models` are the provider's models.
pub(super) fn validate(i: usize, raw: Vec<RawCheck>, models: &[String]) -> Result<Vec<CheckConfig>, ConfigError> {
    let mut names = HashSet::new();
    raw.into_iter()
        .enumerate()
        .map(|(j, rc)| one(&format!("provider[{i}].check[{j}]"), rc, models, &mut names))
        .collect()
}

fn one(at: &str, rc: RawCheck, models: &[String], names: &mut HashSet<String>) -> Result<CheckConfig, ConfigError> {
    let key = |field: &str| format!("{at}.{field}");
    let name = rc.name.trim().to_string();
    if name.is_empty() {
        return Err(invalid(key("name"), "must not be empty"));
    }
    no_controls(&key("name"), &name)?;
    if name.starts_with(crate::vocab::capability::CHECK_PREFIX) {
        return Err(invalid(key("name"), "names starting with \"capability.\" are the capability probes'"));
    }
    if !names.insert(name.clone()) {
        return Err(invalid(key("name"), format!("duplicate check name {name:?} in this provider")));
    }
    if rc.prompt.trim().is_empty() {
        return Err(invalid(key("prompt"), "must not be empty"));
    }
    for (field, text) in [("prompt", Some(&rc.prompt)), ("system", rc.system.as_ref())] {
        if text.is_some_and(|t| t.len() > MAX_PROMPT_BYTES) {
            return Err(invalid(key(field), format!("longer than {MAX_PROMPT_BYTES} bytes")));
        }
    }
    let assertion = assertion(&key, rc.regex, rc.json_schema, rc.exact)?;
    let ttft_budget = rc
        .ttft_budget
        .map(|s| duration_in(&key("ttft_budget"), &s, Duration::from_millis(1), Duration::from_secs(3600)))
        .transpose()?;
    let every = match rc.every {
        Some(s) => duration_in(&key("every"), &s, Duration::from_secs(10), Duration::from_secs(7 * 86_400))?,
        None => DEFAULT_CHECK_EVERY,
    };
    let max_tokens = rc.max_tokens.unwrap_or(DEFAULT_CHECK_MAX_TOKENS);
    if !(1..=16_384).contains(&max_tokens) {
        return Err(invalid(key("max_tokens"), format!("{max_tokens} is out of range: must be from 1 to 16384")));
    }
    if let Some(m) = rc.models.iter().find(|m| !models.contains(m)) {
        return Err(invalid(key("models"), format!("{m:?} is not one of the provider's models {models:?}")));
    }
    Ok(CheckConfig {
        name,
        system: rc.system,
        prompt: rc.prompt,
        assertion,
        ttft_budget,
        every,
        max_tokens,
        models: rc.models,
    })
}

/// Exactly one of `regex`, `json_schema` and `exact`, compiled.
fn assertion(
    key: &dyn Fn(&str) -> String,
    regex: Option<String>,
    json_schema: Option<String>,
    exact: Option<String>,
) -> Result<Assertion, ConfigError> {
    match (regex, json_schema, exact) {
        (Some(r), None, None) => regex::Regex::new(&r)
            .map(Assertion::Regex)
            .map_err(|e| invalid(key("regex"), format!("not a regular expression: {e}"))),
        (None, Some(s), None) => {
            let schema: serde_json::Value =
                serde_json::from_str(&s).map_err(|e| invalid(key("json_schema"), format!("not JSON: {e}")))?;
            jsonschema::validator_for(&schema)
                .map_err(|e| invalid(key("json_schema"), format!("not a usable JSON Schema: {e}")))?;
            Ok(Assertion::JsonSchema(schema))
        }
        (None, None, Some(x)) if x.trim().is_empty() => Err(invalid(key("exact"), "must not be empty")),
        (None, None, Some(x)) => Ok(Assertion::Exact(x)),
        (None, None, None) => Err(invalid(key("regex"), "missing: give one of regex, json_schema or exact")),
        _ => Err(invalid(key("regex"), "give only one of regex, json_schema or exact")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(name: &str) -> RawCheck {
        RawCheck { name: name.into(), prompt: "Say OK".into(), exact: Some("OK".into()), ..Default::default() }
    }

    fn key_of(e: ConfigError) -> String {
        match e {
            ConfigError::Invalid { key, .. } => key,
            other => format!("{other}"),
        }
    }

    #[test]
    fn a_valid_check_gets_its_defaults() {
        let got = validate(0, vec![raw("ok")], &["m".into()]).expect("valid");
        assert_eq!(got[0].every, DEFAULT_CHECK_EVERY);
        assert_eq!(got[0].max_tokens, DEFAULT_CHECK_MAX_TOKENS);
        assert!(got[0].applies_to("m") && got[0].applies_to("any"));
        assert_eq!(got[0].assertion.kind(), "exact");
    }

    #[test]
    fn each_bad_field_is_named() {
        let models = ["m".to_string()];
        let bad = |rc: RawCheck| key_of(validate(2, vec![rc], &models).expect_err("refused"));
        assert_eq!(bad(RawCheck { regex: Some("(".into()), exact: None, ..raw("a") }), "provider[2].check[0].regex");
        assert_eq!(bad(RawCheck { regex: Some("x".into()), ..raw("a") }), "provider[2].check[0].regex");
        assert_eq!(bad(RawCheck { exact: None, ..raw("a") }), "provider[2].check[0].regex");
        let schema = |s: &str| RawCheck { json_schema: Some(s.into()), exact: None, ..raw("a") };
        assert_eq!(bad(schema("{not json")), "provider[2].check[0].json_schema");
        assert_eq!(bad(schema(r#"{"type": 7}"#)), "provider[2].check[0].json_schema");
        assert_eq!(bad(RawCheck { prompt: " ".into(), ..raw("a") }), "provider[2].check[0].prompt");
        assert_eq!(bad(RawCheck { name: "".into(), ..raw("a") }), "provider[2].check[0].name");
        assert_eq!(bad(RawCheck { every: Some("1s".into()), ..raw("a") }), "provider[2].check[0].every");
        assert_eq!(bad(RawCheck { ttft_budget: Some("soon".into()), ..raw("a") }), "provider[2].check[0].ttft_budget");
        assert_eq!(bad(RawCheck { max_tokens: Some(0), ..raw("a") }), "provider[2].check[0].max_tokens");
        assert_eq!(bad(RawCheck { models: vec!["other".into()], ..raw("a") }), "provider[2].check[0].models");
        let twice = validate(2, vec![raw("a"), raw("a")], &models).expect_err("duplicate");
        assert_eq!(key_of(twice), "provider[2].check[1].name");
    }
}
