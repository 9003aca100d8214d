//! Storage seam: one `Store` trait, a PostgreSQL and an SQLite implementation, and the spool
//! that keeps samples safe while the database is unreachable.
//!
//! Records here are plain data (strings, bytes, JSON) so the store knows nothing of how
//! baselines, breakers or alerts compute them.

use crate::sample::Sample;
use crate::target::Target;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use thiserror::Error;
use uuid::Uuid;

/// Storage failures; `Unavailable` is the one the writer answers by spooling.
#[derive(Debug, Error)]
pub enum StoreError {
    /// The database cannot be reached or timed out: retry later.
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    /// The database schema is newer than this binary understands.
    #[error("database schema version {found} is newer than this vigil (knows up to {known}); upgrade vigil")]
    SchemaAhead {
        /// Version found in the database.
        found: i64,
        /// Newest version this binary ships.
        known: i64,
    },
    /// A bad URL, a failed migration or a query error that retrying will not fix.
    #[error("storage error: {0}")]
    Other(String),
}

/// Filter for reading samples back.
#[derive(Debug, Clone, Default)]
pub struct SampleQuery {
    /// Only this region (`None`: all regions).
    pub region: Option<String>,
    /// Only this target's provider/model/route (its region field is ignored; use `region`).
    pub target: Option<Target>,
    /// `started_at >= since`.
    pub since: Option<DateTime<Utc>>,
    /// `started_at < until`.
    pub until: Option<DateTime<Utc>>,
    /// At most this many, newest first when set.
    pub limit: Option<i64>,
}

/// One hourly HDR histogram of one metric for one target in one region.
#[derive(Debug, Clone, PartialEq)]
pub struct Rollup {
    /// Target and region.
    pub target: Target,
    /// `ttfb`, `ttft` or `tokens_per_s`.
    pub metric: String,
    /// Start of the UTC hour.
    pub hour: DateTime<Utc>,
    /// Values recorded.
    pub count: i64,
    /// HdrHistogram V2 serialization.
    pub histogram: Vec<u8>,
}

/// Persisted breaker state of one target in one region.
#[derive(Debug, Clone, PartialEq)]
pub struct BreakerRecord {
    /// Target and region.
    pub target: Target,
    /// `closed`, `half_open` or `open`.
    pub state: String,
    /// When it entered that state.
    pub since: DateTime<Utc>,
    /// Machine-readable detail (counters, tripping probes, next half-open time).
    pub detail: serde_json::Value,
}

/// One breaker transition, kept as history.
#[derive(Debug, Clone, PartialEq)]
pub struct BreakerTransition {
    /// Target and region.
    pub target: Target,
    /// Previous state.
    pub from_state: String,
    /// New state.
    pub to_state: String,
    /// When.
    pub at: DateTime<Utc>,
    /// Why, for humans (`3 failed probes in 120s: server_error, server_error, timeout`).
    pub reason: String,
}

/// One message waiting in (or done with) the alert outbox.
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxItem {
    /// Unique id; also the idempotency key receivers see.
    pub id: Uuid,
    /// Channel name (`slack`, `pagerduty-1`).
    pub channel: String,
    /// Alert kind (`errors`, `credit_low`…), for metrics.
    pub kind: String,
    /// Stable key of the incident (PagerDuty `dedup_key`).
    pub dedup_key: String,
    /// The rendered notification.
    pub payload: serde_json::Value,
    /// When it was enqueued.
    pub created_at: DateTime<Utc>,
    /// Not before this time.
    pub next_attempt_at: DateTime<Utc>,
    /// Attempts made so far.
    pub attempts: i32,
    /// Last error, if any.
    pub last_error: Option<String>,
}

/// One credit balance reading.
#[derive(Debug, Clone, PartialEq)]
pub struct BalanceReading {
    /// Provider name.
    pub provider: String,
    /// Region that polled.
    pub region: String,
    /// When.
    pub at: DateTime<Utc>,
    /// USD left.
    pub remaining_usd: f64,
}

/// Everything vigil persists. Implementations: [`postgres`] and [`sqlite`].
#[async_trait]
pub trait Store: Send + Sync {
    /// Applies pending migrations; refuses a database ahead of this binary.
    async fn migrate(&self) -> Result<(), StoreError>;
    /// Cheap reachability check for `/readyz`.
    async fn ping(&self) -> Result<(), StoreError>;

    /// Inserts samples; a sample whose id is already stored is skipped. Returns rows inserted.
    async fn insert_samples(&self, samples: &[Sample]) -> Result<u64, StoreError>;
    /// Reads samples back.
    async fn samples(&self, q: &SampleQuery) -> Result<Vec<Sample>, StoreError>;
    /// Counts samples matching the query (ignores `limit`).
    async fn count_samples(&self, q: &SampleQuery) -> Result<i64, StoreError>;
    /// Removes raw samples started before `cutoff`. Returns rows (or partitions' rows) removed.
    async fn purge_samples_before(&self, cutoff: DateTime<Utc>) -> Result<u64, StoreError>;

    /// Inserts or replaces hourly rollups.
    async fn upsert_rollups(&self, rollups: &[Rollup]) -> Result<(), StoreError>;
    /// Rollups whose hour is at or after `since` (`region: None` for all regions).
    async fn rollups_since(&self, region: Option<&str>, since: DateTime<Utc>) -> Result<Vec<Rollup>, StoreError>;
    /// Removes rollups older than `cutoff`.
    async fn purge_rollups_before(&self, cutoff: DateTime<Utc>) -> Result<u64, StoreError>;

    /// Saves the current breaker state of a target.
    async fn save_breaker(&self, record: &BreakerRecord) -> Result<(), StoreError>;
    /// Loads breaker states (`region: None` for all regions).
    async fn load_breakers(&self, region: Option<&str>) -> Result<Vec<BreakerRecord>, StoreError>;
    /// Appends to the transition history.
    async fn append_transition(&self, t: &BreakerTransition) -> Result<(), StoreError>;
    /// Newest transitions first, for one region (and one target when given).
    async fn transitions(
        &self,
        region: &str,
        target: Option<&Target>,
        limit: i64,
    ) -> Result<Vec<BreakerTransition>, StoreError>;

    /// Adds notifications to the outbox (ignored when the id exists).
    async fn enqueue(&self, items: &[OutboxItem]) -> Result<(), StoreError>;
    /// Undelivered items due at `now`, oldest first.
    async fn due(&self, now: DateTime<Utc>, limit: i64) -> Result<Vec<OutboxItem>, StoreError>;
    /// Marks an item delivered.
    async fn mark_delivered(&self, id: Uuid, at: DateTime<Utc>) -> Result<(), StoreError>;
    /// Records a failed attempt and when to try next.
    async fn mark_retry(&self, id: Uuid, next_attempt_at: DateTime<Utc>, error: &str) -> Result<(), StoreError>;
    /// Gives up on an item, keeping it with the reason.
    async fn mark_abandoned(&self, id: Uuid, at: DateTime<Utc>, error: &str) -> Result<(), StoreError>;
    /// Undelivered, not abandoned items.
    async fn outbox_depth(&self) -> Result<i64, StoreError>;

    /// Saves the alert engine's state (firing alerts, last notification times) as one JSON document per region.
    async fn save_alert_state(&self, region: &str, state: &serde_json::Value) -> Result<(), StoreError>;
    /// Loads it back (`None` on first start).
    async fn load_alert_state(&self, region: &str) -> Result<Option<serde_json::Value>, StoreError>;

    /// Stores a credit balance reading.
    async fn insert_balance(&self, reading: &BalanceReading) -> Result<(), StoreError>;
    /// Readings for a provider since a time, oldest first.
    async fn balances(&self, provider: &str, since: DateTime<Utc>) -> Result<Vec<BalanceReading>, StoreError>;
}
