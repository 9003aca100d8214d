//! `GET /v1/canary`: the latest canary run of each target (docs/CANARY.md), as the pipeline
//! published it; an empty list while the canary is off or has not run yet.

use super::HttpState;
use crate::vocab::canary::CanaryRun;
use crate::vocab::target::{Name, TargetKey};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::{DateTime, Utc};
use serde::Serialize;

/// One target's latest run as `/v1/canary` shows it.
#[derive(Debug, Serialize)]
pub struct CanaryView {
    /// Which target: `target`, `provider`, `model` (as configured), `route`.
    #[serde(flatten)]
    pub key: TargetKey,
    /// Region of this instance.
    pub region: Name,
    /// When the run started.
    pub started_at: DateTime<Utc>,
    /// How the probe ended.
    pub outcome: String,
    /// Exact-match score, 0..=1.
    pub score: f64,
    /// Questions answered exactly.
    pub correct: u32,
    /// Questions asked (0 for a failed run).
    pub total: u32,
    /// Fingerprint of the normalised answers.
    pub answers_fingerprint: String,
    /// The normalised answers.
    pub answers: Vec<String>,
    /// Output tokens of the run.
    pub output_tokens: Option<u32>,
    /// What the run cost.
    pub cost_usd: Option<f64>,
    /// The `model` field the provider echoed.
    pub reported_model: Option<String>,
    /// OpenAI's `system_fingerprint`.
    pub system_fingerprint: Option<String>,
    /// OpenRouter's upstream provider.
    pub upstream_provider: Option<String>,
    /// Mean log-probability per answer token, where returned.
    pub logprob_mean: Option<f64>,
}

impl From<&CanaryRun> for CanaryView {
    fn from(r: &CanaryRun) -> Self {
        CanaryView {
            key: TargetKey::from(&r.sample.target),
            region: r.sample.target.region.clone(),
            started_at: r.sample.started_at,
            outcome: r.sample.outcome.as_str().to_string(),
            score: r.score(),
            correct: r.correct,
            total: r.total,
            answers_fingerprint: r.answers_fingerprint.clone(),
            answers: r.answers.clone(),
            output_tokens: r.sample.output_tokens,
            cost_usd: r.sample.cost_usd,
            reported_model: r.identity.model.clone(),
            system_fingerprint: r.identity.system_fingerprint.clone(),
            upstream_provider: r.identity.upstream.clone(),
            logprob_mean: r.logprobs.and_then(|l| l.mean()),
        }
    }
}

/// `GET /v1/canary`.
pub async fn latest(State(s): State<HttpState>) -> Response {
    let runs: Vec<CanaryView> = s.canary.latest().iter().map(CanaryView::from).collect();
    Json(serde_json::json!({ "runs": runs })).into_response()
}
