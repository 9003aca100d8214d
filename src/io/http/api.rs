//! `/v1/*`: the router export, its JSON Schemas and target explanations, behind an optional bearer token.
//!
//! The export is cacheable: a strong `ETag` over the exact bytes served (`If-None-Match` → 304)
//! and `Cache-Control: max-age` of one probe interval. The document is republished every second,
//! so its `generated_at` is held while nothing else changed and it is under one probe interval
//! old; the bytes, and so the ETag and signature, then stay the same until the data moves.

use super::HttpState;
use crate::decide::export::{Filter, Thresholds};
use crate::decide::router_formats::{render, Format, SCHEMAS};
use crate::decide::signing::{ExportSigner, KEY_HEADER, SIGNATURE_HEADER};
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use secrecy::ExposeSecret;
use secrecy::SecretString;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::sync::{Arc, Mutex};
use subtle::ConstantTimeEq;

/// What serving the export needs beyond the snapshot: signer, cache lifetime, the held document.
#[derive(Debug, Default)]
pub struct Feed {
    signer: Option<ExportSigner>,
    max_age_s: u64,
    held: Mutex<Option<Arc<Thresholds>>>,
}

impl Feed {
    /// A feed signing with `signing_key` (`http.signing_key_env`/`_file`) that holds a document
    /// unchanged but for its timestamps for up to `max_age` (the probe interval).
    pub fn new(signing_key: Option<&SecretString>, max_age: std::time::Duration) -> Feed {
        Feed {
            signer: signing_key.and_then(ExportSigner::from_seed),
            max_age_s: max_age.as_secs().max(1),
            held: Mutex::new(None),
        }
    }

    /// `fresh`, or the held document when only its timestamps differ and it is younger than one
    /// probe interval. Both are shared with the snapshots that published them: a request copies
    /// no document.
    fn stable(&self, fresh: Arc<Thresholds>) -> Arc<Thresholds> {
        let Ok(mut held) = self.held.lock() else { return fresh };
        if let Some(old) = held.as_ref() {
            let young = (fresh.generated_at - old.generated_at).num_seconds() < self.max_age_s as i64;
            if young && (Arc::ptr_eq(old, &fresh) || old.same_apart_from_time(&fresh)) {
                return Arc::clone(old);
            }
        }
        *held = Some(Arc::clone(&fresh));
        fresh
    }
}

/// Rejects `/v1/*` requests without the configured bearer token (constant-time compare).
pub async fn require_token(State(s): State<HttpState>, req: Request, next: Next) -> Response {
    let Some(token) = &s.api_token else {
        return next.run(req).await;
    };
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if bool::from(given.as_bytes().ct_eq(token.expose_secret().as_bytes())) {
        next.run(req).await
    } else {
        (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, "Bearer")], "missing or wrong bearer token\n")
            .into_response()
    }
}

/// Query of `GET /v1/thresholds`.
#[derive(Debug, Default, Deserialize)]
pub struct ThresholdsQuery {
    /// `json` (default), `yaml`, `litellm`, `openrouter` or `portkey`.
    pub format: Option<String>,
    /// Only this model id.
    pub model: Option<String>,
    /// Only this provider.
    pub provider: Option<String>,
    /// Only this chain.
    pub chain: Option<String>,
}

/// The strong ETag of a body.
pub fn etag(body: &[u8]) -> String {
    format!("\"{}\"", &hex::encode(Sha256::digest(body))[..32])
}

fn matches_etag(headers: &HeaderMap, tag: &str) -> bool {
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(',').map(str::trim).any(|t| t == "*" || t == tag || t.strip_prefix("W/") == Some(tag)))
}

fn text(status: StatusCode, msg: String) -> Response {
    (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], msg).into_response()
}

/// `GET /v1/thresholds[?format=…&model=…&provider=…&chain=…]`.
pub async fn thresholds(State(s): State<HttpState>, Query(q): Query<ThresholdsQuery>, headers: HeaderMap) -> Response {
    let format = match q.format.as_deref().unwrap_or("json").parse::<Format>() {
        Ok(f) => f,
        Err(e) => return text(StatusCode::BAD_REQUEST, format!("format: {e}\n")),
    };
    let Some(doc) = s.snapshot.read().ok().and_then(|snap| snap.thresholds.clone()) else {
        return text(
            StatusCode::SERVICE_UNAVAILABLE,
            "no thresholds yet: the stored baselines are still being read after a start\n".into(),
        );
    };
    let doc = s.feed.stable(doc);
    let filter = Filter { model: q.model, provider: q.provider, chain: q.chain };
    let doc = match filter == Filter::default() {
        true => doc,
        false => match doc.filtered(&filter) {
            Ok(d) => Arc::new(d),
            Err(e) => return text(StatusCode::NOT_FOUND, format!("chain: {e}\n")),
        },
    };
    let body = match render(&doc, format) {
        Ok(b) => b,
        Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
    };
    let tag = etag(&body);
    let mut h = HeaderMap::new();
    let put = |h: &mut HeaderMap, k: header::HeaderName, v: String| {
        if let Ok(v) = HeaderValue::from_str(&v) {
            h.insert(k, v);
        }
    };
    put(&mut h, header::ETAG, tag.clone());
    put(&mut h, header::CACHE_CONTROL, format!("private, max-age={}", s.feed.max_age_s));
    if matches_etag(&headers, &tag) {
        return (StatusCode::NOT_MODIFIED, h).into_response();
    }
    put(&mut h, header::CONTENT_TYPE, format.content_type().to_string());
    if let Some(signer) = &s.feed.signer {
        put(&mut h, header::HeaderName::from_static(SIGNATURE_HEADER), signer.sign(&body));
        put(&mut h, header::HeaderName::from_static(KEY_HEADER), signer.public_key());
    }
    (StatusCode::OK, h, body).into_response()
}

/// `GET /v1/schema/{name}`: the JSON Schema of a document (`thresholds.json`, `litellm.json`, …).
pub async fn schema(Path(name): Path<String>) -> Response {
    match SCHEMAS.iter().find(|(n, _)| *n == name) {
        Some((_, body)) => ([(header::CONTENT_TYPE, "application/schema+json")], *body).into_response(),
        None => {
            let names: Vec<&str> = SCHEMAS.iter().map(|(n, _)| *n).collect();
            text(StatusCode::NOT_FOUND, format!("no schema {name:?} (known: {})\n", names.join(", ")))
        }
    }
}

/// `GET /v1/targets`, with what each polled provider's own status page says (`provider_status`).
/// Each target carries its adaptive `probe` plan (interval, mode, projected spend) and the
/// document the whole `probe_plan` (budget, spent, projected, over budget), when probing is cost-aware.
pub async fn targets(State(s): State<HttpState>) -> Response {
    let (targets, plan) =
        s.snapshot.read().map(|snap| (snap.targets.clone(), snap.probe_plan.clone())).unwrap_or_default();
    let providers: Vec<crate::vocab::provider_status::ProviderStatus> =
        s.provider_status.read().map(|p| p.providers.values().cloned().collect()).unwrap_or_default();
    let mut checks: std::collections::HashMap<String, Vec<serde_json::Value>> = Default::default();
    for run in s.golden.latest() {
        checks.entry(run.target().id()).or_default().push(check_view(&run));
    }
    let targets: Vec<serde_json::Value> = targets
        .into_iter()
        .map(|view| {
            let probe = plan.as_ref().and_then(|p| p.get(&view.key.target).cloned());
            let mut v = serde_json::to_value(&*view).unwrap_or(serde_json::Value::Null);
            if let (Some(obj), Some(probe)) = (v.as_object_mut(), probe) {
                obj.insert("probe".into(), serde_json::to_value(probe).unwrap_or(serde_json::Value::Null));
            }
            if let (Some(obj), Some(runs)) = (v.as_object_mut(), checks.remove(view.key.target.as_str())) {
                obj.insert("checks".into(), serde_json::Value::Array(runs));
            }
            v
        })
        .collect();
    let plan = plan.map(|p| {
        serde_json::json!({
            "at": p.at, "budget_usd": p.budget_usd, "spent_usd": p.spent_usd, "reserved_usd": p.reserved_usd,
            "projected_usd": p.projected_usd, "over_budget": p.over_budget,
        })
    });
    Json(serde_json::json!({ "targets": targets, "probe_plan": plan, "provider_status": providers })).into_response()
}

/// One golden check's latest run as `/v1/targets` shows it: never its prompt.
fn check_view(run: &crate::vocab::check::CheckRun) -> serde_json::Value {
    let s = &run.sample;
    serde_json::json!({
        "name": run.check, "verdict": run.verdict, "why": run.why, "answer": run.answer,
        "outcome": s.outcome.as_str(), "ttft_ms": s.ttft_ms, "total_ms": s.total_ms, "at": s.started_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::export::{build, BreakerParams, ExportParams};
    use chrono::TimeZone;

    fn doc(secs: i64, factor: f64) -> Arc<Thresholds> {
        let params = ExportParams {
            region: "r".into(),
            generated_at: chrono::Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).single().expect("time")
                + chrono::Duration::seconds(secs),
            probe_interval: std::time::Duration::from_secs(60),
            window: std::time::Duration::from_secs(86_400),
            failover: crate::decide::health::Failover { factor, provisional_min_samples: 30 },
            breaker: BreakerParams {
                consecutive_failures: 3,
                failure_window_s: 120,
                latency_trips: 2,
                open_for_s: 300,
                failover_factor: factor,
                failure_k: 3,
                failure_n: 3,
                rate_limit_backoff_s: 120,
                rate_limit_trips: 3,
            },
            chains: vec![],
            providers: Default::default(),
            ttft_timeout: std::time::Duration::from_secs(10),
            total_timeout: std::time::Duration::from_secs(10),
            credit: Default::default(),
            drills: vec![],
            capabilities: Default::default(),
        };
        Arc::new(build(&params, &[]))
    }

    #[test]
    fn an_unchanged_document_keeps_its_timestamps_for_one_probe_interval() {
        let feed = Feed { max_age_s: 60, ..Feed::default() };
        let first = feed.stable(doc(0, 2.0));
        assert!(Arc::ptr_eq(&feed.stable(doc(59, 2.0)), &first), "same data, same bytes, same ETag");
        let changed = feed.stable(doc(30, 3.0));
        assert_eq!(changed.generated_at, doc(30, 3.0).generated_at, "new data is served at once");
        let later = feed.stable(doc(91, 3.0));
        assert_eq!(later.generated_at, doc(91, 3.0).generated_at, "expires_at moves on every interval");
    }

    #[test]
    fn if_none_match_accepts_lists_weak_tags_and_star() {
        let tag = etag(b"{}");
        let mut h = HeaderMap::new();
        h.insert(header::IF_NONE_MATCH, HeaderValue::from_str(&format!("\"x\", W/{tag}")).expect("value"));
        assert!(matches_etag(&h, &tag));
        h.insert(header::IF_NONE_MATCH, HeaderValue::from_static("\"other\""));
        assert!(!matches_etag(&h, &tag));
        h.insert(header::IF_NONE_MATCH, HeaderValue::from_static("*"));
        assert!(matches_etag(&h, &tag));
    }
}
