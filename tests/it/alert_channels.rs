//! Each channel against a real HTTP receiver on loopback: payload shapes match the wire
//! fixtures, signatures verify, and receiver answers map to retryable or permanent failures.

use crate::support::alert_receiver as receiver;

use crate::support::fixture_text;
use chrono::{DateTime, Utc};
use receiver::{assert_same_shape, Receiver, Reply};
use secrecy::SecretString;
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;
use vigil::config::{PagerDutyConfig, SlackConfig, WebhookConfig};
use vigil::decide::alert::{Alert, AlertKind, AlertStatus, Notification, Scope};
use vigil::io::notify::channels::alert_test;
use vigil::io::notify::notifier::{DeliveryError, Notifier};
use vigil::io::notify::pagerduty::PagerDutyNotifier;
use vigil::io::notify::slack::SlackNotifier;
use vigil::io::notify::webhook::{verify_signature, WebhookNotifier};
use vigil::vocab::target::Target;

const TIMEOUT: Duration = Duration::from_secs(5);

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-11-30T12:00:00Z").expect("time").with_timezone(&Utc)
}

fn notification(status: AlertStatus) -> Notification {
    let t = Target::new(
        "openrouter".into(),
        "meta-llama/llama-3-70b-instruct".into(),
        Some("DeepInfra".into()),
        "eu-west-1".into(),
    );
    let mut errors = Alert::new(
        AlertKind::Errors,
        "eu-west-1",
        "openrouter",
        Some(&t),
        "2 consecutive failed probes (server_error, timeout) <b>&".into(),
    );
    errors.since = now();
    errors.status = status;
    errors.scope = Scope::Global { affected: 3, regions: 4 };
    let mut latency = Alert::new(
        AlertKind::LatencyDegraded,
        "eu-west-1",
        "openrouter",
        Some(&t),
        "TTFT P95 1200 ms over the last 10 ok probes is above 2 × baseline P95 400 ms".into(),
    );
    latency.since = now();
    latency.status = status;
    latency.current = Some(1200.0);
    latency.baseline = Some(400.0);
    Notification {
        incident: "vigil:openrouter:meta-llama/llama-3-70b-instruct:DeepInfra".into(),
        subject: "openrouter/meta-llama/llama-3-70b-instruct@DeepInfra".into(),
        shared: true,
        opened_at: Some(now()),
        status,
        status_url: Some("https://vigil.example.com/".into()),
        ..Notification::firing("k1", "eu-west-1", "openrouter", vec![errors, latency], now())
    }
}

fn slack(r: &Receiver) -> SlackNotifier {
    let cfg = SlackConfig { name: "slack".into(), webhook_url: SecretString::from(r.url("/services/T000/B000/XXXX")) };
    SlackNotifier::new(&cfg, TIMEOUT).expect("slack channel")
}

fn pagerduty(r: &Receiver) -> PagerDutyNotifier {
    let cfg = PagerDutyConfig {
        name: "pagerduty".into(),
        routing_key: SecretString::from("pd-routing-key-REDACTED".to_string()),
        events_url: r.url("/v2/enqueue").parse().expect("url"),
    };
    PagerDutyNotifier::new(&cfg, TIMEOUT).expect("pagerduty channel")
}

fn webhook(r: &Receiver, secret: Option<&str>) -> WebhookNotifier {
    let cfg = WebhookConfig {
        name: "webhook".into(),
        url: SecretString::from(r.url("/hooks/vigil")),
        secret: secret.map(|s| SecretString::from(s.to_string())),
    };
    WebhookNotifier::new(&cfg, TIMEOUT).expect("webhook channel")
}

#[tokio::test]
async fn slack_gets_block_kit_with_a_text_fallback_shaped_like_the_fixture() {
    let r = Receiver::start(Reply::new(200, "ok")).await;
    slack(&r).send(&notification(AlertStatus::Firing), Uuid::new_v4()).await.expect("delivered");
    let reqs = r.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].path, "/services/T000/B000/XXXX");
    let body = reqs[0].json();
    let want: serde_json::Value =
        serde_json::from_str(&fixture_text("slack-webhook-payload-blocks.json")).expect("fixture");
    assert_same_shape(&want, &body, "$", &["$.blocks[0].accessory"]);
    let text = body["text"].as_str().expect("text fallback");
    assert!(
        text.starts_with(
            "[FIRING] openrouter/meta-llama/llama-3-70b-instruct@DeepInfra: errors, latency_degraded (eu-west-1)"
        ),
        "{text}"
    );
    let blocks = body["blocks"].as_array().expect("blocks");
    assert_eq!(blocks[1]["type"], "divider");
    let first_alert = blocks[2]["text"]["text"].as_str().expect("alert section");
    assert!(first_alert.contains("&lt;b&gt;&amp;"), "mrkdwn control characters escaped: {first_alert}");
    assert!(first_alert.contains("global (in 3 of 4 regions)"), "{first_alert}");
}

#[tokio::test]
async fn slack_answers_map_to_retryable_or_permanent() {
    let r = Receiver::start(Reply::new(200, "ok")).await;
    r.script([
        Reply::new(400, "invalid_payload"),
        Reply::new(404, "channel_not_found"),
        Reply::new(429, "").header("Retry-After", "30"),
        Reply::new(500, "rollup_error"),
    ]);
    let s = slack(&r);
    let n = notification(AlertStatus::Firing);
    let e = s.send(&n, Uuid::new_v4()).await.expect_err("400");
    assert!(matches!(&e, DeliveryError::Permanent { message } if message.contains("invalid_payload")), "{e:?}");
    let e = s.send(&n, Uuid::new_v4()).await.expect_err("404");
    assert!(matches!(e, DeliveryError::Permanent { .. }), "{e:?}");
    let e = s.send(&n, Uuid::new_v4()).await.expect_err("429");
    assert!(
        matches!(e, DeliveryError::Retryable { retry_after: Some(d), .. } if d == Duration::from_secs(30)),
        "{e:?}"
    );
    let e = s.send(&n, Uuid::new_v4()).await.expect_err("500");
    assert!(matches!(e, DeliveryError::Retryable { retry_after: None, .. }), "{e:?}");
}

#[tokio::test]
async fn pagerduty_triggers_one_event_per_incident_with_its_stable_dedup_key_and_resolves_it() {
    let r = Receiver::start(Reply::new(202, &fixture_text("pagerduty-response-202.json"))).await;
    let pd = pagerduty(&r);
    let firing = notification(AlertStatus::Firing);
    pd.send(&firing, Uuid::new_v4()).await.expect("trigger delivered");
    pd.send(&notification(AlertStatus::Resolved), Uuid::new_v4()).await.expect("resolve delivered");
    let reqs = r.requests();
    assert_eq!(reqs.len(), 2, "one incident with two kinds: one trigger, one resolve");
    let want: serde_json::Value = serde_json::from_str(&fixture_text("pagerduty-event-trigger.json")).expect("fixture");
    let trigger = reqs[0].json();
    assert_same_shape(&want, &trigger, "$", &["$.images"]);
    assert_eq!(trigger["event_action"], "trigger");
    assert_eq!(trigger["routing_key"], "pd-routing-key-REDACTED");
    assert_eq!(trigger["payload"]["severity"], "error");
    assert_eq!(trigger["payload"]["custom_details"]["kinds"], serde_json::json!(["errors", "latency_degraded"]));
    assert_eq!(trigger["payload"]["custom_details"]["facets"][1]["severity"], "warning");
    assert_eq!(trigger["dedup_key"], "vigil:openrouter:meta-llama/llama-3-70b-instruct:DeepInfra");
    let want_resolve: serde_json::Value =
        serde_json::from_str(&fixture_text("pagerduty-event-resolve.json")).expect("fixture");
    let resolve = reqs[1].json();
    assert_same_shape(&want_resolve, &resolve, "$", &[]);
    assert_eq!(resolve["event_action"], "resolve");
    assert_eq!(resolve["dedup_key"], trigger["dedup_key"]);
}

#[tokio::test]
async fn pagerduty_400_is_permanent_and_429_or_5xx_retryable() {
    let r = Receiver::start(Reply::new(202, "{}")).await;
    r.script([
        Reply::new(400, &fixture_text("pagerduty-response-400.json")),
        Reply::new(429, "").header("Retry-After", "7"),
        Reply::new(503, "unavailable"),
    ]);
    let pd = pagerduty(&r);
    let n = notification(AlertStatus::Firing);
    let e = pd.send(&n, Uuid::new_v4()).await.expect_err("400");
    assert!(matches!(&e, DeliveryError::Permanent { message } if message.contains("invalid event")), "{e:?}");
    let e = pd.send(&n, Uuid::new_v4()).await.expect_err("429");
    assert!(matches!(e, DeliveryError::Retryable { retry_after: Some(d), .. } if d == Duration::from_secs(7)), "{e:?}");
    let e = pd.send(&n, Uuid::new_v4()).await.expect_err("503");
    assert!(matches!(e, DeliveryError::Retryable { .. }), "{e:?}");
}

#[tokio::test]
async fn webhook_body_is_signed_and_carries_the_idempotency_key() {
    let r = Receiver::start(Reply::new(204, "")).await;
    let key = Uuid::new_v4();
    webhook(&r, Some("whsec-test-123")).send(&notification(AlertStatus::Firing), key).await.expect("delivered");
    let req = &r.requests()[0];
    assert_eq!(req.header("idempotency-key"), Some(key.to_string()));
    assert_eq!(req.header("content-type").as_deref(), Some("application/json"));
    let sig = req.header("x-vigil-signature").expect("signature header");
    assert!(sig.starts_with("sha256="), "{sig}");
    assert!(verify_signature(b"whsec-test-123", &req.body, &sig), "signature verifies over the raw body");
    assert!(!verify_signature(b"another-secret", &req.body, &sig));
    let body = req.json();
    assert_eq!(body["schema_version"], 1);
    assert_eq!(body["status"], "firing");
    assert_eq!(body["alerts"][0]["kind"], "errors");
    assert_eq!(body["alerts"][0]["scope"]["scope"], "global");
    assert_eq!(body["alerts"][1]["current"], 1200.0);
}

#[tokio::test]
async fn webhook_without_a_secret_sends_no_signature() {
    let r = Receiver::start(Reply::new(200, "")).await;
    webhook(&r, None).send(&notification(AlertStatus::Resolved), Uuid::new_v4()).await.expect("delivered");
    let req = &r.requests()[0];
    assert_eq!(req.header("x-vigil-signature"), None);
    assert_eq!(req.json()["status"], "resolved");
}

#[tokio::test]
async fn a_closed_port_is_retryable() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let cfg = WebhookConfig {
        name: "webhook".into(),
        url: SecretString::from(format!("http://127.0.0.1:{port}/x")),
        secret: None,
    };
    let w = WebhookNotifier::new(&cfg, TIMEOUT).expect("channel");
    let e = w.send(&notification(AlertStatus::Firing), Uuid::new_v4()).await.expect_err("refused");
    assert!(matches!(&e, DeliveryError::Retryable { message, .. } if message.contains("could not connect")), "{e:?}");
}

#[tokio::test]
async fn alert_test_reports_per_channel_and_filters_by_name() {
    let ok = Receiver::start(Reply::new(200, "ok")).await;
    let broken = Receiver::start(Reply::new(404, "no_service")).await;
    let channels: Vec<Arc<dyn Notifier>> = vec![Arc::new(slack(&ok)), Arc::new(webhook(&broken, Some("s")))];
    let all = alert_test(&channels, None, "eu-west-1", now()).await;
    assert_eq!(all.len(), 2);
    assert_eq!(all[0], ("slack".to_string(), Ok(())));
    assert_eq!(all[1].0, "webhook");
    assert!(matches!(all[1].1, Err(DeliveryError::Permanent { .. })));
    assert!(ok.requests()[0].json()["text"].as_str().expect("text").starts_with("[TEST]"));
    let one = alert_test(&channels, Some("slack"), "eu-west-1", now()).await;
    assert_eq!(one.len(), 1);
    assert_eq!(ok.requests().len(), 2);
    assert!(alert_test(&channels, Some("nope"), "eu-west-1", now()).await.is_empty());
}
