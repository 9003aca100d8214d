//! Storage that vanishes is noticed: the real `vigil` binary on a real SQLite file that is
//! deleted, or replaced by something that is not a database, while it runs — `/readyz` says so
//! within one interval, samples are spooled instead of going into the unlinked inode, and the
//! file now at the path is opened again (a deleted one recreated, the spool replayed into it);
//! and a file found corrupt at open takes no write at all.

use crate::support::process::{free_port, Daemon};
use crate::support::{fixture, settle};

use sha2::{Digest, Sha256};
use std::path::Path;
use std::time::Duration;
use vigil::io::store::SampleQuery;
use vigil::run::demo::standin::{Script, StandIn};

async fn steady_provider() -> StandIn {
    let body = fixture("openai-chat-stream-usage.sse");
    StandIn::start(move |_| Script::sse(&body, Duration::from_millis(1))).await.expect("stand-in")
}

async fn start(data: &Path, base: &str) -> Daemon {
    let port = free_port();
    Daemon::start_in(
        data,
        &crate::support::daemon::steady_toml(
            "vanish-1",
            &format!("sqlite://{}/vigil.db", data.display()),
            data,
            port,
            base,
            &["m1"],
        ),
        port,
        &[],
    )
    .await
}

/// Samples stored in the SQLite file at `data/vigil.db` (opened and closed again).
async fn stored(data: &Path) -> i64 {
    let url = format!("sqlite://{}/vigil.db", data.display());
    let store = vigil::io::store::open(&url).await.expect("open");
    store.count_samples(&SampleQuery::default()).await.unwrap_or(0)
}

fn digest(path: &Path) -> Vec<u8> {
    Sha256::digest(std::fs::read(path).expect("read")).to_vec()
}

/// The value of `vigil_samples_spooled` in an exposition (labels or not).
fn spooled(metrics: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("vigil_samples_spooled ") || l.starts_with("vigil_samples_spooled{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_file_deleted_under_the_daemon_is_noticed_and_made_again_with_every_sample_since() {
    let provider = steady_provider().await;
    let data = tempfile::tempdir().expect("tempdir");
    let vigil = start(data.path(), &provider.base_url()).await;
    vigil.eventually("ready", |r| r.is_some_and(|(s, _)| *s == 200), "/readyz").await;
    settle(Duration::from_secs(10), || stored(data.path()), |n| *n >= 3).await;

    let answered_before = provider.requests().len();
    std::fs::remove_file(data.path().join("vigil.db")).expect("delete the database file");
    let (_, why) = vigil
        .eventually(
            "readyz names the deleted file",
            |r| r.is_some_and(|(s, b)| *s == 503 && b.contains("storage file deleted")),
            "/readyz",
        )
        .await;
    assert!(why.contains("vigil.db"), "{why}");
    // Opened again (a new file), the spool replayed into it: ready again.
    vigil.eventually("ready again", |r| r.is_some_and(|(s, _)| *s == 200), "/readyz").await;
    let log = vigil.log_until(Duration::from_secs(10), "replayed spooled samples").await;
    assert!(log.contains("opened again"), "{log}");
    assert!(log.contains("WAL of the vanished database set aside"), "{log}");
    let (_, clean, log) = vigil.stop().await;
    assert!(clean, "{log}");

    // Every probe answered after the delete is in the new file; at most the batch being written
    // at that moment went into the unlinked one.
    let answered_after = (provider.requests().len() - answered_before) as i64;
    let in_new_file = stored(data.path()).await;
    println!("answered after the delete: {answered_after}; in the new file: {in_new_file}");
    assert!(in_new_file >= answered_after - 1, "{in_new_file} of {answered_after} stored; log:\n{log}");
    assert!(
        in_new_file <= answered_after + 1,
        "nothing stored twice or from before: {in_new_file} of {answered_after}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_file_replaced_by_one_that_is_not_a_database_takes_no_write_and_stays_unready() {
    let provider = steady_provider().await;
    let data = tempfile::tempdir().expect("tempdir");
    let vigil = start(data.path(), &provider.base_url()).await;
    vigil.eventually("ready", |r| r.is_some_and(|(s, _)| *s == 200), "/readyz").await;
    settle(Duration::from_secs(10), || stored(data.path()), |n| *n >= 2).await;

    // Another file renamed over the path, as a careless restore would.
    let junk = data.path().join("restored.db");
    std::fs::write(&junk, vec![0xA5u8; 64 * 1024]).expect("junk");
    std::fs::rename(&junk, data.path().join("vigil.db")).expect("replace");
    let file = data.path().join("vigil.db");
    let before = digest(&file);
    let (_, why) = vigil
        .eventually(
            "readyz names the replaced file",
            |r| r.is_some_and(|(s, b)| *s == 503 && b.contains("storage file replaced")),
            "/readyz",
        )
        .await;
    assert!(why.contains("vigil.db"), "{why}");
    // Opened again: it is no database, so it stays unready, as corrupt.
    let (_, why) = vigil
        .eventually(
            "readyz says corrupt",
            |r| r.is_some_and(|(s, b)| *s == 503 && b.contains("storage corrupt: ")),
            "/readyz",
        )
        .await;
    assert!(why.contains("not a database"), "{why}");
    let (_, metrics) = vigil.get("/metrics").await.expect("metrics");
    let held = settle(
        Duration::from_secs(10),
        || async { vigil.get("/metrics").await.map(|m| spooled(&m.1)).unwrap_or(0.0) },
        |n| *n >= 2.0,
    )
    .await;
    assert!(held >= 2.0, "samples are spooled: {metrics}");
    // A write would show within two more probe intervals.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(digest(&file), before, "nothing written into the file put in place");
    let (status, _) = vigil.get("/readyz").await.expect("readyz");
    assert_eq!(status, 503, "not ready while nothing can be recorded");
    let (_, clean, log) = vigil.stop().await;
    assert!(clean, "{log}");
    assert_eq!(digest(&file), before, "nor at the stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_found_corrupt_at_open_takes_no_write_and_says_storage_corrupt() {
    let data = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}/vigil.db", data.path().display());
    // A real database with data, checkpointed and closed, then damaged in the middle.
    {
        let store =
            vigil::io::store::sqlite::SqliteStore::open(&url, vigil::io::store::ACQUIRE_TIMEOUT).await.expect("open");
        vigil::io::store::AdminStore::migrate(&store).await.expect("migrate");
        let t = crate::support::store::target("openrouter", "meta-llama/llama-3-70b-instruct", None, "eu");
        let start = chrono::Utc::now();
        let samples: Vec<_> = (0..3_000)
            .map(|i| {
                let mut s = crate::support::store::full_sample(t.clone(), start + chrono::Duration::microseconds(i));
                s.error = Some(format!("upstream said no {}", "·".repeat(100)));
                s
            })
            .collect();
        vigil::io::store::SampleStore::insert_samples(&store, &samples).await.expect("insert");
        sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)").execute(&store.pool()).await.expect("checkpoint");
        store.pool().close().await;
    }
    let file = data.path().join("vigil.db");
    let len = std::fs::metadata(&file).expect("size").len();
    let page = 4096;
    let middle = (len / 2 / page) * page;
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut f = std::fs::OpenOptions::new().write(true).open(&file).expect("open");
        f.seek(SeekFrom::Start(middle)).expect("seek");
        f.write_all(&(0..3 * page).map(|i| (i * 7 % 251) as u8).collect::<Vec<u8>>()).expect("damage");
        f.sync_all().expect("sync");
    }
    let before = digest(&file);

    let provider = steady_provider().await;
    let vigil = start(data.path(), &provider.base_url()).await;
    let (_, why) = vigil
        .eventually(
            "readyz says corrupt",
            |r| r.is_some_and(|(s, b)| *s == 503 && b.contains("storage corrupt: ")),
            "/readyz",
        )
        .await;
    assert!(why.contains("quick_check"), "{why}");
    assert!(!why.contains("storage unreachable"), "a corrupt file is not unreachable: {why}");
    let held = settle(
        Duration::from_secs(10),
        || async { vigil.get("/metrics").await.map(|m| spooled(&m.1)).unwrap_or(0.0) },
        |n| *n >= 3.0,
    )
    .await;
    assert!(held >= 3.0, "samples go to the spool");
    let (_, clean, log) = vigil.stop().await;
    assert!(clean, "{log}");
    assert_eq!(digest(&file), before, "no write went into the corrupt file");
    let wal = data.path().join("vigil.db-wal");
    assert!(std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0) == 0, "nor into its WAL");
}
