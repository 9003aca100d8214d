//! The `Notifier` seam every channel implements, its error types, and the HTTP client and
//! response classification the HTTP channels share. Building channels from config is in `channels`.

use crate::decide::alert::Notification;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use std::time::Duration;
use thiserror::Error;
use uuid::Uuid;

/// Why a delivery attempt failed, and whether trying again can help.
#[derive(Debug, Clone, Error, PartialEq)]
pub enum DeliveryError {
    /// Try again later (5xx, 429, timeout, connection refused), not before `retry_after` if given.
    #[error("{message}")]
    Retryable {
        /// What the receiver asked for (`Retry-After`).
        retry_after: Option<Duration>,
        /// What went wrong.
        message: String,
    },
    /// Retrying will not help (bad URL, 4xx, rejected recipient).
    #[error("{message}")]
    Permanent {
        /// What went wrong.
        message: String,
    },
}

impl DeliveryError {
    /// A retryable error without a receiver-given delay.
    pub fn retry(message: impl Into<String>) -> Self {
        DeliveryError::Retryable { retry_after: None, message: message.into() }
    }

    /// A permanent error.
    pub fn permanent(message: impl Into<String>) -> Self {
        DeliveryError::Permanent { message: message.into() }
    }
}

/// A channel that can deliver a notification.
#[async_trait]
pub trait Notifier: Send + Sync {
    /// Channel name from config (`slack`, `pagerduty-1`).
    fn name(&self) -> &str;
    /// Sends once; the same `idempotency_key` is used for every retry of one outbox item.
    async fn send(&self, n: &Notification, idempotency_key: Uuid) -> Result<(), DeliveryError>;
    /// Called every delivery step: channels that must keep re-sending (Alertmanager) do it here.
    async fn tick(&self, _now: DateTime<Utc>) -> Result<(), DeliveryError> {
        Ok(())
    }
}

/// A channel could not be built from its config.
#[derive(Debug, Error)]
#[error("alerts channel {channel}: {message}")]
pub struct NotifierError {
    /// Channel name.
    pub channel: String,
    /// What is wrong.
    pub message: String,
}

/// Default per-request timeout of channel HTTP and SMTP calls.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// An HTTP client for a channel: rustls, timeouts, no redirects to other hosts' secrets.
pub(crate) fn http_client(channel: &str, timeout: Duration) -> Result<reqwest::Client, NotifierError> {
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("vigil/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| NotifierError { channel: channel.to_string(), message: e.to_string() })
}

/// `Retry-After` as seconds or an HTTP date, capped at `probe::MAX_RETRY_AFTER_S` (a receiver
/// asking for more is retried after an hour, within `alerts.delivery_deadline`).
pub fn parse_retry_after(value: &str, now: DateTime<Utc>) -> Option<Duration> {
    let v = value.trim();
    let cap = Duration::from_secs_f64(crate::io::probe::MAX_RETRY_AFTER_S);
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs).min(cap));
    }
    let at = DateTime::parse_from_rfc2822(v).ok()?.with_timezone(&Utc);
    Some(at.signed_duration_since(now).to_std().unwrap_or(Duration::ZERO).min(cap))
}

/// Maps a failed send (no response) to a retryable error; the message never holds the URL.
pub(crate) fn transport_error(channel: &str, e: reqwest::Error) -> DeliveryError {
    let what = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "could not connect"
    } else {
        "request failed"
    };
    DeliveryError::retry(format!("{channel}: {what}: {}", e.without_url()))
}

/// Shared status rules: 2xx ok; 429 and 408 retry (honouring `Retry-After`); other 4xx permanent; 5xx retry.
pub(crate) async fn check_response(channel: &str, resp: reqwest::Response) -> Result<(u16, String), DeliveryError> {
    let status = resp.status();
    let retry_after = resp
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| parse_retry_after(v, Utc::now()));
    // Only an excerpt is ever used: a huge or endless answer is cut, never held whole.
    let body = crate::io::bounded::read_prefix(resp, crate::io::bounded::RECEIVER_BODY_LIMIT).await.unwrap_or_default();
    let body = String::from_utf8_lossy(&body).into_owned();
    let short: String = body.chars().take(300).collect();
    let code = status.as_u16();
    if status.is_success() {
        Ok((code, body))
    } else if code == 429 || code == 408 || status.is_server_error() {
        Err(DeliveryError::Retryable { retry_after, message: format!("{channel}: HTTP {code}: {short}") })
    } else {
        Err(DeliveryError::permanent(format!("{channel}: HTTP {code}: {short}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let now = DateTime::parse_from_rfc3339("2015-10-21T07:27:00Z").expect("t").with_timezone(&Utc);
        assert_eq!(parse_retry_after("30", now), Some(Duration::from_secs(30)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now), Some(Duration::from_secs(60)));
        assert_eq!(parse_retry_after("soon", now), None);
    }
}
