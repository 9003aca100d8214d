//! The OpenAI Responses API (`endpoint = "responses"` on `kind = "openai"`): a streamed
//! `POST {base}/responses` whose semantic events (`response.output_text.delta`, …) end with
//! `response.completed`, `response.incomplete` or `response.failed` instead of `[DONE]`.

use super::as_u32;
use super::error_signal;
use super::join;
use super::parse_json;
use super::streaming_post;
use super::Adapter;
use super::ProbeParams;
use super::RequestSpec;
use super::Signals;
use super::ToolDelta;
use super::Usage;
use super::REASONING_EXTRA_TOKENS;
use crate::io::probe::sse::SseEvent;
use serde_json::{json, Value};

/// The API refuses a `max_output_tokens` below this.
const MIN_OUTPUT_TOKENS: u32 = 16;

/// Adapter for `POST {base}/responses` with `stream: true`.
pub struct Responses;

impl Adapter for Responses {
    fn request(&self, p: &ProbeParams<'_>) -> Result<RequestSpec, String> {
        let url = join(&p.provider.base_url, "responses")?;
        streaming_post(p, url, &body(p), "authorization", |key| format!("Bearer {key}"), &[])
    }

    fn interpret(&self, event: &SseEvent) -> Signals {
        let v = match parse_json(event) {
            Ok(v) => v,
            Err(s) => return *s,
        };
        // Every event names itself in `type`; the SSE `event:` line says the same and is the fallback.
        let kind = v.get("type").and_then(Value::as_str).or(event.event.as_deref()).unwrap_or_default();
        let text = |k: &str| v.get(k).and_then(Value::as_str).filter(|t| !t.is_empty()).map(str::to_string);
        match kind {
            "response.output_text.delta" | "response.refusal.delta" => {
                Signals { content: text("delta"), ..Signals::default() }
            }
            "response.reasoning_text.delta" | "response.reasoning_summary_text.delta" => {
                Signals { reasoning: true, ..Signals::default() }
            }
            "response.function_call_arguments.delta" => Signals {
                tool: text("delta").map(|arguments| ToolDelta { name: None, arguments }),
                ..Signals::default()
            },
            "response.output_item.added" => item_added(v.get("item")),
            "response.created" | "response.in_progress" => described(v.get("response")),
            "response.completed" | "response.incomplete" => {
                Signals { done: true, usage: v.get("response").and_then(usage), ..described(v.get("response")) }
            }
            "response.failed" => {
                let err = v.get("response").and_then(|r| r.get("error")).filter(|e| e.is_object());
                let mut s = match err {
                    Some(e) => error_signal(&named(e)),
                    None => Signals { error: Some("response.failed without an error".into()), ..Signals::default() },
                };
                s.usage = v.get("response").and_then(usage);
                s
            }
            "error" => error_signal(&named(&v)),
            _ => Signals::default(),
        }
    }
}

/// The body of one probe: the instruction as `instructions`, the user turn as `input`.
fn body(p: &ProbeParams<'_>) -> Value {
    let (system, user) = p.prompts();
    let max_tokens = p.answer_tokens().max(MIN_OUTPUT_TOKENS);
    // `store: false`: a health check has no business in the account's stored responses.
    let mut body = json!({"model": p.model, "stream": true, "store": false, "input": user});
    if !system.is_empty() {
        body["instructions"] = json!(system);
    }
    if p.reasoning {
        body["max_output_tokens"] = json!(max_tokens + REASONING_EXTRA_TOKENS);
        body["reasoning"] = json!({"effort": "low"});
    } else {
        body["max_output_tokens"] = json!(max_tokens);
        body["temperature"] = json!(0);
    }
    capability_part(p, &mut body);
    body
}

/// A capability probe's part in this API's dialect: a flat function tool, or `text.format`.
fn capability_part(p: &ProbeParams<'_>, body: &mut Value) {
    use crate::decide::capability::{answer_schema, tool_parameters, TOOL_NAME};
    use crate::vocab::capability::Capability;
    match p.capability() {
        Some(Capability::Tools) => {
            body["tools"] = json!([{"type": "function", "name": TOOL_NAME,
                "description": "Current weather in a city", "parameters": tool_parameters()}]);
            body["tool_choice"] = json!("auto");
        }
        Some(Capability::Json) => body["text"] = json!({"format": {"type": "json_object"}}),
        Some(Capability::JsonSchema) => {
            body["text"] = json!({"format": {"type": "json_schema", "name": "capital", "strict": true,
                "schema": answer_schema()}});
        }
        None => {}
    }
}

/// A new output item: a function call's name (its arguments follow as deltas), or the start of
/// reasoning.
fn item_added(item: Option<&Value>) -> Signals {
    let Some(item) = item else { return Signals::default() };
    match item.get("type").and_then(Value::as_str) {
        Some("function_call") => Signals {
            tool: Some(ToolDelta {
                name: item.get("name").and_then(Value::as_str).filter(|n| !n.is_empty()).map(str::to_string),
                arguments: item.get("arguments").and_then(Value::as_str).unwrap_or_default().to_string(),
            }),
            ..Signals::default()
        },
        Some("reasoning") => Signals { reasoning: true, ..Signals::default() },
        _ => Signals::default(),
    }
}

/// The response object's id and echoed model.
fn described(response: Option<&Value>) -> Signals {
    let text =
        |k: &str| response.and_then(|r| r.get(k)).and_then(Value::as_str).filter(|t| !t.is_empty()).map(str::to_string);
    Signals {
        request_id: text("id"),
        identity: crate::vocab::canary::ModelIdentity { model: text("model"), ..Default::default() },
        ..Signals::default()
    }
}

/// An error object with its `code` as the error's name (`rate_limit_exceeded: …`), the shape
/// [`error_signal`] reads.
fn named(err: &Value) -> Value {
    let message = err.get("message").cloned().unwrap_or(Value::Null);
    match err.get("code").filter(|c| !c.is_null()) {
        Some(code) => json!({"type": code, "message": message}),
        None => json!({"message": message}),
    }
}

fn usage(response: &Value) -> Option<Usage> {
    let u = response.get("usage").filter(|u| u.is_object())?;
    Some(Usage {
        input: u.get("input_tokens").and_then(as_u32),
        output: u.get("output_tokens").and_then(as_u32),
        reasoning: u.get("output_tokens_details").and_then(|d| d.get("reasoning_tokens")).and_then(as_u32),
        cost_usd: None,
    })
}
