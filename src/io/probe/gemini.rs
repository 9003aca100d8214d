//! Gemini `streamGenerateContent?alt=sse`: CRLF-framed data events, no `[DONE]`.

use super::as_u32;
use super::error_signal;
use super::join;
use super::parse_json;
use super::streaming_post;
use super::Adapter;
use super::ProbeParams;
use super::RequestSpec;
use super::Signals;
use super::Usage;
use super::REASONING_EXTRA_TOKENS;
use crate::io::probe::sse::SseEvent;
use serde_json::{json, Value};

/// Adapter for Gemini's streaming endpoint.
pub struct Gemini;

/// Smallest thinking budget thinking models accept.
const MIN_THINKING_BUDGET: u32 = 128;

impl Adapter for Gemini {
    fn request(&self, p: &ProbeParams<'_>) -> Result<RequestSpec, String> {
        let mut url = join(&p.provider.base_url, &format!("models/{}:streamGenerateContent", p.model))?;
        url.set_query(Some("alt=sse"));
        streaming_post(p, url, &body(p), "x-goog-api-key", str::to_string, &[])
    }

    fn interpret(&self, event: &SseEvent) -> Signals {
        interpret(event)
    }
}

/// The `generateContent` body, shared with Vertex AI (`super::vertex`), which speaks the same dialect.
pub(crate) fn body(p: &ProbeParams<'_>) -> Value {
    let (system, user) = p.prompts();
    let max_tokens = p.answer_tokens();
    let mut generation = json!({"maxOutputTokens": max_tokens, "temperature": 0});
    if p.reasoning {
        generation["maxOutputTokens"] = json!(max_tokens + REASONING_EXTRA_TOKENS);
        generation["thinkingConfig"] = json!({"thinkingBudget": MIN_THINKING_BUDGET, "includeThoughts": true});
    }
    if let Some(seed) = p.canary.and_then(|c| c.seed) {
        generation["seed"] = json!(seed);
    }
    let mut body = json!({
        "systemInstruction": {"parts": [{"text": system}]},
        "contents": [{"role": "user", "parts": [{"text": user}]}],
        "generationConfig": generation,
    });
    if system.is_empty() {
        // A golden check without a system turn sends none.
        body.as_object_mut().map(|b| b.remove("systemInstruction"));
    }
    capability_part(p, &mut body);
    body
}

/// One event of the stream, for Gemini and Vertex AI alike.
pub(crate) fn interpret(event: &SseEvent) -> Signals {
    let v = match parse_json(event) {
        Ok(v) => v,
        Err(s) => return *s,
    };
    if let Some(err) = v.get("error") {
        return error_signal(err);
    }
    let mut s = Signals {
        request_id: v.get("responseId").and_then(Value::as_str).map(str::to_string),
        identity: crate::vocab::canary::ModelIdentity {
            model: v.get("modelVersion").and_then(Value::as_str).map(str::to_string),
            ..Default::default()
        },
        ..Signals::default()
    };
    let candidate = v.get("candidates").and_then(|c| c.get(0));
    let parts = candidate.and_then(|c| c.get("content")).and_then(|c| c.get("parts")).and_then(Value::as_array);
    let mut text = String::new();
    for part in parts.into_iter().flatten() {
        // Gemini sends a function call whole, arguments as an object.
        if let Some(call) = part.get("functionCall") {
            s.tool = Some(super::ToolDelta {
                name: call.get("name").and_then(Value::as_str).map(str::to_string),
                arguments: call.get("args").map_or_else(String::new, Value::to_string),
            });
        }
        let t = part.get("text").and_then(Value::as_str).unwrap_or("");
        if part.get("thought").and_then(Value::as_bool) == Some(true) {
            s.reasoning |= !t.is_empty();
        } else {
            text.push_str(t);
        }
    }
    s.content = Some(text).filter(|t| !t.is_empty());
    s.done = candidate.and_then(|c| c.get("finishReason")).is_some_and(|f| !f.is_null());
    if let Some(u) = v.get("usageMetadata") {
        s.usage = Some(Usage {
            input: u.get("promptTokenCount").and_then(as_u32),
            // Visible and thinking tokens are reported apart; output counts both, as billed.
            output: match (u.get("candidatesTokenCount").and_then(as_u32), u.get("thoughtsTokenCount").and_then(as_u32))
            {
                (Some(c), Some(t)) => Some(c.saturating_add(t)),
                (c, t) => c.or(t),
            },
            reasoning: u.get("thoughtsTokenCount").and_then(as_u32),
            cost_usd: None,
        });
    }
    s
}

/// A capability probe's own part of the request: the function declaration (`tools`), JSON
/// mode (`responseMimeType`) or the schema (`responseSchema`, Gemini's OpenAPI subset: no
/// `additionalProperties`).
fn capability_part(p: &ProbeParams<'_>, body: &mut Value) {
    use crate::decide::capability::{answer_schema, tool_parameters, TOOL_NAME};
    use crate::vocab::capability::Capability;
    match p.capability() {
        Some(Capability::Tools) => {
            body["tools"] = json!([{"functionDeclarations": [{
                "name": TOOL_NAME, "description": "Current weather in a city", "parameters": tool_parameters(),
            }]}]);
        }
        Some(Capability::Json) => body["generationConfig"]["responseMimeType"] = json!("application/json"),
        Some(Capability::JsonSchema) => {
            let mut schema = answer_schema();
            schema.as_object_mut().map(|s| s.remove("additionalProperties"));
            body["generationConfig"]["responseMimeType"] = json!("application/json");
            body["generationConfig"]["responseSchema"] = schema;
        }
        None => {}
    }
}

/// Seconds from a Gemini error body's `RetryInfo.retryDelay` (`"26s"`), clamped like `Retry-After`.
pub fn retry_delay(body: &[u8]) -> Option<f64> {
    let v: Value = serde_json::from_slice(body).ok()?;
    v.get("error")?.get("details")?.as_array()?.iter().find_map(|d| {
        let delay = d.get("retryDelay")?.as_str()?;
        delay.strip_suffix('s')?.trim().parse::<f64>().ok().and_then(super::clamp_retry_after)
    })
}
