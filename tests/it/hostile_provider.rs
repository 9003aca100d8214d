//! A hostile provider against the real probe and the real daemon: absurd `Retry-After` values
//! are clamped where they are parsed, and a provider that echoes its API key (and a secret
//! header) back leaks it nowhere: not in the SQLite file, `/v1/targets`, the status page,
//! `/metrics`, an alert payload at a real receiver, or the logs.

use crate::support::{alert_receiver, probe_config};

use alert_receiver::{Receiver, Reply};
use chrono::Utc;
use secrecy::SecretString;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use vigil::config::{ProviderConfig, ProviderKind};
use vigil::io::probe::{Planned, Prober, MAX_RETRY_AFTER_S};
use vigil::run::demo::standin::{Script, StandIn};
use vigil::vocab::sample::Outcome;
use vigil::vocab::target::Target;

fn plan(kind: ProviderKind, base_url: &str) -> Planned {
    let p = ProviderConfig {
        api_key_env: Some("K".into()),
        api_key: Some(SecretString::from("sk-test-hostile-0123456789")),
        models: vec!["m".into()],
        ..ProviderConfig::new("hostile", kind, base_url.parse().expect("url"))
    };
    Planned { target: Target::new(p.name.as_str().into(), "m".into(), None, "test-1".into()), provider: Arc::new(p) }
}

#[tokio::test]
async fn absurd_retry_after_values_are_clamped_to_an_hour_or_dropped() {
    let cases: [(&str, &str, Option<f64>); 7] = [
        ("retry-after", "9999999999999", Some(MAX_RETRY_AFTER_S)),
        ("retry-after", "1e300", Some(MAX_RETRY_AFTER_S)),
        ("retry-after", "-20", None),
        ("retry-after", "NaN", None),
        ("retry-after-ms", "99999999999999999999", Some(MAX_RETRY_AFTER_S)),
        ("retry-after", "Fri, 31 Dec 9999 23:59:59 GMT", Some(MAX_RETRY_AFTER_S)),
        ("retry-after", "30", Some(30.0)),
    ];
    for (name, value, want) in cases {
        let script = Script::json(429, br#"{"error":{"message":"slow down"}}"#).with_header(name, value);
        let server = StandIn::start(move |_| script.clone()).await.expect("stand-in");
        let s = Prober::new(probe_config(8), &[])
            .probe(&plan(ProviderKind::Openai, &format!("{}/v1", server.base_url())), Utc::now())
            .await;
        assert_eq!(s.outcome, Outcome::RateLimited, "{name}: {value}");
        assert_eq!(s.retry_after_s, want, "{name}: {value}");
    }
    let gemini = br#"{"error":{"code":429,"status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"1e300s"}]}}"#;
    let server = StandIn::start(move |_| Script::json(429, gemini)).await.expect("stand-in");
    let s = Prober::new(probe_config(8), &[]).probe(&plan(ProviderKind::Gemini, &server.base_url()), Utc::now()).await;
    assert_eq!(s.retry_after_s, Some(MAX_RETRY_AFTER_S));
}

#[tokio::test]
async fn absurd_costs_and_overlong_request_ids_are_not_kept() {
    // A 200 KB response id (the head's own limit refuses larger headers before this point).
    let id = "r".repeat(200_000);
    let body = format!(
        "data: {{\"id\":\"{id}\",\"choices\":[{{\"delta\":{{\"content\":\"{{\\\"ok\\\":true}}\"}}}}]}}\n\n\
         data: {{\"id\":\"x\",\"choices\":[],\"usage\":{{\"prompt_tokens\":10,\"completion_tokens\":4294967295,\"cost\":-1e12}}}}\n\n\
         data: [DONE]\n\n"
    );
    let script = Script::sse(body.as_bytes(), Duration::from_millis(1));
    let server = StandIn::start(move |_| script.clone()).await.expect("stand-in");
    let s = Prober::new(probe_config(8), &[])
        .probe(&plan(ProviderKind::Openai, &format!("{}/v1", server.base_url())), Utc::now())
        .await;
    assert_eq!(s.outcome, Outcome::Ok, "{:?}", s.error);
    assert_eq!(s.cost_usd, None, "a negative cost is dropped");
    assert_eq!(s.output_tokens, None, "an absurd token count is dropped");
    assert_eq!(s.input_tokens, Some(10));
    let kept = s.request_id.clone().expect("request id kept, cut");
    assert!(kept.len() <= vigil::io::probe::scrub::MAX_REQUEST_ID_BYTES + 3, "{} bytes", kept.len());
    // What was dropped is counted once the sample reaches the metrics.
    let metrics = vigil::io::metrics::Metrics::new("r").expect("metrics");
    metrics.observe(&s);
    let text = metrics.render();
    for field in ["cost_usd", "output_tokens"] {
        let line = format!("vigil_provider_values_rejected_total{{field=\"{field}\",region=\"r\"}} 1");
        assert!(text.contains(&line), "{field} counted:\n{text}");
    }
}

/// The key the provider echoes, and the secret header value it echoes too.
const KEY: &str = "sk-test-echoed-0123456789abcdef";
const HEADER_SECRET: &str = "azure-test-secret-9f8e7d6c5b";

fn contains_secret(text: &str) -> Option<&'static str> {
    [KEY, HEADER_SECRET, "0123456789abcdef", "9f8e7d6c5b"].into_iter().find(|s| text.contains(s))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_echoing_its_key_leaks_it_nowhere() {
    // The provider refuses the key and quotes it, and the secret header, in its error body and
    // in its request id.
    let echo = StandIn::start(|r| {
        let auth = r.header("authorization").unwrap_or_default().to_string();
        let api_key = r.header("api-key").unwrap_or_default().to_string();
        let body = serde_json::json!({"error": {"message": format!(
            "Incorrect API key provided: {}. You sent '{auth}' and api-key {api_key}; key={KEY}", KEY)}});
        Script::json(401, body.to_string().as_bytes()).with_header("x-request-id", format!("req-{KEY}"))
    })
    .await
    .expect("stand-in");
    let receiver = Receiver::start(Reply::new(200, "ok")).await;

    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("vigil.db");
    let config = dir.path().join("vigil.toml");
    std::fs::write(
        &config,
        format!(
            r#"region = "test-1"
[storage]
url = "sqlite://{db}"
data_dir = "{data}"
batch_age = "100ms"
[http]
listen = "127.0.0.1:0"
[probe]
interval = "1s"
timeout = "900ms"
[[provider]]
name = "echo"
kind = "openai"
base_url = "{base}/v1"
api_key_env = "VIGIL_ECHO_KEY"
models = ["m"]
headers_env = {{ "api-key" = "VIGIL_ECHO_HEADER" }}
[alerts]
error_probes = 1
[[alerts.webhook]]
url_env = "VIGIL_ECHO_HOOK"
"#,
            db = db.display(),
            data = dir.path().display(),
            base = echo.base_url(),
        ),
    )
    .expect("write config");
    let mut child = Command::new(env!("CARGO_BIN_EXE_vigil"))
        .args(["run", "--config"])
        .arg(&config)
        .env("VIGIL_LOG_FORMAT", "json")
        .env("VIGIL_LOG", "debug")
        .env("VIGIL_ECHO_KEY", KEY)
        .env("VIGIL_ECHO_HEADER", HEADER_SECRET)
        .env("VIGIL_ECHO_HOOK", receiver.url("/hook"))
        .env_remove("DATABASE_URL")
        .env_remove("VIGIL_API_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("vigil starts");
    let log: Arc<Mutex<Vec<String>>> = Arc::default();
    let (tx, rx) = std::sync::mpsc::channel();
    for pipe in [
        Box::new(child.stderr.take().expect("stderr")) as Box<dyn std::io::Read + Send>,
        Box::new(child.stdout.take().expect("stdout")),
    ] {
        let (lines, tx) = (log.clone(), tx.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
                if v["message"] == "http listening" {
                    if let Some(addr) = v["addr"].as_str() {
                        let _ = tx.send(addr.to_string());
                    }
                }
                lines.lock().expect("log lock").push(line);
            }
        });
    }
    let addr = tokio::task::spawn_blocking(move || rx.recv_timeout(Duration::from_secs(120)))
        .await
        .expect("join")
        .expect("vigil logs its address");
    let http = reqwest::Client::new();
    let get = |path: &str| {
        let http = http.clone();
        let url = format!("http://{addr}{path}");
        async move { http.get(url).send().await.expect("get").text().await.expect("body") }
    };
    // Wait (bounded) for a few refused probes and the alert.
    let alerted = |targets: &String| targets.contains("auth_error") && !receiver.requests().is_empty();
    let targets = crate::support::settle(Duration::from_secs(10), || get("/v1/targets"), alerted).await;
    assert!(targets.contains("auth_error"), "the refusal shows in /v1/targets:\n{targets}");
    assert!(targets.contains("[redacted]"), "the echoed key is replaced, not the whole text dropped:\n{targets}");
    let page = get("/").await;
    let metrics = get("/metrics").await;
    for (what, text) in [("/v1/targets", &targets), ("status page", &page), ("/metrics", &metrics)] {
        assert_eq!(contains_secret(text), None, "secret in {what}:\n{text}");
    }
    let hooks = receiver.requests();
    assert!(!hooks.is_empty(), "the auth_error alert reached the receiver");
    for h in &hooks {
        let body = String::from_utf8_lossy(&h.body);
        assert_eq!(contains_secret(&body), None, "secret in an alert payload:\n{body}");
    }

    let pid = i32::try_from(child.id()).expect("pid");
    // SAFETY: signalling our own child by its id.
    unsafe {
        libc::kill(pid, libc::SIGTERM);
    }
    let status = tokio::task::spawn_blocking(move || child.wait()).await.expect("join").expect("wait");
    assert!(status.success(), "vigil exits cleanly: {status:?}");

    // The whole database file (and any WAL left), byte for byte.
    for entry in std::fs::read_dir(dir.path()).expect("dir").filter_map(Result::ok) {
        let name = entry.file_name().to_string_lossy().to_string();
        if name.starts_with("vigil.db") {
            let bytes = std::fs::read(entry.path()).expect("read db");
            assert_eq!(contains_secret(&String::from_utf8_lossy(&bytes)), None, "secret stored in {name}");
        }
    }
    let store = vigil::io::store::open(&format!("sqlite://{}", db.display())).await.expect("store");
    let stored = store.count_samples(&vigil::io::store::SampleQuery::default()).await.expect("count");
    assert!(stored >= 1, "the refused probes were stored");
    let log = log.lock().expect("log").join("\n");
    assert!(log.contains("auth_error") || log.contains("401"), "the log saw the probes:\n{log}");
    assert_eq!(contains_secret(&log), None, "secret in the log:\n{log}");
}
