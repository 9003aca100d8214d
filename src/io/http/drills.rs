//! `/v1/drills`: failover drills through the API. `POST` starts one (`{"chain", "drop", "for"}`),
//! `GET` lists the running ones and those ended within a day, `DELETE /v1/drills/{id}` ends one
//! early. Starting and ending change what routers are told, so both need the bearer token and are
//! closed without one configured, like `/-/reload`; the list reads as the rest of `/v1/*`.

use super::reload::admin_refusal;
use super::HttpState;
use crate::decide::drill::{DrillError, DrillRequest};
use crate::io::drill_desk::DeskError;
use crate::vocab::drill::Drill;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::Utc;
use serde::{Deserialize, Serialize};

/// The body of `POST /v1/drills`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartBody {
    /// Chain name.
    pub chain: String,
    /// What to drop: a chain member as the config spells it, a target id, or a provider name.
    pub drop: String,
    /// How long, `10m` style (1m to 24h).
    #[serde(rename = "for")]
    pub for_: String,
}

/// One drill as the API shows it: the stored drill and whether it drops its target now.
#[derive(Debug, Serialize)]
pub struct DrillView {
    /// The stored drill.
    #[serde(flatten)]
    pub drill: Drill,
    /// Whether it drops its target now.
    pub active: bool,
}

fn view(d: Drill) -> DrillView {
    let active = d.active_at(Utc::now());
    DrillView { drill: d, active }
}

fn error(status: StatusCode, message: String) -> Response {
    (status, Json(serde_json::json!({ "error": message }))).into_response()
}

fn refused(e: DeskError) -> Response {
    let status = match &e {
        DeskError::Drill(DrillError::NoSuchDrill(_)) => StatusCode::NOT_FOUND,
        DeskError::Drill(DrillError::Ambiguous { .. }) => StatusCode::CONFLICT,
        DeskError::Drill(_) => StatusCode::UNPROCESSABLE_ENTITY,
        DeskError::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
    };
    error(status, e.to_string())
}

fn no_desk() -> Response {
    error(StatusCode::SERVICE_UNAVAILABLE, "drills need the daemon's store: none in this process".into())
}

/// `POST /v1/drills`: 201 with the drill, 422 naming what is wrong, 503 when storage fails.
pub async fn start(State(s): State<HttpState>, headers: HeaderMap, body: axum::body::Bytes) -> Response {
    if let Some(refused) = admin_refusal(&s, &headers, "POST /v1/drills") {
        return refused;
    }
    let Some(desk) = &s.drills else { return no_desk() };
    let body: StartBody = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => {
            return error(StatusCode::BAD_REQUEST, format!("body: {e}; expected {{\"chain\", \"drop\", \"for\"}}"))
        }
    };
    let duration = match crate::config::parse_duration("for", &body.for_) {
        Ok(d) => d,
        Err(e) => return error(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()),
    };
    let req = DrillRequest { chain: body.chain, target: body.drop, duration };
    match desk.start(&req, Utc::now()).await {
        Ok(d) => (StatusCode::CREATED, Json(serde_json::json!({ "drill": view(d) }))).into_response(),
        Err(e) => refused(e),
    }
}

/// `GET /v1/drills`: `{"drills": [...]}`, running ones and those ended within a day, oldest first.
pub async fn list(State(s): State<HttpState>) -> Response {
    let Some(desk) = &s.drills else { return no_desk() };
    match desk.list(Utc::now()).await {
        Ok(drills) => {
            let drills: Vec<DrillView> = drills.into_iter().map(view).collect();
            Json(serde_json::json!({ "drills": drills })).into_response()
        }
        Err(e) => refused(e),
    }
}

/// `DELETE /v1/drills/{id}` (the id or a prefix fitting one running drill): 200 with the ended
/// drill, 404 when no running drill has it, 409 when the prefix fits several.
pub async fn end(State(s): State<HttpState>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    if let Some(refused) = admin_refusal(&s, &headers, "DELETE /v1/drills") {
        return refused;
    }
    let Some(desk) = &s.drills else { return no_desk() };
    match desk.end(&id, Utc::now()).await {
        Ok(d) => Json(serde_json::json!({ "drill": view(d) })).into_response(),
        Err(e) => refused(e),
    }
}
