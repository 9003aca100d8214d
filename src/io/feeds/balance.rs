//! OpenRouter credit polling (`/key` and `/credits`), the poller task that stores readings for
//! every provider on the credit-watch list, and the pure burn-rate projection the `credit_low`
//! rule uses.

use crate::config::{BalanceConfig, ProviderConfig};
use crate::io::metrics::Metrics;
use crate::io::store::FeedStore;
use crate::vocab::records::BalanceReading;
use chrono::Utc;
use reqwest::StatusCode;
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use thiserror::Error;
use url::Url;

/// Why a balance check failed.
#[derive(Debug, Error)]
pub enum BalanceError {
    /// The request did not complete (network, timeout).
    #[error("balance request to {endpoint} failed: {message}")]
    Http {
        /// Path asked.
        endpoint: String,
        /// What went wrong.
        message: String,
    },
    /// The endpoint answered with an unexpected status.
    #[error("balance endpoint {endpoint} answered {status}")]
    Status {
        /// Path asked.
        endpoint: String,
        /// HTTP status.
        status: u16,
    },
    /// The body was not the documented shape.
    #[error("balance endpoint {endpoint} sent an unexpected body: {message}")]
    Body {
        /// Path asked.
        endpoint: String,
        /// Parse error.
        message: String,
    },
}

#[derive(Deserialize)]
struct Envelope<T> {
    data: T,
}

#[derive(Deserialize)]
struct KeyData {
    limit_remaining: Option<f64>,
}

#[derive(Deserialize)]
struct CreditsData {
    total_credits: f64,
    total_usage: f64,
}

/// `data.limit_remaining` of a `/key` or `/auth/key` body; `None` when the key has no limit.
pub fn parse_key(body: &[u8]) -> Result<Option<f64>, serde_json::Error> {
    Ok(serde_json::from_slice::<Envelope<KeyData>>(body)?.data.limit_remaining)
}

/// `data.total_credits − data.total_usage` of a `/credits` body.
pub fn parse_credits(body: &[u8]) -> Result<f64, serde_json::Error> {
    let d = serde_json::from_slice::<Envelope<CreditsData>>(body)?.data;
    let left = d.total_credits - d.total_usage;
    if !left.is_finite() {
        return Err(serde::de::Error::custom("total_credits - total_usage is not a finite number"));
    }
    Ok(left)
}

/// What one poll found.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BalanceCheck {
    /// USD left under the key's own limit (`None`: unlimited key).
    pub key_remaining: Option<f64>,
    /// USD left on the account (`None`: the key may not read `/credits`).
    pub account_remaining: Option<f64>,
}

impl BalanceCheck {
    /// The binding figure: the smaller of the two, `None` when neither is known.
    pub fn remaining(&self) -> Option<f64> {
        match (self.key_remaining, self.account_remaining) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// Polls one OpenRouter-style provider's credit endpoints.
#[derive(Debug)]
pub struct BalanceClient {
    http: reqwest::Client,
    base_url: Url,
    api_key: SecretString,
    provider: String,
    credits_forbidden_logged: AtomicBool,
}

impl BalanceClient {
    /// A client for `base_url` (`https://openrouter.ai/api/v1`) with a request timeout.
    pub fn new(provider: &str, base_url: Url, api_key: SecretString, timeout: Duration) -> Result<Self, BalanceError> {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .user_agent(concat!("vigil/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| BalanceError::Http { endpoint: base_url.to_string(), message: e.to_string() })?;
        Ok(BalanceClient {
            http,
            base_url,
            api_key,
            provider: provider.to_string(),
            credits_forbidden_logged: AtomicBool::new(false),
        })
    }

    fn url(&self, path: &str) -> String {
        format!("{}/{path}", self.base_url.as_str().trim_end_matches('/'))
    }

    async fn get(&self, path: &str) -> Result<(StatusCode, bytes::Bytes), BalanceError> {
        let err = |e: reqwest::Error| BalanceError::Http { endpoint: path.to_string(), message: e.to_string() };
        let resp = self.http.get(self.url(path)).bearer_auth(self.api_key.expose_secret()).send().await.map_err(err)?;
        let status = resp.status();
        let body = crate::io::bounded::read_capped(resp, crate::io::bounded::API_BODY_LIMIT)
            .await
            .map_err(|e| BalanceError::Http { endpoint: path.to_string(), message: e.to_string() })?;
        Ok((status, body))
    }

    /// `/key` (falling back to the older `/auth/key` on 404) → the key's remaining limit.
    pub async fn key_remaining(&self) -> Result<Option<f64>, BalanceError> {
        let (mut status, mut body) = self.get("key").await?;
        let mut endpoint = "key";
        if status == StatusCode::NOT_FOUND {
            endpoint = "auth/key";
            (status, body) = self.get(endpoint).await?;
        }
        if !status.is_success() {
            return Err(BalanceError::Status { endpoint: endpoint.into(), status: status.as_u16() });
        }
        parse_key(&body).map_err(|e| BalanceError::Body { endpoint: endpoint.into(), message: e.to_string() })
    }

    /// `/credits` → account balance; `None` (logged once) when the key is not a management key.
    pub async fn account_remaining(&self) -> Result<Option<f64>, BalanceError> {
        let (status, body) = self.get("credits").await?;
        if status == StatusCode::FORBIDDEN || status == StatusCode::UNAUTHORIZED {
            if !self.credits_forbidden_logged.swap(true, Ordering::Relaxed) {
                tracing::info!(provider = %self.provider, status = status.as_u16(),
                    "credits endpoint needs a management key; watching the key's own limit only");
            }
            return Ok(None);
        }
        if !status.is_success() {
            return Err(BalanceError::Status { endpoint: "credits".into(), status: status.as_u16() });
        }
        parse_credits(&body)
            .map(Some)
            .map_err(|e| BalanceError::Body { endpoint: "credits".into(), message: e.to_string() })
    }

    /// Both endpoints; one failing does not hide the other's figure.
    pub async fn check(&self) -> Result<BalanceCheck, BalanceError> {
        let (key, account) = tokio::join!(self.key_remaining(), self.account_remaining());
        match (key, account) {
            (Err(e), Err(_)) => Err(e),
            (k, a) => {
                if let Err(e) = &k {
                    tracing::warn!(provider = %self.provider, error = %e, "key balance check failed");
                }
                if let Err(e) = &a {
                    tracing::warn!(provider = %self.provider, error = %e, "account balance check failed");
                }
                Ok(BalanceCheck { key_remaining: k.ok().flatten(), account_remaining: a.ok().flatten() })
            }
        }
    }
}

/// One watched provider: its credit client and its `balance` settings.
pub struct Watched {
    /// Provider name.
    pub provider: String,
    /// Its `balance` settings (how often, the minimum).
    pub balance: BalanceConfig,
    client: BalanceClient,
}

/// The credit-watch list (`Config::credit_watch`) with a key, each with its client (requests time
/// out after `timeout`); a client that cannot be built is logged and left out.
pub fn watched<'a>(
    credit_watch: impl IntoIterator<Item = (&'a ProviderConfig, &'a BalanceConfig)>,
    timeout: Duration,
) -> Vec<Watched> {
    let mut out = Vec::new();
    for (p, balance) in credit_watch {
        let Some(key) = p.api_key.clone() else { continue };
        match BalanceClient::new(&p.name, p.base_url.clone(), key, timeout) {
            Ok(client) => out.push(Watched { provider: p.name.clone(), balance: balance.clone(), client }),
            Err(e) => tracing::warn!(provider = %p.name, error = %e, "credit polling disabled"),
        }
    }
    out
}

impl Watched {
    /// Reads the credit once: sets the gauge, stores the reading (of `region`) and warns under
    /// the minimum; a failed read or write is logged and left for the next round.
    pub async fn read_once(&self, store: &dyn FeedStore, metrics: &Metrics, region: &str) {
        let provider = &self.provider;
        match self.client.check().await.map(|c| c.remaining()) {
            Ok(Some(usd)) => {
                metrics.set_credit(provider, usd);
                let reading = BalanceReading {
                    provider: provider.clone(),
                    region: region.to_string(),
                    at: Utc::now(),
                    remaining_usd: usd,
                };
                if let Err(e) = store.insert_balance(&reading).await {
                    tracing::warn!(provider = %provider, error = %e, "credit reading not stored");
                }
                if usd < self.balance.min_usd {
                    tracing::warn!(provider = %provider, remaining_usd = usd, min_usd = self.balance.min_usd, "credit low");
                }
            }
            Ok(None) => tracing::debug!(provider = %provider, "credit unlimited or not readable with this key"),
            Err(e) => tracing::warn!(provider = %provider, error = %e, "credit check failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::credit::burn_rate;
    use chrono::DateTime;

    fn fixture(name: &str) -> Vec<u8> {
        std::fs::read(format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))).expect("fixture")
    }

    fn at(h: i64) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-30T00:00:00Z").expect("time").with_timezone(&Utc)
            + chrono::Duration::hours(h)
    }

    #[test]
    fn key_bodies_give_the_remaining_limit() {
        assert_eq!(parse_key(&fixture("openrouter-key.json")).expect("key"), Some(0.8246643901));
        assert_eq!(parse_key(&fixture("openrouter-auth-key.json")).expect("auth key"), Some(4.8984355238));
        assert_eq!(parse_key(br#"{"data":{"limit":null,"limit_remaining":null}}"#).expect("unlimited"), None);
    }

    #[test]
    fn credits_body_gives_credits_minus_usage() {
        assert_eq!(parse_credits(&fixture("openrouter-credits.json")).expect("credits"), 100.5 - 25.75);
        assert!(parse_credits(&fixture("openrouter-credits-403.json")).is_err());
    }

    #[test]
    fn steady_spending_projects_the_moment_of_zero() {
        let readings = [(at(0), 30.0), (at(1), 28.0), (at(2), 26.0), (at(3), 24.0)];
        let r = burn_rate(&readings).expect("rate");
        assert!((r.usd_per_hour - 2.0).abs() < 1e-9, "{r:?}");
        assert!((r.hours_to_zero.expect("hours") - 12.0).abs() < 1e-9);
        assert_eq!(r.zero_at, Some(at(15)));
    }

    #[test]
    fn a_top_up_restarts_the_measurement() {
        let readings = [(at(0), 10.0), (at(1), 1.0), (at(2), 101.0), (at(3), 100.0), (at(4), 99.0)];
        let r = burn_rate(&readings).expect("rate");
        assert!((r.usd_per_hour - 1.0).abs() < 1e-9, "{r:?}");
        assert_eq!(r.zero_at, Some(at(103)));
    }

    #[test]
    fn flat_or_single_readings_project_nothing() {
        assert_eq!(burn_rate(&[(at(0), 5.0)]), None);
        let flat = burn_rate(&[(at(0), 5.0), (at(1), 5.0)]).expect("rate");
        assert_eq!(flat.hours_to_zero, None);
    }

    #[test]
    fn remaining_takes_the_binding_figure() {
        let c = BalanceCheck { key_remaining: Some(3.0), account_remaining: Some(70.0) };
        assert_eq!(c.remaining(), Some(3.0));
        assert_eq!(BalanceCheck::default().remaining(), None);
    }
}
