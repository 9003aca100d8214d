//! Panic-freedom of every header and field vigil parses from a provider's response: huge
//! numbers, `1e300`, negatives, NaN text, non-UTF-8 and overlong values. Each case also checks
//! what comes out (clamped, refused or bounded), not only that nothing panicked.

use super::sse::SseEvent;
use crate::io::probe::*;
use ::http::{HeaderMap, HeaderValue};

/// Values a hostile provider could put in a numeric header or field.
const HOSTILE_NUMBERS: [&str; 17] = [
    "9999999999999",
    "99999999999999999999999999999999999999",
    "1e300",
    "1e309",
    "-1",
    "-1e300",
    "NaN",
    "nan",
    "inf",
    "-inf",
    "infinity",
    "0x10",
    "",
    " ",
    "1.5.5",
    "18446744073709551616",
    "-0",
];

fn headers(pairs: &[(&str, &[u8])]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (name, value) in pairs {
        if let Ok(v) = HeaderValue::from_bytes(value) {
            h.append(::http::HeaderName::from_bytes(name.as_bytes()).expect("static name"), v);
        }
    }
    h
}

fn in_range(v: Option<f64>) -> bool {
    v.is_none_or(|s| s.is_finite() && (0.0..=MAX_RETRY_AFTER_S).contains(&s))
}

#[test]
fn retry_after_headers_are_clamped_or_refused_never_panic() {
    let overlong = "9".repeat(100_000);
    let mut values: Vec<Vec<u8>> = HOSTILE_NUMBERS.iter().map(|v| v.as_bytes().to_vec()).collect();
    values.push(overlong.into_bytes());
    values.push(b"\xff\xfe\x80".to_vec());
    values.push(b"Fri, 31 Dec 9999 23:59:59 GMT".to_vec());
    values.push(b"Mon, 01 Jan 1900 00:00:00 GMT".to_vec());
    values.push(b"Wed, 21 Oct 2015 07:28:00 +9999".to_vec());
    for v in &values {
        for name in ["retry-after", "retry-after-ms"] {
            let got = retry_after(&headers(&[(name, v)]));
            assert!(in_range(got), "{name}: {:?} gave {got:?}", String::from_utf8_lossy(&v[..v.len().min(40)]));
        }
        let both = retry_after(&headers(&[("retry-after-ms", v), ("retry-after", v)]));
        assert!(in_range(both));
    }
    assert_eq!(retry_after(&headers(&[("retry-after", b"9999999999999")])), Some(MAX_RETRY_AFTER_S));
    assert_eq!(retry_after(&headers(&[("retry-after", b"1e300")])), Some(MAX_RETRY_AFTER_S));
    assert_eq!(retry_after(&headers(&[("retry-after-ms", b"1e300")])), Some(MAX_RETRY_AFTER_S));
    assert_eq!(retry_after(&headers(&[("retry-after", b"-5")])), None, "negative waits are refused");
    assert_eq!(retry_after(&headers(&[("retry-after", b"NaN")])), None);
    assert_eq!(retry_after(&headers(&[("retry-after", b"inf")])), None);
    assert_eq!(
        retry_after(&headers(&[("retry-after-ms", b"NaN"), ("retry-after", b"7")])),
        Some(7.0),
        "a refused retry-after-ms falls back to retry-after"
    );
    assert_eq!(retry_after(&headers(&[("retry-after", b"Fri, 31 Dec 9999 23:59:59 GMT")])), Some(MAX_RETRY_AFTER_S));
    assert_eq!(retry_after(&headers(&[("retry-after", b"Mon, 01 Jan 1900 00:00:00 GMT")])), Some(0.0));
    assert_eq!(retry_after(&headers(&[("retry-after", b"20")])), Some(20.0));
}

#[test]
fn gemini_retry_delay_is_clamped_or_refused_never_panics() {
    for v in HOSTILE_NUMBERS.iter().map(|s| s.to_string()).chain(["9".repeat(10_000)]) {
        let body = serde_json::json!({"error": {"details": [{"retryDelay": format!("{v}s")}]}}).to_string();
        let got = gemini::retry_delay(body.as_bytes());
        assert!(in_range(got), "{v:?} gave {got:?}");
    }
    let body = |d: &str| format!(r#"{{"error":{{"details":[{{"retryDelay":"{d}"}}]}}}}"#);
    assert_eq!(gemini::retry_delay(body("1e300s").as_bytes()), Some(MAX_RETRY_AFTER_S));
    assert_eq!(gemini::retry_delay(body("-3s").as_bytes()), None);
    assert_eq!(gemini::retry_delay(body("26s").as_bytes()), Some(26.0));
    for junk in [
        &b"\xff\xfe"[..],
        b"{",
        b"[]",
        b"{\"error\":{\"details\":7}}",
        b"{\"error\":{\"details\":[{\"retryDelay\":5}]}}",
    ] {
        assert_eq!(gemini::retry_delay(junk), None);
    }
}

#[test]
fn receiver_retry_after_is_capped_at_an_hour() {
    use crate::io::notify::notifier::parse_retry_after;
    let now = Utc::now();
    let cap = Duration::from_secs_f64(MAX_RETRY_AFTER_S);
    for v in HOSTILE_NUMBERS
        .iter()
        .map(|s| s.to_string())
        .chain(["9".repeat(100_000), "Fri, 31 Dec 9999 23:59:59 GMT".into()])
    {
        let got = parse_retry_after(&v, now);
        assert!(got.is_none_or(|d| d <= cap), "{v:?} gave {got:?}");
    }
    assert_eq!(parse_retry_after("9999999999999", now), Some(cap));
    assert_eq!(parse_retry_after("18446744073709551615", now), Some(cap));
}

#[test]
fn request_id_headers_never_panic_on_bytes() {
    for v in [&b"\xff\xfe\x80"[..], b"", b"abc", &[b'a'; 100_000]] {
        let got = header_request_id(&headers(&[("x-request-id", v)]));
        if let Some(id) = got {
            assert!(id.len() <= v.len());
        }
    }
}

#[test]
fn error_bodies_with_hostile_fields_never_panic() {
    let long = "x".repeat(200_000);
    let bodies: Vec<Vec<u8>> = vec![
        b"\xff\xfe\x80 not utf-8".to_vec(),
        format!(r#"{{"error":{{"message":"{long}"}}}}"#).into_bytes(),
        br#"{"error":{"message":12,"code":1e300}}"#.to_vec(),
        br#"{"error":"plain"}"#.to_vec(),
        br#"{"error":null}"#.to_vec(),
        b"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[".repeat(200),
        long.clone().into_bytes(),
    ];
    for status in [0u16, 100, 399, 400, 401, 402, 404, 429, 500, 529, 999, u16::MAX] {
        for body in &bodies {
            let _ = classify::classify_http_error(status, body);
            let msg = error_message(status, body);
            assert!(msg.len() <= ERROR_TEXT_LIMIT, "message not bounded: {} bytes", msg.len());
            let kept = scrub::clean(&msg, &scrub::Secrets::default(), scrub::MAX_ERROR_BYTES, true);
            assert!(kept.len() <= scrub::MAX_ERROR_BYTES + 3, "kept text not bounded: {} bytes", kept.len());
        }
    }
}

#[test]
fn adapter_fields_with_hostile_values_never_panic() {
    let numbers = ["1e300", "-1e300", "-1", "18446744073709551616", "4294967296", "1.5", "\"NaN\"", "null", "[]"];
    for n in numbers {
        let events = [
            format!(
                r#"{{"id":"x","choices":[],"usage":{{"prompt_tokens":{n},"completion_tokens":{n},"cost":{n},"completion_tokens_details":{{"reasoning_tokens":{n}}}}}}}"#
            ),
            format!(
                r#"{{"type":"message_start","message":{{"id":{n},"usage":{{"input_tokens":{n},"output_tokens":{n}}}}}}}"#
            ),
            format!(r#"{{"type":"message_delta","usage":{{"output_tokens":{n}}}}}"#),
            format!(
                r#"{{"responseId":{n},"candidates":[{{"finishReason":{n}}}],"usageMetadata":{{"promptTokenCount":{n},"candidatesTokenCount":{n},"thoughtsTokenCount":{n}}}}}"#
            ),
            format!(r#"{{"error":{{"message":{n},"code":{n}}}}}"#),
        ];
        for data in &events {
            let ev = SseEvent { event: None, data: data.clone() };
            for kind in [ProviderKind::Openai, ProviderKind::Anthropic, ProviderKind::Gemini] {
                let s = adapter_for(kind).interpret(&ev);
                if let Some(u) = s.usage {
                    assert!(u.cost_usd.is_none_or(f64::is_finite), "{kind:?} {data}");
                }
            }
        }
    }
}

#[test]
fn balance_and_price_fields_with_hostile_values_never_panic() {
    for n in ["1e300", "-1e300", "1e308", "-1", "0"] {
        let key = format!(r#"{{"data":{{"limit_remaining":{n}}}}}"#);
        let _ = crate::io::feeds::balance::parse_key(key.as_bytes());
        let credits = format!(r#"{{"data":{{"total_credits":{n},"total_usage":-{n}}}}}"#);
        if let Ok(v) = crate::io::feeds::balance::parse_credits(credits.as_bytes()) {
            assert!(v.is_finite(), "{credits} gave {v}");
        }
        let prices = format!(
            r#"{{"data":{{"endpoints":[{{"provider_name":"p","pricing":{{"prompt":"{n}","completion":"{n}"}}}}]}}}}"#
        );
        if let Ok(e) = crate::decide::pricing::parse_endpoints(prices.as_bytes()) {
            assert!(e.iter().all(|p| p.input_per_mtok.is_finite() && p.output_per_mtok.is_finite()), "{prices}");
        }
    }
    for junk in [&b"\xff"[..], b"", b"{\"data\":{\"limit_remaining\":\"1\"}}"] {
        let _ = crate::io::feeds::balance::parse_key(junk);
        let _ = crate::io::feeds::balance::parse_credits(junk);
        let _ = crate::decide::pricing::parse_endpoints(junk);
    }
}
