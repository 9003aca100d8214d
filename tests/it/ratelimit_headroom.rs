//! Rate-limit headroom (issue 31 item 4) on real parts. Loopback stand-ins send the rate-limit
//! headers as OpenAI/Groq/Together, Anthropic and Azure OpenAI do, on answers and on a 429; each
//! probe records what they say, a malformed value is ignored without failing the probe. A daemon
//! probing a provider whose allowance runs low shows it in the per-kind gauges (promtool-checked),
//! `/v1/targets` and the router export (valid against its schema), fires `ratelimit_low` once and
//! resolves it when the allowance is back.

use crate::support::daemon::{adherent_stream, spawn_app, DaemonConfig, Provider};
use crate::support::{fixture, poll_until, probe_config};
use chrono::{DateTime, Duration as Span, Utc};
use secrecy::SecretString;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use vigil::config::{ProviderConfig, ProviderKind};
use vigil::io::probe::{Planned, Prober};
use vigil::run::demo::standin::{Script, StandIn};
use vigil::vocab::ratelimit::Allowance;
use vigil::vocab::sample::{Outcome, Sample};
use vigil::vocab::target::Target;

async fn probe(kind: ProviderKind, model: &str, script: Script) -> Sample {
    let server = StandIn::start(move |_| script.clone()).await.expect("stand-in starts");
    let base = match kind {
        ProviderKind::Azure => server.base_url(),
        _ => format!("{}/v1", server.base_url()),
    };
    let p = ProviderConfig {
        api_key_env: Some("TEST_KEY".into()),
        api_key: Some(SecretString::from("sk-test-headroom")),
        models: vec![model.into()],
        ..ProviderConfig::new("p", kind, base.parse().expect("url"))
    };
    let target = Target::new("p".into(), model.into(), None, "test-1".into());
    let plan = Planned { target, provider: Arc::new(p) };
    Prober::new(probe_config(4), &[]).probe(&plan, Utc::now()).await
}

fn with_headers(mut script: Script, headers: &[(&str, &str)]) -> Script {
    for (k, v) in headers {
        script = script.with_header(*k, *v);
    }
    script
}

/// `reset_at` lies `after` past the probe's start (the response came a little later; the reset
/// is kept to the millisecond, so it may read up to 1 ms before start + `after` when the answer
/// came within the same millisecond).
fn resets_after(a: &Allowance, s: &Sample, after: Span) {
    let at = a.reset_at.expect("reset read");
    let earliest = s.started_at + after - Span::milliseconds(1);
    assert!(at >= earliest && at < s.started_at + after + Span::seconds(10), "{at} vs {}", s.started_at);
}

#[tokio::test]
async fn each_provider_shape_is_recorded_and_a_malformed_header_never_fails_a_probe() {
    // OpenAI, Groq and Together: limits, remaining and Go-style reset durations.
    let openai = with_headers(
        Script::sse(&fixture("openai-chat-stream-usage.sse"), Duration::from_millis(2)),
        &[
            ("x-ratelimit-limit-requests", "14400"),
            ("x-ratelimit-remaining-requests", "14370"),
            ("x-ratelimit-reset-requests", "2m59.56s"),
            ("x-ratelimit-limit-tokens", "6000"),
            ("x-ratelimit-remaining-tokens", "300"),
            ("x-ratelimit-reset-tokens", "7.66s"),
        ],
    );
    let s = probe(ProviderKind::Openai, "m", openai).await;
    assert_eq!(s.outcome, Outcome::Ok, "{:?}", s.error);
    let (requests, tokens) = (s.ratelimit.requests.expect("requests"), s.ratelimit.tokens.expect("tokens"));
    assert_eq!((requests.remaining, requests.limit), (Some(14_370), Some(14_400)));
    assert_eq!((tokens.remaining, tokens.limit), (Some(300), Some(6000)));
    resets_after(&requests, &s, Span::milliseconds(179_560));
    resets_after(&tokens, &s, Span::milliseconds(7_660));
    assert_eq!(s.ratelimit.tightest().map(|(k, _)| k.as_str()), Some("tokens"));

    // Anthropic: RFC 3339 resets; the combined tokens family.
    let reset = (Utc::now() + Span::seconds(42)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let anthropic = with_headers(
        Script::sse(&fixture("anthropic-messages-stream.sse"), Duration::from_millis(2)),
        &[
            ("anthropic-ratelimit-requests-limit", "50"),
            ("anthropic-ratelimit-requests-remaining", "49"),
            ("anthropic-ratelimit-requests-reset", &reset),
            ("anthropic-ratelimit-tokens-limit", "40000"),
            ("anthropic-ratelimit-tokens-remaining", "39000"),
            ("anthropic-ratelimit-tokens-reset", &reset),
            ("anthropic-ratelimit-output-tokens-limit", "8000"),
            ("anthropic-ratelimit-output-tokens-remaining", "10"),
        ],
    );
    let s = probe(ProviderKind::Anthropic, "m", anthropic).await;
    assert_eq!(s.outcome, Outcome::Ok, "{:?}", s.error);
    let want_reset = DateTime::parse_from_rfc3339(&reset).expect("rfc3339").with_timezone(&Utc);
    assert_eq!(
        s.ratelimit.requests,
        Some(Allowance { remaining: Some(49), limit: Some(50), reset_at: Some(want_reset) })
    );
    assert_eq!(s.ratelimit.tokens.and_then(|a| a.remaining), Some(39_000), "the combined family wins");

    // Azure OpenAI: what is remaining, nothing else.
    let azure = with_headers(
        Script::sse(&fixture("azure-chat-stream.sse"), Duration::from_millis(2)),
        &[("x-ratelimit-remaining-requests", "119"), ("x-ratelimit-remaining-tokens", "119520")],
    );
    let s = probe(ProviderKind::Azure, "chat-default", azure).await;
    assert_eq!(s.outcome, Outcome::Ok, "{:?}", s.error);
    assert_eq!(s.ratelimit.requests, Some(Allowance { remaining: Some(119), limit: None, reset_at: None }));
    assert_eq!(s.ratelimit.tokens.and_then(|a| a.remaining), Some(119_520));
    assert_eq!(s.ratelimit.tightest(), None, "no limit, no fraction");

    // A 429 says the allowance is spent and when it is back.
    let limited = with_headers(
        Script::json(429, &fixture("openai-error-429-rate-limit.json")),
        &[
            ("x-ratelimit-limit-requests", "500"),
            ("x-ratelimit-remaining-requests", "0"),
            ("x-ratelimit-reset-requests", "20ms"),
        ],
    );
    let s = probe(ProviderKind::Openai, "m", limited).await;
    assert_eq!(s.outcome, Outcome::RateLimited);
    assert_eq!(s.ratelimit.requests.and_then(|a| a.fraction()), Some(0.0));

    // Garbage in every header: the probe is as good as without them, and records nothing.
    let garbage = with_headers(
        Script::sse(&fixture("openai-chat-stream-usage.sse"), Duration::from_millis(2)),
        &[
            ("x-ratelimit-limit-requests", "lots"),
            ("x-ratelimit-remaining-requests", "-1"),
            ("x-ratelimit-reset-requests", "soon"),
            ("x-ratelimit-remaining-tokens", "1e400"),
            ("anthropic-ratelimit-tokens-reset", "2026-13-45T99:00:00Z"),
        ],
    );
    let s = probe(ProviderKind::Openai, "m", garbage).await;
    assert_eq!(s.outcome, Outcome::Ok, "{:?}", s.error);
    assert!(s.ratelimit.is_empty(), "{:?}", s.ratelimit);
}

/// The stand-in's answer with OpenAI-style headers saying `remaining` of 100 requests is left.
fn answer(remaining: u64) -> Script {
    Script::sse(&adherent_stream(), Duration::from_millis(2))
        .with_header("x-ratelimit-limit-requests", "100")
        .with_header("x-ratelimit-remaining-requests", remaining.to_string())
        .with_header("x-ratelimit-reset-requests", "6m0s")
        .with_header("x-ratelimit-limit-tokens", "200000")
        .with_header("x-ratelimit-remaining-tokens", "150000")
        .with_header("x-ratelimit-reset-tokens", "1s")
}

/// Every webhook delivery as JSON.
fn deliveries(hook: &StandIn) -> Vec<serde_json::Value> {
    hook.requests().iter().filter_map(|r| r.json()).collect()
}

fn ratelimit_deliveries(hook: &StandIn, status: &str) -> Vec<serde_json::Value> {
    deliveries(hook)
        .into_iter()
        .filter(|d| {
            d["status"] == status
                && d["alerts"].as_array().is_some_and(|a| a.iter().any(|x| x["kind"] == "ratelimit_low"))
        })
        .collect()
}

/// The value of the one series line starting with `prefix`.
fn series(text: &str, prefix: &str) -> Option<f64> {
    text.lines().find(|l| l.starts_with(prefix)).and_then(|l| l.rsplit_once(' ')).and_then(|(_, v)| v.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_running_low_shows_everywhere_fires_ratelimit_low_once_and_resolves_when_back() {
    let _timing = crate::support::timing_sensitive().await;
    let remaining = Arc::new(AtomicU64::new(4));
    let left = remaining.clone();
    let provider = StandIn::start(move |r| {
        if !r.path_only().ends_with("/chat/completions") {
            return Script::json(404, b"{}");
        }
        answer(left.load(Ordering::SeqCst))
    })
    .await
    .expect("stand-in");
    let hook = StandIn::start(|_| Script::json(200, b"{}")).await.expect("receiver");
    let data = tempfile::tempdir().expect("tempdir");
    let config = DaemonConfig::sqlite(data.path())
        .region("rl-headroom-1")
        .set("ratelimit.low_fraction", 0.1)
        .set("alerts.resolve_after", 2)
        // Young baselines make loopback jitter look like latency trips; this test is about limits.
        .set("breaker.latency_trips", 50)
        .set("alerts.latency_factor", 50.0)
        .webhook(&format!("{}/hook", hook.base_url()))
        .provider(Provider::openai("groq", &format!("{}/openai/v1", provider.base_url())))
        .key("sk-test-headroom");
    let daemon = spawn_app(config.build()).await;

    let fired = poll_until(Duration::from_secs(60), || {
        let d = ratelimit_deliveries(&hook, "firing").into_iter().next();
        async move { d }
    })
    .await
    .unwrap_or_else(|| panic!("no ratelimit_low page; deliveries: {:?}", deliveries(&hook)));
    let facet =
        fired["alerts"].as_array().and_then(|a| a.iter().find(|x| x["kind"] == "ratelimit_low")).expect("facet");
    assert_eq!(facet["severity"], "warning", "{facet}");
    let summary = facet["summary"].as_str().unwrap_or_default();
    assert!(
        summary.starts_with("requests: 4 of 100 left (4.0 %), under ratelimit.low_fraction 10 %; resets at "),
        "{summary}"
    );
    assert_eq!((facet["current"].as_f64(), facet["baseline"].as_f64()), (Some(0.04), Some(0.1)), "{facet}");

    // The gauges, promtool-checked.
    let text = daemon.scrape().await;
    crate::support::promtool::check_metrics(&text);
    let labels = r#"model="m",provider="groq",region="rl-headroom-1",route="""#;
    let gauge = |name: &str, kind: &str| series(&text, &format!(r#"{name}{{kind="{kind}",{labels}}} "#));
    assert_eq!(gauge("vigil_ratelimit_remaining", "requests"), Some(4.0), "{text}");
    assert_eq!(gauge("vigil_ratelimit_headroom_ratio", "requests"), Some(0.04), "{text}");
    assert_eq!(gauge("vigil_ratelimit_limit", "tokens"), Some(200_000.0), "{text}");
    assert_eq!(gauge("vigil_ratelimit_headroom_ratio", "tokens"), Some(0.75), "{text}");
    assert!(gauge("vigil_ratelimit_reset_timestamp_seconds", "requests").is_some_and(|t| t > 1.7e9), "{text}");
    assert_eq!(series(&text, r#"vigil_ratelimit_low_fraction{region="rl-headroom-1"} "#), Some(0.1), "{text}");

    // /v1/targets and the router export say the same, and the export keeps to its schema. The
    // page can go out before the first snapshot: none is published until the stored window is
    // read back after the start, which a loaded machine can take seconds over.
    let targets: serde_json::Value = poll_until(Duration::from_secs(60), || {
        let url = daemon.url("/v1/targets");
        async move {
            let v: serde_json::Value = reqwest::get(url).await.ok()?.json().await.ok()?;
            (!v["targets"][0]["ratelimit"].is_null()).then_some(v)
        }
    })
    .await
    .expect("/v1/targets shows the reading within 60 s");
    let rl = &targets["targets"][0]["ratelimit"];
    assert_eq!(
        (rl["low"].as_bool(), rl["tightest"].as_str(), rl["headroom"].as_f64()),
        (Some(true), Some("requests"), Some(0.04)),
        "{targets}"
    );
    assert_eq!((rl["requests"]["remaining"].as_u64(), rl["requests"]["limit"].as_u64()), (Some(4), Some(100)), "{rl}");
    let export: serde_json::Value =
        reqwest::get(daemon.url("/v1/thresholds")).await.expect("export").json().await.expect("json");
    let row = &export["targets"][0]["ratelimit"];
    assert_eq!((row["low"].as_bool(), row["tokens"]["remaining"].as_u64()), (Some(true), Some(150_000)), "{export}");
    validate_export(&export, data.path());

    // The allowance is back: the incident resolves, once.
    remaining.store(90, Ordering::SeqCst);
    poll_until(Duration::from_secs(60), || {
        let back = !ratelimit_deliveries(&hook, "resolved").is_empty();
        async move { back.then_some(()) }
    })
    .await
    .unwrap_or_else(|| panic!("ratelimit_low never resolved; deliveries: {:?}", deliveries(&hook)));
    assert_eq!(
        ratelimit_deliveries(&hook, "firing").iter().filter(|d| d["update"] != true && d["reminder"] != true).count(),
        1
    );
    let text = daemon.scrape().await;
    assert_eq!(series(&text, &format!(r#"vigil_ratelimit_remaining{{kind="requests",{labels}}} "#)), Some(90.0));
    let targets: serde_json::Value =
        reqwest::get(daemon.url("/v1/targets")).await.expect("targets").json().await.expect("json");
    assert_eq!(targets["targets"][0]["ratelimit"]["low"], false, "{targets}");
    daemon.stop().await;
}

/// The export document is valid against `docs/schema/thresholds.json` (skipped, saying why,
/// without python3 and jsonschema).
fn validate_export(doc: &serde_json::Value, dir: &std::path::Path) {
    if !crate::support::tool_available("python3", &["-c", "import jsonschema, yaml"], "pip install jsonschema pyyaml") {
        return;
    }
    let repo = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let file = dir.join("export.json");
    std::fs::write(&file, doc.to_string()).expect("write export");
    let out = std::process::Command::new("python3")
        .arg(repo.join("tests/it/support/validate_schema.py"))
        .arg(repo.join("docs/schema"))
        .arg("thresholds.json")
        .arg(&file)
        .output()
        .expect("run validate_schema.py");
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
}
