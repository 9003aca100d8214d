//! `[[chain]] targets_env`: a chain's order read from the application's own variable
//! (`LLM_PROVIDER_ORDER=openrouter,openai,anthropic`), with the syntax the application reads:
//! comma-separated provider names or target ids, whitespace trimmed, empty items ignored.

use crate::config::{invalid, ConfigError, Env};

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

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use std::collections::BTreeMap;

    use crate::config::chain::tests::PROVIDERS;

    /// Keys for openrouter and openai; anthropic has none.
    fn keys() -> BTreeMap<String, String> {
        [
            ("OPENROUTER_API_KEY".to_string(), "sk-or-test".to_string()),
            ("OPENAI_API_KEY".to_string(), "sk-test-openai".to_string()),
        ]
        .into()
    }

    fn load_env(chains: &str, extra: &[(&str, &str)]) -> Result<Config, String> {
        let mut e = keys();
        e.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        Config::from_toml(&format!("{PROVIDERS}{chains}"), &e).map_err(|e| e.to_string())
    }

    const ENV_CHAIN: &str = "[[chain]]\nname = \"chat\"\ntargets_env = \"LLM_PROVIDER_ORDER\"\n\
                             targets = [\"openai/gpt-4o-2024-08-06\", \"openrouter/openai/gpt-4o\"]\n";

    fn spelled(c: &Config) -> Vec<&str> {
        c.chains[0].members.iter().map(|m| m.spelled.as_str()).collect()
    }

    #[test]
    fn the_order_comes_from_the_variable_with_provider_names_expanded_and_keyless_ones_skipped() {
        let c =
            load_env(ENV_CHAIN, &[("LLM_PROVIDER_ORDER", " openrouter, ,openai ,anthropic,nosuch,")]).expect("valid");
        let chat = &c.chains[0];
        assert_eq!(spelled(&c), ["openrouter/openai/gpt-4o", "openai/gpt-4o-2024-08-06"]);
        assert_eq!(chat.members[0].route, None, "a provider name stands for every route of each of its models");
        assert_eq!(chat.order_from, "env:LLM_PROVIDER_ORDER");
        let skipped: Vec<(&str, &str)> = chat.skipped.iter().map(|s| (s.target.as_str(), s.reason.as_str())).collect();
        assert_eq!(
            skipped,
            [("anthropic", "ANTHROPIC_API_KEY is not set"), ("nosuch", "no provider \"nosuch\" is configured")]
        );
        // Full ids, a pinned route, and a target listed again keeping its first place.
        let c = load_env(
            ENV_CHAIN,
            &[(
                "LLM_PROVIDER_ORDER",
                "openrouter/openai/gpt-4o@Azure,openai,openai/gpt-4o-2024-08-06,anthropic/claude-sonnet-4-20250514",
            )],
        )
        .expect("valid");
        assert_eq!(spelled(&c), ["openrouter/openai/gpt-4o@Azure", "openai/gpt-4o-2024-08-06"]);
        assert_eq!(c.chains[0].skipped[0].target, "anthropic/claude-sonnet-4-20250514");
    }

    #[test]
    fn the_targets_list_is_the_default_while_the_variable_is_unset_or_empty() {
        for extra in [&[][..], &[("LLM_PROVIDER_ORDER", "")][..], &[("LLM_PROVIDER_ORDER", " , ,")][..]] {
            let c = load_env(ENV_CHAIN, extra).expect("valid");
            assert_eq!(spelled(&c), ["openai/gpt-4o-2024-08-06", "openrouter/openai/gpt-4o"], "{extra:?}");
            assert_eq!(c.chains[0].order_from, "config");
        }
        let c = load_env("[[chain]]\nname = \"a\"\ntargets = [\"openai/gpt-4o-2024-08-06\"]\n", &[]).expect("valid");
        assert_eq!(c.chains[0].order_from, "config");
    }

    #[test]
    fn the_order_file_twin_is_read_at_every_load() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("order");
        std::fs::write(&file, "openai\n").expect("write");
        let path = file.display().to_string();
        let c = load_env(ENV_CHAIN, &[("LLM_PROVIDER_ORDER_FILE", path.as_str())]).expect("valid");
        assert_eq!(spelled(&c), ["openai/gpt-4o-2024-08-06"]);
        assert_eq!(c.chains[0].order_from, "env:LLM_PROVIDER_ORDER_FILE");
        std::fs::write(&file, "openrouter,openai\n").expect("rewrite");
        let c = load_env(ENV_CHAIN, &[("LLM_PROVIDER_ORDER_FILE", path.as_str())]).expect("valid");
        assert_eq!(spelled(&c), ["openrouter/openai/gpt-4o", "openai/gpt-4o-2024-08-06"], "a new load reads it again");
    }

    #[test]
    fn bad_orders_from_the_environment_name_the_key_and_the_variable() {
        let e = load_env(ENV_CHAIN, &[("LLM_PROVIDER_ORDER", "openai,openai/gpt-5")]).expect_err("not a target");
        assert!(
            e.starts_with("chain[0].targets_env: LLM_PROVIDER_ORDER lists \"openai/gpt-5\", not a configured target of provider \"openai\" (configured: "),
            "{e}"
        );
        let e = load_env(ENV_CHAIN, &[("LLM_PROVIDER_ORDER", "openrouter/openai/gpt-4o@Nowhere")]).expect_err("route");
        assert!(e.starts_with("chain[0].targets_env: LLM_PROVIDER_ORDER lists"), "{e}");
        let e = load_env(ENV_CHAIN, &[("LLM_PROVIDER_ORDER", "openai,\u{1b}[31m")]).expect_err("control");
        assert!(e.starts_with("chain[0].targets_env: LLM_PROVIDER_ORDER holds control characters"), "{e}");
        let e = load_env(
            "[[chain]]\nname = \"a\"\ntargets_env = \"LLM-ORDER\"\ntargets = [\"openai/gpt-4o-2024-08-06\"]\n",
            &[],
        )
        .expect_err("name");
        assert!(e.starts_with("chain[0].targets_env: \"LLM-ORDER\" is not an environment variable name"), "{e}");
        let e = load_env("[[chain]]\nname = \"a\"\ntargets_env = \"LLM_PROVIDER_ORDER\"\n", &[]).expect_err("nothing");
        assert_eq!(e, "chain[0].targets: needs at least one target (LLM_PROVIDER_ORDER is not set either)");
        let c = load_env(
            "[[chain]]\nname = \"a\"\ntargets_env = \"LLM_PROVIDER_ORDER\"\n",
            &[("LLM_PROVIDER_ORDER", "openai")],
        )
        .expect("targets may be left out when the variable is set");
        assert_eq!(spelled(&c), ["openai/gpt-4o-2024-08-06"]);
        let missing = "/nonexistent/vigil-order";
        let e = load_env(ENV_CHAIN, &[("LLM_PROVIDER_ORDER_FILE", missing)]).expect_err("unreadable");
        assert!(e.starts_with("LLM_PROVIDER_ORDER_FILE: "), "{e}");
    }
}
