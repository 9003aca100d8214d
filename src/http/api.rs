//! `/v1/*`: the router export and target explanations, behind an optional bearer token.

use super::HttpState;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use secrecy::ExposeSecret;
use subtle::ConstantTimeEq;

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

/// `GET /v1/thresholds`.
pub async fn thresholds(State(s): State<HttpState>) -> Response {
    let doc = s.snapshot.read().ok().and_then(|snap| snap.thresholds.clone());
    match doc {
        Some(d) => Json(d).into_response(),
        None => {
            (StatusCode::SERVICE_UNAVAILABLE, "no thresholds yet: the first round is still running\n").into_response()
        }
    }
}

/// `GET /v1/targets`.
pub async fn targets(State(s): State<HttpState>) -> Response {
    let targets = s.snapshot.read().map(|snap| snap.targets.clone()).unwrap_or_default();
    Json(serde_json::json!({ "targets": targets })).into_response()
}
