//! OpenAI chat completions (also OpenRouter, Groq, Together, DeepInfra, vLLM, Ollama, llama.cpp).

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
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use std::borrow::Cow;

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
        fast_path(&event.data).unwrap_or_else(|| general(event))
    }
}

/// Reads any event through a `serde_json::Value` tree.
fn general(event: &SseEvent) -> Signals {
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
        s.tool = tool_delta(delta);
        s.reasoning = delta.is_some_and(|d| {
            ["reasoning", "reasoning_content"]
                .iter()
                .any(|k| d.get(*k).and_then(Value::as_str).is_some_and(|t| !t.is_empty()))
                || d.get("reasoning_details").and_then(Value::as_array).is_some_and(|a| !a.is_empty())
        });
    }
    s
}

/// A content chunk read in one pass into borrowed fields, the common case of every stream.
/// `None` sends the event to the general reading over a `serde_json::Value` tree: chunks with
/// an error, usage or log-probabilities (one or two per stream) and anything of an unexpected
/// shape, so what is read never depends on which of the two read it. Building the tree was
/// the prober's largest cost after the socket.
fn fast_path(data: &str) -> Option<Signals> {
    let c: Chunk<'_> = serde_json::from_str(data).ok()?;
    if c.error.is_some() || c.usage.is_some() {
        return None;
    }
    let mut s = Signals {
        request_id: non_empty(c.id),
        identity: crate::vocab::canary::ModelIdentity {
            model: non_empty(c.model),
            system_fingerprint: non_empty(c.system_fingerprint),
            upstream: non_empty(c.provider),
        },
        ..Signals::default()
    };
    if let Some(choice) = c.choices.and_then(|c| c.into_iter().next()) {
        if choice.logprobs.is_some() {
            return None;
        }
        let delta = choice.delta.unwrap_or_default();
        if delta.tool_calls.is_some_and(|t| t.get() != "null") {
            return None;
        }
        s.content = non_empty(delta.content.or(choice.text));
        s.reasoning =
            [delta.reasoning, delta.reasoning_content].iter().any(|t| t.as_ref().is_some_and(|t| !t.0.is_empty()))
                || delta.reasoning_details.is_some_and(|d| {
                    serde_json::from_str::<Vec<serde::de::IgnoredAny>>(d.get()).is_ok_and(|a| !a.is_empty())
                });
    }
    Some(s)
}

/// A capability probe's own part of the request: the declared function (`tools`), JSON mode
/// (`response_format: json_object`) or the schema (`response_format: json_schema`, strict).
fn capability_part(p: &ProbeParams<'_>, body: &mut Value) {
    use crate::decide::capability::{answer_schema, tool_parameters, TOOL_NAME};
    use crate::vocab::capability::Capability;
    match p.capability() {
        Some(Capability::Tools) => {
            body["tools"] = json!([{"type": "function", "function": {
                "name": TOOL_NAME, "description": "Current weather in a city", "parameters": tool_parameters(),
            }}]);
            body["tool_choice"] = json!("auto");
        }
        Some(Capability::Json) => body["response_format"] = json!({"type": "json_object"}),
        Some(Capability::JsonSchema) => {
            body["response_format"] = json!({"type": "json_schema", "json_schema": {
                "name": "capital", "strict": true, "schema": answer_schema(),
            }});
        }
        None => {}
    }
}

/// The first piece of a function call in a chunk's `delta.tool_calls`, if any.
fn tool_delta(delta: Option<&Value>) -> Option<super::ToolDelta> {
    let f = delta?.get("tool_calls")?.get(0)?.get("function")?;
    let name = f.get("name").and_then(Value::as_str).filter(|n| !n.is_empty()).map(str::to_string);
    let arguments = f.get("arguments").and_then(Value::as_str).unwrap_or_default().to_string();
    (name.is_some() || !arguments.is_empty()).then_some(super::ToolDelta { name, arguments })
}

fn non_empty(t: Option<Text<'_>>) -> Option<String> {
    t.filter(|t| !t.0.is_empty()).map(|t| t.0.into_owned())
}

/// A JSON string, borrowed from the event unless it has escapes. (serde borrows a `Cow` only
/// as a field of its own, not inside an `Option`.)
#[derive(Deserialize)]
struct Text<'a>(#[serde(borrow)] Cow<'a, str>);

/// The fields of a chunk [`fast_path`] reads; unknown fields are skipped, a field of another
/// type fails the read (and the general reading takes the event).
#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(borrow, default)]
    id: Option<Text<'a>>,
    #[serde(borrow, default)]
    model: Option<Text<'a>>,
    #[serde(borrow, default)]
    system_fingerprint: Option<Text<'a>>,
    #[serde(borrow, default)]
    provider: Option<Text<'a>>,
    #[serde(borrow, default)]
    choices: Option<Vec<Choice<'a>>>,
    #[serde(borrow, default)]
    usage: Option<&'a RawValue>,
    #[serde(borrow, default)]
    error: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(borrow, default)]
    delta: Option<Delta<'a>>,
    #[serde(borrow, default)]
    text: Option<Text<'a>>,
    #[serde(borrow, default)]
    logprobs: Option<&'a RawValue>,
}

#[derive(Deserialize, Default)]
struct Delta<'a> {
    #[serde(borrow, default)]
    content: Option<Text<'a>>,
    #[serde(borrow, default)]
    reasoning: Option<Text<'a>>,
    #[serde(borrow, default)]
    reasoning_content: Option<Text<'a>>,
    #[serde(borrow, default)]
    reasoning_details: Option<&'a RawValue>,
    #[serde(borrow, default)]
    tool_calls: Option<&'a RawValue>,
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
    if system.is_empty() {
        // A golden check without a system turn sends none.
        if let Some(m) = body["messages"].as_array_mut() {
            m.remove(0);
        }
    }
    capability_part(p, &mut body);
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
fn identity(v: &Value) -> crate::vocab::canary::ModelIdentity {
    let text = |k: &str| v.get(k).and_then(Value::as_str).filter(|t| !t.is_empty()).map(str::to_string);
    crate::vocab::canary::ModelIdentity {
        model: text("model"),
        system_fingerprint: text("system_fingerprint"),
        upstream: text("provider"),
    }
}

/// Log-probabilities of a chunk's tokens (`choices[0].logprobs.content[].logprob`).
fn logprobs(choice: &Value) -> Option<crate::vocab::canary::Logprobs> {
    let content = choice.get("logprobs")?.get("content")?.as_array()?;
    let values: Vec<f64> = content.iter().filter_map(|t| t.get("logprob").and_then(Value::as_f64)).collect();
    (!values.is_empty()).then(|| crate::vocab::canary::Logprobs {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::probe::sse::SseParser;

    /// Every event of every recorded OpenAI-style stream, and awkward hand-made ones: the fast
    /// path either declines or reads exactly what the general reading reads.
    #[test]
    fn the_fast_path_reads_what_the_general_reading_reads() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
        let mut events: Vec<String> = Vec::new();
        let mut entries: Vec<_> = std::fs::read_dir(dir).expect("fixtures").flatten().map(|e| e.path()).collect();
        entries.sort();
        for path in entries {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
            let openai_like = ["openai", "openrouter", "groq", "azure", "together", "deepinfra", "vllm", "llama"]
                .iter()
                .any(|p| name.starts_with(p));
            if !openai_like || !name.ends_with(".sse") {
                continue;
            }
            let bytes = std::fs::read(&path).expect("fixture");
            let mut parser = SseParser::new(1 << 20);
            parser.feed(&bytes, |ev| events.push(ev.data)).expect("fixture parses");
            if let Ok(Some(ev)) = parser.finish() {
                events.push(ev.data);
            }
        }
        assert!(events.len() > 20, "fixtures found: {}", events.len());
        events.extend(
            [
                r#"{"id":"a\"b","choices":[{"delta":{"content":"caf\u00e9 \n"}}]}"#,
                r#"{"id":"","model":"","choices":[{"delta":{"content":""},"text":"t"}]}"#,
                r#"{"choices":[{"delta":null,"text":"plain"}]}"#,
                r#"{"choices":[{"delta":{"content":null},"text":"fallback"}]}"#,
                r#"{"choices":[{"delta":{"reasoning":"thinking"}}]}"#,
                r#"{"choices":[{"delta":{"reasoning_content":""}}]}"#,
                r#"{"choices":[{"delta":{"reasoning_details":[]}}]}"#,
                r#"{"choices":[{"delta":{"reasoning_details":[{"type":"reasoning.text"}]}}]}"#,
                r#"{"choices":[{"delta":{"reasoning_details":{"not":"a list"}}}]}"#,
                r#"{"choices":[],"provider":"Together","system_fingerprint":"fp_1"}"#,
                r#"{"choices":[null]}"#,
                r#"{"choices":{"0":{"delta":{"content":"x"}}}}"#,
                r#"{"id":5,"choices":[{"delta":{"content":"x"}}]}"#,
                r#"{"id":"a","id":"b","choices":[{"delta":{"content":"dup"}}]}"#,
                r#"{"choices":[{"delta":{"content":["part"]}}]}"#,
                r#"{"choices":[{"delta":{"content":"x"},"logprobs":{"content":[{"logprob":-0.5}]}}]}"#,
                r#"{"choices":[{"delta":{"content":"x"}}],"usage":{"prompt_tokens":3,"completion_tokens":1}}"#,
                r#"{"choices":[{"delta":{"content":"x"}}],"usage":null,"error":null}"#,
                r#"{"error":{"message":"overloaded","type":"server_error"}}"#,
                r#"{"choices":[{"delta":{"content":"x"}}]"#,
                r#"not json"#,
            ]
            .map(String::from),
        );
        let mut fast = 0;
        for data in &events {
            let ev = SseEvent { event: None, data: data.clone() };
            if let Some(s) = fast_path(data) {
                fast += 1;
                assert_eq!(s, general(&ev), "{data}");
            }
        }
        assert!(fast * 2 > events.len(), "most events take the fast path: {fast} of {}", events.len());
        let common = r#"{"id":"c1","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"hi"},"logprobs":null,"finish_reason":null}]}"#;
        let plain: Text<'_> = serde_json::from_str(r#""hi""#).expect("text");
        assert!(matches!(plain.0, Cow::Borrowed("hi")), "a string without escapes is not copied");
        let s = fast_path(common).expect("a plain content chunk takes the fast path");
        assert_eq!((s.content.as_deref(), s.request_id.as_deref()), (Some("hi"), Some("c1")));
    }
}
