//! `POST /-/baselines/adopt?target=ID`: adopts the level a target's baseline has held out while
//! the target was in trouble, at once (what `baseline.adopt_after` does on its own). The request
//! goes to the pipeline, which owns the baselines; the answer carries the levels before and
//! after. Behind the bearer token like `/-/reload` (`vigil baselines adopt TARGET` calls it).

use super::reload::admin_refusal;
use super::HttpState;
use crate::decide::baseline::Adoption;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

/// What came of one request to adopt.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum AdoptOutcome {
    /// The held level is now the target's baseline.
    Adopted {
        /// The adoption, with both levels.
        adoption: Adoption,
    },
    /// Nothing is held for the target: it is not in trouble, or none of its held probes succeeded.
    NothingHeld {
        /// The target asked for.
        target: String,
    },
    /// No configured target of this region has that id.
    UnknownTarget {
        /// The target asked for.
        target: String,
    },
    /// The daemon is stopping (or this process runs no pipeline).
    Stopping,
}

/// One request to adopt a target's held level.
#[derive(Debug)]
pub struct AdoptRequest {
    /// Target id (`provider/model[@route]`).
    pub target: String,
    /// Where the outcome goes.
    pub reply: oneshot::Sender<AdoptOutcome>,
}

/// The pipeline's inbox for adopt requests from HTTP.
pub type AdoptSender = mpsc::Sender<AdoptRequest>;

/// The query string.
#[derive(Debug, Deserialize)]
pub struct AdoptQuery {
    target: String,
}

/// 200 adopted, 409 nothing held, 404 unknown target, 503 stopping; 401/403 as `/-/reload`.
pub async fn adopt(State(s): State<HttpState>, Query(q): Query<AdoptQuery>, headers: HeaderMap) -> Response {
    if let Some(refused) = admin_refusal(&s, &headers, "POST /-/baselines/adopt") {
        return refused;
    }
    let outcome = match &s.adopt {
        None => None,
        Some(tx) => {
            let (reply, answer) = oneshot::channel();
            match tx.send(AdoptRequest { target: q.target, reply }).await {
                Ok(()) => answer.await.ok(),
                Err(_) => None,
            }
        }
    };
    let outcome = outcome.unwrap_or(AdoptOutcome::Stopping);
    let status = match &outcome {
        AdoptOutcome::Adopted { .. } => StatusCode::OK,
        AdoptOutcome::NothingHeld { .. } => StatusCode::CONFLICT,
        AdoptOutcome::UnknownTarget { .. } => StatusCode::NOT_FOUND,
        AdoptOutcome::Stopping => StatusCode::SERVICE_UNAVAILABLE,
    };
    (status, Json(outcome)).into_response()
}
