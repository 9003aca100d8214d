//! Baselines, breakers and the router export under a running daemon: a stand-in provider
//! degrades and recovers, the breaker walks closed → open → half_open → closed, the state
//! survives a restart, and `/v1/*` honour the bearer token.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use vigil::app::{App, AppOptions};
use vigil::breaker::State;
use vigil::config::Config;
use vigil::demo::standin::{Script, StandIn};
use vigil::store::SampleQuery;

const TOKEN: &str = "test-token-123";

fn config(base: &str, data: &std::path::Path) -> Config {
    let text = format!(
        r#"
region = "eu-test-1"
[storage]
url = "sqlite://{data}/vigil.db"
data_dir = "{data}"
batch_age = "100ms"
[http]
listen = "127.0.0.1:0"
api_token_env = "VIGIL_TEST_API_TOKEN"
[probe]
interval = "1s"
timeout = "900ms"
[breaker]
consecutive_failures = 3
failure_window = "30s"
open_for = "4s"
[[provider]]
name = "flaky"
kind = "openai"
base_url = "{base}/v1"
api_key_env = "VIGIL_TEST_KEY"
models = ["m"]
"#,
        data = data.display()
    );
    let env: BTreeMap<String, String> = [
        ("VIGIL_TEST_KEY".to_string(), "sk-test-decisions".to_string()),
        ("VIGIL_TEST_API_TOKEN".to_string(), TOKEN.to_string()),
    ]
    .into();
    Config::from_toml(&text, &env).expect("valid config")
}

struct Running {
    base: String,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), vigil::app::AppError>>,
}

async fn start(config: Config) -> Running {
    let app = App::build(config, AppOptions::default()).await.expect("app builds");
    let base = format!("http://{}", app.local_addr().expect("bound"));
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(app.run_until_stopped(shutdown.clone()));
    Running { base, shutdown, task }
}

impl Running {
    async fn stop(self) {
        self.shutdown.cancel();
        let done = tokio::time::timeout(Duration::from_secs(10), self.task).await;
        assert!(matches!(done, Ok(Ok(Ok(())))), "clean stop: {done:?}");
    }

    async fn target(&self) -> serde_json::Value {
        let v: serde_json::Value = reqwest::Client::new()
            .get(format!("{}/v1/targets", self.base))
            .bearer_auth(TOKEN)
            .send()
            .await
            .expect("targets")
            .json()
            .await
            .expect("json");
        v["targets"][0].clone()
    }

    /// Polls until the breaker is in `state` (bounded), returning the target view.
    async fn wait_for(&self, state: &str) -> serde_json::Value {
        for _ in 0..200 {
            let t = self.target().await;
            if t["breaker"]["state"] == state {
                return t;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("breaker never reached {state}: {}", self.target().await);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breaker_opens_on_errors_survives_restart_and_closes_on_recovery() {
    let healthy = Arc::new(AtomicBool::new(true));
    let flag = healthy.clone();
    let ok_body = std::fs::read(format!("{}/tests/fixtures/openai-chat-stream.sse", env!("CARGO_MANIFEST_DIR")))
        .expect("fixture");
    let err_body =
        std::fs::read(format!("{}/tests/fixtures/openai-error-503.json", env!("CARGO_MANIFEST_DIR"))).expect("fixture");
    let server = StandIn::start(move |_| {
        if flag.load(Ordering::SeqCst) {
            Script::sse(&ok_body, Duration::from_millis(2))
        } else {
            Script::json(503, &err_body)
        }
    })
    .await
    .expect("stand-in");
    let data = tempfile::tempdir().expect("tempdir");
    let app = start(config(&server.base_url(), data.path())).await;

    // /v1 requires the token; the export is SPEC-shaped.
    let http = reqwest::Client::new();
    let denied = http.get(format!("{}/v1/thresholds", app.base)).send().await.expect("request");
    assert_eq!(denied.status(), 401);
    let wrong = http.get(format!("{}/v1/targets", app.base)).bearer_auth("nope").send().await.expect("request");
    assert_eq!(wrong.status(), 401);
    app.wait_for("closed").await;
    let doc: serde_json::Value = http
        .get(format!("{}/v1/thresholds", app.base))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("thresholds")
        .json()
        .await
        .expect("json");
    assert_eq!(doc["schema_version"], 2);
    assert_eq!(doc["region"], "eu-test-1");
    assert_eq!(doc["targets"][0]["target"], "flaky/m");
    assert_eq!(doc["targets"][0]["rank"], 1);
    assert!(doc["expires_at"].as_str() > doc["generated_at"].as_str());

    // The provider starts failing: three failed probes open the breaker.
    healthy.store(false, Ordering::SeqCst);
    let open = app.wait_for("open").await;
    let reason = open["breaker"]["reason"].as_str().unwrap_or_default().to_string();
    assert!(reason.contains("server_error"), "reason names the failures: {reason}");
    assert_eq!(open["breaker"]["tripped_by"].as_array().map(Vec::len), Some(3));
    assert!(open["breaker"]["next_half_open"].is_string());
    let metrics = http.get(format!("{}/metrics", app.base)).send().await.expect("metrics").text().await.expect("text");
    assert!(metrics.contains(r#"vigil_circuit_state{model="m",provider="flaky",region="eu-test-1",route=""} 2"#));

    // A restart while open keeps the state.
    app.stop().await;
    let app = start(config(&server.base_url(), data.path())).await;
    let mut after = app.target().await;
    for _ in 0..50 {
        if !after["breaker"]["state"].is_null() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        after = app.target().await;
    }
    assert_eq!(after["breaker"]["state"], "open", "state restored from storage: {after}");

    // Recovery: after open_for the next good probe closes it.
    healthy.store(true, Ordering::SeqCst);
    app.wait_for("closed").await;
    app.stop().await;

    let store = vigil::store::open(&format!("sqlite://{}/vigil.db", data.path().display())).await.expect("store");
    let mut history = store.transitions("eu-test-1", None, 100).await.expect("transitions");
    history.reverse();
    let path: Vec<(State, State)> = history.iter().map(|t| (t.from_state, t.to_state)).collect();
    let want = [(State::Closed, State::Open), (State::Open, State::HalfOpen), (State::HalfOpen, State::Closed)];
    assert!(path.ends_with(&want), "history {path:?}");
    let stored = store.count_samples(&SampleQuery::default()).await.expect("count");
    assert!(stored >= 6, "samples stored across both runs: {stored}");
}
