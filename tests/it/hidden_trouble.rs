//! Issue 30 items 3 and 4 on real parts: a daemon at a 1 s interval against loopback stand-ins.
//! A host behind a load balancer failing one request in three never fails twice in a row, so
//! `errors` in a row never pages it; `alerts.error_k = 3`, `alerts.error_n = 10` pages it once,
//! at its third failure, while the breaker (3 in a row) stays closed. A provider answering 429
//! with `Retry-After` is demoted in its chain for the backoff (not dropped, its breaker closed),
//! the export says how long (`retry_after_s`) and which class the failure was, and the LiteLLM
//! document carries an allowance per error class.

use crate::support::daemon::{adherent_stream, spawn_app, DaemonConfig, Provider};
use crate::support::{poll_until, settle};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use vigil::run::demo::standin::{Script, StandIn};

fn answer() -> Script {
    Script::sse(&adherent_stream(), Duration::from_millis(5)).with_head_delay(Duration::from_millis(20))
}

/// Every webhook delivery as JSON.
fn deliveries(hook: &StandIn) -> Vec<serde_json::Value> {
    hook.requests().iter().filter_map(|r| r.json()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_request_in_three_failing_pages_once_with_k_of_n_and_the_breaker_stays_closed() {
    let _timing = crate::support::timing_sensitive().await;
    let (served, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (s, f) = (served.clone(), failed.clone());
    let provider = StandIn::start(move |r| {
        if !r.path_only().ends_with("/chat/completions") {
            return Script::json(404, b"{}");
        }
        // The second of every three requests meets the broken host behind the balancer.
        if s.fetch_add(1, Ordering::SeqCst) % 3 == 1 {
            f.fetch_add(1, Ordering::SeqCst);
            return Script::json(503, br#"{"error":{"message":"upstream host unavailable","type":"server_error"}}"#);
        }
        answer()
    })
    .await
    .expect("stand-in");
    let hook = StandIn::start(|_| Script::json(200, b"{}")).await.expect("receiver");
    let data = tempfile::tempdir().expect("tempdir");
    let config = DaemonConfig::sqlite(data.path())
        .region("lb-test-1")
        .set("alerts.error_k", 3)
        .set("alerts.error_n", 10)
        // Young baselines make loopback jitter look like latency trips; this test is about errors.
        .set("breaker.latency_trips", 50)
        .set("alerts.latency_factor", 50.0)
        .webhook(&format!("{}/hook", hook.base_url()))
        .provider(Provider::openai("lb", &format!("{}/lb/v1", provider.base_url())))
        .key("sk-test-hidden");
    let daemon = spawn_app(config.build()).await;

    let page = poll_until(Duration::from_secs(60), || {
        let page = deliveries(&hook).into_iter().find(|d| {
            d["status"] == "firing" && d["alerts"].as_array().is_some_and(|a| a.iter().any(|x| x["kind"] == "errors"))
        });
        async move { page }
    })
    .await
    .unwrap_or_else(|| panic!("no errors page; deliveries: {:?}", deliveries(&hook)));
    let errors = page["alerts"].as_array().and_then(|a| a.iter().find(|x| x["kind"] == "errors")).expect("facet");
    let summary = errors["summary"].as_str().unwrap_or_default();
    assert!(summary.starts_with("3 of the last "), "{summary}");
    assert!(summary.contains("(server_error, server_error, server_error)"), "{summary}");
    assert_eq!(errors["current"], 3.0, "paged at the third failure: {errors}");
    assert!(failed.load(Ordering::SeqCst) >= 3, "three failures served before it");

    // Ten more probes: the same incident holds, nothing else is paged, the breaker never opened.
    let seen = served.load(Ordering::SeqCst);
    poll_until(Duration::from_secs(30), || {
        let more = served.load(Ordering::SeqCst) >= seen + 10;
        async move { more.then_some(()) }
    })
    .await
    .expect("ten more probes");
    let all = deliveries(&hook);
    let opened: Vec<&serde_json::Value> =
        all.iter().filter(|d| d["status"] == "firing" && d["update"] != true && d["reminder"] != true).collect();
    assert_eq!(opened.len(), 1, "one page: {all:?}");
    assert!(all.iter().all(|d| d["status"] != "resolved"), "it holds while one request in three fails: {all:?}");
    let breaker_pages = all
        .iter()
        .flat_map(|d| d["alerts"].as_array().cloned().unwrap_or_default())
        .filter(|a| a["kind"] == "breaker_open")
        .count();
    assert_eq!(breaker_pages, 0, "3 failures in a row never happen: {all:?}");
    let targets: serde_json::Value =
        reqwest::get(daemon.url("/v1/targets")).await.expect("targets").json().await.expect("json");
    let breaker = &targets["targets"][0]["breaker"]["state"];
    assert_eq!(breaker, "closed", "{targets}");
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_with_retry_after_demotes_for_its_backoff_and_the_exports_say_how_long_and_why() {
    let _timing = crate::support::timing_sensitive().await;
    let limited = StandIn::start(|_| {
        Script::json(
            429,
            br#"{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}"#,
        )
        .with_header("Retry-After", "30")
    })
    .await
    .expect("limited stand-in");
    let backup = StandIn::start(|_| answer()).await.expect("backup stand-in");
    let data = tempfile::tempdir().expect("tempdir");
    let config = DaemonConfig::sqlite(data.path())
        .region("rl-test-1")
        .set("breaker.rate_limit_backoff", "5s")
        .set("breaker.latency_trips", 50)
        .set("http.api_token_env", "VIGIL_TEST_API_TOKEN")
        .env("VIGIL_TEST_API_TOKEN", "test-token-rl")
        .provider(Provider::openai("limited", &format!("{}/v1", limited.base_url())))
        .provider(Provider::openai("backup", &format!("{}/v1", backup.base_url())))
        .set(
            "chain",
            toml::Value::Array(vec![crate::support::daemon::table([
                ("name", "chat".into()),
                ("targets", crate::support::daemon::strings(&["limited/m", "backup/m"])),
            ])]),
        )
        .key("sk-test-limited");
    let daemon = spawn_app(config.build()).await;
    let http = reqwest::Client::new();
    let get = |format: &'static str| {
        let (http, url) = (http.clone(), daemon.url(&format!("/v1/thresholds?chain=chat{format}")));
        async move {
            let resp = http.get(url).bearer_auth("test-token-rl").send().await.ok()?;
            // JSON, or YAML for LiteLLM's proxy file: YAML reads both.
            serde_norway::from_slice::<serde_json::Value>(&resp.bytes().await.ok()?).ok()
        }
    };
    // Until the backup leads and the limited head's 429 is judged: a loaded machine can time a
    // probe out first (900 ms), which demotes it too, for another reason (a CI run did).
    let doc = settle(
        Duration::from_secs(30),
        || get(""),
        |doc| {
            doc.as_ref().is_some_and(|d| {
                let order = &d["chains"][0]["order"];
                order[0]["target"] == "backup/m"
                    && order[1]["target"] == "limited/m"
                    && order[1]["last_failure_class"] == "rate_limited"
            })
        },
    )
    .await
    .expect("a thresholds document");
    assert_eq!(doc["chains"][0]["order"][0]["target"], "backup/m", "the backup leads: {doc}");
    let entry = &doc["chains"][0]["order"][1];
    assert_eq!(entry["target"], "limited/m", "the rate-limited head demoted behind the backup: {doc}");
    assert_eq!(entry["status"], "demoted", "{entry}");
    assert_eq!(entry["breaker"], "closed", "a 429 inside its Retry-After does not count: {entry}");
    assert!(
        entry["reason"].as_str().is_some_and(|r| r.starts_with("rate limited (429), backing off until ")),
        "{entry}"
    );
    assert!(
        entry["retry_after_s"].as_u64().is_some_and(|s| (1..=30).contains(&s)),
        "Retry-After wins over 5 s: {entry}"
    );
    assert_eq!(entry["last_failure_class"], "rate_limited", "{entry}");
    assert!(doc["chains"][0]["dropped"].as_array().is_some_and(Vec::is_empty), "{doc}");
    let head = &doc["chains"][0]["order"][0];
    assert_eq!((head["retry_after_s"].is_null(), head["last_failure_class"].is_null()), (true, true), "{head}");
    assert_eq!(doc["breaker"]["rate_limit_backoff_s"], 5);
    assert_eq!(doc["breaker"]["rate_limit_trips"], 3);

    let litellm = get("&format=litellm").await.expect("litellm document");
    assert_eq!(
        litellm["router_settings"]["allowed_fails_policy"],
        serde_json::json!({"InternalServerErrorAllowedFails": 2, "TimeoutErrorAllowedFails": 2,
                           "RateLimitErrorAllowedFails": 4}),
        "{litellm}"
    );
    daemon.stop().await;
}
