//! Providers' status pages end to end: recorded Statuspage JSON served on loopback by the
//! stand-in (good, malformed, erroring and hanging pages), read by the real poller into real
//! SQLite storage, and a real daemon whose probes keep their schedule while a page hangs.

use crate::support::fixture;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use url::Url;
use vigil::config::{Config, StatusPageSource, StatusPagesConfig};
use vigil::io::feeds::provider_status::poller::StatusPagePoller;
use vigil::io::probe::scrub::Secrets;
use vigil::run::demo::standin::{Script, StandIn};
use vigil::vocab::provider_status::{annotation_for, SharedProviderStatus};

fn source(provider: &str, base: &str, path: &str) -> StatusPageSource {
    StatusPageSource {
        provider: provider.into(),
        url: Url::parse(&format!("{base}/{path}")).expect("url"),
        components: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poller_reads_good_malformed_failing_and_hanging_pages_and_stores_incidents() {
    let incident = fixture("statuspage/summary_incident.json");
    let green = fixture("statuspage/summary_operational.json");
    let malformed = fixture("statuspage/summary_malformed.json");
    let resolved = Arc::new(AtomicBool::new(false));
    let flag = resolved.clone();
    let pages = StandIn::start(move |req| match req.path_only() {
        "/openai/api/v2/summary.json" if flag.load(Ordering::SeqCst) => Script::json(200, &green),
        "/openai/api/v2/summary.json" => Script::json(200, &incident),
        "/broken/api/v2/summary.json" => Script::json(200, &malformed),
        "/down/api/v2/summary.json" => Script::json(503, b"{}"),
        "/slow/api/v2/summary.json" => {
            Script::json(200, &fixture("statuspage/summary_operational.json")).with_head_delay(Duration::from_secs(30))
        }
        _ => Script::status(404),
    })
    .await
    .expect("stand-in");
    let base = pages.base_url();
    let config = StatusPagesConfig {
        every: Duration::from_secs(60),
        pages: vec![
            source("openai", &base, "openai"),
            source("broken", &base, "broken"),
            source("down", &base, "down"),
            source("slow", &base, "slow"),
        ],
        alert: false,
        alert_components: vec![],
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let store = vigil::io::store::open(&format!("sqlite://{}/vigil.db", dir.path().display())).await.expect("store");
    store.migrate().await.expect("migrate");
    let shared = SharedProviderStatus::default();
    let poller = StatusPagePoller::with_timeout(
        &config,
        Secrets::default(),
        shared.clone(),
        store.clone(),
        Duration::from_millis(500),
    );

    // Storage keeps microseconds.
    let now = chrono::SubsecRound::trunc_subsecs(chrono::Utc::now(), 6);
    tokio::time::timeout(Duration::from_secs(20), poller.poll_once(now))
        .await
        .expect("one round is bounded by the read timeout");
    let snap = shared.read().expect("snapshot").clone();
    let openai = &snap.providers["openai"];
    assert_eq!(openai.page_name, "OpenAI");
    assert_eq!(openai.indicator, "major");
    assert_eq!(openai.incidents.len(), 1);
    assert_eq!(openai.last_error, None);
    let broken = snap.providers["broken"].last_error.clone().expect("malformed page is an error");
    assert!(broken.contains("not a Statuspage summary"), "{broken}");
    assert_eq!(snap.providers["down"].last_error.as_deref(), Some("HTTP 503"));
    assert!(snap.providers["slow"].last_error.is_some(), "a hanging page times out");
    assert!(snap.providers["slow"].fetched_at.is_none());
    // A day later the reading has gone stale (relative to `now`: the test must not depend on the date it runs).
    let line = annotation_for("openai", &snap, now + chrono::Duration::days(1));
    assert_eq!(line, None, "the reading is fresh only around `now`");
    let line = annotation_for("openai", &snap, now).expect("an annotation");
    assert!(
        line.starts_with("OpenAI reports: Elevated error rates on Chat Completions, investigating since"),
        "{line}"
    );

    let since = chrono::DateTime::parse_from_rfc3339("2026-12-01T00:00:00Z").expect("t").to_utc();
    let until = since + chrono::Duration::days(1);
    let stored = store.provider_incidents_between(Some("openai"), since, until).await.expect("incidents");
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].resolved_at, None);
    let components = store.provider_components("openai").await.expect("components");
    assert!(components.iter().any(|c| c.name == "Chat Completions" && c.status == "partial_outage"), "{components:?}");

    // The provider closes the incident: it leaves the unresolved list and is stored as resolved.
    resolved.store(true, Ordering::SeqCst);
    let later = now + chrono::Duration::minutes(3);
    tokio::time::timeout(Duration::from_secs(20), poller.poll_once(later)).await.expect("bounded");
    let snap = shared.read().expect("snapshot").clone();
    assert!(snap.providers["openai"].incidents.is_empty());
    assert_eq!(annotation_for("openai", &snap, later), None, "a green page adds nothing to alerts");
    let stored = store.provider_incidents_between(Some("openai"), since, until).await.expect("incidents");
    assert_eq!(stored[0].resolved_at, Some(later));
    assert_eq!(stored[0].status, "resolved");
    let components = store.provider_components("openai").await.expect("components");
    assert!(components.iter().all(|c| c.status == "operational"), "{components:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_keep_their_schedule_while_the_status_page_hangs() {
    let body = crate::support::fixture("openai-chat-stream-usage.sse");
    let provider = StandIn::start(move |_| Script::sse(&body, Duration::from_millis(1))).await.expect("stand-in");
    let page = fixture("statuspage/summary_incident.json");
    let hanging = StandIn::start(move |_| Script::json(200, &page).with_head_delay(Duration::from_secs(120)))
        .await
        .expect("stand-in");
    let data = tempfile::tempdir().expect("tempdir");
    let text = format!(
        r#"
region = "test-1"
[storage]
url = "sqlite://{data}/vigil.db"
data_dir = "{data}"
batch_age = "100ms"
[http]
listen = "127.0.0.1:0"
[probe]
interval = "1s"
timeout = "900ms"
status_page_every = "1s"
[[provider]]
name = "fast"
kind = "openai"
base_url = "{}/v1"
api_key_env = "VIGIL_TEST_KEY"
models = ["m1"]
status_page_url = "{}/hang"
"#,
        provider.base_url(),
        hanging.base_url(),
        data = data.path().display(),
    );
    let env: BTreeMap<String, String> = [("VIGIL_TEST_KEY".to_string(), "sk-test-status".to_string())].into();
    let config = Config::from_toml(&text, &env).expect("valid config");
    assert_eq!(config.status_pages.pages.len(), 1);
    let daemon = crate::support::daemon::spawn_app(config).await;
    let addr = daemon.addr;
    let http = reqwest::Client::new();
    let base = format!("http://{addr}");
    let probes = || async {
        let text = http.get(format!("{base}/metrics")).send().await.expect("metrics").text().await.expect("body");
        text.lines()
            .filter(|l| l.starts_with("vigil_probes_total{") && l.contains("provider=\"fast\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };

    // Wait (bounded) for the poller to be stuck on the page.
    crate::support::settle(Duration::from_secs(10), || async { hanging.requests().len() }, |n| *n > 0).await;
    assert!(!hanging.requests().is_empty(), "the poller asked the status page");
    let at_first_read = probes().await;
    // While that read is outstanding (it ends only at the poller's read timeout) probes go on.
    let mut during = at_first_read;
    for _ in 0..300 {
        let targets: serde_json::Value =
            http.get(format!("{base}/v1/targets")).send().await.expect("targets").json().await.expect("json");
        let status = &targets["provider_status"][0];
        assert_eq!(status["provider"], "fast");
        if !status["last_error"].is_null() {
            break;
        }
        during = probes().await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        during - at_first_read >= 3.0,
        "probes kept their 1 s schedule while the status page hung: {at_first_read} then {during}"
    );
    let page = http.get(format!("{base}/")).send().await.expect("page").text().await.expect("html");
    assert!(page.contains("Providers' status pages"), "the status page has the section");
    assert!(page.contains("unreadable"), "and says the page could not be read");

    // It stops cleanly while a status page read hangs.
    daemon.stop_within(Duration::from_secs(15)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_weekly_summary_counts_incidents_vigil_saw_before_the_provider() {
    use vigil::vocab::provider_status::ProviderIncident;
    use vigil::vocab::records::BreakerTransition;
    use vigil::vocab::target::Target;
    let dir = tempfile::tempdir().expect("tempdir");
    let store = vigil::io::store::open(&format!("sqlite://{}/vigil.db", dir.path().display())).await.expect("store");
    store.migrate().await.expect("migrate");
    let now = chrono::DateTime::parse_from_rfc3339("2026-12-07T09:00:00Z").expect("t").to_utc();
    let at = |s: &str| chrono::DateTime::parse_from_rfc3339(s).expect("t").to_utc();
    let incident = |id: &str, created: &str| ProviderIncident {
        provider: "openai".into(),
        id: id.into(),
        name: format!("Incident {id}"),
        status: "resolved".into(),
        impact: "major".into(),
        created_at: at(created),
        updated_at: None,
        resolved_at: Some(at(created) + chrono::Duration::hours(1)),
        components: vec!["Chat Completions".into()],
        shortlink: None,
    };
    store
        .upsert_provider_incidents(&[
            incident("early", "2026-12-03T14:10:00Z"),
            incident("late", "2026-12-04T10:00:00Z"),
            incident("missed", "2026-12-05T10:00:00Z"),
        ])
        .await
        .expect("incidents");
    let target = |region: &str| Target::new("openai".into(), "gpt-4o-mini".into(), None, region.into());
    for (region, when) in
        [("eu", "2026-12-03T13:40:00Z"), ("us", "2026-12-03T13:55:00Z"), ("eu", "2026-12-04T10:20:00Z")]
    {
        store
            .append_transition(&BreakerTransition {
                target: target(region),
                from_state: vigil::vocab::breaker::State::Closed,
                to_state: vigil::vocab::breaker::State::Open,
                at: at(when),
                reason: "3 consecutive failures".into(),
            })
            .await
            .expect("transition");
    }
    let report = vigil::io::weekly::build(store.as_ref(), Some("us"), now).await.expect("report");
    assert_eq!(report.provider_incidents.len(), 1);
    let p = &report.provider_incidents[0];
    assert_eq!((p.provider.as_str(), p.incidents, p.seen_first, p.seen_after), ("openai", 3, 1, 1));
    assert_eq!(p.max_lead_s, Some(30 * 60), "the eu breaker opened 30 min before the announcement");
    let html = vigil::io::weekly::html::document(&report, &[], vigil::io::weekly::html::ImageSource::DataUri);
    assert!(html.contains("Providers' own incidents"), "the summary has the section");
    assert!(html.contains("30 min"), "the lead is shown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_shaped_text_on_a_providers_status_page_is_redacted_on_the_status_page_and_in_v1_targets() {
    const OWN_KEY: &str = "sk-test-vigils-own-key-5e1f";
    const FOREIGN: &str = "sk-live-abcdefghij0123456789";
    let body = crate::support::fixture("openai-chat-stream-usage.sse");
    let provider = StandIn::start(move |_| Script::sse(&body, Duration::from_millis(1))).await.expect("stand-in");
    // An open incident quoting vigil's own key and a bearer token in every text field, and a
    // page whose shape is wrong in a way the parse error quotes.
    let leaky = serde_json::json!({
        "page": {"name": format!("Status {OWN_KEY}")},
        "status": {"indicator": "major", "description": format!("Authorization: Bearer {FOREIGN}")},
        "components": [{"id": "c1", "name": format!("Chat {OWN_KEY}"), "status": "partial_outage"}],
        "incidents": [{
            "id": "inc1",
            "name": format!("Errors for key {OWN_KEY}, try Bearer {FOREIGN}"),
            "status": "investigating",
            "impact": "major",
            "created_at": chrono::Utc::now().to_rfc3339(),
            "shortlink": format!("https://stspg.example.invalid/x?key={OWN_KEY}"),
            "components": [{"name": format!("Chat {OWN_KEY}")}]
        }]
    })
    .to_string()
    .into_bytes();
    let quoted = format!(r#"{{"status": {{"indicator": "minor"}}, "components": [{{"id": "c", "name": "n", "status": "s", "group": "{FOREIGN}"}}]}}"#)
        .into_bytes();
    let pages = StandIn::start(move |req| match req.path_only() {
        "/leaky/api/v2/summary.json" => Script::json(200, &leaky),
        "/quoted/api/v2/summary.json" => Script::json(200, &quoted),
        _ => Script::status(404),
    })
    .await
    .expect("stand-in");
    let data = tempfile::tempdir().expect("tempdir");
    let text = format!(
        r#"
region = "test-1"
[storage]
url = "sqlite://{data}/vigil.db"
data_dir = "{data}"
batch_age = "100ms"
[http]
listen = "127.0.0.1:0"
[probe]
interval = "1s"
timeout = "900ms"
status_page_every = "1s"
[[provider]]
name = "leaky"
kind = "openai"
base_url = "{base}/v1"
api_key_env = "VIGIL_TEST_KEY"
models = ["m1"]
status_page_url = "{pages}/leaky"
[[provider]]
name = "quoted"
kind = "openai"
base_url = "{base}/v1"
api_key_env = "VIGIL_TEST_KEY"
models = ["m1"]
status_page_url = "{pages}/quoted"
"#,
        base = provider.base_url(),
        pages = pages.base_url(),
        data = data.path().display(),
    );
    let env: BTreeMap<String, String> = [("VIGIL_TEST_KEY".to_string(), OWN_KEY.to_string())].into();
    let config = Config::from_toml(&text, &env).expect("valid config");
    let daemon = crate::support::daemon::spawn_app(config).await;
    let http = reqwest::Client::new();
    let targets = daemon.url("/v1/targets");
    let read = || async {
        let t = http.get(&targets).send().await.expect("targets").text().await.expect("body");
        let v: serde_json::Value = serde_json::from_str(&t).expect("json");
        (t, v)
    };
    let (api, v) = crate::support::settle(Duration::from_secs(20), read, |(_, v)| {
        let p = v["provider_status"].as_array().cloned().unwrap_or_default();
        let by = |n: &str| p.iter().find(|x| x["provider"] == n).cloned().unwrap_or_default();
        by("leaky")["incidents"].as_array().is_some_and(|i| !i.is_empty()) && !by("quoted")["last_error"].is_null()
    })
    .await;
    let page = http.get(daemon.url("/")).send().await.expect("page").text().await.expect("html");
    for (what, text) in [("/v1/targets", &api), ("the status page", &page)] {
        assert!(!text.contains(OWN_KEY) && !text.contains(FOREIGN), "{what} shows a key:\n{text}");
    }
    let leaky = v["provider_status"].as_array().expect("list").iter().find(|x| x["provider"] == "leaky").cloned();
    let incident = leaky.as_ref().map(|l| l["incidents"][0]["name"].clone()).unwrap_or_default();
    assert_eq!(incident, "Errors for key [redacted], try Bearer [redacted]", "{api}");
    assert!(page.contains("Errors for key [redacted]"), "the incident is still quoted, scrubbed:\n{page}");
    daemon.stop_within(Duration::from_secs(15)).await;
}
