//! `[[chain]] targets_env`: a chain's order read from the application's own variable
//! (`LLM_PROVIDER_ORDER=openrouter,openai,anthropic`), with the syntax the application reads:
//! comma-separated provider names or target ids, whitespace trimmed, empty items ignored.

use crate::config::chain::{invalid, provider_of, ChainMember, Known, SkippedMember};
use crate::config::{ConfigError, Env};

/// The variable `targets_env` names and its items (comma-separated, trimmed, empty ones
/// ignored), read from the variable or its `_FILE` twin; `None` when the chain names none or it
/// holds no item (the `targets` list applies).
pub(super) fn order_from_env(
    i: usize,
    targets_env: Option<&str>,
    env: &dyn Env,
) -> Result<Option<(String, Vec<String>)>, ConfigError> {
    let Some(var) = targets_env.map(str::trim) else { return Ok(None) };
    let key = format!("chain[{i}].targets_env");
    let mut chars = var.chars();
    let shaped = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !shaped {
        return Err(invalid(key, format!("{var:?} is not an environment variable name (letters, digits, _)")));
    }
    let Some(value) = env.get_or_file(var)? else { return Ok(None) };
    let items: Vec<String> = value.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect();
    if items.is_empty() {
        return Ok(None);
    }
    let from = if env.get(var).is_some() { var.to_string() } else { format!("{var}_FILE") };
    for item in &items {
        super::parse::no_controls(&key, item)
            .map_err(|_| invalid(key.clone(), format!("{from} holds control characters (CR, LF, tab, NUL, …)")))?;
    }
    Ok(Some((from, items)))
}

/// The items of `var` as the application reads them: a target id is that target, a bare
/// provider name every model of that provider in configured order (each with every route); a
/// name this machine cannot probe (no such provider, no key) is skipped with the reason; an id of
/// a configured provider that is not one of its targets is an error. A target listed again
/// (`openai,openai/gpt-4o`) keeps its first place.
pub(super) fn resolve_env(
    i: usize,
    var: &str,
    items: &[String],
    known: &Known<'_>,
) -> Result<(Vec<ChainMember>, Vec<SkippedMember>), ConfigError> {
    let mut members: Vec<ChainMember> = Vec::new();
    let mut left_out: Vec<SkippedMember> = Vec::new();
    let mut add = |m: &ChainMember| {
        if !members.iter().any(|x| x.spelled == m.spelled) {
            members.push(m.clone());
        }
    };
    for item in items {
        if let Some(m) = known.find(item) {
            add(m);
            continue;
        }
        if let Some(p) = known.providers.iter().find(|p| &p.name == item) {
            for model in &p.models {
                let spelled = if model.is_empty() { p.name.clone() } else { format!("{}/{model}", p.name) };
                if let Some(m) = known.find(&spelled) {
                    add(m);
                }
            }
            continue;
        }
        let provider = provider_of(item);
        let reason = match known.skipped_for(item) {
            Some(v) => format!("{v} is not set"),
            None if known.providers.iter().any(|p| p.name == provider) => {
                return Err(invalid(
                    format!("chain[{i}].targets_env"),
                    format!(
                        "{var} lists {item:?}, not a configured target of provider {provider:?} (configured: {})",
                        known.ids()
                    ),
                ));
            }
            None => format!("no provider {provider:?} is configured"),
        };
        if !left_out.iter().any(|s| &s.target == item) {
            left_out.push(SkippedMember { target: item.clone(), reason });
        }
    }
    Ok((members, left_out))
}
