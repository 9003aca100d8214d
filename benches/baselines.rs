//! Time and memory to refresh 7-day baselines for 1,000 and 10,000 targets from hourly rollups
//! (3 metrics and 2 counts × 168 hours each), beside the naive way: `percentile_cont` over raw samples
//! in PostgreSQL.
//!
//! Run with `cargo bench --bench baselines`. PostgreSQL is read from `VIGIL_TEST_DATABASE_URL`
//! (default `postgres://postgres@127.0.0.1:5432/postgres`); the naive side runs in a throw-away
//! database that is dropped at the end. Set `VIGIL_BENCH_SKIP_PG=1` to skip it, and
//! `VIGIL_BENCH_TARGETS=1000,10000` to choose the sizes.

use chrono::{DateTime, Duration, TimeZone, Utc};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use sqlx::{Connection, Executor, PgConnection, Row};
use std::sync::atomic::Ordering;
use std::time::Instant;
use vigil::config::BaselineConfig;
use vigil::decide::baseline::{Baselines, Metric};
use vigil::vocab::records::Rollup;
use vigil::vocab::sample::Sample;
use vigil::vocab::target::Target;

#[path = "support/counting_alloc.rs"]
mod counting_alloc;

use counting_alloc::{Counting, ALLOCS, LIVE, PEAK};

#[path = "support/week_of_rollups.rs"]
mod week_of_rollups;

use week_of_rollups::{hour_rollups, normal, rollup_pool, POOL};

#[global_allocator]
static GLOBAL: Counting = Counting;

const HOURS: i64 = 168;

fn mb(bytes: f64) -> String {
    format!("{:.1} MB", bytes / 1e6)
}

fn rss_bytes() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb * 1024.0)
}

/// CPU time this thread has run, from the scheduler (wall time alone misleads on a busy machine).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    stat.split_whitespace().next().and_then(|ns| ns.parse::<f64>().ok()).map_or(0.0, |ns| ns / 1e9)
}

/// What one step cost: wall and CPU time, RSS growth, peak heap above the start, allocations.
struct Cost {
    seconds: f64,
    cpu: f64,
    rss_delta: f64,
    heap_peak_delta: f64,
    allocs: u64,
}

fn measure<T>(f: impl FnOnce() -> T) -> (T, Cost) {
    let rss0 = rss_bytes();
    let live0 = counting_alloc::reset_peak();
    let allocs0 = ALLOCS.load(Ordering::Relaxed);
    let cpu0 = cpu_seconds();
    let start = Instant::now();
    let out = f();
    let seconds = start.elapsed().as_secs_f64();
    let cost = Cost {
        seconds,
        cpu: cpu_seconds() - cpu0,
        rss_delta: rss_bytes() - rss0,
        heap_peak_delta: (PEAK.load(Ordering::Relaxed) - live0) as f64,
        allocs: ALLOCS.load(Ordering::Relaxed) - allocs0,
    };
    (out, cost)
}

fn print_cost(what: &str, c: &Cost) {
    println!(
        "  {what:<44} {:>8.3} s wall {:>8.3} s CPU   RSS +{:>9}   heap peak +{:>9}   {:>9} allocations",
        c.seconds,
        c.cpu,
        mb(c.rss_delta),
        mb(c.heap_peak_delta),
        c.allocs
    );
}

fn target(i: usize) -> Target {
    Target::new(
        format!("provider-{}", i % 8).into(),
        format!("model-{}", i / 8).into(),
        Some(format!("host-{}", i % 5).into()),
        "eu-west-1".into(),
    )
}

fn config() -> BaselineConfig {
    BaselineConfig {
        window: std::time::Duration::from_secs(7 * 86_400),
        failover_factor: 2.0,
        min_samples_p50: 30,
        min_samples_p95: 300,
        min_samples_p99: 2000,
        adopt_after: None,
    }
}

async fn bench_rollups(n: usize, pool: &[[Vec<u8>; 3]], now: DateTime<Utc>, rng: &mut StdRng) {
    println!("\n{n} targets × (3 histograms + 2 counts) × {HOURS} hourly rollups ({} rollups)", n * 5 * HOURS as usize);
    let first_hour = now - Duration::hours(HOURS - 1);
    let mut baselines = Baselines::new(&config());
    // Which pool entry each target's oldest hour used: the hour boundary reads it back.
    let mut oldest_picks = vec![0usize; n];
    let (loaded, load_cost) = measure(|| {
        let mut loaded = 0;
        // An hour at a time, as io::store::load_window reads the store.
        for h in 0..HOURS {
            let mut rollups = Vec::with_capacity(n * 5);
            for (i, oldest) in oldest_picks.iter_mut().enumerate() {
                let p = rng.random_range(0..POOL);
                if h == 0 {
                    *oldest = p;
                }
                hour_rollups(&target(i), first_hour + Duration::hours(h), &pool[p], &mut rollups);
            }
            loaded += baselines.load(&rollups, now).loaded;
        }
        loaded
    });
    assert_eq!(loaded, n * 5 * HOURS as usize);
    print_cost("load rollups hour by hour (decode V2, fold)", &load_cost);
    println!("  state held after load: heap {} (RSS {})", mb(LIVE.load(Ordering::Relaxed) as f64), mb(rss_bytes()));

    let (_, cold) = measure(|| baselines.refresh(now));
    print_cost("first refresh (percentiles of every series)", &cold);

    let targets: Vec<Target> = (0..n).map(target).collect();
    let round = |baselines: &mut Baselines, at: DateTime<Utc>, rng: &mut StdRng| {
        for t in &targets {
            let mut s = Sample::new(t.clone(), at, at);
            s.ttfb_ms = Some(200.0 * (0.3 * normal(rng)).exp());
            s.ttft_ms = Some(400.0 * (0.4 * normal(rng)).exp());
            s.tokens_per_s = Some(60.0 * (0.2 * normal(rng)).exp());
            baselines.record(&s);
        }
    };
    for r in 1..=3 {
        let at = now + Duration::seconds(10 * r);
        round(&mut baselines, at, rng);
        let (_, c) = measure(|| baselines.refresh(at));
        print_cost(&format!("round {r}: refresh after {n} new samples"), &c);
    }
    let (dirty, c) = measure(|| baselines.dirty_rollups());
    print_cost(&format!("persist: serialize {} dirty rollups", dirty.len()), &c);
    baselines.mark_persisted(&dirty);

    let next_hour = now + Duration::hours(1);
    let mut expiring = Vec::with_capacity(n * 5);
    for (i, p) in oldest_picks.iter().enumerate() {
        hour_rollups(&target(i), first_hour, &pool[*p], &mut expiring);
    }
    let store_read = read_back_one_hour(&expiring, first_hour).await;
    round(&mut baselines, next_hour, rng);
    let (_, c) = measure(|| {
        let (_, until) = baselines.expiring(next_hour).expect("the oldest hour expires");
        baselines.expire(&expiring, until);
        baselines.refresh(next_hour)
    });
    print_cost("hour boundary: fold 1 hour in, subtract 1 out", &c);
    if let Some(secs) = store_read {
        println!("  + reading that hour back from SQLite ({} rollups): {secs:.3} s wall", expiring.len());
    }
    let sample = baselines.get(&targets[0], Metric::Ttft, next_hour);
    println!("  e.g. {} ttft: {:?}", targets[0], sample);
    drop((dirty, expiring, targets));
    println!(
        "  state held at the end (baselines only, bench inputs dropped): heap {} (process RSS {})",
        mb(LIVE.load(Ordering::Relaxed) as f64),
        mb(rss_bytes())
    );
}

/// Stores one hour of rollups in a throw-away SQLite file and times reading it back, as
/// `Monitor::expire` does at each hour boundary.
async fn read_back_one_hour(rollups: &[Rollup], hour: DateTime<Utc>) -> Option<f64> {
    let dir = tempfile::tempdir().ok()?;
    let store = vigil::io::store::open(&format!("sqlite://{}", dir.path().join("bench.db").display())).await.ok()?;
    store.migrate().await.ok()?;
    store.upsert_rollups(rollups).await.ok()?;
    let start = Instant::now();
    let back = store.rollups_between(None, hour, Some(hour + Duration::hours(1))).await.ok()?;
    let secs = start.elapsed().as_secs_f64();
    (back.len() == rollups.len()).then_some(secs)
}

fn database_url() -> String {
    std::env::var("VIGIL_TEST_DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

async fn naive(n_list: &[usize]) -> Result<(), sqlx::Error> {
    let admin_url = database_url();
    let db = format!("vigil_bench_{}", std::process::id());
    let mut admin = PgConnection::connect(&admin_url).await?;
    admin.execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {db}"))).await?;
    let mut url = url::Url::parse(&admin_url).map_err(|e| sqlx::Error::Configuration(e.into()))?;
    url.set_path(&db);
    let result = naive_in(url.as_str(), n_list).await;
    admin.execute(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"))).await?;
    result
}

async fn naive_in(url: &str, n_list: &[usize]) -> Result<(), sqlx::Error> {
    let mut conn = PgConnection::connect(url).await?;
    let mut previous: Option<(usize, f64)> = None;
    for &n in n_list {
        let rows = n * 7 * 1440;
        println!("\nnaive: PostgreSQL percentile_cont over {rows} raw samples ({n} targets × 10,080)");
        if let Some((pn, secs)) = previous {
            let estimate = secs * n as f64 / pn as f64;
            if estimate > 150.0 {
                println!(
                    "  skipped: generating and querying {rows} rows would take about {estimate:.0} s here \
                     (scaled from {pn} targets: {secs:.1} s), over the couple of minutes allowed"
                );
                continue;
            }
        }
        conn.execute("DROP TABLE IF EXISTS samples").await?;
        conn.execute(
            "CREATE UNLOGGED TABLE samples (target_id int, started_at timestamptz, \
             ttfb_ms float8, ttft_ms float8, tokens_per_s float8)",
        )
        .await?;
        let start = Instant::now();
        let insert = format!(
            "INSERT INTO samples \
             SELECT t, now() - m * interval '1 minute', \
                    exp(ln(200) + 0.3 * sqrt(-2 * ln(1 - random())) * cos(2 * pi() * random())), \
                    exp(ln(400) + 0.4 * sqrt(-2 * ln(1 - random())) * cos(2 * pi() * random())), \
                    exp(ln(60) + 0.2 * sqrt(-2 * ln(1 - random())) * cos(2 * pi() * random())) \
             FROM generate_series(1, {n}) t, generate_series(0, 10079) m"
        );
        conn.execute(sqlx::AssertSqlSafe(insert)).await?;
        conn.execute("ANALYZE samples").await?;
        let generated = start.elapsed().as_secs_f64();
        println!("  generate {rows} rows with generate_series: {generated:.1} s");
        let query = "SELECT target_id, count(*), \
             percentile_cont(ARRAY[0.5,0.95,0.99]) WITHIN GROUP (ORDER BY ttfb_ms), \
             percentile_cont(ARRAY[0.5,0.95,0.99]) WITHIN GROUP (ORDER BY ttft_ms), \
             percentile_cont(ARRAY[0.5,0.95,0.99]) WITHIN GROUP (ORDER BY tokens_per_s) \
             FROM samples WHERE started_at >= now() - interval '7 days' GROUP BY target_id";
        let mut total = 0.0;
        for run in 1..=2 {
            let start = Instant::now();
            let rows_back = sqlx::query(query).fetch_all(&mut conn).await?;
            let secs = start.elapsed().as_secs_f64();
            total += secs;
            let p: Vec<f64> = rows_back.first().map(|r| r.get::<Vec<f64>, _>(3)).unwrap_or_default();
            println!(
                "  query run {run} (3 metrics × P50/P95/P99, {} targets): {secs:.3} s   e.g. ttft {p:.1?}",
                rows_back.len()
            );
        }
        previous = Some((n, generated + total));
        conn.execute("DROP TABLE samples").await?;
    }
    Ok(())
}

fn main() {
    let mut rng = StdRng::seed_from_u64(1);
    let now = Utc.with_ymd_and_hms(2026, 11, 30, 12, 30, 0).single().expect("valid time");
    let pool = rollup_pool(&mut rng, [(200.0, 0.3), (400.0, 0.4), (60.0, 0.2)]);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("vigil baselines bench: refresh from hourly HDR rollups (7-day window); load average {}", load.trim());
    let sizes: Vec<usize> = std::env::var("VIGIL_BENCH_TARGETS")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1_000, 10_000]);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
    for &n in &sizes {
        runtime.block_on(bench_rollups(n, &pool, now, &mut rng));
    }
    if std::env::var("VIGIL_BENCH_SKIP_PG").is_ok() {
        println!("\nnaive PostgreSQL side skipped (VIGIL_BENCH_SKIP_PG set)");
        return;
    }
    if let Err(e) = runtime.block_on(naive(&sizes)) {
        println!("\nnaive PostgreSQL side failed: {e}");
    }
}
