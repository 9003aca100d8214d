//! `POST /-/reload`: the HTTP twin of SIGHUP. The request goes to the process's one reload
//! controller (`run::daemon`), which loads, validates and builds the new configuration exactly
//! as for the signal, and the answer says what came of it: applied, or refused with the key and
//! the reason. Behind the bearer token of `/v1/*` (`http.api_token`); without a token configured
//! the endpoint is closed, since a reload drains and restarts the daemon.

use super::HttpState;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use secrecy::ExposeSecret;
use serde::Serialize;
use subtle::ConstantTimeEq;
use tokio::sync::{mpsc, oneshot};

/// What came of one reload, as the controller reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum ReloadOutcome {
    /// The new configuration was built and replaces the running one (the old daemon drains now).
    Applied,
    /// The new configuration was refused; the running daemon carries on untouched.
    Refused {
        /// The key at fault (`http.listen`, `storage.data_dir`, `config`, …).
        key: String,
        /// Why.
        reason: String,
    },
    /// The daemon is stopping; nothing was reloaded.
    Stopping,
}

/// One request to reload, answered once the attempt it joined is decided.
#[derive(Debug)]
pub struct ReloadRequest {
    /// Where the outcome goes.
    pub reply: oneshot::Sender<ReloadOutcome>,
}

/// The controller's inbox for reload requests from HTTP.
pub type ReloadSender = mpsc::Sender<ReloadRequest>;

/// `POST /-/reload`: 200 applied, 422 refused, 503 stopping or no controller in this process,
/// 401 without the right bearer token, 403 when no token is configured.
pub async fn reload(State(s): State<HttpState>, headers: HeaderMap) -> Response {
    if let Some(refused) = admin_refusal(&s, &headers, "POST /-/reload") {
        return refused;
    }
    let outcome = match &s.reload {
        None => None,
        Some(tx) => {
            let (reply, answer) = oneshot::channel();
            match tx.send(ReloadRequest { reply }).await {
                Ok(()) => answer.await.ok(),
                Err(_) => None,
            }
        }
    };
    let outcome = outcome.unwrap_or(ReloadOutcome::Stopping);
    let status = match &outcome {
        ReloadOutcome::Applied => StatusCode::OK,
        ReloadOutcome::Refused { .. } => StatusCode::UNPROCESSABLE_ENTITY,
        ReloadOutcome::Stopping => StatusCode::SERVICE_UNAVAILABLE,
    };
    (status, Json(outcome)).into_response()
}

/// The bearer-token check of the admin endpoints (`/-/…`): the refusal to answer with, if any —
/// closed (403) without a configured token, 401 without the right one. `what` names the
/// endpoint in the refusal.
pub(super) fn admin_refusal(s: &HttpState, headers: &HeaderMap, what: &str) -> Option<Response> {
    let Some(token) = &s.api_token else {
        let why = format!("{what} needs a bearer token: set http.api_token (VIGIL_API_TOKEN or http.api_token_file)\n");
        return Some((StatusCode::FORBIDDEN, why).into_response());
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if !bool::from(given.as_bytes().ct_eq(token.expose_secret().as_bytes())) {
        let refused =
            (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, "Bearer")], "missing or wrong bearer token\n");
        return Some(refused.into_response());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_are_tagged_json() {
        let text = |o: &ReloadOutcome| serde_json::to_string(o).expect("json");
        assert_eq!(text(&ReloadOutcome::Applied), r#"{"outcome":"applied"}"#);
        let refused = ReloadOutcome::Refused { key: "http.listen".into(), reason: "in use".into() };
        assert_eq!(text(&refused), r#"{"outcome":"refused","key":"http.listen","reason":"in use"}"#);
        assert_eq!(text(&ReloadOutcome::Stopping), r#"{"outcome":"stopping"}"#);
    }
}
