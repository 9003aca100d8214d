//! The one place the order of the stages lives: every sample is counted in the metrics, handed
//! to the store writer, then fed to baselines, breakers and alerts.

use crate::metrics::Metrics;
use crate::sample::Sample;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Consumes samples from the scheduler and fans them out in a fixed order.
pub struct Pipeline {
    metrics: Arc<Metrics>,
    store: Option<mpsc::Sender<Sample>>,
}

impl Pipeline {
    /// A pipeline feeding `metrics` and, when given, the store writer's channel.
    pub fn new(metrics: Arc<Metrics>, store: Option<mpsc::Sender<Sample>>) -> Self {
        Pipeline { metrics, store }
    }

    /// Processes one sample (the step tests drive directly).
    pub async fn process(&mut self, sample: Sample) {
        self.metrics.observe(&sample);
        tracing::info!(
            target = %sample.target, provider = %sample.target.provider, model = %sample.target.model,
            region = %sample.target.region, outcome = %sample.outcome, status = ?sample.status,
            ttfb_ms = ?sample.ttfb_ms.map(|v| v.round()), ttft_ms = ?sample.ttft_ms.map(|v| v.round()),
            error = sample.error.as_deref().unwrap_or(""), "sample"
        );
        if let Some(tx) = &self.store {
            // The writer spools when storage is down, so this only blocks if the writer itself is stuck.
            if tx.send(sample).await.is_err() {
                tracing::error!("store writer stopped; sample not stored");
            }
        }
    }

    /// Runs until the scheduler's channel closes (after shutdown has drained every probe).
    pub async fn run(mut self, mut rx: mpsc::Receiver<Sample>) {
        while let Some(sample) = rx.recv().await {
            self.process(sample).await;
        }
    }
}
