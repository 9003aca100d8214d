//! Email through a real SMTP server process (Python aiosmtpd) on loopback.
//! Needs `pip install aiosmtpd`.

use crate::support::smtp_server;

use chrono::{DateTime, Utc};
use secrecy::SecretString;
use smtp_server::SmtpServer;
use std::time::Duration;
use uuid::Uuid;
use vigil::config::EmailConfig;
use vigil::decide::alert::{Alert, AlertKind, Notification};
use vigil::io::notify::email::EmailNotifier;
use vigil::io::notify::notifier::{DeliveryError, Notifier};
use vigil::vocab::target::Target;

fn notification() -> Notification {
    let now = DateTime::parse_from_rfc3339("2026-11-30T12:00:00Z").expect("time").with_timezone(&Utc);
    let t = Target::new("anthropic".into(), "claude-3-haiku".into(), None, "us-east-1".into());
    let mut a = Alert::new(
        AlertKind::ModelUnavailable,
        "us-east-1",
        "anthropic",
        Some(&t),
        "model claude-3-haiku is not served: <not_found_error>".into(),
    );
    a.since = now;
    Notification {
        status_url: Some("https://vigil.example.com/".into()),
        ..Notification::firing("k", "us-east-1", "anthropic", vec![a], now)
    }
}

fn channel(url: String) -> EmailNotifier {
    let cfg = EmailConfig {
        name: "email".into(),
        smtp_url: SecretString::from(url),
        from: "vigil@example.com".into(),
        to: vec!["oncall@example.com".into(), "Platform Team <platform@example.com>".into()],
    };
    EmailNotifier::new(&cfg, Duration::from_secs(5)).expect("email channel")
}

#[tokio::test]
async fn a_local_relay_receives_multipart_text_and_html_to_every_recipient() {
    if !smtp_server::available() {
        return;
    }
    let server = SmtpServer::start(None);
    let key = Uuid::new_v4();
    channel(format!("smtp://127.0.0.1:{}?tls=none", server.port)).send(&notification(), key).await.expect("delivered");
    let m = server.message(0).await;
    assert_eq!(m["mail_from"], "vigil@example.com");
    assert_eq!(m["rcpt_tos"], serde_json::json!(["oncall@example.com", "platform@example.com"]));
    assert_eq!(m["subject"], "[FIRING] anthropic: model_unavailable (us-east-1)");
    assert!(m["to"].as_str().expect("to").contains("Platform Team"), "{}", m["to"]);
    assert_eq!(m["message_id"], format!("<{key}@vigil>"));
    assert_eq!(m["content_type"], "multipart/alternative");
    let parts = m["parts"].as_array().expect("parts");
    assert_eq!(parts.len(), 2);
    assert_eq!(parts[0]["content_type"], "text/plain");
    assert_eq!(parts[1]["content_type"], "text/html");
    let text = parts[0]["text"].as_str().expect("text");
    assert!(
        text.contains("ERROR model_unavailable anthropic/claude-3-haiku: model claude-3-haiku is not served"),
        "{text}"
    );
    let html = parts[1]["text"].as_str().expect("html");
    assert!(html.contains("<table") && html.contains("&lt;not_found_error&gt;"), "{html}");
    assert!(html.contains("href=\"https://vigil.example.com/\""), "{html}");
    assert_eq!(m["auth_login"], serde_json::Value::Null);
}

#[tokio::test]
async fn credentials_in_the_url_log_in() {
    if !smtp_server::available() {
        return;
    }
    let server = SmtpServer::start(Some(("vigil", "s3cret+x")));
    channel(format!("smtp://vigil:s3cret+x@127.0.0.1:{}?tls=none", server.port))
        .send(&notification(), Uuid::new_v4())
        .await
        .expect("delivered");
    assert_eq!(server.message(0).await["auth_login"], "vigil");
}

#[tokio::test]
async fn a_server_requiring_a_login_rejects_an_anonymous_sender_permanently() {
    if !smtp_server::available() {
        return;
    }
    let server = SmtpServer::start(Some(("vigil", "right")));
    let e = channel(format!("smtp://127.0.0.1:{}?tls=none", server.port))
        .send(&notification(), Uuid::new_v4())
        .await
        .expect_err("no credentials");
    assert!(matches!(e, DeliveryError::Permanent { .. }), "{e:?}");
    assert_eq!(server.received(), 0);
}

#[tokio::test]
async fn a_server_that_is_down_is_retryable() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let e = channel(format!("smtp://127.0.0.1:{port}?tls=none"))
        .send(&notification(), Uuid::new_v4())
        .await
        .expect_err("nobody listens");
    assert!(matches!(e, DeliveryError::Retryable { .. }), "{e:?}");
}
