//! Sustained sample insert rate and bytes per stored sample, PostgreSQL and SQLite side by side.
//!
//! `cargo bench --bench store_insert` (PostgreSQL from `VIGIL_TEST_DATABASE_URL`, default
//! `postgres://postgres@127.0.0.1:5432/postgres`; a throw-away database is created and dropped
//! for every PostgreSQL row). Each row inserts the same samples in batches: the PostgreSQL rows
//! compare the `COPY` path with the `UNNEST` insert it replaced, at 500 (the old
//! `storage.batch_size` default) and at the current default, one batch at a time as the writer
//! sends them; one row replays batches whose ids are all stored already (what a retried write
//! costs).
//! Optional env: `VIGIL_BENCH_SAMPLES` (default 100000), `VIGIL_BENCH_BATCH` (default 5000).

use chrono::{Duration, Utc};
use sqlx::Connection;
use std::sync::Arc;
use std::time::Instant;
use vigil::io::store::postgres::{InsertPath, PgStore};
use vigil::io::store::{self, AdminStore, SampleStore, Store};
use vigil::vocab::sample::Sample;
use vigil::vocab::target::Target;

#[path = "support/stored_sample.rs"]
mod stored_sample;
use stored_sample::stored_sample;

/// Batch size before the `COPY` change, kept as a comparison row.
const OLD_BATCH: usize = 500;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Realistic rows: 100 targets in 2 regions over the last day, mostly successes.
fn samples(n: usize) -> Vec<Sample> {
    let providers = ["openrouter", "openai", "anthropic", "groq", "together"];
    let routes = [Some("DeepInfra"), Some("Together"), None, Some("Lepton")];
    let start = Utc::now() - Duration::hours(20);
    (0..n)
        .map(|i| {
            let t = Target::new(
                providers[i % providers.len()].into(),
                format!("meta-llama/llama-3-70b-instruct-v{}", i % 10).into(),
                routes[i % routes.len()].map(Into::into),
                if i % 2 == 0 { "eu-west-1".into() } else { "us-east-1".into() },
            );
            stored_sample(t, start + Duration::milliseconds(i as i64 * 600), i)
        })
        .collect()
}

/// Inserts `data` in batches one after another, as the writer does; returns (samples/s, inserted).
async fn timed_inserts(store: &dyn Store, data: &[Sample], batch: usize) -> (f64, u64) {
    let began = Instant::now();
    let mut inserted = 0;
    for chunk in data.chunks(batch) {
        inserted += store.insert_samples(chunk).await.expect("insert");
    }
    (data.len() as f64 / began.elapsed().as_secs_f64(), inserted)
}

/// Sustained rate of fresh inserts (after a warm-up batch that opens connections and partitions).
async fn insert_rate(store: &dyn Store, data: &[Sample], batch: usize) -> f64 {
    let warm = data.len().min(batch);
    store.insert_samples(&data[..warm]).await.expect("warm-up insert");
    let (rate, inserted) = timed_inserts(store, &data[warm..], batch).await;
    assert_eq!(inserted as usize, data.len() - warm, "every sample inserted once");
    rate
}

/// One PostgreSQL measurement: (samples/s, bytes per stored sample, replay-of-stored samples/s).
async fn bench_postgres(
    data: &[Sample],
    path: InsertPath,
    batch: usize,
    replay: bool,
) -> Result<(f64, f64, Option<f64>), String> {
    let server = std::env::var("VIGIL_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let name = format!("vigil_bench_{}", uuid::Uuid::new_v4().simple());
    let mut admin = sqlx::PgConnection::connect(&server).await.map_err(|e| format!("PostgreSQL unreachable: {e}"))?;
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut admin)
        .await
        .map_err(|e| e.to_string())?;
    let mut url = url::Url::parse(&server).map_err(|e| e.to_string())?;
    url.set_path(&format!("/{name}"));
    let result = async {
        let pg = Arc::new(
            PgStore::open(url.as_str(), store::ACQUIRE_TIMEOUT).map_err(|e| e.to_string())?.with_insert_path(path),
        );
        pg.migrate().await.map_err(|e| e.to_string())?;
        let rate = insert_rate(pg.as_ref(), data, batch).await;
        let replayed = match replay {
            true => {
                let (rate, inserted) = timed_inserts(pg.as_ref(), data, batch).await;
                assert_eq!(inserted, 0, "a replay stores nothing new");
                Some(rate)
            }
            false => None,
        };
        sqlx::query("VACUUM ANALYZE samples").execute(pg.pool()).await.map_err(|e| e.to_string())?;
        let bytes: i64 = sqlx::query_scalar(
            "SELECT COALESCE(sum(pg_total_relation_size(i.inhrelid)), 0)::bigint FROM pg_inherits i \
             WHERE i.inhparent = 'samples'::regclass",
        )
        .fetch_one(pg.pool())
        .await
        .map_err(|e| e.to_string())?;
        let count = pg.count_samples(&Default::default()).await.map_err(|e| e.to_string())?;
        pg.pool().close().await;
        Ok::<_, String>((rate, bytes as f64 / count as f64, replayed))
    }
    .await;
    let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")))
        .execute(&mut admin)
        .await;
    result
}

async fn bench_sqlite(data: &[Sample], batch: usize) -> Result<(f64, f64), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let path = dir.path().join("bench.db");
    let s = store::sqlite::SqliteStore::open(&format!("sqlite://{}", path.display()), store::ACQUIRE_TIMEOUT)
        .await
        .map_err(|e| e.to_string())?;
    s.migrate().await.map_err(|e| e.to_string())?;
    let rate = insert_rate(&s, data, batch).await;
    sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)").execute(&s.pool()).await.map_err(|e| e.to_string())?;
    let count = s.count_samples(&Default::default()).await.map_err(|e| e.to_string())?;
    s.pool().close().await;
    let bytes = std::fs::metadata(&path).map_err(|e| e.to_string())?.len();
    Ok((rate, bytes as f64 / count as f64))
}

fn row(backend: &str, method: &str, batch: usize, rate: f64, bytes: Option<f64>) {
    let bytes = bytes.map_or_else(|| "-".to_owned(), |b| format!("{b:.1}"));
    println!("{backend:<11} {method:<30} {batch:>6} {rate:>10.0} {bytes:>13}");
}

#[tokio::main]
async fn main() {
    // `cargo bench` passes `--bench`; any other argument (a filter) is ignored.
    let n = env_usize("VIGIL_BENCH_SAMPLES", 100_000);
    let batch = env_usize("VIGIL_BENCH_BATCH", 5_000);
    let data = samples(n);
    println!("store_insert: {n} samples per row, one batch at a time");
    println!("{:<11} {:<30} {:>6} {:>10} {:>13}", "backend", "method", "batch", "samples/s", "bytes/sample");
    let runs = [
        ("UNNEST insert (before)", InsertPath::Unnest, OLD_BATCH, false),
        ("COPY", InsertPath::Copy, OLD_BATCH, false),
        ("UNNEST insert (before)", InsertPath::Unnest, batch, false),
        ("COPY", InsertPath::Copy, batch, true),
    ];
    for (method, path, batch, replay) in runs {
        match bench_postgres(&data, path, batch, replay).await {
            Ok((rate, bytes, replayed)) => {
                row("postgresql", method, batch, rate, Some(bytes));
                if let Some(replayed) = replayed {
                    row("postgresql", "COPY, every id already stored", batch, replayed, None);
                }
            }
            Err(e) => println!("postgresql  skipped: {e}"),
        }
    }
    for batch in [OLD_BATCH, batch] {
        match bench_sqlite(&data, batch).await {
            Ok((rate, bytes)) => row("sqlite", "INSERT", batch, rate, Some(bytes)),
            Err(e) => println!("sqlite      skipped: {e}"),
        }
    }
}
