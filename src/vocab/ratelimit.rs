//! Rate-limit headroom: what a provider's response headers said was left of its request and
//! token allowances and when they reset. Every probe records it (`Sample::ratelimit`); the
//! metrics, `/v1/targets`, the status page, the router export and the `ratelimit_low` rule read it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The default `ratelimit.low_fraction`: headroom under a tenth is low (`ratelimit_low`).
pub const DEFAULT_LOW_FRACTION: f64 = 0.1;

/// Which allowance: requests or tokens per window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RateLimitKind {
    /// Requests per window.
    Requests,
    /// Tokens per window (Anthropic: the tighter of its input and output token limits when it
    /// sends no combined one).
    Tokens,
}

impl RateLimitKind {
    /// Both kinds, in the order every output lists them.
    pub const ALL: [RateLimitKind; 2] = [RateLimitKind::Requests, RateLimitKind::Tokens];

    /// The name every output spells (`requests`, `tokens`): the metrics' `kind` label.
    pub fn as_str(self) -> &'static str {
        match self {
            RateLimitKind::Requests => "requests",
            RateLimitKind::Tokens => "tokens",
        }
    }
}

/// One allowance as the headers gave it; any part may be missing (Azure OpenAI sends only what
/// is remaining).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Allowance {
    /// What is left in the current window.
    pub remaining: Option<u64>,
    /// The window's whole allowance.
    pub limit: Option<u64>,
    /// When the allowance is whole again.
    pub reset_at: Option<DateTime<Utc>>,
}

impl Allowance {
    /// `remaining / limit` in 0..=1, when both are known and the limit is not zero.
    pub fn fraction(&self) -> Option<f64> {
        match (self.remaining, self.limit) {
            (Some(r), Some(l)) if l > 0 => Some((r as f64 / l as f64).clamp(0.0, 1.0)),
            _ => None,
        }
    }

    /// Nothing known.
    pub fn is_empty(&self) -> bool {
        self.remaining.is_none() && self.limit.is_none() && self.reset_at.is_none()
    }
}

/// A probe's rate-limit headroom: its request and token allowances, each when the provider said.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Headroom {
    /// The request allowance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<Allowance>,
    /// The token allowance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<Allowance>,
}

impl Headroom {
    /// The allowance of `kind`.
    pub fn get(&self, kind: RateLimitKind) -> Option<&Allowance> {
        match kind {
            RateLimitKind::Requests => self.requests.as_ref(),
            RateLimitKind::Tokens => self.tokens.as_ref(),
        }
    }

    /// The provider said nothing about its limits.
    pub fn is_empty(&self) -> bool {
        self.requests.is_none() && self.tokens.is_none()
    }

    /// The tighter allowance (lowest `remaining / limit`) with its fraction, when any has one.
    pub fn tightest(&self) -> Option<(RateLimitKind, f64)> {
        RateLimitKind::ALL
            .into_iter()
            .filter_map(|k| Some((k, self.get(k)?.fraction()?)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
    }

    /// `self` with each allowance `newer` carries replacing the one held: the latest reading of
    /// each kind, for a provider that sends one kind on some responses and both on others.
    pub fn updated(self, newer: &Headroom) -> Headroom {
        Headroom { requests: newer.requests.or(self.requests), tokens: newer.tokens.or(self.tokens) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tightest_allowance_is_the_lowest_fraction_and_needs_a_limit() {
        let a = |remaining, limit| Some(Allowance { remaining, limit, reset_at: None });
        let h = Headroom { requests: a(Some(90), Some(100)), tokens: a(Some(500), Some(10_000)) };
        assert_eq!(h.tightest(), Some((RateLimitKind::Tokens, 0.05)));
        let azure = Headroom { requests: a(Some(3), None), tokens: a(Some(100), None) };
        assert_eq!(azure.tightest(), None, "remaining alone says no fraction");
        assert_eq!(a(Some(5), Some(0)).and_then(|a| a.fraction()), None, "a zero limit is no fraction");
        assert_eq!(a(Some(150), Some(100)).and_then(|a| a.fraction()), Some(1.0), "clamped");
        let newer = Headroom { requests: a(Some(1), Some(100)), tokens: None };
        assert_eq!(h.updated(&newer), Headroom { requests: newer.requests, tokens: h.tokens });
        assert!(Headroom::default().is_empty() && !h.is_empty());
    }
}
