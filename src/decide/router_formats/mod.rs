//! The thresholds document rendered for a router: vigil's own JSON or YAML, or a document a
//! router loads as it is — LiteLLM (`model_list` + `router_settings`), OpenRouter (the request
//! `provider` object per model) and Portkey (a fallback config per chain). `GET /v1/thresholds`
//! and `vigil thresholds` both render through [`render`], so the two never differ. Every format
//! knows a provider by what it is ([`provider`]), never by its name.

pub mod litellm;
pub mod openrouter;
pub mod portkey;
pub mod provider;
pub mod yaml;

use crate::decide::export::Thresholds;
use serde_json::{json, Value};
use std::str::FromStr;

/// A rendering of the document.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// vigil's document, JSON.
    Json,
    /// vigil's document, YAML.
    Yaml,
    /// LiteLLM router config (YAML): `Router(model_list=…, **router_settings)` or the proxy's file.
    Litellm,
    /// OpenRouter `provider` objects per model (JSON).
    Openrouter,
    /// Portkey fallback configs per chain (JSON).
    Portkey,
}

impl FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "json" => Ok(Format::Json),
            "yaml" => Ok(Format::Yaml),
            "litellm" => Ok(Format::Litellm),
            "openrouter" => Ok(Format::Openrouter),
            "portkey" => Ok(Format::Portkey),
            other => Err(format!("unknown format {other:?} (json, yaml, litellm, openrouter, portkey)")),
        }
    }
}

impl Format {
    /// Its `Content-Type`.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Yaml | Format::Litellm => "application/yaml",
            _ => "application/json",
        }
    }
}

/// Every schema, by the name it is served under.
pub const SCHEMAS: [(&str, &str); 4] = [
    ("thresholds.json", include_str!("../../../docs/schema/thresholds.json")),
    ("litellm.json", include_str!("../../../docs/schema/litellm.json")),
    ("openrouter.json", include_str!("../../../docs/schema/openrouter.json")),
    ("portkey.json", include_str!("../../../docs/schema/portkey.json")),
];

/// Rendering failed (a serializer refused the value; not expected in practice).
#[derive(Debug, thiserror::Error)]
#[error("rendering the thresholds as {format:?}: {message}")]
pub struct RenderError {
    /// The format asked for.
    pub format: Format,
    /// What the serializer said.
    pub message: String,
}

/// The bytes of `doc` in `format`; deterministic, so equal documents give equal bytes.
pub fn render(doc: &Thresholds, format: Format) -> Result<Vec<u8>, RenderError> {
    let err = |e: &dyn std::fmt::Display| RenderError { format, message: e.to_string() };
    let text = match format {
        Format::Json => serde_json::to_string_pretty(doc).map_err(|e| err(&e))? + "\n",
        Format::Yaml => yaml::to_string(&serde_json::to_value(doc).map_err(|e| err(&e))?),
        Format::Litellm => yaml::to_string(&litellm::litellm(doc)),
        Format::Openrouter => serde_json::to_string_pretty(&openrouter::openrouter(doc)).map_err(|e| err(&e))? + "\n",
        Format::Portkey => serde_json::to_string_pretty(&portkey::portkey(doc)).map_err(|e| err(&e))? + "\n",
    };
    Ok(text.into_bytes())
}

/// The `vigil` object every router-native format carries, so a consumer can refuse a stale one.
pub(crate) fn meta(doc: &Thresholds) -> Value {
    json!({
        "schema_version": doc.schema_version,
        "region": doc.region,
        "generated_at": doc.generated_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "expires_at": doc.expires_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    })
}

/// OpenRouter's `provider` object pinning one upstream host.
pub(crate) fn route_pin(route: &str) -> Value {
    json!({"order": [route], "allow_fallbacks": false})
}

#[cfg(test)]
mod tests {
    use super::provider::RouterProvider;
    use super::*;
    use crate::config::chain::{ChainConfig, ChainMember};
    use crate::config::{ProviderConfig, ProviderKind};
    use crate::decide::baseline::Baseline;
    use crate::decide::export::{build, ExportParams, TargetStats};
    use crate::vocab::breaker::State;
    use crate::vocab::target::Target;
    use secrecy::SecretString;

    const GPT: &str = "openai/gpt-4o";
    const SECRET: &str = "sk-test-never-printed";

    fn provider(name: &str, kind: ProviderKind, base: &str, routes: &[&str], key_env: Option<&str>) -> ProviderConfig {
        ProviderConfig {
            routes: routes.iter().map(|r| r.to_string()).collect(),
            api_key_env: key_env.map(String::from),
            api_key: Some(SecretString::from(SECRET)),
            ..ProviderConfig::new(name, kind, url::Url::parse(base).expect("url"))
        }
    }

    fn stats(provider: &str, model: &str, route: Option<&str>, ttft_p95: f64) -> TargetStats {
        let b = |p95: f64| Baseline { count: 1000, p50: Some(p95 / 2.0), p95: Some(p95), p99: Some(p95 * 1.5) };
        TargetStats {
            target: Target::new(provider.into(), model.into(), route.map(Into::into), "eu-west-1".into()),
            ttfb: b(ttft_p95 / 2.0),
            ttft: b(ttft_p95),
            tokens_per_s: b(80.0),
            probes: 1000,
            errors: 0,
            breaker: State::Closed,
            next_half_open: None,
            cost_per_probe_usd: None,
            ttfb_p95_bound: None,
            ttft_p95_bound: None,
            health: crate::vocab::health::Health { state: crate::vocab::health::HealthState::Ok, ..Default::default() },
            price: None,
            ratelimit: None,
            workloads: Vec::new(),
        }
    }

    fn member(provider: &str, model: &str, route: Option<&str>) -> ChainMember {
        let spelled = format!("{provider}/{model}{}", route.map(|r| format!("@{r}")).unwrap_or_default());
        ChainMember { spelled, provider: provider.into(), model: model.into(), route: route.map(String::from) }
    }

    /// Renamed providers: `or-eu` is OpenRouter by host, `lab` by its routes; `openrouter` is a
    /// plain OpenAI-compatible API despite its name; `claude` speaks Anthropic, `az` Azure, `gem` Gemini.
    fn fixture() -> (ExportParams, Vec<TargetStats>) {
        let configs = [
            provider(
                "or-eu",
                ProviderKind::Openai,
                "https://openrouter.ai/api/v1",
                &["OpenAI", "Azure"],
                Some("OR_EU_KEY"),
            ),
            provider("lab", ProviderKind::Openai, "http://127.0.0.1:9/api/v1", &["Lepton"], None),
            provider("openrouter", ProviderKind::Openai, "https://api.openai.com/v1/", &[], Some("OPENAI_KEY")),
            provider("claude", ProviderKind::Anthropic, "https://api.anthropic.com/v1", &[], Some("CLAUDE_KEY")),
            provider("az", ProviderKind::Azure, "https://res.openai.azure.com?api-version=2025-01-01", &[], Some("AZ")),
            provider("gem", ProviderKind::Gemini, "https://generativelanguage.googleapis.com/v1beta", &[], Some("G")),
        ];
        let params = ExportParams {
            chains: vec![ChainConfig {
                name: "chat".into(),
                members: vec![
                    member("or-eu", GPT, None),
                    member("openrouter", "gpt-4o-2024-08-06", None),
                    member("claude", "claude-sonnet-4-20250514", None),
                ],
                ..ChainConfig::new("", vec![])
            }],
            providers: configs.iter().map(RouterProvider::from).collect(),
            ..crate::decide::export::tests::params()
        };
        let targets = vec![
            stats("or-eu", GPT, Some("OpenAI"), 400.0),
            stats("or-eu", GPT, Some("Azure"), 500.0),
            stats("lab", GPT, Some("Lepton"), 600.0),
            stats("openrouter", "gpt-4o-2024-08-06", None, 450.0),
            stats("claude", "claude-sonnet-4-20250514", None, 700.0),
            stats("az", "gpt4o-deployment", None, 300.0),
            stats("gem", "gemini-2.0-flash", None, 350.0),
        ];
        (params, targets)
    }

    fn deployments<'a>(doc: &'a Value, group: &str) -> Vec<&'a Value> {
        let list = doc["model_list"].as_array().map(Vec::as_slice).unwrap_or_default();
        list.iter().filter(|d| d["model_name"] == group).collect()
    }

    #[test]
    fn openrouter_is_served_by_what_it_is_in_every_format() {
        let (params, targets) = fixture();
        let doc = build(&params, &targets);

        let or = openrouter::openrouter(&doc);
        let models = or["models"].as_object().expect("models");
        assert_eq!(models.keys().collect::<Vec<_>>(), [GPT], "only OpenRouter providers with routes: {or}");
        // or-eu's two routes and lab's one, by rank (TTFT P95 400, 500, 600 ms).
        assert_eq!(
            or["models"][GPT]["provider"],
            json!({"order": ["OpenAI", "Azure", "Lepton"], "allow_fallbacks": false})
        );

        let pk = portkey::portkey(&doc);
        let t = &pk["configs"]["chat"]["targets"];
        assert_eq!(t[0]["override_params"], json!({"model": "@or-eu/openai/gpt-4o", "provider": route_pin("OpenAI")}));
        assert_eq!(t[1]["override_params"], json!({"model": "@or-eu/openai/gpt-4o", "provider": route_pin("Azure")}));
        assert_eq!(t[2]["override_params"], json!({"model": "@openrouter/gpt-4o-2024-08-06"}), "no pin by name");
        assert_eq!(t[0]["request_timeout"], 800);

        let ll = litellm::litellm(&doc);
        let chat = deployments(&ll, "chat");
        assert_eq!(chat.len(), 4);
        assert_eq!(
            chat[0]["litellm_params"],
            json!({"model": "openrouter/openai/gpt-4o", "api_base": "https://openrouter.ai/api/v1",
                   "api_key": "os.environ/OR_EU_KEY", "order": 1, "stream_timeout": 0.8,
                   "extra_body": {"provider": route_pin("OpenAI")}})
        );
        assert_eq!(
            chat[2]["litellm_params"],
            json!({"model": "openai/gpt-4o-2024-08-06", "api_base": "https://api.openai.com/v1",
                   "api_key": "os.environ/OPENAI_KEY", "order": 3, "stream_timeout": 0.9})
        );
        assert_eq!(chat[3]["litellm_params"]["model"], "anthropic/claude-sonnet-4-20250514");
        assert_eq!(chat[3]["litellm_params"]["api_base"], "https://api.anthropic.com/v1/messages");
        assert_eq!(
            chat[3]["model_info"],
            json!({"id": "chat|claude/claude-sonnet-4-20250514",
                                                 "vigil_target": "claude/claude-sonnet-4-20250514"})
        );
        let gpt = deployments(&ll, GPT);
        let lab = &gpt[2]["litellm_params"];
        assert_eq!((lab["model"].as_str(), lab["order"].as_u64()), (Some("openrouter/openai/gpt-4o"), Some(3)));
        assert_eq!(lab["api_key"], "os.environ/LAB_API_KEY", "a key without a variable: <NAME>_API_KEY");
        assert_eq!(lab["extra_body"]["provider"], route_pin("Lepton"));
        let az = &deployments(&ll, "gpt4o-deployment")[0]["litellm_params"];
        assert_eq!(
            (az["model"].as_str(), az["api_base"].as_str(), az["api_version"].as_str()),
            (Some("azure/gpt4o-deployment"), Some("https://res.openai.azure.com"), Some("2025-01-01"))
        );
        let gem = &deployments(&ll, "gemini-2.0-flash")[0]["litellm_params"];
        assert_eq!(gem["api_base"], "https://generativelanguage.googleapis.com/v1beta");
        assert_eq!(
            ll["router_settings"],
            json!({"fallbacks": [{"chat": ["gpt-4o-2024-08-06", "claude-sonnet-4-20250514"]}],
                   "allowed_fails": 1, "cooldown_time": 300,
                   "allowed_fails_policy": {"InternalServerErrorAllowedFails": 1, "TimeoutErrorAllowedFails": 1,
                                            "RateLimitErrorAllowedFails": 3}})
        );
        for format in [Format::Json, Format::Yaml, Format::Litellm, Format::Openrouter, Format::Portkey] {
            let text = String::from_utf8(render(&doc, format).expect("renders")).expect("utf-8");
            assert!(!text.contains(SECRET), "{format:?} carries a key");
        }
    }

    #[test]
    fn an_open_breaker_stays_in_its_groups_in_the_form_litellm_cools_down() {
        let (params, mut targets) = fixture();
        targets.retain(|t| t.target.provider != "lab");
        for t in targets.iter_mut().filter(|t| t.target.provider == "or-eu") {
            t.breaker = State::Open;
            t.next_half_open = Some(params.generated_at + chrono::Duration::milliseconds(239_400));
        }
        let doc = build(&params, &targets);
        let ll = litellm::litellm(&doc);
        let gpt = deployments(&ll, GPT);
        assert_eq!(gpt.len(), 2, "the model group keeps its only targets: {ll}");
        for (i, d) in gpt.iter().enumerate() {
            assert_eq!(d["litellm_params"]["mock_response"], litellm::COOLDOWN_MOCK);
            assert_eq!(d["litellm_params"]["order"], i + 1);
            assert_eq!(d["litellm_params"]["api_base"], "https://openrouter.ai/api/v1", "still callable as it was");
            assert_eq!(d["model_info"]["cooldown_time"], 240, "until the trial probe, rounded up");
            assert_eq!(d["model_info"]["allowed_fails_policy"], json!({"RateLimitErrorAllowedFails": 0}));
        }
        let chat = deployments(&ll, "chat");
        let order: Vec<(&str, bool)> = chat
            .iter()
            .map(|d| {
                (
                    d["model_info"]["vigil_target"].as_str().unwrap_or(""),
                    d["litellm_params"].get("mock_response").is_some(),
                )
            })
            .collect();
        assert_eq!(
            order,
            [
                ("openrouter/gpt-4o-2024-08-06", false),
                ("claude/claude-sonnet-4-20250514", false),
                ("or-eu/openai/gpt-4o@OpenAI", true),
                ("or-eu/openai/gpt-4o@Azure", true)
            ],
            "usable first, open ones after them"
        );
        let or = openrouter::openrouter(&doc);
        assert_eq!(
            or["models"][GPT]["provider"],
            json!({"order": [], "allow_fallbacks": true, "ignore": ["OpenAI", "Azure"]})
        );
        let pk = portkey::portkey(&doc);
        assert_eq!(pk["configs"]["chat"]["targets"].as_array().map(Vec::len), Some(4), "open ones last, not removed");
    }

    #[test]
    fn yaml_renderings_quote_timestamps() {
        let (params, targets) = fixture();
        let doc = build(&params, &targets);
        for format in [Format::Yaml, Format::Litellm] {
            let text = String::from_utf8(render(&doc, format).expect("renders")).expect("utf-8");
            assert!(text.contains("generated_at: \"2026-11-30T12:00:00Z\"\n"), "{format:?}:\n{text}");
            assert!(text.contains("expires_at: \"2026-11-30T12:03:00Z\"\n"), "{format:?}:\n{text}");
            let back: Value = serde_norway::from_str(&text).expect("reads back");
            assert!(back.is_object());
        }
        let back: Value = serde_norway::from_slice(&render(&doc, Format::Yaml).expect("yaml")).expect("yaml");
        assert_eq!(back, serde_json::to_value(&doc).expect("json"), "the YAML is the JSON document");
    }
}
