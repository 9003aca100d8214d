//! The HTTP surface (axum): `/metrics`, `/healthz`, `/readyz`, the `/v1` API and the status
//! page. Handlers only read shared snapshots; nothing here drives probes.

pub mod adopt;
pub mod api;
pub(crate) mod canary;
pub mod drills;
pub mod reload;
pub mod server;
mod status_data;
mod status_html;
pub mod status_page;
pub(crate) mod trend;
pub mod web;

use crate::decide::snapshot::SharedSnapshot;
use crate::io::metrics::Metrics;
use crate::io::store::WriterHealth;
use crate::vocab::ready::ReadyCheck;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use secrecy::SecretString;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

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

impl ReadyCheck for crate::io::store::link::LinkHealth {
    fn ready(&self) -> Result<(), String> {
        self.ready_at(chrono::Utc::now())
    }
}

impl ReadyCheck for WriterHealth {
    fn ready(&self) -> Result<(), String> {
        WriterHealth::ready(self)
    }
}

/// What the handlers read.
#[derive(Clone)]
pub struct HttpState {
    /// Prometheus registry.
    pub metrics: Arc<Metrics>,
    /// Readiness conditions, all of which must hold.
    pub checks: Vec<Arc<dyn ReadyCheck>>,
    /// The store writer's counters, copied into gauges at scrape time.
    pub writer: Option<Arc<WriterHealth>>,
    /// The storage link's spool depth, likewise.
    pub link: Option<Arc<crate::io::store::link::LinkHealth>>,
    /// Latest router export and target explanations.
    pub snapshot: SharedSnapshot,
    /// Bearer token `/v1/*` require, when set.
    pub api_token: Option<SecretString>,
    /// What `GET /` needs beyond the snapshot (404 when absent).
    pub status: Option<Arc<status_page::StatusPage>>,
    /// Signing and caching of the router export.
    pub feed: Arc<api::Feed>,
    /// What the providers' own status pages say (empty when none is polled).
    pub provider_status: crate::vocab::provider_status::SharedProviderStatus,
    /// The latest canary run of each target (empty while the canary is off).
    pub canary: crate::vocab::canary::SharedCanary,
    /// The latest run of each golden check (empty without `[[provider.check]]`).
    pub golden: crate::vocab::check::SharedChecks,
    /// Where `POST /-/reload` sends its request (`None`: no reload controller in this process).
    pub reload: Option<reload::ReloadSender>,
    /// Where `POST /-/baselines/adopt` sends its request (`None`: no pipeline in this process).
    pub adopt: Option<adopt::AdoptSender>,
    /// Where `/v1/drills` starts, lists and ends drills (`None`: no store in this process).
    pub drills: Option<Arc<crate::io::drill_desk::DrillDesk>>,
}

/// The router; tests call it without a socket.
pub fn router(state: HttpState) -> Router {
    let v1 = Router::new()
        .route("/v1/thresholds", get(api::thresholds))
        .route("/v1/targets", get(api::targets))
        .route("/v1/schema/{name}", get(api::schema))
        .route("/v1/canary", get(canary::latest))
        .route("/v1/drills", get(drills::list).post(drills::start))
        .route("/v1/drills/{id}", axum::routing::delete(drills::end))
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), api::require_token));
    Router::new()
        .merge(v1)
        .route("/", get(status_page::page))
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/-/reload", post(reload::reload))
        .route("/-/baselines/adopt", post(adopt::adopt))
        .with_state(state)
}

async fn metrics(State(s): State<HttpState>, headers: axum::http::HeaderMap) -> Response {
    if let Some(w) = &s.writer {
        s.metrics.set_spooled(w.spooled());
        s.metrics.set_stored(w.written());
    }
    if let Some(l) = &s.link {
        s.metrics.set_records_spooled(l.spooled());
    }
    let content_type = (header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8");
    if accepts_gzip(&headers) {
        if let Some(body) = s.metrics.render_gzip() {
            return ([content_type, (header::CONTENT_ENCODING, "gzip"), (header::VARY, "Accept-Encoding")], body)
                .into_response();
        }
    }
    ([content_type, (header::VARY, "Accept-Encoding")], s.metrics.render()).into_response()
}

/// True when `Accept-Encoding` lists gzip with a non-zero weight (Prometheus always sends it).
fn accepts_gzip(headers: &axum::http::HeaderMap) -> bool {
    headers.get_all(header::ACCEPT_ENCODING).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(',')).any(
        |item| {
            let mut parts = item.split(';');
            let coding = parts.next().unwrap_or("").trim();
            let zero = parts.any(|p| matches!(p.trim(), "q=0" | "q=0.0" | "q=0.00" | "q=0.000"));
            (coding.eq_ignore_ascii_case("gzip") || coding == "*") && !zero
        },
    )
}

async fn readyz(State(s): State<HttpState>) -> Response {
    let reasons: Vec<String> = s.checks.iter().filter_map(|c| c.ready().err()).collect();
    if reasons.is_empty() {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {}\n", reasons.join("; "))).into_response()
    }
}
