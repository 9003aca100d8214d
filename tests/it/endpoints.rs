//! Embeddings and the Responses API on real parts: the real daemon probes an OpenAI-compatible
//! stand-in on loopback through `endpoint = "embeddings"` (one JSON answer, its second half
//! 80 ms after its first) and `endpoint = "responses"` (a streamed Responses API answer whose
//! first text delta comes 60 ms in). Their samples land in a real SQLite file with TTFT measured
//! the way each endpoint defines it, both reach the router export (with `endpoint`, and LiteLLM's
//! `mode: embedding`), and when both start failing each pages `errors` and opens its breaker,
//! exactly as a chat target does.

use crate::support::daemon::{spawn_app, webhook_deliveries, DaemonConfig, Provider};
use crate::support::{fixture, poll_until};

use bytes::Bytes;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use vigil::io::store::SampleQuery;
use vigil::run::demo::standin::{Chunk, Script, StandIn};
use vigil::vocab::sample::Outcome;

/// The embeddings answer in two writes, the second `gap` after the first.
fn embedding_in_two(gap: Duration) -> Script {
    let body = fixture("openai-embeddings.json");
    let mut script = Script::json(200, &body);
    let half = body.len() / 2;
    script.chunks = vec![
        Chunk::new(Duration::ZERO, Bytes::copy_from_slice(&body[..half])),
        Chunk::new(gap, Bytes::copy_from_slice(&body[half..])),
    ];
    script
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embeddings_and_responses_targets_are_timed_exported_and_paged_like_chat() {
    let failing = Arc::new(AtomicBool::new(false));
    let fail = failing.clone();
    let responses = fixture("openai-responses-stream.sse");
    let broken = fixture("openai-responses-stream-error.sse");
    let provider = StandIn::start(move |r| {
        let failing = fail.load(Ordering::SeqCst);
        match (r.path_only(), failing) {
            ("/v1/embeddings", false) => embedding_in_two(Duration::from_millis(80)),
            ("/v1/embeddings", true) => {
                Script::json(503, br#"{"error":{"message":"overloaded","type":"server_error"}}"#)
            }
            // The fifth event is the first text delta: 4 × 15 ms in.
            ("/v1/responses", false) => Script::sse(&responses, Duration::from_millis(15)),
            ("/v1/responses", true) => Script::sse(&broken, Duration::from_millis(1)),
            _ => Script::json(404, br#"{"error":{"message":"no such route"}}"#),
        }
    })
    .await
    .expect("stand-in");
    let hook = StandIn::start(|_| Script::json(200, b"{}")).await.expect("webhook receiver");
    let data = tempfile::tempdir().expect("tempdir");
    let base = format!("{}/v1", provider.base_url());
    let config = DaemonConfig::sqlite(data.path())
        .region("test-1")
        // Deadlines (and so LiteLLM's timeouts) from the third sample on.
        .set("baseline.min_samples_p50", 3)
        .webhook(&format!("{}/hook", hook.base_url()))
        .provider(Provider::openai("emb", &base).models(&["text-embedding-3-small"]).set("endpoint", "embeddings"))
        .provider(Provider::openai("resp", &base).models(&["gpt-4.1-mini"]).set("endpoint", "responses"))
        .key("sk-test-endpoints");
    let daemon = spawn_app(config.build()).await;
    let addr = daemon.addr;
    let http = reqwest::Client::new();
    let get = |query: &'static str| {
        let http = http.clone();
        async move {
            let r = http.get(format!("http://{addr}/v1/thresholds{query}")).send().await.ok()?;
            // The LiteLLM format is YAML (a superset of the native JSON).
            serde_norway::from_slice::<serde_json::Value>(&r.bytes().await.ok()?).ok()
        }
    };

    // A few good probes of each, stored.
    let url = format!("sqlite://{}/vigil.db", data.path().display());
    let store = vigil::io::store::open(&url).await.expect("store");
    let good = poll_until(Duration::from_secs(20), || async {
        let samples = store.samples(&SampleQuery::default()).await.ok()?;
        let ok = |p: &str| samples.iter().filter(|s| s.target.provider == p && s.outcome == Outcome::Ok).count();
        (ok("emb") >= 3 && ok("resp") >= 3).then_some(samples)
    })
    .await
    .expect("three good probes of each endpoint");
    let emb = good.iter().find(|s| s.target.provider == "emb" && s.outcome == Outcome::Ok).expect("embedding");
    let (ttfb, ttft, total) = (emb.ttfb_ms.unwrap_or(0.0), emb.ttft_ms.unwrap_or(0.0), emb.total_ms.unwrap_or(0.0));
    // The stand-in's 80 ms run from when it read the request; the probe's clock from when its
    // write returned, which a loaded machine can put a little after that read (79.6 ms seen
    // beside the suite). The first byte comes at once, so 75 ms still tells the last from it.
    let last_byte = 80.0 - 5.0;
    assert!(ttft >= last_byte && ttfb < 60.0, "an embedding's TTFT is its last byte: ttfb {ttfb}, ttft {ttft}");
    assert_eq!(ttft, total, "its TTFT is the whole answer");
    assert_eq!((emb.input_tokens, emb.output_tokens, emb.tokens_per_s), (Some(8), None, None));
    assert!(emb.cost_usd.is_none(), "no price for a loopback host");
    let resp = good.iter().find(|s| s.target.provider == "resp" && s.outcome == Outcome::Ok).expect("response");
    let (ttfb, ttft) = (resp.ttfb_ms.unwrap_or(0.0), resp.ttft_ms.unwrap_or(0.0));
    // As above: 60 ms by the stand-in's clock, a little less by the probe's on a loaded machine.
    assert!(ttft >= 60.0 - 5.0 && ttft > ttfb, "TTFT on the first output text delta: ttfb {ttfb}, ttft {ttft}");
    assert_eq!((resp.input_tokens, resp.output_tokens), (Some(36), Some(5)));
    assert_eq!(resp.adherence_ok, Some(true), "instructions carry the health check's instruction");

    let requests = provider.requests();
    let body = |path: &str| requests.iter().find(|r| r.path_only() == path).and_then(|r| r.json()).expect(path);
    let embed = body("/v1/embeddings");
    assert_eq!(embed["model"], "text-embedding-3-small");
    assert!(embed["input"].as_str().is_some_and(|i| i.len() > 12 && i[..12].chars().all(|c| c.is_ascii_hexdigit())));
    let asked = body("/v1/responses");
    assert_eq!((asked["stream"].as_bool(), asked["store"].as_bool()), (Some(true), Some(false)), "{asked}");
    assert!(asked["instructions"].as_str().is_some_and(|i| i.ends_with("{\"ok\":true}")), "{asked}");

    let doc = get("").await.expect("thresholds");
    let targets = doc["targets"].as_array().expect("targets");
    let endpoint = |id: &str| targets.iter().find(|t| t["target"] == id).map(|t| t["endpoint"].clone());
    assert_eq!(endpoint("emb/text-embedding-3-small"), Some("embeddings".into()), "{doc}");
    assert_eq!(endpoint("resp/gpt-4.1-mini"), Some("responses".into()), "{doc}");
    // Once both have deadlines (three samples each in the monitor's baselines).
    let litellm = match poll_until(Duration::from_secs(20), || async {
        let doc = get("?format=litellm").await?;
        let timed = doc["model_list"].as_array()?.iter().filter(|d| {
            let p = &d["litellm_params"];
            p.get("timeout").is_some() || p.get("stream_timeout").is_some()
        });
        (timed.count() == 2).then_some(doc)
    })
    .await
    {
        Some(doc) => doc,
        None => panic!("both deployments get their deadline: {:?}", get("?format=litellm").await),
    };
    let deployments = litellm["model_list"].as_array().expect("model_list");
    let emb_d = deployments
        .iter()
        .find(|d| d["model_info"]["vigil_target"] == "emb/text-embedding-3-small")
        .expect("the embeddings deployment");
    assert_eq!(emb_d["model_info"]["mode"], "embedding", "{emb_d}");
    assert_eq!(emb_d["litellm_params"]["model"], "openai/text-embedding-3-small");
    let timeout = emb_d["litellm_params"]["timeout"].as_f64().unwrap_or(0.0);
    assert!(timeout >= 0.08, "the deadline to the whole answer, as LiteLLM's timeout: {emb_d}");
    assert!(emb_d["litellm_params"].get("stream_timeout").is_none(), "an embedding is not streamed: {emb_d}");
    let resp_d = deployments
        .iter()
        .find(|d| d["model_info"]["vigil_target"] == "resp/gpt-4.1-mini")
        .expect("the responses deployment");
    assert!(resp_d["litellm_params"]["stream_timeout"].as_f64().is_some_and(|t| t >= 0.06), "{resp_d}");
    // Both documents as their published schemas describe them.
    let (native, lite) = (data.path().join("thresholds.json"), data.path().join("litellm.json"));
    std::fs::write(&native, doc.to_string()).expect("write");
    std::fs::write(&lite, litellm.to_string()).expect("write");
    crate::router_export::validate("thresholds.json", &[native.as_path()]);
    crate::router_export::validate("litellm.json", &[lite.as_path()]);

    // Both fail: each pages `errors` and opens its breaker, as a chat target would.
    failing.store(true, Ordering::SeqCst);
    let open = poll_until(Duration::from_secs(30), || async {
        let doc = get("").await?;
        let targets = doc["targets"].as_array()?;
        let open = targets.iter().filter(|t| t["breaker"] == "open").count();
        (open == 2).then_some(doc)
    })
    .await;
    assert!(open.is_some(), "both breakers open: {:?}", get("").await);
    let paged = poll_until(Duration::from_secs(20), || {
        let sums: Vec<String> = webhook_deliveries(&hook)
            .into_iter()
            .filter(|(s, k, _)| (s == "firing" || s == "update") && k.contains(&"errors".to_string()))
            .flat_map(|(_, _, sums)| sums)
            .collect();
        // The embeddings target's 503s and the Responses stream's `response.failed`, one incident
        // each: `errors` opens it, or joins it as an update when the breaker's alert came first
        // (which of the two a minute's evaluation sees first depends on when the probes fail).
        let both = sums.iter().any(|s| s.contains("HTTP 503: overloaded"))
            && sums.iter().any(|s| s.contains("error event server_error: The server had an error"));
        async move { both.then_some(sums) }
    })
    .await;
    assert!(paged.is_some(), "errors paged for both: {:?}", webhook_deliveries(&hook));
    daemon.stop_within(Duration::from_secs(12)).await;

    let samples = store.samples(&SampleQuery::default()).await.expect("samples");
    let failed =
        |p: &str| samples.iter().find(|s| s.target.provider == p && s.outcome != Outcome::Ok).map(|s| s.outcome);
    assert_eq!(failed("emb"), Some(Outcome::ServerError));
    assert_eq!(failed("resp"), Some(Outcome::StreamError));
}
