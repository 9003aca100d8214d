//! The HTTP surface (axum): `/metrics`, `/healthz`, `/readyz`, and later the `/v1` API and the
//! status page. Handlers only read shared snapshots; nothing here drives probes.

use crate::metrics::Metrics;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Something `/readyz` asks; `Err` carries the reason shown to the operator.
pub trait ReadyCheck: Send + Sync {
    /// Ready, or why not.
    fn ready(&self) -> Result<(), String>;
}

/// Whether the scheduler is running (set by the app).
#[derive(Debug, Default)]
pub struct SchedulerRunning(pub AtomicBool);

impl ReadyCheck for SchedulerRunning {
    fn ready(&self) -> Result<(), String> {
        if self.0.load(Ordering::Acquire) {
            Ok(())
        } else {
            Err("scheduler is not running".into())
        }
    }
}

/// What the handlers read.
#[derive(Clone)]
pub struct HttpState {
    /// Prometheus registry.
    pub metrics: Arc<Metrics>,
    /// Readiness conditions, all of which must hold.
    pub checks: Vec<Arc<dyn ReadyCheck>>,
}

/// The router; tests call it without a socket.
pub fn router(state: HttpState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(state)
}

async fn metrics(State(s): State<HttpState>) -> Response {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], s.metrics.render()).into_response()
}

async fn readyz(State(s): State<HttpState>) -> Response {
    let reasons: Vec<String> = s.checks.iter().filter_map(|c| c.ready().err()).collect();
    if reasons.is_empty() {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {}\n", reasons.join("; "))).into_response()
    }
}
