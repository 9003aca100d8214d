//! What storage keeps, as plain records: the stages compute them, the store writes and reads
//! them, and neither needs to know how the other works.

use crate::vocab::breaker::State;
use crate::vocab::health::Health;
use crate::vocab::target::Target;
use chrono::{DateTime, Utc};
use uuid::Uuid;

/// A region's alert engine state as JSON text, written straight from the engine and never held
/// as a `serde_json::Value` tree: at 1,000 targets that tree (and its copy on the way to storage)
/// was the daemon's largest allocation, several times the size of the text.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(transparent)]
pub struct StateJson(Box<serde_json::value::RawValue>);

impl<'de> serde::Deserialize<'de> for StateJson {
    /// Through a tree: only a replay of the record spool reads one this way, and there serde has
    /// buffered the line (its tag comes first), from which raw text cannot be taken.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let tree = serde_json::Value::deserialize(d)?;
        serde_json::value::to_raw_value(&tree).map(StateJson).map_err(serde::de::Error::custom)
    }
}

impl StateJson {
    /// Serializes `state` into JSON text.
    pub fn of<T: serde::Serialize>(state: &T) -> Result<Self, serde_json::Error> {
        serde_json::value::to_raw_value(state).map(StateJson)
    }

    /// Takes JSON text as stored, refusing text that is not JSON.
    pub fn from_text(text: String) -> Result<Self, serde_json::Error> {
        serde_json::value::RawValue::from_string(text).map(StateJson)
    }

    /// The JSON text.
    pub fn as_str(&self) -> &str {
        self.0.get()
    }
}

impl PartialEq for StateJson {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

/// One hourly HDR histogram of one metric for one target in one region.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
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
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BreakerRecord {
    /// Target and region.
    pub target: Target,
    /// `closed`, `half_open` or `open`.
    pub state: State,
    /// When it entered that state.
    pub since: DateTime<Utc>,
    /// Machine-readable detail (counters, tripping probes, next half-open time).
    pub detail: serde_json::Value,
}

/// One breaker transition, kept as history.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BreakerTransition {
    /// Target and region.
    pub target: Target,
    /// Previous state.
    pub from_state: State,
    /// New state.
    pub to_state: State,
    /// When.
    pub at: DateTime<Utc>,
    /// Why, for humans (`3 failed probes in 120s: server_error, server_error, timeout`).
    pub reason: String,
}

/// One message waiting in (or done with) the alert outbox.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct OutboxItem {
    /// Unique id; also the idempotency key receivers see.
    pub id: Uuid,
    /// Region whose instance delivers it (instances sharing a database deliver only their own).
    pub region: String,
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

/// One row of `target_status`: what one region's instance currently sees of one target.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TargetStatus {
    /// The target, with the publishing region.
    pub target: Target,
    /// Its health as that region judged it (the one judgement; see `vocab::health`).
    pub health: Health,
    /// Over its alert latency threshold with sustained evidence (k of n probes): the
    /// `latency_degraded` rule's evidence, which the scope of a latency incident counts.
    pub over_latency: bool,
    /// That region's breaker for the target.
    pub breaker: State,
    /// When the row was written.
    pub updated_at: DateTime<Utc>,
}

/// One region's sighting of a shared incident (`incident_sightings`).
#[derive(Debug, Clone, PartialEq)]
pub struct Sighting {
    /// Region that sees (or saw) it.
    pub region: String,
    /// Still firing there.
    pub firing: bool,
    /// Last refreshed.
    pub updated_at: DateTime<Utc>,
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
