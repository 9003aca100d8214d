//! OpenAI embeddings (`endpoint = "embeddings"` on `kind = "openai"`): one `POST
//! {base}/embeddings` whose answer is a single JSON document, timed to its last byte (the
//! vector is the first and only answer, so it is the sample's TTFT too).

use super::as_u32;
use super::error_signal;
use super::join;
use super::json_post;
use super::system_prompt;
use super::Adapter;
use super::ProbeParams;
use super::RequestSpec;
use super::Signals;
use super::Usage;
use crate::io::probe::sse::SseEvent;
use serde_json::{json, Value};

/// Adapter for `POST {base}/embeddings`.
pub struct Embeddings;

impl Adapter for Embeddings {
    fn request(&self, p: &ProbeParams<'_>) -> Result<RequestSpec, String> {
        let url = join(&p.provider.base_url, "embeddings")?;
        // Nonce first, as in every probe: no embedding cache can answer it.
        let body = json!({"model": p.model, "input": system_prompt(p.nonce)});
        json_post(p, url, &body, "application/json", "authorization", |key| format!("Bearer {key}"), &[])
    }

    fn streams(&self) -> bool {
        false
    }

    fn reads_body(&self) -> bool {
        true
    }

    fn interpret(&self, _event: &SseEvent) -> Signals {
        Signals::default()
    }

    fn interpret_body(&self, body: &[u8]) -> Signals {
        let v: Value = match serde_json::from_slice(body) {
            Ok(v) => v,
            Err(e) => return Signals { error: Some(format!("malformed embeddings JSON: {e}")), ..Signals::default() },
        };
        if let Some(err) = v.get("error").filter(|e| !e.is_null()) {
            return error_signal(err);
        }
        let usage = v
            .get("usage")
            .filter(|u| u.is_object())
            .map(|u| Usage { input: u.get("prompt_tokens").and_then(as_u32), ..Usage::default() });
        let identity = crate::vocab::canary::ModelIdentity {
            model: v.get("model").and_then(Value::as_str).filter(|m| !m.is_empty()).map(str::to_string),
            ..Default::default()
        };
        match dimensions(&v) {
            Some(n) => {
                Signals { content: Some(format!("{n} dimensions")), done: true, usage, identity, ..Signals::default() }
            }
            None => Signals {
                error: Some("answer carries no embedding (data[0].embedding missing or empty)".into()),
                usage,
                ..Signals::default()
            },
        }
    }
}

/// The first vector's length: a non-empty list of numbers, or the base64 form some servers send
/// (`encoding_format: "base64"`), counted as float32s.
fn dimensions(v: &Value) -> Option<usize> {
    match v.get("data")?.get(0)?.get("embedding")? {
        Value::Array(a) if !a.is_empty() && a.iter().all(Value::is_number) => Some(a.len()),
        Value::String(s) if !s.is_empty() => Some(s.len() * 3 / 4 / 4),
        _ => None,
    }
}
