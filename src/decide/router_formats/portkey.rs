//! `?format=portkey`: per chain a Portkey fallback config. Each target names its model through
//! Portkey's model catalog as `@<vigil provider name>/<model>`, pins its OpenRouter route (for any
//! provider that is OpenRouter, whatever its name) and gives up after its TTFT deadline.

use super::{meta, route_pin};
use crate::decide::export::{ChainEntry, Thresholds};
use serde_json::{json, Map, Value};

fn target(doc: &Thresholds, e: &ChainEntry) -> Value {
    let mut over = Map::new();
    over.insert("model".into(), format!("@{}/{}", e.key.provider, e.key.model).into());
    let openrouter = doc.providers.find(&e.key.provider).is_some_and(|p| p.openrouter);
    if let (Some(route), true) = (&e.key.route, openrouter) {
        over.insert("provider".into(), route_pin(route));
    }
    let mut t = Map::new();
    t.insert("override_params".into(), Value::Object(over));
    if let Some(ms) = e.failover_ttft_ms {
        t.insert("request_timeout".into(), json!(ms.ceil() as u64));
    }
    Value::Object(t)
}

/// Portkey: per chain `{"strategy": {"mode": "fallback"}, "targets": […]}` — the chain's `order`,
/// then its dropped targets (Portkey reaches them only when every usable one has failed, and a
/// chain whose every target is open keeps a config); chains with no target at all are left out.
pub fn portkey(doc: &Thresholds) -> Value {
    let mut configs = Map::new();
    for c in &doc.chains {
        let targets: Vec<Value> = c.order.iter().chain(&c.dropped).map(|e| target(doc, e)).collect();
        if !targets.is_empty() {
            configs.insert(c.name.clone(), json!({"strategy": {"mode": "fallback"}, "targets": targets}));
        }
    }
    json!({ "configs": configs, "vigil": meta(doc) })
}
