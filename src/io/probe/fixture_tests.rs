//! Every adapter against the real transcripts in tests/fixtures, with no sockets involved.

use super::adapter_for;
use super::sse::SseParser;
use super::Reading;
use crate::config::ProviderKind;
use crate::vocab::sample::Outcome;
use std::time::{Duration, Instant};

struct Replay {
    reading: Reading,
    done: bool,
    /// Index of the event that carried the first content token.
    first_content_event: Option<usize>,
    first_reasoning_event: Option<usize>,
    comments: u64,
}

/// Feeds a fixture event by event, pretending event `i` arrived `i` ms after the request.
fn replay(kind: ProviderKind, name: &str) -> Replay {
    replay_with(adapter_for(kind), name)
}

/// [`replay`] through any adapter (an endpoint's as well as a kind's).
fn replay_with(adapter: &dyn super::Adapter, name: &str) -> Replay {
    let body = std::fs::read(format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))).expect("fixture");
    let mut parser = SseParser::new(1 << 20);
    let mut events = Vec::new();
    parser.feed(&body, |e| events.push(e)).expect("fixture parses");
    events.extend(parser.finish().expect("fixture parses"));
    let sent = Instant::now();
    let mut r = Reading { streamed: true, ..Reading::default() };
    let (mut done, mut first_content_event, mut first_reasoning_event) = (false, None, None);
    for (i, ev) in events.iter().enumerate() {
        let at = sent + Duration::from_millis(i as u64 + 1);
        done |= r.absorb(adapter.interpret(ev), at, sent);
        if r.ttft.is_some() && first_content_event.is_none() {
            first_content_event = Some(i);
        }
        if r.ttfr.is_some() && first_reasoning_event.is_none() {
            first_reasoning_event = Some(i);
        }
        if r.outcome.is_some() {
            break;
        }
    }
    Replay { reading: r, done, first_content_event, first_reasoning_event, comments: parser.comments }
}

#[test]
fn openai_role_only_first_chunk_is_not_a_token() {
    let r = replay(ProviderKind::Openai, "openai-chat-stream.sse");
    assert_eq!(r.first_content_event, Some(1), "event 0 carries only the role");
    assert!(r.done, "[DONE] ends the stream");
    assert_eq!(r.reading.outcome, None);
    assert!(r.reading.request_id.as_deref().is_some_and(|id| id.starts_with("chatcmpl-")));
}

#[test]
fn openai_usage_chunk_gives_tokens() {
    let r = replay(ProviderKind::Openai, "openai-chat-stream-usage.sse");
    assert!(r.done);
    assert!(r.reading.usage.output.is_some_and(|n| n > 0));
    assert!(r.reading.usage.input.is_some_and(|n| n > 0));
    let r = replay(ProviderKind::Openai, "openai-chat-stream-finish-length.sse");
    assert!(r.done && r.reading.usage.output.is_some());
}

#[test]
fn openrouter_comments_are_skipped_and_cost_is_read() {
    let r = replay(ProviderKind::Openai, "openrouter-chat-stream-processing-comments.sse");
    assert_eq!(r.comments, 3);
    assert_eq!(r.first_content_event, Some(0), "OpenRouter's first data event already carries text");
    assert!(r.reading.usage.cost_usd.is_some_and(|c| c > 0.0));
    assert!(r.done);
}

#[test]
fn groq_reasoning_comes_before_content_and_is_timed_apart() {
    let r = replay(ProviderKind::Openai, "groq-chat-stream.sse");
    let (reasoning, content) = (r.first_reasoning_event.expect("reasoning"), r.first_content_event.expect("content"));
    assert!(reasoning < content, "37 reasoning chunks precede the answer");
    assert!(r.reading.ttfr < r.reading.ttft);
    assert!(r.done);
}

#[test]
fn together_chunks_count_as_content() {
    let r = replay(ProviderKind::Openai, "together-chat-stream-chunks.sse");
    assert!(r.first_content_event.is_some());
    assert!(r.reading.usage.output.is_some());
}

#[test]
fn anthropic_ping_and_message_start_are_not_tokens() {
    for name in ["anthropic-messages-stream.sse", "anthropic-messages-stream-sdk-fixture.sse"] {
        let r = replay(ProviderKind::Anthropic, name);
        assert_eq!(r.first_content_event, Some(3), "{name}: message_start, content_block_start, ping come first");
        assert!(r.done, "{name}: message_stop ends it");
        assert!(r.reading.usage.output.is_some(), "{name}");
    }
    let r = replay(ProviderKind::Anthropic, "anthropic-messages-stream.sse");
    assert_eq!(r.reading.usage.output, Some(5), "message_delta usage is cumulative");
    assert!(r.reading.request_id.as_deref().is_some_and(|id| id.starts_with("msg_")));
}

/// The failure text a replay ended with.
fn error_text(r: &Replay) -> &str {
    r.reading.error.as_deref().unwrap_or("")
}

#[test]
fn anthropic_error_events_are_stream_errors_with_their_type() {
    let r = replay(ProviderKind::Anthropic, "anthropic-stream-overloaded-error.sse");
    assert_eq!(r.reading.outcome, Some(Outcome::StreamError), "an error event in an accepted stream, before any token");
    assert_eq!(error_text(&r), "error event overloaded_error: Overloaded");
    let r = replay(ProviderKind::Anthropic, "anthropic-stream-midstream-error.sse");
    assert_eq!(r.reading.outcome, Some(Outcome::StreamError), "an error after content broke the stream");
    assert_eq!(error_text(&r), "error event overloaded_error: Overloaded");
    assert!(r.reading.ttft.is_some());
    assert_eq!(r.reading.content_events, 1, "the token before the error still counts");
    assert_eq!(r.reading.usage.input, Some(20));
}

#[test]
fn openai_style_error_events_are_stream_errors_with_their_type() {
    let r = replay(ProviderKind::Openai, "openai-stream-midstream-error.sse");
    assert_eq!(r.reading.outcome, Some(Outcome::StreamError));
    assert!(error_text(&r).starts_with("error event server_error: The server had an error"), "{}", error_text(&r));
    let r = replay(ProviderKind::Openai, "openrouter-stream-midstream-error.sse");
    assert_eq!(r.reading.outcome, Some(Outcome::StreamError));
    assert_eq!(error_text(&r), "error event 400: Token limit reached");
    assert!(r.reading.ttfr.is_some() && r.reading.ttft.is_none(), "it ran out while reasoning");
    assert_eq!(r.reading.usage.output, Some(10), "the usage sent with the error still counts");
    let r = replay(ProviderKind::Openai, "openrouter-stream-midstream-error-docs.sse");
    assert_eq!(r.reading.outcome, Some(Outcome::StreamError));
    assert_eq!(error_text(&r), "error event rate_limit_exceeded: Rate limit exceeded");
    let r = replay(ProviderKind::Openai, "groq-stream-error-event.sse");
    assert_eq!(r.reading.outcome, Some(Outcome::StreamError));
    assert!(error_text(&r).starts_with("error event invalid_request_error (tool_use_failed): Tool call validation"));
    assert!(!r.done, "Groq closes without [DONE] after an error");
}

#[test]
fn gemini_error_events_are_stream_errors_with_their_status() {
    let adapter = adapter_for(ProviderKind::Gemini);
    let data =
        r#"{"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}"#;
    let s = adapter.interpret(&super::sse::SseEvent { event: None, data: data.into() });
    let mut r = Reading { streamed: true, ..Reading::default() };
    let sent = Instant::now();
    r.absorb(s, sent, sent);
    assert_eq!(r.outcome, Some(Outcome::StreamError));
    assert_eq!(r.error.as_deref(), Some("error event UNAVAILABLE: The model is overloaded. Please try again later."));
}

#[test]
fn gemini_crlf_stream_ends_on_finish_reason() {
    let r = replay(ProviderKind::Gemini, "gemini-stream.sse");
    assert_eq!(r.first_content_event, Some(0));
    assert!(r.done);
    assert!(r.reading.usage.output.is_some_and(|n| n > 0));
    assert!(r.reading.request_id.is_some());
    let r = replay(ProviderKind::Gemini, "gemini-stream-thinking-usage.sse");
    assert!(r.done);
    assert!(r.reading.usage.reasoning.is_some_and(|n| n > 0));
}

#[test]
fn gemini_retry_delay_is_read_from_the_body() {
    let body =
        std::fs::read(format!("{}/tests/fixtures/gemini-error-429.json", env!("CARGO_MANIFEST_DIR"))).expect("fixture");
    assert_eq!(super::gemini::retry_delay(&body), Some(26.0));
}

#[test]
fn malformed_json_is_a_stream_error_not_a_panic() {
    let adapter = adapter_for(ProviderKind::Openai);
    let s = adapter.interpret(&super::sse::SseEvent { event: None, data: "{not json".into() });
    assert!(s.error.is_some_and(|e| e.starts_with("malformed event JSON")));
    for kind in [ProviderKind::Anthropic, ProviderKind::Gemini] {
        let s = adapter_for(kind).interpret(&super::sse::SseEvent { event: None, data: "[1,2".into() });
        assert!(s.error.is_some());
    }
}

/// A function call streamed in pieces (OpenAI, Anthropic) or whole (Gemini) is read back as one
/// call of `get_weather` with its complete arguments; its first piece is the first token.
#[test]
fn every_api_shapes_function_call_is_read_back_whole() {
    for (kind, name, first) in [
        (ProviderKind::Openai, "openai-chat-stream-tool-call.sse", 0),
        (ProviderKind::Anthropic, "anthropic-messages-stream-tool-use.sse", 1),
        (ProviderKind::Gemini, "gemini-stream-function-call.sse", 0),
    ] {
        let r = replay(kind, name);
        assert!(r.done, "{name}: the terminator");
        assert_eq!(r.reading.outcome, None, "{name}");
        assert_eq!(r.first_content_event, Some(first), "{name}: the call's first piece is the first token");
        let call = r.reading.tool.clone().unwrap_or_else(|| panic!("{name}: no call read"));
        assert_eq!(call.name, "get_weather", "{name}");
        let args: serde_json::Value = serde_json::from_str(&call.arguments).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(args["city"], "Paris", "{name}: {}", call.arguments);
        assert!(r.reading.answer.is_empty(), "{name}: no text answer");
    }
}

/// The body a capability probe of `capability` sends to an API of `kind`.
fn capability_body(kind: ProviderKind, capability: crate::vocab::capability::Capability) -> serde_json::Value {
    let url = url::Url::parse("http://127.0.0.1:9/v1").expect("url");
    let mut provider = crate::config::ProviderConfig::new("p", kind, url);
    provider.api_key = Some(secrecy::SecretString::from("sk-test-capability"));
    let request = super::CanaryRequest::for_capability(capability);
    let params = super::ProbeParams {
        provider: &provider,
        model: "m",
        route: None,
        max_tokens: 16,
        reasoning: false,
        nonce: "n",
        canary: Some(&request),
        credential: None,
    };
    let spec = adapter_for(kind).request(&params).expect("request");
    serde_json::from_slice(&spec.body.expect("a body")).expect("JSON body")
}

/// Each API shape gets the capability's part of the request in its own dialect.
#[test]
fn capability_probes_ask_in_each_apis_dialect() {
    use crate::vocab::capability::Capability::{Json, JsonSchema, Tools};
    for kind in [ProviderKind::Openai, ProviderKind::Azure] {
        let tools = capability_body(kind, Tools);
        assert_eq!(tools["tools"][0]["function"]["name"], "get_weather", "{kind:?}: {tools}");
        assert_eq!(tools["tools"][0]["function"]["parameters"]["required"][0], "city");
        assert_eq!(capability_body(kind, Json)["response_format"]["type"], "json_object");
        let schema = capability_body(kind, JsonSchema);
        assert_eq!(schema["response_format"]["type"], "json_schema");
        assert_eq!(schema["response_format"]["json_schema"]["strict"], true);
    }
    let anthropic = capability_body(ProviderKind::Anthropic, Tools);
    assert_eq!(anthropic["tools"][0]["name"], "get_weather", "{anthropic}");
    assert_eq!(anthropic["tools"][0]["input_schema"]["type"], "object");
    let gemini = capability_body(ProviderKind::Gemini, Tools);
    assert_eq!(gemini["tools"][0]["functionDeclarations"][0]["name"], "get_weather", "{gemini}");
    let json = capability_body(ProviderKind::Gemini, Json);
    assert_eq!(json["generationConfig"]["responseMimeType"], "application/json");
    let schema = capability_body(ProviderKind::Gemini, JsonSchema);
    assert_eq!(schema["generationConfig"]["responseSchema"]["required"][1], "country", "{schema}");
    assert!(schema["generationConfig"]["responseSchema"].get("additionalProperties").is_none(), "Gemini's subset");
}

/// Feeds a Responses API fixture through its adapter.
fn replay_responses(name: &str) -> Replay {
    replay_with(&super::responses::Responses, name)
}

#[test]
fn responses_first_token_is_the_first_output_text_delta() {
    let r = replay_responses("openai-responses-stream.sse");
    assert_eq!(r.first_content_event, Some(4), "created, in_progress, item and part added carry no text");
    assert!(r.done, "response.completed ends the stream");
    assert_eq!(r.reading.outcome, None);
    assert_eq!(r.reading.answer, "{\"ok\":true}");
    assert!(super::adherent(&r.reading.answer));
    assert_eq!(
        (r.reading.usage.input, r.reading.usage.output, r.reading.usage.reasoning),
        (Some(36), Some(5), Some(0))
    );
    assert_eq!(r.reading.request_id.as_deref(), Some("resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b"));
    assert_eq!(r.reading.identity.model.as_deref(), Some("gpt-4.1-mini-2025-04-14"));
}

#[test]
fn responses_function_calls_and_failures_are_read() {
    let r = replay_responses("openai-responses-stream-function-call.sse");
    assert_eq!(r.first_content_event, Some(1), "the call's item is its first token");
    let call = r.reading.tool.clone().expect("a call");
    assert_eq!((call.name.as_str(), call.arguments.as_str()), ("get_weather", "{\"city\":\"Paris\"}"));
    assert!(r.done && r.reading.answer.is_empty());

    let r = replay_responses("openai-responses-stream-error.sse");
    assert_eq!(r.reading.outcome, Some(Outcome::StreamError));
    let error = r.reading.error.clone().unwrap_or_default();
    assert!(error.contains("server_error") && error.contains("processing your request"), "{error}");
    // An `error` event (the API's own failure frame) and a malformed one: stream errors, no panic.
    let adapter = &super::responses::Responses;
    let ev = |data: &str| super::sse::SseEvent { event: None, data: data.into() };
    let s = super::Adapter::interpret(
        adapter,
        &ev(r#"{"type":"error","code":"rate_limit_exceeded","message":"slow down"}"#),
    );
    assert_eq!(s.error.as_deref(), Some("error event rate_limit_exceeded: slow down"));
    assert!(super::Adapter::interpret(adapter, &ev("{\"type\":")).error.is_some());
}

#[test]
fn responses_capability_probes_ask_in_the_responses_dialect() {
    use crate::vocab::capability::Capability::{Json, JsonSchema, Tools};
    let body = |c: Option<crate::vocab::capability::Capability>| {
        let url = url::Url::parse("http://127.0.0.1:9/v1").expect("url");
        let mut provider = crate::config::ProviderConfig::new("p", ProviderKind::Openai, url);
        provider.endpoint = crate::config::Endpoint::Responses;
        let request = c.map(super::CanaryRequest::for_capability);
        let params = super::ProbeParams {
            provider: &provider,
            model: "m",
            route: None,
            max_tokens: 4,
            reasoning: false,
            nonce: "n",
            canary: request.as_ref(),
            credential: None,
        };
        let spec = super::adapter_of(&provider).request(&params).expect("request");
        assert!(spec.url.as_str().ends_with("/v1/responses"), "{}", spec.url);
        serde_json::from_slice::<serde_json::Value>(&spec.body.expect("a body")).expect("JSON")
    };
    let tools = body(Some(Tools));
    assert_eq!(tools["tools"][0]["name"], "get_weather", "{tools}");
    assert_eq!(tools["max_output_tokens"], crate::decide::capability::MAX_TOKENS, "{tools}");
    assert_eq!(body(Some(Json))["text"]["format"]["type"], "json_object");
    assert_eq!(body(Some(JsonSchema))["text"]["format"]["strict"], true);
    let probe = body(None);
    assert_eq!(probe["max_output_tokens"], 16, "a 4-token probe asks for the API's minimum: {probe}");
    assert!(probe["instructions"].as_str().is_some_and(|i| i.starts_with("n. ")), "nonce first: {probe}");
    assert_eq!(probe["input"], "ping");
}

#[test]
fn embeddings_are_judged_on_the_whole_answer() {
    let adapter = &super::embeddings::Embeddings;
    assert!(!super::Adapter::streams(adapter) && super::Adapter::reads_body(adapter));
    let body = std::fs::read(format!("{}/tests/fixtures/openai-embeddings.json", env!("CARGO_MANIFEST_DIR")))
        .expect("fixture");
    let s = super::Adapter::interpret_body(adapter, &body);
    assert_eq!(s.content.as_deref(), Some("10 dimensions"));
    assert_eq!(s.usage.and_then(|u| u.input), Some(8));
    assert_eq!(s.identity.model.as_deref(), Some("text-embedding-3-small"));
    for bad in [
        &b"{\"data\":[]}"[..],
        b"{\"data\":[{\"embedding\":[]}]}",
        b"[1,",
        b"",
        b"{\"data\":[{\"embedding\":[\"x\"]}]}",
    ] {
        let s = super::Adapter::interpret_body(adapter, bad);
        assert!(s.error.is_some() && s.content.is_none(), "{}", String::from_utf8_lossy(bad));
    }
    let err =
        super::Adapter::interpret_body(adapter, br#"{"error":{"message":"bad model","type":"invalid_request_error"}}"#);
    assert_eq!(err.error.as_deref(), Some("error event invalid_request_error: bad model"));
}
