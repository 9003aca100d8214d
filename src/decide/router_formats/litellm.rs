//! `?format=litellm`: a config LiteLLM loads as it is, as `Router(model_list=…, **router_settings)`
//! or as the proxy's config file (the same two keys at its top).
//!
//! Every deployment says how to call its target — `model` with LiteLLM's provider prefix chosen by
//! what the provider is, `api_base` so LiteLLM calls the URL vigil probes, `api_key:
//! os.environ/<VAR>` (never the key) — and where it stands: `order` (LiteLLM sends a group's
//! traffic to the lowest `order` among deployments not cooling down), `stream_timeout` from the
//! TTFT deadline, OpenRouter's route pin in `extra_body`. A target whose breaker is open is kept,
//! after every other deployment of its group, in the one form LiteLLM itself puts into cooldown:
//! `mock_response: litellm.RateLimitError` answers its first pick at once with a 429 without
//! calling the provider, and `model_info.allowed_fails_policy` (no rate-limit failure allowed)
//! with `model_info.cooldown_time` (the seconds until vigil's trial probe) cools it down for as
//! long as vigil's breaker stays open, even when it is the only deployment of its group. LiteLLM
//! has no field that starts a deployment in cooldown; cooldowns live only in its routing cache.

use super::provider::RouterProvider;
use super::{meta, route_pin};
use crate::config::{ProviderKind, AZURE_DEFAULT_API_VERSION};
use crate::decide::export::Thresholds;
use crate::vocab::breaker::State;
use crate::vocab::target::TargetKey;
use serde_json::{json, Map, Value};

/// LiteLLM's mock answer for a target whose breaker is open: a 429 raised before any request.
pub const COOLDOWN_MOCK: &str = "litellm.RateLimitError";

/// One member of a model group.
struct Member<'a> {
    key: &'a TargetKey,
    failover_ttft_ms: Option<f64>,
    /// Seconds left until vigil's trial probe, when the breaker is open.
    open_for_s: Option<u64>,
}

/// LiteLLM's `provider/model` for a target of `p` (`None`: LiteLLM cannot call a plain HTTP target).
fn model(p: &RouterProvider, model: &str) -> Option<String> {
    let prefix = match p.kind {
        ProviderKind::Openai if p.openrouter => "openrouter",
        ProviderKind::Openai => "openai",
        ProviderKind::Anthropic => "anthropic",
        ProviderKind::Azure => "azure",
        ProviderKind::Gemini => "gemini",
        // Plain HTTP has no model; the cloud kinds' credentials (AWS keys, a service account)
        // are not an `api_key` LiteLLM could be pointed at, so they are not exported (docs/ROUTER.md).
        ProviderKind::Http | ProviderKind::Bedrock | ProviderKind::Vertex => return None,
    };
    (!model.is_empty()).then(|| format!("{prefix}/{model}"))
}

/// `api_base` (and, for Azure, `api_version`) so LiteLLM calls the URL vigil probes.
fn api_base(p: &RouterProvider, params: &mut Map<String, Value>) {
    let base = p.base_url.as_str().trim_end_matches('/');
    let value = match p.kind {
        // LiteLLM takes a base ending in /v1/messages as it is and appends /v1/messages to any other.
        ProviderKind::Anthropic if p.base_url.path().trim_end_matches('/').ends_with("/v1") => {
            format!("{base}/messages")
        }
        ProviderKind::Azure => {
            let version = p.base_url.query_pairs().find(|(k, _)| k == "api-version").map(|(_, v)| v.into_owned());
            params.insert("api_version".into(), version.unwrap_or_else(|| AZURE_DEFAULT_API_VERSION.into()).into());
            let mut resource = p.base_url.clone();
            resource.set_query(None);
            resource.as_str().trim_end_matches('/').to_string()
        }
        _ => base.to_string(),
    };
    params.insert("api_base".into(), value.into());
}

fn seconds(ms: f64) -> f64 {
    // Rounded up to the millisecond so the timeout is never shorter than the deadline.
    ms.ceil() / 1000.0
}

/// One LiteLLM deployment of `m` in model group `group` at `order`; `None` when LiteLLM cannot call it.
fn deployment(group: &str, order: usize, m: &Member<'_>, p: &RouterProvider) -> Option<Value> {
    let mut params = Map::new();
    params.insert("model".into(), model(p, &m.key.model)?.into());
    api_base(p, &mut params);
    params.insert("api_key".into(), format!("os.environ/{}", p.key_env).into());
    params.insert("order".into(), order.into());
    let embeddings = p.endpoint == crate::config::Endpoint::Embeddings;
    if let Some(ms) = m.failover_ttft_ms {
        // An embedding is one whole answer (its TTFT is its last byte): LiteLLM's `timeout`, not
        // the streaming one.
        params.insert(if embeddings { "timeout" } else { "stream_timeout" }.into(), seconds(ms).into());
    }
    if let (Some(route), true) = (&m.key.route, p.openrouter) {
        params.insert("extra_body".into(), json!({ "provider": route_pin(route) }));
    }
    let mut info = Map::new();
    info.insert("id".into(), format!("{group}|{}", m.key.target).into());
    info.insert("vigil_target".into(), m.key.target.to_string().into());
    if embeddings {
        // What LiteLLM's health checks and `/model/info` read to call it as an embedding model.
        info.insert("mode".into(), "embedding".into());
    }
    if let Some(s) = m.open_for_s {
        params.insert("mock_response".into(), COOLDOWN_MOCK.into());
        info.insert("cooldown_time".into(), s.into());
        info.insert("allowed_fails_policy".into(), json!({"RateLimitErrorAllowedFails": 0}));
    }
    Some(json!({"model_name": group, "litellm_params": params, "model_info": info}))
}

/// Seconds until the trial probe of target `id` (at least 1), or the breaker's open time.
fn open_for(doc: &Thresholds, id: &str) -> u64 {
    let at = doc.targets.iter().find(|t| t.key.target == id).and_then(|t| t.next_half_open);
    let left = at.map(|at| ((at - doc.generated_at).num_milliseconds().max(0) as u64).div_ceil(1000));
    left.unwrap_or(doc.breaker.open_for_s).max(1)
}

/// The deployments of one group, `order`ed 1, 2, … as listed; members LiteLLM cannot call are left out.
fn group(doc: &Thresholds, name: &str, members: &[Member<'_>]) -> Vec<Value> {
    let mut out = Vec::new();
    for m in members {
        let Some(p) = doc.providers.find(&m.key.provider) else { continue };
        if let Some(d) = deployment(name, out.len() + 1, m, p) {
            out.push(d);
        }
    }
    out
}

/// LiteLLM: a model group per chain (its `order`, then its dropped targets in cooldown form) and per
/// model id (its targets by `rank`, open ones last in cooldown form); `fallbacks` from each chain to
/// the model groups of its later members; `allowed_fails`, `allowed_fails_policy` (per error class)
/// and `cooldown_time` from the breaker.
pub fn litellm(doc: &Thresholds) -> Value {
    let mut model_list = Vec::new();
    let mut fallbacks = Vec::new();
    for c in &doc.chains {
        let members: Vec<Member<'_>> = c
            .order
            .iter()
            .map(|e| Member { key: &e.key, failover_ttft_ms: e.failover_ttft_ms, open_for_s: None })
            .chain(c.dropped.iter().map(|e| Member {
                key: &e.key,
                failover_ttft_ms: e.failover_ttft_ms,
                open_for_s: Some(open_for(doc, &e.key.target)),
            }))
            .collect();
        model_list.extend(group(doc, &c.name, &members));
        let first = members.first().map(|m| m.key.model.as_str());
        let mut later: Vec<String> = Vec::new();
        for m in members.iter().skip(1) {
            if !later.iter().any(|l| *l == m.key.model) && Some(m.key.model.as_str()) != first {
                later.push(m.key.model.to_string());
            }
        }
        later.retain(|m| doc.targets.iter().any(|t| &t.key.model == m && callable(doc, &t.key)));
        if !later.is_empty() {
            fallbacks.push(json!({ c.name.clone(): later }));
        }
    }
    let mut models: Vec<&str> = doc.targets.iter().map(|t| t.key.model.as_str()).filter(|m| !m.is_empty()).collect();
    models.dedup();
    for m in models {
        let mut rows: Vec<_> = doc.targets.iter().filter(|t| t.key.model == m).collect();
        rows.sort_by_key(|t| t.rank);
        let members: Vec<Member<'_>> = rows
            .iter()
            .map(|t| Member {
                key: &t.key,
                failover_ttft_ms: t.failover_ttft_ms,
                open_for_s: (t.breaker == State::Open).then(|| open_for(doc, &t.key.target)),
            })
            .collect();
        model_list.extend(group(doc, m, &members));
    }
    json!({
        "model_list": model_list,
        "router_settings": {
            "fallbacks": fallbacks,
            // LiteLLM cools a deployment down when its failures exceed `allowed_fails`; vigil's
            // breaker opens at `consecutive_failures`.
            "allowed_fails": doc.breaker.consecutive_failures.saturating_sub(1),
            "allowed_fails_policy": allowed_fails_policy(doc),
            "cooldown_time": doc.breaker.open_for_s,
        },
        "vigil": meta(doc),
    })
}

/// LiteLLM's allowance per error class, as vigil's breaker counts each: a 5xx or a timeout counts at
/// once (`allowed_fails` as above); 429s are excused until `rate_limit_trips` came in a row, then
/// count like any failure, so a deployment may take `rate_limit_trips − 1` more of them.
fn allowed_fails_policy(doc: &Thresholds) -> Value {
    let fails = doc.breaker.consecutive_failures.saturating_sub(1);
    let rate_limited = fails.saturating_add(doc.breaker.rate_limit_trips.saturating_sub(1));
    json!({
        "InternalServerErrorAllowedFails": fails,
        "TimeoutErrorAllowedFails": fails,
        "RateLimitErrorAllowedFails": rate_limited,
    })
}

/// Whether LiteLLM can call target `key` (its provider is configured here and speaks a model API).
fn callable(doc: &Thresholds, key: &TargetKey) -> bool {
    doc.providers.find(&key.provider).is_some_and(|p| model(p, &key.model).is_some())
}
