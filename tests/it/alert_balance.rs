//! OpenRouter credit polling against a real HTTP server on loopback serving the wire fixtures.

use crate::support::alert_receiver as receiver;

use crate::support::fixture_text;
use receiver::{Receiver, Reply};
use secrecy::SecretString;
use std::time::Duration;
use vigil::io::feeds::balance::{BalanceCheck, BalanceClient, BalanceError};

fn client(r: &Receiver) -> BalanceClient {
    BalanceClient::new(
        "openrouter",
        r.url("/api/v1").parse().expect("url"),
        SecretString::from("sk-or-v1-test-000".to_string()),
        Duration::from_secs(5),
    )
    .expect("client")
}

#[tokio::test]
async fn key_limit_and_account_credits_are_both_read_with_the_bearer_key() {
    let r = Receiver::start(Reply::new(404, "not found")).await;
    r.on("/api/v1/key", Reply::new(200, &fixture_text("openrouter-key.json")));
    r.on("/api/v1/credits", Reply::new(200, &fixture_text("openrouter-credits.json")));
    let check = client(&r).check().await.expect("check");
    assert_eq!(check, BalanceCheck { key_remaining: Some(0.8246643901), account_remaining: Some(74.75) });
    assert_eq!(check.remaining(), Some(0.8246643901));
    for req in r.requests() {
        assert_eq!(req.method, "GET");
        assert_eq!(req.header("authorization").as_deref(), Some("Bearer sk-or-v1-test-000"));
    }
}

#[tokio::test]
async fn an_older_api_without_key_falls_back_to_auth_key() {
    let r = Receiver::start(Reply::new(404, "not found")).await;
    r.on("/api/v1/auth/key", Reply::new(200, &fixture_text("openrouter-auth-key.json")));
    r.on("/api/v1/credits", Reply::new(403, &fixture_text("openrouter-credits-403.json")));
    let c = client(&r);
    assert_eq!(c.key_remaining().await.expect("key"), Some(4.8984355238));
    let paths: Vec<String> = r.requests().into_iter().map(|q| q.path).collect();
    assert_eq!(paths, ["/api/v1/key", "/api/v1/auth/key"]);
}

#[tokio::test]
async fn an_ordinary_key_reading_credits_is_skipped_quietly() {
    let r = Receiver::start(Reply::new(404, "not found")).await;
    r.on("/api/v1/key", Reply::new(200, r#"{"data":{"limit":null,"limit_remaining":null,"usage":1.5}}"#));
    r.on("/api/v1/credits", Reply::new(403, &fixture_text("openrouter-credits-403.json")));
    let c = client(&r);
    let check = c.check().await.expect("a 403 on credits is not an error");
    assert_eq!(check, BalanceCheck { key_remaining: None, account_remaining: None });
    assert_eq!(check.remaining(), None, "unlimited key and no management key: no reading");
    assert_eq!(c.account_remaining().await.expect("again"), None);
}

#[tokio::test]
async fn a_garbled_body_names_the_endpoint() {
    let r = Receiver::start(Reply::new(200, "<html>maintenance</html>")).await;
    let e = client(&r).key_remaining().await.expect_err("not JSON");
    assert!(matches!(&e, BalanceError::Body { endpoint, .. } if endpoint == "key"), "{e:?}");
}
