//! SQLite store: the embedded default (WAL, busy timeout), one file, readable with the `sqlite3` shell.
//!
//! The file is watched: before every query the path is compared with the file opened (device
//! and inode). A file deleted or replaced under the running daemon is noticed at the next query
//! (and by `/readyz` at once): queries fail as unavailable (samples are spooled, nothing goes
//! into the unlinked inode), and after [`REOPEN_AFTER`] the old connections are closed and the
//! path is opened again (created if missing, checked, migrated), so the spool is replayed into
//! the file now there. A file known to be corrupt takes no query at all.
//!
//! The integrity check at open (`PRAGMA quick_check`, seconds on a file of gigabytes) runs beside
//! the start: reads go ahead while it runs (a start reads its state and probes), every write waits
//! for its verdict, so nothing is written into a file the check finds damaged.

use super::backend::Backend;
use super::corruption;
use super::map_migrate;
use super::map_sqlx;
use super::migrations::SQLITE_MIGRATOR as MIGRATOR;
use super::newest_version;
use super::redact_url;
use super::rows::DialectRow;
use super::sql;
use super::sql::Arg;
use super::sql::Stmt;
use super::Prune;
use super::StoreError;
use super::{applied_since, Migrated};
use crate::vocab::sample::Sample;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::query::Query;
use sqlx::sqlite::{
    SqliteArguments, SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteRow, SqliteSynchronous,
};
use sqlx::{AssertSqlSafe, Connection, Row, Sqlite};
use std::path::Path;
use std::str::FromStr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use uuid::Uuid;

/// Rows per multi-row INSERT: 31 values each stays under SQLite's 32,766 variable limit.
const INSERT_CHUNK: usize = 1_000;
/// Rows per retention DELETE, so the write lock is held only briefly.
const PURGE_BATCH: i64 = 5_000;
/// How long a writer waits for SQLite's lock before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// Each connection's page cache (`PRAGMA cache_size`, negative: KiB). SQLite's default is 2 MiB a
/// connection, held once filled, and the week's read-back fills them: at 10,000 targets SQLite
/// held 7 MB after it. vigil's reads scan (the read-back) or look up by key and its writes
/// append, so the pages beyond this come from the kernel's file cache (docs/BENCHMARKS.md).
const CACHE_KIB: &str = "-512";
/// Longest `PRAGMA quick_check` may run at open; a bigger file is opened unverified (logged).
pub const QUICK_CHECK_BUDGET: Duration = Duration::from_secs(10);
/// Problems `PRAGMA quick_check` lists at most.
const QUICK_CHECK_ROWS: i64 = 10;
/// SQLite's primary result code for an operation stopped by the progress handler.
const SQLITE_INTERRUPT: i64 = 9;
/// How long after a file is found deleted or replaced it is opened again: time for the old
/// connections to finish, and for an operator to finish putting a file in place.
pub const REOPEN_AFTER: Duration = Duration::from_secs(5);
/// Longest the old connections may take to close before a reopen (else it is tried later).
const CLOSE_WAIT: Duration = Duration::from_secs(10);

/// SQLite implementation of [`super::Store`].
pub struct SqliteStore {
    /// How to open the file again.
    opts: SqliteConnectOptions,
    acquire_timeout: Duration,
    check_budget: Duration,
    /// The pool on the file opened, and that file's identity.
    open: RwLock<Opened>,
    /// Why the file is known to be damaged (quick_check at open, or a query failing as corrupt since).
    corrupt: Arc<Mutex<Option<String>>>,
    /// True once the integrity check of the file as opened has given its verdict (at once when
    /// there is none to run); writes wait for it.
    checked: tokio::sync::watch::Receiver<bool>,
    /// Why the path no longer names the file opened, and since when.
    gone: Mutex<Option<(String, Instant)>>,
    /// Held by the one query that reopens the file.
    reopening: tokio::sync::Mutex<()>,
}

/// An open pool and the identity of its file.
struct Opened {
    pool: SqlitePool,
    id: Option<FileId>,
}

/// Where a file lives: device and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
}

impl FileId {
    #[cfg(unix)]
    fn of(meta: &std::fs::Metadata) -> Option<FileId> {
        use std::os::unix::fs::MetadataExt;
        Some(FileId { dev: meta.dev(), ino: meta.ino() })
    }

    #[cfg(not(unix))]
    fn of(_meta: &std::fs::Metadata) -> Option<FileId> {
        None
    }

    /// The identity of the file at `path`, created empty if missing (SQLite reads an empty file
    /// as an empty database); `None` for an in-memory database or a path that cannot be read.
    fn at(path: &Path) -> Option<FileId> {
        if path.as_os_str().is_empty() || path.as_os_str() == ":memory:" {
            return None;
        }
        if !path.exists() {
            let _ = std::fs::OpenOptions::new().write(true).create_new(true).open(path);
        }
        std::fs::metadata(path).ok().and_then(|m| FileId::of(&m))
    }
}

/// The spelling of [`ts`], for chrono.
const TS_FORMAT: &str = "%Y-%m-%dT%H:%M:%S%.6fZ";

/// Fixed-width UTC text, so comparing the text compares the times.
pub fn ts(t: DateTime<Utc>) -> String {
    use chrono::{Datelike, Timelike};
    use std::fmt::Write;
    let (year, nanos) = (t.year(), t.nanosecond());
    // Written field by field: chrono reads its format string anew for every time it spells, and
    // a sample binds five (at 10,000 targets, hundreds a second on the storage link). Years
    // chrono signs and leap seconds keep its own spelling.
    if !(0..=9999).contains(&year) || nanos >= 1_000_000_000 {
        return t.format(TS_FORMAT).to_string();
    }
    let mut s = String::with_capacity(27);
    let (month, day, hour, minute, second) = (t.month(), t.day(), t.hour(), t.minute(), t.second());
    let _ = write!(s, "{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{:06}Z", nanos / 1_000);
    s
}

fn parse_ts(s: &str) -> Result<DateTime<Utc>, sqlx::Error> {
    DateTime::parse_from_rfc3339(s)
        .map(|d| d.with_timezone(&Utc))
        .map_err(|e| sqlx::Error::Decode(format!("bad timestamp {s:?}: {e}").into()))
}

impl SqliteStore {
    /// Opens (creating if missing) the database file named by a `sqlite://PATH` URL and checks
    /// its integrity (`PRAGMA quick_check`, at most [`QUICK_CHECK_BUDGET`]). A damaged file still
    /// opens: [`super::Store::integrity`] says why and failing queries report `Unavailable`, so the
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
            .pragma("cache_size", CACHE_KIB)
            .foreign_keys(true);
        // `sqlite://data/vigil.db` should work on a fresh machine: create the directory too.
        if let Some(parent) = opts.get_filename().parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)
                .map_err(|e| StoreError::Other(format!("cannot create {}: {e}", parent.display())))?;
        }
        let corrupt = Arc::new(Mutex::new(None));
        let checked = check_beside(&opts, check_budget, corrupt.clone()).await;
        Ok(SqliteStore {
            open: RwLock::new(connect(&opts, acquire_timeout)),
            opts,
            acquire_timeout,
            check_budget,
            corrupt,
            checked,
            gone: Mutex::new(None),
            reopening: tokio::sync::Mutex::new(()),
        })
    }

    /// Waits for the verdict of the integrity check at open (a write must not go into a file
    /// it finds damaged).
    async fn checked(&self) {
        let mut checked = self.checked.clone();
        // An error means the check's task is gone without a verdict: nothing more to wait for.
        let _ = checked.wait_for(|done| *done).await;
    }

    /// Maps a query failure, remembering corruption for [`super::Store::integrity`].
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
    pub fn pool(&self) -> SqlitePool {
        self.open.read().unwrap_or_else(|e| e.into_inner()).pool.clone()
    }

    /// `Err(why)` while the path no longer names the file opened (deleted, or another file put
    /// there); noticed here first, so `/readyz` says so at once.
    pub fn vanished(&self) -> Result<(), String> {
        let mut gone = self.gone.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((why, _)) = gone.as_ref() {
            return Err(why.clone());
        }
        let id = self.open.read().unwrap_or_else(|e| e.into_inner()).id;
        let Some(id) = id else { return Ok(()) };
        let path = self.opts.get_filename();
        let why = match std::fs::metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => format!(
                "storage file deleted: {} was removed while vigil had it open; samples are spooled until it is opened again",
                path.display()
            ),
            Ok(m) if FileId::of(&m).is_some_and(|now| now != id) => format!(
                "storage file replaced: {} is no longer the file vigil opened; samples are spooled until it is opened again",
                path.display()
            ),
            _ => return Ok(()),
        };
        tracing::error!(file = %path.display(), error = %why, "SQLite database file gone from under vigil; writes stop until it is opened again");
        *gone = Some((why.clone(), Instant::now()));
        Err(why)
    }

    /// The pool to run a write on, once the integrity check at open has said the file is sound.
    async fn pool_for_write(&self) -> Result<SqlitePool, StoreError> {
        self.checked().await;
        self.pool_for_query().await
    }

    /// The pool to run a query on, or why no query may run: the file is gone (reopened once
    /// [`REOPEN_AFTER`] has passed) or known to be corrupt.
    async fn pool_for_query(&self) -> Result<SqlitePool, StoreError> {
        if self.vanished().is_err() {
            self.reopen().await;
            self.vanished().map_err(StoreError::Unavailable)?;
        }
        if let Some(why) = self.corrupt.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            return Err(StoreError::Unavailable(format!("storage corrupt: {why}")));
        }
        Ok(self.pool())
    }

    /// The pool for a statement that returns rows: the write pool when it may still write
    /// (`INSERT … RETURNING`), else the query pool.
    async fn pool_for_rows(&self, sql: &str) -> Result<SqlitePool, StoreError> {
        match reads_only(sql) {
            true => self.pool_for_query().await,
            false => self.pool_for_write().await,
        }
    }

    /// Opens the path again once the file has been gone for [`REOPEN_AFTER`]: the old pool is
    /// closed first, then the `-wal` and `-shm` files the vanished database left at the path are
    /// set aside (SQLite leaves them when its file was moved or deleted, and would read the old
    /// WAL's pages as the new file's, then checkpoint them into it), then the file now there is
    /// opened, checked and migrated.
    async fn reopen(&self) {
        let Ok(_one) = self.reopening.try_lock() else { return };
        let due = self.gone.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map(|(_, since)| since.elapsed());
        if due.is_none_or(|d| d < REOPEN_AFTER) {
            return;
        }
        let file = self.opts.get_filename().display().to_string();
        if tokio::time::timeout(CLOSE_WAIT, self.pool().close()).await.is_err() {
            tracing::warn!(%file, "old SQLite connections still busy; reopening later");
            return;
        }
        if !set_aside_leftovers(self.opts.get_filename()) {
            self.retry_later();
            return;
        }
        let opened = connect(&self.opts, self.acquire_timeout);
        let mut corrupt = verdict(&self.opts, self.check_budget).await;
        if corrupt.is_none() {
            let mut found = None;
            let migrated = migrate_pool(&opened.pool, |e| {
                found = corruption(&e);
                map_sqlx(e)
            })
            .await;
            match (migrated, found) {
                (Ok(_), _) => {}
                (Err(_), Some(why)) => corrupt = Some(why),
                (Err(e), None) => {
                    tracing::error!(%file, error = %e, "SQLite database opened again but not migrated; retrying later");
                    opened.pool.close().await;
                    self.retry_later();
                    return;
                }
            }
        }
        *self.open.write().unwrap_or_else(|e| e.into_inner()) = opened;
        *self.corrupt.lock().unwrap_or_else(|e| e.into_inner()) = corrupt;
        *self.gone.lock().unwrap_or_else(|e| e.into_inner()) = None;
        tracing::warn!(%file, "SQLite database file opened again; spooled samples are replayed into it");
    }

    /// The next reopen waits another [`REOPEN_AFTER`].
    fn retry_later(&self) {
        if let Some((_, since)) = self.gone.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            *since = Instant::now();
        }
    }
}

/// Moves the WAL left beside `db` by a database that vanished to `<db>-wal.vanished-<unix time>`
/// (its last writes, for whoever wants to recover them) and removes its shared-memory index;
/// false when the WAL is still there (the path must not be opened over it).
fn set_aside_leftovers(db: &Path) -> bool {
    let beside = |suffix: &str| {
        let mut name = db.as_os_str().to_owned();
        name.push(suffix);
        std::path::PathBuf::from(name)
    };
    let wal = beside("-wal");
    if wal.exists() {
        let aside = beside(&format!("-wal.vanished-{}", Utc::now().timestamp()));
        match std::fs::rename(&wal, &aside) {
            Ok(()) => {
                tracing::warn!(wal = %wal.display(), kept = %aside.display(), "WAL of the vanished database set aside")
            }
            Err(e) => {
                tracing::error!(wal = %wal.display(), error = %e, "WAL of the vanished database not set aside; not reopening yet");
                return false;
            }
        }
    }
    let shm = beside("-shm");
    if let Err(e) = std::fs::remove_file(&shm) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::error!(shm = %shm.display(), error = %e, "shared-memory index of the vanished database not removed; not reopening yet");
            return false;
        }
    }
    true
}

/// A lazy pool on the file `opts` names, and its identity.
fn connect(opts: &SqliteConnectOptions, acquire_timeout: Duration) -> Opened {
    let id = FileId::at(opts.get_filename());
    // Lazy, so a file that cannot be used yet (corrupt, disk full) still gives a store whose
    // calls fail as `Unavailable` instead of stopping the daemon at start.
    let pool = SqlitePoolOptions::new()
        .max_connections(4)
        .acquire_timeout(acquire_timeout)
        .after_release(|conn, _| Box::pin(async move { in_step_with_sqlite(conn).await }))
        .connect_lazy_with(opts.clone());
    Opened { pool, id }
}

/// Why the file `opts` names is corrupt, if `PRAGMA quick_check` (within `check_budget`; zero
/// skips it) says so; logged.
async fn verdict(opts: &SqliteConnectOptions, check_budget: Duration) -> Option<String> {
    let corrupt = if check_budget.is_zero() { None } else { quick_check(opts, check_budget).await };
    corrupt.inspect(|why| log_corrupt(opts, why))
}

fn log_corrupt(opts: &SqliteConnectOptions, why: &str) {
    tracing::error!(file = %opts.get_filename().display(), error = %why, "SQLite database is corrupt; nothing is written into it and samples are spooled until it is repaired or restored");
}

/// Runs the integrity check at open on a task of its own, which records a damaged file in
/// `corrupt`; the receiver turns true once the verdict is in.
async fn check_beside(
    opts: &SqliteConnectOptions,
    check_budget: Duration,
    corrupt: Arc<Mutex<Option<String>>>,
) -> tokio::sync::watch::Receiver<bool> {
    let (done, checked) = tokio::sync::watch::channel(check_budget.is_zero());
    if check_budget.is_zero() {
        return checked;
    }
    let record = move |verdict: Option<String>| {
        if let Some(why) = verdict {
            let mut c = corrupt.lock().unwrap_or_else(|e| e.into_inner());
            // A query that met the damage first keeps its own words.
            c.get_or_insert(why);
        }
        let _ = done.send(true);
    };
    // Its connection is opened before the pool's first: the first connection to a new file
    // switches it to WAL, and while another connection is opening that switch fails at once
    // with "database is locked".
    match check_connection(opts).await {
        Err(verdict) => record(verdict.inspect(|why| log_corrupt(opts, why))),
        Ok(conn) => {
            let opts = opts.clone();
            tokio::spawn(async move {
                let verdict = run_check(conn, &opts, check_budget).await;
                record(verdict.inspect(|why| log_corrupt(&opts, why)));
            });
        }
    }
    checked
}

/// The migrations applied to the database on `pool` (`None` before the first), refusing a
/// database ahead of this binary; `fail` maps (and may remember) a query's failure.
async fn applied_versions(
    pool: &SqlitePool,
    mut fail: impl FnMut(sqlx::Error) -> StoreError,
) -> Result<Option<Vec<i64>>, StoreError> {
    let known = newest_version(&MIGRATOR);
    let exists: i64 =
        sqlx::query_scalar("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'")
            .fetch_one(pool)
            .await
            .map_err(&mut fail)?;
    if exists == 0 {
        return Ok(None);
    }
    let found: Option<i64> =
        sqlx::query_scalar("SELECT max(version) FROM _sqlx_migrations").fetch_one(pool).await.map_err(&mut fail)?;
    if let Some(found) = found.filter(|f| *f > known) {
        return Err(StoreError::SchemaAhead { found, known });
    }
    let applied = sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success")
        .fetch_all(pool)
        .await
        .map_err(&mut fail)?;
    Ok(Some(applied))
}

/// Applies the migrations on `pool`, refusing a database ahead of this binary; `fail` maps
/// (and may remember) a query's failure.
async fn migrate_pool(
    pool: &SqlitePool,
    mut fail: impl FnMut(sqlx::Error) -> StoreError,
) -> Result<Vec<Migrated>, StoreError> {
    let known = newest_version(&MIGRATOR);
    let before = applied_versions(pool, &mut fail).await?.unwrap_or_default();
    MIGRATOR.run(pool).await.map_err(|e| match e {
        sqlx::migrate::MigrateError::Execute(inner) => fail(inner),
        other => map_migrate(other, known),
    })?;
    Ok(applied_since(&MIGRATOR, &before))
}

/// Whether `sql` only reads (a `SELECT`); anything else is taken as a write.
fn reads_only(sql: &str) -> bool {
    sql.trim_start().get(..6).is_some_and(|head| head.eq_ignore_ascii_case("select"))
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
    match check_connection(opts).await {
        Ok(conn) => run_check(conn, opts, budget).await,
        Err(verdict) => verdict,
    }
}

/// The integrity check's own connection, or its verdict when the file cannot be opened
/// (`Some(why)` when that is corruption; `None`, logged, otherwise).
async fn check_connection(opts: &SqliteConnectOptions) -> Result<SqliteConnection, Option<String>> {
    let file = opts.get_filename().display().to_string();
    SqliteConnection::connect_with(opts).await.map_err(|e| {
        if let Some(why) = corruption(&e) {
            return Some(format!("{file}: {why}"));
        }
        tracing::warn!(%file, error = %e, "SQLite integrity not checked at open: cannot open the file");
        None
    })
}

/// `PRAGMA quick_check` on `conn` (see [`quick_check`]).
async fn run_check(mut conn: SqliteConnection, opts: &SqliteConnectOptions, budget: Duration) -> Option<String> {
    let file = opts.get_filename().display().to_string();
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

/// A shared statement with its values bound as SQLite stores them (times as fixed-width
/// text, ids as hyphenated text, JSON as text).
///
/// Placeholders become SQLite's own: a plain `?` where `$1…$n` each appear once in order (every
/// multi-row insert), else `?n` (same meaning as `$n`). Both `$n` and `?n` are names to SQLite,
/// and sqlx asks SQLite for each parameter's name, which SQLite finds by walking the list of
/// names: quadratic in a 1,000-row insert's 24,000 placeholders (871 samples/s instead of
/// 100,000, docs/BENCHMARKS.md). A plain `?` has no name to look up.
fn query(stmt: Stmt) -> Query<'static, Sqlite, SqliteArguments> {
    let cached = stmt.cached;
    let sql = match stmt.sql.contains('$') {
        false => stmt.sql,
        true => sqlite_placeholders(&stmt.sql).into(),
    };
    let mut q = sqlx::query(AssertSqlSafe(sql)).persistent(cached);
    for arg in stmt.args {
        q = match arg {
            Arg::Text(v) => q.bind(v),
            Arg::SharedText(v) => q.bind(v),
            Arg::Int(v) => q.bind(v),
            Arg::Int4(v) => q.bind(v),
            Arg::Float(v) => q.bind(v),
            Arg::Bool(v) => q.bind(v),
            Arg::Bytes(v) => q.bind(v),
            Arg::SharedBytes(v) => q.bind(v),
            Arg::Time(v) => q.bind(v.map(ts)),
            Arg::Id(v) => q.bind(v.hyphenated().to_string()),
            Arg::Json(v) => q.bind(v),
        };
    }
    q
}

/// `sql` with `$n` placeholders in SQLite's spelling (see [`query`]).
fn sqlite_placeholders(sql: &str) -> String {
    let numbers: Vec<&str> =
        sql.split('$').skip(1).map(|rest| rest.split(|c: char| !c.is_ascii_digit()).next().unwrap_or("")).collect();
    let in_order = numbers.iter().enumerate().all(|(i, n)| n.parse::<usize>().is_ok_and(|n| n == i + 1));
    if !in_order {
        return sql.replace('$', "?");
    }
    let mut out = String::with_capacity(sql.len());
    for (i, part) in sql.split('$').enumerate() {
        if i == 0 {
            out.push_str(part);
        } else {
            out.push('?');
            out.push_str(part.trim_start_matches(|c: char| c.is_ascii_digit()));
        }
    }
    out
}

impl DialectRow for SqliteRow {
    fn uuid(&self, col: &str) -> Result<Uuid, sqlx::Error> {
        let text: String = self.try_get(col)?;
        Uuid::parse_str(&text).map_err(|e| sqlx::Error::ColumnDecode { index: col.to_owned(), source: Box::new(e) })
    }

    fn time(&self, col: &str) -> Result<DateTime<Utc>, sqlx::Error> {
        let text: String = self.try_get(col)?;
        parse_ts(&text)
    }

    fn opt_time(&self, col: &str) -> Result<Option<DateTime<Utc>>, sqlx::Error> {
        let text: Option<String> = self.try_get(col)?;
        text.as_deref().map(parse_ts).transpose()
    }
}

#[async_trait]
impl Backend for SqliteStore {
    type Row = SqliteRow;

    async fn run(&self, stmt: Stmt) -> Result<u64, StoreError> {
        let pool = self.pool_for_write().await?;
        let done = query(stmt).execute(&pool).await.map_err(|e| self.fail(e))?;
        Ok(done.rows_affected())
    }

    async fn run_all<I>(&self, stmts: I) -> Result<u64, StoreError>
    where
        I: IntoIterator<Item = Stmt> + Send,
        I::IntoIter: Send,
    {
        let pool = self.pool_for_write().await?;
        let mut tx = pool.begin().await.map_err(|e| self.fail(e))?;
        let mut changed = 0;
        for stmt in stmts {
            changed += query(stmt).execute(&mut *tx).await.map_err(|e| self.fail(e))?.rows_affected();
        }
        tx.commit().await.map_err(|e| self.fail(e))?;
        Ok(changed)
    }

    async fn rows(&self, stmt: Stmt) -> Result<Vec<SqliteRow>, StoreError> {
        let pool = self.pool_for_rows(&stmt.sql).await?;
        query(stmt).fetch_all(&pool).await.map_err(|e| self.fail(e))
    }

    async fn decoded<T: Send + 'static, D>(&self, stmt: Stmt, decode: D) -> Result<Vec<T>, StoreError>
    where
        D: for<'r> FnMut(&'r SqliteRow) -> Result<T, sqlx::Error> + Send,
    {
        let pool = self.pool_for_rows(&stmt.sql).await?;
        super::backend::decode_each(query(stmt).fetch(&pool), decode, |e| self.fail(e)).await
    }

    fn integrity(&self) -> Result<(), String> {
        match self.corrupt.lock() {
            Ok(c) => c.clone().map_or(Ok(()), Err),
            Err(_) => Err("integrity state lock poisoned".into()),
        }
    }

    async fn insert_samples(&self, samples: &[Sample]) -> Result<u64, StoreError> {
        self.run_all(samples.chunks(INSERT_CHUNK).map(sql::insert_samples)).await
    }

    async fn migrate(&self) -> Result<Vec<Migrated>, StoreError> {
        let pool = self.pool_for_query().await?;
        // A start on a current schema writes nothing here, so it need not wait for the check.
        let applied = applied_versions(&pool, |e| self.fail(e)).await?;
        let current = applied.is_some_and(|done| applied_since(&MIGRATOR, &done).is_empty());
        let pool = if current { pool } else { self.pool_for_write().await? };
        migrate_pool(&pool, |e| self.fail(e)).await
    }

    fn vanished(&self) -> Result<(), String> {
        SqliteStore::vanished(self)
    }

    async fn purge_samples_before(&self, cutoff: DateTime<Utc>) -> Result<u64, StoreError> {
        let cutoff = ts(cutoff);
        let pool = self.pool_for_write().await?;
        let mut removed = 0;
        loop {
            let n = sqlx::query(
                "DELETE FROM samples WHERE rowid IN (SELECT rowid FROM samples WHERE started_at < ? LIMIT ?)",
            )
            .bind(&cutoff)
            .bind(PURGE_BATCH)
            .execute(&pool)
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

    async fn prune(&self, what: Prune, cutoff: DateTime<Utc>, limit: u32) -> Result<u64, StoreError> {
        let (table, cond) = (what.table(), what.condition().replace("{c}", "?1"));
        let sql = format!("DELETE FROM {table} WHERE rowid IN (SELECT rowid FROM {table} WHERE {cond} LIMIT ?2)");
        let pool = self.pool_for_write().await?;
        let res = sqlx::query(AssertSqlSafe(sql))
            .bind(ts(cutoff))
            .bind(i64::from(limit))
            .execute(&pool)
            .await
            .map_err(|e| self.fail(e))?;
        Ok(res.rows_affected())
    }
}

#[cfg(test)]
mod tests {
    use super::{reads_only, sqlite_placeholders, ts, DateTime, Utc, TS_FORMAT};

    #[test]
    fn stored_times_are_spelled_as_chrono_spells_them() {
        let spelled = |t: DateTime<Utc>| (ts(t), t.format(TS_FORMAT).to_string());
        let at = |s: &str| DateTime::parse_from_rfc3339(s).expect("time").with_timezone(&Utc);
        for s in [
            "2026-12-07T03:04:05.123456789Z",
            "2026-01-01T00:00:00Z",
            "1999-12-31T23:59:59.999999Z",
            "0001-02-03T04:05:06.000001Z",
            "9999-12-31T23:59:59.5Z",
        ] {
            let (ours, chrono) = spelled(at(s));
            assert_eq!(ours, chrono, "{s}");
            assert_eq!(ours.len(), 27, "{s}: fixed width");
        }
        let leap = chrono::NaiveDate::from_ymd_opt(2016, 12, 31)
            .and_then(|d| d.and_hms_nano_opt(23, 59, 59, 1_500_000_000))
            .expect("a leap second")
            .and_utc();
        let (ours, chrono) = spelled(leap);
        assert_eq!(ours, chrono);
        let far =
            chrono::NaiveDate::from_ymd_opt(10_000, 1, 1).and_then(|d| d.and_hms_opt(0, 0, 0)).expect("far").and_utc();
        assert_eq!(ts(far), far.format(TS_FORMAT).to_string());
    }

    #[test]
    fn only_a_select_counts_as_a_read() {
        assert!(reads_only("SELECT 1"));
        assert!(reads_only("  select target FROM samples"));
        assert!(!reads_only("INSERT INTO incident_lease VALUES ($1) RETURNING owner"));
        assert!(!reads_only("WITH x AS (SELECT 1) DELETE FROM samples"));
        assert!(!reads_only("SEL"));
    }

    #[test]
    fn placeholders_in_order_become_plain_question_marks_others_keep_their_numbers() {
        assert_eq!(sqlite_placeholders("VALUES ($1, $2), ($3, $4)"), "VALUES (?, ?), (?, ?)");
        assert_eq!(sqlite_placeholders("a = $1 OR b = $1"), "a = ?1 OR b = ?1");
        assert_eq!(sqlite_placeholders("a = $2 AND b = $1"), "a = ?2 AND b = ?1");
        assert_eq!(sqlite_placeholders("a = $1 AND b = $3"), "a = ?1 AND b = ?3");
        assert_eq!(sqlite_placeholders("SELECT 1"), "SELECT 1");
    }
}
