//! SQLite on a disk that fills up and empties again (a real tmpfs, mounted by the test; skipped
//! with a message where mounting is not allowed), and SQLite files damaged on purpose.

use crate::support::store as store_support;
use crate::support::until;

use chrono::{DateTime, Duration as ChronoDuration, Utc};
use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use store_support::{full_sample, target};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;
use vigil::io::store::sqlite::SqliteStore;
use vigil::io::store::{self, AdminStore, IntegrityCheck, SampleQuery, SampleStore, Spool, Store, StoreError, Writer};
use vigil::vocab::ready::ReadyCheck;
use vigil::vocab::sample::Sample;

/// Liveness bound for background progress; generous so a loaded machine never flakes.
const PATIENCE: Duration = Duration::from_secs(90);

/// A small tmpfs mounted for one test and unmounted when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// `None` (with the reason printed) where this process may not mount.
    fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output();
        match out {
            Ok(o) if o.status.success() => Some(Tmpfs { dir }),
            Ok(o) => {
                println!("SKIPPED: cannot mount a tmpfs here: {}", String::from_utf8_lossy(&o.stderr).trim());
                None
            }
            Err(e) => {
                println!("SKIPPED: cannot run mount: {e}");
                None
            }
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes a file until the disk is full.
    fn fill(&self) -> PathBuf {
        let path = self.path().join("filler");
        let mut f = std::fs::File::create(&path).expect("filler");
        let block = vec![0x5au8; 16 * 1024];
        while f.write_all(&block).is_ok() {}
        let small = [0u8; 512];
        while f.write_all(&small).is_ok() {}
        let _ = f.sync_all();
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(self.dir.path()).status();
    }
}

/// Sums the `lost` field of every log event: samples the writer says it could not keep.
/// The process-wide count of samples the daemon reported lost (`support::lost_counter`).
fn lost_counter() -> Arc<AtomicU64> {
    crate::support::lost_counter()
}

fn sqlite_url(dir: &Path) -> String {
    format!("sqlite://{}", dir.join("vigil.db").display())
}

/// Samples with a longer error text than most, so the disk fills with fewer of them.
fn bulky(n: usize) -> Vec<Sample> {
    let t = target("openrouter", "meta-llama/llama-3-70b-instruct", Some("DeepInfra"), "eu");
    let start = Utc::now();
    (0..n)
        .map(|i| {
            let mut s = full_sample(t.clone(), start + ChronoDuration::microseconds(i as i64));
            s.error = Some(format!("upstream said no {}", "·".repeat(100)));
            s
        })
        .collect()
}

/// Sends a steady stream of samples to the writer until stopped; returns what it sent.
fn produce(tx: mpsc::Sender<Sample>, stop: CancellationToken) -> tokio::task::JoinHandle<Vec<Sample>> {
    tokio::spawn(async move {
        let mut sent = Vec::new();
        while !stop.is_cancelled() {
            for s in bulky(5) {
                if tx.send(s.clone()).await.is_err() {
                    return sent;
                }
                sent.push(s);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        sent
    })
}

fn fast_writer(store: Arc<dyn Store>, spool: Spool) -> Writer {
    Writer::new(store, spool, 20, Duration::from_millis(20))
        .with_write_timeout(Duration::from_millis(800))
        .with_retry_backoff(Duration::from_millis(50), Duration::from_millis(300))
}

async fn stored_ids(store: &dyn Store) -> (usize, BTreeSet<Uuid>) {
    let rows = store.samples(&SampleQuery::default()).await.expect("read back");
    (rows.len(), rows.into_iter().map(|s| s.id).collect())
}

/// Fills the disk under a running writer, frees it, and returns (sent samples, writer health)
/// once everything sent has been handed over and the spool is empty again.
async fn fill_and_free(disk: &Tmpfs, store: Arc<dyn Store>, spool_dir: &Path) -> Vec<Sample> {
    let writer = fast_writer(store.clone(), Spool::open(spool_dir, 64 << 20).expect("spool"));
    let health = writer.health();
    let (tx, rx) = mpsc::channel(4096);
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(writer.run(rx, shutdown.clone()));
    let stop = CancellationToken::new();
    let producer = produce(tx.clone(), stop.clone());
    until(PATIENCE, "first samples stored", async || health.written() > 0).await;

    let filler = disk.fill();
    until(PATIENCE, "a write failed on the full disk", async || health.ready().is_err()).await;
    let why = health.ready().expect_err("not ready while the disk is full");
    println!("while full: {why}");
    tokio::time::sleep(Duration::from_secs(2)).await;

    std::fs::remove_file(&filler).expect("free the disk");
    let freed = std::time::Instant::now();
    until(PATIENCE, "ready again after the disk was freed", async || {
        health.ready().is_ok() && health.spooled() == 0 && health.held() == 0
    })
    .await;
    println!("recovered {:?} after the disk was freed", freed.elapsed());

    // Ready must hold from here on while writes continue: no flapping.
    let written = health.written();
    for _ in 0..60 {
        assert_eq!(health.ready(), Ok(()), "readiness flapped after recovery");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(health.written() > written, "writes continued after recovery");
    let mut direct = Vec::new();
    for round in 0..10 {
        let batch = bulky(5);
        let n = store.insert_samples(&batch).await.unwrap_or_else(|e| panic!("write {round} after recovery: {e}"));
        assert_eq!(n, 5);
        store.ping().await.expect("ping after recovery");
        // Stored directly; the writer gets them too, and must not store them twice.
        for s in batch {
            tx.send(s.clone()).await.expect("writer running");
            direct.push(s);
        }
    }

    stop.cancel();
    let mut sent = producer.await.expect("producer");
    sent.extend(direct);
    drop(tx);
    shutdown.cancel();
    task.await.expect("writer stopped");
    until(PATIENCE, "spool empty", async || health.spooled() == 0).await;
    sent.sort_by_key(|s| s.id);
    sent.dedup_by_key(|s| s.id);
    sent
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_accepts_writes_again_once_a_full_disk_has_room() {
    let _ = lost_counter();
    let Some(disk) = Tmpfs::mount("16m") else { return };
    let store = store::open(&sqlite_url(disk.path())).await.expect("open");
    store.migrate().await.expect("migrate");
    let spool_dir = tempfile::tempdir().expect("spool dir elsewhere");

    let sent = fill_and_free(&disk, store.clone(), spool_dir.path()).await;

    let (rows, stored) = stored_ids(store.as_ref()).await;
    assert_eq!(rows, stored.len(), "no sample stored twice");
    let want: BTreeSet<Uuid> = sent.iter().map(|s| s.id).collect();
    let missing = want.difference(&stored).count();
    let unexpected = stored.difference(&want).count();
    assert_eq!((missing, unexpected), (0, 0), "every sample sent, spooled while the disk was full, is stored once");
    assert_eq!(store.integrity(), Ok(()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_spool_on_the_same_full_disk_samples_are_held_in_memory_and_all_stored() {
    let lost = lost_counter();
    let Some(disk) = Tmpfs::mount("16m") else { return };
    let store = store::open(&sqlite_url(disk.path())).await.expect("open");
    store.migrate().await.expect("migrate");
    let lost_before = lost.load(Ordering::SeqCst);

    let sent = fill_and_free(&disk, store.clone(), &disk.path().join("spool")).await;

    let (rows, stored) = stored_ids(store.as_ref()).await;
    assert_eq!(rows, stored.len(), "no sample stored twice");
    let want: BTreeSet<Uuid> = sent.iter().map(|s| s.id).collect();
    assert_eq!(stored.difference(&want).count(), 0, "only samples that were sent are stored");
    let reported = lost.load(Ordering::SeqCst) - lost_before;
    println!("sent {}, stored {}, reported lost {reported}", want.len(), stored.len());
    assert_eq!(reported, 0, "neither the store nor the spool took them for a while; memory did");
    assert_eq!(stored, want, "every sample sent is stored once the disk has room");
}

/// Writes some data, checkpoints it into the main file and closes it.
async fn database_with_data(dir: &Path) -> PathBuf {
    let url = sqlite_url(dir);
    let store = SqliteStore::open(&url, store::ACQUIRE_TIMEOUT).await.expect("open");
    store.migrate().await.expect("migrate");
    store.insert_samples(&bulky(3_000)).await.expect("insert");
    sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)").execute(&store.pool()).await.expect("checkpoint");
    store.pool().close().await;
    dir.join("vigil.db")
}

fn overwrite(path: &Path, offset: u64, bytes: &[u8]) {
    use std::io::{Seek, SeekFrom};
    let mut f = std::fs::OpenOptions::new().write(true).open(path).expect("open db file");
    f.seek(SeekFrom::Start(offset)).expect("seek");
    f.write_all(bytes).expect("overwrite");
    f.sync_all().expect("sync");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_overwritten_in_the_middle_are_found_at_open_before_any_write_and_reported_by_readyz() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = database_with_data(dir.path()).await;
    let len = std::fs::metadata(&file).expect("size").len();
    assert!(len > 200 * 1024, "enough pages to damage some in the middle ({len} bytes)");

    let sound = store::open(&sqlite_url(dir.path())).await.expect("open sound file");
    assert_eq!(sound.integrity(), Ok(()));
    assert_eq!(IntegrityCheck(sound.clone()).ready(), Ok(()));
    drop(sound);

    // Keep the header (page 1); scribble over three pages half way through the file.
    let page = 4096;
    let middle = (len / 2 / page) * page;
    let junk: Vec<u8> = (0..3 * page).map(|i| (i * 7 % 251) as u8).collect();
    overwrite(&file, middle, &junk);

    let store = store::open(&sqlite_url(dir.path())).await.expect("a damaged file still opens");
    // The check runs beside the start; a write waits for its verdict and is refused, so
    // nothing goes into the damaged file (the writer spools it).
    match store.insert_samples(&bulky(10)).await {
        Err(StoreError::Unavailable(e)) => assert!(e.contains("storage corrupt: ") && e.contains("quick_check"), "{e}"),
        other => panic!("a write into a file found damaged must be refused as unavailable, got {other:?}"),
    }
    let why = store.integrity().expect_err("quick_check finds the damage");
    assert!(why.contains("quick_check"), "{why}");
    let ready = IntegrityCheck(store.clone()).ready().expect_err("not ready");
    assert!(ready.starts_with("storage corrupt: "), "{ready}");
    println!("{ready}");

    drop(store);

    // Opened without the check, the first query that meets the damage reports it.
    let unchecked = SqliteStore::open_checked(&sqlite_url(dir.path()), store::ACQUIRE_TIMEOUT, Duration::ZERO)
        .await
        .expect("opens");
    assert_eq!(unchecked.integrity(), Ok(()), "not known yet");
    // Reading the damaged table fails as Unavailable (the writer spools), never as success.
    match unchecked.samples(&SampleQuery::default()).await {
        Err(StoreError::Unavailable(e)) => assert!(e.contains("malformed"), "{e}"),
        other => panic!("reading damaged pages must fail as unavailable, got {:?}", other.map(|v| v.len())),
    }
    let why = unchecked.integrity().expect_err("known now");
    assert!(why.contains("malformed"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_that_is_not_a_database_opens_unready_and_the_daemon_starts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = database_with_data(dir.path()).await;
    // The header too: not an SQLite file any more.
    overwrite(&file, 0, &[0xA5u8; 4096]);

    let store = store::open(&sqlite_url(dir.path())).await.expect("opens");
    // The integrity check runs beside the start; the first query meets the damage anyway.
    let err = store.migrate().await.expect_err("cannot migrate a non-database");
    assert!(matches!(err, StoreError::Unavailable(_)), "spooled, not fatal: {err:?}");
    let ready = IntegrityCheck(store.clone()).ready().expect_err("not ready");
    assert!(ready.starts_with("storage corrupt: ") && ready.contains("not a database"), "{ready}");

    // The daemon's start-up path treats it like an unreachable database: start and spool.
    let text = format!(
        "region = \"eu\"\n[storage]\nurl = \"{}\"\ndata_dir = \"{}\"\n[http]\nlisten = \"127.0.0.1:0\"\n",
        sqlite_url(dir.path()),
        dir.path().display()
    );
    let config = vigil::config::Config::from_toml(&text, &std::collections::BTreeMap::new()).expect("config");
    let (opened, migrated) = vigil::run::app::open_store(&config).await.expect("start-up goes on");
    assert!(!migrated);
    assert!(opened.integrity().is_err());
    drop(opened);

    // And the running daemon says so on /readyz.
    // The daemon builds on a corrupt file.
    let options = vigil::run::app::AppOptions { demo: true, ..Default::default() };
    let daemon = crate::support::daemon::spawn_app_with(config, options).await;
    let base = daemon.base.clone();
    let mut last = String::new();
    until(PATIENCE, "readyz names the corruption", async || {
        let Ok(r) = reqwest::get(format!("{base}/readyz")).await else { return false };
        let status = r.status();
        last = r.text().await.unwrap_or_default();
        status == 503 && last.contains("storage corrupt: ") && last.contains("not a database")
    })
    .await;
    println!("{last}");
    daemon.stop_within(PATIENCE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_spool_entries_are_skipped_with_a_warning_and_the_daemon_starts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (samples_dir, records_dir) = (dir.path().join("spool"), dir.path().join("spool-records"));
    let now = Utc::now();
    let waiting: Vec<Sample> = (0..3)
        .map(|i| full_sample(target("openai", "gpt-4o-mini", None, "eu"), now - ChronoDuration::seconds(i)))
        .collect();
    Spool::open(&samples_dir, 1 << 20).expect("spool").append(&waiting).expect("spooled");
    let segment = |d: &Path, seq: u64| d.join(format!("segment-{seq:020}.jsonl"));
    // A directory and binary junk named like segments in the sample spool, a directory in the record spool.
    std::fs::create_dir_all(segment(&samples_dir, 7)).expect("dir");
    std::fs::write(segment(&samples_dir, 8), [0xA5u8; 512]).expect("junk");
    std::fs::create_dir_all(segment(&records_dir, 1)).expect("dir");

    let text = format!(
        "region = \"eu\"\n[storage]\nurl = \"{}\"\ndata_dir = \"{}\"\nbatch_age = \"100ms\"\n[http]\nlisten = \"127.0.0.1:0\"\n",
        sqlite_url(dir.path()),
        dir.path().display()
    );
    let config = vigil::config::Config::from_toml(&text, &std::collections::BTreeMap::new()).expect("config");
    let options = vigil::run::app::AppOptions { demo: true, ..Default::default() };
    let daemon = crate::support::daemon::spawn_app_with(config, options).await;
    let store = store::open(&sqlite_url(dir.path())).await.expect("open");
    let want: BTreeSet<Uuid> = waiting.iter().map(|s| s.id).collect();
    until(PATIENCE, "the readable segment replayed past the bad entries", async || {
        let q = SampleQuery { target: Some(target("openai", "gpt-4o-mini", None, "eu")), ..SampleQuery::default() };
        let Ok(rows) = store.samples(&q).await else { return false };
        want.iter().all(|id| rows.iter().any(|s| s.id == *id))
    })
    .await;
    let base = daemon.base.clone();
    until(PATIENCE, "ready", async || reqwest::get(format!("{base}/readyz")).await.is_ok_and(|r| r.status() == 200))
        .await;
    daemon.stop_within(PATIENCE).await;
    assert!(segment(&samples_dir, 7).is_dir() && segment(&records_dir, 1).is_dir(), "left for the operator");
}

/// A batch the full disk took only part of leaves no torn line behind: the next batch, once
/// there is room, is read back whole (it used to be glued to the torn line and both were lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_the_full_disk_cut_short_leaves_no_torn_line_for_the_next_one() {
    let Some(disk) = Tmpfs::mount("4m") else { return };
    let mut spool = Spool::open(disk.path().join("spool"), 64 << 20).expect("spool");
    let first = bulky(10);
    spool.append(&first).expect("room for the first batch");
    let filler = disk.fill();
    // Free about two pages: the next batch (tens of KB) fits only in part.
    let len = std::fs::metadata(&filler).expect("filler").len();
    std::fs::OpenOptions::new().write(true).open(&filler).expect("filler").set_len(len - 8 * 1024).expect("shrink");
    let torn = bulky(200);
    spool.append(&torn).expect_err("the disk has no room for the whole batch");
    std::fs::remove_file(&filler).expect("free the disk");
    let next = bulky(10);
    spool.append(&next).expect("room again");
    let back: Vec<Uuid> = spool.peek_all().iter().map(|s| s.id).collect();
    let want: Vec<Uuid> = first.iter().chain(&next).map(|s| s.id).collect();
    assert_eq!(back, want, "the first and the last batch, every record, nothing of the refused one");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_file_migrates_while_its_integrity_check_runs_beside() {
    // Two connections opening a new file at once both switch it to WAL, and the loser fails at
    // once with "database is locked" (busy timeout or not). The check's connection is opened
    // before `open` returns, so the pool's connections, and anyone else's, come after it.
    use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode};
    use sqlx::Connection;
    for round in 0..100 {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = store::open(&sqlite_url(dir.path())).await.expect("open");
        let other = SqliteConnectOptions::new()
            .filename(dir.path().join("vigil.db"))
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(Duration::from_secs(5));
        let (migrated, reader) = tokio::join!(store.migrate(), sqlx::SqliteConnection::connect_with(&other));
        migrated.unwrap_or_else(|e| panic!("round {round}: migrate: {e:?}"));
        reader.unwrap_or_else(|e| panic!("round {round}: another connection: {e}"));
        store.insert_samples(&bulky(5)).await.unwrap_or_else(|e| panic!("round {round}: insert: {e:?}"));
    }
}

/// A 4 MiB tmpfs for a spool, a migrated PostgreSQL database, and the lost-records counter as
/// it stood before; `None` where mounting is not allowed (the tmpfs says why).
struct FullDiskAndPg {
    disk: Tmpfs,
    db: store_support::PgTestDb,
    store: Arc<dyn Store>,
    lost: Arc<AtomicU64>,
    lost_before: u64,
}

async fn full_disk_and_pg() -> Option<FullDiskAndPg> {
    let lost = lost_counter();
    let disk = Tmpfs::mount("4m")?;
    let db = store_support::PgTestDb::create().await;
    let store = store::open(&db.url).await.expect("open");
    store.migrate().await.expect("migrate");
    let lost_before = lost.load(Ordering::SeqCst);
    Some(FullDiskAndPg { disk, db, store, lost, lost_before })
}

/// Sets the database read-only (or back) and ends its sessions, so the pool's next ones obey.
async fn read_only(db: &store_support::PgTestDb, on: bool) {
    use sqlx::Connection;
    let mut admin = sqlx::PgConnection::connect(&store_support::server_url()).await.expect("admin connection");
    let name = &db.name;
    let set = match on {
        true => format!("ALTER DATABASE {name} SET default_transaction_read_only = on"),
        false => format!("ALTER DATABASE {name} RESET default_transaction_read_only"),
    };
    sqlx::query(sqlx::AssertSqlSafe(set)).execute(&mut admin).await.expect("alter database");
    let end = format!(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}' AND pid <> pg_backend_pid()"
    );
    sqlx::query(sqlx::AssertSqlSafe(end)).execute(&mut admin).await.expect("terminate backends");
}

/// Breaker transition `k` of the test's target, `k` seconds after `start`, opening and closing
/// by turns.
fn transition(start: DateTime<Utc>, k: i64) -> vigil::io::store::link::Record {
    use vigil::vocab::breaker::State;
    vigil::io::store::link::Record::Transition(vigil::vocab::records::BreakerTransition {
        target: target("openrouter", "mixtral-8x22b", Some("DeepInfra"), "eu"),
        from_state: if k % 2 == 0 { State::Closed } else { State::Open },
        to_state: if k % 2 == 0 { State::Open } else { State::Closed },
        at: start + ChronoDuration::seconds(k),
        reason: format!("transition {k}"),
    })
}

/// The stored transitions of the test's region since `start`, as the `k` each was sent with.
async fn stored_transitions(store: &dyn Store, start: DateTime<Utc>) -> Vec<i64> {
    let rows = store.transitions_between(Some("eu"), start, Utc::now()).await.expect("read transitions");
    rows.into_iter().map(|r| ((r.at - start).num_milliseconds() as f64 / 1000.0).round() as i64).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_record_spool_on_a_full_disk_and_storage_read_only_records_are_held_in_memory_and_all_stored() {
    use vigil::io::store::link::{Link, Record};
    use vigil::io::store::spool::SpoolOf;
    let Some(FullDiskAndPg { disk, db, store, lost, lost_before }) = full_disk_and_pg().await else { return };

    let spool = SpoolOf::<Record>::open(disk.path().join("spool-records"), 64 << 20).expect("spool");
    let (link, handle) = Link::new(store.clone(), spool, None);
    let link = link.with_call_timeout(Duration::from_millis(500));
    let health = link.health();
    let stop = CancellationToken::new();
    let task = tokio::spawn(link.run(stop.clone()));

    let start = Utc::now() - ChronoDuration::minutes(10);
    let send = |k: i64| handle.store(transition(start, k));
    let stored = || stored_transitions(store.as_ref(), start);

    (0..3).for_each(send);
    until(PATIENCE, "the first transitions stored", async || stored().await.len() == 3).await;

    // Storage refuses writes and the spool's disk is full: the records wait in memory.
    read_only(&db, true).await;
    let filler = disk.fill();
    (3..23).for_each(send);
    until(PATIENCE, "twenty records held in memory", async || health.held() == 20).await;
    assert_eq!(health.spooled(), 0, "the spool took none");
    assert_eq!(stored().await.len(), 3);

    // The disk has room again while storage still refuses: the spool takes them, in order.
    std::fs::remove_file(&filler).expect("free the disk");
    until(PATIENCE, "the held records spooled", async || health.held() == 0 && health.spooled() > 0).await;
    read_only(&db, false).await;
    until(PATIENCE, "the spool replayed", async || health.spooled() == 0 && stored().await.len() == 23).await;

    // Both fail again; storage comes back first, while the disk is still full: the held records
    // go straight to it.
    read_only(&db, true).await;
    let filler = disk.fill();
    (23..28).for_each(send);
    until(PATIENCE, "five records held in memory", async || health.held() == 5).await;
    read_only(&db, false).await;
    until(PATIENCE, "the held records stored", async || health.held() == 0 && stored().await.len() == 28).await;

    std::fs::remove_file(&filler).expect("free the disk");
    (28..30).for_each(send);
    until(PATIENCE, "every record stored", async || stored().await.len() == 30).await;
    stop.cancel();
    drop(handle);
    task.await.expect("link stopped");

    let mut got = stored().await;
    got.sort_unstable();
    assert_eq!(got, (0..30).collect::<Vec<i64>>(), "each transition stored once");
    assert_eq!(lost.load(Ordering::SeqCst) - lost_before, 0, "nothing reported lost");
    assert_eq!((health.held(), health.spooled()), (0, 0));
}

/// The sample spool's disk full with samples spooled on it, storage refusing writes: what comes
/// next is held in memory. Once storage answers, the spool is replayed though its disk is still
/// full (the replay is what frees it) and the held samples follow; and a writer stopped before
/// any retry (a reload stops it too) stores what it holds straight away instead of losing it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_sample_spool_full_and_storage_back_nothing_waits_for_the_disk_or_is_lost_at_a_stop() {
    let Some(FullDiskAndPg { disk, db, store, lost, lost_before }) = full_disk_and_pg().await else { return };
    let mut sent: Vec<Sample> = Vec::new();

    // Starts `writer`: its health, its sender, the token that stops it and its task.
    let start = |writer: Writer| {
        let health = writer.health();
        let (tx, rx) = mpsc::channel(4096);
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(writer.run(rx, shutdown.clone()));
        (health, tx, shutdown, task)
    };
    let send = async |tx: &mpsc::Sender<Sample>, sent: &mut Vec<Sample>, n: usize| {
        for s in bulky(n) {
            tx.send(s.clone()).await.expect("writer running");
            sent.push(s);
        }
    };

    // Starts `writer`; storage refuses (20 samples spooled), then the disk fills (20 more, held);
    // then storage answers again, the disk still full (its filler returned).
    let into_trouble = async |writer: Writer, sent: &mut Vec<Sample>| {
        let (health, tx, shutdown, task) = start(writer);
        read_only(&db, true).await;
        send(&tx, sent, 20).await;
        until(PATIENCE, "samples spooled while storage refuses", async || health.spooled() >= 20).await;
        let filler = disk.fill();
        send(&tx, sent, 20).await;
        until(PATIENCE, "samples held while the spool's disk is full", async || health.held() > 0).await;
        read_only(&db, false).await;
        (health, tx, shutdown, task, filler)
    };

    // Phase 1, retrying every 50–300 ms.
    let spool = Spool::open(disk.path().join("spool"), 64 << 20).expect("spool");
    let (health, tx, shutdown, task, filler) = into_trouble(fast_writer(store.clone(), spool), &mut sent).await;
    until(PATIENCE, "the spool replayed and the held stored, the disk still full", async || {
        health.spooled() == 0 && health.held() == 0
    })
    .await;
    drop(tx);
    shutdown.cancel();
    task.await.expect("writer stopped");
    std::fs::remove_file(&filler).expect("free the disk");

    // Phase 2, no retry before the stop: the stop stores what it holds.
    let spool = Spool::open(disk.path().join("spool"), 64 << 20).expect("spool");
    let slow_retry =
        fast_writer(store.clone(), spool).with_retry_backoff(Duration::from_secs(600), Duration::from_secs(600));
    let (health, tx, shutdown, task, filler) = into_trouble(slow_retry, &mut sent).await;
    drop(tx);
    shutdown.cancel();
    task.await.expect("writer stopped");
    assert_eq!(health.held(), 0, "the stop stored what memory held");
    std::fs::remove_file(&filler).expect("free the disk");

    // What the second writer left spooled is replayed by the next one, as after any stop.
    let spool = Spool::open(disk.path().join("spool"), 64 << 20).expect("spool");
    let (health, tx, shutdown, task) = start(fast_writer(store.clone(), spool));
    until(PATIENCE, "the spool left by the stop replayed", async || health.spooled() == 0).await;
    drop(tx);
    shutdown.cancel();
    task.await.expect("writer stopped");

    let (rows, stored) = stored_ids(store.as_ref()).await;
    let want: BTreeSet<Uuid> = sent.iter().map(|s| s.id).collect();
    assert_eq!(rows, stored.len(), "no sample stored twice");
    assert_eq!(stored, want, "every sample sent is stored");
    assert_eq!(lost.load(Ordering::SeqCst) - lost_before, 0, "nothing reported lost");
}

/// Storage refusing writes and both spools' disk full: a reload stops the writer and the link
/// while they hold samples and records in memory. Those pass to the next daemon's writer and
/// link through the process's carry (nothing is reported lost), which store them once storage
/// answers; only what is left at the process's exit is reported lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_while_storage_and_the_disk_refuse_hands_what_memory_holds_to_the_next_daemon() {
    use vigil::io::store::link::{Link, Record};
    use vigil::io::store::spool::SpoolOf;
    use vigil::run::app::Carry;
    let Some(FullDiskAndPg { disk, db, store, lost, lost_before }) = full_disk_and_pg().await else { return };
    let carry = Carry::default();
    let start = Utc::now() - ChronoDuration::minutes(10);
    let transition = |k: i64| transition(start, k);
    // One daemon's writer and link over the same spools and the process's carry.
    let daemon = || {
        let spool = Spool::open(disk.path().join("spool"), 64 << 20).expect("sample spool");
        let records = SpoolOf::<Record>::open(disk.path().join("spool-records"), 64 << 20).expect("record spool");
        let writer = fast_writer(store.clone(), spool).with_carry(carry.samples.clone());
        let (link, handle) = Link::new(store.clone(), records, None);
        let link = link.with_call_timeout(Duration::from_millis(500)).with_carry(carry.records.clone());
        let (writer_health, link_health) = (writer.health(), link.health());
        let (tx, rx) = mpsc::channel(4096);
        let stop = CancellationToken::new();
        let tasks = (tokio::spawn(writer.run(rx, stop.clone())), tokio::spawn(link.run(stop.clone())));
        (writer_health, link_health, tx, handle, stop, tasks)
    };

    read_only(&db, true).await;
    let filler = disk.fill();
    let (writer_health, link_health, tx, handle, stop, (writer, link)) = daemon();
    let sent = bulky(30);
    for s in &sent {
        tx.send(s.clone()).await.expect("writer running");
    }
    (0..12).for_each(|k| handle.store(transition(k)));
    until(PATIENCE, "samples and records held in memory", async || {
        writer_health.held() == 30 && link_health.held() == 12
    })
    .await;
    assert_eq!((writer_health.spooled(), link_health.spooled()), (0, 0), "the full disk took nothing");

    // The reload's drain: the stop can store nothing and spool nothing.
    drop(tx);
    drop(handle);
    stop.cancel();
    writer.await.expect("writer stopped");
    link.await.expect("link stopped");
    assert_eq!((carry.samples.len(), carry.records.len()), (30, 12), "everything held is handed on");
    assert_eq!(lost.load(Ordering::SeqCst) - lost_before, 0, "nothing reported lost at a reload");

    // The next daemon takes them over and stores them once storage answers, the disk still full.
    let (writer_health, link_health, tx, handle, stop, (writer, link)) = daemon();
    until(PATIENCE, "the next daemon holds what was handed on", async || {
        writer_health.held() == 30 && link_health.held() == 12
    })
    .await;
    assert_eq!((carry.samples.len(), carry.records.len()), (0, 0), "taken over once");
    read_only(&db, false).await;
    handle.store(transition(12));
    let stored_transitions = || stored_transitions(store.as_ref(), start);
    until(PATIENCE, "everything held stored", async || {
        writer_health.held() == 0 && link_health.held() == 0 && stored_transitions().await.len() == 13
    })
    .await;
    assert_eq!(stored_transitions().await, (0..13).collect::<Vec<i64>>(), "each transition stored once");
    let (rows, ids) = stored_ids(store.as_ref()).await;
    assert_eq!(rows, 30, "no sample stored twice");
    assert_eq!(ids, sent.iter().map(|s| s.id).collect::<BTreeSet<Uuid>>(), "every sample stored");
    drop(tx);
    drop(handle);
    stop.cancel();
    writer.await.expect("writer stopped");
    link.await.expect("link stopped");
    std::fs::remove_file(&filler).expect("free the disk");
    assert_eq!(lost.load(Ordering::SeqCst) - lost_before, 0, "nothing reported lost");

    // What is still left when the process exits is reported lost, once.
    carry.records.leave(vec![transition(13), transition(14)]);
    assert_eq!(carry.give_up(), (0, 2));
    assert!(lost.load(Ordering::SeqCst) - lost_before >= 2, "the exit reports what it drops");
}

/// Every connection of the pool, not only the first, keeps its page cache at 512 KiB (SQLite's
/// default is 2 MiB a connection, which the week's read-back filled in each: docs/BENCHMARKS.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_pooled_sqlite_connection_keeps_a_small_page_cache() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("vigil.db").display());
    let store = SqliteStore::open(&url, store::ACQUIRE_TIMEOUT).await.expect("open");
    store.migrate().await.expect("migrate");
    let pool = store.pool();
    // Held at once, so the pool opens four connections rather than handing one back each time.
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(pool.acquire().await.expect("a connection"));
    }
    for conn in &mut held {
        let (cache,): (i64,) = sqlx::query_as("PRAGMA cache_size").fetch_one(&mut **conn).await.expect("pragma");
        assert_eq!(cache, -512, "KiB, as a negative count");
    }
}
