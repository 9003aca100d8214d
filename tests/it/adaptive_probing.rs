//! Cost-aware adaptive probing on real parts: a daemon probing stand-in providers on loopback
//! with a daily budget a priced target overruns, an unpriced target, and a failing one. The
//! scheduler follows the plan: the priced target is stretched to `probe.max_interval`, the
//! unpriced one keeps the base interval, the failing one is probed every
//! `probe.incident_interval`; `/v1/targets`, `/metrics` and the status page show the plan.

use crate::support::daemon::{spawn_app, table, DaemonConfig, Provider};
use crate::support::poll_until;

use std::time::Duration;
use vigil::run::demo::standin::{Script, StandIn};

fn probes_of(metrics: &str, provider: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("vigil_probes_total{") && l.contains(&format!("provider=\"{provider}\"")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn gauge(metrics: &str, name: &str, provider: &str) -> Option<f64> {
    metrics
        .lines()
        .find(|l| l.starts_with(&format!("{name}{{")) && l.contains(&format!("provider=\"{provider}\"")))
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
}

/// An OpenAI chat stream answering `{"ok":true}` (so no adherence incident) with its usage.
fn stream() -> Script {
    let chunk = |v: serde_json::Value| format!("data: {v}\n\n");
    let delta = |content: &str, finish: serde_json::Value| {
        chunk(serde_json::json!({"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": finish}]}))
    };
    let mut body = delta("{\"ok\":true}", serde_json::Value::Null);
    body.push_str(&delta("", serde_json::json!("stop")));
    body.push_str(&chunk(serde_json::json!({"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 1,
        "model": "m", "choices": [], "usage": {"prompt_tokens": 30, "completion_tokens": 5, "total_tokens": 35}})));
    body.push_str("data: [DONE]\n\n");
    Script::sse(body.as_bytes(), Duration::from_millis(1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scheduler_stretches_the_dear_target_and_probes_the_failing_one_fast() {
    let provider = StandIn::start(move |req| {
        if req.path_only().starts_with("/flaky/") {
            Script::json(503, br#"{"error":{"message":"overloaded","type":"server_error"}}"#)
        } else {
            stream()
        }
    })
    .await
    .expect("stand-in");
    let data = tempfile::tempdir().expect("tempdir");
    let base = provider.base_url();
    // A probe of "dear" costs dollars (its usage at a million dollars per million tokens):
    // far over the one-cent budget at any interval, so the plan stretches it as far as allowed.
    let at = |name: &str| format!("{base}/{name}/v1");
    let price = table([("input_per_mtok", 1_000_000.0.into()), ("output_per_mtok", 1_000_000.0.into())]);
    let config = DaemonConfig::sqlite(data.path())
        .region("test-1")
        .set("probe.interval", "2s")
        .set("probe.timeout", "500ms")
        .set("probe.connect_timeout", "400ms")
        .set("probe.ttft_timeout", "450ms")
        .set("probe.max_interval", "8s")
        .set("probe.incident_interval", "500ms")
        .set("probe.daily_budget_usd", 0.01)
        .provider(Provider::openai("dear", &at("dear")).set("price", price))
        .provider(Provider::openai("free", &at("free")))
        .provider(Provider::openai("flaky", &at("flaky")))
        .key("sk-test-adaptive");
    let daemon = spawn_app(config.build()).await;
    let addr = daemon.addr;
    let http = reqwest::Client::new();
    let get = |path: &str| {
        let (http, url) = (http.clone(), format!("http://{addr}{path}"));
        async move { http.get(url).send().await.expect("request").text().await.expect("body") }
    };

    // Wait (bounded) until the plan has seen the dear target's price and the flaky one failing.
    let seen = poll_until(Duration::from_secs(20), || async {
        let v: serde_json::Value = serde_json::from_str(&get("/v1/targets").await).expect("json");
        let mode = |p: &str| {
            v["targets"]
                .as_array()
                .and_then(|t| t.iter().find(|x| x["provider"] == p))
                .map(|x| x["probe"]["mode"].clone())
                .unwrap_or_default()
        };
        (mode("dear") == "stretched" && mode("flaky") == "incident").then_some(v)
    });
    let plan: serde_json::Value = seen.await.unwrap_or_default();
    let target = |p: &str| {
        plan["targets"].as_array().and_then(|t| t.iter().find(|x| x["provider"] == p)).cloned().unwrap_or_default()
    };
    assert_eq!(target("dear")["probe"]["every"], 8.0, "stretched to max_interval: {plan}");
    assert_eq!(target("free")["probe"]["mode"], "unpriced", "{plan}");
    assert_eq!(target("free")["probe"]["every"], 2.0, "{plan}");
    assert_eq!(target("flaky")["probe"]["every"], 0.5, "{plan}");
    assert_eq!(plan["probe_plan"]["over_budget"], true, "{plan}");
    assert_eq!(plan["probe_plan"]["budget_usd"], 0.01, "{plan}");

    // Count probes over 12 s of the plan.
    let before = get("/metrics").await;
    tokio::time::sleep(Duration::from_secs(12)).await;
    let after = get("/metrics").await;
    let ran = |p: &str| probes_of(&after, p) - probes_of(&before, p);
    let (dear, free, flaky) = (ran("dear"), ran("free"), ran("flaky"));
    println!("probes in 12 s: dear {dear}, free {free}, flaky {flaky}");
    assert!((1.0..=3.0).contains(&dear), "every 8 s: {dear}");
    assert!((5.0..=7.0).contains(&free), "every 2 s: {free}");
    assert!(flaky >= 16.0, "every 0.5 s (never two at once): {flaky}");
    assert_eq!(gauge(&after, "vigil_probe_interval_seconds", "dear"), Some(8.0));
    assert_eq!(gauge(&after, "vigil_probe_interval_seconds", "flaky"), Some(0.5));
    assert!(after.contains("vigil_probe_budget_usd{region=\"test-1\"} 0.01"), "budget gauge");
    let page = get("/").await;
    assert!(page.contains("probed every 8s (budget)"), "the status page says why dear is probed less");
    assert!(page.contains("over budget even at probe.max_interval"), "and that the budget cannot be kept");

    daemon.stop_within(Duration::from_secs(15)).await;
}
