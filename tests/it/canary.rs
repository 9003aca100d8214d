//! The model-change canary on real parts: the prober's canary run against an OpenAI-compatible
//! stand-in on loopback streaming real SSE, scored, stored in a real SQLite file and judged by
//! the alert engine with injected time (one canary run every 15 simulated minutes).

use crate::support::daemon::{spawn_app, table, DaemonConfig, Provider};
use crate::support::{poll_until, settle};

use chrono::{DateTime, TimeZone, Utc};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use vigil::config::Config;
use vigil::decide::alert::rules::{AlertEngine, Round};
use vigil::decide::alert::settings::RuleConfig;
use vigil::decide::alert::{AlertKind, AlertStatus, Notification};
use vigil::decide::canary::prompt;
use vigil::io::probe::{Planned, Prober};
use vigil::run::canary_runner;
use vigil::run::demo::standin::{ChatIdentity, Script, StandIn};
use vigil::vocab::canary::CanaryRun;

const KEY: &str = "sk-test-canary";

fn config(base: &str, canary: &str) -> Result<Config, String> {
    let text = format!(
        "region = \"test-1\"\n\n[probe.canary]\nenabled = true\n{canary}\n\n[[provider]]\nname = \"standin\"\n\
         kind = \"openai\"\nbase_url = \"{base}/v1\"\napi_key_env = \"CANARY_TEST_KEY\"\nmodels = [\"test-model\"]\n"
    );
    let env: BTreeMap<String, String> = [("CANARY_TEST_KEY".to_string(), KEY.to_string())].into();
    Config::from_toml(&text, &env).map_err(|e| e.to_string())
}

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).single().expect("valid time")
}

/// A reply with the questions at `wrong` answered wrongly.
fn reply(wrong: &[usize]) -> String {
    prompt::QUESTIONS
        .iter()
        .enumerate()
        .map(
            |(i, q)| {
                if wrong.contains(&i) {
                    format!("{}. {}0", i + 1, q.answer)
                } else {
                    format!("{}. {}", i + 1, q.answer)
                }
            },
        )
        .collect::<Vec<_>>()
        .join("\n")
}

/// SplitMix64: a fixed pseudo-random stream, so each test's "noise" is the same on every run.
fn mix(n: u64) -> u64 {
    let mut z = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A sampling model's usual noise: all right half the time, one wrong answer 35 %, two 15 %.
fn noisy(n: u64) -> Vec<usize> {
    let r = mix(n);
    let count = match r % 100 {
        0..=49 => 0,
        50..=84 => 1,
        _ => 2,
    };
    (0..count).map(|k| ((r >> (8 + 8 * k)) % 6) as usize).collect()
}

/// The quietly swapped model: two to four wrong picks every run.
fn swapped(n: u64) -> Vec<usize> {
    let r = mix(n ^ 0x5eed);
    (0..2 + r % 3).map(|k| ((r >> (8 + 8 * k)) % 6) as usize).collect()
}

/// A stand-in whose `n`-th answer comes from `answer(n)`, reporting `identity(n)`.
async fn standin(
    answer: impl Fn(u64) -> String + Send + Sync + 'static,
    identity: impl Fn(u64) -> ChatIdentity + Send + Sync + 'static,
) -> StandIn {
    let n = Arc::new(AtomicU64::new(0));
    StandIn::start(move |_| {
        let i = n.fetch_add(1, Ordering::SeqCst);
        Script::openai_chat(&answer(i), &identity(i), Duration::ZERO)
    })
    .await
    .expect("stand-in starts")
}

/// `runs` canary runs against `base`, one every 15 simulated minutes, each stored in SQLite and
/// judged by the alert engine; returns the runs and every notification.
async fn simulate(config: &Config, runs: u64) -> (Vec<CanaryRun>, Vec<Notification>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store =
        vigil::io::store::open(&format!("sqlite://{}", dir.path().join("vigil.db").display())).await.expect("store");
    store.migrate().await.expect("migrate");
    let prober = Prober::new(config.probe.clone(), &[]);
    let plans = Planned::all(&config.providers, &config.region);
    let plan = plans.first().expect("one target");
    let request = canary_runner::request(&config.canary);
    let mut engine = AlertEngine::new(RuleConfig::from_config(config));
    let (mut all, mut notes) = (Vec::new(), Vec::new());
    for i in 0..runs {
        let at = t0() + chrono::Duration::minutes(15 * i as i64);
        let mut run = canary_runner::run_once(&prober, plan, &request, at).await;
        // Injected time: the run is dated on the simulated clock the statistic reads.
        run.sample.started_at = at;
        run.sample.scheduled_at = at;
        assert_eq!(store.insert_canary_runs(std::slice::from_ref(&run)).await.expect("stored"), 1);
        notes.extend(engine.evaluate(&Round { canaries: vec![&run], ..Round::default() }, at));
        all.push(run);
    }
    let stored = store.canary_runs(Some("test-1"), t0(), 10_000).await.expect("read back");
    assert_eq!(stored.len(), all.len(), "every run is stored");
    for (s, r) in stored.iter().zip(&all) {
        assert_eq!(
            (s.sample.id, s.correct, &s.answers_fingerprint, &s.identity),
            (r.sample.id, r.correct, &r.answers_fingerprint, &r.identity)
        );
    }
    (all, notes)
}

fn model_changed(notes: &[Notification], status: AlertStatus) -> Vec<&Notification> {
    notes
        .iter()
        .filter(|n| n.status == status && !n.reminder && n.alerts.iter().any(|a| a.kind == AlertKind::ModelChanged))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quietly_swapped_model_fires_model_changed_exactly_once_with_what_and_since_when() {
    const SWITCH: u64 = 20;
    let id = |_: u64| ChatIdentity {
        model: "test-model-2025-06-01".into(),
        system_fingerprint: Some("fp_a1".into()),
        provider: None,
        logprob: Some(-0.25),
    };
    // Same name, same fingerprint: only the answers change at the switch.
    let s = standin(|n| if n < SWITCH { reply(&[]) } else { reply(&swapped(n)) }, id).await;
    let config = config(&s.base_url(), "").expect("valid");
    let (runs, notes) = simulate(&config, 80).await;

    assert!(runs.iter().all(|r| r.sample.outcome == vigil::vocab::sample::Outcome::Ok), "every run answered");
    assert_eq!(runs[0].correct, 6);
    assert_eq!(runs[0].identity.model.as_deref(), Some("test-model-2025-06-01"));
    assert_eq!(runs[0].identity.system_fingerprint.as_deref(), Some("fp_a1"));
    let lp = runs[0].logprobs.expect("logprobs read");
    assert!((lp.mean().unwrap_or(0.0) + 0.25).abs() < 1e-9, "{lp:?}");
    assert!(runs[0].sample.output_tokens.is_some_and(|n| n > 0));
    assert!(runs[SWITCH as usize..].iter().all(|r| r.correct < 6), "the swapped model gets something wrong");

    let fired = model_changed(&notes, AlertStatus::Firing);
    assert_eq!(fired.len(), 1, "one change, one page: {:#?}", notes.iter().map(|n| n.title()).collect::<Vec<_>>());
    let alert = fired[0].alerts.iter().find(|a| a.kind == AlertKind::ModelChanged).expect("the facet");
    assert_eq!(alert.severity, vigil::decide::alert::Severity::Warning);
    assert!(alert.summary.contains("exact-match score 100% →"), "{}", alert.summary);
    assert!(alert.summary.contains("since 2026-12-01 05:00 UTC"), "since the first swapped answer: {}", alert.summary);
    let opened = fired[0].created_at;
    assert!(opened >= t0() + chrono::Duration::minutes(15 * SWITCH as i64), "never before the switch");
    assert!(opened <= t0() + chrono::Duration::minutes(15 * (SWITCH as i64 + 4)), "within the recent window");
    assert_eq!(
        model_changed(&notes, AlertStatus::Resolved).len(),
        1,
        "the incident closes once the new behaviour is the reference"
    );

    let requests = s.requests();
    let body = requests[0].json().expect("JSON request");
    assert_eq!(body["messages"][0]["content"], prompt::SYSTEM);
    assert_eq!(body["messages"][1]["content"], prompt::user_prompt());
    assert_eq!(
        (body["temperature"].as_i64(), body["seed"].as_u64(), body["max_tokens"].as_u64()),
        (Some(0), Some(7), Some(64))
    );
    assert_eq!(requests[0].body, requests[1].body, "canary prompts carry no nonce: every run asks the same");
    assert_eq!(requests[0].header("authorization"), Some(format!("Bearer {KEY}").as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_varying_only_within_its_usual_noise_never_fires() {
    // Sampling noise in the answers and a system fingerprint rotating across the provider's fleet.
    let id = |n: u64| ChatIdentity {
        model: "test-model-2025-06-01".into(),
        system_fingerprint: Some(format!("fp_{}", n % 3)),
        provider: Some("Upstream".into()),
        logprob: None,
    };
    let s = standin(|n| reply(&noisy(n)), id).await;
    let config = config(&s.base_url(), "").expect("valid");
    let (runs, notes) = simulate(&config, 300).await;

    let scores: std::collections::BTreeSet<u32> = runs.iter().map(|r| r.correct).collect();
    assert!(scores.len() >= 3, "the noise is real: scores {scores:?}");
    let fingerprints: std::collections::BTreeSet<&str> = runs.iter().map(|r| r.answers_fingerprint.as_str()).collect();
    assert!(fingerprints.len() >= 5, "answers vary run to run");
    assert_eq!(runs[0].identity.upstream.as_deref(), Some("Upstream"));
    assert!(runs[0].logprobs.is_none(), "no logprobs returned, none recorded");
    assert!(
        model_changed(&notes, AlertStatus::Firing).is_empty(),
        "{:#?}",
        notes.iter().map(|n| n.title()).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_canary_is_stored_but_never_judged() {
    let s = StandIn::start(|_| Script::json(503, br#"{"error":{"message":"overloaded"}}"#)).await.expect("stand-in");
    let config = config(&s.base_url(), "").expect("valid");
    let (runs, notes) = simulate(&config, 30).await;
    assert!(runs.iter().all(|r| r.sample.outcome.is_failure() && r.total == 0 && r.answers.is_empty()));
    assert!(model_changed(&notes, AlertStatus::Firing).is_empty());
}

#[test]
fn canary_config_defaults_and_errors_name_the_key() {
    let c = config("http://127.0.0.1:9", "").expect("valid");
    assert!(c.canary.enabled);
    assert_eq!(c.canary.interval, Duration::from_secs(900));
    assert_eq!((c.canary.max_tokens, c.canary.seed, c.canary.concurrency), (64, 7, 2));
    let off = Config::from_toml("", &BTreeMap::<String, String>::new()).expect("valid");
    assert!(!off.canary.enabled, "off by default");
    for (text, key) in [
        ("interval = \"10s\"", "probe.canary.interval"),
        ("max_tokens = 4", "probe.canary.max_tokens"),
        ("concurrency = 0", "probe.canary.concurrency"),
        ("reference_runs = 2", "probe.canary.reference_runs"),
        ("recent_runs = 1", "probe.canary.recent_runs"),
        ("alpha = 0.5", "probe.canary.alpha"),
        ("min_delta = 0", "probe.canary.min_delta"),
        ("colour = \"red\"", "colour"),
    ] {
        let e = config("http://127.0.0.1:9", text).expect_err(text);
        assert!(e.contains(key), "{text}: {e}");
    }
}

/// The daemon with the canary on: canary runs reach `/v1/canary`, the status page and the
/// `canary_runs` table on their own clock, and never the samples, the probe metrics or the
/// baselines of the regular probes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_runs_the_canary_apart_from_the_regular_probes() {
    let ok = crate::support::fixture("openai-chat-stream-usage.sse");
    let s = StandIn::start(move |r| {
        let canary = r.json().is_some_and(|b| b["messages"][0]["content"] == prompt::SYSTEM);
        if canary {
            let id = ChatIdentity { model: "test-model-2025-06-01".into(), ..ChatIdentity::default() };
            Script::openai_chat(&reply(&[]), &id, Duration::ZERO)
        } else {
            Script::sse(&ok, Duration::from_millis(1))
        }
    })
    .await
    .expect("stand-in");
    let data = tempfile::tempdir().expect("tempdir");
    let config = DaemonConfig::sqlite(data.path())
        .region("test-1")
        .set("probe.canary", table([("enabled", true.into()), ("interval", "1m".into())]))
        .provider(Provider::openai("standin", &format!("{}/v1", s.base_url())).models(&["m1", "m2"]))
        .key(KEY);
    let daemon = spawn_app(config.build()).await;
    let (metrics, addr) = (daemon.metrics.clone(), daemon.addr);

    let http = reqwest::Client::new();
    let seen = poll_until(Duration::from_secs(10), || async {
        let v: serde_json::Value =
            http.get(format!("http://{addr}/v1/canary")).send().await.expect("canary").json().await.expect("JSON");
        v["runs"].as_array().is_some_and(|r| r.len() == 2).then_some(v)
    });
    let runs: serde_json::Value = seen.await.unwrap_or_default();
    let first = &runs["runs"][0];
    assert_eq!(first["target"], "standin/m1", "both targets canaried within the first probe interval: {runs}");
    assert_eq!((first["correct"].as_u64(), first["total"].as_u64()), (Some(6), Some(6)), "{runs}");
    assert_eq!(first["reported_model"], "test-model-2025-06-01");
    assert_eq!(first["answers"][4], "YRANAC");
    let page = http.get(format!("http://{addr}/")).send().await.expect("page").text().await.expect("html");
    assert!(page.contains("Model canary") && page.contains("6/6"), "the status page shows the canary");
    let text = metrics.render();
    let series = |name: &str| text.lines().filter(|l| l.starts_with(name)).count();
    assert_eq!(series("vigil_canary_score{"), 2, "one score per canaried target:\n{text}");
    assert!(text.lines().any(|l| l.starts_with("vigil_canary_score{") && l.ends_with(" 1")), "{text}");
    assert_eq!(series("vigil_canary_runs_total{"), 2, "{text}");
    assert_eq!(series("vigil_canary_last_run_timestamp_seconds{"), 2, "{text}");
    let counted = |m: &vigil::io::metrics::Metrics| -> f64 {
        m.render()
            .lines()
            .filter(|l| l.starts_with("vigil_probes_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    settle(Duration::from_secs(10), || async { counted(&metrics) }, |n| *n >= 4.0).await;

    daemon.stop_within(Duration::from_secs(12)).await;

    let store = vigil::io::store::open(&format!("sqlite://{}/vigil.db", data.path().display())).await.expect("store");
    let canary = store.canary_runs(None, t0() - chrono::Duration::days(1), 100).await.expect("canary runs");
    assert_eq!(canary.len(), 2, "one run per target in the first minute, stored");
    let probes = counted(&metrics);
    let stored = store.count_samples(&vigil::io::store::SampleQuery::default()).await.expect("count");
    assert!(probes >= 4.0, "two rounds of regular probes ran: {probes}");
    assert_eq!(stored as f64, probes, "samples are the regular probes only; canary runs are not counted as probes");
    let ids: Vec<uuid::Uuid> = canary.iter().map(|r| r.sample.id).collect();
    let samples = store.samples(&vigil::io::store::SampleQuery::default()).await.expect("samples");
    assert!(samples.iter().all(|s| !ids.contains(&s.id)), "no canary run in samples");
    let canary_requests =
        s.requests().iter().filter(|r| r.json().is_some_and(|b| b["messages"][0]["content"] == prompt::SYSTEM)).count();
    assert_eq!(canary_requests, 2, "one canary request per target per canary interval");
}
