//! Golden checks on real parts: the real daemon runs `[[provider.check]]` against an
//! OpenAI-compatible stand-in on loopback streaming real SSE, judges the answers, pages
//! `check_failed` to a webhook receiver on loopback with what was asked and what came back,
//! resolves it once the answer is right again, shows the verdicts on `/v1/targets`, the status
//! page and the metrics, and stores every run in its own table of a real SQLite file, never in
//! the samples.

use crate::support::daemon::{obeying, spawn_app, webhook_deliveries, DaemonConfig, Provider};
use crate::support::poll_until;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use toml::Value;
use vigil::run::demo::standin::{ChatIdentity, Script, StandIn};

const KEY: &str = "sk-test-golden";
const REFUND_PROMPT: &str = "Can a customer return an opened item within 30 days? Answer yes or no.";
const ORDER_PROMPT: &str = "Reply with only the JSON of order 42.";

/// The check's user turn in a request, if the request is a check's.
fn user_turn(r: &vigil::run::demo::standin::RequestRecord) -> Option<String> {
    let body = r.json()?;
    let messages = body["messages"].as_array()?;
    messages.iter().find(|m| m["role"] == "user").and_then(|m| m["content"].as_str()).map(String::from)
}

fn check(pairs: &[(&str, &str)]) -> Value {
    Value::Table(pairs.iter().map(|(k, v)| (k.to_string(), Value::String(v.to_string()))).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_answer_pages_check_failed_with_what_came_back_and_resolves_when_right_again() {
    let right = Arc::new(AtomicBool::new(false));
    let answers = right.clone();
    // Regular probes get answers that obey the probe's instruction: no other alert joins in.
    let ok = obeying("openai-chat-stream-usage.sse");
    let provider = StandIn::start(move |r| {
        let id = ChatIdentity { model: "m1".into(), ..ChatIdentity::default() };
        match user_turn(r).as_deref() {
            Some(REFUND_PROMPT) if answers.load(Ordering::SeqCst) => {
                Script::openai_chat("**Yes.**", &id, Duration::ZERO)
            }
            Some(REFUND_PROMPT) => Script::openai_chat("No, only unopened items.", &id, Duration::ZERO),
            Some(ORDER_PROMPT) => {
                Script::openai_chat("```json\n{\"order_id\": 42, \"status\": \"shipped\"}\n```", &id, Duration::ZERO)
            }
            _ => Script::sse(&ok, Duration::from_millis(1)),
        }
    })
    .await
    .expect("stand-in");
    let hook = StandIn::start(|_| Script::json(200, b"{}")).await.expect("webhook receiver");
    let data = tempfile::tempdir().expect("tempdir");
    let schema = r#"{"type":"object","required":["order_id","status"],"properties":{"order_id":{"type":"integer"}}}"#;
    let checks = Value::Array(vec![
        check(&[("name", "refund-policy"), ("prompt", REFUND_PROMPT), ("exact", "yes"), ("every", "10s")]),
        check(&[("name", "order-json"), ("prompt", ORDER_PROMPT), ("json_schema", schema), ("every", "10s")]),
    ]);
    let config = DaemonConfig::sqlite(data.path())
        .region("test-1")
        .webhook(&format!("{}/hook", hook.base_url()))
        .provider(
            Provider::openai("standin", &format!("{}/v1", provider.base_url())).models(&["m1"]).set("check", checks),
        )
        .key(KEY);
    let daemon = spawn_app(config.build()).await;
    let (metrics, addr) = (daemon.metrics.clone(), daemon.addr);

    let fired = |d: &[(String, Vec<String>, Vec<String>)]| -> Vec<String> {
        d.iter()
            .filter(|(s, k, _)| s == "firing" && k.contains(&"check_failed".to_string()))
            .flat_map(|(_, _, sums)| sums.clone())
            .collect()
    };
    let paged = poll_until(Duration::from_secs(20), || {
        let got = fired(&webhook_deliveries(&hook));
        async move { (!got.is_empty()).then_some(got) }
    })
    .await;
    let summaries = paged.unwrap_or_else(|| panic!("no check_failed page: {:?}", webhook_deliveries(&hook)));
    let summary = summaries.iter().find(|s| s.contains("golden check")).cloned().unwrap_or_default();
    assert!(
        summary.contains("\"refund-policy\": asked for \"yes\", got \"no, only unopened items\""),
        "the page says what was asked and what came back: {summaries:?}"
    );
    assert!(!summary.contains("order-json"), "a passing check is not named: {summary}");

    let http = reqwest::Client::new();
    let targets: serde_json::Value =
        http.get(format!("http://{addr}/v1/targets")).send().await.expect("targets").json().await.expect("JSON");
    let shown = targets["targets"][0]["checks"].as_array().cloned().unwrap_or_default();
    let verdict = |name: &str| shown.iter().find(|c| c["name"] == name).map(|c| c["verdict"].clone());
    assert_eq!(verdict("refund-policy"), Some("failed".into()), "{targets}");
    assert_eq!(verdict("order-json"), Some("passed".into()), "{targets}");
    assert!(!targets.to_string().contains(REFUND_PROMPT), "the prompt is never shown");
    let page = http.get(format!("http://{addr}/")).send().await.expect("page").text().await.expect("html");
    assert!(page.contains("Golden checks") && page.contains("refund-policy"), "the status page shows the checks");
    let text = metrics.render();
    let passing = |check: &str| {
        text.lines()
            .find(|l| l.starts_with("vigil_check_passing{") && l.contains(&format!("check=\"{check}\"")))
            .and_then(|l| l.rsplit(' ').next())
            .map(String::from)
    };
    assert_eq!(passing("refund-policy").as_deref(), Some("0"), "{text}");
    assert_eq!(passing("order-json").as_deref(), Some("1"), "{text}");
    assert!(!text.contains("unopened") && !text.contains("return an opened"), "no prompt or answer in metrics");

    right.store(true, Ordering::SeqCst);
    let resolved = poll_until(Duration::from_secs(30), || {
        let done = webhook_deliveries(&hook)
            .iter()
            .any(|(s, k, _)| s == "resolved" && k.contains(&"check_failed".to_string()));
        async move { done.then_some(()) }
    })
    .await;
    assert!(resolved.is_some(), "check_failed resolves once the answer is right: {:?}", webhook_deliveries(&hook));
    assert_eq!(fired(&webhook_deliveries(&hook)).len(), 1, "one page: {:?}", webhook_deliveries(&hook));
    let probes: f64 = metrics
        .render()
        .lines()
        .filter(|l| l.starts_with("vigil_probes_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    daemon.stop_within(Duration::from_secs(12)).await;

    let store = vigil::io::store::open(&format!("sqlite://{}/vigil.db", data.path().display())).await.expect("store");
    let since = chrono::Utc::now() - chrono::Duration::days(1);
    let runs = store.check_runs(None, since, 100).await.expect("check runs");
    let of = |name: &str| runs.iter().filter(|r| r.check == name).count();
    assert!(of("refund-policy") >= 2 && of("order-json") >= 2, "every run is stored: {runs:?}");
    assert!(runs.iter().any(|r| r.why.contains("unopened") && r.answer.contains("unopened")), "{runs:?}");
    let ids: Vec<uuid::Uuid> = runs.iter().map(|r| r.sample.id).collect();
    let samples = store.samples(&vigil::io::store::SampleQuery::default()).await.expect("samples");
    assert!(samples.iter().all(|s| !ids.contains(&s.id)), "no check run in samples");
    assert!(samples.len() as f64 >= probes, "samples are the regular probes: {} of {probes}", samples.len());
    let requests = provider.requests();
    let asked = requests.iter().filter(|r| user_turn(r).as_deref() == Some(REFUND_PROMPT)).count();
    assert_eq!(asked, of("refund-policy"), "one request per stored run");
    let no_system = requests
        .iter()
        .filter(|r| user_turn(r).as_deref() == Some(REFUND_PROMPT))
        .all(|r| r.json().is_some_and(|b| b["messages"].as_array().is_some_and(|m| m.len() == 1)));
    assert!(no_system, "a check without `system` sends no system turn");
}

#[test]
fn checks_are_refused_on_a_plain_http_target_and_errors_name_the_key() {
    let refused = |provider: Provider| {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = DaemonConfig::sqlite(dir.path()).provider(provider).key(KEY);
        vigil::config::Config::from_toml(&config.toml(), config.vars()).map(|_| ()).map_err(|e| e.to_string())
    };
    let http = Provider::http("site", "http://127.0.0.1:9/health")
        .set("check", Value::Array(vec![check(&[("name", "c"), ("prompt", "p"), ("exact", "x")])]));
    let e = refused(http).expect_err("refused");
    assert!(e.contains("provider[0].check"), "{e}");
    let bad = Provider::openai("p", "http://127.0.0.1:9/v1")
        .set("check", Value::Array(vec![check(&[("name", "c"), ("prompt", "p"), ("regex", "(")])]));
    let e = refused(bad).expect_err("refused");
    assert!(e.contains("provider[0].check[0].regex") && e.contains("not a regular expression"), "{e}");
    let typo = Provider::openai("p", "http://127.0.0.1:9/v1")
        .set("check", Value::Array(vec![check(&[("name", "c"), ("prompt", "p"), ("regexp", "ok")])]));
    assert!(refused(typo).expect_err("refused").contains("regexp"), "an unknown key is named");
    let fine = Provider::openai("p", "http://127.0.0.1:9/v1")
        .set("check", Value::Array(vec![check(&[("name", "c"), ("prompt", "p"), ("regex", "ok")])]));
    assert_eq!(refused(fine), Ok(()));
}
