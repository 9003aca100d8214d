//! The thresholds document rendered for a router: vigil's own JSON or YAML, or a fragment a
//! router reads natively — LiteLLM (`model_list` + `router_settings`), OpenRouter (the request
//! `provider` object per model) and Portkey (a fallback config per chain). `GET /v1/thresholds`
//! and `vigil thresholds` both render through [`render`], so the two never differ.

use crate::decide::export::{ChainEntry, Thresholds};
use serde_json::{json, Map, Value};
use std::str::FromStr;

/// A rendering of the document.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// vigil's document, JSON.
    Json,
    /// vigil's document, YAML.
    Yaml,
    /// LiteLLM router config fragment (YAML).
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
    ("thresholds.json", include_str!("../../docs/schema/thresholds.json")),
    ("litellm.json", include_str!("../../docs/schema/litellm.json")),
    ("openrouter.json", include_str!("../../docs/schema/openrouter.json")),
    ("portkey.json", include_str!("../../docs/schema/portkey.json")),
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
        Format::Yaml => serde_norway::to_string(doc).map_err(|e| err(&e))?,
        Format::Litellm => serde_norway::to_string(&litellm(doc)).map_err(|e| err(&e))?,
        Format::Openrouter => serde_json::to_string_pretty(&openrouter(doc)).map_err(|e| err(&e))? + "\n",
        Format::Portkey => serde_json::to_string_pretty(&portkey(doc)).map_err(|e| err(&e))? + "\n",
    };
    Ok(text.into_bytes())
}

/// LiteLLM's provider prefix for a vigil provider name (OpenAI-compatible otherwise).
fn litellm_model(provider: &str, model: &str) -> String {
    let prefix = match provider {
        "openrouter" | "openai" | "anthropic" | "groq" | "deepinfra" | "gemini" => provider,
        "together" => "together_ai",
        _ => "openai",
    };
    format!("{prefix}/{model}")
}

fn seconds(ms: Option<f64>) -> Option<f64> {
    // Rounded up to the millisecond so the timeout is never shorter than the deadline.
    ms.map(|v| (v.ceil()) / 1000.0)
}

/// One LiteLLM deployment of `entry` in model group `group` at `order`.
fn deployment(group: &str, order: usize, e: &ChainEntry) -> Value {
    let mut params = Map::new();
    params.insert("model".into(), litellm_model(&e.key.provider, &e.key.model).into());
    params.insert("order".into(), order.into());
    if let Some(s) = seconds(e.failover_ttft_ms) {
        params.insert("stream_timeout".into(), s.into());
    }
    if let (Some(route), "openrouter") = (&e.key.route, e.key.provider.as_str()) {
        // Pin the upstream host as OpenRouter's provider routing does.
        params.insert("extra_body".into(), json!({"provider": {"order": [route], "allow_fallbacks": false}}));
    }
    json!({
        "model_name": group,
        "litellm_params": params,
        "model_info": {"id": format!("{group}|{}", e.key.target), "vigil_target": e.key.target},
    })
}

/// Chain-like entries for the targets of one model, in rank order, open breakers left out.
fn model_entries(doc: &Thresholds, model: &str) -> Vec<ChainEntry> {
    let mut rows: Vec<_> = doc
        .targets
        .iter()
        .filter(|t| t.key.model == model && t.breaker != crate::vocab::breaker::State::Open)
        .collect();
    rows.sort_by_key(|t| t.rank);
    rows.iter()
        .map(|t| ChainEntry {
            key: t.key.clone(),
            position: t.rank,
            status: crate::decide::export::ChainStatus::Healthy,
            breaker: t.breaker,
            flapping: t.flapping,
            reason: None,
            failover_ttfb_ms: t.failover_ttfb_ms,
            failover_ttft_ms: t.failover_ttft_ms,
            provisional: t.provisional,
        })
        .collect()
}

/// LiteLLM: a model group per chain (deployments `order`ed as the chain stands now, open ones
/// left out) and per model id (ordered by `rank`); `fallbacks` from each chain to the model groups
/// of its later members; cooldown from the breaker.
pub fn litellm(doc: &Thresholds) -> Value {
    let mut model_list = Vec::new();
    let mut fallbacks = Vec::new();
    for c in &doc.chains {
        for (i, e) in c.order.iter().enumerate() {
            model_list.push(deployment(&c.name, i + 1, e));
        }
        let mut later: Vec<String> = Vec::new();
        for e in c.order.iter().skip(1) {
            if !later.contains(&e.key.model) && Some(&e.key.model) != c.order.first().map(|f| &f.key.model) {
                later.push(e.key.model.clone());
            }
        }
        if !later.is_empty() {
            fallbacks.push(json!({ c.name.clone(): later }));
        }
    }
    let mut models: Vec<&str> = doc.targets.iter().map(|t| t.key.model.as_str()).filter(|m| !m.is_empty()).collect();
    models.dedup();
    for m in models {
        for (i, e) in model_entries(doc, m).iter().enumerate() {
            model_list.push(deployment(m, i + 1, e));
        }
    }
    json!({
        "model_list": model_list,
        "router_settings": {
            "fallbacks": fallbacks,
            // A deployment that failed this many times is cooled down for the breaker's open time.
            "allowed_fails": doc.breaker.consecutive_failures,
            "cooldown_time": doc.breaker.open_for_s,
        },
        "vigil": meta(doc),
    })
}

fn meta(doc: &Thresholds) -> Value {
    json!({
        "schema_version": doc.schema_version,
        "region": doc.region,
        "generated_at": doc.generated_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "expires_at": doc.expires_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    })
}

/// OpenRouter: per model served through OpenRouter, the request's `provider` object — `order`
/// of upstream hosts (pinned routes by rank, open breakers left out and `ignore`d), with
/// `allow_fallbacks` false while one of them is healthy and true when none is.
pub fn openrouter(doc: &Thresholds) -> Value {
    let mut models = Map::new();
    let mut names: Vec<&str> = doc
        .targets
        .iter()
        .filter(|t| t.key.provider == "openrouter" && t.key.route.is_some())
        .map(|t| t.key.model.as_str())
        .collect();
    names.dedup();
    for m in names {
        let mut rows: Vec<_> =
            doc.targets.iter().filter(|t| t.key.provider == "openrouter" && t.key.model == m).collect();
        rows.sort_by_key(|t| t.rank);
        let usable: Vec<&str> = rows
            .iter()
            .filter(|t| t.breaker != crate::vocab::breaker::State::Open)
            .filter_map(|t| t.key.route.as_deref())
            .collect();
        let ignore: Vec<&str> = rows
            .iter()
            .filter(|t| t.breaker == crate::vocab::breaker::State::Open)
            .filter_map(|t| t.key.route.as_deref())
            .collect();
        let mut provider = Map::new();
        provider.insert("order".into(), json!(usable));
        provider.insert("allow_fallbacks".into(), json!(usable.is_empty()));
        if !ignore.is_empty() {
            provider.insert("ignore".into(), json!(ignore));
        }
        models.insert(m.to_string(), json!({ "provider": provider }));
    }
    json!({ "models": models, "vigil": meta(doc) })
}

/// Portkey: per chain a fallback config — `targets` in the order to use now, each with the
/// model (`@provider/model`) and `request_timeout` from its TTFT deadline (ms).
pub fn portkey(doc: &Thresholds) -> Value {
    let mut configs = Map::new();
    for c in &doc.chains {
        let targets: Vec<Value> = c
            .order
            .iter()
            .map(|e| {
                let mut t = Map::new();
                let mut over = Map::new();
                over.insert("model".into(), format!("@{}/{}", e.key.provider, e.key.model).into());
                if let (Some(route), "openrouter") = (&e.key.route, e.key.provider.as_str()) {
                    over.insert("provider".into(), json!({"order": [route], "allow_fallbacks": false}));
                }
                t.insert("override_params".into(), Value::Object(over));
                if let Some(ms) = e.failover_ttft_ms {
                    t.insert("request_timeout".into(), json!(ms.ceil() as u64));
                }
                Value::Object(t)
            })
            .collect();
        configs.insert(c.name.clone(), json!({"strategy": {"mode": "fallback"}, "targets": targets}));
    }
    json!({ "configs": configs, "vigil": meta(doc) })
}
