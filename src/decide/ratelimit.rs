//! Rate-limit headroom read from a response's headers, and whether it runs low: pure, `now`
//! injected (OpenAI-style resets are durations from the response).
//!
//! Two header families are read, whichever a response carries:
//! - OpenAI and the providers copying it (Groq, Together, Azure OpenAI, …):
//!   `x-ratelimit-{remaining,limit,reset}-{requests,tokens}`, resets as Go-style durations
//!   (`6m0s`, `1s`, `20ms`, `2m59.56s`); Azure OpenAI sends only the `remaining` pair.
//! - Anthropic: `anthropic-ratelimit-{requests,tokens}-{remaining,limit,reset}`, resets as RFC
//!   3339 times. Without the combined `tokens` family, the tighter of `input-tokens` and
//!   `output-tokens` stands for it.
//!
//! A malformed value is ignored, never an error: headroom is extra information, and a probe
//! never fails for it.

use crate::vocab::ratelimit::{Allowance, Headroom, RateLimitKind};
use chrono::{DateTime, Duration, SubsecRound, Utc};
use serde::{Deserialize, Serialize};

/// A reset further away than this is not believed (and could not be stored).
const MAX_RESET_DAYS: i64 = 31;

/// The headroom a response's headers give (empty when they give none).
pub fn from_headers(h: &::http::HeaderMap, now: DateTime<Utc>) -> Headroom {
    let text = |name: &str| h.get(name).and_then(|v| v.to_str().ok()).map(str::trim).filter(|v| !v.is_empty());
    let anthropic = |family: &str| {
        let part = |p: &str| text(&format!("anthropic-ratelimit-{family}-{p}"));
        some(Allowance {
            remaining: part("remaining").and_then(count),
            limit: part("limit").and_then(count),
            reset_at: part("reset").and_then(|v| timestamp(v, now)),
        })
    };
    let openai = |kind: &str| {
        let part = |p: &str| text(&format!("x-ratelimit-{p}-{kind}"));
        some(Allowance {
            remaining: part("remaining").and_then(count),
            limit: part("limit").and_then(count),
            reset_at: part("reset").and_then(|v| after(v, now)),
        })
    };
    let split_tokens = || tighter(anthropic("input-tokens"), anthropic("output-tokens"));
    Headroom {
        requests: anthropic("requests").or_else(|| openai("requests")),
        tokens: anthropic("tokens").or_else(split_tokens).or_else(|| openai("tokens")),
    }
}

/// The allowance with the lower fraction left; one without a fraction only when neither has one.
fn tighter(a: Option<Allowance>, b: Option<Allowance>) -> Option<Allowance> {
    match (a, b) {
        (Some(a), Some(b)) => match (a.fraction(), b.fraction()) {
            (Some(fa), Some(fb)) => Some(if fb < fa { b } else { a }),
            (None, Some(_)) => Some(b),
            _ => Some(a),
        },
        (a, b) => a.or(b),
    }
}

fn some(a: Allowance) -> Option<Allowance> {
    (!a.is_empty()).then_some(a)
}

/// A whole count: digits (a float like `99.0` is read too), at most `i64::MAX` so it stores as is.
fn count(v: &str) -> Option<u64> {
    let n = match v.parse::<u64>() {
        Ok(n) => n,
        Err(_) => {
            let f = v.parse::<f64>().ok().filter(|f| f.is_finite() && *f >= 0.0 && *f < 9.2e18)?;
            f.floor() as u64
        }
    };
    (n <= i64::MAX as u64).then_some(n)
}

/// An RFC 3339 time within a day before and [`MAX_RESET_DAYS`] after `now`.
fn timestamp(v: &str, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    // Whole milliseconds, as every store keeps them.
    let at = DateTime::parse_from_rfc3339(v).ok()?.with_timezone(&Utc).trunc_subsecs(3);
    (at >= now - Duration::days(1) && at <= now + Duration::days(MAX_RESET_DAYS)).then_some(at)
}

/// `now` plus a Go-style duration (`6m0s`, `1s`, `20ms`, `2m59.56s`, `1h2m3s`) or plain seconds.
fn after(v: &str, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let seconds = match v.parse::<f64>() {
        Ok(s) => s,
        Err(_) => go_duration_s(v)?,
    };
    if !seconds.is_finite() || seconds < 0.0 || seconds > (MAX_RESET_DAYS * 86_400) as f64 {
        return None;
    }
    now.checked_add_signed(Duration::milliseconds((seconds * 1000.0).round() as i64)).map(|at| at.trunc_subsecs(3))
}

/// Seconds of a Go `time.Duration` string: numbers, each followed by a unit (h, m, s, ms, us, µs, ns).
fn go_duration_s(v: &str) -> Option<f64> {
    let mut rest = v;
    let mut total = 0.0;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let n: f64 = rest.get(..digits).filter(|d| !d.is_empty())?.parse().ok()?;
        rest = &rest[digits..];
        let unit = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let scale = match &rest[..unit] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" | "μs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        total += n * scale;
        rest = &rest[unit..];
    }
    (!v.is_empty()).then_some(total)
}

/// The tighter allowance when its fraction left is under `low_fraction` (`ratelimit_low`).
pub fn low(h: &Headroom, low_fraction: f64) -> Option<(RateLimitKind, f64)> {
    h.tightest().filter(|(_, f)| *f < low_fraction)
}

/// A target's latest headroom as `/v1/targets`, the status page and the router export show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeadroomView {
    /// The request allowance (null when the provider never said).
    pub requests: Option<Allowance>,
    /// The token allowance (null when the provider never said).
    pub tokens: Option<Allowance>,
    /// `remaining / limit` of the tighter allowance (null without a limit, as from Azure OpenAI).
    pub headroom: Option<f64>,
    /// Which allowance that is (`requests`, `tokens`).
    pub tightest: Option<RateLimitKind>,
    /// `headroom` is under `ratelimit.low_fraction` (what `ratelimit_low` fires on).
    pub low: bool,
    /// When the probe that read it started.
    pub at: DateTime<Utc>,
}

/// Serde for a shared view, written and read as the view itself (`#[serde(default, with =
/// "shared_view")]`): one view is shared by a target's stats, export row, chain entries and
/// explanation.
pub mod shared_view {
    use super::HeadroomView;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::sync::Arc;

    /// Writes the view, or null.
    pub fn serialize<S: Serializer>(v: &Option<Arc<HeadroomView>>, s: S) -> Result<S::Ok, S::Error> {
        v.as_deref().serialize(s)
    }

    /// Reads the view, or null.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Arc<HeadroomView>>, D::Error> {
        Ok(Option::<HeadroomView>::deserialize(d)?.map(Arc::new))
    }
}

impl HeadroomView {
    /// The view of `h` read at `at`, judged against `low_fraction`; `None` when `h` is empty.
    pub fn of(h: &Headroom, at: DateTime<Utc>, low_fraction: f64) -> Option<HeadroomView> {
        if h.is_empty() {
            return None;
        }
        let tightest = h.tightest();
        Some(HeadroomView {
            requests: h.requests,
            tokens: h.tokens,
            headroom: tightest.map(|(_, f)| f),
            tightest: tightest.map(|(k, _)| k),
            low: low(h, low_fraction).is_some(),
            at,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).single().expect("valid")
    }

    fn headers(pairs: &[(&str, &str)]) -> ::http::HeaderMap {
        let mut h = ::http::HeaderMap::new();
        for (k, v) in pairs {
            let name = ::http::HeaderName::from_bytes(k.as_bytes()).expect("name");
            h.append(name, ::http::HeaderValue::from_bytes(v.as_bytes()).expect("value"));
        }
        h
    }

    fn secs(s: i64) -> Option<DateTime<Utc>> {
        Some(now() + Duration::seconds(s))
    }

    #[test]
    fn openai_groq_and_together_headers_give_both_allowances_with_duration_resets() {
        let h = from_headers(
            &headers(&[
                ("x-ratelimit-limit-requests", "5000"),
                ("x-ratelimit-remaining-requests", "4999"),
                ("x-ratelimit-reset-requests", "12ms"),
                ("x-ratelimit-limit-tokens", "160000"),
                ("x-ratelimit-remaining-tokens", "8000"),
                ("x-ratelimit-reset-tokens", "6m0s"),
            ]),
            now(),
        );
        let requests = h.requests.expect("requests");
        assert_eq!((requests.remaining, requests.limit), (Some(4999), Some(5000)));
        assert_eq!(requests.reset_at, Some(now() + Duration::milliseconds(12)));
        assert_eq!(h.tokens, Some(Allowance { remaining: Some(8000), limit: Some(160_000), reset_at: secs(360) }));
        assert_eq!(h.tightest(), Some((RateLimitKind::Tokens, 0.05)));
        // Groq's fractional seconds and a day-long window; plain seconds too.
        for (v, want) in [("2m59.56s", 179_560), ("7.66s", 7_660), ("1h2m3s", 3_723_000), ("30", 30_000), ("0s", 0)] {
            let h = from_headers(&headers(&[("x-ratelimit-reset-requests", v)]), now());
            assert_eq!(h.requests.and_then(|a| a.reset_at), Some(now() + Duration::milliseconds(want)), "{v}");
        }
    }

    #[test]
    fn azure_sends_remaining_only_which_gives_no_fraction() {
        let h = from_headers(
            &headers(&[("x-ratelimit-remaining-requests", "119"), ("x-ratelimit-remaining-tokens", "119000")]),
            now(),
        );
        assert_eq!(h.requests, Some(Allowance { remaining: Some(119), limit: None, reset_at: None }));
        assert_eq!(h.tokens.and_then(|a| a.remaining), Some(119_000));
        assert_eq!((h.tightest(), low(&h, 0.5)), (None, None));
    }

    #[test]
    fn anthropic_headers_give_rfc3339_resets_and_the_combined_tokens_family_wins() {
        let h = from_headers(
            &headers(&[
                ("anthropic-ratelimit-requests-limit", "1000"),
                ("anthropic-ratelimit-requests-remaining", "999"),
                ("anthropic-ratelimit-requests-reset", "2026-12-01T12:00:59Z"),
                ("anthropic-ratelimit-tokens-limit", "96000"),
                ("anthropic-ratelimit-tokens-remaining", "4800"),
                ("anthropic-ratelimit-tokens-reset", "2026-12-01T13:00:00+01:00"),
                ("anthropic-ratelimit-input-tokens-limit", "80000"),
                ("anthropic-ratelimit-input-tokens-remaining", "80000"),
                ("anthropic-ratelimit-output-tokens-limit", "16000"),
                ("anthropic-ratelimit-output-tokens-remaining", "16"),
            ]),
            now(),
        );
        assert_eq!(h.requests, Some(Allowance { remaining: Some(999), limit: Some(1000), reset_at: secs(59) }));
        assert_eq!(h.tokens, Some(Allowance { remaining: Some(4800), limit: Some(96_000), reset_at: secs(0) }));
        assert_eq!(low(&h, 0.1), Some((RateLimitKind::Tokens, 0.05)));
        assert_eq!(low(&h, 0.05), None, "under, not at");
        // Without the combined family, the tighter of input and output stands for it.
        let split = from_headers(
            &headers(&[
                ("anthropic-ratelimit-input-tokens-limit", "80000"),
                ("anthropic-ratelimit-input-tokens-remaining", "40000"),
                ("anthropic-ratelimit-output-tokens-limit", "16000"),
                ("anthropic-ratelimit-output-tokens-remaining", "800"),
                ("anthropic-ratelimit-output-tokens-reset", "2026-12-01T12:01:00Z"),
            ]),
            now(),
        );
        assert_eq!(split.tokens, Some(Allowance { remaining: Some(800), limit: Some(16_000), reset_at: secs(60) }));
        assert_eq!(split.requests, None);
    }

    #[test]
    fn malformed_values_are_ignored_one_by_one_and_never_panic() {
        let bad = [
            ("x-ratelimit-remaining-requests", "lots"),
            ("x-ratelimit-limit-requests", "-5"),
            ("x-ratelimit-reset-requests", "6 minutes"),
            ("x-ratelimit-remaining-tokens", "99999999999999999999999"),
            ("x-ratelimit-limit-tokens", "NaN"),
            ("x-ratelimit-reset-tokens", "1e300s"),
        ];
        assert_eq!(from_headers(&headers(&bad), now()), Headroom::default(), "nothing readable: nothing recorded");
        let mixed = from_headers(
            &headers(&[
                ("x-ratelimit-remaining-requests", "7"),
                ("x-ratelimit-limit-requests", "100.0"),
                ("x-ratelimit-reset-requests", "s"),
                ("anthropic-ratelimit-tokens-reset", "tomorrow"),
                ("anthropic-ratelimit-tokens-remaining", "2030-01-01T00:00:00Z"),
            ]),
            now(),
        );
        assert_eq!(mixed.requests, Some(Allowance { remaining: Some(7), limit: Some(100), reset_at: None }));
        assert_eq!(mixed.tokens, None);
        for v in ["", "m", "5x", "1..2s", "µ", "5µ", "3m-1s", "99999999h", "2099-01-01T00:00:00Z"] {
            let h = from_headers(&headers(&[("x-ratelimit-reset-tokens", v)]), now());
            assert_eq!(h.tokens, None, "{v:?}");
        }
        let far = from_headers(&headers(&[("anthropic-ratelimit-requests-reset", "2099-01-01T00:00:00Z")]), now());
        assert_eq!(far.requests, None, "a reset decades away is not believed");
        // Not UTF-8: ignored.
        let mut h = ::http::HeaderMap::new();
        h.insert("x-ratelimit-remaining-requests", ::http::HeaderValue::from_bytes(b"\xff12").expect("opaque"));
        assert_eq!(from_headers(&h, now()), Headroom::default());
    }

    #[test]
    fn the_view_says_the_tightest_allowance_and_whether_it_is_low() {
        let h = Headroom {
            requests: Some(Allowance { remaining: Some(2), limit: Some(100), reset_at: None }),
            tokens: Some(Allowance { remaining: Some(900), limit: Some(1000), reset_at: None }),
        };
        let v = HeadroomView::of(&h, now(), 0.1).expect("view");
        assert_eq!((v.headroom, v.tightest, v.low), (Some(0.02), Some(RateLimitKind::Requests), true));
        assert!(!HeadroomView::of(&h, now(), 0.0).expect("view").low, "0 turns the judgement off");
        assert_eq!(HeadroomView::of(&Headroom::default(), now(), 0.1), None);
        let json = serde_json::to_value(&v).expect("json");
        assert_eq!(json["requests"]["remaining"], 2);
        assert_eq!(json["tightest"], "requests");
    }
}
