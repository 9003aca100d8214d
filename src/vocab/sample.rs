//! `Sample`: one probe's measurements, the single value every later stage consumes, and its
//! `Outcome` (the twelve classes every stage after the prober speaks).

use crate::vocab::target::Target;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use uuid::Uuid;

/// One probe's result. Field names are the SPEC's; durations are milliseconds from a monotonic clock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Unique id (UUIDv7, so ids sort by time); storage writes are idempotent on it.
    pub id: Uuid,
    /// What was probed, and from which region.
    #[serde(flatten)]
    pub target: Target,
    /// When the scheduler wanted the probe to start.
    pub scheduled_at: DateTime<Utc>,
    /// When it really started; `started_at - scheduled_at` is the scheduling lag.
    pub started_at: DateTime<Utc>,
    /// DNS resolution of a fresh connection.
    pub dns_ms: Option<f64>,
    /// TCP connect.
    pub connect_ms: Option<f64>,
    /// TLS handshake (null for plain HTTP).
    pub tls_ms: Option<f64>,
    /// Through an HTTP proxy: CONNECT sent → the proxy's 2xx (null without a proxy). `dns_ms`
    /// and `connect_ms` are then the proxy's; TTFB and TTFT still count from the request sent.
    #[serde(default)]
    pub proxy_ms: Option<f64>,
    /// Request sent → first byte of the status line.
    pub ttfb_ms: Option<f64>,
    /// Request sent → first visible content token.
    pub ttft_ms: Option<f64>,
    /// Request sent → first reasoning token, for models that stream reasoning.
    pub ttfr_ms: Option<f64>,
    /// Request sent → end of stream (or failure).
    pub total_ms: Option<f64>,
    /// Prompt tokens from the usage report, when given.
    pub input_tokens: Option<u32>,
    /// Output tokens from the usage report, else counted content events.
    pub output_tokens: Option<u32>,
    /// (output_tokens − 1) / (total − ttft).
    pub tokens_per_s: Option<f64>,
    /// HTTP status, when one arrived.
    pub status: Option<u16>,
    /// How the probe ended.
    pub outcome: Outcome,
    /// Short human detail for failures (error message from the provider, I/O error).
    pub error: Option<String>,
    /// Provider request id (`x-request-id`, `request-id`, generation or response id).
    pub request_id: Option<String>,
    /// The reply obeyed the probe's system prompt; null for plain HTTP targets.
    pub adherence_ok: Option<bool>,
    /// What the probe cost, from usage × price (provider-reported cost wins).
    pub cost_usd: Option<f64>,
    /// Seconds the provider asked us to wait (`Retry-After`, Gemini `retryDelay`).
    pub retry_after_s: Option<f64>,
    /// What the response's rate-limit headers said was left of the provider's request and token
    /// allowances (empty when it sent none or none was readable).
    #[serde(default, skip_serializing_if = "crate::vocab::ratelimit::Headroom::is_empty")]
    pub ratelimit: crate::vocab::ratelimit::Headroom,
    /// Provider figures dropped from this sample as implausible (`cost_usd`, `output_tokens`, …),
    /// for the metrics; not stored or shown.
    #[serde(skip)]
    pub rejected: Vec<&'static str>,
    /// Retirement notices in the response's `Deprecation`/`Sunset` headers (and, added by the
    /// alert stage, what the models lists say), for the `model_deprecated` rule. Held in memory
    /// for the round's alerts, not stored.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deprecation: Vec<crate::vocab::notice::Notice>,
}

impl Sample {
    /// A sample with only identity and times set; the prober fills in the rest.
    pub fn new(target: Target, scheduled_at: DateTime<Utc>, started_at: DateTime<Utc>) -> Self {
        Sample {
            id: Uuid::now_v7(),
            target,
            scheduled_at,
            started_at,
            dns_ms: None,
            connect_ms: None,
            tls_ms: None,
            proxy_ms: None,
            ttfb_ms: None,
            ttft_ms: None,
            ttfr_ms: None,
            total_ms: None,
            input_tokens: None,
            output_tokens: None,
            tokens_per_s: None,
            status: None,
            outcome: Outcome::Ok,
            error: None,
            request_id: None,
            adherence_ok: None,
            cost_usd: None,
            retry_after_s: None,
            ratelimit: Default::default(),
            rejected: Vec::new(),
            deprecation: Vec::new(),
        }
    }

    /// Scheduling lag in seconds (never negative).
    pub fn schedule_lag_s(&self) -> f64 {
        let lag = self.started_at - self.scheduled_at;
        (lag.num_microseconds().unwrap_or(0).max(0) as f64) / 1e6
    }
}

/// How a probe ended; a failed probe is data, not an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Answer streamed to the end.
    Ok,
    /// 429 or an equivalent rate-limit error.
    RateLimited,
    /// Key missing, wrong or revoked.
    AuthError,
    /// Out of credit (402, OpenAI `insufficient_quota`, Anthropic "credit balance").
    PaymentRequired,
    /// Model removed, renamed or not served.
    ModelUnavailable,
    /// Any other 4xx: the request itself is wrong.
    ClientError,
    /// 5xx, overload (Anthropic 529) or an upstream error.
    ServerError,
    /// A connect, first-token or total limit ran out.
    Timeout,
    /// The host name did not resolve.
    DnsError,
    /// TCP connect failed.
    ConnectError,
    /// TLS handshake or certificate failure.
    TlsError,
    /// Bad or interrupted stream, or an error event mid-stream.
    StreamError,
}

impl Outcome {
    /// Every class, in SPEC order.
    pub const ALL: [Outcome; 12] = [
        Outcome::Ok,
        Outcome::RateLimited,
        Outcome::AuthError,
        Outcome::PaymentRequired,
        Outcome::ModelUnavailable,
        Outcome::ClientError,
        Outcome::ServerError,
        Outcome::Timeout,
        Outcome::DnsError,
        Outcome::ConnectError,
        Outcome::TlsError,
        Outcome::StreamError,
    ];

    /// The SPEC name (`rate_limited`).
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::RateLimited => "rate_limited",
            Outcome::AuthError => "auth_error",
            Outcome::PaymentRequired => "payment_required",
            Outcome::ModelUnavailable => "model_unavailable",
            Outcome::ClientError => "client_error",
            Outcome::ServerError => "server_error",
            Outcome::Timeout => "timeout",
            Outcome::DnsError => "dns_error",
            Outcome::ConnectError => "connect_error",
            Outcome::TlsError => "tls_error",
            Outcome::StreamError => "stream_error",
        }
    }

    /// True for everything but `ok`.
    pub fn is_failure(self) -> bool {
        self != Outcome::Ok
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Outcome {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Outcome::ALL.into_iter().find(|o| o.as_str() == s).ok_or_else(|| format!("unknown outcome {s:?}"))
    }
}
