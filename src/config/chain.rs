//! `[[chain]]`: named failover chains across providers and models, parsed and checked at load.
//!
//! A chain lists targets in the order a router should try them (`openrouter/openai/gpt-4o`,
//! `openai/gpt-4o-2024-08-06`, `anthropic/claude-sonnet-4-20250514`). A member naming a model
//! whose provider pins routes without its `@route` stands for every route of that model (the
//! export orders those by `rank`). A member of a provider skipped for a missing key is kept aside
//! as skipped, so one chain can serve machines with different keys; anything else unknown is an
//! error naming `chain[i].targets[j]`.

use crate::config::{ConfigError, ProviderConfig};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// One `[[chain]]` as written in the file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawChain {
    name: String,
    targets: Vec<String>,
}

impl RawChain {
    /// A chain as the file would write it (`vigil run --demo` adds its own this way).
    pub fn new(name: impl Into<String>, targets: Vec<String>) -> Self {
        RawChain { name: name.into(), targets }
    }
}

/// One member of a chain, resolved against the configured providers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChainMember {
    /// As written in the config.
    pub spelled: String,
    /// Provider name.
    pub provider: String,
    /// Model id (empty for plain HTTP targets).
    pub model: String,
    /// The pinned route; `None` for a target without routes or for every route of the model.
    pub route: Option<String>,
}

/// A member left out because its provider has no key here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkippedMember {
    /// As written in the config.
    pub target: String,
    /// Why, e.g. `OPENAI_API_KEY is not set`.
    pub reason: String,
}

/// A validated failover chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChainConfig {
    /// Unique name.
    pub name: String,
    /// Members in configured order.
    pub members: Vec<ChainMember>,
    /// Members whose provider is skipped for a missing key.
    pub skipped: Vec<SkippedMember>,
}

impl ChainMember {
    /// Whether `t` is (one of) the target(s) this member names.
    pub fn matches(&self, t: &crate::vocab::target::Target) -> bool {
        t.provider == self.provider && t.model == self.model && (self.route.is_none() || self.route == t.route)
    }
}

fn invalid(key: String, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { key, message: message.into() }
}

/// Ids a member may use for one provider: `p/m@r` for each route, and `p/m` (`p` for plain HTTP).
fn spellings(p: &ProviderConfig) -> Vec<ChainMember> {
    let mut out = Vec::new();
    for model in &p.models {
        let base = if model.is_empty() { p.name.clone() } else { format!("{}/{model}", p.name) };
        out.push(ChainMember { spelled: base.clone(), provider: p.name.clone(), model: model.clone(), route: None });
        for r in &p.routes {
            out.push(ChainMember {
                spelled: format!("{base}@{r}"),
                provider: p.name.clone(),
                model: model.clone(),
                route: Some(r.clone()),
            });
        }
    }
    out
}

/// Resolves and checks every chain: names unique and non-empty, at least one target, each target
/// configured (or of a provider skipped for its key), none twice in one chain.
pub fn validate(
    raw: Vec<RawChain>,
    providers: &[ProviderConfig],
    skipped: &[(String, String)],
) -> Result<Vec<ChainConfig>, ConfigError> {
    let known: Vec<ChainMember> = providers.iter().flat_map(spellings).collect();
    let mut names = BTreeSet::new();
    let mut out = Vec::with_capacity(raw.len());
    for (i, c) in raw.into_iter().enumerate() {
        let name = c.name.trim().to_string();
        if name.is_empty() {
            return Err(invalid(format!("chain[{i}].name"), "must not be empty"));
        }
        // The name becomes a key in every router format and a line in logs and headers.
        super::parse::no_controls(&format!("chain[{i}].name"), &name)?;
        if !names.insert(name.clone()) {
            return Err(invalid(format!("chain[{i}].name"), format!("duplicate chain name {name:?}")));
        }
        if c.targets.is_empty() {
            return Err(invalid(format!("chain[{i}].targets"), "needs at least one target"));
        }
        let mut members: Vec<ChainMember> = Vec::new();
        let mut left_out = Vec::new();
        for (j, spelled) in c.targets.iter().enumerate() {
            let key = format!("chain[{i}].targets[{j}]");
            let spelled = spelled.trim();
            if let Some(m) = known.iter().find(|k| k.spelled == spelled) {
                if members.iter().any(|x| x.spelled == m.spelled) {
                    return Err(invalid(key, format!("{spelled:?} is already in this chain")));
                }
                members.push(m.clone());
                continue;
            }
            let provider = spelled.split(['/', '@']).next().unwrap_or_default();
            if let Some((_, var)) = skipped.iter().find(|(n, _)| n == provider) {
                left_out.push(SkippedMember { target: spelled.to_string(), reason: format!("{var} is not set") });
                continue;
            }
            let mut ids: Vec<&str> = known.iter().map(|k| k.spelled.as_str()).collect();
            ids.dedup();
            return Err(invalid(
                key,
                format!(
                    "unknown target {spelled:?} (configured: {})",
                    if ids.is_empty() { "none".into() } else { ids.join(", ") }
                ),
            ));
        }
        out.push(ChainConfig { name, members, skipped: left_out });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use std::collections::BTreeMap;

    const PROVIDERS: &str = r#"
[[provider]]
name = "openrouter"
models = ["openai/gpt-4o"]
routes = ["OpenAI", "Azure"]
[[provider]]
name = "openai"
models = ["gpt-4o-2024-08-06"]
[[provider]]
name = "anthropic"
models = ["claude-sonnet-4-20250514"]
"#;

    fn keys(with_anthropic: bool) -> BTreeMap<String, String> {
        let mut e: BTreeMap<String, String> = [
            ("OPENROUTER_API_KEY".to_string(), "sk-or-test".to_string()),
            ("OPENAI_API_KEY".to_string(), "sk-test-openai".to_string()),
        ]
        .into();
        if with_anthropic {
            e.insert("ANTHROPIC_API_KEY".into(), "sk-ant-test".into());
        }
        e
    }

    fn load(chains: &str, with_anthropic: bool) -> Result<Config, String> {
        Config::from_toml(&format!("{PROVIDERS}{chains}"), &keys(with_anthropic)).map_err(|e| e.to_string())
    }

    #[test]
    fn members_resolve_with_and_without_their_route() {
        let c = load(
            r#"
[[chain]]
name = "chat"
targets = ["openrouter/openai/gpt-4o", "openai/gpt-4o-2024-08-06", "anthropic/claude-sonnet-4-20250514"]
[[chain]]
name = "pinned"
targets = ["openrouter/openai/gpt-4o@Azure", "openai/gpt-4o-2024-08-06"]
"#,
            true,
        )
        .expect("valid");
        assert_eq!(c.chains.len(), 2);
        let chat = &c.chains[0];
        assert_eq!(chat.name, "chat");
        assert_eq!(chat.members.len(), 3);
        assert_eq!((chat.members[0].provider.as_str(), chat.members[0].route.as_deref()), ("openrouter", None));
        assert_eq!(chat.members[2].model, "claude-sonnet-4-20250514");
        assert_eq!(c.chains[1].members[0].route.as_deref(), Some("Azure"));
        assert!(chat.skipped.is_empty());
    }

    #[test]
    fn a_member_whose_provider_has_no_key_is_skipped_not_rejected() {
        let c = load(
            "[[chain]]\nname = \"chat\"\ntargets = [\"openai/gpt-4o-2024-08-06\", \"anthropic/claude-sonnet-4-20250514\"]\n",
            false,
        )
        .expect("valid");
        assert_eq!(c.chains[0].members.len(), 1);
        assert_eq!(c.chains[0].skipped[0].target, "anthropic/claude-sonnet-4-20250514");
        assert_eq!(c.chains[0].skipped[0].reason, "ANTHROPIC_API_KEY is not set");
    }

    #[test]
    fn bad_chains_name_the_key() {
        let e = load(
            "[[chain]]\nname = \"a\"\ntargets = [\"openai/gpt-4o-2024-08-06\"]\n[[chain]]\nname = \"b\"\ntargets = [\"openai/gpt-4o-2024-08-06\", \"openrouter/openai/gpt-4o\", \"openai/gpt-5\"]\n",
            true,
        )
        .expect_err("unknown target");
        assert!(e.starts_with("chain[1].targets[2]: unknown target \"openai/gpt-5\" (configured: "), "{e}");
        let e = load("[[chain]]\nname = \"a\"\ntargets = [\"openrouter/openai/gpt-4o@Nowhere\"]\n", true)
            .expect_err("route");
        assert!(e.starts_with("chain[0].targets[0]: unknown target"), "{e}");
        let e = load(
            "[[chain]]\nname = \"a\"\ntargets = [\"openai/gpt-4o-2024-08-06\"]\n[[chain]]\nname = \"a\"\ntargets = [\"openai/gpt-4o-2024-08-06\"]\n",
            true,
        )
        .expect_err("duplicate");
        assert_eq!(e, "chain[1].name: duplicate chain name \"a\"");
        let e = load("[[chain]]\nname = \"a\"\ntargets = []\n", true).expect_err("empty");
        assert_eq!(e, "chain[0].targets: needs at least one target");
        let e = load("[[chain]]\nname = \" \"\ntargets = [\"openai/gpt-4o-2024-08-06\"]\n", true).expect_err("no name");
        assert_eq!(e, "chain[0].name: must not be empty");
        let e = load(
            "[[chain]]\nname = \"a\"\ntargets = [\"openai/gpt-4o-2024-08-06\", \"openai/gpt-4o-2024-08-06\"]\n",
            true,
        )
        .expect_err("twice");
        assert_eq!(e, "chain[0].targets[1]: \"openai/gpt-4o-2024-08-06\" is already in this chain");
        let e = load("[[chain]]\nname = \"a\"\ntarget = []\n", true).expect_err("unknown key");
        assert!(e.starts_with("chain"), "{e}");
    }

    #[test]
    fn control_characters_in_a_chain_name_are_refused_naming_the_key() {
        for name in ["a\\u0000b", "a\\nb", "a\\u001b[31m", "a\\tb", "a\\u007fb"] {
            let text = format!(
                "[[chain]]\nname = \"ok\"\ntargets = [\"openai/gpt-4o-2024-08-06\"]\n\
                 [[chain]]\nname = \"{name}\"\ntargets = [\"openai/gpt-4o-2024-08-06\"]\n"
            );
            let e = load(&text, true).expect_err(name);
            assert_eq!(e, "chain[1].name: must not contain control characters (CR, LF, tab, NUL, …)", "{name}");
        }
    }
}
