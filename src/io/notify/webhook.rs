//! Generic webhook: the notification as JSON, signed with HMAC-SHA256 when a secret is set.

use super::notifier::check_response;
use super::notifier::http_client;
use super::notifier::transport_error;
use super::notifier::DeliveryError;
use super::notifier::Notifier;
use super::notifier::NotifierError;
use crate::config::WebhookConfig;
use crate::decide::alert::Notification;
use async_trait::async_trait;
use hmac::{Hmac, KeyInit, Mac};
use secrecy::{ExposeSecret, SecretString};
use sha2::Sha256;
use std::time::Duration;
use uuid::Uuid;

/// Header carrying `sha256=<hex HMAC-SHA256 of the body>`.
pub const SIGNATURE_HEADER: &str = "X-Vigil-Signature";
/// Header carrying the outbox item id; the same on every retry.
pub const IDEMPOTENCY_HEADER: &str = "Idempotency-Key";

/// Posts to one webhook receiver.
pub struct WebhookNotifier {
    name: String,
    url: SecretString,
    secret: Option<SecretString>,
    http: reqwest::Client,
}

impl WebhookNotifier {
    /// Builds the channel.
    pub fn new(cfg: &WebhookConfig, timeout: Duration) -> Result<Self, NotifierError> {
        url::Url::parse(cfg.url.expose_secret())
            .map_err(|e| NotifierError { channel: cfg.name.clone(), message: format!("bad URL: {e}") })?;
        Ok(WebhookNotifier {
            name: cfg.name.clone(),
            url: cfg.url.clone(),
            secret: cfg.secret.clone(),
            http: http_client(&cfg.name, timeout)?,
        })
    }
}

/// `sha256=<hex>` of the body under `secret`.
pub fn signature(secret: &[u8], body: &[u8]) -> String {
    // HMAC accepts keys of any length, so this cannot fail.
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret) {
        Ok(m) => m,
        Err(_) => return String::new(),
    };
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// Checks a received `X-Vigil-Signature` in constant time.
pub fn verify_signature(secret: &[u8], body: &[u8], header: &str) -> bool {
    use subtle::ConstantTimeEq;
    let want = signature(secret, body);
    want.as_bytes().ct_eq(header.trim().as_bytes()).into()
}

/// The body: the notification itself, with a schema version.
pub fn payload(n: &Notification) -> serde_json::Value {
    let mut v = serde_json::to_value(n).unwrap_or(serde_json::Value::Null);
    if let Some(o) = v.as_object_mut() {
        o.insert("schema_version".into(), 1.into());
        o.insert("title".into(), n.title().into());
    }
    v
}

#[async_trait]
impl Notifier for WebhookNotifier {
    fn name(&self) -> &str {
        &self.name
    }

    async fn send(&self, n: &Notification, idempotency_key: Uuid) -> Result<(), DeliveryError> {
        let body = serde_json::to_vec(&payload(n)).map_err(|e| DeliveryError::permanent(e.to_string()))?;
        let mut req = self
            .http
            .post(self.url.expose_secret())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(IDEMPOTENCY_HEADER, idempotency_key.to_string());
        if let Some(secret) = &self.secret {
            req = req.header(SIGNATURE_HEADER, signature(secret.expose_secret().as_bytes(), &body));
        }
        let resp = req.body(body).send().await.map_err(|e| transport_error(&self.name, e))?;
        check_response(&self.name, resp).await.map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_matches_a_known_hmac_and_verifies() {
        // RFC 4231 test case 2.
        let sig = signature(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(sig, "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
        assert!(verify_signature(b"Jefe", b"what do ya want for nothing?", &sig));
        assert!(!verify_signature(b"Jefe", b"tampered", &sig));
    }
}
