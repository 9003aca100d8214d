//! Demo providers: stream shapes per wire, pacing and error rates of the profiles, and the demo
//! server's routes driven over real HTTP.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::SeedableRng;
use secrecy::ExposeSecret;
use serde_json::{json, Value};
use vigil::config::ProviderKind;
use vigil::run::demo::profiles::{self, per_token_price, Profile, Wire, PROFILES};
use vigil::run::demo::standin::split_sse_events;
use vigil::run::demo::{start_demo, Script};

/// One parsed SSE event: comment-only, or its `event:` name and `data:` payload, with the delay
/// since the previous write (the head delay for the first).
#[derive(Debug)]
struct Event {
    at: Duration,
    comment: bool,
    name: Option<String>,
    data: String,
}

/// Parses a scripted stream into events stamped with their scripted send time.
fn events_of(script: &Script) -> Vec<Event> {
    let mut at = script.head_delay;
    let mut out = Vec::new();
    for chunk in &script.chunks {
        at += chunk.delay;
        for raw in split_sse_events(&chunk.bytes) {
            out.push(parse_event(at, std::str::from_utf8(&raw).expect("utf-8 event")));
        }
    }
    out
}

fn parse_event(at: Duration, text: &str) -> Event {
    let mut event = Event { at, comment: true, name: None, data: String::new() };
    for line in text.lines().filter(|l| !l.is_empty()) {
        if let Some(name) = line.strip_prefix("event: ") {
            event.name = Some(name.to_string());
            event.comment = false;
        } else if let Some(data) = line.strip_prefix("data: ") {
            event.data.push_str(data);
            event.comment = false;
        } else {
            assert!(line.starts_with(':'), "unexpected SSE line {line:?}");
        }
    }
    event
}

/// Content text carried by an event of `wire`, if any.
fn content_of(wire: Wire, event: &Event) -> Option<String> {
    if event.comment || event.data == "[DONE]" {
        return None;
    }
    let data: Value = serde_json::from_str(&event.data).expect("data is JSON");
    let text = match wire {
        Wire::OpenRouter => data["choices"][0]["delta"]["content"].as_str(),
        Wire::Anthropic => data["delta"]["text"].as_str(),
        Wire::Gemini => data["candidates"][0]["content"]["parts"][0]["text"].as_str(),
    };
    text.filter(|t| !t.is_empty()).map(str::to_string)
}

/// (TTFT, gaps between content tokens, whole reply) as the stream itself shows them.
fn stream_timing(wire: Wire, script: &Script) -> (Duration, Vec<Duration>, String) {
    let mut times = Vec::new();
    let mut text = String::new();
    for event in events_of(script) {
        if let Some(piece) = content_of(wire, &event) {
            times.push(event.at);
            text.push_str(&piece);
        }
    }
    let gaps = times.windows(2).map(|w| w[1] - w[0]).collect();
    (times[0], gaps, text)
}

/// Index of the first script chunk that carries content.
fn first_content_chunk(wire: Wire, script: &Script) -> Option<usize> {
    script.chunks.iter().position(|chunk| {
        split_sse_events(&chunk.bytes).iter().any(|raw| {
            let event = parse_event(Duration::ZERO, std::str::from_utf8(raw).expect("utf-8"));
            content_of(wire, &event).is_some()
        })
    })
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[test]
fn pacing_follows_each_profile_over_many_streams() {
    for profile in PROFILES.iter() {
        let mut rng = StdRng::seed_from_u64(11);
        let mut ttfts = Vec::new();
        let mut gaps = Vec::new();
        let mut spikes = 0usize;
        let mut streams = 0usize;
        while streams < 3000 {
            let script = profile.script(&mut rng, 16);
            if script.status != 200 {
                continue;
            }
            streams += 1;
            let (ttft, token_gaps, text) = stream_timing(profile.wire, &script);
            assert_eq!(text, "{\"ok\":true}", "{profile:?}");
            assert!(script.head_delay < ttft, "status line before the first token");
            assert_eq!(first_content_chunk(profile.wire, &script), Some(profile.first_token_chunk()));
            let ttft_ms = ttft.as_secs_f64() * 1000.0;
            if ttft_ms > 2.2 * profile.ttft_ms {
                spikes += 1;
            }
            ttfts.push(ttft_ms);
            gaps.extend(token_gaps.iter().map(|g| g.as_secs_f64()));
        }
        let ttft = median(ttfts);
        assert!(
            (ttft / profile.ttft_ms - 1.0).abs() < 0.08,
            "{} @ {}: median TTFT {ttft}",
            profile.model,
            profile.route
        );
        let tps = 1.0 / median(gaps);
        assert!(
            (tps / profile.tokens_per_s - 1.0).abs() < 0.08,
            "{} @ {}: median tok/s {tps}",
            profile.model,
            profile.route
        );
        // ~1 % spikes at 3x, plus a sliver of the log-normal tail.
        let share = spikes as f64 / streams as f64;
        assert!((0.004..0.025).contains(&share), "{} @ {}: spike share {share}", profile.model, profile.route);
    }
}

#[test]
fn error_rate_over_ten_thousand_generations_matches_the_profile() {
    let (mut all_failures, mut all_expected) = (0.0, 0.0);
    for (i, profile) in PROFILES.iter().enumerate() {
        // A seed per host, so the hosts' draws are independent of each other.
        let mut rng = StdRng::seed_from_u64(2024 + i as u64);
        let failures = (0..10_000).filter(|_| profile.script(&mut rng, 16).status != 200).count() as f64;
        let expected = profile.error_pct / 100.0 * 10_000.0;
        // Counts of a few events have fat relative tails: a loose bound per host…
        let tolerance = 3.0 + 4.5 * expected.sqrt();
        assert!(
            (failures - expected).abs() <= tolerance,
            "{} @ {}: {failures} vs {expected}",
            profile.model,
            profile.route
        );
        all_failures += failures;
        all_expected += expected;
    }
    // …and four standard deviations over all of them.
    assert!((all_failures - all_expected).abs() <= 4.0 * f64::sqrt(all_expected), "{all_failures} vs {all_expected}");

    // A noisier variant pins down the rate and the 429 share precisely.
    for wire in [Wire::OpenRouter, Wire::Anthropic, Wire::Gemini] {
        let base = PROFILES.iter().find(|p| p.wire == wire).expect("profile per wire");
        let flaky = Profile { error_pct: 10.0, ..base.clone() };
        let mut rng = StdRng::seed_from_u64(5);
        let scripts: Vec<Script> = (0..10_000).map(|_| flaky.script(&mut rng, 16)).collect();
        let failed: Vec<&Script> = scripts.iter().filter(|s| s.status != 200).collect();
        let rate = failed.len() as f64 / 10_000.0;
        assert!((0.09..0.11).contains(&rate), "{wire:?}: error rate {rate}");
        let limited: Vec<&&Script> = failed.iter().filter(|s| s.status == 429).collect();
        let share = limited.len() as f64 / failed.len() as f64;
        assert!((0.10..0.20).contains(&share), "{wire:?}: 429 share {share}");
        assert!(limited.iter().all(|s| s.headers.iter().any(|(k, v)| k == "Retry-After" && v.parse::<u64>().is_ok())));
        let overload = if wire == Wire::Anthropic { 529 } else { 503 };
        assert!(failed.iter().all(|s| s.status == 429 || s.status == overload));
        for script in failed {
            let body: Value = serde_json::from_slice(&script.body()).expect("error body is JSON");
            assert!(body["error"].is_object(), "{body}");
        }
    }
}

#[test]
fn openrouter_stream_shape_usage_and_cost() {
    let profile =
        profiles::find(Wire::OpenRouter, profiles::LLAMA, "deepinfra").expect("route matched case-insensitively");
    let mut rng = StdRng::seed_from_u64(1);
    let script = std::iter::repeat_with(|| profile.script(&mut rng, 16)).find(|s| s.status == 200).expect("a stream");
    assert!(script.chunked);
    assert!(script.headers.iter().any(|(k, v)| k == "Content-Type" && v == "text/event-stream"));
    let events = events_of(&script);
    assert!(events.iter().all(|e| !e.comment), "DeepInfra sends no processing comments");
    let first: Value = serde_json::from_str(&events[0].data).expect("json");
    assert_eq!(first["choices"][0]["delta"], json!({"role": "assistant", "content": ""}), "role-only delta first");
    assert_eq!(events.last().expect("events").data, "[DONE]");
    let usage: Value = serde_json::from_str(&events[events.len() - 2].data).expect("usage json");
    assert_eq!(usage["choices"], json!([]));
    let (prompt, completion) = (
        usage["usage"]["prompt_tokens"].as_u64().expect("p"),
        usage["usage"]["completion_tokens"].as_u64().expect("c"),
    );
    assert_eq!(completion, 5);
    let cost = usage["usage"]["cost"].as_f64().expect("cost");
    let expected = (prompt as f64 * 0.59 + completion as f64 * 0.79) / 1e6;
    assert!((cost - expected).abs() < 1e-15, "{cost} vs {expected}");
    let finish: Value = serde_json::from_str(&events[events.len() - 3].data).expect("finish json");
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");
    assert_eq!(finish["provider"], "DeepInfra");

    // Lepton sends processing comments between the status line and the first token.
    let lepton = profiles::find(Wire::OpenRouter, profiles::LLAMA, "Lepton").expect("lepton");
    let script = std::iter::repeat_with(|| lepton.script(&mut rng, 16)).find(|s| s.status == 200).expect("a stream");
    let events = events_of(&script);
    let comments: Vec<&Event> = events.iter().take_while(|e| e.comment).collect();
    assert_eq!(comments.len(), 3);
    assert!(comments.iter().all(|e| e.at > script.head_delay));
    let (ttft, _, _) = stream_timing(Wire::OpenRouter, &script);
    assert!(comments.iter().all(|e| e.at < ttft));
}

#[test]
fn small_max_tokens_truncates_with_length() {
    let profile = profiles::find(Wire::OpenRouter, profiles::MIXTRAL, "Together").expect("profile");
    let mut rng = StdRng::seed_from_u64(3);
    let script = std::iter::repeat_with(|| profile.script(&mut rng, 2)).find(|s| s.status == 200).expect("a stream");
    let (_, gaps, text) = stream_timing(Wire::OpenRouter, &script);
    assert_eq!(text, "{\"ok");
    assert_eq!(gaps.len(), 1);
    let events = events_of(&script);
    let finish: Value = serde_json::from_str(&events[events.len() - 3].data).expect("finish");
    assert_eq!(finish["choices"][0]["finish_reason"], "length");
}

#[test]
fn anthropic_and_gemini_stream_shapes() {
    let mut rng = StdRng::seed_from_u64(9);
    let anthropic = profiles::find(Wire::Anthropic, profiles::ANTHROPIC_MODEL, "").expect("anthropic");
    let script = std::iter::repeat_with(|| anthropic.script(&mut rng, 16)).find(|s| s.status == 200).expect("stream");
    let names: Vec<String> = events_of(&script).iter().map(|e| e.name.clone().expect("named event")).collect();
    let mut expected = vec!["message_start", "content_block_start", "ping"];
    expected.extend(["content_block_delta"; 5]);
    expected.extend(["content_block_stop", "message_delta", "message_stop"]);
    assert_eq!(names, expected);
    let events = events_of(&script);
    let delta: Value = serde_json::from_str(&events[events.len() - 2].data).expect("message_delta");
    assert_eq!(delta["usage"]["output_tokens"], 5);
    assert_eq!(delta["delta"]["stop_reason"], "end_turn");
    assert_eq!(stream_timing(Wire::Anthropic, &script).2, "{\"ok\":true}");

    let gemini = profiles::find(Wire::Gemini, profiles::GEMINI_MODEL, "").expect("gemini");
    let script = std::iter::repeat_with(|| gemini.script(&mut rng, 16)).find(|s| s.status == 200).expect("stream");
    let body = script.body();
    assert!(body.ends_with(b"\r\n\r\n"));
    assert!(!body.windows(2).any(|w| w[1] == b'\n' && w[0] != b'\r'), "CRLF only");
    assert!(!body.windows(6).any(|w| w == b"[DONE]"));
    let events = events_of(&script);
    let last: Value = serde_json::from_str(&events.last().expect("events").data).expect("json");
    assert_eq!(last["candidates"][0]["finishReason"], "STOP");
    assert_eq!(last["usageMetadata"]["candidatesTokenCount"], 5);
    assert_eq!(stream_timing(Wire::Gemini, &script).2, "{\"ok\":true}");
}

#[test]
fn same_seed_same_draws() {
    let profile = &PROFILES[2];
    let delays = |seed: u64| {
        let mut rng = StdRng::seed_from_u64(seed);
        (0..50)
            .map(|_| {
                let s = profile.script(&mut rng, 16);
                (s.status, s.head_delay, s.chunks.iter().map(|c| c.delay).collect::<Vec<_>>())
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(delays(42), delays(42));
    assert_ne!(delays(42), delays(43));
}

#[test]
fn per_token_prices_read_like_openrouter() {
    assert_eq!(per_token_price(0.59), "0.00000059");
    assert_eq!(per_token_price(1.2), "0.0000012");
    assert_eq!(per_token_price(0.0), "0");
}

/// Reads a whole SSE body into parsed events.
async fn read_events(response: reqwest::Response) -> Vec<Event> {
    let body = response.bytes().await.expect("whole stream");
    split_sse_events(&body)
        .iter()
        .map(|raw| parse_event(Duration::ZERO, std::str::from_utf8(raw).expect("utf-8")))
        .collect()
}

fn chat_body(model: &str, route: &str) -> Value {
    json!({"model": model, "stream": true, "max_tokens": 16,
        "messages": [{"role": "system", "content": "Reply with exactly {\"ok\":true}"}, {"role": "user", "content": "ping"}],
        "provider": {"order": [route], "allow_fallbacks": false}})
}

#[tokio::test]
async fn demo_server_serves_every_provider_kind() {
    let demo = start_demo(7).await.expect("demo starts");
    let names: Vec<&str> = demo.providers.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["demo-llama", "demo-mixtral", "demo-anthropic", "demo-gemini", "demo-status"]);
    let port = demo.standin.addr().port();
    for p in &demo.providers {
        assert_eq!(p.api_key.as_ref().expect("configured").expose_secret(), "sk-test-demo");
        assert_eq!(p.base_url.port(), Some(port));
    }
    let by_name = |n: &str| demo.providers.iter().find(|p| p.name == n).expect("provider");
    assert_eq!(by_name("demo-llama").routes, ["DeepInfra", "Together", "Lepton"]);
    assert_eq!(by_name("demo-mixtral").routes, ["DeepInfra", "Together", "Anyscale"]);
    assert!(by_name("demo-llama").price.is_none() && by_name("demo-mixtral").price.is_none());
    assert_eq!(by_name("demo-anthropic").kind, ProviderKind::Anthropic);
    let client = reqwest::Client::new();

    // OpenRouter-like: every configured (model, route) streams the probe's JSON answer.
    for name in ["demo-llama", "demo-mixtral"] {
        let provider = by_name(name);
        let url = format!("{}/chat/completions", provider.base_url.as_str().trim_end_matches('/'));
        for route in &provider.routes {
            let response = client
                .post(&url)
                .bearer_auth("sk-test-demo")
                .json(&chat_body(&provider.models[0], route))
                .send()
                .await
                .expect("send");
            if response.status() != 200 {
                // Errors are part of the profile; they must still be well-formed.
                assert!([429, 503].contains(&response.status().as_u16()));
                continue;
            }
            let events = read_events(response).await;
            let text: String = events.iter().filter_map(|e| content_of(Wire::OpenRouter, e)).collect();
            assert_eq!(text, "{\"ok\":true}", "{name} @ {route}");
            assert_eq!(events.iter().any(|e| e.comment), route == "Lepton");
            assert_eq!(events.last().expect("events").data, "[DONE]");
            let usage: Value = serde_json::from_str(&events[events.len() - 2].data).expect("usage");
            assert!(usage["usage"]["cost"].as_f64().expect("cost") > 0.0);
        }
    }

    // Unknown (model, route) pairs are model_not_found.
    let chat_url = format!("http://127.0.0.1:{port}/api/v1/chat/completions");
    for (model, route) in [(profiles::LLAMA, "Anyscale"), ("nobody/nothing", "DeepInfra")] {
        let response = client
            .post(&chat_url)
            .bearer_auth("sk-test-demo")
            .json(&chat_body(model, route))
            .send()
            .await
            .expect("send");
        assert_eq!(response.status(), 404);
        let body: Value = response.json().await.expect("json");
        assert_eq!(body["error"]["code"], "model_not_found");
    }
    let response = client.post(&chat_url).json(&chat_body(profiles::LLAMA, "Together")).send().await.expect("send");
    assert_eq!(response.status(), 401, "no key, no stream");

    // Anthropic.
    let anthropic = by_name("demo-anthropic");
    let response = client
        .post(format!("{}/messages", anthropic.base_url.as_str().trim_end_matches('/')))
        .header("x-api-key", "sk-test-demo")
        .header("anthropic-version", "2023-06-01")
        .json(&json!({"model": anthropic.models[0], "max_tokens": 16, "stream": true, "system": "Reply {\"ok\":true}",
            "messages": [{"role": "user", "content": "ping"}]}))
        .send()
        .await
        .expect("send");
    assert_eq!(response.status(), 200);
    let events = read_events(response).await;
    assert_eq!(events[0].name.as_deref(), Some("message_start"));
    assert_eq!(events.last().expect("events").name.as_deref(), Some("message_stop"));
    let text: String = events.iter().filter_map(|e| content_of(Wire::Anthropic, e)).collect();
    assert_eq!(text, "{\"ok\":true}");
    let response = client
        .post(format!("http://127.0.0.1:{port}/v1/messages"))
        .header("x-api-key", "sk-test-demo")
        .json(&json!({"model": "claude-nope", "max_tokens": 16, "messages": []}))
        .send()
        .await
        .expect("send");
    assert_eq!(response.status(), 404);

    // Gemini, CRLF events.
    let gemini = by_name("demo-gemini");
    let url = format!(
        "{}/models/{}:streamGenerateContent?alt=sse",
        gemini.base_url.as_str().trim_end_matches('/'),
        gemini.models[0]
    );
    let response = client
        .post(&url)
        .header("x-goog-api-key", "sk-test-demo")
        .json(&json!({"contents": [{"role": "user", "parts": [{"text": "ping"}]}],
            "generationConfig": {"maxOutputTokens": 16}}))
        .send()
        .await
        .expect("send");
    assert_eq!(response.status(), 200);
    let body = response.bytes().await.expect("body");
    assert!(body.ends_with(b"\r\n\r\n"));
    let text: String = split_sse_events(&body)
        .iter()
        .map(|raw| parse_event(Duration::ZERO, std::str::from_utf8(raw).expect("utf-8")))
        .filter_map(|e| content_of(Wire::Gemini, &e))
        .collect();
    assert_eq!(text, "{\"ok\":true}");
    let url = format!("http://127.0.0.1:{port}/v1beta/models/gemini-nope:streamGenerateContent?alt=sse");
    let response =
        client.post(&url).header("x-goog-api-key", "sk-test-demo").json(&json!({})).send().await.expect("send");
    assert_eq!(response.status(), 404);

    // Plain HTTP status page.
    let response = client.get(by_name("demo-status").base_url.clone()).send().await.expect("send");
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["status"]["indicator"], "none");

    // Every request above is on record, in order.
    assert!(demo.standin.requests().len() >= 12);
    demo.standin.shutdown().await;
}

#[tokio::test]
async fn key_document_drains_and_endpoints_list_prices() {
    let demo = start_demo(1).await.expect("demo starts");
    let base = demo.standin.base_url();
    let client = reqwest::Client::new();
    let key = |client: reqwest::Client| {
        let url = format!("{base}/api/v1/key");
        async move {
            let doc: Value =
                client.get(url).bearer_auth("sk-test-demo").send().await.expect("send").json().await.expect("json");
            doc
        }
    };
    let before = key(client.clone()).await;
    let data = &before["data"];
    assert_eq!(data["limit"], 25.0);
    for field in ["limit_remaining", "usage", "usage_daily", "usage_weekly", "usage_monthly"] {
        assert!(data[field].is_number(), "{field}");
    }
    assert!(data["rate_limit"]["requests"].is_number());
    let remaining_before = data["limit_remaining"].as_f64().expect("remaining");
    assert!(remaining_before > 0.0 && remaining_before < 25.0);

    // Streams spend credit.
    let url = format!("{base}/api/v1/chat/completions");
    let mut served = 0;
    for _ in 0..5 {
        let response = client
            .post(&url)
            .bearer_auth("sk-test-demo")
            .json(&chat_body(profiles::MIXTRAL, "Anyscale"))
            .send()
            .await
            .expect("send");
        if response.status() == 200 {
            served += 1;
        }
        let _ = response.bytes().await;
    }
    assert!(served > 0);
    let after = key(client.clone()).await;
    let remaining_after = after["data"]["limit_remaining"].as_f64().expect("remaining");
    assert!(remaining_after < remaining_before, "{remaining_after} < {remaining_before}");
    let response = client.get(format!("{base}/api/v1/key")).send().await.expect("send");
    assert_eq!(response.status(), 401);

    // An ordinary key may not read the account's credits: 403 as OpenRouter answers, which the
    // balance poller takes as "watch the key's own limit" rather than a failure.
    let response = client.get(format!("{base}/api/v1/credits")).bearer_auth("sk-test-demo").send().await.expect("send");
    assert_eq!(response.status(), 403);
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["error"]["code"], 403);
    let poller = vigil::io::feeds::balance::BalanceClient::new(
        "demo-llama",
        format!("{base}/api/v1").parse().expect("url"),
        secrecy::SecretString::from("sk-test-demo"),
        Duration::from_secs(5),
    )
    .expect("client");
    let check = poller.check().await.expect("a 403 on /credits is not a failed check");
    assert!(check.remaining().is_some_and(|r| r > 0.0 && r < 25.0), "{check:?}");

    // Per-host pricing for the report.
    let doc: Value = client
        .get(format!("{base}/api/v1/models/{}/endpoints", profiles::LLAMA))
        .send()
        .await
        .expect("send")
        .json()
        .await
        .expect("json");
    assert_eq!(doc["data"]["id"], profiles::LLAMA);
    let endpoints = doc["data"]["endpoints"].as_array().expect("endpoints");
    let hosts: Vec<(&str, &str, &str)> = endpoints
        .iter()
        .map(|e| {
            (
                e["provider_name"].as_str().expect("provider_name"),
                e["pricing"]["prompt"].as_str().expect("prompt"),
                e["pricing"]["completion"].as_str().expect("completion"),
            )
        })
        .collect();
    assert_eq!(
        hosts,
        [
            ("DeepInfra", "0.00000059", "0.00000079"),
            ("Together", "0.0000007", "0.0000009"),
            ("Lepton", "0.0000008", "0.0000008")
        ]
    );
    let response = client.get(format!("{base}/api/v1/models/nobody/nothing/endpoints")).send().await.expect("send");
    assert_eq!(response.status(), 404);
}

#[tokio::test]
async fn server_truth_marks_the_first_token_write() {
    let demo = start_demo(3).await.expect("demo starts");
    let client = reqwest::Client::new();
    let url = format!("{}/api/v1/chat/completions", demo.standin.base_url());
    let lepton = profiles::find(Wire::OpenRouter, profiles::LLAMA, "Lepton").expect("lepton");
    let response = client
        .post(&url)
        .bearer_auth("sk-test-demo")
        .json(&chat_body(profiles::LLAMA, "Lepton"))
        .send()
        .await
        .expect("send");
    assert_eq!(response.status(), 200);
    let events = read_events(response).await;
    let records = demo.standin.requests();
    let record = records.last().expect("recorded");
    assert_eq!(record.chunk_written_at.len(), events.len(), "one write per event");
    let first_token = record.chunk_written_at[lepton.first_token_chunk()];
    assert!(content_of(Wire::OpenRouter, &events[lepton.first_token_chunk()]).is_some());
    assert!(events[..lepton.first_token_chunk()].iter().all(|e| content_of(Wire::OpenRouter, e).is_none()));
    assert!(first_token >= record.head_written_at.expect("head written"));
    assert_eq!(record.json().expect("json")["provider"]["order"][0], "Lepton");
}
