//! Storage seam: the `Store` traits (narrow ones grouped by what callers need, and `Store`, the
//! umbrella every backend implements), a PostgreSQL and an SQLite implementation, and the spool
//! that keeps samples safe while the database is unreachable.
//!
//! Records here are plain data (strings, bytes, JSON) so the store knows nothing of how
//! baselines, breakers or alerts compute them.

use crate::vocab::records::{
    BalanceReading, BreakerRecord, BreakerTransition, OutboxItem, Rollup, Sighting, StateJson, TargetStatus,
};
use crate::vocab::sample::Sample;
use crate::vocab::target::Target;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;
use uuid::Uuid;

mod backend;
pub mod carry;
pub mod link;
mod migrations;
mod pg_copy;
pub mod postgres;
pub mod retention;
mod rows;
pub mod spool;
mod sql;
pub mod sqlite;
mod window;
pub mod writer;

pub use spool::{Spool, SpoolError};
pub use window::load_window;
pub use writer::{Writer, WriterHealth};

/// Resolves `grace` after `stop` fires, never without a signal: raced against a store call, it
/// cuts a call begun before a daemon's stop (a write to a host just gone dark) to `grace`, so the
/// task holding it still stops within its bound and spools what the call carried.
pub(crate) async fn cut_after_stop(stop: Option<&tokio_util::sync::CancellationToken>, grace: Duration) {
    match stop {
        Some(stop) => {
            stop.cancelled().await;
            tokio::time::sleep(grace).await;
        }
        None => std::future::pending().await,
    }
}

/// How long a query waits for a pooled connection before the store counts as unreachable.
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// Opens the store named by `url`: `sqlite://path` (the file is created) or `postgres://…`.
///
/// PostgreSQL connects lazily, so a daemon can start (and spool) while its database is down;
/// call [`AdminStore::migrate`] before use.
pub async fn open(url: &str) -> Result<Arc<dyn Store>, StoreError> {
    open_with_timeout(url, ACQUIRE_TIMEOUT).await
}

/// [`open`] with a custom connection-acquire timeout (tests use short ones).
pub async fn open_with_timeout(url: &str, acquire_timeout: Duration) -> Result<Arc<dyn Store>, StoreError> {
    let scheme = url.split_once(':').map(|(s, _)| s.to_ascii_lowercase()).unwrap_or_default();
    match scheme.as_str() {
        "sqlite" => Ok(Arc::new(sqlite::SqliteStore::open(url, acquire_timeout).await?)),
        "postgres" | "postgresql" => Ok(Arc::new(postgres::PgStore::open(url, acquire_timeout)?)),
        _ => Err(StoreError::BadUrl(format!(
            "unsupported storage.url scheme {scheme:?}: expected sqlite://PATH or postgres://…"
        ))),
    }
}

/// `url` safe to log and show: the password (and any `password`/`sslpassword` parameter) replaced.
pub fn redact_url(url: &str) -> String {
    let Ok(mut u) = url::Url::parse(url) else { return "<unparsable storage.url>".to_owned() };
    if u.password().is_some() {
        let _ = u.set_password(Some("redacted"));
    }
    let secret = |k: &str| k.eq_ignore_ascii_case("password") || k.eq_ignore_ascii_case("sslpassword");
    if u.query_pairs().any(|(k, _)| secret(&k)) {
        let pairs: Vec<(String, String)> = u
            .query_pairs()
            .map(|(k, v)| {
                let v = if secret(&k) { "redacted".to_owned() } else { v.into_owned() };
                (k.into_owned(), v)
            })
            .collect();
        u.query_pairs_mut().clear().extend_pairs(pairs);
    }
    u.to_string()
}

/// Classifies a failure to open a PostgreSQL session (refused, unanswered, rejected by the
/// server): always `Unavailable`, since the daemon should run, spool and retry while an
/// operator fixes the server; the reason names which failure it was and the redacted URL.
pub(crate) fn pg_connect_error(e: &sqlx::Error, target: &str, waited: Duration) -> StoreError {
    use sqlx::Error as E;
    use std::io::ErrorKind as K;
    let why = match e {
        E::Io(io) => match io.kind() {
            K::ConnectionRefused => "connection refused".to_owned(),
            K::TimedOut => "connection timed out".to_owned(),
            K::ConnectionReset | K::ConnectionAborted | K::UnexpectedEof | K::BrokenPipe => {
                format!("connection closed by the server or the network ({io})")
            }
            _ => format!("network error: {io}"),
        },
        E::PoolTimedOut => {
            format!("no connection within {waited:?}: the server refuses connections or does not answer")
        }
        E::Database(db) => {
            let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
            let what = match code.as_str() {
                // 55000 is how PostgreSQL refuses a database with ALLOW_CONNECTIONS false.
                "55000" | "57P03" => "database not accepting connections",
                "3D000" => "database does not exist",
                "28000" => "role rejected",
                "28P01" => "password rejected",
                "53300" => "too many connections",
                "57P01" | "57P02" => "server shutting down",
                c if c.starts_with("08") => "connection failure",
                _ => "server refused the session",
            };
            format!("{what} (SQLSTATE {code}: {})", db.message())
        }
        E::Tls(t) => format!("TLS: {t}"),
        other => other.to_string(),
    };
    StoreError::Unavailable(format!("{why} [{target}]"))
}

/// The `/readyz` condition for storage that cannot be trusted with writes: "storage file
/// deleted: …" or "storage file replaced: …" while [`AdminStore::vanished`] fails, else
/// "storage corrupt: …" while [`AdminStore::integrity`] fails.
pub struct IntegrityCheck(pub Arc<dyn Store>);

impl crate::vocab::ready::ReadyCheck for IntegrityCheck {
    fn ready(&self) -> Result<(), String> {
        self.0.vanished()?;
        self.0.integrity().map_err(|why| format!("storage corrupt: {why}"))
    }
}

/// Maps a driver error: connection loss, pool timeouts, server shutdowns, a full disk and a
/// corrupt file are `Unavailable` (retrying later, after an operator acts, can succeed).
pub(crate) fn map_sqlx(e: sqlx::Error) -> StoreError {
    use sqlx::Error as E;
    match &e {
        E::Io(_) | E::Tls(_) | E::PoolTimedOut | E::PoolClosed | E::WorkerCrashed | E::Protocol(_) | E::BeginFailed => {
            StoreError::Unavailable(e.to_string())
        }
        E::Database(db) => {
            let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
            // PostgreSQL: 08 connection exception, 53 insufficient resources, 57P0x shutdown/cannot
            // connect, 28 / 3D000 a session refused (a pool reconnecting mid-run), XX001/XX002
            // corruption, 25006 a read-only transaction (a primary demoted to a standby, a
            // database set `default_transaction_read_only` for maintenance: writes come back
            // once it takes them again; as `Other` a start or reload against it failed). SQLite
            // (numeric extended codes, at most four digits), primary: 5 BUSY, 6 LOCKED, 10 IOERR,
            // 11 CORRUPT, 13 FULL, 26 NOTADB.
            // A SQLSTATE is always five characters, and some are all digits (25006): told
            // apart from SQLite's numeric codes by length, not by whether they parse.
            let transient = if code.len() == 5 {
                ["08", "53", "57P", "28"].iter().any(|p| code.starts_with(p))
                    || matches!(code.as_str(), "3D000" | "XX001" | "XX002" | "25006")
            } else {
                code.parse::<i64>().is_ok_and(|n| matches!(n & 0xff, 5 | 6 | 10 | 11 | 13 | 26))
            };
            if transient {
                StoreError::Unavailable(e.to_string())
            } else {
                StoreError::Other(e.to_string())
            }
        }
        _ => StoreError::Other(e.to_string()),
    }
}

/// Why a driver error means the stored data is damaged (SQLite CORRUPT/NOTADB, PostgreSQL
/// XX001 data_corrupted / XX002 index_corrupted), or `None`.
pub(crate) fn corruption(e: &sqlx::Error) -> Option<String> {
    let sqlx::Error::Database(db) = e else { return None };
    let code = db.code()?;
    // Five characters: a SQLSTATE (some are all digits); shorter: SQLite's numeric code.
    let corrupt = if code.len() == 5 {
        matches!(code.as_ref(), "XX001" | "XX002")
    } else {
        code.parse::<i64>().is_ok_and(|n| matches!(n & 0xff, 11 | 26))
    };
    corrupt.then(|| db.message().to_owned())
}

/// Turns sqlx migration failures into `SchemaAhead` when the database knows a newer version.
pub(crate) fn map_migrate(e: sqlx::migrate::MigrateError, known: i64) -> StoreError {
    use sqlx::migrate::MigrateError as M;
    match e {
        M::VersionMissing(v) if v > known => StoreError::SchemaAhead { found: v, known },
        M::Execute(inner) | M::ExecuteMigration(inner, _) => map_sqlx(inner),
        other => StoreError::Other(format!("migration failed: {other}")),
    }
}

/// One migration `migrate` applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Migrated {
    /// Its version (the number its file name starts with).
    pub version: i64,
    /// Its description (the rest of the file name).
    pub description: String,
}

/// The migrations of `m` not among the versions `before` (applied earlier), oldest first.
pub(crate) fn applied_since(m: &sqlx::migrate::Migrator, before: &[i64]) -> Vec<Migrated> {
    m.iter()
        .filter(|m| m.migration_type.is_up_migration() && !before.contains(&m.version))
        .map(|m| Migrated { version: m.version, description: m.description.to_string() })
        .collect()
}

/// Newest migration version a migrator ships.
pub(crate) fn newest_version(m: &sqlx::migrate::Migrator) -> i64 {
    m.iter().map(|m| m.version).max().unwrap_or(0)
}

/// Storage failures; `Unavailable` is the one the writer answers by spooling.
#[derive(Debug, Error)]
pub enum StoreError {
    /// The database cannot be used now (unreachable, not answering, refusing the session, disk
    /// full, corrupt): spool and retry later.
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    /// `storage.url` names no backend or cannot be parsed: a configuration error (exit 2).
    #[error("bad storage.url: {0}")]
    BadUrl(String),
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
    /// Every region but this one: what other instances sharing the store saw.
    pub except_region: Option<String>,
    /// Only this target's provider/model/route (its region field is ignored; use `region`).
    pub target: Option<Target>,
    /// `started_at >= since`.
    pub since: Option<DateTime<Utc>>,
    /// `started_at < until`.
    pub until: Option<DateTime<Utc>>,
    /// At most this many, newest first when set.
    pub limit: Option<i64>,
    /// Only each target's newest matching sample in each region (chosen by the database, so one
    /// row per target and region leaves it, not every row of the window); not for counts.
    pub latest: bool,
}

impl SampleQuery {
    /// The `n` newest samples of `target` in `region`, newest first (what a start restores).
    pub fn newest_of(region: &str, target: &Target, n: i64) -> SampleQuery {
        SampleQuery {
            region: Some(region.to_string()),
            target: Some(target.clone()),
            limit: Some(n),
            ..SampleQuery::default()
        }
    }
}

/// A table (or part of one) that retention prunes row by row, each by its own clock.
/// Samples are not here: they go by day ([`SampleStore::purge_samples_before`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Prune {
    /// `rollups` whose `hour` is before the cutoff.
    Rollups,
    /// `alert_outbox` items delivered or abandoned before the cutoff (pending items never).
    Outbox,
    /// `breaker_transitions` at before the cutoff.
    BreakerTransitions,
    /// `credit_balances` readings taken before the cutoff.
    CreditReadings,
    /// `alert_state` of regions that last wrote it before the cutoff (a live instance rewrites
    /// its own every probe round).
    AlertState,
    /// `target_status` rows not rewritten since the cutoff (regions that stopped).
    TargetStatus,
    /// `incident_lease` rows that expired before the cutoff (left by an instance that died).
    IncidentLeases,
    /// `incident_sightings` not refreshed since the cutoff.
    IncidentSightings,
    /// `provider_incidents` resolved (or, unresolved, last updated) before the cutoff.
    ProviderIncidents,
    /// `provider_components` whose state the page last changed before the cutoff.
    ProviderComponents,
    /// `drills` that ran out before the cutoff (kept as history like breaker transitions).
    Drills,
    /// `chain_heads` recorded before the cutoff, except each chain's newest (the head still in use).
    ChainHeads,
}

impl Prune {
    /// Every prunable table, in the order the retention job visits them.
    pub const ALL: [Prune; 12] = [
        Prune::Rollups,
        Prune::Outbox,
        Prune::BreakerTransitions,
        Prune::CreditReadings,
        Prune::AlertState,
        Prune::TargetStatus,
        Prune::IncidentLeases,
        Prune::IncidentSightings,
        Prune::ProviderIncidents,
        Prune::ProviderComponents,
        Prune::Drills,
        Prune::ChainHeads,
    ];

    /// The table's name.
    pub fn table(self) -> &'static str {
        match self {
            Prune::Rollups => "rollups",
            Prune::Outbox => "alert_outbox",
            Prune::BreakerTransitions => "breaker_transitions",
            Prune::CreditReadings => "credit_balances",
            Prune::AlertState => "alert_state",
            Prune::TargetStatus => "target_status",
            Prune::IncidentLeases => "incident_lease",
            Prune::IncidentSightings => "incident_sightings",
            Prune::ProviderIncidents => "provider_incidents",
            Prune::ProviderComponents => "provider_components",
            Prune::Drills => "drills",
            Prune::ChainHeads => "chain_heads",
        }
    }

    /// The condition a row must meet to go, with `{c}` for the cutoff's placeholder (the same in
    /// both dialects; both backends store times so that `<` is time order).
    pub(crate) fn condition(self) -> &'static str {
        match self {
            Prune::Rollups => "hour < {c}",
            Prune::Outbox => "(delivered_at < {c} OR abandoned_at < {c})",
            Prune::BreakerTransitions | Prune::CreditReadings => "at < {c}",
            Prune::AlertState | Prune::TargetStatus | Prune::IncidentSightings | Prune::ProviderComponents => {
                "updated_at < {c}"
            }
            Prune::IncidentLeases => "expires_at < {c}",
            Prune::Drills => "until_at < {c}",
            Prune::ChainHeads => {
                "at < {c} AND at < (SELECT MAX(d.at) FROM chain_heads d \
                 WHERE d.region = chain_heads.region AND d.chain = chain_heads.chain)"
            }
            Prune::ProviderIncidents => "COALESCE(resolved_at, updated_at, created_at) < {c}",
        }
    }
}

/// Everything vigil persists, as one seam every backend implements: the union of the narrow
/// traits below, each grouped by what its callers need. Implementations: [`postgres`] and
/// [`sqlite`]. Hold an `Arc<dyn Store>`; hand a component only the part it uses.
pub trait Store:
    AdminStore + SampleStore + RollupStore + StateStore + OutboxStore + FeedStore + MemberStore + Send + Sync
{
}

impl<T> Store for T where
    T: AdminStore + SampleStore + RollupStore + StateStore + OutboxStore + FeedStore + MemberStore + ?Sized
{
}

/// The replicas of a region (`members`): each instance's heartbeat and the roster it reads
/// back; used by `run::replicas`.
#[async_trait]
pub trait MemberStore: Send + Sync {
    /// Writes `member`'s heartbeat (its row is created at the first), after removing every
    /// row whose heartbeat is older than `prune_before` (members that died long ago).
    async fn beat(&self, member: &crate::vocab::member::Member, prune_before: DateTime<Utc>) -> Result<(), StoreError>;
    /// Every member row of `region`, stale ones included (the reader judges liveness).
    async fn members(&self, region: &str) -> Result<Vec<crate::vocab::member::Member>, StoreError>;
    /// Removes a member's row: it stopped cleanly and its share moves now.
    async fn leave(&self, region: &str, id: &str) -> Result<(), StoreError>;
}

/// Schema, reachability and table pruning: used by startup (`run::app`, the CLI), `/readyz`
/// and the retention job.
#[async_trait]
pub trait AdminStore: Send + Sync {
    /// Applies pending migrations, returning those it applied (oldest first); refuses a
    /// database ahead of this binary.
    async fn migrate(&self) -> Result<Vec<Migrated>, StoreError>;
    /// Cheap reachability check for `/readyz`.
    async fn ping(&self) -> Result<(), StoreError>;
    /// `Err(why)` once the stored data is known to be damaged: found by the integrity check at
    /// open (SQLite `PRAGMA quick_check`) or by a query failing as corrupt since; no query runs
    /// on a corrupt SQLite file. Clears only with another file (restart, or a file put in its
    /// place, which is opened again).
    fn integrity(&self) -> Result<(), String> {
        Ok(())
    }
    /// `Err(why)` while the database file named by `storage.url` is no longer the file opened
    /// (deleted, or another file put in its place): no query runs until it is opened again.
    fn vanished(&self) -> Result<(), String> {
        Ok(())
    }
    /// Removes at most `limit` rows of `what` older than `cutoff` (one short statement, so a
    /// large purge never holds a table's lock for long). Returns rows removed: fewer than
    /// `limit` means nothing older is left.
    async fn prune(&self, what: Prune, cutoff: DateTime<Utc>, limit: u32) -> Result<u64, StoreError>;
}

/// Raw probe results and canary runs: written by the sample [`Writer`] and the store link,
/// read by the CLI, the weekly report and the monitor, purged by retention.
#[async_trait]
pub trait SampleStore: Send + Sync {
    /// Inserts samples; a sample whose id is already stored is skipped. Returns rows inserted.
    async fn insert_samples(&self, samples: &[Sample]) -> Result<u64, StoreError>;
    /// Reads samples back.
    async fn samples(&self, q: &SampleQuery) -> Result<Vec<Sample>, StoreError>;
    /// Counts samples matching the query (ignores `limit`).
    async fn count_samples(&self, q: &SampleQuery) -> Result<i64, StoreError>;
    /// Removes raw samples started before `cutoff`. Returns rows (or partitions' rows) removed.
    async fn purge_samples_before(&self, cutoff: DateTime<Utc>) -> Result<u64, StoreError>;

    /// Stores canary runs; idempotent on the run id. Returns how many were new.
    async fn insert_canary_runs(&self, runs: &[crate::vocab::canary::CanaryRun]) -> Result<u64, StoreError>;
    /// The newest `limit` canary runs started at or after `since` (`region: None` for every
    /// region), oldest first.
    async fn canary_runs(
        &self,
        region: Option<&str>,
        since: DateTime<Utc>,
        limit: i64,
    ) -> Result<Vec<crate::vocab::canary::CanaryRun>, StoreError>;
    /// Deletes canary runs started before `cutoff`; returns how many.
    async fn purge_canary_runs_before(&self, cutoff: DateTime<Utc>) -> Result<u64, StoreError>;

    /// Stores golden check runs; idempotent on the run id. Returns how many were new.
    async fn insert_check_runs(&self, runs: &[crate::vocab::check::CheckRun]) -> Result<u64, StoreError>;
    /// The newest `limit` golden check runs started at or after `since` (`region: None` for
    /// every region), oldest first.
    async fn check_runs(
        &self,
        region: Option<&str>,
        since: DateTime<Utc>,
        limit: i64,
    ) -> Result<Vec<crate::vocab::check::CheckRun>, StoreError>;
    /// Deletes golden check runs started before `cutoff`; returns how many.
    async fn purge_check_runs_before(&self, cutoff: DateTime<Utc>) -> Result<u64, StoreError>;

    /// Stores long-prompt probe runs; idempotent on the run id. Returns how many were new.
    async fn insert_workload_runs(&self, runs: &[crate::vocab::workload::WorkloadRun]) -> Result<u64, StoreError>;
    /// The newest `limit` long-prompt probe runs started at or after `since` (`region: None` for
    /// every region), oldest first.
    async fn workload_runs(
        &self,
        region: Option<&str>,
        since: DateTime<Utc>,
        limit: i64,
    ) -> Result<Vec<crate::vocab::workload::WorkloadRun>, StoreError>;
    /// Deletes long-prompt probe runs started before `cutoff`; returns how many.
    async fn purge_workload_runs_before(&self, cutoff: DateTime<Utc>) -> Result<u64, StoreError>;
}

/// Hourly rollups, the baselines' memory: written by the store link, read back by
/// [`load_window`], the trend cache of the status page and the CLI.
#[async_trait]
pub trait RollupStore: Send + Sync {
    /// Inserts or replaces hourly rollups.
    async fn upsert_rollups(&self, rollups: &[Rollup]) -> Result<(), StoreError>;
    /// Rollups whose hour is at or after `since` and before `until` (`region: None` for all regions).
    async fn rollups_between(
        &self,
        region: Option<&str>,
        since: DateTime<Utc>,
        until: Option<DateTime<Utc>>,
    ) -> Result<Vec<Rollup>, StoreError>;
    /// Rollups whose hour is at or after `since` (`region: None` for all regions).
    async fn rollups_since(&self, region: Option<&str>, since: DateTime<Utc>) -> Result<Vec<Rollup>, StoreError> {
        self.rollups_between(region, since, None).await
    }
    /// Removes rollups older than `cutoff`.
    async fn purge_rollups_before(&self, cutoff: DateTime<Utc>) -> Result<u64, StoreError>;
}

/// What the decisions carry across restarts and regions (breakers and their history, the
/// alert engine's state, per-target status): written by the store link, read at start, by the
/// pipeline, the weekly report and the CLI.
#[async_trait]
pub trait StateStore: Send + Sync {
    /// Saves the current breaker state of a target.
    async fn save_breaker(&self, record: &BreakerRecord) -> Result<(), StoreError>;
    /// Loads breaker states (`region: None` for all regions).
    async fn load_breakers(&self, region: Option<&str>) -> Result<Vec<BreakerRecord>, StoreError>;
    /// Appends to the transition history; the same transition (target, `at`, from, to) again is ignored.
    async fn append_transition(&self, t: &BreakerTransition) -> Result<(), StoreError>;
    /// Newest transitions first, for one region (and one target when given).
    async fn transitions(
        &self,
        region: &str,
        target: Option<&Target>,
        limit: i64,
    ) -> Result<Vec<BreakerTransition>, StoreError>;
    /// Transitions with `since <= at < until`, oldest first (`region: None` for all regions).
    async fn transitions_between(
        &self,
        region: Option<&str>,
        since: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<Vec<BreakerTransition>, StoreError>;

    /// Saves the alert engine's state (firing alerts, last notification times) as one JSON document per region.
    async fn save_alert_state(&self, region: &str, state: &StateJson) -> Result<(), StoreError>;
    /// Loads it back (`None` on first start).
    async fn load_alert_state(&self, region: &str) -> Result<Option<StateJson>, StoreError>;

    /// Writes this instance's per-target status rows (one per region × target, replaced).
    async fn publish_target_status(&self, rows: &[TargetStatus]) -> Result<(), StoreError>;
    /// Status rows written at or after `since`, of every region or of every region but `except_region`.
    async fn target_statuses(
        &self,
        since: DateTime<Utc>,
        except_region: Option<&str>,
    ) -> Result<Vec<TargetStatus>, StoreError>;

    /// Stores a new drill (`vigil drill`, `POST /v1/drills`); its id repeated is ignored.
    async fn start_drill(&self, drill: &crate::vocab::drill::Drill) -> Result<(), StoreError>;
    /// Drills still running at `since` or started since (ended or not), oldest first.
    async fn drills(&self, since: DateTime<Utc>) -> Result<Vec<crate::vocab::drill::Drill>, StoreError>;
    /// Ends a running drill at `at`; false when it is unknown, ended already or run out.
    async fn end_drill(&self, id: Uuid, at: DateTime<Utc>) -> Result<bool, StoreError>;

    /// Appends chain-head records (a repeat of the same region, chain and time is ignored).
    async fn record_chain_heads(&self, heads: &[crate::vocab::chain_head::ChainHead]) -> Result<(), StoreError>;
    /// The chain heads of `[since, until)` of one region or all, with each chain's head in
    /// effect at `since` (its newest record before it), ordered by region, chain and time.
    async fn chain_heads_between(
        &self,
        region: Option<&str>,
        since: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<Vec<crate::vocab::chain_head::ChainHead>, StoreError>;
}

/// The alert outbox and the incident leases that let regions share it: used by the notifier
/// (`io::notify::outbox`), which enqueues, delivers and coordinates; the weekly report reads
/// [`OutboxStore::outbox_between`].
#[async_trait]
pub trait OutboxStore: Send + Sync {
    /// Adds notifications to the outbox (ignored when the id exists).
    async fn enqueue(&self, items: &[OutboxItem]) -> Result<(), StoreError>;
    /// [`enqueue`](Self::enqueue) and [`StateStore::save_alert_state`] in one transaction: an
    /// evaluation's pages and the engine state that remembers them are stored together or not at all.
    async fn enqueue_with_state(&self, items: &[OutboxItem], region: &str, state: &StateJson)
        -> Result<(), StoreError>;
    /// Undelivered items due at `now`, oldest first; only `region`'s and only `channel`'s when given.
    async fn due(
        &self,
        region: Option<&str>,
        channel: Option<&str>,
        now: DateTime<Utc>,
        limit: i64,
    ) -> Result<Vec<OutboxItem>, StoreError>;
    /// The channels with undelivered items due at `now` (only `region`'s when given), by name.
    async fn due_channels(&self, region: Option<&str>, now: DateTime<Utc>) -> Result<Vec<String>, StoreError>;
    /// Marks an item delivered.
    async fn mark_delivered(&self, id: Uuid, at: DateTime<Utc>) -> Result<(), StoreError>;
    /// Records a failed attempt and when to try next.
    async fn mark_retry(&self, id: Uuid, next_attempt_at: DateTime<Utc>, error: &str) -> Result<(), StoreError>;
    /// Gives up on an item, keeping it with the reason.
    async fn mark_abandoned(&self, id: Uuid, at: DateTime<Utc>, error: &str) -> Result<(), StoreError>;
    /// Undelivered, not abandoned items.
    async fn outbox_depth(&self) -> Result<i64, StoreError>;
    /// Outbox items (delivered or not) enqueued with `since <= created_at < until`, oldest first
    /// (`region: None` for all regions).
    async fn outbox_between(
        &self,
        region: Option<&str>,
        since: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<Vec<OutboxItem>, StoreError>;

    /// Claims (or renews) the lease on `incident` for `region` until `expires_at`: inserted when
    /// absent, taken over when expired at `now`, renewed when `region` holds it. Returns the owner.
    async fn claim_incident(
        &self,
        incident: &str,
        region: &str,
        now: DateTime<Utc>,
        expires_at: DateTime<Utc>,
    ) -> Result<String, StoreError>;
    /// Drops `region`'s lease on `incident` (no-op when another region holds it).
    async fn release_incident(&self, incident: &str, region: &str) -> Result<(), StoreError>;
    /// Records that `region` sees `incident` firing (or no longer) at `at`.
    async fn record_sighting(
        &self,
        incident: &str,
        region: &str,
        firing: bool,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError>;
    /// Every region's sighting of `incident`, by region.
    async fn sightings(&self, incident: &str) -> Result<Vec<Sighting>, StoreError>;
    /// Forgets an incident once its resolve went out: its lease and sightings.
    async fn close_incident(&self, incident: &str) -> Result<(), StoreError>;
}

/// What the outside feeds bring in (credit balances, providers' status pages): written by the
/// balance poller and the status page poller, read by the weekly report.
#[async_trait]
pub trait FeedStore: Send + Sync {
    /// Stores a credit balance reading.
    async fn insert_balance(&self, reading: &BalanceReading) -> Result<(), StoreError>;
    /// Readings for a provider since a time, oldest first.
    async fn balances(&self, provider: &str, since: DateTime<Utc>) -> Result<Vec<BalanceReading>, StoreError>;

    /// Inserts or updates providers' status page incidents by (provider, id); a stored
    /// resolution time is kept once set.
    async fn upsert_provider_incidents(
        &self,
        items: &[crate::vocab::provider_status::ProviderIncident],
    ) -> Result<(), StoreError>;
    /// Provider incidents opened with `since <= created_at < until`, oldest first
    /// (`provider: None` for all providers).
    async fn provider_incidents_between(
        &self,
        provider: Option<&str>,
        since: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<Vec<crate::vocab::provider_status::ProviderIncident>, StoreError>;
    /// Inserts or replaces the latest state of providers' status page components.
    async fn upsert_provider_components(
        &self,
        items: &[crate::vocab::provider_status::ProviderComponent],
    ) -> Result<(), StoreError>;
    /// The latest stored component states of `provider`, by name.
    async fn provider_components(
        &self,
        provider: &str,
    ) -> Result<Vec<crate::vocab::provider_status::ProviderComponent>, StoreError>;
}
