//! PostgreSQL store: day-partitioned `samples`, batch inserts through binary `COPY`, shared by every region.

use super::backend::Backend;
use super::corruption;
use super::map_migrate;
use super::map_sqlx;
use super::migrations::POSTGRES_MIGRATOR as MIGRATOR;
use super::newest_version;
use super::pg_connect_error;
use super::pg_copy;
use super::redact_url;
use super::rows::DialectRow;
use super::sql::Arg;
use super::sql::Stmt;
use super::sql::SAMPLE_COLUMNS;
use super::Prune;
use super::StoreError;
use super::{applied_since, Migrated};
use crate::vocab::ratelimit::RateLimitKind;
use crate::vocab::sample::Sample;
use async_trait::async_trait;
use chrono::{DateTime, Days, NaiveDate, NaiveTime, Utc};
use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::pool::PoolConnection;
use sqlx::postgres::types::Oid;
use sqlx::postgres::{
    PgArgumentBuffer, PgArguments, PgConnectOptions, PgConnection, PgPool, PgPoolOptions, PgRow, PgTypeInfo,
};
use sqlx::query::Query;
use sqlx::{AssertSqlSafe, Connection, Encode, Postgres, Row, Type};
use std::collections::{BTreeSet, HashSet};
use std::str::FromStr;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;
use uuid::Uuid;

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

/// PostgreSQL implementation of [`super::Store`].
pub struct PgStore {
    pool: PgPool,
    /// For the sessions outside the pool that [`super::Store::migrate`] runs on.
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
    async fn session(&self) -> Result<PgConnection, StoreError> {
        match tokio::time::timeout(self.acquire_timeout, PgConnection::connect_with(&self.opts)).await {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(e)) => Err(pg_connect_error(&e, &self.target, self.acquire_timeout)),
            Err(_) => Err(StoreError::Unavailable(format!(
                "no answer within {:?}: the host accepts no connection or never replies [{}]",
                self.acquire_timeout, self.target
            ))),
        }
    }

    /// Migrates on `conn`, a session of its own: sqlx's migrator takes a session-level advisory
    /// lock and, when a statement fails (a read-only database, SQLSTATE 25006), returns without
    /// releasing it. On a pooled session the lock would outlive the failure and every later
    /// migration — this daemon's retry, another region's start — would wait for that session
    /// to idle out (10 minutes and more); closing the session releases it at once.
    async fn migrate_on(&self, conn: &mut PgConnection) -> Result<Vec<Migrated>, StoreError> {
        let known = newest_version(&MIGRATOR);
        let exists: bool = sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
            .fetch_one(&mut *conn)
            .await
            .map_err(|e| self.fail(e))?;
        let mut before: Vec<i64> = Vec::new();
        if exists {
            let found: Option<i64> = sqlx::query_scalar("SELECT max(version) FROM _sqlx_migrations")
                .fetch_one(&mut *conn)
                .await
                .map_err(|e| self.fail(e))?;
            if let Some(found) = found.filter(|f| *f > known) {
                return Err(StoreError::SchemaAhead { found, known });
            }
            before = sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success")
                .fetch_all(&mut *conn)
                .await
                .map_err(|e| self.fail(e))?;
        }
        // `run_direct` is `run` on a bare connection: `run(&mut conn)` asks for an `Acquire`
        // bound the async trait's `Send` check cannot prove (sqlx names it for that reason).
        MIGRATOR.run_direct(None, &mut *conn, false).await.map_err(|e| match e {
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
        .map_err(|e| self.fail(e))?;
        Ok(applied_since(&MIGRATOR, &before))
    }

    /// Chooses how sample batches are sent (the benchmark compares them).
    #[cfg(any(test, feature = "test-support"))]
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
        // Per rate-limit kind (requests, tokens): remaining, limit, reset.
        let (mut rl_remaining, mut rl_limit, mut rl_reset) = ([vec![], vec![]], [vec![], vec![]], [vec![], vec![]]);
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
            for (i, kind) in RateLimitKind::ALL.into_iter().enumerate() {
                let a = s.ratelimit.get(kind);
                let count = |n: Option<u64>| n.map(|n| i64::try_from(n).unwrap_or(i64::MAX));
                rl_remaining[i].push(count(a.and_then(|a| a.remaining)));
                rl_limit[i].push(count(a.and_then(|a| a.limit)));
                rl_reset[i].push(a.and_then(|a| a.reset_at));
            }
        }
        let [req_remaining, tok_remaining] = rl_remaining;
        let [req_limit, tok_limit] = rl_limit;
        let [req_reset, tok_reset] = rl_reset;
        let res = sqlx::query(
            "INSERT INTO samples (id, provider, model, route, region, scheduled_at, started_at, dns_ms, connect_ms, \
             tls_ms, ttfb_ms, ttft_ms, ttfr_ms, total_ms, input_tokens, output_tokens, tokens_per_s, status, outcome, \
             error, request_id, adherence_ok, cost_usd, retry_after_s, proxy_ms, ratelimit_requests_remaining, \
             ratelimit_requests_limit, ratelimit_requests_reset_at, ratelimit_tokens_remaining, ratelimit_tokens_limit, \
             ratelimit_tokens_reset_at) \
             SELECT * FROM UNNEST($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[], \
             $7::timestamptz[], $8::float8[], $9::float8[], $10::float8[], $11::float8[], $12::float8[], $13::float8[], \
             $14::float8[], $15::int8[], $16::int8[], $17::float8[], $18::int4[], $19::text[], $20::text[], $21::text[], \
             $22::bool[], $23::float8[], $24::float8[], $25::float8[], $26::int8[], $27::int8[], $28::timestamptz[], \
             $29::int8[], $30::int8[], $31::timestamptz[]) \
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
        .bind(req_remaining)
        .bind(req_limit)
        .bind(req_reset)
        .bind(tok_remaining)
        .bind(tok_limit)
        .bind(tok_reset)
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

/// JSON text bound as `jsonb` (binary format: version byte 1, then the text), so the shared
/// statements need no cast.
struct Jsonb(std::sync::Arc<str>);

impl Type<Postgres> for Jsonb {
    fn type_info() -> PgTypeInfo {
        // jsonb's built-in OID: fixed in every PostgreSQL, so no lookup.
        PgTypeInfo::with_oid(Oid(3802))
    }
}

impl Encode<'_, Postgres> for Jsonb {
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        buf.push(1);
        buf.extend_from_slice(self.0.as_bytes());
        Ok(IsNull::No)
    }
}

/// A shared statement with its values bound as PostgreSQL's native types.
fn query(stmt: Stmt) -> Query<'static, Postgres, PgArguments> {
    let cached = stmt.cached;
    let mut q = sqlx::query(AssertSqlSafe(stmt.sql)).persistent(cached);
    for arg in stmt.args {
        q = match arg {
            Arg::Text(v) => q.bind(v.as_deref().map(clean)),
            Arg::SharedText(v) if v.contains('\0') => q.bind(clean(&v)),
            Arg::SharedText(v) => q.bind(v),
            Arg::Int(v) => q.bind(v),
            Arg::Int4(v) => q.bind(v),
            Arg::Float(v) => q.bind(v),
            Arg::Bool(v) => q.bind(v),
            Arg::Bytes(v) => q.bind(v),
            Arg::SharedBytes(v) => q.bind(v),
            Arg::Time(v) => q.bind(v),
            Arg::Id(v) => q.bind(v),
            Arg::Json(v) => q.bind(Jsonb(v)),
        };
    }
    q
}

impl DialectRow for PgRow {
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

#[async_trait]
impl Backend for PgStore {
    type Row = PgRow;

    async fn run(&self, stmt: Stmt) -> Result<u64, StoreError> {
        let done = query(stmt).execute(&mut *self.conn().await?).await.map_err(|e| self.fail(e))?;
        Ok(done.rows_affected())
    }

    async fn run_all<I>(&self, stmts: I) -> Result<u64, StoreError>
    where
        I: IntoIterator<Item = Stmt> + Send,
        I::IntoIter: Send,
    {
        let mut conn = self.conn().await?;
        let mut tx = conn.begin().await.map_err(|e| self.fail(e))?;
        let mut changed = 0;
        for stmt in stmts {
            changed += query(stmt).execute(&mut *tx).await.map_err(|e| self.fail(e))?.rows_affected();
        }
        tx.commit().await.map_err(|e| self.fail(e))?;
        Ok(changed)
    }

    async fn rows(&self, stmt: Stmt) -> Result<Vec<PgRow>, StoreError> {
        query(stmt).fetch_all(&mut *self.conn().await?).await.map_err(|e| self.fail(e))
    }

    async fn decoded<T: Send + 'static, D>(&self, stmt: Stmt, decode: D) -> Result<Vec<T>, StoreError>
    where
        D: for<'r> FnMut(&'r PgRow) -> Result<T, sqlx::Error> + Send,
    {
        let mut conn = self.conn().await?;
        super::backend::decode_each(query(stmt).fetch(&mut *conn), decode, |e| self.fail(e)).await
    }

    fn integrity(&self) -> Result<(), String> {
        match self.corrupt.lock() {
            Ok(c) => c.clone().map_or(Ok(()), Err),
            Err(_) => Err("integrity state lock poisoned".into()),
        }
    }

    async fn migrate(&self) -> Result<Vec<Migrated>, StoreError> {
        // A session of its own, opened directly so a failure says exactly why (not the pool's
        // generic timeout), and closed whatever happened (see `migrate_on`).
        let mut conn = self.session().await?;
        let result = self.migrate_on(&mut conn).await;
        let _ = conn.close().await;
        result
    }

    async fn insert_samples(&self, samples: &[Sample]) -> Result<u64, StoreError> {
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
}
