//! Wiring: `App::build(Config)` opens the listener, store and prober; `run_until_stopped`
//! runs scheduler, pipeline and HTTP until the shutdown token fires, then drains.

use crate::config::Config;
use crate::http::{router, HttpState, ReadyCheck, SchedulerRunning};
use crate::metrics::Metrics;
use crate::pipeline::Pipeline;
use crate::probe::{Planned, Prober};
use crate::scheduler::{Scheduler, SchedulerError};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Failures that stop the daemon.
#[derive(Debug, Error)]
pub enum AppError {
    /// Nothing is configured to probe.
    #[error("nothing to probe: no provider has its key set (set e.g. OPENROUTER_API_KEY, or run with --demo)")]
    NothingToProbe,
    /// The HTTP listener could not be bound.
    #[error("http.listen {addr}: {source}")]
    Bind {
        /// Address from config.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The metrics registry refused a metric (a programming error).
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    /// The scheduler failed.
    #[error(transparent)]
    Scheduler(#[from] SchedulerError),
    /// Serving HTTP failed.
    #[error("http server: {0}")]
    Serve(std::io::Error),
}

/// Extra set-up the command line (or a test) chooses.
#[derive(Default)]
pub struct AppOptions {
    /// Extra TLS roots the prober trusts (tests' self-signed stand-ins).
    pub extra_roots: Vec<rustls::pki_types::CertificateDer<'static>>,
}

/// A built, not yet running, daemon.
pub struct App {
    config: Config,
    listener: TcpListener,
    metrics: Arc<Metrics>,
    scheduler: Scheduler,
}

impl App {
    /// Binds the listener and prepares every stage.
    pub async fn build(config: Config, opts: AppOptions) -> Result<App, AppError> {
        let plans = Planned::all(&config.providers, &config.region);
        if plans.is_empty() {
            return Err(AppError::NothingToProbe);
        }
        let listener = TcpListener::bind(config.http.listen)
            .await
            .map_err(|source| AppError::Bind { addr: config.http.listen, source })?;
        let metrics = Arc::new(Metrics::new(&config.region)?);
        let prober = Prober::new(config.probe.clone(), &opts.extra_roots);
        let scheduler = Scheduler::new(plans, prober, config.probe.interval, config.probe.concurrency, metrics.clone());
        Ok(App { config, listener, metrics, scheduler })
    }

    /// The address the HTTP server listens on (port 0 in config picks a free one).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// Runs until `shutdown` fires, then drains in-flight probes and stops.
    pub async fn run_until_stopped(self, shutdown: CancellationToken) -> Result<(), AppError> {
        let App { config, listener, metrics, scheduler } = self;
        let running = Arc::new(SchedulerRunning::default());
        let checks: Vec<Arc<dyn ReadyCheck>> = vec![running.clone()];
        let app = router(HttpState { metrics: metrics.clone(), checks });
        let server_stop = shutdown.clone();
        let server = tokio::spawn(async move {
            axum::serve(listener, app).with_graceful_shutdown(async move { server_stop.cancelled().await }).await
        });

        let (tx, rx) = mpsc::channel(16_384);
        let pipeline = tokio::spawn(Pipeline::new(metrics, None).run(rx));
        tracing::info!(region = %config.region, targets = scheduler.len(), "vigil running");
        running.0.store(true, Ordering::Release);
        let result = scheduler.run(tx, shutdown.clone()).await;
        running.0.store(false, Ordering::Release);
        let _ = pipeline.await;
        shutdown.cancel();
        match server.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(AppError::Serve(e)),
            Err(e) => return Err(AppError::Serve(std::io::Error::other(e))),
        }
        result?;
        tracing::info!("stopped cleanly");
        Ok(())
    }
}
