//! The replicas of a region (docs/DEPLOYMENT.md#replicas): this instance's heartbeat in
//! `members`, the roster read back at every beat and published for the scheduler, the pipeline
//! and the side runners; and, while other members are live, their samples read back from storage
//! into the pipeline, so every replica judges, exports and shows the whole region. A clean stop
//! removes this member's row, so its share moves at the others' next read.

use crate::decide::roster::{Roster, SharedRoster, Timing};
use crate::io::metrics::Metrics;
use crate::io::store::{SampleQuery, Store, StoreError};
use crate::vocab::member::Member;
use crate::vocab::sample::Sample;
use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use thiserror::Error;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// Rows of members whose heartbeat is older than this are removed at the next beat.
const FORGET_AFTER: chrono::Duration = chrono::Duration::days(1);

/// Why replicas cannot run as configured.
#[derive(Debug, Error)]
pub enum ReplicaError {
    /// Another live instance of the region shares an SQLite file.
    #[error(
        "another vigil instance of region {region} is running on this SQLite database (member {other} on host \
         {host}, last heartbeat {age_s:.0} s ago): replicas of a region need PostgreSQL (storage.url = \
         \"postgres://…\"); stop the other instance or give this one another region or data_dir"
    )]
    SqliteShared {
        /// The region.
        region: String,
        /// The live member found.
        other: String,
        /// Its host.
        host: String,
        /// Seconds since its heartbeat.
        age_s: f64,
    },
    /// The first heartbeat could not be written or read.
    #[error("replicas: {0}")]
    Store(#[from] StoreError),
}

/// This instance's name for operators: the pod name under Kubernetes (`HOSTNAME`), else the kernel's.
fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// This instance's row at its start `now`: a new id, its host, its share from `active_from`.
fn new_member(region: &str, now: DateTime<Utc>, active_from: DateTime<Utc>) -> Member {
    Member {
        region: region.to_string(),
        id: Uuid::new_v4().simple().to_string()[..12].to_string(),
        host: host_name(),
        started_at: now,
        heartbeat_at: now,
        active_from,
    }
}

/// This instance's membership: its row, and the roster everyone reads.
pub struct Replicas {
    store: Arc<dyn Store>,
    timing: Timing,
    me: Member,
    roster: SharedRoster,
    metrics: Arc<Metrics>,
    /// How far back each read of the peers' samples reaches: a sample is stored up to a probe
    /// timeout plus a write batch after its start.
    window: Duration,
}

impl Replicas {
    /// Joins `region`: writes the first heartbeat. With other live members it starts its share
    /// one [`Timing::join`] later (so each of them has read its row by then); alone, at once.
    /// On SQLite another live member is refused: two processes on one file are not replicas;
    /// alone there, its row is written by the heartbeat loop's first beat.
    pub async fn join(
        store: Arc<dyn Store>,
        sqlite: bool,
        region: &str,
        interval: Duration,
        window: Duration,
        metrics: Arc<Metrics>,
    ) -> Result<Replicas, ReplicaError> {
        let timing = Timing::for_interval(interval);
        let now = Utc::now();
        let ttl = chrono::Duration::from_std(timing.ttl).unwrap_or(chrono::Duration::MAX);
        let others: Vec<Member> =
            store.members(region).await?.into_iter().filter(|m| now - m.heartbeat_at <= ttl).collect();
        if sqlite && !others.is_empty() {
            // A row this fresh may be a process killed a moment ago (a restart after kill -9):
            // it is another live instance only if its heartbeat moves within a dead member's time.
            tokio::time::sleep(timing.ttl + timing.beat).await;
            let again = store.members(region).await?;
            let alive =
                others.iter().find_map(|o| again.iter().find(|m| m.id == o.id && m.heartbeat_at > o.heartbeat_at));
            if let Some(other) = alive {
                return Err(ReplicaError::SqliteShared {
                    region: region.to_string(),
                    other: other.id.clone(),
                    host: other.host.clone(),
                    age_s: (Utc::now() - other.heartbeat_at).num_milliseconds() as f64 / 1000.0,
                });
            }
        }
        if sqlite {
            // No live peer: alone on the file. The heartbeat loop's first tick writes this
            // member's row; a write waits for SQLite's integrity check at open, which the start
            // (and its first probes) need not (seconds on a file of gigabytes).
            let replicas = Replicas::alone(store, region, interval, window, metrics);
            tracing::info!(region, member = %replicas.me.id, host = %replicas.me.host,
                "joined the region's members (SQLite: alone, the first heartbeat follows)");
            return Ok(replicas);
        }
        let now = Utc::now();
        let join = chrono::Duration::from_std(timing.join).unwrap_or_default();
        let me = new_member(region, now, if others.is_empty() { now } else { now + join });
        store.beat(&me, now - FORGET_AFTER).await?;
        tracing::info!(region, member = %me.id, host = %me.host, peers = others.len(),
            active_from = %me.active_from, "joined the region's members");
        let rows = store.members(region).await?;
        let roster = Arc::new(RwLock::new(Roster::read(me.clone(), rows, now, timing.ttl)));
        let replicas = Replicas { store, timing, me, roster, metrics, window };
        replicas.show();
        Ok(replicas)
    }

    /// This member alone (a start whose storage is unreachable, or on SQLite): it probes every
    /// target and beats once storage answers (its row then says it started now).
    pub fn alone(
        store: Arc<dyn Store>,
        region: &str,
        interval: Duration,
        window: Duration,
        metrics: Arc<Metrics>,
    ) -> Replicas {
        let now = Utc::now();
        let me = new_member(region, now, now);
        let roster = Arc::new(RwLock::new(Roster::alone(me.clone())));
        Replicas { store, timing: Timing::for_interval(interval), me, roster, metrics, window }
    }

    /// The roster the other stages read.
    pub fn roster(&self) -> SharedRoster {
        self.roster.clone()
    }

    fn show(&self) {
        if let Ok(r) = self.roster.read() {
            let now = Utc::now();
            self.metrics.set_members(r.live().len(), r.leads(now));
        }
    }

    /// Beats and reads the roster every beat until `shutdown`; sends the peers' new samples to
    /// `peers` while there are any; then removes this member's row.
    pub async fn run(mut self, peers: mpsc::Sender<Sample>, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(self.timing.beat);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut seen: HashMap<Uuid, DateTime<Utc>> = HashMap::new();
        let mut had_peers = 0usize;
        // Since when the peers' samples are read: from the beat that first saw a peer (a
        // joiner probes nothing before its start, two beats later), so this member's own
        // samples from before are never read back.
        let mut reading_from: Option<DateTime<Utc>> = None;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tick.tick() => {}
            }
            let now = Utc::now();
            let count = match self.beat(now).await {
                Ok(count) => count,
                Err(e) => {
                    // The last roster stands: this member keeps probing its share.
                    tracing::warn!(region = %self.me.region, member = %self.me.id, error = %e,
                        "heartbeat failed; keeping the last roster");
                    continue;
                }
            };
            if count != had_peers {
                tracing::info!(region = %self.me.region, member = %self.me.id, peers = count, "region's live members changed");
                had_peers = count;
            }
            if count > 0 {
                let from = *reading_from.get_or_insert(now);
                if let Err(e) = self.read_peers(now, from, &mut seen, &peers).await {
                    tracing::warn!(region = %self.me.region, error = %e, "peers' samples not read; read again at the next beat");
                }
            } else {
                (seen, reading_from) = (HashMap::new(), None);
            }
        }
        match tokio::time::timeout(Duration::from_secs(2), self.store.leave(&self.me.region, &self.me.id)).await {
            Ok(Ok(())) => tracing::info!(region = %self.me.region, member = %self.me.id, "left the region's members"),
            _ => tracing::warn!(region = %self.me.region, member = %self.me.id,
                "member row not removed; the others take over its share once its heartbeat is stale"),
        }
    }

    /// One heartbeat and read; returns the live peers.
    async fn beat(&mut self, now: DateTime<Utc>) -> Result<usize, StoreError> {
        self.me.heartbeat_at = now;
        self.store.beat(&self.me, now - FORGET_AFTER).await?;
        let rows = self.store.members(&self.me.region).await?;
        let roster = Roster::read(self.me.clone(), rows, now, self.timing.ttl);
        let peers = roster.peers();
        if let Ok(mut r) = self.roster.write() {
            *r = roster.after(&r, now, self.timing.ttl);
        }
        self.show();
        Ok(peers)
    }

    /// Sends the region's samples of the last window (not before `from`) not sent before (this
    /// member's own among them: the pipeline knows and skips those), oldest first.
    async fn read_peers(
        &self,
        now: DateTime<Utc>,
        from: DateTime<Utc>,
        seen: &mut HashMap<Uuid, DateTime<Utc>>,
        peers: &mpsc::Sender<Sample>,
    ) -> Result<(), StoreError> {
        let since = (now - chrono::Duration::from_std(self.window).unwrap_or_default()).max(from);
        let q = SampleQuery { region: Some(self.me.region.clone()), since: Some(since), ..SampleQuery::default() };
        let mut samples = self.store.samples(&q).await?;
        samples.sort_by_key(|s| s.started_at);
        seen.retain(|_, at| *at >= since);
        for s in samples {
            if seen.insert(s.id, s.started_at).is_none() && peers.send(s).await.is_err() {
                break;
            }
        }
        Ok(())
    }
}
