//! `model_deprecated` from each source, end to end: a running daemon probes stand-in providers
//! over real HTTP, polls their models endpoints, and a real webhook receiver gets one warning
//! per retiring model saying the date and which source said so — the `Deprecation`/`Sunset`
//! response headers, OpenRouter's `expiration_date`, and a models list that stopped listing a
//! model the probes still reach. The poller's reads of each kind of endpoint (OpenAI list,
//! Anthropic and Gemini per-model) and its handling of bad answers are checked over HTTP too.

use crate::support::daemon::{spawn_app, strings, DaemonConfig, Provider};
use crate::support::{fixture, settle};

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use vigil::config::Config;
use vigil::io::feeds::model_lists::{ModelsPoller, SeenModels, SharedModelNotices};
use vigil::run::demo::standin::{RequestRecord, Script, StandIn};
use vigil::vocab::notice::DeprecationSource;

/// An OpenAI chat stream whose answer obeys the probe's system prompt.
fn adherent_stream() -> Vec<u8> {
    let chunk = |delta: serde_json::Value, finish: serde_json::Value| {
        let v = serde_json::json!({"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 1,
            "model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        format!("data: {v}\n\n")
    };
    let mut out = chunk(serde_json::json!({"role": "assistant", "content": "{\"ok\":true}"}), serde_json::Value::Null);
    out.push_str(&chunk(serde_json::json!({}), serde_json::json!("stop")));
    out.push_str("data: [DONE]\n\n");
    out.into_bytes()
}

/// The recorded head's header lines (`name: value`), status line left out.
fn head_headers(name: &str) -> Vec<(String, String)> {
    let text = String::from_utf8(fixture(name)).expect("utf8");
    text.lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .filter(|(k, _)| !k.eq_ignore_ascii_case("content-type"))
        .collect()
}

/// A provider stand-in: chat streams for POSTs (with `extra` headers), `models(n)` for the n-th
/// `GET …/models` (counting from 0), 404 for anything else.
async fn provider(extra: Vec<(String, String)>, models: impl Fn(usize) -> Vec<u8> + Send + Sync + 'static) -> StandIn {
    let reads = AtomicUsize::new(0);
    let stream = adherent_stream();
    StandIn::start(move |r: &RequestRecord| {
        if r.method == "POST" {
            let mut s = Script::sse(&stream, Duration::from_millis(1));
            for (k, v) in &extra {
                s = s.with_header(k.clone(), v.clone());
            }
            s
        } else if r.path_only().ends_with("/models") {
            Script::json(200, &models(reads.fetch_add(1, Ordering::SeqCst)))
        } else {
            Script::json(404, br#"{"error":{"message":"not found"}}"#)
        }
    })
    .await
    .expect("stand-in")
}

/// `model_deprecated` alerts the webhook received opening an incident: (provider, summary).
fn deprecations(hook: &StandIn) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for v in hook.requests().iter().filter_map(RequestRecord::json).filter(|v| v["update"] != true) {
        for a in v["alerts"].as_array().into_iter().flatten() {
            if a["kind"] == "model_deprecated" && a["status"] == "firing" {
                out.push((
                    a["provider"].as_str().unwrap_or_default().to_string(),
                    a["summary"].as_str().unwrap_or_default().to_string(),
                ));
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_source_of_a_retirement_reaches_the_webhook_as_model_deprecated() {
    // Responses announce the retirement in their headers; the list says nothing.
    let sunset = provider(head_headers("deprecation-sunset-head.txt"), |_| fixture("openai-models-list.json")).await;
    // OpenRouter's list gives the model an expiration date.
    let router = provider(vec![], |_| fixture("openrouter-models-expiration.json")).await;
    // The list names the model at the first read and no longer at later ones; probes still work.
    let lister = provider(vec![], |n| match n {
        0 => fixture("openai-models-list.json"),
        _ => fixture("openai-models-list-model-removed.json"),
    })
    .await;
    let hook = StandIn::start(|_| Script::json(200, b"{}")).await.expect("webhook receiver");
    let data = tempfile::tempdir().expect("tempdir");
    let config = DaemonConfig::sqlite(data.path())
        .region("eu-test-1")
        .set("deprecation.models_every", "1s")
        .signed_webhook(&format!("{}/hook", hook.base_url()), "hook-secret")
        .provider(Provider::openai("sunset", &format!("{}/v1", sunset.base_url())).models(&["gpt-4o-mini"]))
        .provider(
            Provider::openai("router", &format!("{}/api/v1", router.base_url()))
                .models(&["example/old-model-preview"])
                .set("routes", strings(&["Host"])),
        )
        .provider(Provider::openai("lister", &format!("{}/v1", lister.base_url())).models(&["gpt-4o-mini"]))
        .key("sk-test-lists");
    let daemon = spawn_app(config.build()).await;

    let from_each =
        |got: &Vec<(String, String)>| ["sunset", "router", "lister"].iter().all(|p| got.iter().any(|(q, _)| q == p));
    let got = settle(Duration::from_secs(20), || async { deprecations(&hook) }, from_each).await;
    daemon.stop().await;

    let summary = |p: &str| {
        let all: Vec<&String> = got.iter().filter(|(q, _)| q == p).map(|(_, s)| s).collect();
        assert_eq!(all.len(), 1, "{p}: one warning, not repeated: {got:?}");
        all[0].clone()
    };
    // The earlier of the two header dates (Deprecation 2026-11-20, Sunset 2026-12-20) is named.
    let s = summary("sunset");
    assert!(s.contains("2026-11-20") && s.contains("Deprecation response header"), "{s}");
    let s = summary("router");
    assert!(s.contains("2026-12-15") && s.contains("OpenRouter's model list (expiration_date)"), "{s}");
    let s = summary("lister");
    assert!(s.starts_with("gpt-4o-mini unlisted since ") && s.contains("no longer lists it"), "{s}");

    // The lists were read with the provider's key, as the probes send it.
    let read = lister.requests().into_iter().find(|r| r.path_only() == "/v1/models").expect("a models read");
    assert_eq!(read.header("authorization"), Some("Bearer sk-test-lists"));
    assert!(router.requests().iter().any(|r| r.path_only() == "/api/v1/models"));
    assert!(data.path().join(vigil::io::feeds::model_lists::SEEN_FILE).exists(), "what was listed is remembered");
}

fn provider_config(kind: &str, base: &str, model: &str) -> Arc<vigil::config::ProviderConfig> {
    let text = format!(
        "[[provider]]\nname = \"p\"\nkind = \"{kind}\"\nbase_url = \"{base}\"\napi_key_env = \"K\"\nmodels = [\"{model}\"]\n"
    );
    let env: BTreeMap<String, String> = [("K".to_string(), "sk-test-models".to_string())].into();
    Config::from_toml(&text, &env).expect("config").providers[0].clone()
}

/// Polls `p` once more and returns what the shared notices say about `model`.
async fn poll(
    poller: &ModelsPoller,
    seen: &mut SeenModels,
    shared: &SharedModelNotices,
    model: &str,
) -> Vec<DeprecationSource> {
    *seen = poller.poll_once(seen.clone(), chrono::Utc::now()).await;
    let notices = shared.read().expect("lock");
    notices.of("p", model).iter().map(|n| n.source.clone()).collect()
}

#[tokio::test]
async fn anthropic_and_gemini_models_are_asked_one_by_one_with_their_own_key_headers() {
    for (kind, base, model, ok, gone, key_header) in [
        (
            "anthropic",
            "/v1",
            "claude-3-5-haiku-latest",
            "anthropic-model-get.json",
            "anthropic-error-404.json",
            "x-api-key",
        ),
        (
            "gemini",
            "/v1beta",
            "gemini-2.0-flash-lite",
            "gemini-model-get.json",
            "gemini-error-404.json",
            "x-goog-api-key",
        ),
    ] {
        let reads = Arc::new(AtomicUsize::new(0));
        let count = reads.clone();
        let (ok, gone) = (fixture(ok), fixture(gone));
        let server = StandIn::start(move |_| match count.fetch_add(1, Ordering::SeqCst) {
            0 => Script::json(200, &ok),
            1 => Script::json(503, b"{}"),
            _ => Script::json(404, &gone),
        })
        .await
        .expect("stand-in");
        let p = provider_config(kind, &format!("{}{base}", server.base_url()), model);
        let dir = tempfile::tempdir().expect("temp dir");
        let shared = SharedModelNotices::default();
        let probe = Config::from_toml("", &BTreeMap::new()).expect("defaults").probe;
        let poller = ModelsPoller::new(&[p], &probe, Some(Duration::from_secs(60)), dir.path(), shared.clone());
        let mut seen = SeenModels::default();
        assert!(poll(&poller, &mut seen, &shared, model).await.is_empty(), "{kind}: listed");
        assert!(poll(&poller, &mut seen, &shared, model).await.is_empty(), "{kind}: a 503 says nothing");
        assert_eq!(
            poll(&poller, &mut seen, &shared, model).await,
            vec![DeprecationSource::MissingFromModels],
            "{kind}"
        );
        let r = &server.requests()[0];
        assert_eq!(r.path_only(), format!("{base}/models/{model}"), "{kind}");
        assert_eq!(r.header(key_header), Some("sk-test-models"), "{kind}");
        assert!(r.header("authorization").is_none(), "{kind}: the key goes only where the provider wants it");
    }
}

#[tokio::test]
async fn bad_answers_keep_the_last_findings_and_never_raise_a_notice() {
    let reads = Arc::new(AtomicUsize::new(0));
    let count = reads.clone();
    let server = StandIn::start(move |_| match count.fetch_add(1, Ordering::SeqCst) {
        0 => Script::json(200, &fixture("openai-models-list.json")),
        1 => Script::json(200, &fixture("openai-models-list-model-removed.json")),
        2 => Script::json(200, b"<html>maintenance</html>"),
        3 => Script::json(200, br#"{"object":"list","data":[]}"#),
        4 => Script::json(500, br#"{"error":{"message":"boom"}}"#),
        _ => Script::json(200, &fixture("openai-models-list.json")).with_head_delay(Duration::from_secs(5)),
    })
    .await
    .expect("stand-in");
    let p = provider_config("openai", &format!("{}/v1", server.base_url()), "gpt-4o-mini");
    let dir = tempfile::tempdir().expect("temp dir");
    let shared = SharedModelNotices::default();
    let probe = Config::from_toml("", &BTreeMap::new()).expect("defaults").probe;
    let poller = ModelsPoller::with_timeout(
        &[p],
        &probe,
        Some(Duration::from_secs(60)),
        dir.path(),
        shared.clone(),
        Duration::from_millis(300),
    );
    let mut seen = SeenModels::default();
    assert!(poll(&poller, &mut seen, &shared, "gpt-4o-mini").await.is_empty(), "listed");
    let missing = vec![DeprecationSource::MissingFromModels];
    assert_eq!(poll(&poller, &mut seen, &shared, "gpt-4o-mini").await, missing, "no longer listed");
    // Not JSON, an empty list, a 500, a hung server: each keeps the last findings.
    for what in ["not JSON", "an empty list", "HTTP 500", "no answer in time"] {
        let started = std::time::Instant::now();
        assert_eq!(poll(&poller, &mut seen, &shared, "gpt-4o-mini").await, missing, "{what}");
        assert!(started.elapsed() < Duration::from_secs(3), "{what}: bounded");
    }
    assert_eq!(reads.load(Ordering::SeqCst), 6);
}
