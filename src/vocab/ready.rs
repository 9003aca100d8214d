//! Readiness and liveness: what `/readyz` asks of every part that can make the daemon unready,
//! and the heartbeats of the sample road.

use chrono::{DateTime, SecondsFormat, Utc};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

/// Something `/readyz` asks; `Err` carries the reason shown to the operator.
pub trait ReadyCheck: Send + Sync {
    /// Ready, or why not.
    fn ready(&self) -> Result<(), String>;
}

/// Last times the road moved, as milliseconds since the epoch (0: never).
#[derive(Debug)]
pub struct Liveness {
    started: DateTime<Utc>,
    interval: Duration,
    /// How long a sample may wait in the writer's batch before it is stored or spooled.
    batch_slack: Duration,
    processed: AtomicI64,
    kept: AtomicI64,
}

impl Liveness {
    /// Heartbeats for a road probing every `interval` whose writer holds a batch up to `batch_slack`.
    pub fn new(started: DateTime<Utc>, interval: Duration, batch_slack: Duration) -> Self {
        Liveness { started, interval, batch_slack, processed: AtomicI64::new(0), kept: AtomicI64::new(0) }
    }

    /// The pipeline finished with a sample.
    pub fn processed(&self, at: DateTime<Utc>) {
        self.processed.fetch_max(at.timestamp_millis(), Ordering::Relaxed);
    }

    /// The writer stored or spooled samples.
    pub fn kept(&self, at: DateTime<Utc>) {
        self.kept.fetch_max(at.timestamp_millis(), Ordering::Relaxed);
    }

    /// Ready unless the pipeline or the writer has been silent for two probe intervals (counted
    /// from start until the first beat); else which one and since when.
    pub fn check(&self, now: DateTime<Utc>) -> Result<(), String> {
        let allowed = chrono::Duration::from_std(self.interval * 2).unwrap_or(chrono::Duration::MAX);
        let slack = chrono::Duration::from_std(self.batch_slack).unwrap_or_default();
        let beat = |ms: i64| if ms == 0 { None } else { DateTime::<Utc>::from_timestamp_millis(ms) };
        let stale = |last: Option<DateTime<Utc>>, extra: chrono::Duration| {
            let since = last.unwrap_or(self.started);
            (now - since > allowed + extra).then_some((last, since))
        };
        let when = |t: DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::Secs, true);
        if let Some((last, since)) = stale(beat(self.processed.load(Ordering::Relaxed)), chrono::Duration::zero()) {
            return Err(match last {
                Some(_) => format!("no sample processed since {} (the pipeline is stalled)", when(since)),
                None => format!("no sample processed since start at {} (the pipeline is stalled)", when(since)),
            });
        }
        if let Some((last, since)) = stale(beat(self.kept.load(Ordering::Relaxed)), slack) {
            return Err(match last {
                Some(_) => format!("no sample stored or spooled since {} (the writer is stalled)", when(since)),
                None => format!("no sample stored or spooled since start at {} (the writer is stalled)", when(since)),
            });
        }
        Ok(())
    }
}

impl ReadyCheck for Liveness {
    fn ready(&self) -> Result<(), String> {
        self.check(Utc::now())
    }
}
