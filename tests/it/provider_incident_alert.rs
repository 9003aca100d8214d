//! The `provider_incident` alert end to end: recorded Statuspage JSON served on loopback (an
//! open incident on "Chat Completions", then all operational), read by real daemons' pollers,
//! judged by the alert engine as incidents, written to the outbox and delivered to a real
//! webhook receiver. On with a matching component filter: one page, then one resolve. Off (the
//! default), or with a filter naming another component: nothing paged.

use crate::support::alert_receiver as receiver;
use crate::support::daemon::{spawn_app, stop_all, strings, DaemonConfig, Provider};

use receiver::{Receiver, Reply};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use vigil::config::Config;
use vigil::run::demo::standin::{Script, StandIn};

fn statuspage(name: &str) -> Vec<u8> {
    crate::support::fixture(&format!("statuspage/{name}"))
}

/// An OpenAI chat stream answering `{"ok":true}`, so no other alert has a reason to fire.
fn stream() -> Script {
    let chunk = |delta: serde_json::Value, finish: serde_json::Value| {
        let v = serde_json::json!({"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 1,
            "model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        format!("data: {v}\n\n")
    };
    let mut body = chunk(serde_json::json!({"role": "assistant", "content": ""}), serde_json::Value::Null);
    body.push_str(&chunk(serde_json::json!({"content": "{\"ok\":true}"}), serde_json::Value::Null));
    body.push_str(&chunk(serde_json::json!({}), serde_json::json!("stop")));
    body.push_str("data: [DONE]\n\n");
    Script::sse(body.as_bytes(), Duration::from_millis(5))
}

/// (path, status, incident key, alert kinds) of one webhook delivery.
type Delivery = (String, String, String, Vec<String>);

fn deliveries(r: &Receiver) -> Vec<Delivery> {
    r.requests()
        .iter()
        .map(|req| {
            let v = req.json();
            let kinds = v["alerts"]
                .as_array()
                .map(|a| a.iter().filter_map(|x| x["kind"].as_str().map(String::from)).collect())
                .unwrap_or_default();
            (
                req.path.clone(),
                v["status"].as_str().unwrap_or_default().to_string(),
                v["incident"].as_str().unwrap_or_default().to_string(),
                kinds,
            )
        })
        .collect()
}

async fn wait_for(hook: &Receiver, what: &str, pred: impl Fn(&[Delivery]) -> bool) {
    let delivered = crate::support::poll_until(Duration::from_secs(20), || {
        let delivered = pred(&deliveries(hook));
        async move { delivered.then_some(()) }
    });
    if delivered.await.is_none() {
        panic!("{what}: not delivered in 20 s: {:?}", deliveries(hook));
    }
}

/// Daemon `name` (region `test-name`, its own store) probing `fast` whose status page is at
/// `pages`, paging `hook` at `/name`; `components` set `provider_incident = true` with that filter.
fn config(name: &str, components: Option<&[&str]>, provider: &str, pages: &str, hook: &Receiver, dir: &Path) -> Config {
    let mut fast =
        Provider::openai("fast", &format!("{provider}/v1")).set("status_page_url", format!("{pages}/openai"));
    if let Some(components) = components {
        fast = fast.set("status_page_components", strings(components));
    }
    let mut config = DaemonConfig::new(&format!("sqlite://{}/{name}.db", dir.display()), &dir.join(name))
        .region(&format!("test-{name}"))
        .set("probe.status_page_every", "1s")
        .webhook(&hook.url(&format!("/{name}")))
        .provider(fast)
        .key("sk-test-provider-incident");
    if components.is_some() {
        config = config.set("alerts.provider_incident", true);
    }
    config.build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_incidents_page_once_and_resolve_when_on_and_page_nothing_when_off() {
    let provider = StandIn::start(|_| stream()).await.expect("stand-in provider");
    let resolved = Arc::new(AtomicBool::new(false));
    let flag = resolved.clone();
    let (incident, green) = (statuspage("summary_incident.json"), statuspage("summary_operational.json"));
    let pages = StandIn::start(move |req| match req.path_only() {
        "/openai/api/v2/summary.json" if flag.load(Ordering::SeqCst) => Script::json(200, &green),
        "/openai/api/v2/summary.json" => Script::json(200, &incident),
        _ => Script::status(404),
    })
    .await
    .expect("stand-in status page");
    let hook = Receiver::start(Reply::new(200, "{}")).await;
    let data = tempfile::tempdir().expect("tempdir");
    let (p, s) = (provider.base_url(), pages.base_url());
    let daemons = [
        // On, paging only "Chat Completions" incidents of this provider (the fixture's).
        ("on", config("on", Some(&["chat completions"]), &p, &s, &hook, data.path())),
        // The default: off.
        ("off", config("off", None, &p, &s, &hook, data.path())),
        // On, but this provider's filter names another component.
        ("other", config("other", Some(&["Embeddings"]), &p, &s, &hook, data.path())),
    ];
    let mut running = Vec::new();
    for (name, config) in daemons {
        assert_eq!(config.status_pages.alert, name != "off", "{name}: provider_incident is off by default");
        running.push(spawn_app(config).await);
    }
    let is = |d: &Delivery, path: &str, status: &str| {
        d.0 == path && d.1 == status && d.3.contains(&"provider_incident".to_string())
    };
    wait_for(&hook, "the page", |d| d.iter().any(|x| is(x, "/on", "firing"))).await;
    // Let the other daemons evaluate the same open incident for a while.
    tokio::time::sleep(Duration::from_secs(4)).await;
    resolved.store(true, Ordering::SeqCst);
    wait_for(&hook, "the resolve", |d| d.iter().any(|x| is(x, "/on", "resolved"))).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop_all(running, Duration::from_secs(15)).await;

    let all = deliveries(&hook);
    let on: Vec<_> = all.iter().filter(|d| d.0 == "/on").collect();
    assert_eq!(on.len(), 2, "one page and one resolve: {all:?}");
    assert_eq!((on[0].1.as_str(), on[1].1.as_str()), ("firing", "resolved"), "{all:?}");
    assert_eq!(on[0].2, "vigil:fast", "a provider-wide incident: {all:?}");
    let page = hook.requests().into_iter().find(|r| r.path == "/on").expect("the page").json();
    let summary = page["alerts"][0]["summary"].as_str().unwrap_or_default().to_string();
    assert_eq!(
        summary,
        "OpenAI reports: Elevated error rates on Chat Completions on Chat Completions (major impact, investigating)",
        "quotes the provider once (no second annotation): {page}"
    );
    assert!(all.iter().all(|d| d.0 == "/on"), "off by default, and another component's filter, page nothing: {all:?}");
}
