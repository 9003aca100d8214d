//! Alerts under a running daemon: a stand-in provider fails, the signed webhook receives one
//! firing notification; it recovers, the webhook receives one resolve. Nothing is sent twice.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use vigil::app::{App, AppOptions};
use vigil::config::Config;
use vigil::demo::standin::{Script, StandIn};

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))).expect("fixture")
}

/// An OpenAI chat stream whose answer obeys the probe's system prompt (`{"ok":true}`), so a
/// healthy stand-in raises no `adherence_failed`.
fn adherent_stream() -> Vec<u8> {
    let chunk = |delta: serde_json::Value, finish: serde_json::Value| {
        let v = serde_json::json!({"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 1,
            "model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        format!("data: {v}\n\n")
    };
    let mut out = chunk(serde_json::json!({"role": "assistant", "content": ""}), serde_json::Value::Null);
    out.push_str(&chunk(serde_json::json!({"content": "{\"ok\":"}), serde_json::Value::Null));
    out.push_str(&chunk(serde_json::json!({"content": "true}"}), serde_json::Value::Null));
    out.push_str(&chunk(serde_json::json!({}), serde_json::json!("stop")));
    out.push_str("data: [DONE]\n\n");
    out.into_bytes()
}

/// Webhook deliveries of notifications (status, alert kinds), in arrival order; an update in
/// place of an open incident reads as status `update`.
fn deliveries(hook: &StandIn) -> Vec<(String, Vec<String>)> {
    hook.requests()
        .iter()
        .filter_map(|r| r.json())
        .map(|v| {
            let kinds = v["alerts"]
                .as_array()
                .map(|a| a.iter().filter_map(|x| x["kind"].as_str().map(String::from)).collect())
                .unwrap_or_default();
            let status = if v["update"] == true { "update" } else { v["status"].as_str().unwrap_or_default() };
            (status.to_string(), kinds)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_provider_pages_once_and_resolves_once() {
    let healthy = Arc::new(AtomicBool::new(true));
    let flag = healthy.clone();
    let (ok, err) = (adherent_stream(), fixture("openai-error-503.json"));
    let provider = StandIn::start(move |_| {
        if flag.load(Ordering::SeqCst) {
            Script::sse(&ok, Duration::from_millis(1))
        } else {
            Script::json(503, &err)
        }
    })
    .await
    .expect("stand-in");
    let hook = StandIn::start(|_| Script::json(200, b"{}")).await.expect("webhook receiver");
    let data = tempfile::tempdir().expect("tempdir");
    let text = format!(
        r#"
region = "eu-test-1"
[storage]
url = "sqlite://{d}/vigil.db"
data_dir = "{d}"
batch_age = "100ms"
[http]
listen = "127.0.0.1:0"
[probe]
interval = "1s"
timeout = "900ms"
[breaker]
open_for = "2s"
[alerts]
error_probes = 2
resolve_after = 2
[[alerts.webhook]]
url_env = "VIGIL_TEST_HOOK"
secret_env = "VIGIL_TEST_HOOK_SECRET"
[[provider]]
name = "flaky"
kind = "openai"
base_url = "{base}/v1"
api_key_env = "VIGIL_TEST_KEY"
models = ["m"]
"#,
        d = data.path().display(),
        base = provider.base_url()
    );
    let env: BTreeMap<String, String> = [
        ("VIGIL_TEST_KEY".to_string(), "sk-test-alerting".to_string()),
        ("VIGIL_TEST_HOOK".to_string(), format!("{}/hook", hook.base_url())),
        ("VIGIL_TEST_HOOK_SECRET".to_string(), "hook-secret".to_string()),
    ]
    .into();
    let config = Config::from_toml(&text, &env).expect("valid config");
    let app = App::build(config, AppOptions::default()).await.expect("app builds");
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(app.run_until_stopped(shutdown.clone()));

    // Healthy first: nothing is sent.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(deliveries(&hook).is_empty(), "{:?}", deliveries(&hook));

    healthy.store(false, Ordering::SeqCst);
    let mut firing = Vec::new();
    for _ in 0..300 {
        firing = deliveries(&hook);
        if firing.iter().any(|(s, k)| s == "firing" && k.contains(&"errors".to_string())) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(firing.iter().any(|(s, k)| s == "firing" && k.contains(&"errors".to_string())), "{firing:?}");
    let first = hook.requests().into_iter().next().expect("a delivery");
    assert!(first.header("x-vigil-signature").is_some_and(|s| s.starts_with("sha256=")));
    assert!(first.header("idempotency-key").is_some());

    healthy.store(true, Ordering::SeqCst);
    let all = crate::support::eventually(Duration::from_secs(60), "the errors alert to resolve", || {
        let all = deliveries(&hook);
        let resolved = all.iter().any(|(s, k)| s == "resolved" && k.contains(&"errors".to_string()));
        async move { resolved.then_some(all) }
    })
    .await;
    shutdown.cancel();
    let stopped = tokio::time::timeout(Duration::from_secs(10), running).await;
    assert!(matches!(stopped, Ok(Ok(Ok(())))), "{stopped:?}");

    let count = |status: &str| all.iter().filter(|(s, k)| s == status && k.contains(&"errors".to_string())).count();
    assert_eq!(count("firing"), 1, "one page for the outage: {all:?}");
    assert_eq!(count("resolved"), 1, "one resolve when it clears: {all:?}");
    let keys: Vec<String> =
        hook.requests().iter().filter_map(|r| r.header("idempotency-key").map(String::from)).collect();
    let unique: std::collections::HashSet<&String> = keys.iter().collect();
    assert_eq!(unique.len(), keys.len(), "nothing delivered twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_with_five_dollars_left_raises_exactly_one_credit_low() {
    let stream = fixture("openai-chat-stream.sse");
    let forbidden = fixture("openrouter-credits-403.json");
    let key = br#"{"data":{"label":"sk-or-v1-REDACTED","limit":100,"limit_remaining":5.0,"usage":95.0,"is_free_tier":false}}"#;
    let provider = StandIn::start(move |r| match r.path_only() {
        "/api/v1/key" => Script::json(200, key),
        "/api/v1/credits" => Script::json(403, &forbidden),
        _ => Script::sse(&stream, Duration::from_millis(1)),
    })
    .await
    .expect("stand-in");
    let hook = StandIn::start(|_| Script::json(200, b"{}")).await.expect("webhook receiver");
    let data = tempfile::tempdir().expect("tempdir");
    let text = format!(
        r#"
region = "eu-test-1"
[storage]
url = "sqlite://{d}/vigil.db"
data_dir = "{d}"
[http]
listen = "127.0.0.1:0"
[probe]
interval = "1s"
timeout = "900ms"
[[alerts.webhook]]
url_env = "VIGIL_TEST_HOOK"
[[provider]]
name = "openrouter"
base_url = "{base}/api/v1"
api_key_env = "VIGIL_TEST_KEY"
models = ["m"]
balance = {{ min_usd = 20.0, every = "1s" }}
"#,
        d = data.path().display(),
        base = provider.base_url()
    );
    let env: BTreeMap<String, String> = [
        ("VIGIL_TEST_KEY".to_string(), "sk-or-v1-test".to_string()),
        ("VIGIL_TEST_HOOK".to_string(), format!("{}/hook", hook.base_url())),
    ]
    .into();
    let app = App::build(Config::from_toml(&text, &env).expect("valid config"), AppOptions::default())
        .await
        .expect("app builds");
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(app.run_until_stopped(shutdown.clone()));
    let credit_low = |d: &[(String, Vec<String>)]| {
        d.iter().filter(|(s, k)| s == "firing" && k.contains(&"credit_low".to_string())).count()
    };
    for _ in 0..200 {
        if credit_low(&deliveries(&hook)) > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A few more rounds on the same low balance must not page again.
    tokio::time::sleep(Duration::from_secs(4)).await;
    shutdown.cancel();
    let stopped = tokio::time::timeout(Duration::from_secs(10), running).await;
    assert!(matches!(stopped, Ok(Ok(Ok(())))), "{stopped:?}");
    let all = deliveries(&hook);
    assert_eq!(credit_low(&all), 1, "exactly one credit_low: {all:?}");
    let body = hook.requests().iter().filter_map(|r| r.json()).find(|v| v["alerts"][0]["kind"] == "credit_low");
    let summary = body.map(|v| v["alerts"][0]["summary"].as_str().unwrap_or_default().to_string()).unwrap_or_default();
    assert!(summary.contains("$5.00"), "{summary}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_seen_from_two_regions_sharing_a_store_pages_once_saying_in_how_many() {
    let err = fixture("openai-error-503.json");
    let provider = StandIn::start(move |_| Script::json(503, &err)).await.expect("stand-in");
    let data = tempfile::tempdir().expect("tempdir");
    let hook = StandIn::start(|_| Script::json(200, b"{}")).await.expect("webhook receiver");
    let mut running = Vec::new();
    let shutdown = CancellationToken::new();
    // Two regional instances sharing one store, as a fleet shares one PostgreSQL.
    for region in ["eu-test-1", "us-test-1"] {
        let text = format!(
            r#"
region = "{region}"
[storage]
url = "sqlite://{d}/shared.db"
data_dir = "{d}/{region}"
batch_age = "100ms"
[http]
listen = "127.0.0.1:0"
[probe]
interval = "1s"
timeout = "900ms"
[alerts]
error_probes = 3
[[alerts.webhook]]
url_env = "VIGIL_TEST_HOOK"
[[provider]]
name = "flaky"
kind = "openai"
base_url = "{base}/v1"
api_key_env = "VIGIL_TEST_KEY"
models = ["m"]
"#,
            d = data.path().display(),
            base = provider.base_url()
        );
        let env: BTreeMap<String, String> = [
            ("VIGIL_TEST_KEY".to_string(), "sk-test-regions".to_string()),
            ("VIGIL_TEST_HOOK".to_string(), format!("{}/hook", hook.base_url())),
        ]
        .into();
        let app = App::build(Config::from_toml(&text, &env).expect("valid config"), AppOptions::default())
            .await
            .expect("app builds");
        running.push(tokio::spawn(app.run_until_stopped(shutdown.clone())));
    }
    let opened = |hook: &StandIn| -> Vec<serde_json::Value> {
        hook.requests()
            .iter()
            .filter_map(|r| r.json())
            .filter(|v| v["status"] == "firing" && v["update"] != true && v["reminder"] != true)
            .collect()
    };
    for _ in 0..200 {
        if !opened(&hook).is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Both regions have seen the outage for a few more rounds by now.
    tokio::time::sleep(Duration::from_secs(4)).await;
    shutdown.cancel();
    for r in running {
        let stopped = tokio::time::timeout(Duration::from_secs(10), r).await;
        assert!(matches!(stopped, Ok(Ok(Ok(())))), "{stopped:?}");
    }
    let got = opened(&hook);
    assert_eq!(got.len(), 1, "one page for the outage across both regions: {got:?}");
    let page = &got[0];
    assert_eq!(page["incident"], "vigil:flaky:m:");
    assert_eq!(page["seen"]["regions"], 2, "{page}");
    let errors = page["alerts"].as_array().and_then(|a| a.iter().find(|x| x["kind"] == "errors").cloned());
    let scope = errors.map(|e| e["scope"].clone()).unwrap_or_default();
    assert_eq!(scope["scope"], "global", "{page}");
    assert_eq!(scope["regions"], 2, "{page}");
    assert!(page["title"].as_str().unwrap_or_default().contains("in 2 of 2 regions"), "{page}");
}
