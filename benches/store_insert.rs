//! Sustained sample insert rate and bytes per stored sample, PostgreSQL and SQLite side by side.
//!
//! `cargo bench --bench store_insert` (PostgreSQL from `VIGIL_TEST_DATABASE_URL`, default
//! `postgres://postgres@127.0.0.1:5432/postgres`; a throw-away database is created and dropped).
//! Optional env: `VIGIL_BENCH_SAMPLES` (default 100000), `VIGIL_BENCH_BATCH` (default 500).

use chrono::{Duration, Utc};
use sqlx::Connection;
use std::sync::Arc;
use std::time::Instant;
use vigil::probe::outcome::Outcome;
use vigil::sample::Sample;
use vigil::store::postgres::PgStore;
use vigil::store::{self, Store};
use vigil::target::Target;

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
            let t = Target {
                provider: providers[i % providers.len()].into(),
                model: format!("meta-llama/llama-3-70b-instruct-v{}", i % 10),
                route: routes[i % routes.len()].map(Into::into),
                region: if i % 2 == 0 { "eu-west-1".into() } else { "us-east-1".into() },
            };
            let started = start + Duration::milliseconds(i as i64 * 600);
            let mut s = Sample::new(t, started - Duration::milliseconds(2), started);
            let jitter = (i % 97) as f64;
            s.dns_ms = Some(1.0 + jitter / 50.0);
            s.connect_ms = Some(10.0 + jitter / 10.0);
            s.tls_ms = Some(25.0 + jitter / 5.0);
            s.ttfb_ms = Some(180.0 + jitter);
            s.ttft_ms = Some(240.0 + jitter * 2.0);
            s.total_ms = Some(480.0 + jitter * 3.0);
            s.input_tokens = Some(21);
            s.output_tokens = Some(16);
            s.tokens_per_s = Some(60.0 + jitter / 10.0);
            s.status = Some(200);
            s.adherence_ok = Some(true);
            s.cost_usd = Some(0.000_021);
            s.request_id = Some(format!("gen-{:016x}", i * 7919));
            if i % 100 == 0 {
                s.outcome = Outcome::RateLimited;
                s.status = Some(429);
                s.error = Some("Rate limit reached for requests".into());
                s.retry_after_s = Some(2.0);
            }
            s
        })
        .collect()
}

/// Inserts in batches one after another, as the writer does; returns samples per second.
async fn insert_rate(store: &dyn Store, data: &[Sample], batch: usize) -> f64 {
    // Warm up connections and today's partitions outside the timing.
    let warm = data.len().min(batch);
    store.insert_samples(&data[..warm]).await.expect("warm-up insert");
    let began = Instant::now();
    let mut inserted = 0;
    for chunk in data[warm..].chunks(batch) {
        inserted += store.insert_samples(chunk).await.expect("insert");
    }
    let secs = began.elapsed().as_secs_f64();
    assert_eq!(inserted as usize, data.len() - warm, "every sample inserted once");
    inserted as f64 / secs
}

async fn bench_postgres(data: &[Sample], batch: usize) -> Result<(f64, f64), String> {
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
        let pg = Arc::new(PgStore::open(url.as_str(), store::ACQUIRE_TIMEOUT).map_err(|e| e.to_string())?);
        pg.migrate().await.map_err(|e| e.to_string())?;
        let rate = insert_rate(pg.as_ref(), data, batch).await;
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
        Ok::<_, String>((rate, bytes as f64 / count as f64))
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
    sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)").execute(s.pool()).await.map_err(|e| e.to_string())?;
    let count = s.count_samples(&Default::default()).await.map_err(|e| e.to_string())?;
    s.pool().close().await;
    let bytes = std::fs::metadata(&path).map_err(|e| e.to_string())?.len();
    Ok((rate, bytes as f64 / count as f64))
}

#[tokio::main]
async fn main() {
    // `cargo bench` passes `--bench`; any other argument (a filter) is ignored.
    let n = env_usize("VIGIL_BENCH_SAMPLES", 100_000);
    let batch = env_usize("VIGIL_BENCH_BATCH", 500);
    let data = samples(n);
    println!("store_insert: {n} samples per backend, batches of {batch}, one writer");
    println!("{:<12} {:>16} {:>18}", "backend", "samples/s", "bytes/sample");
    for (label, result) in
        [("postgresql", bench_postgres(&data, batch).await), ("sqlite", bench_sqlite(&data, batch).await)]
    {
        match result {
            Ok((rate, bytes)) => println!("{label:<12} {rate:>16.0} {bytes:>18.1}"),
            Err(e) => println!("{label:<12} skipped: {e}"),
        }
    }
}
