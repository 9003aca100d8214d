//! The probe against real HTTP servers on loopback that stream the recorded provider transcripts
//! with scripted delays. Timings are checked against the stand-in server's own timestamps.

use crate::support::{fixture, probe_config};
use chrono::Utc;
use secrecy::SecretString;
use std::sync::Arc;
use std::time::{Duration, Instant};
use vigil::config::{Price, ProbeConfig, ProviderConfig, ProviderKind};
use vigil::io::metrics::Metrics;
use vigil::io::probe::{Planned, Prober};
use vigil::run::demo::standin::{End, RequestRecord, Script, StandIn};
use vigil::run::scheduler::Scheduler;
use vigil::vocab::sample::{Outcome, Sample};
use vigil::vocab::target::Target;

/// Slack allowed between what the probe measured and what the server did on loopback.
/// Generous on purpose: this checks that the right event is timed, not how fast the machine is.
const SLACK_MS: f64 = 40.0;

fn provider(name: &str, kind: ProviderKind, base_url: &str) -> ProviderConfig {
    ProviderConfig {
        api_key_env: Some("TEST_KEY".into()),
        api_key: Some(SecretString::from("sk-test-probe")),
        models: vec![if kind == ProviderKind::Http { String::new() } else { "test-model".into() }],
        ..ProviderConfig::new(name, kind, base_url.parse().expect("url"))
    }
}

fn plan(p: &ProviderConfig, route: Option<&str>) -> Planned {
    Planned {
        target: Target::new(
            p.name.as_str().into(),
            p.models[0].as_str().into(),
            route.map(Into::into),
            "test-1".into(),
        ),
        provider: Arc::new(p.clone()),
    }
}

async fn probe(p: &ProviderConfig) -> Sample {
    Prober::new(probe_config(64), &[]).probe(&plan(p, None), Utc::now()).await
}

async fn serve(script: Script) -> StandIn {
    StandIn::start(move |_| script.clone()).await.expect("stand-in starts")
}

fn ms_between(a: Instant, b: Instant) -> f64 {
    b.duration_since(a).as_secs_f64() * 1000.0
}

/// Asserts `measured` is the server-side interval plus loopback transit, never less.
fn assert_close(what: &str, measured: Option<f64>, truth: f64) {
    let m = measured.unwrap_or_else(|| panic!("{what} was not measured"));
    assert!(m + 1.0 >= truth && m - truth < SLACK_MS, "{what}: measured {m:.2} ms, server truth {truth:.2} ms");
}

/// The system prompt is the fixed instruction behind this probe's random nonce.
fn assert_nonce_prompt(v: &serde_json::Value) {
    let text = v.as_str().expect("system prompt text");
    let (nonce, rest) = text.split_at(vigil::io::probe::NONCE_LEN);
    assert!(nonce.chars().all(|c| c.is_ascii_hexdigit()), "{text}");
    assert_eq!(rest, format!(". {}", vigil::io::probe::SYSTEM_PROMPT));
}

fn only_request(s: &StandIn) -> RequestRecord {
    let reqs = s.requests();
    assert_eq!(reqs.len(), 1, "exactly one request");
    reqs.into_iter().next().expect("one request")
}

#[tokio::test]
async fn openai_stream_ttfb_at_status_line_and_ttft_at_first_content_chunk() {
    let script = Script::sse(&fixture("openai-chat-stream-usage.sse"), Duration::from_millis(40))
        .with_head_delay(Duration::from_millis(120));
    let server = serve(script).await;
    let p = provider("openai", ProviderKind::Openai, &format!("{}/v1", server.base_url()));
    let s = probe(&p).await;
    assert_eq!(s.outcome, Outcome::Ok, "{:?}", s.error);
    assert_eq!(s.status, Some(200));
    let r = only_request(&server);
    assert_eq!(r.path, "/v1/chat/completions");
    assert_eq!(r.header("authorization"), Some("Bearer sk-test-probe"));
    let body = r.json().expect("json body");
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"]["include_usage"], true);
    assert_eq!(body["max_tokens"], 16);
    assert_eq!(body["messages"][0]["role"], "system");
    assert_nonce_prompt(&body["messages"][0]["content"]);
    let head = r.head_written_at.expect("head written");
    assert_close("ttfb", s.ttfb_ms, ms_between(r.received_at, head));
    // Chunk 0 carries only the role; the first content token is in chunk 1.
    assert_close("ttft", s.ttft_ms, ms_between(r.received_at, r.chunk_written_at[1]));
    let last = *r.chunk_written_at.last().expect("chunks");
    assert_close("total", s.total_ms, ms_between(r.received_at, last));
    assert!(s.output_tokens.is_some_and(|n| n > 1));
    assert!(s.input_tokens.is_some());
    assert!(s.tokens_per_s.is_some_and(|v| v > 0.0));
    assert!(s.connect_ms.is_some());
    assert_eq!(s.dns_ms, None, "an IP literal needs no lookup");
    assert_eq!(s.tls_ms, None, "plain HTTP has no TLS phase");
    assert_eq!(s.adherence_ok, Some(false), "the recorded reply is not the demanded JSON");
}

#[tokio::test]
async fn openrouter_route_is_pinned_and_processing_comments_are_not_tokens() {
    let body = fixture("openrouter-chat-stream-processing-comments.sse");
    let script = Script::sse(&body, Duration::from_millis(60));
    let server = serve(script).await;
    let mut p = provider("openrouter", ProviderKind::Openai, &format!("{}/api/v1", server.base_url()));
    p.routes = vec!["DeepInfra".into()];
    let s = Prober::new(probe_config(64), &[]).probe(&plan(&p, Some("DeepInfra")), Utc::now()).await;
    assert_eq!(s.outcome, Outcome::Ok, "{:?}", s.error);
    let r = only_request(&server);
    let req = r.json().expect("json");
    assert_eq!(req["provider"]["order"], serde_json::json!(["DeepInfra"]));
    assert_eq!(req["provider"]["allow_fallbacks"], false);
    // Three comment events come first: bytes arrive (TTFB) long before the first token.
    assert_close("ttft", s.ttft_ms, ms_between(r.received_at, r.chunk_written_at[3]));
    assert!(s.ttfb_ms.unwrap_or(f64::MAX) + 100.0 < s.ttft_ms.unwrap_or(0.0));
    assert!(s.cost_usd.is_some_and(|c| c > 0.0), "OpenRouter reports the cost itself");
}

#[tokio::test]
async fn anthropic_ttft_skips_message_start_and_ping() {
    let server = serve(Script::sse(&fixture("anthropic-messages-stream.sse"), Duration::from_millis(30))).await;
    let p = provider("anthropic", ProviderKind::Anthropic, &format!("{}/v1", server.base_url()));
    let s = probe(&p).await;
    assert_eq!(s.outcome, Outcome::Ok, "{:?}", s.error);
    let r = only_request(&server);
    assert_eq!(r.path, "/v1/messages");
    assert_eq!(r.header("x-api-key"), Some("sk-test-probe"));
    assert_eq!(r.header("anthropic-version"), Some("2023-06-01"));
    let body = r.json().expect("json");
    assert_nonce_prompt(&body["system"]);
    assert_eq!(body["stream"], true);
    assert_close("ttft", s.ttft_ms, ms_between(r.received_at, r.chunk_written_at[3]));
    assert_eq!(s.output_tokens, Some(5));
    assert!(s.request_id.as_deref().is_some_and(|id| id.starts_with("msg_")));
}

#[tokio::test]
async fn gemini_crlf_stream_split_into_single_bytes() {
    let script = Script::sse(&fixture("gemini-stream.sse"), Duration::from_millis(5)).split_every(1);
    let server = serve(script).await;
    let mut p = provider("gemini", ProviderKind::Gemini, &format!("{}/v1beta", server.base_url()));
    p.models = vec!["gemini-2.0-flash".into()];
    let s = probe(&p).await;
    assert_eq!(s.outcome, Outcome::Ok, "{:?}", s.error);
    let r = only_request(&server);
    assert_eq!(r.path, "/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse");
    assert_eq!(r.header("x-goog-api-key"), Some("sk-test-probe"));
    assert!(s.output_tokens.is_some_and(|n| n > 0));
}

#[tokio::test]
async fn every_split_point_of_a_stream_gives_the_same_result() {
    let body = fixture("openai-chat-stream.sse");
    let mut expected = None;
    for n in [1, 2, 3, 7, 64, 1000] {
        let server = serve(Script::sse(&body, Duration::ZERO).split_every(n)).await;
        let s = probe(&provider("openai", ProviderKind::Openai, &server.base_url())).await;
        assert_eq!(s.outcome, Outcome::Ok, "split every {n}: {:?}", s.error);
        let got = (s.output_tokens, s.request_id.clone());
        assert_eq!(expected.get_or_insert(got.clone()), &got, "split every {n}");
    }
}

#[tokio::test]
async fn http_chunks_that_cut_through_events_give_the_same_result() {
    let body = fixture("openai-chat-stream.sse");
    let reference =
        probe(&provider("openai", ProviderKind::Openai, &serve(Script::sse(&body, Duration::ZERO)).await.base_url()))
            .await;
    assert_eq!(reference.outcome, Outcome::Ok, "{:?}", reference.error);
    let expected = (reference.output_tokens, reference.request_id.clone());
    for n in [1, 2, 5, 17, 100, 333, 1000] {
        let script = Script::sse(&body, Duration::ZERO).split_across(n);
        assert!(script.chunks.iter().any(|c| !c.bytes.ends_with(b"\n\n")), "chunks of {n} cut through events");
        let server = serve(script).await;
        let s = probe(&provider("openai", ProviderKind::Openai, &server.base_url())).await;
        assert_eq!(s.outcome, Outcome::Ok, "chunks of {n}: {:?}", s.error);
        assert_eq!((s.output_tokens, s.request_id.clone()), expected, "chunks of {n}");
    }
}

#[tokio::test]
async fn close_delimited_and_content_length_streams_are_timed_per_read() {
    let body = fixture("openai-chat-stream-usage.sse");
    let streamed = Script::sse(&body, Duration::from_millis(30)).with_chunked(false);
    let sized = streamed.clone().with_header("Content-Length", body.len().to_string());
    for (what, script) in [("close-delimited", streamed), ("content-length", sized)] {
        let server = serve(script).await;
        let s = probe(&provider("openai", ProviderKind::Openai, &server.base_url())).await;
        assert_eq!(s.outcome, Outcome::Ok, "{what}: {:?}", s.error);
        let r = only_request(&server);
        assert_close("ttft", s.ttft_ms, ms_between(r.received_at, r.chunk_written_at[1]));
        let last = *r.chunk_written_at.last().expect("chunks");
        assert_close("total", s.total_ms, ms_between(r.received_at, last));
    }
}

#[tokio::test]
async fn large_response_heads_are_read_and_oversized_ones_refused() {
    let body = fixture("openai-chat-stream.sse");
    let large = Script::sse(&body, Duration::ZERO).with_header("Set-Cookie", "c".repeat(16 * 1024));
    let server = serve(large).await;
    let s = probe(&provider("openai", ProviderKind::Openai, &server.base_url())).await;
    assert_eq!(s.outcome, Outcome::Ok, "a 16 KB head is fine: {:?}", s.error);

    let oversized = Script::sse(&body, Duration::ZERO).with_header("Set-Cookie", "c".repeat(128 * 1024));
    let server = serve(oversized).await;
    let s = probe(&provider("openai", ProviderKind::Openai, &server.base_url())).await;
    assert_eq!(s.outcome, Outcome::StreamError, "{:?}", s.error);
    assert!(s.error.as_deref().is_some_and(|e| e.contains("head larger than")), "{:?}", s.error);
    assert_eq!(s.status, None, "no status was accepted");
}

#[tokio::test]
async fn error_statuses_map_to_outcome_classes() {
    let cases: Vec<(Script, Outcome)> = vec![
        (
            Script::json(429, &fixture("openai-error-429-rate-limit.json")).with_header("Retry-After", "7"),
            Outcome::RateLimited,
        ),
        (Script::json(401, &fixture("openai-error-401.json")), Outcome::AuthError),
        (Script::json(402, &fixture("openrouter-402.json")), Outcome::PaymentRequired),
        (Script::json(429, &fixture("openai-error-429-insufficient-quota.json")), Outcome::PaymentRequired),
        (Script::json(400, &fixture("anthropic-error-400-credit-balance.json")), Outcome::PaymentRequired),
        (Script::json(404, &fixture("openai-error-404.json")), Outcome::ModelUnavailable),
        (Script::json(400, &fixture("openai-error-400.json")), Outcome::ClientError),
        (Script::json(503, &fixture("openai-error-503.json")), Outcome::ServerError),
        (Script::json(529, &fixture("anthropic-error-529.json")), Outcome::ServerError),
    ];
    for (script, want) in cases {
        let status = script.status;
        let server = serve(script).await;
        let s = probe(&provider("openai", ProviderKind::Openai, &server.base_url())).await;
        assert_eq!(s.outcome, want, "HTTP {status}: {:?}", s.error);
        assert_eq!(s.status, Some(status));
        assert!(s.error.as_deref().is_some_and(|e| e.starts_with(&format!("HTTP {status}"))), "{:?}", s.error);
        assert!(s.ttfb_ms.is_some());
        if want == Outcome::RateLimited {
            assert_eq!(s.retry_after_s, Some(7.0));
        }
    }
}

/// One error-event case: what, body, adapter, error text prefix, tokens counted before it.
type ErrorCase = (&'static str, Vec<u8>, ProviderKind, &'static str, Option<u32>);

#[tokio::test]
async fn error_events_in_accepted_streams_are_stream_errors_with_the_provider_type() {
    // (what, fixture, adapter, the error text's start, output tokens counted before the error)
    let cases: [ErrorCase; 6] = [
        (
            "anthropic overloaded before content",
            fixture("anthropic-stream-overloaded-error.sse"),
            ProviderKind::Anthropic,
            "error event overloaded_error: Overloaded",
            None,
        ),
        (
            "anthropic overloaded after content",
            fixture("anthropic-stream-midstream-error.sse"),
            ProviderKind::Anthropic,
            "error event overloaded_error: Overloaded",
            Some(1),
        ),
        (
            "openai server_error",
            fixture("openai-stream-midstream-error.sse"),
            ProviderKind::Openai,
            "error event server_error: The server had an error",
            None,
        ),
        (
            "openrouter mid-reasoning",
            fixture("openrouter-stream-midstream-error.sse"),
            ProviderKind::Openai,
            "error event 400: Token limit reached",
            Some(10),
        ),
        (
            "groq event: error",
            fixture("groq-stream-error-event.sse"),
            ProviderKind::Openai,
            "error event invalid_request_error (tool_use_failed)",
            None,
        ),
        (
            "gemini after content",
            fixture("gemini-stream-midstream-error.sse"),
            ProviderKind::Gemini,
            "error event UNAVAILABLE: The model is overloaded",
            Some(2),
        ),
    ];
    for (what, body, kind, text, tokens) in cases {
        let server = serve(Script::sse(&body, Duration::ZERO)).await;
        let s = probe(&provider("p", kind, &server.base_url())).await;
        assert_eq!(s.outcome, Outcome::StreamError, "{what}: {:?}", s.error);
        assert_eq!(s.status, Some(200), "{what}: a 200 does not mean success");
        assert!(s.error.as_deref().is_some_and(|e| e.starts_with(text)), "{what}: {:?}", s.error);
        assert_eq!(s.output_tokens, tokens, "{what}: tokens before the error still count");
    }
}

#[tokio::test]
async fn interrupted_truncated_oversized_and_garbage_streams_are_stream_errors() {
    let body = fixture("openai-chat-stream.sse");
    let half = body.len() / 2;
    let truncated = Script::sse(&body[..half], Duration::ZERO);
    let aborted = Script::sse(&body, Duration::ZERO).with_end(End::Abort);
    let aborted = Script { chunks: aborted.chunks[..2].to_vec(), ..aborted };
    let huge = Script::sse(format!("data: {}\n\n", "x".repeat(400 * 1024)).as_bytes(), Duration::ZERO);
    let garbage = Script::sse(b"\xff\xfe\x00garbage\n\n{{{{\n\n", Duration::ZERO);
    let no_content =
        Script::sse(b"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\ndata: [DONE]\n\n", Duration::ZERO);
    for (what, script) in [
        ("truncated", truncated),
        ("aborted", aborted),
        ("oversized", huge),
        ("garbage", garbage),
        ("no content", no_content),
    ] {
        let server = serve(script).await;
        let s = probe(&provider("openai", ProviderKind::Openai, &server.base_url())).await;
        assert_eq!(s.outcome, Outcome::StreamError, "{what}: {:?}", s.error);
        assert!(s.error.is_some(), "{what}");
    }
}

#[tokio::test]
async fn first_token_and_total_timeouts_are_recorded_at_their_limits() {
    let cfg = ProbeConfig {
        ttft_timeout: Duration::from_millis(300),
        timeout: Duration::from_millis(900),
        ..probe_config(64)
    };
    // Headers arrive, then nothing: the first-token limit fires.
    let hang = Script::sse(b"", Duration::ZERO).with_end(End::Hang);
    let server = serve(hang).await;
    let p = provider("hang", ProviderKind::Openai, &server.base_url());
    let s = Prober::new(cfg.clone(), &[]).probe(&plan(&p, None), Utc::now()).await;
    assert_eq!(s.outcome, Outcome::Timeout, "{:?}", s.error);
    // The limit runs from before the write and `total_ms` from when the write returned, so the
    // write's own time (microseconds on loopback) may put it just under the limit. CI runs this
    // test in its wall-clock tier, alone: beside the suite, a late timer is load, not vigil.
    let write = 1.0;
    assert!(s.total_ms.is_some_and(|t| (300.0 - write..300.0 + SLACK_MS).contains(&t)), "{:?}", s.total_ms);
    assert!(s.ttfb_ms.is_some(), "the status line did arrive");

    // A token arrives, then the stream stalls: the total limit fires.
    let stall = Script::sse(&fixture("openai-chat-stream.sse"), Duration::ZERO);
    let stall = Script { chunks: stall.chunks[..2].to_vec(), end: End::Hang, ..stall };
    let server = serve(stall).await;
    let p = provider("stall", ProviderKind::Openai, &server.base_url());
    let s = Prober::new(cfg, &[]).probe(&plan(&p, None), Utc::now()).await;
    assert_eq!(s.outcome, Outcome::Timeout, "{:?}", s.error);
    assert!(s.ttft_ms.is_some());
}

#[tokio::test]
async fn a_hung_provider_does_not_delay_or_distort_the_others() {
    let hung = serve(Script::status(200).with_head_delay(Duration::from_secs(30))).await;
    let fast_script = Script::sse(&fixture("openai-chat-stream.sse"), Duration::from_millis(20));
    let fast_a = serve(fast_script.clone()).await;
    let fast_b = serve(fast_script).await;
    let providers = [
        provider("hung", ProviderKind::Openai, &hung.base_url()),
        provider("fast-a", ProviderKind::Openai, &fast_a.base_url()),
        provider("fast-b", ProviderKind::Openai, &fast_b.base_url()),
    ];
    let cfg =
        ProbeConfig { ttft_timeout: Duration::from_millis(800), timeout: Duration::from_secs(2), ..probe_config(64) };
    let metrics = Arc::new(Metrics::new("test-1").expect("metrics"));
    let scheduler = Scheduler::new(
        Planned::all(&providers.map(Arc::new), "test-1"),
        Prober::new(cfg, &[]),
        Duration::from_secs(60),
        8,
        metrics,
    );
    let samples = scheduler.run_round(None).await;
    assert_eq!(samples.len(), 3);
    assert_eq!(samples[0].outcome, Outcome::Timeout);
    // The first-token limit runs from before the write; `total_ms` from when it returned, which
    // the accept grace can hold back by up to one tick of the probe grid on a busy machine.
    let floor = 800.0 - vigil::io::probe::grid::TICK.as_secs_f64() * 1000.0;
    assert!(samples[0].total_ms.is_some_and(|t| t >= floor), "{:?}", samples[0].total_ms);
    for (s, server) in samples[1..].iter().zip([&fast_a, &fast_b]) {
        assert_eq!(s.outcome, Outcome::Ok, "{:?}", s.error);
        let r = only_request(server);
        assert_close("ttft beside a hung target", s.ttft_ms, ms_between(r.received_at, r.chunk_written_at[1]));
    }
}

/// The daemon's path: one dispatcher starts each target of a round once, never before its
/// stable offset, in the order of the offsets.
#[tokio::test]
async fn a_round_starts_each_target_once_at_its_offset_in_offset_order() {
    let server = serve(Script::json(200, br#"{"status":"ok"}"#)).await;
    let providers: Vec<Arc<ProviderConfig>> = (0..12)
        .map(|i| Arc::new(provider(&format!("h{i}"), ProviderKind::Http, &format!("{}/status/{i}", server.base_url()))))
        .collect();
    let interval = Duration::from_millis(600);
    let metrics = Arc::new(Metrics::new("test-1").expect("metrics"));
    let plans = Planned::all(&providers, "test-1");
    let offsets: std::collections::HashMap<String, Duration> =
        plans.iter().map(|p| (p.target.id(), vigil::run::scheduler::offset_for(&p.target.id(), interval))).collect();
    let scheduler = Scheduler::new(plans, Prober::new(probe_config(64), &[]), interval, 16, metrics);
    let (tx, mut rx) = tokio::sync::mpsc::channel(32);
    let shutdown = tokio_util::sync::CancellationToken::new();
    let start = tokio::time::Instant::now() + Duration::from_millis(50);
    let round = scheduler.run_one_round(start, tx, &shutdown);
    let collect = async {
        let mut out = vec![];
        while let Some(s) = rx.recv().await {
            out.push(s);
        }
        out
    };
    let samples: Vec<Sample> = tokio::join!(round, collect).1;

    assert_eq!(samples.len(), 12, "every target once");
    let ids: std::collections::HashSet<String> = samples.iter().map(|s| s.target.id()).collect();
    assert_eq!(ids.len(), 12, "no target twice");
    for r in server.requests() {
        let i: usize = r.path.trim_start_matches("/status/").parse().expect("a target's path");
        let offset = offsets[&format!("h{i}")];
        assert!(r.received_at >= start.into_std() + offset, "h{i} was started before its offset {offset:?}");
    }
    // Due times as the samples record them follow the offsets (pairs closer than a millisecond
    // may be recorded in either order: the wall-clock due time is derived at start).
    let mut by_due: Vec<&Sample> = samples.iter().collect();
    by_due.sort_by_key(|s| s.scheduled_at);
    for pair in by_due.windows(2) {
        let (a, b) = (offsets[&pair[0].target.id()], offsets[&pair[1].target.id()]);
        assert!(
            a <= b + Duration::from_millis(1),
            "{} (offset {a:?}) was due after {} (offset {b:?})",
            pair[0].target,
            pair[1].target
        );
    }
}

#[tokio::test]
async fn network_failures_are_classified() {
    // Nothing listens on a port we just released.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let s = probe(&provider("closed", ProviderKind::Openai, &format!("http://127.0.0.1:{port}"))).await;
    assert_eq!(s.outcome, Outcome::ConnectError, "{:?}", s.error);
    assert_eq!(s.status, None);

    let s = probe(&provider("nxdomain", ProviderKind::Openai, "http://vigil-probe-test.invalid")).await;
    assert_eq!(s.outcome, Outcome::DnsError, "{:?}", s.error);

    // A TLS server whose certificate the prober does not trust.
    let (tls, _cert) = StandIn::start_tls(|_| Script::status(200)).await.expect("tls stand-in");
    let s = probe(&provider("untrusted", ProviderKind::Openai, &tls.base_url())).await;
    assert_eq!(s.outcome, Outcome::TlsError, "{:?}", s.error);
    assert!(s.connect_ms.is_some() && s.tls_ms.is_none());
}

#[tokio::test]
async fn tls_phases_are_measured_on_a_fresh_connection() {
    let body = fixture("openai-chat-stream.sse");
    let (server, cert) = StandIn::start_tls(move |_| Script::sse(&body, Duration::ZERO)).await.expect("tls stand-in");
    let p = provider("tls", ProviderKind::Openai, &server.base_url());
    let prober = Prober::new(probe_config(64), &[cert]);
    for _ in 0..2 {
        let s = prober.probe(&plan(&p, None), Utc::now()).await;
        assert_eq!(s.outcome, Outcome::Ok, "{:?}", s.error);
        assert!(s.dns_ms.is_some(), "localhost is resolved");
        assert!(s.connect_ms.is_some());
        assert!(s.tls_ms.is_some_and(|t| t > 0.0), "every probe pays a full handshake");
    }
    assert_eq!(server.requests().len(), 2, "two probes, two connections");
}

#[tokio::test]
async fn plain_http_targets_expect_2xx() {
    let ok = serve(Script::json(200, br#"{"status":"ok"}"#)).await;
    let s = probe(&provider("status", ProviderKind::Http, &format!("{}/status", ok.base_url()))).await;
    assert_eq!(s.outcome, Outcome::Ok, "{:?}", s.error);
    assert_eq!(s.adherence_ok, None);
    assert_eq!(s.ttft_ms, None);
    assert_eq!(only_request(&ok).method, "GET");
    let down = serve(Script::json(503, b"{}")).await;
    let s = probe(&provider("status", ProviderKind::Http, &down.base_url())).await;
    assert_eq!(s.outcome, Outcome::ServerError);
}

#[tokio::test]
async fn adherent_reply_and_cost_from_configured_price() {
    let body = concat!(
        "data: {\"id\":\"c1\",\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n",
        "data: {\"id\":\"c1\",\"choices\":[{\"delta\":{\"content\":\"{\\\"ok\\\"\"}}]}\n\n",
        "data: {\"id\":\"c1\",\"choices\":[{\"delta\":{\"content\":\":true}\"}}]}\n\n",
        "data: {\"id\":\"c1\",\"choices\":[],\"usage\":{\"prompt_tokens\":1000000,\"completion_tokens\":1000000}}\n\n",
        "data: [DONE]\n\n",
    );
    let server = serve(Script::sse(body.as_bytes(), Duration::from_millis(10))).await;
    let mut p = provider("priced", ProviderKind::Openai, &server.base_url());
    p.price = Some(Price { input_per_mtok: 0.59, output_per_mtok: 0.79 });
    let s = probe(&p).await;
    assert_eq!(s.outcome, Outcome::Ok, "{:?}", s.error);
    assert_eq!(s.adherence_ok, Some(true));
    assert!(s.cost_usd.is_some_and(|c| (c - 1.38).abs() < 1e-9), "{:?}", s.cost_usd);
}

#[tokio::test]
async fn reasoning_models_get_small_effort_and_room_for_an_answer() {
    let server = serve(Script::sse(&fixture("groq-chat-stream.sse"), Duration::ZERO)).await;
    let mut p = provider("groq", ProviderKind::Openai, &server.base_url());
    p.reasoning_models = vec!["test-model".into()];
    let s = probe(&p).await;
    assert_eq!(s.outcome, Outcome::Ok, "{:?}", s.error);
    assert!(s.ttfr_ms.is_some() && s.ttfr_ms <= s.ttft_ms, "reasoning is timed separately, before content");
    let body = only_request(&server).json().expect("json");
    assert_eq!(body["reasoning_effort"], "low");
    assert!(body["max_completion_tokens"].as_u64().is_some_and(|n| n > 16));
}

/// The first message's text as the server received it, per adapter.
fn first_message(kind: ProviderKind, body: &serde_json::Value) -> String {
    let text = match kind {
        ProviderKind::Openai | ProviderKind::Azure => &body["messages"][0]["content"],
        ProviderKind::Anthropic => &body["system"],
        ProviderKind::Gemini => &body["systemInstruction"]["parts"][0]["text"],
        ProviderKind::Bedrock => &body["system"][0]["text"],
        ProviderKind::Vertex => &body["systemInstruction"]["parts"][0]["text"],
        ProviderKind::Http => &serde_json::Value::Null,
    };
    text.as_str().expect("a system prompt").to_string()
}

#[tokio::test]
async fn every_probe_prompt_starts_with_a_fresh_nonce() {
    for (kind, name) in [
        (ProviderKind::Openai, "openai-chat-stream.sse"),
        (ProviderKind::Anthropic, "anthropic-messages-stream.sse"),
        (ProviderKind::Gemini, "gemini-stream.sse"),
    ] {
        let server = serve(Script::sse(&fixture(name), Duration::ZERO)).await;
        let p = provider("p", kind, &server.base_url());
        for _ in 0..3 {
            let s = probe(&p).await;
            assert_eq!(s.outcome, Outcome::Ok, "{kind:?}: {:?}", s.error);
        }
        let prompts: Vec<String> =
            server.requests().iter().map(|r| first_message(kind, &r.json().expect("json body"))).collect();
        assert_eq!(prompts.len(), 3);
        for pair in prompts.windows(2) {
            let common = pair[0].bytes().zip(pair[1].bytes()).take_while(|(a, b)| a == b).count();
            assert!(common < vigil::io::probe::NONCE_LEN, "{kind:?}: {pair:?} share a prefix of {common} bytes");
        }
        for prompt in &prompts {
            assert!(prompt.ends_with(vigil::io::probe::SYSTEM_PROMPT), "{kind:?}: the instruction is intact: {prompt}");
        }
    }
}

#[tokio::test]
async fn deprecation_and_sunset_headers_reach_the_model_deprecated_rule() {
    let script = Script::sse(&fixture("openai-chat-stream.sse"), Duration::ZERO)
        .with_header("Deprecation", "@1795132800")
        .with_header("Sunset", "Sun, 20 Dec 2026 00:00:00 GMT");
    let server = serve(script).await;
    let p = provider("openai", ProviderKind::Openai, &server.base_url());
    let s = probe(&p).await;
    assert_eq!(s.outcome, Outcome::Ok, "{:?}", s.error);
    use vigil::decide::alert::deprecation::evaluate;
    use vigil::vocab::notice::{DeprecationSource, DEFAULT_WARN_DAYS};
    let sources: Vec<_> = s.deprecation.iter().map(|n| n.source.clone()).collect();
    assert_eq!(sources, vec![DeprecationSource::DeprecationHeader, DeprecationSource::SunsetHeader]);
    let now = chrono::DateTime::parse_from_rfc3339("2026-12-01T00:00:00Z").expect("date").with_timezone(&Utc);
    let notices: Vec<_> = s.deprecation.iter().map(|n| (s.target.clone(), n.clone())).collect();
    let alerts = evaluate("test-1", &notices, now, DEFAULT_WARN_DAYS);
    assert_eq!(alerts.len(), 1);
    assert_eq!(alerts[0].kind, vigil::decide::alert::AlertKind::ModelDeprecated);
    assert_eq!(
        alerts[0].summary,
        "test-model deprecated since 2026-11-20, says the provider's Deprecation response header"
    );
    // A probe without the headers carries no notice.
    let plain = serve(Script::sse(&fixture("openai-chat-stream.sse"), Duration::ZERO)).await;
    let s = probe(&provider("openai", ProviderKind::Openai, &plain.base_url())).await;
    assert!(s.deprecation.is_empty());
}

#[tokio::test]
async fn azure_deployment_url_api_version_and_api_key_header() {
    let server = serve(Script::sse(&fixture("azure-chat-stream.sse"), Duration::from_millis(5))).await;
    let mut p = provider("azure", ProviderKind::Azure, &server.base_url());
    p.models = vec!["chat-default".into()];
    let s = probe(&p).await;
    assert_eq!(s.outcome, Outcome::Ok, "{:?}", s.error);
    assert_eq!(s.adherence_ok, Some(true), "the written transcript answers the demanded JSON");
    assert_eq!((s.input_tokens, s.output_tokens), (Some(41), Some(5)));
    assert_eq!(s.request_id.as_deref(), Some("chatcmpl-AzTestStream0001"));
    let r = only_request(&server);
    assert_eq!(r.path_only(), "/openai/deployments/chat-default/chat/completions");
    assert!(r.path.ends_with("?api-version=2024-10-21"), "{}", r.path);
    assert_eq!(r.header("api-key"), Some("sk-test-probe"));
    assert_eq!(r.header("authorization"), None, "Azure keys go in api-key only");
    let body = r.json().expect("json");
    assert!(body.get("model").is_none(), "the deployment names the model");
    assert_nonce_prompt(&body["messages"][0]["content"]);

    // A version in base_url wins over the default.
    let server = serve(Script::sse(&fixture("azure-chat-stream.sse"), Duration::ZERO)).await;
    let mut p =
        provider("azure", ProviderKind::Azure, &format!("{}/?api-version=2025-04-01-preview", server.base_url()));
    p.models = vec!["chat-default".into()];
    assert_eq!(probe(&p).await.outcome, Outcome::Ok);
    assert!(only_request(&server).path.ends_with("?api-version=2025-04-01-preview"));
}

#[tokio::test]
async fn azure_error_bodies_are_classified_and_never_show_the_key() {
    for (file, status, want) in [
        ("azure-error-404-deployment.json", 404, Outcome::ModelUnavailable),
        ("azure-error-401.json", 401, Outcome::AuthError),
        ("azure-error-429.json", 429, Outcome::RateLimited),
    ] {
        let script = Script::json(status, &fixture(file)).with_header("retry-after", "6");
        let server = serve(script).await;
        let mut p = provider("azure", ProviderKind::Azure, &server.base_url());
        p.secret_headers = vec![vigil::config::SecretHeader {
            name: "x-gateway-token".into(),
            env: "GATEWAY_TOKEN".into(),
            value: SecretString::from("sk-test-gateway-secret"),
        }];
        let s = probe(&p).await;
        assert_eq!(s.outcome, want, "{file}: {:?}", s.error);
        let r = only_request(&server);
        assert_eq!(r.header("x-gateway-token"), Some("sk-test-gateway-secret"), "headers_env goes on the wire");
        let shown = format!("{s:?}");
        assert!(!shown.contains("sk-test-probe") && !shown.contains("sk-test-gateway-secret"), "{file}: {shown}");
        if want == Outcome::RateLimited {
            assert_eq!(s.retry_after_s, Some(6.0));
        }
    }
}
