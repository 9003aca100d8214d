//! The [`Store`](super::Store) implementation both databases share (all seven narrow traits):
//! every method whose SQL is the same in both dialects is written here once over a
//! [`Backend`], which only runs [`Stmt`]s and supplies what really differs (migrations, the
//! sample insert path, sample and row purging).

use super::map_sqlx;
use super::rows;
use super::rows::StoredRow;
use super::sql;
use super::sql::Stmt;
use super::Prune;
use super::SampleQuery;
use super::StoreError;
use super::{AdminStore, FeedStore, MemberStore, OutboxStore, RollupStore, SampleStore, StateStore};
use crate::vocab::canary::CanaryRun;
use crate::vocab::check::CheckRun;
use crate::vocab::member::Member;
use crate::vocab::provider_status::{ProviderComponent, ProviderIncident};
use crate::vocab::records::BalanceReading;
use crate::vocab::records::BreakerRecord;
use crate::vocab::records::BreakerTransition;
use crate::vocab::records::OutboxItem;
use crate::vocab::records::Rollup;
use crate::vocab::records::Sighting;
use crate::vocab::records::TargetStatus;
use crate::vocab::sample::Sample;
use crate::vocab::target::Target;
use crate::vocab::workload::WorkloadRun;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

/// One database behind the shared [`Store`](super::Store): how it runs statements, and the operations
/// that are its own.
#[async_trait]
pub(crate) trait Backend: Send + Sync {
    /// The driver's row type.
    type Row: StoredRow + Send;

    /// Runs one statement; returns the rows it changed.
    async fn run(&self, stmt: Stmt) -> Result<u64, StoreError>;
    /// Runs statements in order in one transaction, each taken from `stmts` as its turn comes;
    /// returns the rows they changed.
    async fn run_all<I>(&self, stmts: I) -> Result<u64, StoreError>
    where
        I: IntoIterator<Item = Stmt> + Send,
        I::IntoIter: Send;
    /// Runs a query; returns its rows.
    async fn rows(&self, stmt: Stmt) -> Result<Vec<Self::Row>, StoreError>;
    /// Runs a query and decodes each row as it arrives: the driver's few rows in flight are all
    /// that is held besides the result (an hour of rollups at 10,000 targets, 50,000 rows, held
    /// whole before decoding, was tens of megabytes at once); a row that does not decode fails it.
    /// `decode` may remember what rows repeat (the rollups' names) between its calls.
    async fn decoded<T: Send + 'static, D>(&self, stmt: Stmt, decode: D) -> Result<Vec<T>, StoreError>
    where
        D: for<'r> FnMut(&'r Self::Row) -> Result<T, sqlx::Error> + Send;

    /// [`AdminStore::migrate`].
    async fn migrate(&self) -> Result<Vec<super::Migrated>, StoreError>;
    /// [`AdminStore::integrity`].
    fn integrity(&self) -> Result<(), String>;
    /// [`AdminStore::vanished`]; only a database that is a file can lose it.
    fn vanished(&self) -> Result<(), String> {
        Ok(())
    }
    /// [`SampleStore::insert_samples`].
    async fn insert_samples(&self, samples: &[Sample]) -> Result<u64, StoreError>;
    /// [`SampleStore::purge_samples_before`].
    async fn purge_samples_before(&self, cutoff: DateTime<Utc>) -> Result<u64, StoreError>;
    /// [`AdminStore::prune`].
    async fn prune(&self, what: Prune, cutoff: DateTime<Utc>, limit: u32) -> Result<u64, StoreError>;
}

/// Decodes each row of `rows` as it arrives (for [`Backend::decoded`]); `fail` maps the driver's
/// errors as the backend does, a row that does not decode fails the whole read.
pub(crate) async fn decode_each<R, T>(
    mut rows: impl futures::Stream<Item = Result<R, sqlx::Error>> + Unpin,
    mut decode: impl for<'r> FnMut(&'r R) -> Result<T, sqlx::Error>,
    fail: impl Fn(sqlx::Error) -> StoreError,
) -> Result<Vec<T>, StoreError> {
    let mut out = Vec::new();
    while let Some(row) = futures::TryStreamExt::try_next(&mut rows).await.map_err(&fail)? {
        out.push(decode(&row).map_err(map_sqlx)?);
    }
    Ok(out)
}

/// Runs a query and decodes every row as it arrives; a row that does not decode fails the read.
async fn read<B: Backend, T: Send + 'static>(
    db: &B,
    stmt: Stmt,
    decode: fn(&B::Row) -> Result<T, sqlx::Error>,
) -> Result<Vec<T>, StoreError> {
    db.decoded(stmt, decode).await
}

/// Runs a query for at most one row's text column `col`.
async fn read_text<B: Backend>(db: &B, stmt: Stmt, col: &str) -> Result<Option<String>, StoreError> {
    db.rows(stmt).await?.first().map(|row| row.text(col)).transpose().map_err(map_sqlx)
}

/// Runs a `count(*) AS n` query.
async fn read_count<B: Backend>(db: &B, stmt: Stmt) -> Result<i64, StoreError> {
    match db.rows(stmt).await?.first() {
        Some(row) => row.int("n").map_err(map_sqlx),
        None => Err(StoreError::Other("count returned no row".into())),
    }
}

#[async_trait]
impl<B: Backend> AdminStore for B {
    async fn migrate(&self) -> Result<Vec<super::Migrated>, StoreError> {
        Backend::migrate(self).await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.run(sql::ping()).await.map(|_| ())
    }

    fn integrity(&self) -> Result<(), String> {
        Backend::integrity(self)
    }

    fn vanished(&self) -> Result<(), String> {
        Backend::vanished(self)
    }

    async fn prune(&self, what: Prune, cutoff: DateTime<Utc>, limit: u32) -> Result<u64, StoreError> {
        Backend::prune(self, what, cutoff, limit).await
    }
}

#[async_trait]
impl<B: Backend> SampleStore for B {
    async fn insert_samples(&self, samples: &[Sample]) -> Result<u64, StoreError> {
        if samples.is_empty() {
            return Ok(0);
        }
        Backend::insert_samples(self, samples).await
    }

    async fn samples(&self, q: &SampleQuery) -> Result<Vec<Sample>, StoreError> {
        read(self, sql::samples(q), rows::sample_of).await
    }

    async fn count_samples(&self, q: &SampleQuery) -> Result<i64, StoreError> {
        read_count(self, sql::count_samples(q)).await
    }

    async fn purge_samples_before(&self, cutoff: DateTime<Utc>) -> Result<u64, StoreError> {
        Backend::purge_samples_before(self, cutoff).await
    }

    async fn insert_canary_runs(&self, runs: &[CanaryRun]) -> Result<u64, StoreError> {
        if runs.is_empty() {
            return Ok(0);
        }
        self.run_all(runs.chunks(sql::CANARY_CHUNK).map(sql::insert_canary_runs)).await
    }

    async fn canary_runs(
        &self,
        region: Option<&str>,
        since: DateTime<Utc>,
        limit: i64,
    ) -> Result<Vec<CanaryRun>, StoreError> {
        read(self, sql::canary_runs(region, since, limit), rows::canary_of).await
    }

    async fn purge_canary_runs_before(&self, cutoff: DateTime<Utc>) -> Result<u64, StoreError> {
        self.run(sql::purge_canary_runs_before(cutoff)).await
    }

    async fn insert_check_runs(&self, runs: &[CheckRun]) -> Result<u64, StoreError> {
        if runs.is_empty() {
            return Ok(0);
        }
        self.run_all(runs.chunks(sql::CHECK_CHUNK).map(sql::insert_check_runs)).await
    }

    async fn check_runs(
        &self,
        region: Option<&str>,
        since: DateTime<Utc>,
        limit: i64,
    ) -> Result<Vec<CheckRun>, StoreError> {
        read(self, sql::check_runs(region, since, limit), rows::check_of).await
    }

    async fn purge_check_runs_before(&self, cutoff: DateTime<Utc>) -> Result<u64, StoreError> {
        self.run(sql::purge_check_runs_before(cutoff)).await
    }

    async fn insert_workload_runs(&self, runs: &[WorkloadRun]) -> Result<u64, StoreError> {
        if runs.is_empty() {
            return Ok(0);
        }
        self.run_all(runs.chunks(sql::WORKLOAD_CHUNK).map(sql::insert_workload_runs)).await
    }

    async fn workload_runs(
        &self,
        region: Option<&str>,
        since: DateTime<Utc>,
        limit: i64,
    ) -> Result<Vec<WorkloadRun>, StoreError> {
        read(self, sql::workload_runs(region, since, limit), rows::workload_of).await
    }

    async fn purge_workload_runs_before(&self, cutoff: DateTime<Utc>) -> Result<u64, StoreError> {
        self.run(sql::purge_workload_runs_before(cutoff)).await
    }
}

#[async_trait]
impl<B: Backend> RollupStore for B {
    async fn upsert_rollups(&self, rollups: &[Rollup]) -> Result<(), StoreError> {
        self.run_all(sql::upsert_rollups(rollups)).await.map(|_| ())
    }

    async fn rollups_between(
        &self,
        region: Option<&str>,
        since: DateTime<Utc>,
        until: Option<DateTime<Utc>>,
    ) -> Result<Vec<Rollup>, StoreError> {
        let mut names = rows::RollupNames::default();
        self.decoded(sql::rollups_between(region, since, until), move |row| names.rollup_of(row)).await
    }

    async fn purge_rollups_before(&self, cutoff: DateTime<Utc>) -> Result<u64, StoreError> {
        self.run(sql::purge_rollups_before(cutoff)).await
    }
}

#[async_trait]
impl<B: Backend> StateStore for B {
    async fn save_breaker(&self, record: &BreakerRecord) -> Result<(), StoreError> {
        self.run(sql::save_breaker(record)).await.map(|_| ())
    }

    async fn load_breakers(&self, region: Option<&str>) -> Result<Vec<BreakerRecord>, StoreError> {
        read(self, sql::load_breakers(region), rows::breaker_of).await
    }

    async fn append_transition(&self, t: &BreakerTransition) -> Result<(), StoreError> {
        self.run(sql::append_transition(t)).await.map(|_| ())
    }

    async fn transitions(
        &self,
        region: &str,
        target: Option<&Target>,
        limit: i64,
    ) -> Result<Vec<BreakerTransition>, StoreError> {
        read(self, sql::transitions(region, target, limit), rows::transition_of).await
    }

    async fn transitions_between(
        &self,
        region: Option<&str>,
        since: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<Vec<BreakerTransition>, StoreError> {
        read(self, sql::transitions_between(region, since, until), rows::transition_of).await
    }

    async fn save_alert_state(&self, region: &str, state: &crate::vocab::records::StateJson) -> Result<(), StoreError> {
        self.run(sql::save_alert_state(region, state, Utc::now())).await.map(|_| ())
    }

    async fn load_alert_state(&self, region: &str) -> Result<Option<crate::vocab::records::StateJson>, StoreError> {
        use crate::vocab::records::StateJson;
        let rows = self.rows(sql::load_alert_state(region)).await?;
        let Some(row) = rows.first() else { return Ok(None) };
        let (state, what) = match row.opt_bytes("state_gz").map_err(map_sqlx)? {
            Some(gz) => (StateJson::from_gzip(gz), "state_gz is not gzip of one JSON document"),
            // A row an earlier build wrote: the JSON text.
            None => (StateJson::from_text(&row.text("state").map_err(map_sqlx)?), "state is not JSON"),
        };
        state.map(Some).map_err(|e| StoreError::Other(format!("alert_state of region {region}: {what}: {e}")))
    }

    async fn publish_target_status(&self, rows: &[TargetStatus]) -> Result<(), StoreError> {
        self.run_all(sql::publish_target_status(rows)).await.map(|_| ())
    }

    async fn target_statuses(
        &self,
        since: DateTime<Utc>,
        except_region: Option<&str>,
    ) -> Result<Vec<TargetStatus>, StoreError> {
        read(self, sql::target_statuses(since, except_region), rows::target_status_of).await
    }

    async fn start_drill(&self, drill: &crate::vocab::drill::Drill) -> Result<(), StoreError> {
        self.run(sql::start_drill(drill)).await.map(|_| ())
    }

    async fn drills(&self, since: DateTime<Utc>) -> Result<Vec<crate::vocab::drill::Drill>, StoreError> {
        read(self, sql::drills(since), rows::drill_of).await
    }

    async fn end_drill(&self, id: Uuid, at: DateTime<Utc>) -> Result<bool, StoreError> {
        self.run(sql::end_drill(id, at)).await.map(|n| n > 0)
    }

    async fn record_chain_heads(&self, heads: &[crate::vocab::chain_head::ChainHead]) -> Result<(), StoreError> {
        self.run_all(heads.iter().map(sql::record_chain_head)).await.map(|_| ())
    }

    async fn chain_heads_between(
        &self,
        region: Option<&str>,
        since: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<Vec<crate::vocab::chain_head::ChainHead>, StoreError> {
        read(self, sql::chain_heads_between(region, since, until), rows::chain_head_of).await
    }
}

#[async_trait]
impl<B: Backend> OutboxStore for B {
    async fn enqueue(&self, items: &[OutboxItem]) -> Result<(), StoreError> {
        self.run_all(items.iter().map(sql::enqueue)).await.map(|_| ())
    }

    async fn enqueue_with_state(
        &self,
        items: &[OutboxItem],
        region: &str,
        state: &crate::vocab::records::StateJson,
    ) -> Result<(), StoreError> {
        let mut stmts: Vec<_> = items.iter().map(sql::enqueue).collect();
        stmts.push(sql::save_alert_state(region, state, Utc::now()));
        self.run_all(stmts).await.map(|_| ())
    }

    async fn due(
        &self,
        region: Option<&str>,
        channel: Option<&str>,
        now: DateTime<Utc>,
        limit: i64,
    ) -> Result<Vec<OutboxItem>, StoreError> {
        read(self, sql::due(region, channel, now, limit), rows::outbox_of).await
    }

    async fn due_channels(&self, region: Option<&str>, now: DateTime<Utc>) -> Result<Vec<String>, StoreError> {
        read(self, sql::due_channels(region, now), |row| row.text("channel")).await
    }

    async fn mark_delivered(&self, id: Uuid, at: DateTime<Utc>) -> Result<(), StoreError> {
        self.run(sql::mark_delivered(id, at)).await.map(|_| ())
    }

    async fn mark_retry(&self, id: Uuid, next_attempt_at: DateTime<Utc>, error: &str) -> Result<(), StoreError> {
        self.run(sql::mark_retry(id, next_attempt_at, error)).await.map(|_| ())
    }

    async fn mark_abandoned(&self, id: Uuid, at: DateTime<Utc>, error: &str) -> Result<(), StoreError> {
        self.run(sql::mark_abandoned(id, at, error)).await.map(|_| ())
    }

    async fn outbox_depth(&self) -> Result<i64, StoreError> {
        read_count(self, sql::outbox_depth()).await
    }

    async fn outbox_between(
        &self,
        region: Option<&str>,
        since: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<Vec<OutboxItem>, StoreError> {
        read(self, sql::outbox_between(region, since, until), rows::outbox_of).await
    }

    async fn claim_incident(
        &self,
        incident: &str,
        region: &str,
        now: DateTime<Utc>,
        expires_at: DateTime<Utc>,
    ) -> Result<String, StoreError> {
        if let Some(owner) = read_text(self, sql::claim_incident(incident, region, now, expires_at), "owner").await? {
            return Ok(owner);
        }
        // Held by another region and not expired: the upsert changed nothing and returned no row.
        read_text(self, sql::incident_owner(incident), "owner")
            .await?
            .ok_or_else(|| StoreError::Other(format!("incident lease {incident:?} vanished while claimed")))
    }

    async fn release_incident(&self, incident: &str, region: &str) -> Result<(), StoreError> {
        self.run(sql::release_incident(incident, region)).await.map(|_| ())
    }

    async fn record_sighting(
        &self,
        incident: &str,
        region: &str,
        firing: bool,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        self.run(sql::record_sighting(incident, region, firing, at)).await.map(|_| ())
    }

    async fn sightings(&self, incident: &str) -> Result<Vec<Sighting>, StoreError> {
        read(self, sql::sightings(incident), rows::sighting_of).await
    }

    async fn close_incident(&self, incident: &str) -> Result<(), StoreError> {
        self.run_all(sql::close_incident(incident)).await.map(|_| ())
    }
}

#[async_trait]
impl<B: Backend> FeedStore for B {
    async fn insert_balance(&self, reading: &BalanceReading) -> Result<(), StoreError> {
        self.run(sql::insert_balance(reading)).await.map(|_| ())
    }

    async fn balances(&self, provider: &str, since: DateTime<Utc>) -> Result<Vec<BalanceReading>, StoreError> {
        read(self, sql::balances(provider, since), rows::balance_of).await
    }

    async fn upsert_provider_incidents(&self, items: &[ProviderIncident]) -> Result<(), StoreError> {
        self.run_all(items.iter().map(sql::upsert_provider_incident)).await.map(|_| ())
    }

    async fn provider_incidents_between(
        &self,
        provider: Option<&str>,
        since: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<Vec<ProviderIncident>, StoreError> {
        read(self, sql::provider_incidents_between(provider, since, until), rows::incident_of).await
    }

    async fn upsert_provider_components(&self, items: &[ProviderComponent]) -> Result<(), StoreError> {
        self.run_all(items.iter().map(sql::upsert_provider_component)).await.map(|_| ())
    }

    async fn provider_components(&self, provider: &str) -> Result<Vec<ProviderComponent>, StoreError> {
        read(self, sql::provider_components(provider), rows::component_of).await
    }
}

#[async_trait]
impl<B: Backend> MemberStore for B {
    async fn beat(&self, member: &Member, prune_before: DateTime<Utc>) -> Result<(), StoreError> {
        self.run_all(vec![sql::members_prune(prune_before), sql::member_beat(member)]).await.map(|_| ())
    }

    async fn members(&self, region: &str) -> Result<Vec<Member>, StoreError> {
        read(self, sql::members(region), rows::member_of).await
    }

    async fn leave(&self, region: &str, id: &str) -> Result<(), StoreError> {
        self.run(sql::member_leave(region, id)).await.map(|_| ())
    }
}
