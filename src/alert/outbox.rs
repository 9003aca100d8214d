//! Durable delivery: notifications become outbox items in storage (one per channel), and a
//! worker sends due items, marks them delivered, or reschedules them with exponential backoff
//! and jitter (never sooner than `Retry-After`) until `alerts.delivery_deadline`, then abandons
//! them with the reason. Item ids are derived from the notification, so enqueuing the same
//! notification twice stores it once, and they are the idempotency key receivers see.

use super::notifier::{DeliveryError, Notifier};
use super::Notification;
use crate::store::{OutboxItem, Store, StoreError};
use chrono::{DateTime, Utc};
use futures::future::join_all;
use rand::Rng;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// Delivery tuning.
#[derive(Debug, Clone)]
pub struct OutboxConfig {
    /// Give up on an item this long after it was enqueued (`alerts.delivery_deadline`).
    pub deadline: Duration,
    /// First retry delay; doubles per attempt.
    pub base_backoff: Duration,
    /// Longest retry delay.
    pub max_backoff: Duration,
    /// Items taken per step.
    pub batch: i64,
    /// Sleep of the `run` loop between steps when idle.
    pub poll_every: Duration,
    /// Deliver only this region's items (instances sharing a database); `None` delivers all.
    pub region: Option<String>,
}

impl OutboxConfig {
    /// Defaults with the configured deadline.
    pub fn with_deadline(deadline: Duration) -> Self {
        OutboxConfig {
            deadline,
            base_backoff: Duration::from_secs(5),
            max_backoff: Duration::from_secs(15 * 60),
            batch: 100,
            poll_every: Duration::from_secs(2),
            region: None,
        }
    }
}

/// Alert delivery counters, read by the metrics layer.
#[derive(Debug, Default)]
pub struct AlertCounters {
    sent: Mutex<BTreeMap<(String, String), u64>>,
    failures: Mutex<BTreeMap<String, u64>>,
    abandoned: Mutex<BTreeMap<String, u64>>,
    depth: AtomicI64,
}

/// A copy of the counters at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CountersSnapshot {
    /// Alerts delivered per (kind, channel): `vigil_alerts_total{kind,channel}`.
    pub sent: BTreeMap<(String, String), u64>,
    /// Failed attempts per channel: `vigil_alert_delivery_failures_total{channel}`.
    pub delivery_failures: BTreeMap<String, u64>,
    /// Items given up per channel.
    pub abandoned: BTreeMap<String, u64>,
    /// Undelivered items at the last step.
    pub outbox_depth: i64,
}

fn bump<K: Ord>(m: &Mutex<BTreeMap<K, u64>>, k: K) {
    // A poisoned lock still holds valid counts.
    let mut g = m.lock().unwrap_or_else(|e| e.into_inner());
    *g.entry(k).or_default() += 1;
}

impl AlertCounters {
    /// Current values.
    pub fn snapshot(&self) -> CountersSnapshot {
        let copy = |m: &Mutex<BTreeMap<String, u64>>| m.lock().unwrap_or_else(|e| e.into_inner()).clone();
        CountersSnapshot {
            sent: self.sent.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            delivery_failures: copy(&self.failures),
            abandoned: copy(&self.abandoned),
            outbox_depth: self.depth.load(Ordering::Relaxed),
        }
    }
}

/// What one delivery step did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeliveryReport {
    /// Items delivered.
    pub delivered: usize,
    /// Items rescheduled after a retryable failure.
    pub retried: usize,
    /// Items given up (permanent failure, deadline passed, channel gone).
    pub abandoned: usize,
    /// Due items left for the next step (a channel failed earlier in this step).
    pub deferred: usize,
    /// Undelivered items in the outbox after the step.
    pub depth: i64,
}

/// The outbox item id for `n` on `channel`: stable, so re-enqueuing is harmless.
pub fn item_id(n: &Notification, channel: &str) -> Uuid {
    let digest = Sha256::digest(format!("{}|{channel}", n.key).as_bytes());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_random_bytes(bytes).into_uuid()
}

/// One outbox item per (notification, channel).
pub fn items_for(notifications: &[Notification], channels: &[String], now: DateTime<Utc>) -> Vec<OutboxItem> {
    let mut out = Vec::new();
    for n in notifications {
        let payload = match serde_json::to_value(n) {
            Ok(p) => p,
            Err(e) => {
                tracing::error!(error = %e, "notification not serializable; dropped");
                continue;
            }
        };
        let dedup_key = n.incident_key();
        for c in channels {
            out.push(OutboxItem {
                id: item_id(n, c),
                region: n.region.clone(),
                channel: c.clone(),
                kind: n.primary_kind().as_str().to_string(),
                dedup_key: dedup_key.clone(),
                payload: payload.clone(),
                created_at: now,
                next_attempt_at: now,
                attempts: 0,
                last_error: None,
            });
        }
    }
    out
}

/// Writes the notifications to the outbox for every channel.
pub async fn enqueue(
    store: &dyn Store,
    notifications: &[Notification],
    channels: &[String],
    now: DateTime<Utc>,
) -> Result<usize, StoreError> {
    let items = items_for(notifications, channels, now);
    if !items.is_empty() {
        store.enqueue(&items).await?;
    }
    Ok(items.len())
}

/// Backoff before attempt `attempts + 1`: base × 2^attempts, capped, with jitter in [½, 1].
pub fn backoff(cfg: &OutboxConfig, attempts: i32) -> Duration {
    let exp = cfg.base_backoff.saturating_mul(2u32.saturating_pow(attempts.clamp(0, 30) as u32));
    let capped = exp.min(cfg.max_backoff);
    let jitter = rand::thread_rng().gen_range(0.5..=1.0);
    capped.mul_f64(jitter)
}

enum Outcome {
    Delivered,
    Retried,
    Abandoned,
}

/// The delivery worker.
pub struct Outbox {
    store: Arc<dyn Store>,
    notifiers: BTreeMap<String, Arc<dyn Notifier>>,
    cfg: OutboxConfig,
    counters: Arc<AlertCounters>,
}

impl Outbox {
    /// A worker over `store` sending through `notifiers` (matched by name).
    pub fn new(store: Arc<dyn Store>, notifiers: Vec<Arc<dyn Notifier>>, cfg: OutboxConfig) -> Self {
        let notifiers = notifiers.into_iter().map(|n| (n.name().to_string(), n)).collect();
        Outbox { store, notifiers, cfg, counters: Arc::new(AlertCounters::default()) }
    }

    /// Channel names, for `enqueue`.
    pub fn channels(&self) -> Vec<String> {
        self.notifiers.keys().cloned().collect()
    }

    /// Shared counters for metrics.
    pub fn counters(&self) -> Arc<AlertCounters> {
        Arc::clone(&self.counters)
    }

    /// One step: sends every item due at `now` (channels in parallel, each channel in order).
    pub async fn deliver_pending(&self, now: DateTime<Utc>) -> Result<DeliveryReport, StoreError> {
        let due = self.store.due(self.cfg.region.as_deref(), now, self.cfg.batch).await?;
        let mut per_channel: BTreeMap<String, Vec<OutboxItem>> = BTreeMap::new();
        for item in due {
            per_channel.entry(item.channel.clone()).or_default().push(item);
        }
        let results = join_all(per_channel.into_iter().map(|(c, items)| self.deliver_channel(c, items, now))).await;
        let mut report = DeliveryReport::default();
        for r in results {
            let (outcomes, deferred) = r?;
            report.deferred += deferred;
            for o in outcomes {
                match o {
                    Outcome::Delivered => report.delivered += 1,
                    Outcome::Retried => report.retried += 1,
                    Outcome::Abandoned => report.abandoned += 1,
                }
            }
        }
        report.depth = self.store.outbox_depth().await?;
        self.counters.depth.store(report.depth, Ordering::Relaxed);
        Ok(report)
    }

    async fn deliver_channel(
        &self,
        channel: String,
        items: Vec<OutboxItem>,
        now: DateTime<Utc>,
    ) -> Result<(Vec<Outcome>, usize), StoreError> {
        let mut outcomes = Vec::new();
        let total = items.len();
        for item in items {
            let o = self.deliver_one(&channel, item, now).await?;
            let failed = matches!(o, Outcome::Retried);
            outcomes.push(o);
            // A channel that just failed would most likely fail again: keep order, try later.
            if failed {
                break;
            }
        }
        let deferred = total - outcomes.len();
        Ok((outcomes, deferred))
    }

    async fn abandon(&self, item: &OutboxItem, now: DateTime<Utc>, reason: &str) -> Result<Outcome, StoreError> {
        tracing::error!(channel = %item.channel, kind = %item.kind, dedup_key = %item.dedup_key, id = %item.id,
            attempts = item.attempts + 1, error = %reason, "alert delivery abandoned");
        self.store.mark_abandoned(item.id, now, reason).await?;
        bump(&self.counters.abandoned, item.channel.clone());
        Ok(Outcome::Abandoned)
    }

    async fn deliver_one(&self, channel: &str, item: OutboxItem, now: DateTime<Utc>) -> Result<Outcome, StoreError> {
        let Some(notifier) = self.notifiers.get(channel) else {
            return self.abandon(&item, now, &format!("channel {channel} is no longer configured")).await;
        };
        let n: Notification = match serde_json::from_value(item.payload.clone()) {
            Ok(n) => n,
            Err(e) => return self.abandon(&item, now, &format!("unreadable payload: {e}")).await,
        };
        match notifier.send(&n, item.id).await {
            Ok(()) => {
                self.store.mark_delivered(item.id, now).await?;
                for a in &n.alerts {
                    bump(&self.counters.sent, (a.kind.as_str().to_string(), channel.to_string()));
                }
                tracing::info!(channel, kind = %item.kind, dedup_key = %item.dedup_key, attempts = item.attempts + 1, "alert delivered");
                Ok(Outcome::Delivered)
            }
            Err(DeliveryError::Permanent { message }) => {
                bump(&self.counters.failures, channel.to_string());
                self.abandon(&item, now, &message).await
            }
            Err(DeliveryError::Retryable { retry_after, message }) => {
                bump(&self.counters.failures, channel.to_string());
                let deadline = item.created_at
                    + chrono::Duration::from_std(self.cfg.deadline).unwrap_or(chrono::Duration::days(1));
                if now >= deadline {
                    return self.abandon(&item, now, &format!("delivery deadline passed; last error: {message}")).await;
                }
                let wait = backoff(&self.cfg, item.attempts).max(retry_after.unwrap_or(Duration::ZERO));
                let next = now + chrono::Duration::from_std(wait).unwrap_or(chrono::Duration::hours(1));
                // One last try at the deadline rather than giving up early.
                let next = next.min(deadline);
                tracing::warn!(channel, kind = %item.kind, dedup_key = %item.dedup_key, attempts = item.attempts + 1,
                    retry_in_s = (next - now).num_seconds(), error = %message, "alert delivery failed; will retry");
                self.store.mark_retry(item.id, next, &message).await?;
                Ok(Outcome::Retried)
            }
        }
    }

    /// Runs steps until `shutdown` is cancelled; a storage error is logged and retried next step.
    pub async fn run(&self, shutdown: CancellationToken) {
        loop {
            let busy = match self.deliver_pending(Utc::now()).await {
                Ok(r) => r.delivered + r.abandoned > 0 && r.deferred == 0 && r.retried == 0,
                Err(e) => {
                    tracing::warn!(error = %e, "outbox step failed; retrying");
                    false
                }
            };
            let pause = if busy { Duration::ZERO } else { self.cfg.poll_every };
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_within_jitter_and_caps() {
        let cfg = OutboxConfig::with_deadline(Duration::from_secs(86400));
        for attempts in 0..12 {
            let full = cfg.base_backoff.saturating_mul(1 << attempts).min(cfg.max_backoff);
            let b = backoff(&cfg, attempts);
            assert!(b >= full / 2 && b <= full, "attempt {attempts}: {b:?} vs {full:?}");
        }
    }
}
