//! The `model_deprecated` rule: a pure function from what probes and model lists said about a
//! model's retirement, and the time now, to warning alerts — `deprecation.warn_days` ahead.
//!
//! Three sources announce a retirement before the model is gone: the `Deprecation` (RFC 9745)
//! and `Sunset` (RFC 8594) response headers on a probe, OpenRouter's model list giving the model
//! an `expiration_date`, and the provider's models endpoint no longer listing a model that probes
//! still reach. Readers for each are here too, so the wiring only has to pass their results in.

use super::Alert;
use super::AlertKind;
use super::Severity;
use crate::vocab::notice::{DeprecationSource, Notice};
use crate::vocab::target::Target;
use chrono::{DateTime, Duration, NaiveDate, TimeZone, Utc};
use serde::Deserialize;
use std::collections::BTreeMap;

/// A probe response's `Deprecation` and `Sunset` headers, when present and readable.
///
/// `Deprecation` is an RFC 9745 structured date (`@1688169599`); the older draft's `true` or an
/// HTTP date are read too (`true` counts as deprecated from `now`). `Sunset` is an HTTP date.
pub fn from_headers(h: &::http::HeaderMap, now: DateTime<Utc>) -> Vec<Notice> {
    let text = |name: &str| h.get(name).and_then(|v| v.to_str().ok()).map(str::trim).filter(|v| !v.is_empty());
    let mut out = Vec::new();
    if let Some(v) = text("deprecation") {
        let date = if let Some(secs) = v.strip_prefix('@') {
            secs.parse::<i64>().ok().and_then(|s| Utc.timestamp_opt(s, 0).single())
        } else if v.eq_ignore_ascii_case("true") {
            Some(now)
        } else {
            http_date(v)
        };
        if let Some(date) = date {
            out.push(Notice { source: DeprecationSource::DeprecationHeader, date });
        }
    }
    if let Some(date) = text("sunset").and_then(http_date) {
        out.push(Notice { source: DeprecationSource::SunsetHeader, date });
    }
    out
}

fn http_date(v: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc2822(v).ok().map(|d| d.with_timezone(&Utc))
}

/// Model id → expiration date, for the models OpenRouter's `GET /models` gives one.
pub fn openrouter_expirations(body: &[u8]) -> Result<BTreeMap<String, DateTime<Utc>>, serde_json::Error> {
    #[derive(Deserialize)]
    struct List {
        data: Vec<Model>,
    }
    #[derive(Deserialize)]
    struct Model {
        id: String,
        #[serde(default)]
        expiration_date: Option<String>,
    }
    let list: List = serde_json::from_slice(body)?;
    Ok(list
        .data
        .into_iter()
        .filter_map(|m| {
            let raw = m.expiration_date?;
            let date = NaiveDate::parse_from_str(&raw, "%Y-%m-%d")
                .ok()
                .and_then(|d| d.and_hms_opt(0, 0, 0))
                .map(|d| Utc.from_utc_datetime(&d))
                .or_else(|| DateTime::parse_from_rfc3339(&raw).ok().map(|d| d.with_timezone(&Utc)))?;
            Some((m.id, date))
        })
        .collect())
}

/// The model ids an OpenAI-style `GET /models` lists (`{"data":[{"id":…}]}`; Together's bare
/// `[{"id":…}]` and Gemini's `{"models":[{"name":"models/…"}]}` are read too).
pub fn listed_models(body: &[u8]) -> Result<Vec<String>, serde_json::Error> {
    let v: serde_json::Value = serde_json::from_slice(body)?;
    let entries = v.get("data").and_then(|d| d.as_array()).or_else(|| v.as_array());
    let openai = entries.into_iter().flatten().filter_map(|m| m.get("id")?.as_str());
    let gemini = v.get("models").and_then(|d| d.as_array()).into_iter().flatten().filter_map(|m| {
        let name = m.get("name")?.as_str()?;
        Some(name.strip_prefix("models/").unwrap_or(name))
    });
    Ok(openai.chain(gemini).map(str::to_string).collect())
}

/// The rule: every target whose earliest announced date is at most `warn_days` away (or past)
/// gets one `model_deprecated` warning naming the date and the source.
pub fn evaluate(region: &str, notices: &[(Target, Notice)], now: DateTime<Utc>, warn_days: u32) -> Vec<Alert> {
    let horizon = now + Duration::days(i64::from(warn_days));
    let mut earliest: BTreeMap<String, (&Target, &Notice)> = BTreeMap::new();
    for (t, n) in notices {
        if n.date > horizon {
            continue;
        }
        let e = earliest.entry(t.id()).or_insert((t, n));
        if n.date < e.1.date {
            *e = (t, n);
        }
    }
    earliest
        .into_values()
        .map(|(t, n)| {
            let day = n.date.format("%Y-%m-%d");
            let when = match n.source {
                DeprecationSource::DeprecationHeader if n.date <= now => format!("deprecated since {day}"),
                DeprecationSource::DeprecationHeader => format!("deprecated from {day}"),
                DeprecationSource::MissingFromModels => format!("unlisted since {day}"),
                _ if n.date <= now => format!("retired since {day}"),
                _ => format!("retires on {day}"),
            };
            let mut a = Alert::new(
                AlertKind::ModelDeprecated,
                region,
                &t.provider,
                Some(t),
                format!("{} {when}, says {}", t.model, n.source.describe()),
            );
            a.severity = Severity::Warning;
            a.since = now;
            a.current = Some((n.date - now).num_seconds() as f64 / 86_400.0);
            a
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::notice::DEFAULT_WARN_DAYS;

    fn fixture(name: &str) -> Vec<u8> {
        std::fs::read(format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))).expect("fixture")
    }

    fn target(provider: &str, model: &str) -> Target {
        Target::new(provider.into(), model.into(), None, "eu".into())
    }

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).expect("date").with_timezone(&Utc)
    }

    /// A recorded head's header lines (`name: value`) as a header map.
    fn headers(name: &str) -> ::http::HeaderMap {
        let text = String::from_utf8(fixture(name)).expect("utf8");
        let mut h = ::http::HeaderMap::new();
        for line in text.lines() {
            if let Some((k, v)) = line.split_once(':') {
                if let (Ok(k), Ok(v)) =
                    (::http::HeaderName::from_bytes(k.trim().as_bytes()), ::http::HeaderValue::from_str(v.trim()))
                {
                    h.append(k, v);
                }
            }
        }
        h
    }

    #[test]
    fn deprecation_and_sunset_headers_are_read() {
        let now = at("2026-12-01T00:00:00Z");
        let n = from_headers(&headers("deprecation-sunset-head.txt"), now);
        assert_eq!(n.len(), 2, "{n:?}");
        assert_eq!(n[0], Notice { source: DeprecationSource::DeprecationHeader, date: at("2026-11-20T00:00:00Z") });
        assert_eq!(n[1], Notice { source: DeprecationSource::SunsetHeader, date: at("2026-12-20T00:00:00Z") });
        let mut h = ::http::HeaderMap::new();
        h.insert("deprecation", ::http::HeaderValue::from_static("true"));
        h.insert("sunset", ::http::HeaderValue::from_static("not a date"));
        assert_eq!(from_headers(&h, now), vec![Notice { source: DeprecationSource::DeprecationHeader, date: now }]);
        assert!(from_headers(&::http::HeaderMap::new(), now).is_empty());
    }

    #[test]
    fn openrouter_expiration_dates_are_read() {
        let e = openrouter_expirations(&fixture("openrouter-models-expiration.json")).expect("parses");
        assert_eq!(e.get("example/old-model-preview"), Some(&at("2026-12-15T00:00:00Z")));
        assert!(!e.contains_key("meta-llama/llama-3.1-8b-instruct"), "null expiration is no notice");
        assert!(openrouter_expirations(b"{").is_err());
    }

    #[test]
    fn models_lists_are_read_for_both_shapes() {
        let listed = listed_models(&fixture("openai-models-list.json")).expect("parses");
        assert!(listed.iter().any(|m| m == "gpt-4o-mini"));
        assert!(!listed.iter().any(|m| m == "gpt-3.5-turbo-0613"));
        let gemini = listed_models(br#"{"models":[{"name":"models/gemini-2.0-flash-lite"}]}"#).expect("parses");
        assert_eq!(gemini, vec!["gemini-2.0-flash-lite".to_string()]);
        let together =
            listed_models(br#"[{"id":"meta-llama/Llama-3.2-3B-Instruct-Turbo","type":"chat"}]"#).expect("parses");
        assert_eq!(together, vec!["meta-llama/Llama-3.2-3B-Instruct-Turbo".to_string()]);
        assert!(listed_models(br#"{"error":"nope"}"#).expect("json").is_empty());
    }

    #[test]
    fn warns_within_warn_days_with_date_and_source_and_not_before() {
        let now = at("2026-12-01T00:00:00Z");
        let sunset = Notice { source: DeprecationSource::SunsetHeader, date: at("2026-12-20T00:00:00Z") };
        let far = Notice { source: DeprecationSource::OpenRouterExpiration, date: at("2027-03-01T00:00:00Z") };
        let gone = Notice { source: DeprecationSource::MissingFromModels, date: now };
        let notices = vec![
            (target("openai", "gpt-old"), sunset.clone()),
            (target("openrouter", "x/far"), far.clone()),
            (target("groq", "unlisted"), gone),
        ];
        let alerts = evaluate("eu", &notices, now, DEFAULT_WARN_DAYS);
        assert_eq!(alerts.len(), 2, "the March expiry is more than 30 days away");
        let a = &alerts[0];
        assert_eq!((a.kind, a.severity), (AlertKind::ModelDeprecated, Severity::Warning));
        assert_eq!(
            a.summary,
            "unlisted unlisted since 2026-12-01, says the provider's models endpoint, which no longer lists it"
        );
        let a = &alerts[1];
        assert_eq!(a.summary, "gpt-old retires on 2026-12-20, says the provider's Sunset response header");
        assert_eq!(a.dedup_key, "vigil:eu:openai:gpt-old::model_deprecated");
        // A longer horizon reaches March.
        assert_eq!(evaluate("eu", &notices, now, 120).len(), 3);
        // Two notices for one target give one alert, with the earlier date.
        let both = vec![(target("openai", "m"), far), (target("openai", "m"), sunset)];
        let alerts = evaluate("eu", &both, now, 120);
        assert_eq!(alerts.len(), 1);
        assert!(alerts[0].summary.contains("2026-12-20"));
    }
}
