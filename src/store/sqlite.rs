//! SQLite store: the embedded default (WAL, busy timeout), one file, readable with the `sqlite3` shell.

use super::rows::{
    canary_of, component_of, incident_of, json_of, outbox_of, sample_of, target_of, target_status_of, transition_of,
    StoredRow,
};
use super::{
    corruption, map_migrate, map_sqlx, newest_version, redact_url, BalanceReading, BreakerRecord, BreakerTransition,
    OutboxItem, Prune, Rollup, SampleQuery, Sighting, Store, StoreError, TargetStatus, CANARY_COLUMNS, SAMPLE_COLUMNS,
};
use crate::sample::Sample;
use crate::target::Target;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::migrate::Migrator;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::{AssertSqlSafe, Connection, QueryBuilder, Row, Sqlite};
use std::str::FromStr;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use uuid::Uuid;

static MIGRATOR: Migrator = sqlx::migrate!("migrations/sqlite");

/// Rows per multi-row INSERT: 24 binds each stays well under SQLite's 32,766 variable limit.
const INSERT_CHUNK: usize = 1_000;
/// Rows per retention DELETE, so the write lock is held only briefly.
const PURGE_BATCH: i64 = 5_000;
/// How long a writer waits for SQLite's lock before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest `PRAGMA quick_check` may run at open; a bigger file is opened unverified (logged).
pub const QUICK_CHECK_BUDGET: Duration = Duration::from_secs(10);
/// Problems `PRAGMA quick_check` lists at most.
const QUICK_CHECK_ROWS: i64 = 10;
/// SQLite's primary result code for an operation stopped by the progress handler.
const SQLITE_INTERRUPT: i64 = 9;

/// SQLite implementation of [`Store`].
pub struct SqliteStore {
    pool: SqlitePool,
    /// Why the file is known to be damaged (quick_check at open, or a query failing as corrupt since).
    corrupt: Mutex<Option<String>>,
}

/// Fixed-width UTC text, so comparing the text compares the times.
pub fn ts(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

fn parse_ts(s: &str) -> Result<DateTime<Utc>, sqlx::Error> {
    DateTime::parse_from_rfc3339(s)
        .map(|d| d.with_timezone(&Utc))
        .map_err(|e| sqlx::Error::Decode(format!("bad timestamp {s:?}: {e}").into()))
}

impl SqliteStore {
    /// Opens (creating if missing) the database file named by a `sqlite://PATH` URL and checks
    /// its integrity (`PRAGMA quick_check`, at most [`QUICK_CHECK_BUDGET`]). A damaged file still
    /// opens: [`Store::integrity`] says why and failing queries report `Unavailable`, so the
    /// daemon runs, spools and is not ready rather than exiting.
    pub async fn open(url: &str, acquire_timeout: Duration) -> Result<Self, StoreError> {
        Self::open_checked(url, acquire_timeout, QUICK_CHECK_BUDGET).await
    }

    /// [`SqliteStore::open`] with a custom quick_check budget (zero skips the check).
    pub async fn open_checked(
        url: &str,
        acquire_timeout: Duration,
        check_budget: Duration,
    ) -> Result<Self, StoreError> {
        let opts = SqliteConnectOptions::from_str(url)
            .map_err(|e| StoreError::BadUrl(format!("{}: {e}", redact_url(url))))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(true);
        // `sqlite://data/vigil.db` should work on a fresh machine: create the directory too.
        if let Some(parent) = opts.get_filename().parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)
                .map_err(|e| StoreError::Other(format!("cannot create {}: {e}", parent.display())))?;
        }
        let corrupt = if check_budget.is_zero() { None } else { quick_check(&opts, check_budget).await };
        if let Some(why) = &corrupt {
            tracing::error!(file = %opts.get_filename().display(), error = %why, "SQLite database is corrupt; samples are spooled until it is repaired or restored");
        }
        // Lazy, so a file that cannot be used yet (corrupt, disk full) still gives a store whose
        // calls fail as `Unavailable` instead of stopping the daemon at start.
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .acquire_timeout(acquire_timeout)
            .after_release(|conn, _| Box::pin(async move { in_step_with_sqlite(conn).await }))
            .connect_lazy_with(opts);
        Ok(SqliteStore { pool, corrupt: Mutex::new(corrupt) })
    }

    /// Maps a query failure, remembering corruption for [`Store::integrity`].
    fn fail(&self, e: sqlx::Error) -> StoreError {
        if let Some(why) = corruption(&e) {
            if let Ok(mut c) = self.corrupt.lock() {
                if c.is_none() {
                    tracing::error!(error = %why, "SQLite reports a corrupt database; samples are spooled until it is repaired or restored");
                    *c = Some(why);
                }
            }
        }
        map_sqlx(e)
    }

    /// The underlying pool (benchmarks and tests inspect the schema through it).
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }
}

/// Whether a connection coming back to the pool may be reused. SQLite rolls a transaction back
/// by itself when a write fails with SQLITE_FULL (also IOERR, NOMEM, some BUSY); sqlx does not
/// notice, its own ROLLBACK then fails ("no transaction is active") and it keeps counting the
/// transaction as open. From then on that connection's BEGIN becomes a SAVEPOINT and its
/// rollback a `ROLLBACK TO`, which leaves SQLite's transaction, and the write lock, open: every
/// other connection waits out the busy timeout and fails "database is locked" while writes that
/// happen to draw this connection succeed, long after the disk has room again. Such a
/// connection is closed here instead (a fresh one costs a file open).
async fn in_step_with_sqlite(conn: &mut SqliteConnection) -> Result<bool, sqlx::Error> {
    if !conn.is_in_transaction() {
        return Ok(true);
    }
    // A rollback queued by a dropped transaction runs before the ping answers; if it worked,
    // the connection is clean.
    conn.ping().await?;
    if conn.is_in_transaction() {
        tracing::warn!("SQLite connection left inside a failed transaction; closing it");
        return Ok(false);
    }
    Ok(true)
}

/// Runs `PRAGMA quick_check` on its own connection, interrupted after `budget`. `Some(why)`
/// when the file is damaged; `None` when it is sound or could not be checked (logged).
async fn quick_check(opts: &SqliteConnectOptions, budget: Duration) -> Option<String> {
    let file = opts.get_filename().display().to_string();
    let mut conn = match SqliteConnection::connect_with(opts).await {
        Ok(c) => c,
        Err(e) => {
            if let Some(why) = corruption(&e) {
                return Some(format!("{file}: {why}"));
            }
            tracing::warn!(%file, error = %e, "SQLite integrity not checked at open: cannot open the file");
            return None;
        }
    };
    let deadline = Instant::now() + budget;
    match conn.lock_handle().await {
        Ok(mut handle) => handle.set_progress_handler(10_000, move || Instant::now() < deadline),
        Err(e) => {
            tracing::warn!(%file, error = %e, "SQLite integrity not checked at open");
            return None;
        }
    }
    let started = Instant::now();
    let result =
        sqlx::query_scalar::<_, String>(sqlx::AssertSqlSafe(format!("PRAGMA quick_check({QUICK_CHECK_ROWS})")))
            .fetch_all(&mut conn)
            .await;
    let _ = conn.close().await;
    match result {
        Ok(rows) if rows.len() == 1 && rows[0] == "ok" => {
            tracing::debug!(%file, took = ?started.elapsed(), "SQLite quick_check ok");
            None
        }
        Ok(rows) => Some(format!("{file}: PRAGMA quick_check: {}", rows.join("; "))),
        Err(e) => {
            if let Some(why) = corruption(&e) {
                return Some(format!("{file}: PRAGMA quick_check failed: {why}"));
            }
            let interrupted = matches!(&e, sqlx::Error::Database(db)
                if db.code().and_then(|c| c.parse::<i64>().ok()).is_some_and(|n| n & 0xff == SQLITE_INTERRUPT));
            if interrupted {
                tracing::warn!(%file, budget = ?budget, "SQLite quick_check did not finish in time; integrity not verified at open");
            } else {
                tracing::warn!(%file, error = %e, "SQLite integrity not checked at open");
            }
            None
        }
    }
}

fn time_of(row: &SqliteRow, col: &str) -> Result<DateTime<Utc>, sqlx::Error> {
    let text: String = row.try_get(col)?;
    parse_ts(&text)
}

impl StoredRow for SqliteRow {
    fn uuid(&self, col: &str) -> Result<Uuid, sqlx::Error> {
        let text: String = self.try_get(col)?;
        Uuid::parse_str(&text).map_err(|e| sqlx::Error::ColumnDecode { index: col.to_owned(), source: Box::new(e) })
    }

    fn time(&self, col: &str) -> Result<DateTime<Utc>, sqlx::Error> {
        time_of(self, col)
    }

    fn opt_time(&self, col: &str) -> Result<Option<DateTime<Utc>>, sqlx::Error> {
        let text: Option<String> = self.try_get(col)?;
        text.as_deref().map(parse_ts).transpose()
    }
}

fn push_filters(qb: &mut QueryBuilder<Sqlite>, q: &SampleQuery) {
    qb.push(" WHERE 1 = 1");
    if let Some(region) = &q.region {
        qb.push(" AND region = ").push_bind(region.clone());
    }
    if let Some(t) = &q.target {
        qb.push(" AND provider = ").push_bind(t.provider.clone());
        qb.push(" AND model = ").push_bind(t.model.clone());
        qb.push(" AND route = ").push_bind(t.route_label().to_owned());
    }
    if let Some(since) = q.since {
        qb.push(" AND started_at >= ").push_bind(ts(since));
    }
    if let Some(until) = q.until {
        qb.push(" AND started_at < ").push_bind(ts(until));
    }
}

fn collect<T>(rows: &[SqliteRow], f: impl Fn(&SqliteRow) -> Result<T, sqlx::Error>) -> Result<Vec<T>, StoreError> {
    rows.iter().map(f).collect::<Result<_, _>>().map_err(map_sqlx)
}

#[async_trait]
impl Store for SqliteStore {
    async fn migrate(&self) -> Result<(), StoreError> {
        let known = newest_version(&MIGRATOR);
        let exists: i64 =
            sqlx::query_scalar("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'")
                .fetch_one(&self.pool)
                .await
                .map_err(|e| self.fail(e))?;
        if exists > 0 {
            let found: Option<i64> = sqlx::query_scalar("SELECT max(version) FROM _sqlx_migrations")
                .fetch_one(&self.pool)
                .await
                .map_err(|e| self.fail(e))?;
            if let Some(found) = found.filter(|f| *f > known) {
                return Err(StoreError::SchemaAhead { found, known });
            }
        }
        MIGRATOR.run(&self.pool).await.map_err(|e| match e {
            sqlx::migrate::MigrateError::Execute(inner) => self.fail(inner),
            other => map_migrate(other, known),
        })
    }

    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await.map(|_| ()).map_err(|e| self.fail(e))
    }

    fn integrity(&self) -> Result<(), String> {
        match self.corrupt.lock() {
            Ok(c) => c.clone().map_or(Ok(()), Err),
            Err(_) => Err("integrity state lock poisoned".into()),
        }
    }

    async fn insert_samples(&self, samples: &[Sample]) -> Result<u64, StoreError> {
        if samples.is_empty() {
            return Ok(0);
        }
        let mut tx = self.pool.begin().await.map_err(|e| self.fail(e))?;
        let mut inserted = 0;
        for chunk in samples.chunks(INSERT_CHUNK) {
            let mut qb = QueryBuilder::<Sqlite>::new(format!("INSERT INTO samples ({SAMPLE_COLUMNS}) "));
            qb.push_values(chunk, |mut b, s| {
                b.push_bind(s.id.hyphenated().to_string())
                    .push_bind(s.target.provider.clone())
                    .push_bind(s.target.model.clone())
                    .push_bind(s.target.route_label().to_owned())
                    .push_bind(s.target.region.clone())
                    .push_bind(ts(s.scheduled_at))
                    .push_bind(ts(s.started_at))
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
                    .push_bind(s.status.map(i64::from))
                    .push_bind(s.outcome.as_str())
                    .push_bind(s.error.clone())
                    .push_bind(s.request_id.clone())
                    .push_bind(s.adherence_ok)
                    .push_bind(s.cost_usd)
                    .push_bind(s.retry_after_s)
                    .push_bind(s.proxy_ms);
            });
            qb.push(" ON CONFLICT (id) DO NOTHING");
            inserted += qb.build().execute(&mut *tx).await.map_err(|e| self.fail(e))?.rows_affected();
        }
        tx.commit().await.map_err(|e| self.fail(e))?;
        Ok(inserted)
    }

    async fn samples(&self, q: &SampleQuery) -> Result<Vec<Sample>, StoreError> {
        let mut qb = QueryBuilder::<Sqlite>::new(format!("SELECT {SAMPLE_COLUMNS} FROM samples"));
        push_filters(&mut qb, q);
        match q.limit {
            Some(limit) => {
                qb.push(" ORDER BY started_at DESC, id DESC LIMIT ").push_bind(limit.max(0));
            }
            None => {
                qb.push(" ORDER BY started_at, id");
            }
        }
        let rows = qb.build().fetch_all(&self.pool).await.map_err(|e| self.fail(e))?;
        collect(&rows, sample_of)
    }

    async fn count_samples(&self, q: &SampleQuery) -> Result<i64, StoreError> {
        let mut qb = QueryBuilder::<Sqlite>::new("SELECT count(*) FROM samples");
        push_filters(&mut qb, q);
        qb.build_query_scalar::<i64>().fetch_one(&self.pool).await.map_err(|e| self.fail(e))
    }

    async fn purge_samples_before(&self, cutoff: DateTime<Utc>) -> Result<u64, StoreError> {
        let cutoff = ts(cutoff);
        let mut removed = 0;
        loop {
            let n = sqlx::query(
                "DELETE FROM samples WHERE rowid IN (SELECT rowid FROM samples WHERE started_at < ? LIMIT ?)",
            )
            .bind(&cutoff)
            .bind(PURGE_BATCH)
            .execute(&self.pool)
            .await
            .map_err(|e| self.fail(e))?
            .rows_affected();
            removed += n;
            if n < PURGE_BATCH as u64 {
                return Ok(removed);
            }
            // Let the sample writer take the lock between batches.
            tokio::task::yield_now().await;
        }
    }

    async fn upsert_rollups(&self, rollups: &[Rollup]) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await.map_err(|e| self.fail(e))?;
        for r in rollups {
            sqlx::query(
                "INSERT INTO rollups (provider, model, route, region, metric, hour, count, histogram) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?) \
                 ON CONFLICT (region, provider, model, route, metric, hour) \
                 DO UPDATE SET count = excluded.count, histogram = excluded.histogram",
            )
            .bind(&r.target.provider)
            .bind(&r.target.model)
            .bind(r.target.route_label())
            .bind(&r.target.region)
            .bind(&r.metric)
            .bind(ts(r.hour))
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
        let mut qb = QueryBuilder::<Sqlite>::new(
            "SELECT provider, model, route, region, metric, hour, count, histogram FROM rollups WHERE hour >= ",
        );
        qb.push_bind(ts(since));
        if let Some(u) = until {
            qb.push(" AND hour < ").push_bind(ts(u));
        }
        if let Some(region) = region {
            qb.push(" AND region = ").push_bind(region.to_owned());
        }
        qb.push(" ORDER BY region, provider, model, route, metric, hour");
        let rows = qb.build().fetch_all(&self.pool).await.map_err(|e| self.fail(e))?;
        collect(&rows, |row| {
            Ok(Rollup {
                target: target_of(row)?,
                metric: row.try_get("metric")?,
                hour: time_of(row, "hour")?,
                count: row.try_get("count")?,
                histogram: row.try_get("histogram")?,
            })
        })
    }

    async fn purge_rollups_before(&self, cutoff: DateTime<Utc>) -> Result<u64, StoreError> {
        let res = sqlx::query("DELETE FROM rollups WHERE hour < ?")
            .bind(ts(cutoff))
            .execute(&self.pool)
            .await
            .map_err(|e| self.fail(e))?;
        Ok(res.rows_affected())
    }

    async fn prune(&self, what: Prune, cutoff: DateTime<Utc>, limit: u32) -> Result<u64, StoreError> {
        let (table, cond) = (what.table(), what.condition().replace("{c}", "?1"));
        let sql = format!("DELETE FROM {table} WHERE rowid IN (SELECT rowid FROM {table} WHERE {cond} LIMIT ?2)");
        let res = sqlx::query(AssertSqlSafe(sql))
            .bind(ts(cutoff))
            .bind(i64::from(limit))
            .execute(&self.pool)
            .await
            .map_err(|e| self.fail(e))?;
        Ok(res.rows_affected())
    }

    async fn save_breaker(&self, r: &BreakerRecord) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO breaker_state (provider, model, route, region, state, since, detail) \
             VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (region, provider, model, route) \
             DO UPDATE SET state = excluded.state, since = excluded.since, detail = excluded.detail",
        )
        .bind(&r.target.provider)
        .bind(&r.target.model)
        .bind(r.target.route_label())
        .bind(&r.target.region)
        .bind(r.state.as_str())
        .bind(ts(r.since))
        .bind(r.detail.to_string())
        .execute(&self.pool)
        .await
        .map(|_| ())
        .map_err(|e| self.fail(e))
    }

    async fn load_breakers(&self, region: Option<&str>) -> Result<Vec<BreakerRecord>, StoreError> {
        let mut qb = QueryBuilder::<Sqlite>::new(
            "SELECT provider, model, route, region, state, since, detail FROM breaker_state",
        );
        if let Some(region) = region {
            qb.push(" WHERE region = ").push_bind(region.to_owned());
        }
        qb.push(" ORDER BY region, provider, model, route");
        let rows = qb.build().fetch_all(&self.pool).await.map_err(|e| self.fail(e))?;
        collect(&rows, |row| {
            Ok(BreakerRecord {
                target: target_of(row)?,
                state: super::rows::breaker_state(row, "state")?,
                since: time_of(row, "since")?,
                detail: json_of(row, "detail")?,
            })
        })
    }

    async fn append_transition(&self, t: &BreakerTransition) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO breaker_transitions (provider, model, route, region, from_state, to_state, at, reason) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&t.target.provider)
        .bind(&t.target.model)
        .bind(t.target.route_label())
        .bind(&t.target.region)
        .bind(t.from_state.as_str())
        .bind(t.to_state.as_str())
        .bind(ts(t.at))
        .bind(&t.reason)
        .execute(&self.pool)
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
        let mut qb = QueryBuilder::<Sqlite>::new(
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
        let rows = qb.build().fetch_all(&self.pool).await.map_err(|e| self.fail(e))?;
        collect(&rows, transition_of)
    }

    async fn enqueue(&self, items: &[OutboxItem]) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await.map_err(|e| self.fail(e))?;
        for i in items {
            sqlx::query(
                "INSERT INTO alert_outbox (id, channel, kind, dedup_key, payload, created_at, next_attempt_at, \
                 attempts, last_error, region) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
            )
            .bind(i.id.hyphenated().to_string())
            .bind(&i.channel)
            .bind(&i.kind)
            .bind(&i.dedup_key)
            .bind(i.payload.to_string())
            .bind(ts(i.created_at))
            .bind(ts(i.next_attempt_at))
            .bind(i.attempts)
            .bind(&i.last_error)
            .bind(&i.region)
            .execute(&mut *tx)
            .await
            .map_err(|e| self.fail(e))?;
        }
        tx.commit().await.map_err(|e| self.fail(e))
    }

    async fn due(&self, region: Option<&str>, now: DateTime<Utc>, limit: i64) -> Result<Vec<OutboxItem>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, region, channel, kind, dedup_key, payload, created_at, next_attempt_at, attempts, last_error \
             FROM alert_outbox WHERE delivered_at IS NULL AND abandoned_at IS NULL AND next_attempt_at <= ? \
             AND (? IS NULL OR region = ?) ORDER BY created_at, id LIMIT ?",
        )
        .bind(ts(now))
        .bind(region)
        .bind(region)
        .bind(limit.max(0))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| self.fail(e))?;
        collect(&rows, outbox_of)
    }

    async fn mark_delivered(&self, id: Uuid, at: DateTime<Utc>) -> Result<(), StoreError> {
        sqlx::query("UPDATE alert_outbox SET delivered_at = ?, attempts = attempts + 1 WHERE id = ?")
            .bind(ts(at))
            .bind(id.hyphenated().to_string())
            .execute(&self.pool)
            .await
            .map(|_| ())
            .map_err(|e| self.fail(e))
    }

    async fn mark_retry(&self, id: Uuid, next_attempt_at: DateTime<Utc>, error: &str) -> Result<(), StoreError> {
        sqlx::query("UPDATE alert_outbox SET attempts = attempts + 1, next_attempt_at = ?, last_error = ? WHERE id = ?")
            .bind(ts(next_attempt_at))
            .bind(error)
            .bind(id.hyphenated().to_string())
            .execute(&self.pool)
            .await
            .map(|_| ())
            .map_err(|e| self.fail(e))
    }

    async fn mark_abandoned(&self, id: Uuid, at: DateTime<Utc>, error: &str) -> Result<(), StoreError> {
        sqlx::query("UPDATE alert_outbox SET attempts = attempts + 1, abandoned_at = ?, last_error = ? WHERE id = ?")
            .bind(ts(at))
            .bind(error)
            .bind(id.hyphenated().to_string())
            .execute(&self.pool)
            .await
            .map(|_| ())
            .map_err(|e| self.fail(e))
    }

    async fn outbox_depth(&self) -> Result<i64, StoreError> {
        sqlx::query_scalar("SELECT count(*) FROM alert_outbox WHERE delivered_at IS NULL AND abandoned_at IS NULL")
            .fetch_one(&self.pool)
            .await
            .map_err(|e| self.fail(e))
    }

    async fn save_alert_state(&self, region: &str, state: &serde_json::Value) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO alert_state (region, state, updated_at) VALUES (?, ?, ?) \
             ON CONFLICT (region) DO UPDATE SET state = excluded.state, updated_at = excluded.updated_at",
        )
        .bind(region)
        .bind(state.to_string())
        .bind(ts(Utc::now()))
        .execute(&self.pool)
        .await
        .map(|_| ())
        .map_err(|e| self.fail(e))
    }

    async fn load_alert_state(&self, region: &str) -> Result<Option<serde_json::Value>, StoreError> {
        let text: Option<String> = sqlx::query_scalar("SELECT state FROM alert_state WHERE region = ?")
            .bind(region)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| self.fail(e))?;
        text.map(|t| serde_json::from_str(&t).map_err(|e| StoreError::Other(format!("alert_state is not JSON: {e}"))))
            .transpose()
    }

    async fn insert_balance(&self, r: &BalanceReading) -> Result<(), StoreError> {
        sqlx::query("INSERT INTO credit_balances (provider, region, at, remaining_usd) VALUES (?, ?, ?, ?)")
            .bind(&r.provider)
            .bind(&r.region)
            .bind(ts(r.at))
            .bind(r.remaining_usd)
            .execute(&self.pool)
            .await
            .map(|_| ())
            .map_err(|e| self.fail(e))
    }

    async fn balances(&self, provider: &str, since: DateTime<Utc>) -> Result<Vec<BalanceReading>, StoreError> {
        let rows = sqlx::query(
            "SELECT provider, region, at, remaining_usd FROM credit_balances WHERE provider = ? AND at >= ? \
             ORDER BY at, id",
        )
        .bind(provider)
        .bind(ts(since))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| self.fail(e))?;
        collect(&rows, |row| {
            Ok(BalanceReading {
                provider: row.try_get("provider")?,
                region: row.try_get("region")?,
                at: time_of(row, "at")?,
                remaining_usd: row.try_get("remaining_usd")?,
            })
        })
    }

    async fn transitions_between(
        &self,
        region: Option<&str>,
        since: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<Vec<BreakerTransition>, StoreError> {
        let rows = sqlx::query(
            "SELECT provider, model, route, region, from_state, to_state, at, reason FROM breaker_transitions \
             WHERE at >= ? AND at < ? AND (? IS NULL OR region = ?) ORDER BY at, id",
        )
        .bind(ts(since))
        .bind(ts(until))
        .bind(region)
        .bind(region)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| self.fail(e))?;
        collect(&rows, transition_of)
    }

    async fn outbox_between(
        &self,
        region: Option<&str>,
        since: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<Vec<OutboxItem>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, region, channel, kind, dedup_key, payload, created_at, next_attempt_at, attempts, last_error \
             FROM alert_outbox WHERE created_at >= ? AND created_at < ? AND (? IS NULL OR region = ?) \
             ORDER BY created_at, id",
        )
        .bind(ts(since))
        .bind(ts(until))
        .bind(region)
        .bind(region)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| self.fail(e))?;
        collect(&rows, outbox_of)
    }
    async fn publish_target_status(&self, rows: &[TargetStatus]) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await.map_err(map_sqlx)?;
        for r in rows {
            sqlx::query(
                "INSERT INTO target_status (region, provider, model, route, state, over_latency, breaker, updated_at) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (region, provider, model, route) DO UPDATE SET \
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
            .bind(ts(r.updated_at))
            .execute(&mut *tx)
            .await
            .map_err(map_sqlx)?;
        }
        tx.commit().await.map_err(map_sqlx)
    }

    async fn target_statuses(&self, since: DateTime<Utc>) -> Result<Vec<TargetStatus>, StoreError> {
        let rows = sqlx::query(
            "SELECT region, provider, model, route, state, over_latency, breaker, updated_at FROM target_status \
             WHERE updated_at >= ? ORDER BY region, provider, model, route",
        )
        .bind(ts(since))
        .fetch_all(&self.pool)
        .await
        .map_err(map_sqlx)?;
        collect(&rows, target_status_of)
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
            "INSERT INTO incident_lease (incident, owner, expires_at) VALUES (?, ?, ?) \
             ON CONFLICT (incident) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at \
             WHERE incident_lease.owner = excluded.owner OR incident_lease.expires_at < ? RETURNING owner",
        )
        .bind(incident)
        .bind(region)
        .bind(ts(expires_at))
        .bind(ts(now))
        .fetch_optional(&self.pool)
        .await
        .map_err(map_sqlx)?;
        match owner {
            Some(o) => Ok(o),
            None => sqlx::query_scalar("SELECT owner FROM incident_lease WHERE incident = ?")
                .bind(incident)
                .fetch_one(&self.pool)
                .await
                .map_err(map_sqlx),
        }
    }

    async fn release_incident(&self, incident: &str, region: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM incident_lease WHERE incident = ? AND owner = ?")
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
            "INSERT INTO incident_sightings (incident, region, firing, updated_at) VALUES (?, ?, ?, ?) \
             ON CONFLICT (incident, region) DO UPDATE SET firing = excluded.firing, updated_at = excluded.updated_at",
        )
        .bind(incident)
        .bind(region)
        .bind(firing)
        .bind(ts(at))
        .execute(&self.pool)
        .await
        .map(|_| ())
        .map_err(map_sqlx)
    }

    async fn sightings(&self, incident: &str) -> Result<Vec<Sighting>, StoreError> {
        let rows =
            sqlx::query("SELECT region, firing, updated_at FROM incident_sightings WHERE incident = ? ORDER BY region")
                .bind(incident)
                .fetch_all(&self.pool)
                .await
                .map_err(map_sqlx)?;
        collect(&rows, |row| {
            Ok(Sighting {
                region: row.try_get("region")?,
                firing: row.try_get("firing")?,
                updated_at: time_of(row, "updated_at")?,
            })
        })
    }

    async fn close_incident(&self, incident: &str) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await.map_err(map_sqlx)?;
        for table in ["incident_sightings", "incident_lease"] {
            sqlx::query(sqlx::AssertSqlSafe(format!("DELETE FROM {table} WHERE incident = ?")))
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
                 resolved_at, components, shortlink) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
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
            .bind(ts(i.created_at))
            .bind(i.updated_at.map(ts))
            .bind(i.resolved_at.map(ts))
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
             shortlink FROM provider_incidents WHERE created_at >= ? AND created_at < ? AND (? IS NULL OR provider = ?) \
             ORDER BY created_at, provider, incident_id",
        )
        .bind(ts(since))
        .bind(ts(until))
        .bind(provider)
        .bind(provider)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| self.fail(e))?;
        collect(&rows, incident_of)
    }

    async fn upsert_provider_components(
        &self,
        items: &[crate::provider_status::ProviderComponent],
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await.map_err(|e| self.fail(e))?;
        for c in items {
            sqlx::query(
                "INSERT INTO provider_components (provider, component_id, name, status, updated_at) \
                 VALUES (?, ?, ?, ?, ?) ON CONFLICT (provider, component_id) DO UPDATE SET name = excluded.name, \
                 status = excluded.status, updated_at = excluded.updated_at",
            )
            .bind(&c.provider)
            .bind(&c.id)
            .bind(&c.name)
            .bind(&c.status)
            .bind(c.updated_at.map(ts))
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
             WHERE provider = ? ORDER BY name, component_id",
        )
        .bind(provider)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| self.fail(e))?;
        collect(&rows, component_of)
    }

    async fn insert_canary_runs(&self, runs: &[crate::canary::CanaryRun]) -> Result<u64, StoreError> {
        if runs.is_empty() {
            return Ok(0);
        }
        let mut tx = self.pool.begin().await.map_err(|e| self.fail(e))?;
        let mut inserted = 0;
        for chunk in runs.chunks(INSERT_CHUNK / 2) {
            let mut qb = QueryBuilder::<Sqlite>::new(format!("INSERT INTO canary_runs ({CANARY_COLUMNS}) "));
            qb.push_values(chunk, |mut b, r| {
                let s = &r.sample;
                b.push_bind(r.sample.id.hyphenated().to_string())
                    .push_bind(s.target.provider.clone())
                    .push_bind(s.target.model.clone())
                    .push_bind(s.target.route_label().to_owned())
                    .push_bind(s.target.region.clone())
                    .push_bind(ts(s.scheduled_at))
                    .push_bind(ts(s.started_at))
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
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT * FROM (SELECT {CANARY_COLUMNS} FROM canary_runs WHERE started_at >= ? AND (? IS NULL OR region = ?) \
             ORDER BY started_at DESC, id DESC LIMIT ?) ORDER BY started_at, id"
        )))
        .bind(ts(since))
        .bind(region)
        .bind(region)
        .bind(limit.max(0))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| self.fail(e))?;
        collect(&rows, canary_of)
    }

    async fn purge_canary_runs_before(&self, cutoff: DateTime<Utc>) -> Result<u64, StoreError> {
        let n = sqlx::query("DELETE FROM canary_runs WHERE started_at < ?")
            .bind(ts(cutoff))
            .execute(&self.pool)
            .await
            .map_err(|e| self.fail(e))?
            .rows_affected();
        Ok(n)
    }
}
