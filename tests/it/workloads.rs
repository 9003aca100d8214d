//! Long-prompt probes on real parts: the real daemon runs two `[[probe.workload]]` sizes against
//! an OpenAI-compatible stand-in on loopback that streams real SSE and holds its answer back in
//! proportion to the prompt it received (as a prefill does). Each size's time to first token is
//! kept in its own series apart from the tiny probe's, the export gives the large size the larger
//! deadline, every run is stored in `workload_runs` of a real SQLite file (never `samples`), and
//! a restart reads the series back.

use crate::support::daemon::{adherent_stream, spawn_app, table, DaemonConfig, Provider};
use crate::support::poll_until;

use std::time::Duration;
use toml::Value;
use vigil::run::demo::standin::{ChatIdentity, RequestRecord, Script, StandIn};

const KEY: &str = "sk-test-workload";
/// The stand-in's prefill speed: one millisecond per this many characters of prompt.
const CHARS_PER_MS: usize = 16;
/// What an 8,000-token prompt (32,000 characters) waits for its first token, at least.
const LARGE_FLOOR_MS: f64 = (8000 * 4 / CHARS_PER_MS) as f64;

/// The system and user turns of a request.
fn turns(r: &RequestRecord) -> (String, String) {
    let body = r.json().unwrap_or_default();
    let turn = |role: &str| {
        body["messages"]
            .as_array()
            .and_then(|m| m.iter().find(|m| m["role"] == role))
            .and_then(|m| m["content"].as_str().map(String::from))
    };
    (turn("system").unwrap_or_default(), turn("user").unwrap_or_default())
}

fn is_workload(system: &str) -> bool {
    system.contains("You are a latency check")
}

fn config(data: &std::path::Path, base: &str) -> DaemonConfig {
    let workloads = Value::Array(vec![
        table([("input_tokens", 512.into()), ("every", "1m".into())]),
        table([("input_tokens", 8000.into()), ("every", "1m".into())]),
    ]);
    let price = table([("input_per_mtok", 3.0.into()), ("output_per_mtok", 15.0.into())]);
    DaemonConfig::sqlite(data)
        .region("test-1")
        .set("baseline.min_samples_p50", 1)
        .set("baseline.min_samples_p95", 1)
        .set("baseline.min_samples_p99", 1)
        .set("probe.workload", workloads)
        // The two sizes set aside about $40 a day at these prices: under the default $5 budget
        // the tiny probe would be stretched to `probe.max_interval` and this test would wait on it.
        .set("probe.daily_budget_usd", 1000.0)
        .provider(Provider::openai("standin", &format!("{base}/v1")).models(&["m1"]).set("price", price))
        .key(KEY)
}

/// The `workloads` of the one target in a `/v1/thresholds` document, by size.
fn sizes(doc: &serde_json::Value) -> Vec<serde_json::Value> {
    doc["targets"][0]["workloads"].as_array().cloned().unwrap_or_default()
}

async fn thresholds(addr: std::net::SocketAddr) -> serde_json::Value {
    let r = reqwest::get(format!("http://{addr}/v1/thresholds")).await.expect("thresholds");
    r.json().await.unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_size_gets_its_own_ttft_series_and_deadline_apart_from_the_tiny_probe() {
    let ok = adherent_stream();
    let provider = StandIn::start(move |r| {
        let (system, user) = turns(r);
        let prefill = Duration::from_millis(((system.len() + user.len()) / CHARS_PER_MS) as u64);
        let id = ChatIdentity { model: "m1".into(), ..ChatIdentity::default() };
        let script = match is_workload(&system) {
            true => Script::openai_chat("OK", &id, Duration::ZERO),
            false => Script::sse(&ok, Duration::from_millis(1)),
        };
        script.with_head_delay(prefill)
    })
    .await
    .expect("stand-in");
    let data = tempfile::tempdir().expect("tempdir");
    let daemon = spawn_app(config(data.path(), &provider.base_url()).build()).await;
    let addr = daemon.addr;

    let both = poll_until(Duration::from_secs(30), || async move {
        let doc = thresholds(addr).await;
        let s = sizes(&doc);
        // The tiny probe and the workloads keep their own phases: wait for all three series.
        let tiny = doc["targets"][0]["ttft_ms"]["p99"].is_f64();
        (tiny && s.len() == 2 && s.iter().all(|w| w["failover_ttft_ms"].is_f64())).then_some(doc)
    })
    .await;
    let doc = both
        .unwrap_or_else(|| panic!("no deadline for both sizes and the tiny probe: {:?}", provider.requests().len()));
    let s = sizes(&doc);
    let (small, large) = (&s[0], &s[1]);
    assert_eq!((small["input_tokens"].as_u64(), large["input_tokens"].as_u64()), (Some(512), Some(8000)), "{doc}");
    let ms = |w: &serde_json::Value, k: &str| w[k].as_f64().unwrap_or_default();
    let p50 = |w: &serde_json::Value| w["ttft_ms"]["p50"].as_f64().unwrap_or_default();
    assert!(p50(large) >= LARGE_FLOOR_MS, "the large prompt's first token waited for its prefill: {large}");
    assert!(
        ms(large, "failover_ttft_ms") > ms(small, "failover_ttft_ms"),
        "the large size's deadline is larger: {doc}"
    );
    assert!(
        ms(large, "failover_ttft_ms") >= 2.0 * LARGE_FLOOR_MS,
        "factor × its own P95, not the tiny probe's: {large}"
    );
    // The tiny probe's first token comes within its 900 ms timeout or not at all: its series
    // never saw a long-prompt run.
    let tiny = &doc["targets"][0]["ttft_ms"];
    assert!(tiny["p99"].as_f64().is_some_and(|p| p < LARGE_FLOOR_MS), "tiny probe series kept apart: {tiny}");

    let http = reqwest::Client::new();
    let targets: serde_json::Value =
        http.get(format!("http://{addr}/v1/targets")).send().await.expect("targets").json().await.expect("JSON");
    assert_eq!(targets["targets"][0]["workloads"].as_array().map(Vec::len), Some(2), "{targets}");
    let page = http.get(format!("http://{addr}/")).send().await.expect("page").text().await.expect("html");
    assert!(page.contains("Long-prompt probes") && page.contains("8000"), "the status page shows the sizes");
    let reserved = targets["probe_plan"]["reserved_usd"].as_f64().unwrap_or_default();
    assert!(reserved > 0.0, "the workloads' daily cost is set aside in the probe plan: {targets}");
    let text = daemon.metrics.render();
    let gauge = text
        .lines()
        .find(|l| l.starts_with("vigil_workload_ttft_seconds{") && l.contains("input_tokens=\"8000\""))
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok());
    assert!(gauge.is_some_and(|g| g * 1000.0 >= LARGE_FLOOR_MS), "{text}");

    let requests = provider.requests();
    let asked: Vec<(String, String)> = requests.iter().map(turns).filter(|(s, _)| is_workload(s)).collect();
    for size in [512usize, 8000] {
        let (system, user) = asked
            .iter()
            .find(|(s, u)| (s.len() + u.len()).abs_diff(size * 4) <= 1)
            .unwrap_or_else(|| panic!("no request of about {} characters", size * 4));
        let (nonce, rest) = system.split_at(12);
        assert!(nonce.chars().all(|c| c.is_ascii_hexdigit()), "the nonce comes first: {system}");
        assert!(rest.starts_with(". You are a latency check"), "{system}");
        assert!(!user.contains(nonce), "the filler is the same every run; only the nonce differs");
    }
    let nonces: std::collections::HashSet<&str> = asked.iter().map(|(s, _)| &s[..12]).collect();
    assert_eq!(nonces.len(), asked.len(), "a fresh nonce per run");
    daemon.stop_within(Duration::from_secs(12)).await;

    let store = vigil::io::store::open(&format!("sqlite://{}/vigil.db", data.path().display())).await.expect("store");
    let since = chrono::Utc::now() - chrono::Duration::days(1);
    let runs = store.workload_runs(None, since, 100).await.expect("workload runs");
    assert!(runs.iter().any(|r| r.input_tokens == 512) && runs.iter().any(|r| r.input_tokens == 8000), "{runs:?}");
    assert!(runs.iter().filter(|r| r.input_tokens == 8000).all(|r| r.sample.ttft_ms >= Some(LARGE_FLOOR_MS)));
    let ids: Vec<uuid::Uuid> = runs.iter().map(|r| r.sample.id).collect();
    let samples = store.samples(&vigil::io::store::SampleQuery::default()).await.expect("samples");
    assert!(!samples.is_empty() && samples.iter().all(|s| !ids.contains(&s.id)), "no workload run in samples");
    drop(store);

    // A restart reads the stored runs back: the series holds the stored run and the new one.
    let stored = runs.iter().filter(|r| r.input_tokens == 8000).count() as u64;
    let daemon = spawn_app(config(data.path(), &provider.base_url()).build()).await;
    let addr = daemon.addr;
    let reloaded = poll_until(Duration::from_secs(30), || async move {
        let s = sizes(&thresholds(addr).await);
        s.iter().find(|w| w["input_tokens"] == 8000 && w["runs"].as_u64() > Some(stored)).cloned()
    })
    .await;
    assert!(reloaded.is_some(), "the series was read back at start: {}", thresholds(addr).await);
    daemon.stop_within(Duration::from_secs(12)).await;
}

#[test]
fn workloads_are_refused_with_the_key_named() {
    let refused = |workload: Value, provider: Provider| {
        let dir = tempfile::tempdir().expect("tempdir");
        let config =
            DaemonConfig::sqlite(dir.path()).set("probe.workload", Value::Array(vec![workload])).provider(provider);
        let config = config.key(KEY);
        vigil::config::Config::from_toml(&config.toml(), config.vars()).map(|_| ()).map_err(|e| e.to_string())
    };
    let chat = || Provider::openai("p", "http://127.0.0.1:9/v1");
    let e = refused(table([("input_tokens", 100.into())]), chat()).expect_err("too small");
    assert!(e.contains("probe.workload[0].input_tokens"), "{e}");
    let e = refused(table([("input_tokens", 8000.into()), ("every", "10s".into())]), chat()).expect_err("too often");
    assert!(e.contains("probe.workload[0].every"), "{e}");
    let site = Provider::http("site", "http://127.0.0.1:9/health");
    let only_http = table([("input_tokens", 8000.into()), ("providers", Value::Array(vec!["site".into()]))]);
    let e = refused(only_http, site).expect_err("http");
    assert!(e.contains("probe.workload[0].providers") && e.contains("http"), "{e}");
    let typo = table([("input_tokens", 8000.into()), ("input_token", 8000.into())]);
    assert!(refused(typo, chat()).expect_err("unknown key").contains("input_token"));
    assert_eq!(refused(table([("input_tokens", 8000.into())]), chat()), Ok(()));
}
