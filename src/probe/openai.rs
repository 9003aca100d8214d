//! OpenAI chat completions (also OpenRouter, Groq, Together, DeepInfra, vLLM, Ollama, llama.cpp).

use super::REASONING_EXTRA_TOKENS;
use super::{
    as_u32, error_signal, join, parse_json, streaming_post, Adapter, ProbeParams, RequestSpec, Signals, Usage,
};
use crate::probe::sse::SseEvent;
use serde_json::{json, Value};

/// Adapter for `POST {base}/chat/completions` with `stream: true`.
pub struct OpenAi;

impl Adapter for OpenAi {
    fn request(&self, p: &ProbeParams<'_>) -> Result<RequestSpec, String> {
        let url = join(&p.provider.base_url, "chat/completions")?;
        let openrouter = url.host_str().is_some_and(|h| h.ends_with("openrouter.ai")) || p.route.is_some();
        let body = chat_body(p, openrouter);
        streaming_post(p, url, &body, "authorization", |key| format!("Bearer {key}"), &[])
    }

    fn interpret(&self, event: &SseEvent) -> Signals {
        if event.data.trim() == "[DONE]" {
            return Signals { done: true, ..Signals::default() };
        }
        let v = match parse_json(event) {
            Ok(v) => v,
            Err(s) => return *s,
        };
        // Groq sends `event: error`; OpenAI and OpenRouter put a top-level `error` in a data event.
        if let Some(err) = v.get("error").filter(|e| !e.is_null()) {
            let mut s = error_signal(err);
            s.usage = usage(&v);
            return s;
        }
        let mut s = Signals {
            // Azure's first frame (prompt filter results) has an empty id.
            request_id: v.get("id").and_then(Value::as_str).filter(|id| !id.is_empty()).map(str::to_string),
            usage: usage(&v),
            identity: identity(&v),
            ..Signals::default()
        };
        if let Some(choice) = v.get("choices").and_then(|c| c.get(0)) {
            s.logprobs = logprobs(choice);
            let delta = choice.get("delta");
            let text = delta
                .and_then(|d| d.get("content"))
                .and_then(Value::as_str)
                .or_else(|| choice.get("text").and_then(Value::as_str));
            s.content = text.filter(|t| !t.is_empty()).map(str::to_string);
            s.reasoning = delta.is_some_and(|d| {
                ["reasoning", "reasoning_content"]
                    .iter()
                    .any(|k| d.get(*k).and_then(Value::as_str).is_some_and(|t| !t.is_empty()))
                    || d.get("reasoning_details").and_then(Value::as_array).is_some_and(|a| !a.is_empty())
            });
        }
        s
    }
}

/// The streaming chat completions body of one probe (shared with Azure OpenAI).
pub fn chat_body(p: &ProbeParams<'_>, openrouter: bool) -> Value {
    let (system, user) = p.prompts();
    let max_tokens = p.answer_tokens();
    let mut body = json!({
        "model": p.model,
        "stream": true,
        "stream_options": {"include_usage": true},
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": user},
        ],
    });
    if p.reasoning {
        // Reasoning models reject temperature; the smallest effort keeps probes cheap and fast.
        body["max_completion_tokens"] = json!(max_tokens + REASONING_EXTRA_TOKENS);
        if openrouter {
            body["reasoning"] = json!({"effort": "low"});
        } else {
            body["reasoning_effort"] = json!("low");
        }
    } else {
        body["max_tokens"] = json!(max_tokens);
        body["temperature"] = json!(0);
    }
    if let Some(c) = p.canary {
        if let Some(seed) = c.seed {
            body["seed"] = json!(seed);
        }
        if c.logprobs {
            body["logprobs"] = json!(true);
        }
    }
    if let Some(route) = p.route {
        body["provider"] = json!({"order": [route], "allow_fallbacks": false});
    }
    body
}

/// The echoed `model`, OpenAI's `system_fingerprint` and OpenRouter's upstream `provider`.
fn identity(v: &Value) -> crate::canary::ModelIdentity {
    let text = |k: &str| v.get(k).and_then(Value::as_str).filter(|t| !t.is_empty()).map(str::to_string);
    crate::canary::ModelIdentity {
        model: text("model"),
        system_fingerprint: text("system_fingerprint"),
        upstream: text("provider"),
    }
}

/// Log-probabilities of a chunk's tokens (`choices[0].logprobs.content[].logprob`).
fn logprobs(choice: &Value) -> Option<crate::canary::Logprobs> {
    let content = choice.get("logprobs")?.get("content")?.as_array()?;
    let values: Vec<f64> = content.iter().filter_map(|t| t.get("logprob").and_then(Value::as_f64)).collect();
    (!values.is_empty()).then(|| crate::canary::Logprobs {
        tokens: u32::try_from(values.len()).unwrap_or(u32::MAX),
        sum: values.iter().filter(|v| v.is_finite()).sum(),
    })
}

fn usage(v: &Value) -> Option<Usage> {
    let u = v.get("usage").filter(|u| u.is_object())?;
    Some(Usage {
        input: u.get("prompt_tokens").and_then(as_u32),
        output: u.get("completion_tokens").and_then(as_u32),
        reasoning: u.get("completion_tokens_details").and_then(|d| d.get("reasoning_tokens")).and_then(as_u32),
        cost_usd: u.get("cost").and_then(Value::as_f64),
    })
}
