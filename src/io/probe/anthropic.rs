//! Anthropic Messages API: system prompt in `system`, events typed by `type`.

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

/// Adapter for `POST {base}/messages` with `stream: true`.
pub struct Anthropic;

/// Smallest thinking budget the API accepts.
const MIN_THINKING_BUDGET: u32 = 1024;

impl Adapter for Anthropic {
    fn request(&self, p: &ProbeParams<'_>) -> Result<RequestSpec, String> {
        let url = join(&p.provider.base_url, "messages")?;
        let (system, user) = p.prompts();
        let max_tokens = p.answer_tokens();
        let mut body = json!({
            "model": p.model,
            "stream": true,
            "system": system,
            "messages": [{"role": "user", "content": user}],
        });
        if system.is_empty() {
            // A golden check without a system turn sends none (the API refuses an empty one).
            body.as_object_mut().map(|b| b.remove("system"));
        }
        if p.capability() == Some(crate::vocab::capability::Capability::Tools) {
            use crate::decide::capability::{tool_parameters, TOOL_NAME};
            body["tools"] = json!([{
                "name": TOOL_NAME, "description": "Current weather in a city", "input_schema": tool_parameters(),
            }]);
            body["tool_choice"] = json!({"type": "auto"});
        }
        if p.reasoning {
            body["thinking"] = json!({"type": "enabled", "budget_tokens": MIN_THINKING_BUDGET});
            body["max_tokens"] = json!(MIN_THINKING_BUDGET + max_tokens.max(REASONING_EXTRA_TOKENS / 8));
        } else {
            body["max_tokens"] = json!(max_tokens);
            body["temperature"] = json!(0);
        }
        streaming_post(p, url, &body, "x-api-key", str::to_string, &[("anthropic-version", "2023-06-01")])
    }

    fn interpret(&self, event: &SseEvent) -> Signals {
        let v = match parse_json(event) {
            Ok(v) => v,
            Err(s) => return *s,
        };
        let kind = v.get("type").and_then(Value::as_str).or(event.event.as_deref()).unwrap_or("");
        match kind {
            "message_start" => {
                let msg = v.get("message");
                Signals {
                    request_id: msg.and_then(|m| m.get("id")).and_then(Value::as_str).map(str::to_string),
                    usage: msg.and_then(|m| m.get("usage")).map(usage),
                    identity: crate::vocab::canary::ModelIdentity {
                        model: msg.and_then(|m| m.get("model")).and_then(Value::as_str).map(str::to_string),
                        ..Default::default()
                    },
                    ..Signals::default()
                }
            }
            "content_block_delta" => {
                let delta = v.get("delta");
                match delta.and_then(|d| d.get("type")).and_then(Value::as_str) {
                    Some("text_delta") => Signals {
                        content: delta
                            .and_then(|d| d.get("text"))
                            .and_then(Value::as_str)
                            .filter(|t| !t.is_empty())
                            .map(str::to_string),
                        ..Signals::default()
                    },
                    Some("thinking_delta") => Signals { reasoning: true, ..Signals::default() },
                    Some("input_json_delta") => Signals {
                        tool: Some(super::ToolDelta {
                            name: None,
                            arguments: delta
                                .and_then(|d| d.get("partial_json"))
                                .and_then(Value::as_str)
                                .unwrap_or_default()
                                .to_string(),
                        }),
                        ..Signals::default()
                    },
                    _ => Signals::default(),
                }
            }
            "content_block_start" => {
                let block = v.get("content_block");
                let kind = block.and_then(|b| b.get("type")).and_then(Value::as_str);
                // A tool use block names the function; its arguments follow as input_json_delta.
                let tool = (kind == Some("tool_use")).then(|| super::ToolDelta {
                    name: block.and_then(|b| b.get("name")).and_then(Value::as_str).map(str::to_string),
                    arguments: String::new(),
                });
                Signals {
                    reasoning: matches!(kind, Some("thinking" | "redacted_thinking")),
                    tool,
                    ..Signals::default()
                }
            }
            "message_delta" => Signals { usage: v.get("usage").map(usage), ..Signals::default() },
            "message_stop" => Signals { done: true, ..Signals::default() },
            "error" => error_signal(v.get("error").unwrap_or(&v)),
            _ => Signals::default(), // ping, content_block_stop
        }
    }
}

fn usage(u: &Value) -> Usage {
    Usage {
        input: u.get("input_tokens").and_then(as_u32),
        output: u.get("output_tokens").and_then(as_u32),
        reasoning: None,
        cost_usd: None,
    }
}
