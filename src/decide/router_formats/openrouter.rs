//! `?format=openrouter`: per model served through OpenRouter with pinned routes, the request body's
//! `provider` object. OpenRouter is whatever provider the config makes it (by host or routes), so a
//! provider named `or-eu` is served like one named `openrouter`; two OpenRouter providers serving
//! one model id share its entry, their routes merged in `rank` order.

use super::meta;
use crate::decide::export::{TargetThresholds, Thresholds};
use crate::vocab::breaker::State;
use serde_json::{json, Map, Value};

/// Whether `t` is a pinned route of an OpenRouter provider configured here.
fn routed(doc: &Thresholds, t: &TargetThresholds) -> bool {
    t.key.route.is_some() && doc.providers.find(&t.key.provider).is_some_and(|p| p.openrouter)
}

/// Route names of `rows` in order, each once.
fn routes<'a>(rows: impl Iterator<Item = &'a &'a TargetThresholds>) -> Vec<&'a str> {
    let mut out: Vec<&str> = Vec::new();
    for r in rows.filter_map(|t| t.key.route.as_deref()) {
        if !out.contains(&r) {
            out.push(r);
        }
    }
    out
}

/// OpenRouter: per model the `provider` object — `order` of upstream hosts (pinned routes by rank,
/// open breakers left out and `ignore`d), with `allow_fallbacks` false while one of them is usable
/// and true when none is.
pub fn openrouter(doc: &Thresholds) -> Value {
    let mut models = Map::new();
    let mut names: Vec<&str> = doc.targets.iter().filter(|t| routed(doc, t)).map(|t| t.key.model.as_str()).collect();
    names.dedup();
    for m in names {
        let mut rows: Vec<&TargetThresholds> =
            doc.targets.iter().filter(|t| t.key.model == m && routed(doc, t)).collect();
        rows.sort_by_key(|t| t.rank);
        let usable = routes(rows.iter().filter(|t| t.breaker != State::Open));
        let ignore: Vec<&str> = routes(rows.iter().filter(|t| t.breaker == State::Open))
            .into_iter()
            .filter(|r| !usable.contains(r))
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
