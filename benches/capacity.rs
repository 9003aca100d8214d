//! Fleet capacity of one PostgreSQL (docs/DEPLOYMENT.md "Capacity"): a load generator that
//! writes like N regions × M targets probed every 60 s through vigil's own store code into a
//! throw-away database, then measures what such a fleet asks of it: ingest headroom, storage per
//! day, partition maintenance, and the reads every instance makes each interval (the other
//! regions' latest samples and published status, a replica's read of its peers' samples), the
//! incident leases and sightings, and the members' heartbeats.
//!
//! `cargo bench --bench capacity` (PostgreSQL from `VIGIL_TEST_DATABASE_URL`, default
//! `postgres://postgres@127.0.0.1:5432/postgres`). Optional env: `VIGIL_BENCH_REGIONS` (20),
//! `VIGIL_BENCH_TARGETS` (10000 per region), `VIGIL_BENCH_MINUTES` (3 simulated minutes of
//! samples), `VIGIL_BENCH_INCIDENTS` (1000).

use chrono::{DateTime, Duration, Utc};
use sqlx::Connection;
use std::sync::Arc;
use std::time::Instant;
use vigil::io::store::postgres::PgStore;
use vigil::io::store::{self, AdminStore, SampleQuery, SampleStore, Store};
use vigil::vocab::breaker::State;
use vigil::vocab::health::{Health, HealthState};
use vigil::vocab::member::Member;
use vigil::vocab::records::TargetStatus;
use vigil::vocab::sample::Sample;
use vigil::vocab::target::Target;

#[path = "support/stored_sample.rs"]
mod stored_sample;
use stored_sample::stored_sample;

/// Samples per insert, as the writer batches them (`storage.batch_size`'s default).
const BATCH: usize = 5000;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn region(r: usize) -> String {
    format!("region-{r:02}")
}

fn target(region: &str, i: usize) -> Target {
    let providers = ["openrouter", "openai", "anthropic", "groq", "together", "deepinfra", "gemini", "vllm"];
    let routes = [Some("DeepInfra"), Some("Together"), None, Some("Lepton")];
    Target::new(
        providers[i % providers.len()].into(),
        format!("vendor/model-{i:05}").into(),
        routes[i % routes.len()].map(Into::into),
        region.into(),
    )
}

/// Milliseconds since `t`.
fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1000.0
}

struct Fleet {
    regions: usize,
    targets: usize,
    minutes: usize,
}

/// Every region writes its minute of samples at once, each in its own task and batches, as the
/// fleet's writers would; returns the samples per second the database took.
async fn ingest(store: &Arc<dyn Store>, fleet: &Fleet, start: DateTime<Utc>) -> f64 {
    let began = Instant::now();
    let mut rows = 0usize;
    for minute in 0..fleet.minutes {
        let mut writers = tokio::task::JoinSet::new();
        for r in 0..fleet.regions {
            let store = store.clone();
            let n = fleet.targets;
            writers.spawn(async move {
                let reg = region(r);
                let at = start + Duration::minutes(minute as i64);
                let batch: Vec<Sample> = (0..n)
                    .map(|i| stored_sample(target(&reg, i), at + Duration::milliseconds((i * 60_000 / n) as i64), i))
                    .collect();
                for chunk in batch.chunks(BATCH) {
                    store.insert_samples(chunk).await.expect("insert");
                }
                n
            });
        }
        while let Some(n) = writers.join_next().await {
            rows += n.expect("writer");
        }
        println!("  minute {:>2}: {rows} samples in {:.1} s", minute + 1, began.elapsed().as_secs_f64());
    }
    rows as f64 / began.elapsed().as_secs_f64()
}

/// Bytes of every `samples` partition with its indexes, and the rows in them.
async fn sample_bytes(pg: &PgStore) -> (f64, i64) {
    sqlx::query("VACUUM ANALYZE samples").execute(pg.pool()).await.expect("vacuum");
    let bytes: i64 = sqlx::query_scalar(
        "SELECT COALESCE(sum(pg_total_relation_size(i.inhrelid)), 0)::bigint FROM pg_inherits i \
         WHERE i.inhparent = 'samples'::regclass",
    )
    .fetch_one(pg.pool())
    .await
    .expect("size");
    let rows = pg.count_samples(&SampleQuery::default()).await.expect("count");
    (bytes as f64, rows)
}

/// Median and worst of `n` timed runs of `f`.
async fn timed<F, Fut, T>(n: usize, mut f: F) -> (f64, f64, T)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let mut times = Vec::new();
    let mut last = None;
    for _ in 0..n {
        let t = Instant::now();
        last = Some(f().await);
        times.push(ms(t));
    }
    times.sort_by(f64::total_cmp);
    (times[times.len() / 2], times[times.len() - 1], last.expect("one run"))
}

fn status(t: Target, now: DateTime<Utc>) -> TargetStatus {
    TargetStatus {
        target: t,
        health: Health { state: HealthState::Ok, ..Health::default() },
        over_latency: false,
        breaker: State::Closed,
        updated_at: now,
    }
}

async fn run(store: Arc<dyn Store>, pg: &PgStore, fleet: Fleet) {
    let per_minute = fleet.regions * fleet.targets;
    println!(
        "fleet: {} regions x {} targets every 60 s = {per_minute} samples a minute ({:.0}/s); {} minutes simulated",
        fleet.regions,
        fleet.targets,
        per_minute as f64 / 60.0,
        fleet.minutes
    );
    let now = Utc::now();
    let start = now - Duration::minutes(fleet.minutes as i64);
    let rate = ingest(&store, &fleet, start).await;
    let needed = per_minute as f64 / 60.0;
    let (bytes, rows) = sample_bytes(pg).await;
    let per_row = bytes / rows as f64;
    let per_day = per_row * per_minute as f64 * 1440.0;

    // What every instance reads each interval.
    let here = region(0);
    let since = now - Duration::minutes(3);
    let (elsewhere_med, elsewhere_max, got) =
        timed(5, || vigil::io::store::link::latest_elsewhere(store.as_ref(), &here, since)).await;
    let elsewhere_rows = got.expect("elsewhere").len();
    for r in 0..fleet.regions {
        let rows: Vec<TargetStatus> = (0..fleet.targets).map(|i| status(target(&region(r), i), now)).collect();
        store.publish_target_status(&rows).await.expect("publish");
    }
    let (publish_med, _, ()) = timed(3, || async {
        let rows: Vec<TargetStatus> = (0..fleet.targets).map(|i| status(target(&here, i), Utc::now())).collect();
        store.publish_target_status(&rows).await.expect("publish");
    })
    .await;
    let (status_med, status_max, statuses) =
        timed(5, || store.target_statuses(now - Duration::minutes(3), Some(&here))).await;
    let status_rows = statuses.expect("statuses").len();
    // A replica's read of its region's samples over the peer window (timeout + batch + beats, ~40 s at 60 s).
    let peer_since = now - Duration::seconds(40);
    let q = SampleQuery { region: Some(here.clone()), since: Some(peer_since), ..SampleQuery::default() };
    let (peers_med, peers_max, peers) = timed(5, || store.samples(&q)).await;
    let peer_rows = peers.expect("peers").len();

    // Incident leases and sightings: every region sees every incident.
    let incidents = env_usize("VIGIL_BENCH_INCIDENTS", 1000);
    let t = Instant::now();
    for k in 0..incidents {
        let key = format!("vigil:openai:vendor/model-{k:05}:");
        for r in 0..fleet.regions {
            let reg = region(r);
            store.record_sighting(&key, &reg, true, now).await.expect("sighting");
            store.claim_incident(&key, &reg, now, now + Duration::seconds(75)).await.expect("claim");
        }
    }
    let lease_ops = incidents * fleet.regions * 2;
    let lease_ms = ms(t) / lease_ops as f64;

    // Members: one heartbeat and one read per member and beat.
    let t = Instant::now();
    for r in 0..fleet.regions {
        for n in 0..2 {
            let m = Member {
                region: region(r),
                id: format!("m{n}"),
                host: "bench".into(),
                started_at: now,
                heartbeat_at: now,
                active_from: now,
            };
            store.beat(&m, now - Duration::days(1)).await.expect("beat");
            store.members(&m.region).await.expect("members");
        }
    }
    let beat_ms = ms(t) / (fleet.regions * 2) as f64;

    // Partition maintenance: tomorrow's partition made by the first insert of the day, and the
    // drop of every day just written (what retention does to a day that aged out).
    let t = Instant::now();
    store.insert_samples(&[stored_sample(target(&here, 0), now + Duration::days(1), 1)]).await.expect("tomorrow");
    let create_ms = ms(t);
    let t = Instant::now();
    let dropped = store.purge_samples_before(now + Duration::days(1)).await.expect("purge");
    let drop_ms = ms(t);

    println!();
    println!("what                                           figure");
    println!("ingest, all regions writing at once           {rate:>10.0} samples/s ({:.1}x the {needed:.0}/s the fleet needs)", rate / needed);
    println!("storage per sample (table + indexes)          {per_row:>10.0} bytes");
    println!("storage per day                               {:>10.2} GiB", per_day / f64::from(1u32 << 30));
    println!("other regions' latest samples (per instance)  {elsewhere_med:>10.1} ms median, {elsewhere_max:.1} ms worst, {elsewhere_rows} targets from the window's rows");
    println!("publish this region's status                  {publish_med:>10.1} ms for {} rows", fleet.targets);
    println!("other regions' published status               {status_med:>10.1} ms median, {status_max:.1} ms worst, {status_rows} rows");
    println!("a replica's read of its peers' samples (40 s) {peers_med:>10.1} ms median, {peers_max:.1} ms worst, {peer_rows} rows");
    println!("incident lease or sighting                    {lease_ms:>10.2} ms per call ({lease_ops} calls)");
    println!("member heartbeat + roster read                {beat_ms:>10.2} ms per member");
    println!("first insert of a new day (makes a partition) {create_ms:>10.1} ms");
    println!("drop of the day partitions written            {drop_ms:>10.1} ms ({dropped} samples)");
}

#[tokio::main]
async fn main() {
    let fleet = Fleet {
        regions: env_usize("VIGIL_BENCH_REGIONS", 20),
        targets: env_usize("VIGIL_BENCH_TARGETS", 10_000),
        minutes: env_usize("VIGIL_BENCH_MINUTES", 3),
    };
    let server = std::env::var("VIGIL_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let Ok(mut admin) = sqlx::PgConnection::connect(&server).await else {
        println!("SKIPPED: PostgreSQL unreachable at VIGIL_TEST_DATABASE_URL");
        return;
    };
    let version: String = sqlx::query_scalar("SHOW server_version").fetch_one(&mut admin).await.unwrap_or_default();
    println!("PostgreSQL {version}");
    let name = format!("vigil_capacity_{}", uuid::Uuid::new_v4().simple());
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}"))).execute(&mut admin).await.expect("create");
    let mut url = url::Url::parse(&server).expect("url");
    url.set_path(&format!("/{name}"));
    let pg = Arc::new(PgStore::open(url.as_str(), store::ACQUIRE_TIMEOUT).expect("open"));
    pg.migrate().await.expect("migrate");
    let store: Arc<dyn Store> = pg.clone();
    run(store, &pg, fleet).await;
    pg.pool().close().await;
    let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")))
        .execute(&mut admin)
        .await;
}
