//! The status page of live `vigil run --demo` instances, loaded in headless Chromium.
//!
//! Two regions share one PostgreSQL, as a fleet does: eu-west-1 (whose page is checked) and
//! us-east-1. eu-west-1 starts with a week of stored hourly TTFT rollups, so its baselines and
//! sparklines have history; Gemini is left without any, so its baseline is still too young.
//! The rendered DOM is checked, phone and desktop screenshots are saved under
//! `target/test-artifacts/`, and the same instance's `/metrics` goes through `promtool`.

use crate::support::promtool;

use crate::support::store as store_support;

use chrono::{DateTime, Duration, DurationRound, Utc};
use hdrhistogram::serialization::{Serializer, V2Serializer};
use hdrhistogram::Histogram;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use store_support::PgTestDb;
use vigil::io::probe::Planned;
use vigil::run::demo::profiles::{self, GEMINI_MODEL};
use vigil::vocab::records::Rollup;
use vigil::vocab::target::Target;

const HERE: &str = "eu-west-1";
const THERE: &str = "us-east-1";
/// Hours of seeded history before the current one.
const HISTORY_HOURS: i64 = 167;

/// A `vigil run --demo` child process; stopped (SIGTERM, then SIGKILL) when dropped.
struct Daemon {
    child: Child,
    addr: SocketAddr,
    log: Arc<Mutex<Vec<String>>>,
    _dir: tempfile::TempDir,
}

impl Daemon {
    /// Starts the binary for `region` on a free port and waits for its listening address;
    /// with `token`, `/v1/*` require it.
    fn start(region: &str, database_url: &str, token: Option<&str>) -> Daemon {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("vigil.toml");
        std::fs::write(
            &config,
            format!(
                "region = \"{region}\"\n[storage]\nurl = \"{database_url}\"\ndata_dir = \"{d}\"\nbatch_age = \"100ms\"\n\
                 [http]\nlisten = \"127.0.0.1:0\"\n[probe]\ninterval = \"2s\"\ntimeout = \"2s\"\n",
                d = dir.path().display()
            ),
        )
        .expect("write config");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_vigil"));
        cmd.args(["run", "--demo", "--config"])
            .arg(&config)
            .env("VIGIL_LOG_FORMAT", "json")
            .env("VIGIL_LOG", "info")
            .env_remove("DATABASE_URL")
            .env_remove("VIGIL_REGION")
            .env_remove("VIGIL_HTTP_LISTEN")
            .env_remove("VIGIL_API_TOKEN")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for key in crate::support::cli::KEY_VARS {
            cmd.env_remove(key);
        }
        if let Some(token) = token {
            cmd.env("VIGIL_API_TOKEN", token);
        }
        let mut child = cmd.spawn().expect("vigil starts");
        let stderr = child.stderr.take().expect("stderr");
        let log: Arc<Mutex<Vec<String>>> = Arc::default();
        let (tx, rx) = std::sync::mpsc::channel();
        let lines = log.clone();
        // Drains stderr for the whole run (a full pipe would block the daemon's logging).
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(addr) = listening_addr(&line) {
                    let _ = tx.send(addr);
                }
                lines.lock().expect("log lock").push(line);
            }
        });
        let addr = rx.recv_timeout(std::time::Duration::from_secs(120)).unwrap_or_else(|_| {
            panic!("vigil run --demo ({region}) never logged its address:\n{}", log.lock().expect("log").join("\n"))
        });
        Daemon { child, addr, log, _dir: dir }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn log(&self) -> String {
        self.log.lock().expect("log lock").join("\n")
    }

    /// SIGTERM and wait: the daemon drains and exits 0.
    fn stop(mut self) -> std::process::ExitStatus {
        terminate(&self.child);
        self.child.wait().expect("wait for vigil")
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn terminate(child: &Child) {
    let pid = i32::try_from(child.id()).expect("pid fits");
    // SAFETY: sending a signal to our own child process by its id.
    unsafe {
        libc::kill(pid, libc::SIGTERM);
    }
}

/// The address in vigil's JSON log line `http listening`.
fn listening_addr(line: &str) -> Option<SocketAddr> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    if v["message"] != "http listening" {
        return None;
    }
    v["addr"].as_str()?.parse().ok()
}

/// The demo's targets as a region's instance probes them.
fn demo_targets(region: &str) -> Vec<Target> {
    let providers: Vec<_> = vigil::run::demo::demo_providers("http://127.0.0.1:1")
        .expect("demo providers")
        .into_iter()
        .map(Arc::new)
        .collect();
    Planned::all(&providers, region).into_iter().map(|p| p.target).collect()
}

fn ms(v: f64) -> String {
    format!("{v:.0} ms")
}

/// Hourly values: (start of the hour, milliseconds).
type Hourly = Vec<(DateTime<Utc>, f64)>;

/// A week of hourly TTFT rollups for each seeded target, following a daily wave around the
/// demo profile's median; returns them and each target's hourly P50s, oldest first.
fn history(targets: &[Target], now: DateTime<Utc>) -> (Vec<Rollup>, Vec<(Target, Hourly)>) {
    let current = now.duration_trunc(Duration::hours(1)).expect("hour");
    let mut rollups = Vec::new();
    let mut p50s = Vec::new();
    for t in targets {
        let route = t.route.as_deref().unwrap_or("");
        let Some(profile) = profiles::PROFILES.iter().find(|p| p.model == t.model && p.route == route) else {
            continue;
        };
        let mut medians = Vec::new();
        for back in (1..=HISTORY_HOURS).rev() {
            let hour = current - Duration::hours(back);
            let day = (hour.timestamp() / 3600 % 24) as f64 / 24.0;
            let median = profile.ttft_ms * (1.0 + 0.25 * (day * std::f64::consts::TAU).sin());
            let mut h = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).expect("histogram");
            for i in 0..60 {
                let v = median * (0.7 + 0.6 * f64::from(i) / 59.0);
                h.record((v * 1000.0).round() as u64).expect("record");
            }
            medians.push((hour, h.value_at_quantile(0.5) as f64 / 1000.0));
            let mut bytes = Vec::new();
            V2Serializer::new().serialize(&h, &mut bytes).expect("serialize");
            rollups.push(Rollup { target: t.clone(), metric: "ttft".into(), hour, count: 60, histogram: bytes });
        }
        p50s.push((t.clone(), medians));
    }
    (rollups, p50s)
}

/// Where screenshots go: `target/test-artifacts/`.
fn artifacts() -> PathBuf {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let dir = tmp.parent().unwrap_or(tmp).join("test-artifacts");
    std::fs::create_dir_all(&dir).expect("create test-artifacts");
    dir
}

/// Runs headless Chromium with a fresh profile and the given extra arguments.
async fn chromium(args: &[String]) -> std::process::Output {
    let profile = tempfile::tempdir().expect("chromium profile dir");
    let mut cmd = tokio::process::Command::new("chromium");
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
    ])
    .arg(format!("--user-data-dir={}", profile.path().display()))
    .args(args)
    .stdin(Stdio::null())
    .kill_on_drop(true);
    let out = cmd.output().await;
    out.unwrap_or_else(|e| {
        panic!("could not run `chromium` ({e}): install the Debian package `chromium` (scripts/test.sh installs it)")
    })
}

/// The value of every `name="..."` attribute in `html`.
fn attribute_values<'a>(html: &'a str, name: &str) -> Vec<&'a str> {
    let needle = format!(" {name}=\"");
    html.match_indices(&needle)
        .filter_map(|(at, _)| {
            let rest = &html[at + needle.len()..];
            rest.find('"').map(|end| &rest[..end])
        })
        .collect()
}

/// Width and height from a PNG's IHDR chunk.
fn png_size(bytes: &[u8]) -> (u32, u32) {
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    let be = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    (be(16), be(20))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_page_of_a_live_demo_renders_in_chromium_and_its_metrics_pass_promtool() {
    if !crate::support::tool_available("chromium", &[], "apt-get install -y chromium") {
        return;
    }
    let db = PgTestDb::create().await;
    let store = vigil::io::store::open(&db.url).await.expect("open postgres");
    store.migrate().await.expect("migrate");
    let here = demo_targets(HERE);
    let seeded: Vec<Target> = here.iter().filter(|t| t.model != GEMINI_MODEL && !t.model.is_empty()).cloned().collect();
    let (rollups, p50s) = history(&seeded, Utc::now());
    assert_eq!(p50s.len(), 7, "every demo target but Gemini has a profile to seed from");
    store.upsert_rollups(&rollups).await.expect("seed a week of rollups");

    let there = Daemon::start(THERE, &db.url, None);
    let daemon = Daemon::start(HERE, &db.url, Some("sk-test-status-page-token"));
    let http = reqwest::Client::new();

    // Wait (bounded) until every local target has been probed, the other region's samples are
    // read back from the shared database, and the credit balance has its first reading.
    let fetch = || async {
        match http.get(daemon.url("/")).send().await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    };
    let ready = |page: &String| {
        page.matches(&format!("data-label=\"{THERE}\"><span class=\"pill")).count() >= here.len()
            && !page.contains("no probe yet")
            && !page.contains("no reading yet")
            && page.matches("<polyline").count() >= seeded.len()
    };
    let page = crate::support::settle(std::time::Duration::from_secs(60), fetch, ready).await;
    assert!(page.contains("<polyline"), "page never got ready:\n{page}\n--- log ---\n{}", daemon.log());

    let dom = chromium(&["--dump-dom".to_string(), daemon.url("/")]).await;
    assert!(dom.status.success(), "chromium --dump-dom failed: {}", String::from_utf8_lossy(&dom.stderr));
    let dom = String::from_utf8(dom.stdout).expect("DOM is UTF-8");
    assert!(dom.contains("<table class=\"grid\">"), "{dom}");

    // Every target of this region, with both regions' columns.
    for t in &here {
        assert!(dom.contains(&format!("<span class=\"provider\">{}</span>", t.provider)), "{} missing:\n{dom}", t);
        // A plain-HTTP target (demo-status) has no model name to show.
        if !t.model.is_empty() {
            assert!(dom.contains(&format!("<span class=\"model\">{}</span>", t.model)), "{} missing", t);
        }
        if let Some(route) = &t.route {
            assert!(dom.contains(&format!("<span class=\"route\">via {route}</span>")), "{} missing", t);
        }
    }
    assert!(dom.contains(&format!("<th scope=\"col\">{HERE} <span class=\"muted\">(this instance)</span></th>")));
    assert!(dom.contains(&format!("<th scope=\"col\">{THERE}</th>")), "{dom}");
    assert!(
        dom.matches(&format!("data-label=\"{THERE}\"><span class=\"pill")).count() >= here.len(),
        "the other region's latest probe of each target is shown:\n{dom}"
    );

    // Last TTFT/TTFB figures against the baseline: a week of history gives a P95; Gemini's is still young.
    let ttft_figures = dom.matches("<span class=\"k\">TTFT</span> <b class=\"v").count();
    assert!(ttft_figures >= 2 * here.len(), "a TTFT figure per target and region:\n{dom}");
    let known = dom.matches("<span class=\"base\">P95 ").count() - dom.matches("<span class=\"base\">P95 — (").count();
    assert!(known >= seeded.len(), "a TTFT P95 for each target with a week of history:\n{dom}");
    assert!(dom.contains("P95 — ("), "a baseline without enough samples is a dash with its count:\n{dom}");
    assert!(dom.contains("samples, need 300)"));
    assert!(dom.contains("breaker closed") || dom.contains("breaker open") || dom.contains("breaker half_open"));

    // Sparklines: one per seeded target, spanning the stored week, with the seeded hourly medians
    // of the hours inside the window the page was rendered for.
    assert!(dom.matches("<svg class=\"spark\"").count() >= seeded.len(), "{dom}");
    let rendered = attribute_values(&dom, "datetime").first().copied().expect("page time").to_string();
    let rendered: DateTime<Utc> = rendered.parse().expect("RFC 3339 page time");
    let window_start = rendered.duration_trunc(Duration::hours(1)).expect("hour") - Duration::hours(167);
    for (t, medians) in &p50s {
        let medians: Vec<f64> = medians.iter().filter(|(hour, _)| *hour >= window_start).map(|(_, v)| *v).collect();
        let lo = medians.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = medians.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let latest = medians.last().copied().expect("seeded hours");
        let label =
            format!("{} hours with data, lowest {}, highest {}, latest {}", medians.len(), ms(lo), ms(hi), ms(latest));
        assert!(dom.contains(&label), "{t}: sparkline should say {label:?}:\n{dom}");
    }
    assert!(dom.contains("no hourly data yet"), "Gemini has no stored history yet");

    // Credit: the demo key's balance against its minimum. It starts at $2.50 (about 5 hours from
    // empty, so the demo chain shows the credit demotion): under the $5 minimum, marked low.
    assert!(dom.contains("<h2>Credit</h2>"));
    let credit_row =
        dom.split("<tr class=\"low\"><th scope=\"row\">demo-llama</th>").nth(1).expect("demo-llama credit row, low");
    assert!(credit_row.starts_with("<td class=\"usd\">$2."), "{credit_row}");
    assert!(credit_row.contains("below minimum"), "{credit_row}");
    assert!(credit_row.contains("<td class=\"usd\">$5.00</td>"), "minimum shown: {credit_row}");

    // Self-contained: nothing is loaded from anywhere, no script runs.
    for value in attribute_values(&dom, "src").into_iter().chain(attribute_values(&dom, "href")) {
        assert!(!value.contains("://") && !value.starts_with("//"), "external reference {value:?}");
    }
    assert!(!dom.contains("<script") && !dom.contains("<link"), "{dom}");
    assert!(dom.contains("http-equiv=\"refresh\" content=\"10\""), "reloads itself (2 s interval, bounded to 10 s)");

    // Screenshots: a phone and a desktop.
    let dir = artifacts();
    for (name, width, height) in [("status-page-phone.png", 412, 915), ("status-page-desktop.png", 1440, 1000)] {
        let path = dir.join(name);
        let _ = std::fs::remove_file(&path);
        let shot = chromium(&[
            format!("--screenshot={}", path.display()),
            format!("--window-size={width},{height}"),
            daemon.url("/"),
        ])
        .await;
        assert!(shot.status.success(), "chromium --screenshot failed: {}", String::from_utf8_lossy(&shot.stderr));
        let png = std::fs::read(&path).expect("screenshot written");
        assert_eq!(png_size(&png), (width, height), "{name}");
        assert!(png.len() > 20_000, "{name} is only {} bytes: a blank page?", png.len());
        println!("status page screenshot: {}", path.display());
    }

    // The same live instance's metrics pass promtool.
    let metrics = http.get(daemon.url("/metrics")).send().await.expect("metrics").text().await.expect("body");
    assert!(metrics.contains(&format!("vigil_probes_total{{model=\"{}\"", here[0].model)), "{metrics}");
    assert!(metrics.contains("vigil_baseline_seconds{metric=\"ttft\""), "seeded baselines are exported: {metrics}");
    promtool::check_metrics(&metrics);

    // `/` needs no token even where `/v1` requires one; both instances stop cleanly.
    let v1 = http.get(daemon.url("/v1/targets")).send().await.expect("v1");
    assert_eq!(v1.status(), 401, "the page was served while /v1 wants the bearer token");
    assert!(daemon.stop().success());
    assert!(there.stop().success());
}
