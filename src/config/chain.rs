//! `[[chain]]`: named failover chains across providers and models, parsed and checked at load.
//!
//! A chain lists targets in the order a router should try them (`openrouter/openai/gpt-4o`,
//! `openai/gpt-4o-2024-08-06`, `anthropic/claude-sonnet-4-20250514`). A member naming a model
//! whose provider pins routes without its `@route` stands for every route of that model (the
//! export orders those by `rank`). A member of a provider skipped for a missing key is kept aside
//! as skipped, so one chain can serve machines with different keys; anything else unknown is an
//! error naming `chain[i].targets[j]`.
//!
//! The order may come from the application's own environment instead (`targets_env =
//! "LLM_PROVIDER_ORDER"`): comma-separated provider names or target ids, read at every load (so a
//! reload re-reads it, and its `_FILE` twin, which a running process can change), with `targets`
//! as the default while the variable is unset or empty. There a name the application may list but
//! this machine cannot probe (no such provider, no key) is skipped with the reason, as the
//! application skips it; an id of a configured provider that is not one of its targets is an error.

use crate::config::{ConfigError, Env, ProviderConfig};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

/// `order_from` of a chain whose order is the file's `targets`.
pub const ORDER_FROM_CONFIG: &str = "config";

/// One `[[chain]]` as written in the file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawChain {
    name: String,
    #[serde(default)]
    targets: Vec<String>,
    targets_env: Option<String>,
    #[serde(default)]
    fallback_for_credit: BTreeMap<String, String>,
    ttft_slo: Option<String>,
    total_slo: Option<String>,
    tokens_per_day: Option<super::chain_cost::TokensPerDay>,
    #[serde(default)]
    requires: Vec<String>,
}

impl RawChain {
    /// A chain as the file would write it (`vigil run --demo` adds its own this way).
    pub fn new(name: impl Into<String>, targets: Vec<String>) -> Self {
        RawChain {
            name: name.into(),
            targets,
            targets_env: None,
            fallback_for_credit: BTreeMap::new(),
            ttft_slo: None,
            total_slo: None,
            tokens_per_day: None,
            requires: Vec::new(),
        }
    }

    /// The same chain taking its order from `var` when set (`targets_env`).
    pub fn with_targets_env(mut self, var: &str) -> Self {
        self.targets_env = Some(var.to_string());
        self
    }

    /// The same chain with `fallback` standing in for `member` while it is demoted for credit.
    pub fn with_fallback_for_credit(mut self, member: &str, fallback: &str) -> Self {
        self.fallback_for_credit.insert(member.to_string(), fallback.to_string());
        self
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

/// `fallback_for_credit`: a target that takes a member's place while the member's provider is
/// demoted for credit (`balance.demote_within`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CreditFallback {
    /// The member it stands in for.
    pub member: ChainMember,
    /// The target that moves ahead of it.
    pub fallback: ChainMember,
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
    /// Where the order came from: `config` (the `targets` list) or `env:VAR` (`targets_env`).
    pub order_from: String,
    /// Targets that move ahead of a member while it is demoted for credit.
    pub fallback_for_credit: Vec<CreditFallback>,
    /// `ttft_slo`: the worst-case time to a first token the chain must keep.
    pub ttft_slo: Option<Duration>,
    /// `total_slo`: the worst-case time to a complete answer the chain must keep.
    pub total_slo: Option<Duration>,
    /// `tokens_per_day`: the traffic the chain carries (the weekly summary's implied spend).
    pub tokens_per_day: Option<super::chain_cost::TokensPerDay>,
    /// `requires`: capabilities the chain's traffic needs; a member whose capability probe
    /// last failed one of them is demoted.
    pub requires: Vec<crate::vocab::capability::Capability>,
}

impl ChainConfig {
    /// A chain of `members` in the file's order, with no fallback and no SLO.
    pub fn new(name: impl Into<String>, members: Vec<ChainMember>) -> Self {
        ChainConfig {
            name: name.into(),
            members,
            skipped: Vec::new(),
            order_from: ORDER_FROM_CONFIG.to_string(),
            fallback_for_credit: Vec::new(),
            ttft_slo: None,
            total_slo: None,
            tokens_per_day: None,
            requires: Vec::new(),
        }
    }
}

impl ChainMember {
    /// Whether `t` is (one of) the target(s) this member names.
    pub fn matches(&self, t: &crate::vocab::target::Target) -> bool {
        t.provider == self.provider
            && t.model == self.model
            && (self.route.is_none() || self.route.as_deref() == t.route.as_deref())
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

/// The provider part of a target id (`openrouter` of `openrouter/openai/gpt-4o@Azure`).
fn provider_of(spelled: &str) -> &str {
    spelled.split(['/', '@']).next().unwrap_or_default()
}

/// What every chain is checked against: the configured targets and the providers skipped here.
struct Known<'a> {
    /// Every target id a member may use.
    members: Vec<ChainMember>,
    /// The providers with their keys.
    providers: &'a [Arc<ProviderConfig>],
    /// Providers skipped for their missing key: (name, variable).
    skipped: &'a [(String, String)],
}

impl Known<'_> {
    /// The member spelled `spelled`, if it is a configured target id.
    fn find(&self, spelled: &str) -> Option<&ChainMember> {
        self.members.iter().find(|k| k.spelled == spelled)
    }

    /// The variable whose absence skips the provider of `spelled`, if it is skipped.
    fn skipped_for(&self, spelled: &str) -> Option<&str> {
        let provider = provider_of(spelled);
        self.skipped.iter().find(|(n, _)| n == provider).map(|(_, var)| var.as_str())
    }

    /// Every configured target id, for errors.
    fn ids(&self) -> String {
        let mut ids: Vec<&str> = self.members.iter().map(|k| k.spelled.as_str()).collect();
        ids.dedup();
        if ids.is_empty() {
            "none".into()
        } else {
            ids.join(", ")
        }
    }
}

/// Resolves and checks every chain: names unique and non-empty, at least one target, each target
/// configured (or of a provider skipped for its key), none twice in one chain; the order read
/// from `targets_env` in `env` when the chain names a variable that is set.
pub fn validate(
    raw: Vec<RawChain>,
    providers: &[Arc<ProviderConfig>],
    skipped: &[(String, String)],
    env: &dyn Env,
) -> Result<Vec<ChainConfig>, ConfigError> {
    let known = Known { members: providers.iter().flat_map(|p| spellings(p)).collect(), providers, skipped };
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
        let (members, left_out, order_from) = match super::chain_env::order_from_env(i, c.targets_env.as_deref(), env)?
        {
            Some((var, items)) => {
                let (members, left_out) = resolve_env(i, &var, &items, &known)?;
                (members, left_out, format!("env:{var}"))
            }
            None => {
                if c.targets.is_empty() {
                    let message = match &c.targets_env {
                        Some(var) => format!("needs at least one target ({var} is not set either)"),
                        None => "needs at least one target".to_string(),
                    };
                    return Err(invalid(format!("chain[{i}].targets"), message));
                }
                let (members, left_out) = resolve_listed(i, &c.targets, &known)?;
                (members, left_out, ORDER_FROM_CONFIG.to_string())
            }
        };
        same_request(i, &members, providers)?;
        let slo = |key: &str, raw: &Option<String>| match raw {
            None => Ok(None),
            Some(s) => {
                super::parse::duration_in(&format!("chain[{i}].{key}"), s, Duration::from_millis(1), super::parse::HOUR)
                    .map(Some)
            }
        };
        let (ttft_slo, total_slo) = (slo("ttft_slo", &c.ttft_slo)?, slo("total_slo", &c.total_slo)?);
        out.push(ChainConfig {
            name,
            members,
            skipped: left_out,
            order_from,
            fallback_for_credit: fallbacks(i, &c.fallback_for_credit, &known)?,
            ttft_slo,
            total_slo,
            tokens_per_day: super::chain_cost::tokens_per_day(i, c.tokens_per_day)?,
            requires: super::capabilities::names(&format!("chain[{i}].requires"), &c.requires)?,
        });
    }
    Ok(out)
}

/// A chain fails over between targets answering the same request: embeddings targets never
/// share one with chat (or Responses API) targets.
fn same_request(i: usize, members: &[ChainMember], providers: &[Arc<ProviderConfig>]) -> Result<(), ConfigError> {
    let embeds = |m: &ChainMember| {
        providers.iter().any(|p| p.name == m.provider && p.endpoint == crate::config::Endpoint::Embeddings)
    };
    let Some(first) = members.first() else { return Ok(()) };
    match members.iter().find(|m| embeds(m) != embeds(first)) {
        Some(other) => Err(invalid(
            format!("chain[{i}].targets"),
            format!(
                "{} and {} answer different requests (one is an embeddings endpoint): a chain fails over \
                 between targets that answer the same request",
                first.spelled, other.spelled
            ),
        )),
        None => Ok(()),
    }
}

/// The `targets` list as written: every id configured (or of a skipped provider), none twice.
fn resolve_listed(
    i: usize,
    targets: &[String],
    known: &Known<'_>,
) -> Result<(Vec<ChainMember>, Vec<SkippedMember>), ConfigError> {
    let mut members: Vec<ChainMember> = Vec::new();
    let mut left_out = Vec::new();
    for (j, spelled) in targets.iter().enumerate() {
        let key = format!("chain[{i}].targets[{j}]");
        let spelled = spelled.trim();
        if let Some(m) = known.find(spelled) {
            if members.iter().any(|x| x.spelled == m.spelled) {
                return Err(invalid(key, format!("{spelled:?} is already in this chain")));
            }
            members.push(m.clone());
            continue;
        }
        if let Some(var) = known.skipped_for(spelled) {
            left_out.push(SkippedMember { target: spelled.to_string(), reason: format!("{var} is not set") });
            continue;
        }
        return Err(invalid(key, format!("unknown target {spelled:?} (configured: {})", known.ids())));
    }
    Ok((members, left_out))
}

/// The items of `var` as the application reads them: a target id is that target, a bare
/// provider name every model of that provider in configured order (each with every route); a
/// name this machine cannot probe (no such provider, no key) is skipped with the reason; an id of
/// a configured provider that is not one of its targets is an error. A target listed again
/// (`openai,openai/gpt-4o`) keeps its first place.
fn resolve_env(
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

/// `fallback_for_credit = { "member" = "fallback" }`: both configured target ids, not the same;
/// a pair naming a provider skipped here for its key is left out (it has nothing to move).
fn fallbacks(i: usize, raw: &BTreeMap<String, String>, known: &Known<'_>) -> Result<Vec<CreditFallback>, ConfigError> {
    let mut out = Vec::new();
    for (member, fallback) in raw {
        let key = format!("chain[{i}].fallback_for_credit.{member}");
        let (member, fallback) = (member.trim(), fallback.trim());
        if member == fallback {
            return Err(invalid(key, format!("{member:?} cannot stand in for itself")));
        }
        if known.skipped_for(member).is_some() || known.skipped_for(fallback).is_some() {
            continue;
        }
        let find = |spelled: &str| {
            known.find(spelled).cloned().ok_or_else(|| {
                invalid(key.clone(), format!("unknown target {spelled:?} (configured: {})", known.ids()))
            })
        };
        out.push(CreditFallback { member: find(member)?, fallback: find(fallback)? });
    }
    Ok(out)
}

#[cfg(test)]
pub(super) mod tests {
    use crate::config::Config;
    use std::collections::BTreeMap;

    /// Three providers, one with routes: the chain tests' (and `chain_env`'s) configuration.
    pub(in crate::config) const PROVIDERS: &str = r#"
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
    fn embeddings_and_chat_targets_never_share_a_chain() {
        let embed = r#"
[[provider]]
name = "embed"
kind = "openai"
base_url = "https://api.openai.com/v1"
api_key_env = "OPENAI_API_KEY"
endpoint = "embeddings"
models = ["text-embedding-3-small", "text-embedding-3-large"]
"#;
        let mixed = format!("{embed}[[chain]]\nname = \"c\"\ntargets = [\"embed/text-embedding-3-small\", \"openai/gpt-4o-2024-08-06\"]");
        let msg = load(&mixed, false).expect_err("refused");
        assert!(msg.starts_with("chain[0].targets: ") && msg.contains("embeddings endpoint"), "{msg}");
        let alike = format!("{embed}[[chain]]\nname = \"e\"\ntargets = [\"embed/text-embedding-3-small\", \"embed/text-embedding-3-large\"]");
        assert!(load(&alike, false).is_ok());
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
    fn fallback_for_credit_and_slos_are_resolved_and_checked() {
        let chain = |extra: &str| {
            format!("[[chain]]\nname = \"chat\"\ntargets = [\"openrouter/openai/gpt-4o\", \"anthropic/claude-sonnet-4-20250514\"]\n{extra}")
        };
        let c = load(
            &chain("ttft_slo = \"2500ms\"\nfallback_for_credit = { \"openrouter/openai/gpt-4o\" = \"openai/gpt-4o-2024-08-06\" }\n"),
            true,
        )
        .expect("valid");
        let f = &c.chains[0].fallback_for_credit;
        assert_eq!(f.len(), 1);
        assert_eq!(
            (f[0].member.provider.as_str(), f[0].fallback.spelled.as_str()),
            ("openrouter", "openai/gpt-4o-2024-08-06")
        );
        assert_eq!(c.chains[0].ttft_slo, Some(std::time::Duration::from_millis(2500)));
        assert_eq!(c.chains[0].total_slo, None);
        let c = load(&chain("total_slo = \"30s\"\n"), true).expect("valid");
        assert_eq!((c.chains[0].ttft_slo, c.chains[0].total_slo), (None, Some(std::time::Duration::from_secs(30))));
        let c = load(&chain(""), true).expect("valid");
        assert!(c.chains[0].fallback_for_credit.is_empty() && c.chains[0].ttft_slo.is_none());
        // A pair naming a provider without its key here has nothing to move.
        let c = load(
            &chain("fallback_for_credit = { \"openrouter/openai/gpt-4o\" = \"anthropic/claude-sonnet-4-20250514\" }\n"),
            false,
        )
        .expect("valid");
        assert!(c.chains[0].fallback_for_credit.is_empty());
        let e = load(&chain("fallback_for_credit = { \"openrouter/openai/gpt-4o\" = \"openai/gpt-5\" }\n"), true)
            .expect_err("unknown");
        assert!(
            e.starts_with("chain[0].fallback_for_credit.openrouter/openai/gpt-4o: unknown target \"openai/gpt-5\""),
            "{e}"
        );
        let e = load(&chain("fallback_for_credit = { \"openai/gpt-4\" = \"openai/gpt-4o-2024-08-06\" }\n"), true)
            .expect_err("unknown member");
        assert!(e.starts_with("chain[0].fallback_for_credit.openai/gpt-4: unknown target \"openai/gpt-4\""), "{e}");
        let e = load(
            &chain("fallback_for_credit = { \"openai/gpt-4o-2024-08-06\" = \"openai/gpt-4o-2024-08-06\" }\n"),
            true,
        )
        .expect_err("itself");
        assert!(e.ends_with("cannot stand in for itself"), "{e}");
        let e = load(&chain("fallback_for_credit = [\"openai/gpt-4o-2024-08-06\"]\n"), true).expect_err("shape");
        assert!(e.starts_with("chain[0].fallback_for_credit"), "{e}");
        for (slo, why) in
            [("\"soon\"", "is not a duration"), ("\"2h\"", "out of range"), ("\"0s\"", "greater than zero")]
        {
            for key in ["ttft_slo", "total_slo"] {
                let e = load(&chain(&format!("{key} = {slo}\n")), true).expect_err(slo);
                assert!(e.starts_with(&format!("chain[0].{key}: ")) && e.contains(why), "{e}");
            }
        }
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
