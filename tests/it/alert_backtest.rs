//! `vigil alerts backtest` on a generated, stored week (an SQLite file written through the real
//! store) with a known set of faults: the real binary replays it through the daemon's rule
//! engine and must find exactly those incidents, and more when a threshold is loosened.

use chrono::{DateTime, Duration, DurationRound, Utc};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::process::Command;
use vigil::vocab::sample::{Outcome, Sample};
use vigil::vocab::target::Target;

const MINUTES: i64 = 7 * 24 * 60;

/// Ten providers with one model each, a sample a minute for a week ending `end`:
/// TTFT 100–120 ms with a regular 2.5 % spike at 350–500 ms (a heavy tail that must not page),
/// plus the faults: p0 fails (503) for 10 minutes on days 1, 3 and 5; p1's TTFT triples for
/// 30 minutes on day 4; p2's model is gone (404) for 5 minutes on day 2. Five incidents.
fn week(end: DateTime<Utc>) -> Vec<Sample> {
    let mut rng = StdRng::seed_from_u64(11);
    let start = end - Duration::minutes(MINUTES);
    let mut out = Vec::new();
    for p in 0..10 {
        let t = Target::new(format!("p{p}").into(), "m".into(), None, "eu-test-1".into());
        for m in 0..MINUTES {
            let at = start + Duration::minutes(m) + Duration::seconds(p);
            let mut s = Sample::new(t.clone(), at, at);
            let day = m / 1440;
            let minute_of_day = m % 1440;
            let fault = (600..610).contains(&minute_of_day);
            let ttft: f64 = if m % 40 == 7 { rng.random_range(350.0..500.0) } else { rng.random_range(100.0..120.0) };
            if p == 0 && fault && [1, 3, 5].contains(&day) {
                s.outcome = Outcome::ServerError;
                s.status = Some(503);
                s.error = Some("HTTP 503: upstream overloaded".into());
            } else if p == 2 && day == 2 && (600..605).contains(&minute_of_day) {
                s.outcome = Outcome::ModelUnavailable;
                s.status = Some(404);
                s.error = Some("HTTP 404: model not found".into());
            } else {
                s.outcome = Outcome::Ok;
                s.status = Some(200);
                let slow = p == 1 && day == 4 && (600..630).contains(&minute_of_day);
                let ttft = if slow { ttft.max(100.0) * 3.0 } else { ttft };
                s.ttfb_ms = Some(ttft * 0.6);
                s.ttft_ms = Some(ttft);
                s.total_ms = Some(ttft + 200.0);
            }
            out.push(s);
        }
    }
    out
}

fn backtest(config: &std::path::Path, extra: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_vigil"))
        .args(["alerts", "backtest", "--config"])
        .arg(config)
        .args(["--window", "8d", "--json"])
        .args(extra)
        .output()
        .expect("vigil runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON report")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_week_replays_to_its_known_incidents() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}/vigil.db", dir.path().display());
    let store = vigil::io::store::open(&url).await.expect("store");
    store.migrate().await.expect("migrate");
    let end = Utc::now().duration_trunc(Duration::minutes(1)).expect("minute");
    for chunk in week(end).chunks(10_000) {
        store.insert_samples(chunk).await.expect("insert");
    }
    let config = dir.path().join("vigil.toml");
    std::fs::write(
        &config,
        format!("region = \"eu-test-1\"\n[storage]\nurl = \"{url}\"\ndata_dir = \"{}\"\n", dir.path().display()),
    )
    .expect("config");

    let r = backtest(&config, &[]);
    assert_eq!(r["samples"], 100_800);
    let incidents = r["incidents"].as_array().expect("incidents");
    let got: Vec<(String, String)> = incidents
        .iter()
        .map(|i| {
            (
                i["subject"].as_str().unwrap_or("").to_string(),
                i["kinds"]
                    .as_array()
                    .map(|k| k.iter().filter_map(|x| x.as_str()).collect::<Vec<_>>().join(","))
                    .unwrap_or_default(),
            )
        })
        .collect();
    let want: Vec<(String, String)> = vec![
        ("p0/m".into(), "errors".into()),
        ("p2/m".into(), "model_unavailable".into()),
        ("p0/m".into(), "errors".into()),
        ("p1/m".into(), "latency_degraded".into()),
        ("p0/m".into(), "errors".into()),
    ];
    assert_eq!(got, want, "{}", serde_json::to_string_pretty(&r).unwrap_or_default());
    assert_eq!(r["pages"], 5);
    for i in incidents {
        assert!(i["resolved_at"].is_string(), "every fault cleared: {i}");
        let ttd = i["time_to_detect_s"].as_i64().expect("time to detect");
        assert!((0..=180).contains(&ttd), "detected within three probes: {i}");
    }
    // p0's outages last 10 minutes; the incident spans detection to resolve after 3 clear probes.
    let p0 = incidents.iter().find(|i| i["subject"] == "p0/m").expect("p0");
    let d = p0["duration_s"].as_i64().expect("duration");
    assert!((8 * 60..=14 * 60).contains(&d), "{p0}");
    let by_kind = r["by_kind"].as_array().expect("by_kind");
    let p0_errors = by_kind.iter().find(|k| k["subject"] == "p0/m" && k["kind"] == "errors").expect("p0 errors");
    assert_eq!(p0_errors["incidents"], 3);

    // "How many pages would k = 1 have cost me?": every tail spike pages.
    let loose = backtest(&config, &["--set", "alerts.latency_k=1", "--set", "alerts.latency_n=1"]);
    assert!(loose["pages"].as_u64().expect("pages") > 100, "{}", loose["pages"]);

    // No transitions are stored here; the breaker replayed from the samples opens on p0's 10
    // failed minutes at 3 of the last 5, and not when it takes 20 in a row (p1's slow half hour
    // may open it on latency, p2's missing model on failures).
    let breaker_open = |r: &serde_json::Value| -> Vec<String> {
        let incidents = r["incidents"].as_array().cloned().unwrap_or_default();
        incidents
            .iter()
            .filter(|i| i["kinds"].as_array().is_some_and(|k| k.iter().any(|k| k == "breaker_open")))
            .map(|i| i["subject"].as_str().unwrap_or("").to_string())
            .collect()
    };
    assert!(breaker_open(&r).is_empty(), "{}", serde_json::to_string_pretty(&r).unwrap_or_default());
    let k_of_n = backtest(&config, &["--set", "breaker.failure_k=3", "--set", "breaker.failure_n=5"]);
    let opened = breaker_open(&k_of_n);
    assert!(opened.iter().filter(|s| *s == "p0/m").count() >= 3, "each of p0's outages: {opened:?}");
    assert!(
        opened.iter().all(|s| ["p0/m", "p1/m", "p2/m"].contains(&s.as_str())),
        "only the faulty targets: {opened:?}"
    );
    let patient = breaker_open(&backtest(&config, &["--set", "breaker.consecutive_failures=20"]));
    assert!(!patient.iter().any(|s| s == "p0/m"), "10 failed minutes are not 20 in a row: {patient:?}");

    // Bad overrides are usage errors naming the key.
    let out = Command::new(env!("CARGO_BIN_EXE_vigil"))
        .args(["alerts", "backtest", "--config"])
        .arg(&config)
        .args(["--set", "alerts.nope=1"])
        .output()
        .expect("vigil runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("alerts.nope"));
    let out = Command::new(env!("CARGO_BIN_EXE_vigil"))
        .args(["alerts", "backtest", "--config"])
        .arg(&config)
        .args(["--set", "breaker.failure_k=6", "--set", "breaker.failure_n=4"])
        .output()
        .expect("vigil runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("breaker.failure_k <= breaker.failure_n"));
}
