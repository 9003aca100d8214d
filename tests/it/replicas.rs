//! Replicas of one region on real parts: two and three `vigil run` processes with the same
//! `region` and one real PostgreSQL, probing an OpenAI-compatible stand-in on loopback that logs
//! every request. While all are live each target is probed once a round (never twice, never
//! skipped), the work is shared, a kill -9 is covered within two intervals, a returning member
//! takes its share back without a gap or a double probe, no sample is stored twice, and an
//! incident open across a takeover is paged once and resolved once. SQLite refuses a second
//! live instance of a region with a message that says why.

use crate::support::daemon::{adherent_stream, DaemonConfig, Provider};
use crate::support::poll_until;
use crate::support::process::{free_port, Daemon};
use crate::support::store::PgTestDb;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vigil::run::demo::standin::{Script, StandIn};

const REGION: &str = "eu-replicas";
/// Enough targets that each of three members surely gets some (a member gets none with
/// probability 3 × (2/3)^24, under 0.002 %).
const MODELS: [&str; 24] = [
    "m0", "m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8", "m9", "m10", "m11", "m12", "m13", "m14", "m15", "m16", "m17",
    "m18", "m19", "m20", "m21", "m22", "m23",
];
/// `probe.interval` of every daemon here.
const INTERVAL: Duration = Duration::from_secs(1);

/// A healthy stream, or for model `m0` a 503 while `down` is set.
async fn provider(down: Arc<AtomicBool>) -> StandIn {
    let ok = adherent_stream();
    StandIn::start(move |r| {
        let m0 = r.json().is_some_and(|b| b["model"] == "m0");
        match down.load(Ordering::SeqCst) && m0 {
            true => Script::json(503, br#"{"error":{"message":"overloaded","type":"server_error"}}"#),
            false => Script::sse(&ok, Duration::from_millis(2)).with_head_delay(Duration::from_millis(20)),
        }
    })
    .await
    .expect("stand-in")
}

/// The TOML of one replica: the shared region and database, its own data directory and port.
fn config(
    db: &str,
    data: &std::path::Path,
    port: u16,
    base: &str,
    hook: Option<&str>,
) -> (String, Vec<(String, String)>) {
    let mut c = DaemonConfig::new(db, data)
        .region(REGION)
        .set("http.listen", format!("127.0.0.1:{port}"))
        // A recovered target's breaker closes (and its incident resolves) seconds later.
        .set("breaker.open_for", "2s")
        .provider(Provider::openai("steady", &format!("{base}/v1")).models(&MODELS));
    if let Some(hook) = hook {
        c = c.webhook(hook);
    }
    let env = c.vars().iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    (c.toml(), env)
}

/// One replica process in its own directory.
struct Replica {
    daemon: Daemon,
    port: u16,
    dir: tempfile::TempDir,
}

async fn start(db: &str, base: &str, hook: Option<&str>) -> Replica {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    Replica { daemon: run(dir.path(), db, base, hook, port).await, port, dir }
}

async fn run(dir: &std::path::Path, db: &str, base: &str, hook: Option<&str>, port: u16) -> Daemon {
    let (toml, env) = config(db, dir, port, base, hook);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    Daemon::start_in(dir, &toml, port, &env).await
}

/// A gauge of the replica's `/metrics` (`vigil_region_members`, `vigil_region_leader`).
async fn gauge(d: &Daemon, name: &str) -> Option<f64> {
    let (_, text) = d.get("/metrics").await?;
    text.lines().find(|l| l.starts_with(&format!("{name}{{")))?.rsplit(' ').next()?.parse().ok()
}

/// Probes this replica made of each model so far (`vigil_probes_total`, every outcome).
async fn probe_counts(d: &Daemon) -> BTreeMap<String, f64> {
    let (_, text) = d.get("/metrics").await.expect("metrics");
    let mut by = BTreeMap::new();
    for l in text.lines().filter(|l| l.starts_with("vigil_probes_total{")) {
        let model = l.split("model=\"").nth(1).and_then(|r| r.split('"').next()).unwrap_or_default();
        let n: f64 = l.rsplit(' ').next().and_then(|v| v.parse().ok()).unwrap_or_default();
        *by.entry(model.to_string()).or_default() += n;
    }
    by
}

async fn until_members(d: &Daemon, n: f64) {
    let seen = poll_until(Duration::from_secs(20), || async {
        (gauge(d, "vigil_region_members").await == Some(n)).then_some(())
    });
    assert!(seen.await.is_some(), "{n} members never seen; log:\n{}", d.log());
}

/// Chat requests by model, as (seconds since `t0`) of arrival.
fn arrivals(provider: &StandIn, t0: Instant) -> BTreeMap<String, Vec<f64>> {
    let mut by: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for r in provider.requests().iter().filter(|r| r.method == "POST") {
        let model = r.json().and_then(|b| b["model"].as_str().map(String::from)).unwrap_or_default();
        let at = r.received_at.checked_duration_since(t0).map_or(-1.0, |d| d.as_secs_f64());
        by.entry(model).or_default().push(at);
    }
    for v in by.values_mut() {
        v.sort_by(f64::total_cmp);
    }
    by
}

/// Gaps between consecutive probes of each model whose later probe falls in `[from, to)`.
fn gaps(by: &BTreeMap<String, Vec<f64>>, from: f64, to: f64) -> Vec<(String, f64, f64)> {
    let mut out = Vec::new();
    for (model, at) in by {
        for w in at.windows(2) {
            if w[1] >= from && w[1] < to {
                out.push((model.clone(), w[0], w[1] - w[0]));
            }
        }
    }
    out
}

/// Every model probed once a round in `[from, to)`: no gap between probes under half an interval
/// (a double probe) or over one and a half (a skipped round).
fn once_a_round(by: &BTreeMap<String, Vec<f64>>, from: f64, to: f64, what: &str) {
    let g = gaps(by, from, to);
    assert!(!g.is_empty(), "{what}: no probes in [{from:.1}, {to:.1})");
    let bad: Vec<_> = g.iter().filter(|(_, _, d)| *d < 0.5 || *d > 1.5).collect();
    assert!(bad.is_empty(), "{what}: probes of a target must be one interval apart: {bad:?}");
    for m in MODELS {
        assert!(g.iter().any(|(x, _, _)| x == m), "{what}: {m} never probed in [{from:.1}, {to:.1})");
    }
}

/// No target has two samples stored less than half an interval apart.
async fn no_duplicate_samples(db: &str) -> usize {
    let store = vigil::io::store::open(db).await.expect("store");
    let samples = store.samples(&vigil::io::store::SampleQuery::default()).await.expect("samples");
    let mut by: BTreeMap<String, Vec<chrono::DateTime<chrono::Utc>>> = BTreeMap::new();
    for s in &samples {
        by.entry(s.target.id()).or_default().push(s.started_at);
    }
    for (t, at) in &mut by {
        at.sort();
        let close: Vec<_> = at.windows(2).filter(|w| w[1] - w[0] < chrono::Duration::milliseconds(500)).collect();
        assert!(close.is_empty(), "{t}: stored twice in one round: {close:?}");
    }
    samples.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_probe_each_target_once_cover_a_kill_and_take_their_share_back() {
    let _timing = crate::support::timing_sensitive().await;
    let db = PgTestDb::create().await;
    let stand_in = provider(Arc::default()).await;
    let base = stand_in.base_url();
    let t0 = Instant::now();
    let a = start(&db.url, &base, None).await;
    let mut b = start(&db.url, &base, None).await;
    let c = start(&db.url, &base, None).await;
    for r in [&a, &b, &c] {
        until_members(&r.daemon, 3.0).await;
    }
    // Every member has read every row and the joiners' starts have passed.
    tokio::time::sleep(INTERVAL * 2).await;
    let all_live = t0.elapsed().as_secs_f64();
    let before = [probe_counts(&a.daemon).await, probe_counts(&b.daemon).await, probe_counts(&c.daemon).await];
    tokio::time::sleep(INTERVAL * 8).await;
    let killed_at = t0.elapsed().as_secs_f64();
    once_a_round(&arrivals(&stand_in, t0), all_live, killed_at, "three live members");
    // The work is shared: each member probed some targets and not all of them, and no target
    // was probed by two members.
    let mut probed_by: BTreeMap<String, usize> = BTreeMap::new();
    for ((name, r), before) in [("a", &a), ("b", &b), ("c", &c)].into_iter().zip(&before) {
        let after = probe_counts(&r.daemon).await;
        let mine: Vec<&String> =
            after.iter().filter(|(m, n)| **n > before.get(*m).copied().unwrap_or(0.0)).map(|(m, _)| m).collect();
        assert!(!mine.is_empty() && mine.len() < MODELS.len(), "member {name} probed {mine:?}");
        for m in mine {
            *probed_by.entry(m.clone()).or_default() += 1;
        }
    }
    assert!(
        probed_by.len() == MODELS.len() && probed_by.values().all(|n| *n == 1),
        "one member per target: {probed_by:?}"
    );
    assert_eq!(gauge(&a.daemon, "vigil_region_leader").await, Some(1.0), "the oldest member leads");
    assert_eq!(gauge(&b.daemon, "vigil_region_leader").await, Some(0.0));

    b.daemon.signal("-KILL");
    let (_, _) = b.daemon.exited_within(Duration::from_secs(5)).await;
    tokio::time::sleep(INTERVAL * 5).await;
    let by = arrivals(&stand_in, t0);
    // The gap over the kill: every target probed again at most two intervals after its last probe,
    // so at most one round missed. Probes sit on a grid of whole intervals: a kill just before a
    // target's next probe makes its gap exactly two intervals plus the taker's start lag, and a
    // second missed round would make it three; the bound sits between the two.
    let over: Vec<_> = gaps(&by, killed_at, killed_at + 3.0).into_iter().filter(|(_, _, d)| *d > 2.5).collect();
    assert!(over.is_empty(), "a dead member's targets are probed again within two intervals: {over:?}");
    once_a_round(&by, killed_at + 2.5, t0.elapsed().as_secs_f64(), "two members after the kill");
    until_members(&a.daemon, 2.0).await;

    // b returns (a new process on its directory and port): it takes its share back.
    let back_at = t0.elapsed().as_secs_f64();
    b.daemon = run(b.dir.path(), &db.url, &base, None, b.port).await;
    until_members(&a.daemon, 3.0).await;
    tokio::time::sleep(INTERVAL * 6).await;
    let end = t0.elapsed().as_secs_f64();
    once_a_round(&arrivals(&stand_in, t0), back_at, end, "the hand-back");
    let (_, text) = b.daemon.get("/metrics").await.expect("metrics");
    assert!(text.lines().any(|l| l.starts_with("vigil_probes_total{")), "the returned member probes again");

    // Every replica describes the whole region: its export names every target.
    for r in [&a, &b, &c] {
        let (_, body) = r.daemon.get("/v1/targets").await.expect("targets");
        let doc: serde_json::Value = serde_json::from_str(&body).expect("JSON");
        let n = doc["targets"].as_array().map(Vec::len);
        assert_eq!(n, Some(MODELS.len()), "{body}");
        let fresh = doc["targets"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["last_sample"]["started_at"].as_str())
            .filter_map(|at| chrono::DateTime::parse_from_rfc3339(at).ok())
            .filter(|at| *at >= chrono::Utc::now() - chrono::Duration::seconds(5))
            .count();
        assert_eq!(fresh, MODELS.len(), "every replica judges every target's latest samples, its peers' too: {body}");
    }
    for r in [a, b, c] {
        let (_, ok, log) = r.daemon.stop().await;
        assert!(ok, "{log}");
    }
    let stored = no_duplicate_samples(&db.url).await;
    assert!(stored > MODELS.len() * 20, "samples stored: {stored}");
    let store = vigil::io::store::open(&db.url).await.expect("store");
    let left = vigil::io::store::MemberStore::members(store.as_ref(), REGION).await.expect("members");
    assert!(
        left.iter().all(|m| m.heartbeat_at < chrono::Utc::now() - chrono::Duration::seconds(1)) && left.len() <= 1,
        "clean stops remove their rows (only the killed member's stays, stale): {left:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incident_open_across_a_takeover_is_paged_once_and_resolved_once() {
    let _timing = crate::support::timing_sensitive().await;
    let db = PgTestDb::create().await;
    let down = Arc::new(AtomicBool::new(false));
    let stand_in = provider(down.clone()).await;
    let hook = StandIn::start(|_| Script::json(200, b"{}")).await.expect("receiver");
    let (base, url) = (stand_in.base_url(), format!("{}/hook", hook.base_url()));
    let a = start(&db.url, &base, Some(&url)).await;
    let b = start(&db.url, &base, Some(&url)).await;
    until_members(&a.daemon, 2.0).await;
    until_members(&b.daemon, 2.0).await;
    tokio::time::sleep(INTERVAL * 5).await;
    let deliveries = || crate::support::daemon::webhook_deliveries(&hook);
    assert!(deliveries().is_empty(), "{:?}", deliveries());

    down.store(true, Ordering::SeqCst);
    let paged = poll_until(Duration::from_secs(30), || async {
        deliveries().iter().any(|(status, _, _)| status == "firing").then_some(())
    });
    assert!(paged.await.is_some(), "the outage is paged: {:?}\n{}", deliveries(), a.daemon.log());
    // The leader dies with the incident open; the other member takes the lead.
    let mut a = a;
    a.daemon.signal("-KILL");
    let _ = a.daemon.exited_within(Duration::from_secs(5)).await;
    let leads = poll_until(Duration::from_secs(10), || async {
        (gauge(&b.daemon, "vigil_region_leader").await == Some(1.0)).then_some(())
    });
    assert!(leads.await.is_some(), "b takes the lead; log:\n{}", b.daemon.log());
    b.daemon.log_until(Duration::from_secs(5), "this replica now leads the region").await;
    tokio::time::sleep(INTERVAL * 6).await;
    down.store(false, Ordering::SeqCst);
    let resolved = poll_until(Duration::from_secs(40), || async {
        deliveries().iter().any(|(status, _, _)| status == "resolved").then_some(())
    });
    assert!(resolved.await.is_some(), "the new leader resolves it: {:?}\n{}", deliveries(), b.daemon.log());
    tokio::time::sleep(INTERVAL * 3).await;
    let all = deliveries();
    let firing = all.iter().filter(|(s, _, _)| s == "firing").count();
    let resolves = all.iter().filter(|(s, _, _)| s == "resolved").count();
    assert_eq!((firing, resolves), (1, 1), "one page and one resolve across the takeover: {all:?}\n{}", b.daemon.log());
    let (_, ok, log) = b.daemon.stop().await;
    assert!(ok, "{log}");
    drop(a);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_live_instance_of_a_region_on_one_sqlite_file_is_refused_with_why() {
    let stand_in = provider(Arc::default()).await;
    let shared = tempfile::tempdir().expect("tempdir");
    let db = format!("sqlite://{}/vigil.db", shared.path().display());
    let first = start(&db, &stand_in.base_url(), None).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let (toml, env) = config(&db, dir.path(), port, &stand_in.base_url(), None);
    std::fs::write(dir.path().join("vigil.toml"), toml).expect("config");
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut second = Daemon::spawn(&dir.path().join("vigil.toml"), port, &dir.path().join("vigil.log"), &env);
    let (_, ok) = second.exited_within(Duration::from_secs(20)).await;
    let log = second.log();
    assert!(!ok, "the second instance must not run: {log}");
    assert!(
        log.contains("storage.url") && log.contains("need PostgreSQL") && log.contains(REGION),
        "the refusal names the key, the region and the way out: {log}"
    );
    // The first one runs on, and a restart after it stops is not refused.
    assert!(first.daemon.get("/healthz").await.is_some());
    let (_, ok, log) = first.daemon.stop().await;
    assert!(ok, "{log}");
    let again = run(dir.path(), &db, &stand_in.base_url(), None, port).await;
    let (_, ok, log) = again.stop().await;
    assert!(ok, "{log}");
}
