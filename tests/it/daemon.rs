//! The daemon and the binary end to end: `vigil run` against stand-in providers on loopback,
//! `/metrics` checked by promtool, and the CLI's output and exit codes.

use crate::support::daemon::{spawn_app, spawn_app_with, DaemonConfig, Provider};
use crate::support::{fixture, promtool, settle};

use std::process::Command;
use std::time::Duration;
use vigil::run::app::AppOptions;
use vigil::run::demo::standin::{Script, StandIn};

fn vigil() -> Command {
    Command::new(env!("CARGO_BIN_EXE_vigil"))
}

/// The binary run without blocking the runtime that serves the stand-ins.
fn vigil_async() -> tokio::process::Command {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_vigil"))
}

async fn stand_ins() -> (StandIn, StandIn) {
    let body = fixture("openai-chat-stream-usage.sse");
    let ok = StandIn::start(move |_| Script::sse(&body, Duration::from_millis(1))).await.expect("stand-in");
    let err = fixture("openai-error-503.json");
    let down = StandIn::start(move |_| Script::json(503, &err)).await.expect("stand-in");
    (ok, down)
}

/// Three targets: `fast/m1` and `fast/m2` answer, `broken/m1` fails with 503.
fn config(ok: &StandIn, down: &StandIn, data: &std::path::Path) -> DaemonConfig {
    DaemonConfig::sqlite(data)
        .region("test-1")
        .set("metrics.detail", "full")
        .provider(Provider::openai("fast", &format!("{}/v1", ok.base_url())).models(&["m1", "m2"]))
        .provider(Provider::openai("broken", &format!("{}/v1", down.base_url())).models(&["m1"]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_serves_metrics_that_promtool_accepts_and_drains_on_shutdown() {
    let (ok, down) = stand_ins().await;
    let data = tempfile::tempdir().expect("tempdir");
    let daemon = spawn_app(config(&ok, &down, data.path()).key("sk-test-daemon").build()).await;
    let metrics = daemon.metrics.clone();

    let http = reqwest::Client::new();
    let base = daemon.base.clone();
    // Rounds are 1 s apart; wait (bounded) until two rounds of all three targets are counted.
    let ok_count = |text: &String| {
        text.lines()
            .filter(|l| l.starts_with("vigil_probes_total{") && l.contains("outcome=\"ok\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    let all_count = |text: &String| {
        text.lines()
            .filter(|l| l.starts_with("vigil_probes_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    // Rounds start on the interval's multiples since the epoch: a target whose offset had passed
    // in the first, partial round is first probed in the next one.
    let text =
        settle(Duration::from_secs(10), || daemon.scrape(), |text| ok_count(text) >= 4.0 && all_count(text) >= 6.0)
            .await;
    for name in [
        "vigil_probe_ttfb_seconds_bucket",
        "vigil_probe_ttft_seconds_bucket",
        "vigil_probe_duration_seconds_bucket",
        "vigil_probe_phase_seconds",
        "vigil_probe_tokens_per_second",
        "vigil_probes_total",
        "vigil_probe_last_status",
        "vigil_probe_schedule_lag_seconds_bucket",
        "vigil_samples_spooled",
    ] {
        assert!(text.contains(name), "{name} missing from /metrics:\n{text}");
    }
    assert!(
        text.contains(r#"vigil_probe_last_status{model="m1",provider="broken",region="test-1",route=""} 503"#),
        "{text}"
    );
    assert!(text.contains(r#"outcome="server_error",provider="broken""#), "{text}");
    assert!(text.contains(r#"le="0.05""#) && text.contains(r#"le="30""#), "buckets resolve 50 ms to 30 s");

    promtool::check_metrics(&text);

    // A scraper that accepts gzip (Prometheus always does) gets the same exposition compressed.
    let gz = http.get(format!("{base}/metrics")).header("Accept-Encoding", "gzip").send().await.expect("metrics");
    assert_eq!(gz.headers().get("content-encoding").and_then(|v| v.to_str().ok()), Some("gzip"));
    let packed = gz.bytes().await.expect("body");
    let mut unpacked = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&packed[..]), &mut unpacked).expect("gzip");
    assert!(unpacked.contains("# TYPE vigil_probes_total counter"), "{unpacked}");
    assert!(packed.len() * 3 < unpacked.len(), "{} bytes compressed from {}", packed.len(), unpacked.len());
    let plain = http.get(format!("{base}/metrics")).send().await.expect("metrics");
    assert!(plain.headers().get("content-encoding").is_none(), "no gzip unless asked");

    assert_eq!(http.get(format!("{base}/healthz")).send().await.expect("healthz").status(), 200);
    assert_eq!(http.get(format!("{base}/readyz")).send().await.expect("readyz").status(), 200);

    daemon.stop().await;

    // Every probe counted in the metrics was stored, once.
    let probes: f64 = metrics
        .render()
        .lines()
        .filter(|l| l.starts_with("vigil_probes_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    let store = vigil::io::store::open(&format!("sqlite://{}/vigil.db", data.path().display())).await.expect("store");
    let stored = store.count_samples(&vigil::io::store::SampleQuery::default()).await.expect("count");
    assert!(probes >= 6.0, "two rounds of three targets at least, got {probes}");
    assert_eq!(stored as f64, probes, "stored samples equal vigil_probes_total");
}

#[tokio::test]
async fn probe_command_prints_json_lines_with_spec_fields() {
    let (ok, down) = stand_ins().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("vigil.toml");
    std::fs::write(&path, config(&ok, &down, dir.path()).toml()).expect("write config");
    let out = vigil_async()
        .args(["probe", "--json", "--config"])
        .arg(&path)
        .env("VIGIL_TEST_KEY", "sk-test-cli")
        .output()
        .await
        .expect("vigil runs");
    // One of the three targets is down: the round is printed, and the exit code says so.
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("1 of 3 targets failed"));
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect();
    assert_eq!(lines.len(), 3);
    for field in [
        "provider",
        "model",
        "route",
        "region",
        "target",
        "ts",
        "dns_ms",
        "connect_ms",
        "tls_ms",
        "ttfb_ms",
        "ttft_ms",
        "ttfr_ms",
        "total_ms",
        "output_tokens",
        "tokens_per_s",
        "status",
        "outcome",
        "adherence_ok",
        "cost_usd",
        "scheduled_at",
        "started_at",
    ] {
        assert!(lines.iter().all(|l| l.get(field).is_some()), "field {field} missing");
    }
    assert_eq!(lines[0]["target"], "fast/m1");
    assert_eq!(lines[0]["outcome"], "ok");
    assert_eq!(lines[2]["outcome"], "server_error");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("sk-test-cli"), "the key never reaches output");

    let table = vigil_async()
        .args(["probe", "--target", "fast/m2", "--config"])
        .arg(&path)
        .env("VIGIL_TEST_KEY", "sk-test-cli")
        .output()
        .await
        .expect("vigil runs");
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(table.status.success());
    assert!(text.starts_with("TARGET") && text.contains("fast/m2") && !text.contains("fast/m1"), "{text}");

    let unknown = vigil_async()
        .args(["probe", "--target", "nope", "--config"])
        .arg(&path)
        .env("VIGIL_TEST_KEY", "k")
        .output()
        .await;
    let unknown = unknown.expect("vigil runs");
    assert_eq!(unknown.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("--target nope"));
}

#[test]
fn bad_config_exits_2_naming_the_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        "[[provider]]\nname='a'\nkind='http'\nbase_url='https://a.example'\n[[provider]]\nname='b'\nkind='http'\nbase_url='https://b.example'\n[[provider]]\nname='c'\nkind='http'\nbase_url='nope'\n",
    )
    .expect("write");
    let out = vigil().args(["check-config", "--config"]).arg(&path).output().expect("vigil runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("provider[2].base_url: relative URL without a base"));

    let empty = dir.path().join("empty.toml");
    std::fs::write(&empty, "[http]\nlisten = \"127.0.0.1:0\"\n").expect("write");
    let out = vigil()
        .args(["run", "--config"])
        .arg(&empty)
        .env_remove("OPENROUTER_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("GROQ_API_KEY")
        .env_remove("TOGETHER_API_KEY")
        .env_remove("DEEPINFRA_API_KEY")
        .env_remove("GEMINI_API_KEY")
        .output()
        .expect("vigil runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing to probe"));
}

#[test]
fn check_config_redacts_secrets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("vigil.toml");
    std::fs::write(
        &path,
        "[[provider]]\nname = \"openai\"\n[storage]\nurl = \"postgres://vigil:hunter2@db.example/vigil\"\n",
    )
    .expect("write");
    let out = vigil()
        .args(["check-config", "--config"])
        .arg(&path)
        .env("OPENAI_API_KEY", "sk-test-secret-value")
        .output()
        .expect("vigil runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    // Secrets are named by their variables, never shown; the database password is replaced.
    assert!(text.contains("name = \"openai\"") && text.contains("api_key_env = \"OPENAI_API_KEY\""), "{text}");
    assert!(text.contains("postgres://vigil:redacted@db.example/vigil"), "{text}");
    assert!(!text.contains("sk-test-secret-value") && !text.contains("hunter2"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_mode_probes_simulated_providers_and_reads_their_credit() {
    let data = tempfile::tempdir().expect("tempdir");
    let config = DaemonConfig::sqlite(data.path())
        .set("probe.interval", "2s")
        .set("probe.timeout", "2s")
        .provider(Provider::http("none", "http://127.0.0.1:9/"));
    let daemon = spawn_app_with(config.build(), AppOptions { demo: true, ..AppOptions::default() }).await;
    let text = settle(
        Duration::from_secs(10),
        || daemon.scrape(),
        |text| text.contains("vigil_credit_remaining_usd{") && demo_ok(text),
    )
    .await;
    assert!(text.contains(r#"vigil_credit_remaining_usd{provider="demo-llama",region="local"}"#), "{text}");
    assert!(demo_ok(&text), "{text}");
    daemon.stop().await;
}

/// A demo-llama route has at least one successful probe counted.
fn demo_ok(metrics: &str) -> bool {
    metrics.lines().any(|l| {
        l.starts_with("vigil_probes_total{")
            && l.contains(r#"outcome="ok",provider="demo-llama""#)
            && !l.ends_with(" 0")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_runs_retention_at_start_and_keeps_fresh_rows() {
    use vigil::vocab::records::{BreakerTransition, Rollup};
    let data = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}/vigil.db", data.path().display());
    let store = vigil::io::store::open(&url).await.expect("open");
    store.migrate().await.expect("migrate");
    let now = chrono::Utc::now();
    let t = vigil::vocab::target::Target::new("none".into(), Default::default(), None, "local".into());
    let rollup = |days: i64| Rollup {
        target: t.clone(),
        metric: "ttfb".into(),
        hour: now - chrono::Duration::days(days),
        count: 1,
        histogram: vec![1],
    };
    let transition = |days: i64| BreakerTransition {
        target: t.clone(),
        from_state: vigil::vocab::breaker::State::Closed,
        to_state: vigil::vocab::breaker::State::Open,
        at: now - chrono::Duration::days(days),
        reason: format!("{days} days ago"),
    };
    store.upsert_rollups(&[rollup(401), rollup(3)]).await.expect("rollups");
    for d in [200, 2] {
        store.append_transition(&transition(d)).await.expect("transition");
    }
    let config = DaemonConfig::sqlite(data.path())
        .set("probe.interval", "60s")
        .provider(Provider::http("none", "http://127.0.0.1:9/"));
    let daemon = spawn_app(config.build()).await;
    let long_ago = now - chrono::Duration::days(1000);
    let store = &store;
    let left = settle(
        Duration::from_secs(10),
        || async move {
            let rollups = store.rollups_since(None, long_ago).await.expect("rollups").len();
            let transitions = store.transitions("local", None, 10).await.expect("transitions").len();
            (rollups, transitions)
        },
        |left| *left == (1, 1),
    )
    .await;
    assert_eq!(left, (1, 1), "the retention job removed the expired rollup and transition, nothing else");
    daemon.stop().await;
}
