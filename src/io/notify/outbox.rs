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
//!
//! Scope on the first page: the owner holds an incident's first page until every region probing
//! its targets has a fresh firing sighting, or one lease margin after the evaluation that opened
//! it, so a fault seen everywhere is paged as global; later messages of the same incident that
//! are due meanwhile go out in that one message. When more regions see it firing than the last
//! message said, the owner sends an `[UPDATE]`.
//!
//! Regional quorum (`alerts.min_regions` above 1): the owner sends a shared incident's firing
//! message through the page channels only when it is seen in at least that many regions (or in
//! every region probing it, when fewer do), and through the `alerts.notice_channels` otherwise;
//! each skipped item is marked delivered with the reason logged. An incident that widens to the
//! quorum pages with its `[UPDATE]`. A resolve goes to the classes its firing messages went to
//! from this instance (to both when it does not know: sent by another region, or before a restart).

use super::notifier::DeliveryError;
use super::notifier::Notifier;
use crate::decide::alert::AlertKind;
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
use std::collections::{BTreeMap, BTreeSet};
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
    /// How long a shared incident's first page may wait for the other regions' sightings (one lease margin).
    pub hold: Duration,
    /// `alerts.min_regions`: regions a shared incident must be seen in to page (1: no quorum).
    pub min_regions: u32,
    /// `alerts.notice_channels`: the channels that get what is below the quorum.
    pub notice_channels: BTreeSet<String>,
}

/// The lease margin for a probe interval, max(interval / 4, 5 s): room for one late step, and
/// how long a first page waits for the other regions' view.
pub fn lease_margin(probe_interval: Duration) -> Duration {
    (probe_interval / 4).max(Duration::from_secs(5))
}

/// The lease length for a probe interval: the interval plus a margin for one late step.
pub fn lease_ttl_for(probe_interval: Duration) -> Duration {
    probe_interval + lease_margin(probe_interval)
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
            hold: lease_margin(Duration::from_secs(60)),
            min_regions: 1,
            notice_channels: BTreeSet::new(),
        }
    }
}

/// The two classes of channel under a regional quorum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    /// Pages: incidents seen in at least `alerts.min_regions` regions.
    Page,
    /// Notices (`alerts.notice_channels`): incidents seen in fewer.
    Notice,
}

/// Which class a firing message seen as `seen` goes to under `min_regions`: the quorum is
/// `min_regions`, or every region probing it when fewer do.
pub fn quorum_class(min_regions: u32, seen: Option<Seen>) -> Class {
    let (affected, regions) = seen.map_or((1, 1), |s| (s.affected, s.regions.max(1)));
    if affected >= min_regions.min(regions) {
        Class::Page
    } else {
        Class::Notice
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
    /// Due items left for the next step (a channel failed earlier in this step, or a first page
    /// waits for the other regions' view with its incident's later messages).
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
    /// A first page waiting for the other regions' view: still due, looked at again next step.
    Held,
}

/// A shared incident this worker's region sees firing: its sighting and lease are renewed each step.
#[derive(Debug, Clone)]
struct Watch {
    region: String,
    owned: bool,
    /// The last firing message this region sent for it, and in how many regions it said it fires.
    sent: Option<(Notification, u32)>,
}

/// What the lease says about one notification.
enum Lease {
    /// This region pages: send, with the count of regions.
    Send(Option<Seen>),
    /// This region pages, but it is the incident's first page and some region probing it has not
    /// been heard from yet: wait (until the time given at the latest) so the scope is right.
    Hold(DateTime<Utc>),
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
    /// Per shared incident, the classes its firing messages went to from here, and when last
    /// (entries a day old are dropped): where its resolve goes under a quorum.
    reached: Mutex<BTreeMap<String, Reached>>,
    /// With replicas, only the region's leader delivers (each item once); always open without.
    gate: crate::decide::roster::LeaderGate,
}

/// The classes of channel a shared incident's firing messages reached, and when last.
type Reached = (BTreeSet<Class>, DateTime<Utc>);

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
        Outbox {
            store,
            notifiers,
            cfg,
            metrics,
            watching: Mutex::new(BTreeMap::new()),
            reached: Mutex::new(BTreeMap::new()),
            gate: Default::default(),
        }
    }

    /// Delivers only while this member leads its region (replicas share one outbox).
    pub fn led_by(mut self, gate: crate::decide::roster::LeaderGate) -> Self {
        self.gate = gate;
        self
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
            // The scope widened since the last message (another region's sighting came after it): say so.
            let mut widened = None;
            // Not while it flaps: no change of a flapping incident is sent.
            let flapping = |n: &Notification| n.alerts.iter().any(|a| a.kind == AlertKind::Flapping);
            if let Some((last, said)) = w.sent.as_ref().filter(|(last, _)| owned && !flapping(last)) {
                let firing = self.firing_regions(&incident, &w.region, now).await?;
                if firing > *said {
                    widened = Some((scope_update(last, firing, now), firing));
                }
            }
            {
                let mut g = self.watching.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(x) = g.get_mut(&incident) {
                    x.owned = owned;
                    if let (Some((_, said)), Some((_, firing))) = (x.sent.as_mut(), widened.as_ref()) {
                        // Said once: the update itself counts the regions again when it goes out.
                        *said = *firing;
                    }
                }
            }
            if let Some((update, firing)) = widened {
                tracing::info!(incident = %incident, region = %w.region, regions_firing = firing,
                    "incident now seen in more regions than its last message said; sending an update");
                enqueue(self.store.as_ref(), &[update], &self.channels(), now).await?;
            }
        }
        Ok(())
    }

    /// Regions whose sighting of `incident` says firing and is fresh (this region's always counts).
    async fn firing_regions(&self, incident: &str, region: &str, now: DateTime<Utc>) -> Result<u32, StoreError> {
        let ttl = chrono::Duration::from_std(self.cfg.lease_ttl).unwrap_or(chrono::Duration::seconds(75));
        let all = self.store.sightings(incident).await?;
        Ok(all.iter().filter(|s| s.firing && (s.region == region || now - s.updated_at <= ttl)).count() as u32)
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
                let w = g.entry(incident.clone()).or_insert_with(|| Watch {
                    region: region.to_string(),
                    owned,
                    sent: None,
                });
                w.region = region.to_string();
                w.owned = owned;
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
            // A first page waits for regions not heard from yet, at most one lease margin after
            // the evaluation that opened it: a fault seen everywhere is paged as global.
            let first = !n.update && !n.reminder;
            let until = n.created_at + chrono::Duration::from_std(self.cfg.hold).unwrap_or_default();
            if first && affected < regions && now < until {
                return Ok(Lease::Hold(until));
            }
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
                    // Counted in `deferred`: still due.
                    Outcome::Held => {}
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
        // The incident each item belongs to (an unreadable payload has none: it is abandoned alone).
        let notes: Vec<Option<Notification>> =
            items.iter().map(|i| serde_json::from_value::<Notification>(i.payload.clone()).ok()).collect();
        let incident = |i: usize| notes[i].as_ref().map(|n| (items[i].region.clone(), n.incident_key()));
        let mut taken: BTreeSet<usize> = BTreeSet::new();
        let mut waiting: BTreeSet<(String, String)> = BTreeSet::new();
        let mut failed = false;
        for (i, item) in items.iter().enumerate() {
            if taken.contains(&i) {
                continue;
            }
            // A message of an incident whose earlier message waits: keep their order, next step.
            if incident(i).is_some_and(|k| waiting.contains(&k)) {
                continue;
            }
            // Later firing messages of the same incident already due go out as one message with this one.
            let mut later = Vec::new();
            if let (Some(n), Some(key)) = (&notes[i], incident(i)) {
                if n.status == AlertStatus::Firing && !n.test {
                    for (j, note) in notes.iter().enumerate().skip(i + 1) {
                        if incident(j).as_ref() != Some(&key) {
                            continue;
                        }
                        match note {
                            Some(m) if m.status == AlertStatus::Firing && !m.test => later.push(j),
                            // A resolve (or a test) in between: what follows is another story.
                            _ => break,
                        }
                    }
                }
            }
            let absorbed: Vec<&Notification> = later.iter().filter_map(|j| notes[*j].as_ref()).collect();
            let o = self.deliver_one(&channel, item.clone(), &absorbed, now).await?;
            match o {
                Outcome::Held => {
                    if let Some(k) = incident(i) {
                        waiting.insert(k);
                    }
                }
                Outcome::Delivered => {
                    for j in later {
                        self.store.mark_delivered(items[j].id, now).await?;
                        taken.insert(j);
                        outcomes.push(Outcome::Delivered);
                    }
                }
                Outcome::Retried => failed = true,
                Outcome::Abandoned => {}
            }
            outcomes.push(o);
            // A channel that just failed would most likely fail again: keep order, try later.
            if failed {
                break;
            }
        }
        let held = outcomes.iter().filter(|o| matches!(o, Outcome::Held)).count();
        let handled = outcomes.len() - held;
        let deferred = total - handled;
        Ok((outcomes, deferred))
    }

    /// Remembers what a shared firing message said, so a wider scope later is sent as an update
    /// (also when the quorum kept it off a channel: widening to the quorum is what pages it).
    fn remember_sent(&self, n: &Notification) {
        if n.shared && n.status == AlertStatus::Firing && !n.test {
            let said = n.seen.map_or(1, |s| s.affected);
            let mut g = self.watching.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(w) = g.get_mut(&n.incident_key()) {
                w.sent = Some((n.clone(), said));
            }
        }
    }

    /// Why a shared message this region sends stays off `channel` under the regional quorum:
    /// a firing one goes to its class only, a resolve to the classes its firing messages reached.
    fn off_class(&self, channel: &str, n: &Notification, now: DateTime<Utc>) -> Option<String> {
        if self.cfg.min_regions <= 1 {
            return None;
        }
        let class = if self.cfg.notice_channels.contains(channel) { Class::Notice } else { Class::Page };
        let mut reached = self.reached.lock().unwrap_or_else(|e| e.into_inner());
        reached.retain(|_, (_, at)| now - *at < chrono::Duration::days(1));
        let key = n.incident_key();
        if n.status == AlertStatus::Resolved {
            return match reached.get(&key) {
                Some((classes, _)) if !classes.contains(&class) => {
                    Some("its firing messages went to the other class of channel".into())
                }
                _ => None,
            };
        }
        let want = quorum_class(self.cfg.min_regions, n.seen);
        let (affected, regions) = n.seen.map_or((1, 1), |s| (s.affected, s.regions));
        if want != class {
            let to = if want == Class::Page { "page" } else { "notice" };
            return Some(format!(
                "seen in {affected} of {regions} regions (alerts.min_regions = {}): for the {to} channels",
                self.cfg.min_regions
            ));
        }
        let entry = reached.entry(key).or_insert_with(|| (BTreeSet::new(), now));
        entry.0.insert(class);
        entry.1 = now;
        None
    }

    async fn abandon(&self, item: &OutboxItem, now: DateTime<Utc>, reason: &str) -> Result<Outcome, StoreError> {
        tracing::error!(channel = %item.channel, kind = %item.kind, dedup_key = %item.dedup_key, id = %item.id,
            attempts = item.attempts + 1, error = %reason, "alert delivery abandoned");
        self.store.mark_abandoned(item.id, now, reason).await?;
        self.metrics.alert_abandoned(&item.channel);
        Ok(Outcome::Abandoned)
    }

    /// Sends one item; `later` are firing messages of the same incident due after it, which this
    /// one carries (their facets, the newest's): the caller marks them delivered when it went out.
    async fn deliver_one(
        &self,
        channel: &str,
        item: OutboxItem,
        later: &[&Notification],
        now: DateTime<Utc>,
    ) -> Result<Outcome, StoreError> {
        let Some(notifier) = self.notifiers.get(channel) else {
            return self.abandon(&item, now, &format!("channel {channel} is no longer configured")).await;
        };
        let mut n: Notification = match serde_json::from_value(item.payload.clone()) {
            Ok(n) => n,
            Err(e) => return self.abandon(&item, now, &format!("unreadable payload: {e}")).await,
        };
        if !later.is_empty() {
            tracing::info!(channel, incident = %n.incident_key(), merged = later.len(),
                "later messages of the incident were due too: one message carries them");
            n = merged(n, later);
        }
        if n.shared && !n.test {
            match self.lease(&n, &item.region, item.attempts, now).await? {
                Lease::Send(seen) => {
                    n.seen = seen;
                    widen_facets(&mut n);
                    if let Some(why) = self.off_class(channel, &n, now) {
                        tracing::info!(channel, incident = %n.incident_key(), status = n.status.as_str(), reason = %why,
                            "shared incident not sent on this channel (alerts.min_regions)");
                        self.remember_sent(&n);
                        self.store.mark_delivered(item.id, now).await?;
                        return Ok(Outcome::Delivered);
                    }
                }
                Lease::Hold(until) => {
                    tracing::debug!(channel, incident = %n.incident_key(), region = %item.region, until = %until,
                        "first page waits for the other regions' view");
                    return Ok(Outcome::Held);
                }
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
                self.remember_sent(&n);
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
            if !self.gate.open(Utc::now()) {
                self.pause(shutdown).await;
                continue;
            }
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
            if !self.gate.open(now) {
                self.pause(shutdown).await;
                continue;
            }
            let step = async {
                self.renew(now).await?;
                self.abandon_orphans(now).await?;
                self.store.outbox_depth().await
            };
            // Upkeep carries no page: a step hanging on a database gone dark is dropped at the
            // stop rather than holding the task past the stop bound.
            let step = tokio::select! {
                r = step => r,
                _ = shutdown.cancelled() => return,
            };
            match step {
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

/// `first` carrying the later firing messages of its incident: their facets (the newest's), and
/// still a page when `first` is one; else an update when any of them is one, else a reminder.
fn merged(mut first: Notification, later: &[&Notification]) -> Notification {
    let Some(newest) = later.last() else { return first };
    first.alerts = newest.alerts.clone();
    first.seen = newest.seen.or(first.seen);
    if first.update || first.reminder {
        first.update = first.update || later.iter().any(|l| l.update);
        first.reminder = !first.update;
    }
    first
}

/// An update of `last` saying the incident now fires in `firing` regions (counted again when sent).
fn scope_update(last: &Notification, firing: u32, now: DateTime<Utc>) -> Notification {
    let mut n = last.clone();
    n.key = hex::encode(Sha256::digest(format!("{}|scope|{firing}|{}", last.key, now.to_rfc3339()).as_bytes()));
    n.update = true;
    n.reminder = false;
    n.created_at = now;
    n
}

/// Facets of a message that says the incident fires in several regions count at least those
/// regions: a region's published status can be an interval older than its sighting.
fn widen_facets(n: &mut Notification) {
    let Some(seen) = n.seen.filter(|s| s.affected >= 2 && n.status == AlertStatus::Firing) else { return };
    for a in &mut n.alerts {
        a.scope = match a.scope {
            Scope::Regional => Scope::Global { affected: seen.affected, regions: seen.regions },
            Scope::Global { affected, regions } => {
                Scope::Global { affected: affected.max(seen.affected), regions: regions.max(seen.regions) }
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quorum_is_min_regions_or_every_region_probing_when_fewer_do() {
        let seen = |affected, regions| Some(Seen { affected, regions });
        assert_eq!(quorum_class(2, seen(1, 3)), Class::Notice);
        assert_eq!(quorum_class(2, seen(2, 3)), Class::Page);
        assert_eq!(quorum_class(3, seen(2, 2)), Class::Page, "fewer regions run than the quorum: all of them");
        assert_eq!(quorum_class(2, seen(1, 1)), Class::Page, "a lone region pages as before");
        assert_eq!(quorum_class(2, None), Class::Page);
        assert_eq!(quorum_class(1, seen(1, 5)), Class::Page, "the default: every incident pages");
    }

    fn firing(key: &str, kinds: &[crate::decide::alert::AlertKind], update: bool, reminder: bool) -> Notification {
        let at = DateTime::parse_from_rfc3339("2026-12-01T10:00:00Z").expect("t").with_timezone(&Utc);
        let alerts = kinds
            .iter()
            .map(|k| crate::decide::alert::Alert::new(*k, "eu", "p", None, k.as_str().to_string()))
            .collect();
        Notification {
            update,
            reminder,
            shared: true,
            incident: "vigil:p".into(),
            ..Notification::firing(key, "eu", "p", alerts, at)
        }
    }

    #[test]
    fn a_page_carrying_a_later_update_stays_a_page_with_the_newest_facets() {
        use crate::decide::alert::AlertKind::{BreakerOpen, Errors};
        let page = firing("page", &[Errors], false, false);
        let update = firing("update", &[BreakerOpen, Errors], true, false);
        let m = merged(page.clone(), &[&update]);
        assert_eq!((m.key.as_str(), m.update, m.reminder), ("page", false, false));
        assert_eq!(m.alerts, update.alerts);
        assert_eq!(m.created_at, page.created_at, "the wait counts from the first message");
        let reminder = firing("reminder", &[Errors], false, true);
        let m = merged(reminder, &[&update]);
        assert_eq!((m.update, m.reminder), (true, false), "a reminder carrying an update is an update");
        assert!(m.title().starts_with("[UPDATE] p: breaker_open, errors"), "{}", m.title());
    }

    #[test]
    fn facets_count_at_least_the_regions_that_see_the_incident() {
        use crate::decide::alert::AlertKind::{BreakerOpen, Errors};
        let mut n = firing("page", &[BreakerOpen, Errors], false, false);
        n.alerts[1].scope = Scope::Global { affected: 3, regions: 3 };
        n.seen = Some(Seen { affected: 2, regions: 3 });
        widen_facets(&mut n);
        assert_eq!(n.alerts[0].scope, Scope::Global { affected: 2, regions: 3 });
        assert_eq!(n.alerts[1].scope, Scope::Global { affected: 3, regions: 3 }, "never narrowed");
        let mut alone = firing("page", &[Errors], false, false);
        alone.seen = Some(Seen { affected: 1, regions: 2 });
        widen_facets(&mut alone);
        assert_eq!(alone.alerts[0].scope, Scope::Regional);
        let u = scope_update(&n, 3, n.created_at + chrono::Duration::seconds(30));
        assert!(u.update && !u.reminder && u.key != n.key && u.alerts == n.alerts);
    }

    #[test]
    fn the_first_page_waits_one_lease_margin_at_most() {
        assert_eq!(lease_margin(Duration::from_secs(60)), Duration::from_secs(15));
        assert_eq!(lease_margin(Duration::from_secs(1)), Duration::from_secs(5));
        assert_eq!(lease_ttl_for(Duration::from_secs(60)), Duration::from_secs(75));
        let cfg = OutboxConfig::with_deadline(Duration::from_secs(86400));
        assert_eq!(cfg.hold, lease_margin(Duration::from_secs(60)));
    }

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
