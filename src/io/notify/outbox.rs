//! Durable delivery: notifications become outbox items in storage (one per channel), and a
//! worker sends due items, marks them delivered, or reschedules them with exponential backoff
//! and jitter (never sooner than `Retry-After`) until `alerts.delivery_deadline`, then abandons
//! them with the reason. Item ids are derived from the notification, so enqueuing the same
//! notification twice stores it once, and they are the idempotency key receivers see. Each
//! channel is delivered on its own loop, in order: a hung or slow channel holds back only its
//! own items (up to its timeout, then by its own backoff), never another channel's page.
//!
//! Shared incidents (one target or provider, the same key in every region) are paged once for
//! all regions sharing the database: before sending, the worker records its region's sighting
//! and claims the incident's lease (insert when absent, take over when expired, renew when held).
//! Only the owner sends, saying "in N of M regions"; the others only record that they see it.
//! Leases and sightings are renewed every step while the incident keeps firing here, so when
//! the owner dies another region takes over within one lease (≈ one probe interval). The
//! resolve goes out once no other region's fresh sighting is still firing. With one region
//! (or SQLite on one machine) the region always owns its incidents: it behaves as before.

use super::notifier::DeliveryError;
use super::notifier::Notifier;
use crate::decide::alert::AlertStatus;
use crate::decide::alert::Notification;
use crate::decide::alert::Scope;
use crate::decide::alert::Seen;
use crate::io::metrics::Metrics;
use crate::io::store::{OutboxStore, StoreError};
use crate::vocab::records::OutboxItem;
use chrono::{DateTime, Utc};
use futures::future::join_all;
use rand::RngExt;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
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
    /// How long an incident lease (and a sighting) holds without renewal: one probe interval plus a margin.
    pub lease_ttl: Duration,
}

/// The lease length for a probe interval: the interval plus a margin for one late step.
pub fn lease_ttl_for(probe_interval: Duration) -> Duration {
    probe_interval + (probe_interval / 4).max(Duration::from_secs(5))
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
            lease_ttl: lease_ttl_for(Duration::from_secs(60)),
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
    store: &dyn OutboxStore,
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
    let jitter = rand::rng().random_range(0.5..=1.0);
    capped.mul_f64(jitter)
}

enum Outcome {
    Delivered,
    Retried,
    Abandoned,
}

/// A shared incident this worker's region sees firing: its sighting and lease are renewed each step.
#[derive(Debug, Clone)]
struct Watch {
    region: String,
    owned: bool,
}

/// What the lease says about one notification.
enum Lease {
    /// This region pages: send, with the count of regions.
    Send(Option<Seen>),
    /// Another region pages (or still fires): record, send nothing.
    Quiet(String),
    /// The owner is resolving at the same moment: look again next step.
    Later(String),
}

/// The delivery worker.
pub struct Outbox {
    store: Arc<dyn OutboxStore>,
    notifiers: BTreeMap<String, Arc<dyn Notifier>>,
    cfg: OutboxConfig,
    /// Where sends, failed attempts, abandoned items and the depth are counted as they happen.
    metrics: Arc<Metrics>,
    watching: Mutex<BTreeMap<String, Watch>>,
}

impl Outbox {
    /// A worker over `store` sending through `notifiers` (matched by name), counting into
    /// `metrics`; every channel's counters exist at zero from here on.
    pub fn new(
        store: Arc<dyn OutboxStore>,
        notifiers: Vec<Arc<dyn Notifier>>,
        cfg: OutboxConfig,
        metrics: Arc<Metrics>,
    ) -> Self {
        let notifiers: BTreeMap<String, Arc<dyn Notifier>> =
            notifiers.into_iter().map(|n| (n.name().to_string(), n)).collect();
        metrics.register_alert_channels(&notifiers.keys().cloned().collect::<Vec<_>>());
        Outbox { store, notifiers, cfg, metrics, watching: Mutex::new(BTreeMap::new()) }
    }

    /// Channel names, for `enqueue`.
    pub fn channels(&self) -> Vec<String> {
        self.notifiers.keys().cloned().collect()
    }

    /// Shared incidents whose lease this worker holds now.
    #[cfg(any(test, feature = "test-support"))]
    pub fn owned_incidents(&self) -> Vec<String> {
        let w = self.watching.lock().unwrap_or_else(|e| e.into_inner());
        w.iter().filter(|(_, v)| v.owned).map(|(k, _)| k.clone()).collect()
    }

    fn expires(&self, now: DateTime<Utc>) -> DateTime<Utc> {
        now + chrono::Duration::from_std(self.cfg.lease_ttl).unwrap_or(chrono::Duration::seconds(75))
    }

    /// Renews sightings and leases of the shared incidents still firing here; takes over the
    /// lease of an incident whose owner stopped renewing.
    pub async fn renew(&self, now: DateTime<Utc>) -> Result<(), StoreError> {
        let watching: Vec<(String, Watch)> = self
            .watching
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for (incident, w) in watching {
            self.store.record_sighting(&incident, &w.region, true, now).await?;
            let owner = self.store.claim_incident(&incident, &w.region, now, self.expires(now)).await?;
            let owned = owner == w.region;
            if owned && !w.owned {
                tracing::info!(incident = %incident, region = %w.region, "took over the incident's lease: its owner stopped renewing");
            }
            let mut g = self.watching.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(x) = g.get_mut(&incident) {
                x.owned = owned;
            }
        }
        Ok(())
    }

    /// Decides whether this region sends a shared incident's message, recording its sighting.
    async fn lease(
        &self,
        n: &Notification,
        region: &str,
        attempts: i32,
        now: DateTime<Utc>,
    ) -> Result<Lease, StoreError> {
        let incident = n.incident_key();
        let firing = n.status == AlertStatus::Firing;
        if !firing && attempts > 0 && !self.store.sightings(&incident).await?.iter().any(|s| s.region == region) {
            // Our row is gone: another region's resolve went out and closed the incident.
            return Ok(Lease::Quiet("closed by another region's resolve".into()));
        }
        self.store.record_sighting(&incident, region, firing, now).await?;
        let owner = self.store.claim_incident(&incident, region, now, self.expires(now)).await?;
        let owned = owner == region;
        {
            let mut g = self.watching.lock().unwrap_or_else(|e| e.into_inner());
            if firing {
                g.insert(incident.clone(), Watch { region: region.to_string(), owned });
            } else {
                g.remove(&incident);
            }
        }
        let ttl = chrono::Duration::from_std(self.cfg.lease_ttl).unwrap_or(chrono::Duration::seconds(75));
        let all = self.store.sightings(&incident).await?;
        if !owned {
            let owner_firing = all.iter().any(|s| s.region == owner && s.firing && now - s.updated_at <= ttl);
            if firing || owner_firing {
                return Ok(Lease::Quiet(format!("owned by region {owner}; sighting recorded")));
            }
            // The owner is clearing too: whichever of us finds the lease free sends the one resolve.
            return Ok(Lease::Later(format!("region {owner} holds the lease while clearing too")));
        }
        // A region whose sighting went stale (it stopped renewing) no longer counts as firing.
        let fresh: Vec<_> = all.iter().filter(|s| s.region == region || now - s.updated_at <= ttl).collect();
        // Regions that opened it here, or that the scope (their published status) says see it.
        let (scope_affected, probing) = n
            .alerts
            .iter()
            .filter_map(|a| match a.scope {
                Scope::Global { affected, regions } => Some((affected, regions)),
                Scope::Regional => None,
            })
            .max()
            .unwrap_or((1, 1));
        let affected = (fresh.iter().filter(|s| s.firing).count() as u32).max(scope_affected);
        let known = n.seen.map_or(1, |s| s.regions);
        let regions = probing.max(known).max(all.len() as u32).max(affected);
        if firing {
            return Ok(Lease::Send(Some(Seen { affected, regions })));
        }
        let still: Vec<&str> =
            fresh.iter().filter(|s| s.firing && s.region != region).map(|s| s.region.as_str()).collect();
        if !still.is_empty() {
            // Another region still sees it: hand the lease to it; its resolve closes the incident.
            self.store.release_incident(&incident, region).await?;
            return Ok(Lease::Quiet(format!("still firing in {}; the resolve waits for them", still.join(", "))));
        }
        Ok(Lease::Send(Some(Seen { affected: 0, regions })))
    }

    /// One step of every channel at once (tests step the worker with it; the daemon runs
    /// [`Outbox::run`], where each channel steps on its own): renews leases, sends every item
    /// due at `now` (channels in parallel, each channel in order), gives up on items of channels
    /// no longer configured.
    pub async fn deliver_pending(&self, now: DateTime<Utc>) -> Result<DeliveryReport, StoreError> {
        self.renew(now).await?;
        let results = join_all(self.notifiers.iter().map(|(name, n)| self.channel_step(name, n, now))).await;
        let mut report = DeliveryReport { abandoned: self.abandon_orphans(now).await?, ..DeliveryReport::default() };
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
        self.metrics.set_outbox_depth(report.depth);
        Ok(report)
    }

    /// One channel's step: its re-sends, then its due items in order. Only this channel's
    /// timeouts bound it; no other channel waits for it.
    async fn channel_step(
        &self,
        name: &str,
        notifier: &Arc<dyn Notifier>,
        now: DateTime<Utc>,
    ) -> Result<(Vec<Outcome>, usize), StoreError> {
        if let Err(e) = notifier.tick(now).await {
            self.metrics.delivery_failed(name);
            tracing::warn!(channel = %name, error = %e, "channel re-send failed; will retry next step");
        }
        let due = self.store.due(self.cfg.region.as_deref(), Some(name), now, self.cfg.batch).await?;
        self.deliver_channel(name.to_string(), due, now).await
    }

    /// Gives up on due items of channels that are no longer configured; how many.
    async fn abandon_orphans(&self, now: DateTime<Utc>) -> Result<usize, StoreError> {
        let region = self.cfg.region.as_deref();
        let mut abandoned = 0;
        for channel in self.store.due_channels(region, now).await? {
            if self.notifiers.contains_key(&channel) {
                continue;
            }
            for item in self.store.due(region, Some(&channel), now, self.cfg.batch).await? {
                self.abandon(&item, now, &format!("channel {channel} is no longer configured")).await?;
                abandoned += 1;
            }
        }
        Ok(abandoned)
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
        self.metrics.alert_abandoned(&item.channel);
        Ok(Outcome::Abandoned)
    }

    async fn deliver_one(&self, channel: &str, item: OutboxItem, now: DateTime<Utc>) -> Result<Outcome, StoreError> {
        let Some(notifier) = self.notifiers.get(channel) else {
            return self.abandon(&item, now, &format!("channel {channel} is no longer configured")).await;
        };
        let mut n: Notification = match serde_json::from_value(item.payload.clone()) {
            Ok(n) => n,
            Err(e) => return self.abandon(&item, now, &format!("unreadable payload: {e}")).await,
        };
        if n.shared && !n.test {
            match self.lease(&n, &item.region, item.attempts, now).await? {
                Lease::Send(seen) => n.seen = seen,
                Lease::Later(why) => {
                    let next =
                        now + chrono::Duration::from_std(self.cfg.poll_every).unwrap_or(chrono::Duration::seconds(2));
                    self.store.mark_retry(item.id, next, &why).await?;
                    return Ok(Outcome::Retried);
                }
                Lease::Quiet(why) => {
                    tracing::info!(channel, incident = %n.incident_key(), region = %item.region, status = n.status.as_str(),
                        reason = %why, "shared incident not sent from this region");
                    self.store.mark_delivered(item.id, now).await?;
                    return Ok(Outcome::Delivered);
                }
            }
        }
        match notifier.send(&n, item.id).await {
            Ok(()) => {
                self.store.mark_delivered(item.id, now).await?;
                for a in &n.alerts {
                    self.metrics.alert_sent(a.kind.as_str(), channel);
                }
                tracing::info!(channel, kind = %item.kind, dedup_key = %item.dedup_key, attempts = item.attempts + 1, "alert delivered");
                if n.shared && n.status == AlertStatus::Resolved && !n.test {
                    // The last region's resolve went out: forget the lease and sightings.
                    self.store.close_incident(&n.incident_key()).await?;
                }
                Ok(Outcome::Delivered)
            }
            Err(DeliveryError::Permanent { message }) => {
                self.metrics.delivery_failed(channel);
                self.abandon(&item, now, &message).await
            }
            Err(DeliveryError::Retryable { retry_after, message }) => {
                self.metrics.delivery_failed(channel);
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

    /// Runs until `shutdown` is cancelled: every channel steps on its own loop (a hung or slow
    /// channel delays only its own pages, up to its own timeout), and one more loop renews
    /// leases, gives up on items of removed channels and publishes the depth. A storage error
    /// is logged and retried next step; a step in flight at the stop is finished first.
    pub async fn run(&self, shutdown: CancellationToken) {
        let channels = join_all(self.notifiers.iter().map(|(name, n)| self.channel_loop(name, n, &shutdown)));
        tokio::join!(channels, self.upkeep_loop(&shutdown));
    }

    async fn channel_loop(&self, name: &str, notifier: &Arc<dyn Notifier>, shutdown: &CancellationToken) {
        while !shutdown.is_cancelled() {
            let busy = match self.channel_step(name, notifier, Utc::now()).await {
                // Straight on while items go out; a pause after a failure or an empty step.
                Ok((outcomes, deferred)) => {
                    !outcomes.is_empty() && deferred == 0 && !outcomes.iter().any(|o| matches!(o, Outcome::Retried))
                }
                Err(e) => {
                    tracing::warn!(channel = %name, error = %e, "outbox step failed; retrying");
                    false
                }
            };
            if !busy {
                self.pause(shutdown).await;
            }
        }
    }

    async fn upkeep_loop(&self, shutdown: &CancellationToken) {
        while !shutdown.is_cancelled() {
            let now = Utc::now();
            let step = async {
                self.renew(now).await?;
                self.abandon_orphans(now).await?;
                self.store.outbox_depth().await
            };
            match step.await {
                Ok(depth) => self.metrics.set_outbox_depth(depth),
                Err(e) => tracing::warn!(error = %e, "outbox upkeep failed; retrying"),
            }
            self.pause(shutdown).await;
        }
    }

    /// Waits `poll_every` or until the stop, whichever comes first.
    async fn pause(&self, shutdown: &CancellationToken) {
        tokio::select! {
            _ = shutdown.cancelled() => {}
            _ = tokio::time::sleep(self.cfg.poll_every) => {}
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
