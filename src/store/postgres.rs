//! PostgreSQL store: day-partitioned `samples`, batch inserts through binary `COPY`, shared by every region.

use super::pg_copy;
use super::rows::{
    canary_of, component_of, incident_of, json_of, outbox_of, sample_of, target_of, target_status_of, transition_of,
    StoredRow,
};
use super::{
    corruption, map_migrate, map_sqlx, newest_version, pg_connect_error, redact_url, BalanceReading, BreakerRecord,
    BreakerTransition, OutboxItem, Prune, Rollup, SampleQuery, Sighting, Store, StoreError, TargetStatus,
    CANARY_COLUMNS, SAMPLE_COLUMNS,
};
use crate::sample::Sample;
use crate::target::Target;
use async_trait::async_trait;
use chrono::{DateTime, Days, NaiveDate, NaiveTime, Utc};
use sqlx::migrate::Migrator;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions, PgRow};
use sqlx::{AssertSqlSafe, Connection, Postgres, QueryBuilder, Row};
use std::collections::{BTreeSet, HashSet};
use std::str::FromStr;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;
use uuid::Uuid;

static MIGRATOR: Migrator = sqlx::migrate!("migrations/postgres");

/// Rows per `COPY` (or `INSERT … SELECT FROM UNNEST`, whose arrays keep the bind count at 24).
const INSERT_CHUNK: usize = 5_000;

/// Binary `COPY` of a batch straight into `samples` (the fast path; see [`PgStore::copy_chunk`]).
static COPY_SAMPLES: LazyLock<String> =
    LazyLock::new(|| format!("COPY samples ({SAMPLE_COLUMNS}) FROM STDIN (FORMAT binary)"));
/// Per-session staging table for batches that hold ids already stored; emptied at every commit.
const CREATE_STAGE: &str = "SET LOCAL client_min_messages = warning; \
    CREATE TEMP TABLE IF NOT EXISTS vigil_samples_stage (LIKE samples INCLUDING DEFAULTS) ON COMMIT DELETE ROWS";
/// Binary `COPY` into the staging table.
static COPY_STAGE: LazyLock<String> =
    LazyLock::new(|| format!("COPY vigil_samples_stage ({SAMPLE_COLUMNS}) FROM STDIN (FORMAT binary)"));
/// Moves staged rows into `samples`, skipping ids already stored or repeated within the batch.
static INSERT_FROM_STAGE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO samples ({SAMPLE_COLUMNS}) SELECT {SAMPLE_COLUMNS} FROM vigil_samples_stage \
         ON CONFLICT (id, started_at) DO NOTHING"
    )
});
/// SQLSTATE unique_violation: a `COPY` met an id already stored.
const UNIQUE_VIOLATION: &str = "23505";

/// How [`PgStore`] sends sample batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InsertPath {
    /// Binary `COPY` (the default); see [`PgStore::copy_chunk`].
    #[default]
    Copy,
    /// One `INSERT … SELECT FROM UNNEST(…) ON CONFLICT DO NOTHING` per chunk: the earlier path,
    /// kept so the benchmark can show both side by side.
    Unnest,
}

/// SQLSTATEs of a concurrent `CREATE TABLE IF NOT EXISTS` losing the race.
const DUPLICATE_CODES: [&str; 3] = ["42P07", "23505", "42710"];

/// PostgreSQL implementation of [`Store`].
pub struct PgStore {
    pool: PgPool,
    /// For the direct session [`Store::migrate`] opens first, to say exactly why it fails.
    opts: PgConnectOptions,
    /// The URL with its password redacted, named in every "unavailable" reason.
    target: String,
    acquire_timeout: Duration,
    /// Days whose `samples_YYYYMMDD` partition is known to exist.
    partitions: Mutex<HashSet<NaiveDate>>,
    insert_path: InsertPath,
    /// Why the data is known to be damaged (a query failed with XX001/XX002), if it is.
    corrupt: Mutex<Option<String>>,
}

impl PgStore {
    /// Builds a lazily connecting pool; nothing is contacted until the first query.
    pub fn open(url: &str, acquire_timeout: Duration) -> Result<Self, StoreError> {
        let target = redact_url(url);
        let opts = PgConnectOptions::from_str(url).map_err(|e| StoreError::BadUrl(format!("{target}: {e}")))?;
        let pool =
            PgPoolOptions::new().max_connections(8).acquire_timeout(acquire_timeout).connect_lazy_with(opts.clone());
        Ok(PgStore {
            pool,
            opts,
            target,
            acquire_timeout,
            partitions: Mutex::new(HashSet::new()),
            insert_path: InsertPath::default(),
            corrupt: Mutex::new(None),
        })
    }

    /// A pooled session; failing to get one is always `Unavailable`, with the reason.
    async fn conn(&self) -> Result<PoolConnection<Postgres>, StoreError> {
        self.pool.acquire().await.map_err(|e| pg_connect_error(&e, &self.target, self.acquire_timeout))
    }

    /// Maps a query failure, naming the database in "unavailable" reasons and remembering corruption.
    fn fail(&self, e: sqlx::Error) -> StoreError {
        if let Some(why) = corruption(&e) {
            tracing::error!(error = %why, target = %self.target, "PostgreSQL reports corrupt data");
            if let Ok(mut c) = self.corrupt.lock() {
                c.get_or_insert(why);
            }
        }
        match map_sqlx(e) {
            StoreError::Unavailable(why) => StoreError::Unavailable(format!("{why} [{}]", self.target)),
            other => other,
        }
    }

    /// Opens one session outside the pool, so a refusal is reported as what it is: the pool
    /// retries refused connections until its timeout and would only say it timed out.
    async fn check_session(&self) -> Result<(), StoreError> {
        match tokio::time::timeout(self.acquire_timeout, PgConnection::connect_with(&self.opts)).await {
            Ok(Ok(conn)) => {
                let _ = conn.close().await;
                Ok(())
            }
            Ok(Err(e)) => Err(pg_connect_error(&e, &self.target, self.acquire_timeout)),
            Err(_) => Err(StoreError::Unavailable(format!(
                "no answer within {:?}: the host accepts no connection or never replies [{}]",
                self.acquire_timeout, self.target
            ))),
        }
    }

    /// Chooses how sample batches are sent (the benchmark compares them).
    pub fn with_insert_path(mut self, path: InsertPath) -> Self {
        self.insert_path = path;
        self
    }

    /// The underlying pool (benchmarks and tests inspect the schema through it).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Name of the partition holding samples started on `day`.
    pub fn partition_name(day: NaiveDate) -> String {
        format!("samples_{}", day.format("%Y%m%d"))
    }

    fn cached(&self, day: NaiveDate) -> bool {
        self.partitions.lock().map(|set| set.contains(&day)).unwrap_or(false)
    }

    fn remember(&self, day: NaiveDate, exists: bool) {
        if let Ok(mut set) = self.partitions.lock() {
            if exists {
                set.insert(day);
            } else {
                set.remove(&day);
            }
        }
    }

    fn forget_all(&self) {
        if let Ok(mut set) = self.partitions.lock() {
            set.clear();
        }
    }

    /// Creates the partitions for `days` (and each following day, so midnight never waits on DDL).
    async fn ensure_partitions(&self, days: &BTreeSet<NaiveDate>) -> Result<(), StoreError> {
        let mut wanted = BTreeSet::new();
        for day in days {
            wanted.insert(*day);
            if let Some(next) = day.checked_add_days(Days::new(1)) {
                wanted.insert(next);
            }
        }
        for day in wanted {
            if !self.cached(day) {
                self.create_partition(day).await?;
                self.remember(day, true);
            }
        }
        Ok(())
    }

    async fn create_partition(&self, day: NaiveDate) -> Result<(), StoreError> {
        let next =
            day.checked_add_days(Days::new(1)).ok_or_else(|| StoreError::Other(format!("date {day} out of range")))?;
        // The name and bounds are built from a date only, so the statement is injection-free.
        let ddl = format!(
            "CREATE TABLE IF NOT EXISTS {} PARTITION OF samples FOR VALUES FROM ('{} 00:00:00+00') TO ('{} 00:00:00+00')",
            Self::partition_name(day),
            day.format("%Y-%m-%d"),
            next.format("%Y-%m-%d")
        );
        let mut conn = self.conn().await?;
        let mut last = None;
        for _ in 0..3 {
            let attempt = async {
                let mut tx = conn.begin().await?;
                // Serialises partition DDL across regional instances sharing this database.
                sqlx::query("SELECT pg_advisory_xact_lock(hashtext('vigil.samples.partitions'))")
                    .execute(&mut *tx)
                    .await?;
                sqlx::query(AssertSqlSafe(ddl.clone())).execute(&mut *tx).await?;
                tx.commit().await
            };
            match attempt.await {
                Ok(()) => return Ok(()),
                Err(sqlx::Error::Database(db)) if db.code().is_some_and(|c| DUPLICATE_CODES.contains(&c.as_ref())) => {
                    tracing::debug!(partition = %Self::partition_name(day), "partition created concurrently; retrying");
                    last = Some(StoreError::Other(db.to_string()));
                }
                Err(e) => return Err(self.fail(e)),
            }
        }
        Err(last.unwrap_or_else(|| StoreError::Other("partition creation failed".into())))
    }

    async fn insert_chunk(&self, conn: &mut PgConnection, chunk: &[Sample]) -> Result<u64, sqlx::Error> {
        let n = chunk.len();
        let mut ids = Vec::with_capacity(n);
        let mut providers = Vec::with_capacity(n);
        let mut models = Vec::with_capacity(n);
        let mut routes = Vec::with_capacity(n);
        let mut regions = Vec::with_capacity(n);
        let mut scheduled = Vec::with_capacity(n);
        let mut started = Vec::with_capacity(n);
        let (mut dns, mut connect, mut tls, mut ttfb, mut ttft, mut ttfr, mut total) =
            (vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
        let (mut input, mut output, mut tps, mut status) = (vec![], vec![], vec![], vec![]);
        let (mut outcome, mut error, mut request_id, mut adherence, mut cost, mut retry) =
            (vec![], vec![], vec![], vec![], vec![], vec![]);
        let mut proxy = Vec::with_capacity(n);
        for s in chunk {
            ids.push(s.id);
            providers.push(clean(&s.target.provider));
            models.push(clean(&s.target.model));
            routes.push(clean(s.target.route_label()));
            regions.push(clean(&s.target.region));
            scheduled.push(s.scheduled_at);
            started.push(s.started_at);
            dns.push(s.dns_ms);
            connect.push(s.connect_ms);
            tls.push(s.tls_ms);
            ttfb.push(s.ttfb_ms);
            ttft.push(s.ttft_ms);
            ttfr.push(s.ttfr_ms);
            total.push(s.total_ms);
            input.push(s.input_tokens.map(i64::from));
            output.push(s.output_tokens.map(i64::from));
            tps.push(s.tokens_per_s);
            status.push(s.status.map(i32::from));
            outcome.push(s.outcome.as_str());
            error.push(s.error.as_deref().map(clean));
            request_id.push(s.request_id.as_deref().map(clean));
            adherence.push(s.adherence_ok);
            cost.push(s.cost_usd);
            retry.push(s.retry_after_s);
            proxy.push(s.proxy_ms);
        }
        let res = sqlx::query(
            "INSERT INTO samples (id, provider, model, route, region, scheduled_at, started_at, dns_ms, connect_ms, \
             tls_ms, ttfb_ms, ttft_ms, ttfr_ms, total_ms, input_tokens, output_tokens, tokens_per_s, status, outcome, \
             error, request_id, adherence_ok, cost_usd, retry_after_s, proxy_ms) \
             SELECT * FROM UNNEST($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[], \
             $7::timestamptz[], $8::float8[], $9::float8[], $10::float8[], $11::float8[], $12::float8[], $13::float8[], \
             $14::float8[], $15::int8[], $16::int8[], $17::float8[], $18::int4[], $19::text[], $20::text[], $21::text[], \
             $22::bool[], $23::float8[], $24::float8[], $25::float8[]) \
             ON CONFLICT (id, started_at) DO NOTHING",
        )
        .bind(ids)
        .bind(providers)
        .bind(models)
        .bind(routes)
        .bind(regions)
        .bind(scheduled)
        .bind(started)
        .bind(dns)
        .bind(connect)
        .bind(tls)
        .bind(ttfb)
        .bind(ttft)
        .bind(ttfr)
        .bind(total)
        .bind(input)
        .bind(output)
        .bind(tps)
        .bind(status)
        .bind(outcome)
        .bind(error)
        .bind(request_id)
        .bind(adherence)
        .bind(cost)
        .bind(retry)
        .bind(proxy)
        .execute(&mut *conn)
        .await?;
        Ok(res.rows_affected())
    }

    /// Binary `COPY` straight into `samples`: the cheapest way in, and new samples never conflict.
    ///
    /// `COPY` cannot skip rows, so a batch holding an id already stored (a replay of a write that
    /// timed out but committed, or an id repeated within the batch) fails as a whole, stores
    /// nothing, and is redone by [`Self::copy_staged`].
    async fn copy_chunk(&self, conn: &mut PgConnection, chunk: &[Sample]) -> Result<u64, sqlx::Error> {
        let data = pg_copy::encode(chunk).map_err(|e| sqlx::Error::Encode(Box::new(e)))?;
        let mut copy = conn.copy_in_raw(&COPY_SAMPLES).await?;
        copy.send(data.as_slice()).await?;
        match copy.finish().await {
            Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some(UNIQUE_VIOLATION) => {
                tracing::debug!(samples = chunk.len(), "batch holds stored ids; inserting through the staging table");
                self.copy_staged(conn, &data).await
            }
            other => other,
        }
    }

    /// `COPY` into a session temp table, then `INSERT … ON CONFLICT DO NOTHING` from it, in one
    /// transaction: idempotent on the sample id, like every write.
    async fn copy_staged(&self, conn: &mut PgConnection, data: &[u8]) -> Result<u64, sqlx::Error> {
        let mut tx = conn.begin().await?;
        sqlx::raw_sql(CREATE_STAGE).execute(&mut *tx).await?;
        let mut copy = tx.copy_in_raw(&COPY_STAGE).await?;
        copy.send(data).await?;
        copy.finish().await?;
        let inserted = sqlx::query(AssertSqlSafe(INSERT_FROM_STAGE.as_str())).execute(&mut *tx).await?.rows_affected();
        tx.commit().await?;
        Ok(inserted)
    }

    async fn write_chunk(&self, conn: &mut PgConnection, chunk: &[Sample]) -> Result<u64, sqlx::Error> {
        match self.insert_path {
            InsertPath::Copy => self.copy_chunk(conn, chunk).await,
            InsertPath::Unnest => self.insert_chunk(conn, chunk).await,
        }
    }

    /// `samples_*` partitions as (day, name), oldest first.
    pub async fn sample_partitions(&self) -> Result<Vec<(NaiveDate, String)>, StoreError> {
        let names: Vec<String> = sqlx::query_scalar(
            "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid \
             WHERE i.inhparent = 'samples'::regclass ORDER BY 1",
        )
        .fetch_all(&mut *self.conn().await?)
        .await
        .map_err(|e| self.fail(e))?;
        Ok(names
            .into_iter()
            .filter_map(|n| {
                let day = n.strip_prefix("samples_").and_then(|d| NaiveDate::parse_from_str(d, "%Y%m%d").ok())?;
                Some((day, n))
            })
            .collect())
    }
}

/// PostgreSQL text cannot hold NUL; provider error text occasionally does.
fn clean(s: &str) -> String {
    if s.contains('\0') {
        s.replace('\0', "")
    } else {
        s.to_owned()
    }
}

impl StoredRow for PgRow {
    fn uuid(&self, col: &str) -> Result<Uuid, sqlx::Error> {
        self.try_get(col)
    }

    fn time(&self, col: &str) -> Result<DateTime<Utc>, sqlx::Error> {
        self.try_get(col)
    }

    fn opt_time(&self, col: &str) -> Result<Option<DateTime<Utc>>, sqlx::Error> {
        self.try_get(col)
    }
}

fn push_filters(qb: &mut QueryBuilder<Postgres>, q: &SampleQuery) {
    qb.push(" WHERE TRUE");
    if let Some(region) = &q.region {
        qb.push(" AND region = ").push_bind(region.clone());
    }
    if let Some(t) = &q.target {
        qb.push(" AND provider = ").push_bind(t.provider.clone());
        qb.push(" AND model = ").push_bind(t.model.clone());
        qb.push(" AND route = ").push_bind(t.route_label().to_owned());
    }
    if let Some(since) = q.since {
        qb.push(" AND started_at >= ").push_bind(since);
    }
    if let Some(until) = q.until {
        qb.push(" AND started_at < ").push_bind(until);
    }
}

#[async_trait]
impl Store for PgStore {
    async fn migrate(&self) -> Result<(), StoreError> {
        let known = newest_version(&MIGRATOR);
        self.check_session().await?;
        let mut conn = self.conn().await?;
        let exists: bool = sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
            .fetch_one(&mut *conn)
            .await
            .map_err(|e| self.fail(e))?;
        if exists {
            let found: Option<i64> = sqlx::query_scalar("SELECT max(version) FROM _sqlx_migrations")
                .fetch_one(&mut *conn)
                .await
                .map_err(|e| self.fail(e))?;
            if let Some(found) = found.filter(|f| *f > known) {
                return Err(StoreError::SchemaAhead { found, known });
            }
        }
        MIGRATOR.run(&self.pool).await.map_err(|e| match e {
            sqlx::migrate::MigrateError::Execute(inner) => self.fail(inner),
            other => map_migrate(other, known),
        })?;
        // A cheap sanity read of every table vigil keeps state in: a damaged page or index
        // (XX001/XX002) is recorded for `/readyz` now rather than on the first real use.
        sqlx::query(
            "SELECT EXISTS (SELECT 1 FROM breaker_state), EXISTS (SELECT 1 FROM alert_outbox), \
             EXISTS (SELECT 1 FROM alert_state), EXISTS (SELECT 1 FROM rollups)",
        )
        .fetch_one(&mut *conn)
        .await
        .map(|_| ())
        .map_err(|e| self.fail(e))
    }

    fn integrity(&self) -> Result<(), String> {
        match self.corrupt.lock() {
            Ok(c) => c.clone().map_or(Ok(()), Err),
            Err(_) => Err("integrity state lock poisoned".into()),
        }
    }

    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&mut *self.conn().await?).await.map(|_| ()).map_err(|e| self.fail(e))
    }

    async fn insert_samples(&self, samples: &[Sample]) -> Result<u64, StoreError> {
        if samples.is_empty() {
            return Ok(0);
        }
        let days: BTreeSet<NaiveDate> = samples.iter().map(|s| s.started_at.date_naive()).collect();
        self.ensure_partitions(&days).await?;
        let mut conn = self.conn().await?;
        let mut inserted = 0;
        for chunk in samples.chunks(INSERT_CHUNK) {
            inserted += match self.write_chunk(&mut conn, chunk).await {
                Ok(n) => n,
                // 23514: no partition for a row — another instance's retention dropped one we had cached.
                Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some("23514") => {
                    self.forget_all();
                    self.ensure_partitions(&days).await?;
                    self.write_chunk(&mut conn, chunk).await.map_err(|e| self.fail(e))?
                }
                Err(e) => return Err(self.fail(e)),
            };
        }
        Ok(inserted)
    }

    async fn samples(&self, q: &SampleQuery) -> Result<Vec<Sample>, StoreError> {
        let mut qb = QueryBuilder::<Postgres>::new(format!("SELECT {SAMPLE_COLUMNS} FROM samples"));
        push_filters(&mut qb, q);
        match q.limit {
            Some(limit) => {
                qb.push(" ORDER BY started_at DESC, id DESC LIMIT ").push_bind(limit.max(0));
            }
            None => {
                qb.push(" ORDER BY started_at, id");
            }
        }
        let rows = qb.build().fetch_all(&mut *self.conn().await?).await.map_err(|e| self.fail(e))?;
        rows.iter().map(sample_of).collect::<Result<_, _>>().map_err(|e| self.fail(e))
    }

    async fn count_samples(&self, q: &SampleQuery) -> Result<i64, StoreError> {
        let mut qb = QueryBuilder::<Postgres>::new("SELECT count(*) FROM samples");
        push_filters(&mut qb, q);
        qb.build_query_scalar::<i64>().fetch_one(&mut *self.conn().await?).await.map_err(|e| self.fail(e))
    }

    async fn purge_samples_before(&self, cutoff: DateTime<Utc>) -> Result<u64, StoreError> {
        let mut removed = 0u64;
        for (day, name) in self.sample_partitions().await? {
            let Some(end) = day.checked_add_days(Days::new(1)) else { continue };
            if end.and_time(NaiveTime::MIN).and_utc() > cutoff {
                continue;
            }
            let mut conn = self.conn().await?;
            let mut tx = conn.begin().await.map_err(|e| self.fail(e))?;
            // Never queue behind a long reader for the parent's lock: give up and retry next run.
            sqlx::query("SET LOCAL lock_timeout = '5s'").execute(&mut *tx).await.map_err(|e| self.fail(e))?;
            let rows: i64 = sqlx::query_scalar(AssertSqlSafe(format!("SELECT count(*) FROM {name}")))
                .fetch_one(&mut *tx)
                .await
                .map_err(|e| self.fail(e))?;
            sqlx::query(AssertSqlSafe(format!("DROP TABLE IF EXISTS {name}")))
                .execute(&mut *tx)
                .await
                .map_err(|e| self.fail(e))?;
            tx.commit().await.map_err(|e| self.fail(e))?;
            self.remember(day, false);
            tracing::info!(partition = %name, rows, "dropped expired samples partition");
            removed += u64::try_from(rows).unwrap_or(0);
        }
        Ok(removed)
    }

    async fn upsert_rollups(&self, rollups: &[Rollup]) -> Result<(), StoreError> {
        let mut conn = self.conn().await?;
        let mut tx = conn.begin().await.map_err(|e| self.fail(e))?;
        for r in rollups {
            sqlx::query(
                "INSERT INTO rollups (provider, model, route, region, metric, hour, count, histogram) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
                 ON CONFLICT (region, provider, model, route, metric, hour) \
                 DO UPDATE SET count = EXCLUDED.count, histogram = EXCLUDED.histogram",
            )
            .bind(&r.target.provider)
            .bind(&r.target.model)
            .bind(r.target.route_label())
            .bind(&r.target.region)
            .bind(&r.metric)
            .bind(r.hour)
            .bind(r.count)
            .bind(&r.histogram)
            .execute(&mut *tx)
            .await
            .map_err(|e| self.fail(e))?;
        }
        tx.commit().await.map_err(|e| self.fail(e))
    }

    async fn rollups_between(
        &self,
        region: Option<&str>,
        since: DateTime<Utc>,
        until: Option<DateTime<Utc>>,
    ) -> Result<Vec<Rollup>, StoreError> {
        let mut qb = QueryBuilder::<Postgres>::new(
            "SELECT provider, model, route, region, metric, hour, count, histogram FROM rollups WHERE hour >= ",
        );
        qb.push_bind(since);
        if let Some(u) = until {
            qb.push(" AND hour < ").push_bind(u);
        }
        if let Some(region) = region {
            qb.push(" AND region = ").push_bind(region.to_owned());
        }
        qb.push(" ORDER BY region, provider, model, route, metric, hour");
        let rows = qb.build().fetch_all(&mut *self.conn().await?).await.map_err(|e| self.fail(e))?;
        rows.iter()
            .map(|row| {
                Ok(Rollup {
                    target: target_of(row)?,
                    metric: row.try_get("metric")?,
                    hour: row.try_get("hour")?,
                    count: row.try_get("count")?,
                    histogram: row.try_get("histogram")?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(|e| self.fail(e))
    }

    async fn purge_rollups_before(&self, cutoff: DateTime<Utc>) -> Result<u64, StoreError> {
        let res = sqlx::query("DELETE FROM rollups WHERE hour < $1")
            .bind(cutoff)
            .execute(&mut *self.conn().await?)
            .await
            .map_err(|e| self.fail(e))?;
        Ok(res.rows_affected())
    }

    async fn prune(&self, what: Prune, cutoff: DateTime<Utc>, limit: u32) -> Result<u64, StoreError> {
        let (table, cond) = (what.table(), what.condition().replace("{c}", "$1"));
        // `ctid = ANY(ARRAY(…))` is a TID scan: only the chosen rows are touched.
        let sql =
            format!("DELETE FROM {table} WHERE ctid = ANY(ARRAY(SELECT ctid FROM {table} WHERE {cond} LIMIT $2))");
        let res = sqlx::query(AssertSqlSafe(sql))
            .bind(cutoff)
            .bind(i64::from(limit))
            .execute(&mut *self.conn().await?)
            .await
            .map_err(|e| self.fail(e))?;
        Ok(res.rows_affected())
    }

    async fn save_breaker(&self, r: &BreakerRecord) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO breaker_state (provider, model, route, region, state, since, detail) \
             VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb) ON CONFLICT (region, provider, model, route) \
             DO UPDATE SET state = EXCLUDED.state, since = EXCLUDED.since, detail = EXCLUDED.detail",
        )
        .bind(&r.target.provider)
        .bind(&r.target.model)
        .bind(r.target.route_label())
        .bind(&r.target.region)
        .bind(r.state.as_str())
        .bind(r.since)
        .bind(r.detail.to_string())
        .execute(&mut *self.conn().await?)
        .await
        .map(|_| ())
        .map_err(|e| self.fail(e))
    }

    async fn load_breakers(&self, region: Option<&str>) -> Result<Vec<BreakerRecord>, StoreError> {
        let mut qb = QueryBuilder::<Postgres>::new(
            "SELECT provider, model, route, region, state, since, detail::text AS detail FROM breaker_state",
        );
        if let Some(region) = region {
            qb.push(" WHERE region = ").push_bind(region.to_owned());
        }
        qb.push(" ORDER BY region, provider, model, route");
        let rows = qb.build().fetch_all(&mut *self.conn().await?).await.map_err(|e| self.fail(e))?;
        rows.iter()
            .map(|row| {
                Ok(BreakerRecord {
                    target: target_of(row)?,
                    state: super::rows::breaker_state(row, "state")?,
                    since: row.try_get("since")?,
                    detail: json_of(row, "detail")?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(|e| self.fail(e))
    }

    async fn append_transition(&self, t: &BreakerTransition) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO breaker_transitions (provider, model, route, region, from_state, to_state, at, reason) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(&t.target.provider)
        .bind(&t.target.model)
        .bind(t.target.route_label())
        .bind(&t.target.region)
        .bind(t.from_state.as_str())
        .bind(t.to_state.as_str())
        .bind(t.at)
        .bind(clean(&t.reason))
        .execute(&mut *self.conn().await?)
        .await
        .map(|_| ())
        .map_err(|e| self.fail(e))
    }

    async fn transitions(
        &self,
        region: &str,
        target: Option<&Target>,
        limit: i64,
    ) -> Result<Vec<BreakerTransition>, StoreError> {
        let mut qb = QueryBuilder::<Postgres>::new(
            "SELECT provider, model, route, region, from_state, to_state, at, reason FROM breaker_transitions \
             WHERE region = ",
        );
        qb.push_bind(region.to_owned());
        if let Some(t) = target {
            qb.push(" AND provider = ").push_bind(t.provider.clone());
            qb.push(" AND model = ").push_bind(t.model.clone());
            qb.push(" AND route = ").push_bind(t.route_label().to_owned());
        }
        qb.push(" ORDER BY at DESC, id DESC LIMIT ").push_bind(limit.max(0));
        let rows = qb.build().fetch_all(&mut *self.conn().await?).await.map_err(|e| self.fail(e))?;
        rows.iter().map(transition_of).collect::<Result<_, _>>().map_err(|e| self.fail(e))
    }

    async fn enqueue(&self, items: &[OutboxItem]) -> Result<(), StoreError> {
        let mut conn = self.conn().await?;
        let mut tx = conn.begin().await.map_err(|e| self.fail(e))?;
        for i in items {
            sqlx::query(
                "INSERT INTO alert_outbox (id, channel, kind, dedup_key, payload, created_at, next_attempt_at, \
                 attempts, last_error, region) VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8, $9, $10) \
                 ON CONFLICT (id) DO NOTHING",
            )
            .bind(i.id)
            .bind(&i.channel)
            .bind(&i.kind)
            .bind(&i.dedup_key)
            .bind(i.payload.to_string())
            .bind(i.created_at)
            .bind(i.next_attempt_at)
            .bind(i.attempts)
            .bind(i.last_error.as_deref().map(clean))
            .bind(&i.region)
            .execute(&mut *tx)
            .await
            .map_err(|e| self.fail(e))?;
        }
        tx.commit().await.map_err(|e| self.fail(e))
    }

    async fn due(&self, region: Option<&str>, now: DateTime<Utc>, limit: i64) -> Result<Vec<OutboxItem>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, region, channel, kind, dedup_key, payload::text AS payload, created_at, next_attempt_at, \
             attempts, last_error FROM alert_outbox WHERE delivered_at IS NULL AND abandoned_at IS NULL \
             AND next_attempt_at <= $1 AND ($3::text IS NULL OR region = $3) ORDER BY created_at, id LIMIT $2",
        )
        .bind(now)
        .bind(limit.max(0))
        .bind(region)
        .fetch_all(&mut *self.conn().await?)
        .await
        .map_err(|e| self.fail(e))?;
        rows.iter().map(outbox_of).collect::<Result<_, _>>().map_err(|e| self.fail(e))
    }

    async fn mark_delivered(&self, id: Uuid, at: DateTime<Utc>) -> Result<(), StoreError> {
        sqlx::query("UPDATE alert_outbox SET delivered_at = $2, attempts = attempts + 1 WHERE id = $1")
            .bind(id)
            .bind(at)
            .execute(&mut *self.conn().await?)
            .await
            .map(|_| ())
            .map_err(|e| self.fail(e))
    }

    async fn mark_retry(&self, id: Uuid, next_attempt_at: DateTime<Utc>, error: &str) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE alert_outbox SET attempts = attempts + 1, next_attempt_at = $2, last_error = $3 WHERE id = $1",
        )
        .bind(id)
        .bind(next_attempt_at)
        .bind(clean(error))
        .execute(&mut *self.conn().await?)
        .await
        .map(|_| ())
        .map_err(|e| self.fail(e))
    }

    async fn mark_abandoned(&self, id: Uuid, at: DateTime<Utc>, error: &str) -> Result<(), StoreError> {
        sqlx::query("UPDATE alert_outbox SET attempts = attempts + 1, abandoned_at = $2, last_error = $3 WHERE id = $1")
            .bind(id)
            .bind(at)
            .bind(clean(error))
            .execute(&mut *self.conn().await?)
            .await
            .map(|_| ())
            .map_err(|e| self.fail(e))
    }

    async fn outbox_depth(&self) -> Result<i64, StoreError> {
        sqlx::query_scalar("SELECT count(*) FROM alert_outbox WHERE delivered_at IS NULL AND abandoned_at IS NULL")
            .fetch_one(&mut *self.conn().await?)
            .await
            .map_err(|e| self.fail(e))
    }

    async fn save_alert_state(&self, region: &str, state: &serde_json::Value) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO alert_state (region, state, updated_at) VALUES ($1, $2::jsonb, now()) \
             ON CONFLICT (region) DO UPDATE SET state = EXCLUDED.state, updated_at = EXCLUDED.updated_at",
        )
        .bind(region)
        .bind(state.to_string())
        .execute(&mut *self.conn().await?)
        .await
        .map(|_| ())
        .map_err(|e| self.fail(e))
    }

    async fn load_alert_state(&self, region: &str) -> Result<Option<serde_json::Value>, StoreError> {
        let text: Option<String> = sqlx::query_scalar("SELECT state::text FROM alert_state WHERE region = $1")
            .bind(region)
            .fetch_optional(&mut *self.conn().await?)
            .await
            .map_err(|e| self.fail(e))?;
        text.map(|t| serde_json::from_str(&t).map_err(|e| StoreError::Other(format!("alert_state is not JSON: {e}"))))
            .transpose()
    }

    async fn insert_balance(&self, r: &BalanceReading) -> Result<(), StoreError> {
        sqlx::query("INSERT INTO credit_balances (provider, region, at, remaining_usd) VALUES ($1, $2, $3, $4)")
            .bind(&r.provider)
            .bind(&r.region)
            .bind(r.at)
            .bind(r.remaining_usd)
            .execute(&mut *self.conn().await?)
            .await
            .map(|_| ())
            .map_err(|e| self.fail(e))
    }

    async fn balances(&self, provider: &str, since: DateTime<Utc>) -> Result<Vec<BalanceReading>, StoreError> {
        let rows = sqlx::query(
            "SELECT provider, region, at, remaining_usd FROM credit_balances WHERE provider = $1 AND at >= $2 \
             ORDER BY at, id",
        )
        .bind(provider)
        .bind(since)
        .fetch_all(&mut *self.conn().await?)
        .await
        .map_err(|e| self.fail(e))?;
        rows.iter()
            .map(|row| {
                Ok(BalanceReading {
                    provider: row.try_get("provider")?,
                    region: row.try_get("region")?,
                    at: row.try_get("at")?,
                    remaining_usd: row.try_get("remaining_usd")?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(|e| self.fail(e))
    }

    async fn transitions_between(
        &self,
        region: Option<&str>,
        since: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<Vec<BreakerTransition>, StoreError> {
        let rows = sqlx::query(
            "SELECT provider, model, route, region, from_state, to_state, at, reason FROM breaker_transitions \
             WHERE at >= $1 AND at < $2 AND ($3::text IS NULL OR region = $3) ORDER BY at, id",
        )
        .bind(since)
        .bind(until)
        .bind(region)
        .fetch_all(&mut *self.conn().await?)
        .await
        .map_err(|e| self.fail(e))?;
        rows.iter().map(transition_of).collect::<Result<_, _>>().map_err(|e| self.fail(e))
    }

    async fn outbox_between(
        &self,
        region: Option<&str>,
        since: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<Vec<OutboxItem>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, region, channel, kind, dedup_key, payload::text AS payload, created_at, next_attempt_at, \
             attempts, last_error FROM alert_outbox WHERE created_at >= $1 AND created_at < $2 \
             AND ($3::text IS NULL OR region = $3) ORDER BY created_at, id",
        )
        .bind(since)
        .bind(until)
        .bind(region)
        .fetch_all(&mut *self.conn().await?)
        .await
        .map_err(|e| self.fail(e))?;
        rows.iter().map(outbox_of).collect::<Result<_, _>>().map_err(|e| self.fail(e))
    }
    async fn publish_target_status(&self, rows: &[TargetStatus]) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await.map_err(map_sqlx)?;
        for r in rows {
            sqlx::query(
                "INSERT INTO target_status (region, provider, model, route, state, over_latency, breaker, updated_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (region, provider, model, route) DO UPDATE SET \
                 state = excluded.state, over_latency = excluded.over_latency, breaker = excluded.breaker, \
                 updated_at = excluded.updated_at",
            )
            .bind(&r.target.region)
            .bind(&r.target.provider)
            .bind(&r.target.model)
            .bind(r.target.route_label())
            .bind(r.state.as_str())
            .bind(r.over_latency)
            .bind(r.breaker.as_str())
            .bind(r.updated_at)
            .execute(&mut *tx)
            .await
            .map_err(map_sqlx)?;
        }
        tx.commit().await.map_err(map_sqlx)
    }

    async fn target_statuses(&self, since: DateTime<Utc>) -> Result<Vec<TargetStatus>, StoreError> {
        let rows = sqlx::query(
            "SELECT region, provider, model, route, state, over_latency, breaker, updated_at FROM target_status \
             WHERE updated_at >= $1 ORDER BY region, provider, model, route",
        )
        .bind(since)
        .fetch_all(&self.pool)
        .await
        .map_err(map_sqlx)?;
        rows.iter().map(target_status_of).collect::<Result<_, sqlx::Error>>().map_err(map_sqlx)
    }

    async fn claim_incident(
        &self,
        incident: &str,
        region: &str,
        now: DateTime<Utc>,
        expires_at: DateTime<Utc>,
    ) -> Result<String, StoreError> {
        // One statement: insert when absent, take over when expired, renew when ours.
        let owner: Option<String> = sqlx::query_scalar(
            "INSERT INTO incident_lease (incident, owner, expires_at) VALUES ($1, $2, $3) \
             ON CONFLICT (incident) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at \
             WHERE incident_lease.owner = excluded.owner OR incident_lease.expires_at < $4 RETURNING owner",
        )
        .bind(incident)
        .bind(region)
        .bind(expires_at)
        .bind(now)
        .fetch_optional(&self.pool)
        .await
        .map_err(map_sqlx)?;
        match owner {
            Some(o) => Ok(o),
            None => sqlx::query_scalar("SELECT owner FROM incident_lease WHERE incident = $1")
                .bind(incident)
                .fetch_one(&self.pool)
                .await
                .map_err(map_sqlx),
        }
    }

    async fn release_incident(&self, incident: &str, region: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM incident_lease WHERE incident = $1 AND owner = $2")
            .bind(incident)
            .bind(region)
            .execute(&self.pool)
            .await
            .map(|_| ())
            .map_err(map_sqlx)
    }

    async fn record_sighting(
        &self,
        incident: &str,
        region: &str,
        firing: bool,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO incident_sightings (incident, region, firing, updated_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (incident, region) DO UPDATE SET firing = excluded.firing, updated_at = excluded.updated_at",
        )
        .bind(incident)
        .bind(region)
        .bind(firing)
        .bind(at)
        .execute(&self.pool)
        .await
        .map(|_| ())
        .map_err(map_sqlx)
    }

    async fn sightings(&self, incident: &str) -> Result<Vec<Sighting>, StoreError> {
        let rows = sqlx::query(
            "SELECT region, firing, updated_at FROM incident_sightings WHERE incident = $1 ORDER BY region",
        )
        .bind(incident)
        .fetch_all(&self.pool)
        .await
        .map_err(map_sqlx)?;
        rows.iter()
            .map(|row| {
                Ok(Sighting {
                    region: row.try_get("region")?,
                    firing: row.try_get("firing")?,
                    updated_at: row.try_get("updated_at")?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(map_sqlx)
    }

    async fn close_incident(&self, incident: &str) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await.map_err(map_sqlx)?;
        for table in ["incident_sightings", "incident_lease"] {
            sqlx::query(AssertSqlSafe(format!("DELETE FROM {table} WHERE incident = $1")))
                .bind(incident)
                .execute(&mut *tx)
                .await
                .map_err(map_sqlx)?;
        }
        tx.commit().await.map_err(map_sqlx)
    }

    async fn upsert_provider_incidents(
        &self,
        items: &[crate::provider_status::ProviderIncident],
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await.map_err(|e| self.fail(e))?;
        for i in items {
            let components = serde_json::to_string(&i.components).unwrap_or_else(|_| "[]".into());
            sqlx::query(
                "INSERT INTO provider_incidents (provider, incident_id, name, status, impact, created_at, updated_at, \
                 resolved_at, components, shortlink) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
                 ON CONFLICT (provider, incident_id) DO UPDATE SET name = excluded.name, status = excluded.status, \
                 impact = excluded.impact, updated_at = excluded.updated_at, \
                 resolved_at = COALESCE(provider_incidents.resolved_at, excluded.resolved_at), \
                 components = excluded.components, shortlink = excluded.shortlink",
            )
            .bind(&i.provider)
            .bind(&i.id)
            .bind(&i.name)
            .bind(&i.status)
            .bind(&i.impact)
            .bind(i.created_at)
            .bind(i.updated_at)
            .bind(i.resolved_at)
            .bind(components)
            .bind(&i.shortlink)
            .execute(&mut *tx)
            .await
            .map_err(|e| self.fail(e))?;
        }
        tx.commit().await.map_err(|e| self.fail(e))
    }

    async fn provider_incidents_between(
        &self,
        provider: Option<&str>,
        since: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<Vec<crate::provider_status::ProviderIncident>, StoreError> {
        let rows = sqlx::query(
            "SELECT provider, incident_id, name, status, impact, created_at, updated_at, resolved_at, components, \
             shortlink FROM provider_incidents WHERE created_at >= $1 AND created_at < $2 AND ($3::text IS NULL OR provider = $3) \
             ORDER BY created_at, provider, incident_id",
        )
        .bind(since)
        .bind(until)
        .bind(provider)
        .fetch_all(&mut *self.conn().await?)
        .await
        .map_err(|e| self.fail(e))?;
        rows.iter().map(incident_of).collect::<Result<_, _>>().map_err(|e| self.fail(e))
    }

    async fn upsert_provider_components(
        &self,
        items: &[crate::provider_status::ProviderComponent],
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await.map_err(|e| self.fail(e))?;
        for c in items {
            sqlx::query(
                "INSERT INTO provider_components (provider, component_id, name, status, updated_at) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (provider, component_id) DO UPDATE SET name = excluded.name, \
                 status = excluded.status, updated_at = excluded.updated_at",
            )
            .bind(&c.provider)
            .bind(&c.id)
            .bind(&c.name)
            .bind(&c.status)
            .bind(c.updated_at)
            .execute(&mut *tx)
            .await
            .map_err(|e| self.fail(e))?;
        }
        tx.commit().await.map_err(|e| self.fail(e))
    }

    async fn provider_components(
        &self,
        provider: &str,
    ) -> Result<Vec<crate::provider_status::ProviderComponent>, StoreError> {
        let rows = sqlx::query(
            "SELECT provider, component_id, name, status, updated_at FROM provider_components \
             WHERE provider = $1 ORDER BY name, component_id",
        )
        .bind(provider)
        .fetch_all(&mut *self.conn().await?)
        .await
        .map_err(|e| self.fail(e))?;
        rows.iter().map(component_of).collect::<Result<_, _>>().map_err(|e| self.fail(e))
    }

    async fn insert_canary_runs(&self, runs: &[crate::canary::CanaryRun]) -> Result<u64, StoreError> {
        if runs.is_empty() {
            return Ok(0);
        }
        let mut tx = self.pool.begin().await.map_err(|e| self.fail(e))?;
        let mut inserted = 0;
        // 35 binds a row: well under PostgreSQL's 65,535 parameters per statement.
        for chunk in runs.chunks(1_000) {
            let mut qb = QueryBuilder::<Postgres>::new(format!("INSERT INTO canary_runs ({CANARY_COLUMNS}) "));
            qb.push_values(chunk, |mut b, r| {
                let s = &r.sample;
                b.push_bind(r.sample.id)
                    .push_bind(s.target.provider.clone())
                    .push_bind(s.target.model.clone())
                    .push_bind(s.target.route_label().to_owned())
                    .push_bind(s.target.region.clone())
                    .push_bind(s.scheduled_at)
                    .push_bind(s.started_at)
                    .push_bind(s.dns_ms)
                    .push_bind(s.connect_ms)
                    .push_bind(s.tls_ms)
                    .push_bind(s.ttfb_ms)
                    .push_bind(s.ttft_ms)
                    .push_bind(s.ttfr_ms)
                    .push_bind(s.total_ms)
                    .push_bind(s.input_tokens.map(i64::from))
                    .push_bind(s.output_tokens.map(i64::from))
                    .push_bind(s.tokens_per_s)
                    .push_bind(s.status.map(i32::from))
                    .push_bind(s.outcome.as_str())
                    .push_bind(s.error.clone())
                    .push_bind(s.request_id.clone())
                    .push_bind(s.adherence_ok)
                    .push_bind(s.cost_usd)
                    .push_bind(s.retry_after_s)
                    .push_bind(s.proxy_ms)
                    .push_bind(i32::try_from(r.prompt_version).unwrap_or(i32::MAX))
                    .push_bind(i32::try_from(r.correct).unwrap_or(i32::MAX))
                    .push_bind(i32::try_from(r.total).unwrap_or(i32::MAX))
                    .push_bind(r.answers_fingerprint.clone())
                    .push_bind(serde_json::to_string(&r.answers).unwrap_or_else(|_| "[]".into()))
                    .push_bind(r.identity.model.clone())
                    .push_bind(r.identity.system_fingerprint.clone())
                    .push_bind(r.identity.upstream.clone())
                    .push_bind(r.logprobs.map(|l| i64::from(l.tokens)))
                    .push_bind(r.logprobs.map(|l| l.sum));
            });
            qb.push(" ON CONFLICT (id) DO NOTHING");
            inserted += qb.build().execute(&mut *tx).await.map_err(|e| self.fail(e))?.rows_affected();
        }
        tx.commit().await.map_err(|e| self.fail(e))?;
        Ok(inserted)
    }

    async fn canary_runs(
        &self,
        region: Option<&str>,
        since: DateTime<Utc>,
        limit: i64,
    ) -> Result<Vec<crate::canary::CanaryRun>, StoreError> {
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT * FROM (SELECT {CANARY_COLUMNS} FROM canary_runs WHERE started_at >= $1 \
             AND ($2::text IS NULL OR region = $2) ORDER BY started_at DESC, id DESC LIMIT $3) AS newest \
             ORDER BY started_at, id"
        )))
        .bind(since)
        .bind(region)
        .bind(limit.max(0))
        .fetch_all(&mut *self.conn().await?)
        .await
        .map_err(|e| self.fail(e))?;
        rows.iter().map(canary_of).collect::<Result<_, _>>().map_err(|e| self.fail(e))
    }

    async fn purge_canary_runs_before(&self, cutoff: DateTime<Utc>) -> Result<u64, StoreError> {
        let n = sqlx::query("DELETE FROM canary_runs WHERE started_at < $1")
            .bind(cutoff)
            .execute(&mut *self.conn().await?)
            .await
            .map_err(|e| self.fail(e))?
            .rows_affected();
        Ok(n)
    }
}
