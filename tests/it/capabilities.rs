//! Capability probes on real parts: the real daemon asks an OpenAI-compatible stand-in on
//! loopback (streaming real SSE) to call a declared function, to answer in JSON mode and to
//! follow a JSON Schema; one of its models stops calling the function, another never answers in
//! JSON. `capability_lost` pages to a webhook receiver for the capability the target had and
//! lost (and only that one), the chain that requires `tools` demotes the target in the router
//! export, and every run lands in `check_runs` of a real SQLite file.

use crate::support::daemon::{obeying, spawn_app, strings, table, webhook_deliveries, DaemonConfig, Provider};
use crate::support::{fixture, poll_until};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use vigil::run::demo::standin::{ChatIdentity, RequestRecord, Script, StandIn};

const CITY: &str = r#"{"city": "Paris", "country": "France"}"#;

/// What a request asks: `tools`, `json`, `json_schema`, or a regular probe.
fn asks(r: &RequestRecord) -> (&'static str, String) {
    let body = r.json().unwrap_or_default();
    let model = body["model"].as_str().unwrap_or_default().to_string();
    let kind = if body.get("tools").is_some() {
        "tools"
    } else {
        match body["response_format"]["type"].as_str() {
            Some("json_object") => "json",
            Some("json_schema") => "json_schema",
            _ => "probe",
        }
    };
    (kind, model)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_that_stops_calling_functions_pages_capability_lost_and_is_demoted_where_tools_are_required() {
    let calls = Arc::new(AtomicBool::new(true));
    let still = calls.clone();
    let (tool_call, ok) = (fixture("openai-chat-stream-tool-call.sse"), obeying("openai-chat-stream-usage.sse"));
    let provider = StandIn::start(move |r| {
        let id = ChatIdentity { model: "m".into(), ..ChatIdentity::default() };
        let (kind, model) = asks(r);
        let text = |t: &str| Script::openai_chat(t, &id, Duration::ZERO);
        match (kind, model.as_str()) {
            ("probe", _) => Script::sse(&ok, Duration::from_millis(1)),
            ("tools", "fickle") if !still.load(Ordering::SeqCst) => text("It is sunny in Paris today."),
            ("tools", _) => Script::sse(&tool_call, Duration::from_millis(1)),
            (_, "fickle") => text("The capital of France is Paris."),
            _ => text(CITY),
        }
    })
    .await
    .expect("stand-in");
    let hook = StandIn::start(|_| Script::json(200, b"{}")).await.expect("webhook receiver");
    let data = tempfile::tempdir().expect("tempdir");
    let chain = table([
        ("name", "chat".into()),
        ("targets", strings(&["standin/fickle", "standin/steady"])),
        ("requires", strings(&["tools"])),
    ]);
    let config = DaemonConfig::sqlite(data.path())
        .region("test-1")
        .set("probe.capabilities", table([("enabled", true.into()), ("every", "10s".into())]))
        .set("chain", toml::Value::Array(vec![chain]))
        .webhook(&format!("{}/hook", hook.base_url()))
        .provider(Provider::openai("standin", &format!("{}/v1", provider.base_url())).models(&["fickle", "steady"]))
        .key("sk-test-capabilities");
    let daemon = spawn_app(config.build()).await;
    let (metrics, addr) = (daemon.metrics.clone(), daemon.addr);
    let http = reqwest::Client::new();
    let verdict = |targets: &serde_json::Value, target: &str, check: &str| -> Option<String> {
        let t = targets["targets"].as_array()?.iter().find(|t| t["target"] == target)?;
        let c = t["checks"].as_array()?.iter().find(|c| c["name"] == check)?;
        c["verdict"].as_str().map(String::from)
    };
    let targets = || async {
        let r = http.get(format!("http://{addr}/v1/targets")).send().await.ok()?;
        r.json::<serde_json::Value>().await.ok()
    };

    // Every capability of both models judged once: fickle calls the function, never answers JSON.
    let first = poll_until(Duration::from_secs(15), || async {
        let t = targets().await?;
        let all = ["fickle", "steady"].iter().all(|m| {
            ["tools", "json", "json_schema"]
                .iter()
                .all(|c| verdict(&t, &format!("standin/{m}"), &format!("capability.{c}")).is_some())
        });
        all.then_some(t)
    })
    .await
    .expect("every capability judged within the first probe interval");
    assert_eq!(verdict(&first, "standin/fickle", "capability.tools").as_deref(), Some("passed"), "{first}");
    assert_eq!(verdict(&first, "standin/fickle", "capability.json").as_deref(), Some("failed"), "{first}");
    assert_eq!(verdict(&first, "standin/steady", "capability.json_schema").as_deref(), Some("passed"), "{first}");

    calls.store(false, Ordering::SeqCst);
    let lost = poll_until(Duration::from_secs(30), || {
        let got: Vec<String> = webhook_deliveries(&hook)
            .into_iter()
            .filter(|(s, k, _)| s == "firing" && k.contains(&"capability_lost".to_string()))
            .flat_map(|(_, _, sums)| sums)
            .collect();
        async move { (!got.is_empty()).then_some(got) }
    })
    .await;
    let summaries = lost.unwrap_or_else(|| panic!("no capability_lost page: {:?}", webhook_deliveries(&hook)));
    let summary = summaries.iter().find(|s| s.contains("lost a capability")).cloned().unwrap_or_default();
    assert!(
        summary.contains("standin/fickle") && summary.contains("tools: asked to call get_weather, got text"),
        "{summaries:?}"
    );
    assert!(!summary.contains("json"), "a capability it never had is not lost: {summary}");

    let order = poll_until(Duration::from_secs(10), || async {
        let doc: serde_json::Value =
            http.get(format!("http://{addr}/v1/thresholds")).send().await.ok()?.json().await.ok()?;
        let order = doc["chains"][0]["order"].as_array()?.clone();
        (order.first()?["target"] == "standin/steady").then_some(order)
    })
    .await
    .expect("the chain that requires tools puts the target that lost them last");
    let fickle = order.iter().find(|e| e["target"] == "standin/fickle").expect("still in the chain");
    assert_eq!(fickle["status"], "demoted");
    assert!(fickle["reason"].as_str().is_some_and(|r| r.contains("no tools")), "{fickle}");
    let text = metrics.render();
    assert!(
        text.lines().any(|l| l.starts_with("vigil_check_passing{")
            && l.contains("model=\"fickle\"")
            && l.contains("check=\"capability.tools\"")
            && l.ends_with(" 0")),
        "{text}"
    );
    daemon.stop_within(Duration::from_secs(12)).await;

    let requests = provider.requests();
    let tools = requests.iter().find(|r| asks(r).0 == "tools").and_then(|r| r.json()).expect("a tools request");
    assert_eq!(tools["tools"][0]["function"]["name"], "get_weather");
    let schema = requests.iter().find(|r| asks(r).0 == "json_schema").and_then(|r| r.json()).expect("a schema request");
    assert_eq!(schema["response_format"]["json_schema"]["strict"], true);
    let store = vigil::io::store::open(&format!("sqlite://{}/vigil.db", data.path().display())).await.expect("store");
    let runs = store.check_runs(None, chrono::Utc::now() - chrono::Duration::days(1), 100).await.expect("runs");
    let lost_run = runs.iter().find(|r| r.check == "capability.tools" && r.verdict.as_str() == "failed");
    assert!(
        lost_run.is_some_and(|r| r.answer.contains("sunny")),
        "the failed run is stored with what came back: {runs:?}"
    );
    let called = runs.iter().find(|r| r.check == "capability.tools" && r.verdict.as_str() == "passed");
    assert!(called.is_some_and(|r| r.answer.starts_with("get_weather({")), "{runs:?}");
}
