//! OpenRouter's published prices, read: one model's endpoints and the price of a route.

use crate::config::{Price, ProviderConfig, ProviderKind};
use serde::{Deserialize, Serialize};

/// One upstream host serving a model, with its per-token prices.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EndpointPrice {
    /// Host name as OpenRouter routes to it (`DeepInfra`).
    pub provider_name: String,
    /// Endpoint tag (`deepinfra/fp8`), when given.
    pub tag: Option<String>,
    /// USD per million input tokens.
    pub input_per_mtok: f64,
    /// USD per million output tokens.
    pub output_per_mtok: f64,
}

fn per_mtok(per_token: &str) -> Option<f64> {
    per_token.trim().parse::<f64>().ok().map(|v| v * 1e6).filter(|v| v.is_finite() && *v >= 0.0)
}

/// Parses an endpoints answer; endpoints with unreadable prices are left out.
pub fn parse_endpoints(body: &[u8]) -> Result<Vec<EndpointPrice>, serde_json::Error> {
    let doc: EndpointsDoc = serde_json::from_slice(body)?;
    Ok(doc
        .data
        .endpoints
        .into_iter()
        .filter_map(|e| {
            Some(EndpointPrice {
                input_per_mtok: per_mtok(&e.pricing.prompt)?,
                output_per_mtok: per_mtok(&e.pricing.completion)?,
                provider_name: e.provider_name,
                tag: e.tag,
            })
        })
        .collect())
}

/// The price of a target among a model's endpoints: its pinned route's, or without a route the
/// cheapest (OpenRouter's default routing prefers the lowest price).
pub fn price_for(route: Option<&str>, endpoints: &[EndpointPrice]) -> Option<Price> {
    let chosen = match route {
        Some(r) => endpoints.iter().find(|e| {
            e.provider_name.eq_ignore_ascii_case(r)
                || e.tag.as_deref().is_some_and(|t| t.eq_ignore_ascii_case(r) || t.split('/').next() == Some(r))
        }),
        None => endpoints.iter().min_by(|a, b| a.input_per_mtok.total_cmp(&b.input_per_mtok)),
    }?;
    Some(Price { input_per_mtok: chosen.input_per_mtok, output_per_mtok: chosen.output_per_mtok })
}

/// Whether a provider is OpenRouter (by host, or because it pins routes, which only OpenRouter does).
pub fn is_openrouter(p: &ProviderConfig) -> bool {
    p.kind == ProviderKind::Openai
        && (p.base_url.host_str().is_some_and(|h| h == "openrouter.ai" || h.ends_with(".openrouter.ai"))
            || !p.routes.is_empty())
}

#[derive(Deserialize)]
struct EndpointsDoc {
    data: EndpointsData,
}

#[derive(Deserialize)]
struct EndpointsData {
    endpoints: Vec<RawEndpoint>,
}

#[derive(Deserialize)]
struct RawEndpoint {
    provider_name: String,
    #[serde(default)]
    tag: Option<String>,
    pricing: RawPricing,
}

/// OpenRouter sends prices as decimal strings in USD per token.
#[derive(Deserialize)]
struct RawPricing {
    prompt: String,
    completion: String,
}
