//! Bounded memory for every answer vigil reads, measured on the real `vigil` binary: a provider
//! whose models list is a valid 15 MB answer of 900,000 ids (under the 16 MB cap), read every
//! second, and a status page answering 1 MB of the emptiest entries its parser keeps. The
//! daemon's peak resident set (`VmHWM`) must stay under a generous bound: a memory bound, not a
//! speed one (the reading this replaced peaked at 660 MB on the same list).

use crate::support::process::{free_port, Daemon};
use crate::support::{fixture, settle};

use std::time::Duration;
use vigil::run::demo::standin::{RequestRecord, Script, StandIn};

/// The bound on the daemon's peak RSS: several times what it needs, far under what holding
/// the list would cost.
const PEAK_RSS_LIMIT: u64 = 100 * 1024 * 1024;

/// `{"object":"list","data":[{"id":"x123456"},…]}` with `n` ids and `wanted` among them.
fn huge_models_list(n: usize, wanted: &str) -> Vec<u8> {
    let mut body = String::with_capacity(n * 18 + 64);
    body.push_str(r#"{"object":"list","data":["#);
    for i in 0..n {
        body.push_str(&format!(r#"{{"id":"x{i:06}"}},"#));
    }
    body.push_str(&format!(r#"{{"id":"{wanted}"}}]}}"#));
    body.into_bytes()
}

/// A Statuspage summary of about `bytes` whose one incident carries as many empty updates as fit.
fn dense_summary(bytes: usize) -> Vec<u8> {
    let mut body = String::from(
        r#"{"page":{"name":"p"},"status":{"indicator":"minor","description":"d"},"components":[],"incidents":[{"id":"i","name":"n","status":"investigating","created_at":"2026-12-01T00:00:00Z","incident_updates":["#,
    );
    while body.len() < bytes {
        body.push_str("{},");
    }
    body.push_str("{}]}]}");
    body.into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_15_mb_models_list_and_a_dense_status_page_cost_the_daemon_a_bounded_peak() {
    let list = huge_models_list(900_000, "m1");
    assert!(list.len() > 15_000_000 && list.len() < 16 * 1024 * 1024, "{} bytes", list.len());
    let summary = dense_summary(1000 * 1024);
    let stream = fixture("openai-chat-stream-usage.sse");
    let provider = StandIn::start(move |r: &RequestRecord| {
        if r.method == "POST" {
            Script::sse(&stream, Duration::from_millis(1))
        } else if r.path_only().ends_with("/models") {
            Script::json(200, &list)
        } else if r.path_only().ends_with("/summary.json") {
            Script::json(200, &summary)
        } else {
            Script::json(404, b"{}")
        }
    })
    .await
    .expect("stand-in");
    let data = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let config = format!(
        r#"region = "memory-1"
[storage]
url = "sqlite://{data}/vigil.db"
data_dir = "{data}"
[http]
listen = "127.0.0.1:{port}"
[probe]
interval = "1s"
timeout = "900ms"
status_page_every = "1s"
[deprecation]
models_every = "1s"
[[provider]]
name = "steady"
kind = "openai"
base_url = "{base}/v1"
api_key_env = "VIGIL_TEST_KEY"
models = ["m1"]
status_page_url = "{base}/status"
"#,
        data = data.path().display(),
        base = provider.base_url()
    );
    let file = data.path().join("vigil.toml");
    std::fs::write(&file, config).expect("config");
    let vigil = Daemon::start(&file, port, &data.path().join("vigil.log")).await;
    let reads = |suffix: &'static str| {
        let provider = &provider;
        move || async move { provider.requests().iter().filter(|r| r.path_only().ends_with(suffix)).count() }
    };
    // Each round of reads ends before the next begins: three list reads are two whole parses.
    let lists = settle(Duration::from_secs(60), reads("/models"), |n| *n >= 3).await;
    let pages = settle(Duration::from_secs(10), reads("/summary.json"), |n| *n >= 3).await;
    assert!(lists >= 3 && pages >= 3, "lists read {lists}, pages read {pages}; log:\n{}", vigil.log());
    let peak = vigil.peak_rss();
    println!("peak RSS after {lists} list reads and {pages} page reads: {} MB", peak / (1024 * 1024));
    let log = vigil.log();
    assert!(!log.contains("models list not read"), "the list is read, not refused; log:\n{log}");
    let (_, clean, log) = vigil.stop().await;
    assert!(clean, "{log}");
    assert!(peak < PEAK_RSS_LIMIT, "peak RSS {} MB over {} MB", peak / (1024 * 1024), PEAK_RSS_LIMIT / (1024 * 1024));
}
