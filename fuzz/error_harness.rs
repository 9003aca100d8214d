//! The `error_response` fuzz harness, shared by the fuzz target and `tests/fuzz_regressions.rs`:
//! everything vigil reads from a provider's error answer and from the JSON APIs it polls.
//!
//! Input layout: byte 0 picks the status, then header lines (`name: value`, any bytes) up to a
//! blank line, then the body. For every input nothing panics, and:
//! - `Retry-After` / `retry-after-ms` / Gemini `retryDelay` are refused or within 0..=3600 s,
//!   and so is a receiver's `Retry-After`;
//! - the failure text and request id kept in a sample are bounded and never hold the
//!   configured secret, even when the body or headers carry it (the harness plants it);
//! - range-checked sample numbers (cost, tokens) come out plausible or absent;
//! - balance and price figures parsed from the body are finite.

use std::time::Duration;
use vigil::io::probe::scrub::{self, Secrets};
use vigil::io::probe::{self, MAX_RETRY_AFTER_S};

/// The provider key the harness configures; inputs may contain it (the dictionary has it).
pub const SECRET: &str = "sk-test-fuzz-secret-01234";

const STATUSES: [u16; 12] = [400, 401, 402, 403, 404, 408, 422, 429, 500, 502, 503, 529];

fn in_range(v: Option<f64>) -> bool {
    v.is_none_or(|s| s.is_finite() && (0.0..=MAX_RETRY_AFTER_S).contains(&s))
}

/// Runs one input; panics when an invariant breaks.
pub fn error_response(data: &[u8]) {
    let [pick, rest @ ..] = data else { return };
    let status = match *pick {
        n if usize::from(n) < STATUSES.len() => STATUSES[usize::from(n)],
        n => 100 + u16::from(n) * 3,
    };
    let split = rest.windows(2).position(|w| w == b"\n\n");
    let (head, body) = match split {
        Some(at) => (&rest[..at], &rest[at + 2..]),
        None => (rest, &b""[..]),
    };
    let mut headers = http::HeaderMap::new();
    for line in head.split(|b| *b == b'\n') {
        let Some(colon) = line.iter().position(|b| *b == b':') else { continue };
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
        if let (Ok(n), Ok(v)) = (http::HeaderName::from_bytes(name), http::HeaderValue::from_bytes(value)) {
            headers.append(n, v);
        }
    }

    let wait = probe::retry_after(&headers);
    assert!(in_range(wait), "retry_after gave {wait:?}");
    let delay = probe::gemini::retry_delay(body);
    assert!(in_range(delay), "retryDelay gave {delay:?}");
    let now = chrono::Utc::now();
    for v in headers.get_all(http::header::RETRY_AFTER) {
        if let Ok(v) = v.to_str() {
            let d = vigil::io::notify::notifier::parse_retry_after(v, now);
            assert!(d.is_none_or(|d| d <= Duration::from_secs(3600)), "receiver Retry-After gave {d:?}");
        }
    }

    let _ = probe::classify::classify_http_error(status, body);
    let message = probe::error_message(status, body);
    let secrets = Secrets::new([SECRET.to_string()]);
    let target = vigil::vocab::target::Target::new("p".into(), "m".into(), None, "r".into());
    let mut sample = vigil::vocab::sample::Sample::new(target, now, now);
    sample.error = Some(message);
    sample.request_id = probe::header_request_id(&headers);
    sample.retry_after_s = wait.or(delay);
    // Numbers as a provider could send them: the body's first bytes as a cost and a token count.
    let mut n = [0u8; 8];
    for (i, b) in body.iter().take(8).enumerate() {
        n[i] = *b;
    }
    sample.cost_usd = Some(f64::from_le_bytes(n));
    sample.output_tokens = Some(u32::from_le_bytes([n[0], n[1], n[2], n[3]]));
    sample.tokens_per_s = Some(f64::from(u32::from_le_bytes([n[4], n[5], n[6], n[7]])));
    scrub::finalise(&mut sample, &secrets);
    for text in [sample.error.as_deref(), sample.request_id.as_deref()].into_iter().flatten() {
        assert!(!text.contains(SECRET), "the secret survived: {text:?}");
        assert!(!text.chars().any(char::is_control), "control characters survived: {text:?}");
    }
    assert!(sample.error.as_ref().is_none_or(|e| e.len() <= scrub::MAX_ERROR_BYTES + 3));
    assert!(sample.request_id.as_ref().is_none_or(|e| e.len() <= scrub::MAX_REQUEST_ID_BYTES + 3));
    assert!(sample.cost_usd.is_none_or(|c| c.is_finite() && (0.0..=scrub::MAX_COST_USD).contains(&c)));
    assert!(sample.output_tokens.is_none_or(|t| t <= scrub::MAX_TOKENS));
    assert!(sample.tokens_per_s.is_none_or(|v| v.is_finite() && v >= 0.0));
    assert!(in_range(sample.retry_after_s));

    if let Ok(v) = vigil::io::feeds::balance::parse_credits(body) {
        assert!(v.is_finite(), "credits {v}");
    }
    let _ = vigil::io::feeds::balance::parse_key(body);
    if let Ok(prices) = vigil::decide::pricing::parse_endpoints(body) {
        assert!(prices.iter().all(|p| p.input_per_mtok.is_finite() && p.output_per_mtok.is_finite()));
    }
}
