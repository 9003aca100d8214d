//! Retention: the job that removes what is older than its configured retention, table by table,
//! in bounded batches, off the sample road (docs/STORAGE.md, "Retention"); and the upkeep task
//! that first applies migrations a database down at start could not take.

use super::Prune;
use super::StoreError;
use super::{AdminStore, Store};
use crate::config::{RetentionConfig, StorageConfig};
use chrono::{DateTime, Utc};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Pause between two delete batches of one table, so writers take the lock in between.
const BETWEEN_BATCHES: Duration = Duration::from_millis(20);
/// How often migrations are tried again while the database is still unreachable.
pub const MIGRATE_RETRY_EVERY: Duration = Duration::from_secs(5);

/// How long each table is kept and how the job deletes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Raw samples (`storage.retention_days`).
    pub samples_days: u32,
    /// Everything else (`[storage.retention]`).
    pub tables: RetentionConfig,
}

impl Policy {
    /// The policy a `[storage]` section configures.
    pub fn from_config(storage: &StorageConfig) -> Self {
        Policy { samples_days: storage.retention_days, tables: storage.retention.clone() }
    }

    /// Days `what` is kept.
    pub fn days(&self, what: Prune) -> u32 {
        let t = &self.tables;
        match what {
            Prune::Rollups => t.rollups_days,
            Prune::Outbox => t.outbox_days,
            Prune::BreakerTransitions | Prune::Drills | Prune::ChainHeads => t.breaker_transitions_days,
            Prune::CreditReadings => t.credit_readings_days,
            Prune::AlertState | Prune::TargetStatus | Prune::IncidentLeases | Prune::IncidentSightings => {
                t.alert_state_days
            }
            Prune::ProviderIncidents | Prune::ProviderComponents => t.provider_status_days,
        }
    }
}

/// What one run removed (and what failed), by table.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RetentionReport {
    /// Rows removed, by table name, in the order visited (tables with nothing to remove included).
    pub removed: Vec<(&'static str, u64)>,
    /// Tables whose purge failed, with the error; retried on the next run.
    pub failed: Vec<(&'static str, String)>,
}

impl RetentionReport {
    /// Rows removed from `table` in this run.
    #[cfg(any(test, feature = "test-support"))]
    pub fn removed_from(&self, table: &str) -> u64 {
        self.removed.iter().filter(|(t, _)| *t == table).map(|(_, n)| n).sum()
    }
}

fn days_before(now: DateTime<Utc>, days: u32) -> DateTime<Utc> {
    now - chrono::Duration::days(i64::from(days))
}

/// One retention pass at `now`: samples, then every [`Prune`] table until nothing older is
/// left (or `stop` fires). A failing table is logged and skipped; the others still run.
pub async fn run_once(
    store: &dyn Store,
    policy: &Policy,
    now: DateTime<Utc>,
    stop: &CancellationToken,
) -> RetentionReport {
    let mut report = RetentionReport::default();
    let cutoff = days_before(now, policy.samples_days);
    match store.purge_samples_before(cutoff).await {
        Ok(n) => {
            log_removed("samples", n, cutoff);
            report.removed.push(("samples", n));
        }
        Err(e) => fail(&mut report, "samples", e),
    }
    // Canary runs are samples of another kind: they follow the samples' clock.
    match store.purge_canary_runs_before(cutoff).await {
        Ok(n) => {
            log_removed("canary_runs", n, cutoff);
            report.removed.push(("canary_runs", n));
        }
        Err(e) => fail(&mut report, "canary_runs", e),
    }
    // So are golden check runs.
    match store.purge_check_runs_before(cutoff).await {
        Ok(n) => {
            log_removed("check_runs", n, cutoff);
            report.removed.push(("check_runs", n));
        }
        Err(e) => fail(&mut report, "check_runs", e),
    }
    // And long-prompt probe runs.
    match store.purge_workload_runs_before(cutoff).await {
        Ok(n) => {
            log_removed("workload_runs", n, cutoff);
            report.removed.push(("workload_runs", n));
        }
        Err(e) => fail(&mut report, "workload_runs", e),
    }
    for what in Prune::ALL {
        if stop.is_cancelled() {
            break;
        }
        let cutoff = days_before(now, policy.days(what));
        match prune_all(store, what, cutoff, policy.tables.batch_size, stop).await {
            Ok(n) => {
                log_removed(what.table(), n, cutoff);
                report.removed.push((what.table(), n));
            }
            Err(e) => fail(&mut report, what.table(), e),
        }
    }
    report
}

/// Deletes `what` older than `cutoff`, `batch` rows per statement, pausing between batches.
async fn prune_all(
    store: &dyn Store,
    what: Prune,
    cutoff: DateTime<Utc>,
    batch: u32,
    stop: &CancellationToken,
) -> Result<u64, StoreError> {
    let mut removed = 0;
    loop {
        let n = store.prune(what, cutoff, batch).await?;
        removed += n;
        if n < u64::from(batch) || stop.is_cancelled() {
            return Ok(removed);
        }
        tokio::time::sleep(BETWEEN_BATCHES).await;
    }
}

fn log_removed(table: &'static str, removed: u64, cutoff: DateTime<Utc>) {
    if removed > 0 {
        tracing::info!(table, removed, %cutoff, "retention: old rows removed");
    } else {
        tracing::debug!(table, %cutoff, "retention: nothing to remove");
    }
}

fn fail(report: &mut RetentionReport, table: &'static str, e: StoreError) {
    tracing::warn!(table, error = %e, "retention failed for this table; retried on the next run");
    report.failed.push((table, e.to_string()));
}

/// One try at the migrations a start could not apply (the database was down): true once they
/// are applied; a database still unreachable is quietly retried, any other failure logged.
pub async fn try_migrate(store: &dyn AdminStore) -> bool {
    match store.migrate().await {
        Ok(applied) => {
            let versions: Vec<String> = applied.iter().map(|m| m.version.to_string()).collect();
            tracing::info!(versions = %versions.join(", "), "storage reachable; migrations applied");
            true
        }
        Err(StoreError::Unavailable(_)) => false,
        Err(e) => {
            tracing::error!(error = %e, "migrations failed; samples stay in the spool");
            false
        }
    }
}
