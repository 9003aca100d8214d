//! OpenAI chat completions (also OpenRouter, Groq, Together, DeepInfra, vLLM, Ollama, llama.cpp).

use super::{
    as_u32, error_signal, join, parse_json, streaming_post, Adapter, ProbeParams, RequestSpec, Signals, Usage,
};
use super::{system_prompt, REASONING_EXTRA_TOKENS, USER_PROMPT};
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
            ..Signals::default()
        };
        if let Some(choice) = v.get("choices").and_then(|c| c.get(0)) {
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
    let mut body = json!({
        "model": p.model,
        "stream": true,
        "stream_options": {"include_usage": true},
        "messages": [
            {"role": "system", "content": system_prompt(p.nonce)},
            {"role": "user", "content": USER_PROMPT},
        ],
    });
    if p.reasoning {
        // Reasoning models reject temperature; the smallest effort keeps probes cheap and fast.
        body["max_completion_tokens"] = json!(p.max_tokens + REASONING_EXTRA_TOKENS);
        if openrouter {
            body["reasoning"] = json!({"effort": "low"});
        } else {
            body["reasoning_effort"] = json!("low");
        }
    } else {
        body["max_tokens"] = json!(p.max_tokens);
        body["temperature"] = json!(0);
    }
    if let Some(route) = p.route {
        body["provider"] = json!({"order": [route], "allow_fallbacks": false});
    }
    body
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
