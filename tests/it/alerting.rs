//! Alerts under a running daemon: a stand-in provider fails, the signed webhook receives one
//! firing notification; it recovers, the webhook receives one resolve. Nothing is sent twice.

use crate::support::daemon::{adherent_stream, spawn_app, stop_all, table, DaemonConfig, Provider};
use crate::support::{eventually, fixture, settle};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use vigil::run::demo::standin::{Script, StandIn};

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

/// Incident keys of the deliveries with `status` (updates left out), in arrival order.
fn incidents(hook: &StandIn, status: &str) -> Vec<String> {
    hook.requests()
        .iter()
        .filter_map(|r| r.json())
        .filter(|v| v["status"] == status && v["update"] != true)
        .filter_map(|v| v["incident"].as_str().map(String::from))
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
    let config = DaemonConfig::sqlite(data.path())
        .region("eu-test-1")
        .set("breaker.open_for", "2s")
        .set("alerts.error_probes", 2)
        .set("alerts.resolve_after", 2)
        .signed_webhook(&format!("{}/hook", hook.base_url()), "hook-secret")
        .provider(Provider::openai("flaky", &format!("{}/v1", provider.base_url())))
        .key("sk-test-alerting");
    let daemon = spawn_app(config.build()).await;

    // Healthy first: nothing is sent.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(deliveries(&hook).is_empty(), "{:?}", deliveries(&hook));

    healthy.store(false, Ordering::SeqCst);
    let is_page = |(s, k): &(String, Vec<String>)| s == "firing" && k.contains(&"errors".to_string());
    let firing = settle(Duration::from_secs(30), || async { deliveries(&hook) }, |d| d.iter().any(is_page)).await;
    assert!(firing.iter().any(is_page), "{firing:?}");
    let first = hook.requests().into_iter().next().expect("a delivery");
    assert!(first.header("x-vigil-signature").is_some_and(|s| s.starts_with("sha256=")));
    assert!(first.header("idempotency-key").is_some());

    let paged = incidents(&hook, "firing");
    assert_eq!(paged.len(), 1, "one incident opened: {:?}", deliveries(&hook));

    healthy.store(true, Ordering::SeqCst);
    // The resolve closes the incident the page opened. It lists the kinds still open when the
    // last one cleared: the errors facet and the breaker's clear in either order (a kind that
    // leaves first is dropped from the incident quietly, `decide/alert/incident`).
    let resolved = |r: &Vec<String>| r.contains(&paged[0]);
    let closed = settle(Duration::from_secs(60), || async { incidents(&hook, "resolved") }, resolved).await;
    let all = deliveries(&hook);
    if !resolved(&closed) {
        // Say why: the daemon's own view of the target (breaker, health, last probe) beside what was sent.
        let view = reqwest::get(daemon.url("/v1/targets")).await.expect("targets");
        let view = view.text().await.unwrap_or_default();
        panic!("waited 60s for the incident to resolve; delivered {all:?}; /v1/targets: {view}");
    }
    daemon.stop().await;

    let count = |status: &str| all.iter().filter(|(s, k)| s == status && k.contains(&"errors".to_string())).count();
    assert_eq!(count("firing"), 1, "one page for the outage: {all:?}");
    assert_eq!(incidents(&hook, "resolved"), paged, "one resolve when it clears, of that incident: {all:?}");
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
    let openrouter = Provider::named("openrouter", &format!("{}/api/v1", provider.base_url()))
        .set("balance", table([("min_usd", 20.0.into()), ("every", "1s".into())]));
    let config = DaemonConfig::sqlite(data.path())
        .region("eu-test-1")
        .webhook(&format!("{}/hook", hook.base_url()))
        .provider(openrouter)
        .key("sk-or-v1-test");
    let daemon = spawn_app(config.build()).await;
    let credit_low = |d: &[(String, Vec<String>)]| {
        d.iter().filter(|(s, k)| s == "firing" && k.contains(&"credit_low".to_string())).count()
    };
    eventually(Duration::from_secs(20), "a credit_low page", || {
        let paged = credit_low(&deliveries(&hook)) > 0;
        async move { paged.then_some(()) }
    })
    .await;
    // A few more rounds on the same low balance must not page again.
    tokio::time::sleep(Duration::from_secs(4)).await;
    daemon.stop().await;
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
    // Two regional instances sharing one store, as a fleet shares one PostgreSQL.
    for region in ["eu-test-1", "us-test-1"] {
        let shared = format!("sqlite://{}/shared.db", data.path().display());
        let config = DaemonConfig::new(&shared, &data.path().join(region))
            .region(region)
            .set("alerts.error_probes", 3)
            .webhook(&format!("{}/hook", hook.base_url()))
            .provider(Provider::openai("flaky", &format!("{}/v1", provider.base_url())))
            .key("sk-test-regions");
        running.push(spawn_app(config.build()).await);
    }
    let opened = |hook: &StandIn| -> Vec<serde_json::Value> {
        hook.requests()
            .iter()
            .filter_map(|r| r.json())
            .filter(|v| v["status"] == "firing" && v["update"] != true && v["reminder"] != true)
            .collect()
    };
    eventually(Duration::from_secs(20), "a page for the outage", || {
        let paged = !opened(&hook).is_empty();
        async move { paged.then_some(()) }
    })
    .await;
    // Both regions have seen the outage for a few more rounds by now.
    tokio::time::sleep(Duration::from_secs(4)).await;
    stop_all(running, Duration::from_secs(10)).await;
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
