//! The demo's first minute: `--demo` uses its own database, seeded with a simulated week, so
//! `report`, `baselines`, `thresholds`, the weekly summary (charts with readable axes, looked at
//! in headless Chromium) and the running daemon's status page show real figures at once.

use crate::support::cli::{output, vigil_in};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

fn json(out: &Output) -> serde_json::Value {
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

/// Where screenshots go: `target/test-artifacts/`.
fn artifacts() -> PathBuf {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let dir = tmp.parent().unwrap_or(tmp).join("test-artifacts");
    std::fs::create_dir_all(&dir).expect("create test-artifacts");
    dir
}

async fn screenshot(url: &str, path: &Path, (width, height): (u32, u32)) {
    if !crate::support::tool_available("chromium", &[], "apt-get install -y chromium") {
        return;
    }
    let profile = tempfile::tempdir().expect("chromium profile dir");
    let _ = std::fs::remove_file(path);
    let out = tokio::process::Command::new("chromium")
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars"])
        .args(["--disable-background-networking", "--disable-component-update", "--disable-dev-shm-usage"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--screenshot={}", path.display()))
        .arg(format!("--window-size={width},{height}"))
        .arg(url)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .unwrap_or_else(|e| panic!("could not run `chromium` ({e}): scripts/test.sh installs it"));
    assert!(out.status.success(), "chromium: {}", String::from_utf8_lossy(&out.stderr));
    let png = std::fs::read(path).expect("screenshot written");
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    assert!(png.len() > 20_000, "{} is only {} bytes: a blank page?", path.display(), png.len());
}

/// The PNG charts inside the weekly HTML, decoded to RGB.
fn charts(html: &str) -> Vec<(u32, u32, Vec<u8>)> {
    use base64::Engine;
    html.match_indices("src=\"data:image/png;base64,")
        .map(|(at, m)| {
            let rest = &html[at + m.len()..];
            let data = &rest[..rest.find('"').expect("end of data URI")];
            let bytes = base64::engine::general_purpose::STANDARD.decode(data).expect("base64");
            let mut reader = png::Decoder::new(std::io::Cursor::new(bytes)).read_info().expect("png");
            let mut buf = vec![0; reader.output_buffer_size().expect("size")];
            let info = reader.next_frame(&mut buf).expect("frame");
            (info.width, info.height, buf)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_commands_with_demo_use_their_own_seeded_database() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cmd = vigil_in(dir.path());
    cmd.args(["report", "--demo", "--json"]);
    let report = json(&output(cmd).await);
    let stderr_free = !dir.path().join("vigil.db").exists();
    assert!(stderr_free, "the real default database is never created by --demo");
    assert!(dir.path().join("vigil-data/vigil-demo.db").exists(), "the demo's own database");
    let rows = report["rows"].as_array().expect("rows");
    let demo_targets = vigil::run::demo::history::demo_targets("local");
    assert_eq!(rows.len(), demo_targets.len());
    for r in rows.iter().filter(|r| r["provider"] != "demo-status") {
        assert!(r["ttft_p95_ms"].as_f64().is_some_and(|v| v > 50.0), "a week of P95: {r}");
        assert!(r["samples"].as_u64().is_some_and(|n| n > 1_000), "{r}");
    }

    let mut cmd = vigil_in(dir.path());
    cmd.args(["baselines", "--demo", "--json"]);
    let baselines = json(&output(cmd).await);
    let ttfb: Vec<&serde_json::Value> =
        baselines.as_array().expect("array").iter().filter(|b| b["metric"] == "ttfb").collect();
    assert_eq!(ttfb.len(), demo_targets.len());
    assert!(ttfb.iter().all(|b| b["p95"].is_f64() && b["p99"].is_f64()), "P95 and P99 published: {ttfb:?}");

    let mut cmd = vigil_in(dir.path());
    cmd.args(["thresholds", "--demo"]);
    let doc = json(&output(cmd).await);
    let targets = doc["targets"].as_array().expect("targets");
    assert_eq!(targets.len(), demo_targets.len());
    assert!(targets.iter().all(|t| t["failover_ttfb_ms"].is_f64()), "thresholds at once: {targets:?}");
    let chains = doc["chains"].as_array().expect("chains");
    assert_eq!(chains.len(), 1, "the demo's own chain: {chains:?}");
    assert_eq!(chains[0]["name"], vigil::run::demo::DEMO_CHAIN);
    assert_eq!(chains[0]["order"].as_array().map(Vec::len), Some(5), "3 Llama routes, Anthropic, Gemini: {chains:?}");
    credit_demoted(&chains[0]).unwrap_or_else(|e| panic!("{e}"));

    // The table says why a cell is empty instead of a bare dash.
    let mut cmd = vigil_in(dir.path());
    cmd.args(["baselines", "--demo"]);
    let table = output(cmd).await;
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(!text.lines().any(|l| l.split_whitespace().any(|c| c == "-")), "{text}");

    // Breaker history: the past incidents opened breakers that closed again.
    let url = format!("sqlite://{}/vigil-data/vigil-demo.db", dir.path().display());
    let store = vigil::io::store::open(&url).await.expect("open the demo database");
    let now = chrono::Utc::now();
    let transitions =
        store.transitions_between(Some("local"), now - chrono::Duration::days(8), now).await.expect("transitions");
    assert!(
        transitions.iter().filter(|t| t.to_state == vigil::vocab::breaker::State::Open).count() >= 3,
        "{transitions:?}"
    );
    let readings = store.balances("demo-llama", now - chrono::Duration::days(8)).await.expect("credit readings");
    assert!(readings.len() >= 24 * 7, "hourly credit readings for the week: {}", readings.len());

    // The weekly summary: one chart per provider, with text (axis values and days) in each.
    let mut cmd = vigil_in(dir.path());
    cmd.args(["report", "--weekly", "--demo", "--out", "weekly.html"]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let html = std::fs::read_to_string(dir.path().join("weekly.html")).expect("weekly.html");
    let pictures = charts(&html);
    // One per provider with a TTFT: every demo provider but the plain-HTTP status page.
    assert_eq!(pictures.len(), 4, "one chart per streaming demo provider");
    for (w, h, rgb) in &pictures {
        let dark = |x0: u32, x1: u32, y0: u32, y1: u32| {
            (y0..y1)
                .flat_map(|y| (x0..x1).map(move |x| ((y * w + x) * 3) as usize))
                .filter(|&i| rgb[i] < 140 && rgb[i + 1] < 140 && rgb[i + 2] < 140)
                .count()
        };
        assert!(dark(0, 74, 0, h - 44) > 100, "y axis values drawn");
        assert!(dark(74, *w, h - 44, *h) > 100, "day labels drawn");
    }
    let shot = artifacts().join("weekly-report-demo.png");
    screenshot(&format!("file://{}", dir.path().join("weekly.html").display()), &shot, (900, 1600)).await;
}

/// A `vigil run --demo` child with JSON logs; killed when dropped.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `vigil run --demo` in `dir` (its `vigil.toml` written by the caller): the daemon, its HTTP
/// address and the log lines up to "http listening".
fn run_demo(dir: &Path) -> (Daemon, String, Vec<String>) {
    let mut cmd = vigil_in(dir);
    cmd.args(["run", "--demo"]).env("VIGIL_LOG_FORMAT", "json").stdout(Stdio::null()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("vigil starts");
    let stderr = child.stderr.take().expect("stderr");
    let daemon = Daemon(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut log = Vec::new();
    let addr = loop {
        let line =
            rx.recv_timeout(Duration::from_secs(120)).unwrap_or_else(|_| panic!("no address:\n{}", log.join("\n")));
        let v: serde_json::Value = serde_json::from_str(&line).expect("JSON log line");
        log.push(line);
        if v["message"] == "http listening" {
            break v["addr"].as_str().expect("addr").to_string();
        }
    };
    (daemon, addr, log)
}

/// `GET /v1/thresholds?{query}` of a running daemon, parsed (LiteLLM's is YAML, a YAML parser
/// reads the JSON ones too); an error until the daemon has published its first document (503).
async fn thresholds(http: &reqwest::Client, addr: &str, query: &str) -> Result<serde_json::Value, String> {
    let resp = http.get(format!("http://{addr}/v1/thresholds?{query}")).send().await.map_err(|e| e.to_string())?;
    if !resp.status().is_success() {
        return Err(format!("{query}: {}", resp.status()));
    }
    let body = resp.bytes().await.map_err(|e| e.to_string())?;
    serde_norway::from_slice(&body).map_err(|e| format!("{query}: {e}: {}", String::from_utf8_lossy(&body)))
}

/// Whether the demo chain demotes every `demo-llama` route for its draining credit (`credit empty
/// in N h`, N under `balance.demote_within`'s 6) behind every healthy member.
fn credit_demoted(chain: &serde_json::Value) -> Result<(), String> {
    let order = chain["order"].as_array().ok_or_else(|| format!("no order: {chain}"))?;
    let llama: Vec<&serde_json::Value> = order.iter().filter(|e| e["provider"] == "demo-llama").collect();
    let first_llama = order.iter().position(|e| e["provider"] == "demo-llama").unwrap_or(order.len());
    let hours = |e: &serde_json::Value| {
        let reason = e["reason"].as_str().unwrap_or_default();
        let after = reason.split("credit empty in ").nth(1)?;
        let (n, unit) = after.split_once(' ')?;
        let n: f64 = n.parse().ok()?;
        Some(if unit.starts_with("min") { n / 60.0 } else { n })
    };
    let demoted = |e: &&serde_json::Value| e["status"] == "demoted" && hours(e).is_some_and(|h| h > 0.0 && h < 6.0);
    if llama.len() != 3 || !llama.iter().all(demoted) {
        return Err(format!("every demo-llama route demoted for credit: {chain}"));
    }
    if order[first_llama..].iter().any(|e| e["status"] == "healthy") {
        return Err(format!("every healthy member ahead of the demoted Llama routes: {chain}"));
    }
    Ok(())
}

/// Whether every router format has content for chain `chain` (and OpenRouter for the demo's
/// routed Llama): the JSON order, LiteLLM's model group, Portkey's config, OpenRouter's `order`.
async fn every_format_shows(http: &reqwest::Client, addr: &str, chain: &str) -> Result<(), String> {
    let doc = thresholds(http, addr, "format=json").await?;
    let order = doc["chains"].as_array().and_then(|c| c.iter().find(|c| c["name"] == chain)).map(|c| &c["order"]);
    if order.and_then(|o| o.as_array()).is_none_or(|o| o.is_empty()) {
        return Err(format!("json: no order for {chain}: {doc}"));
    }
    let lite = thresholds(http, addr, "format=litellm").await?;
    let group = lite["model_list"].as_array().map_or(0, |l| l.iter().filter(|d| d["model_name"] == chain).count());
    if group == 0 {
        return Err(format!("litellm: no group {chain}: {lite}"));
    }
    let portkey = thresholds(http, addr, "format=portkey").await?;
    if portkey["configs"][chain]["targets"].as_array().is_none_or(|t| t.is_empty()) {
        return Err(format!("portkey: no config {chain}: {portkey}"));
    }
    let openrouter = thresholds(http, addr, "format=openrouter").await?;
    let llama = &openrouter["models"][vigil::run::demo::profiles::LLAMA]["provider"]["order"];
    if llama.as_array().is_none_or(|o| o.is_empty()) {
        return Err(format!("openrouter: no route order for Llama: {openrouter}"));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_demo_shows_baselines_and_sparklines_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("vigil.toml"), "[http]\nlisten = \"127.0.0.1:0\"\n").expect("config");
    let started = Instant::now();
    let (daemon, addr, log) = run_demo(dir.path());
    assert!(log.iter().any(|l| l.contains("seeded 7 days")), "{}", log.join("\n"));
    let http = reqwest::Client::new();
    // A published P95 next to a probe's figures: "P95 312 ms".
    let p95_shown = |page: &str| {
        page.match_indices("P95 ").filter(|(i, _)| page[i + 4..].starts_with(|c: char| c.is_ascii_digit())).count()
    };
    let streaming = vigil::run::demo::history::demo_targets("local").len() - 1;
    let fetch =
        || async { http.get(format!("http://{addr}/")).send().await.expect("status page").text().await.expect("body") };
    let ready = |page: &String| page.contains("<polyline") && p95_shown(page) >= 2 * streaming;
    let page = crate::support::settle(Duration::from_secs(30), fetch, ready).await;
    println!("status page with baselines and sparklines {:.1} s after start", started.elapsed().as_secs_f64());
    // Every streaming target has its TTFT trend and P95s; the plain-HTTP status page has no tokens.
    assert!(p95_shown(&page) >= 2 * streaming, "TTFT and TTFB P95 of every streaming target:\n{page}");
    assert!(page.matches("<polyline").count() >= streaming, "sparklines drawn:\n{page}");
    assert!(page.matches("no hourly data yet").count() <= 1, "{page}");
    assert!(!page.contains("need 300"), "every P95 is published");
    assert!(!dir.path().join("vigil.db").exists(), "never the real default database");
    // Routers: the demo's chain in every format, and OpenRouter's route order, in the first minute.
    let shown = || async { every_format_shows(&http, &addr, vigil::run::demo::DEMO_CHAIN).await };
    let formats = crate::support::settle(Duration::from_secs(20), shown, |r| r.is_ok()).await;
    assert_eq!(formats, Ok(()));
    // The metered provider's credit drains (seeded week and live key alike): the chain demotes it.
    let demoted = || async {
        let doc = thresholds(&http, &addr, "chain=demo").await?;
        credit_demoted(&doc["chains"][0])
    };
    let credit = crate::support::settle(Duration::from_secs(20), demoted, |r| r.is_ok()).await;
    assert_eq!(credit, Ok(()));
    assert!(started.elapsed() < Duration::from_secs(60), "{:?} after start", started.elapsed());
    screenshot(&format!("http://{addr}/"), &artifacts().join("status-page-demo-first-minute.png"), (1440, 1000)).await;
    drop(daemon);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_misbehaving_host_pages_the_log_channel() {
    use vigil::run::app::AppOptions;
    let data = tempfile::tempdir().expect("tempdir");
    let text = format!(
        "[storage]\ndata_dir = \"{}\"\n[http]\nlisten = \"127.0.0.1:0\"\n[probe]\ninterval = \"1s\"\ntimeout = \"900ms\"\n",
        data.path().display()
    );
    let config =
        vigil::config::Config::from_toml(&text, &std::collections::BTreeMap::<String, String>::new()).expect("config");
    // Straight into the hourly failure of the schedule (minute 8), instead of waiting for it.
    let opts = AppOptions { demo: true, demo_elapsed: vigil::run::demo::trouble::FAIL_FROM, ..AppOptions::default() };
    let daemon = crate::support::daemon::spawn_app_with(config, opts).await;
    assert!(data.path().join("vigil-demo.db").exists(), "its own database in the data dir");
    let base = daemon.base.clone();
    let http = reqwest::Client::new();
    let fired = |m: &str| {
        m.lines().any(|l| {
            l.starts_with("vigil_alerts_total{")
                && l.contains(r#"channel="log""#)
                && l.contains(r#"kind="errors""#)
                && !l.ends_with(" 0")
        })
    };
    let scrape =
        || async { http.get(format!("{base}/metrics")).send().await.expect("metrics").text().await.expect("body") };
    let metrics = crate::support::settle(Duration::from_secs(30), scrape, |m| fired(m)).await;
    assert!(fired(&metrics), "the errors alert of demo-mixtral@Anyscale went to the log channel:\n{metrics}");
    assert!(
        metrics.lines().any(|l| l.starts_with("vigil_probes_total{")
            && l.contains(r#"outcome="server_error""#)
            && l.contains(r#"route="Anyscale""#)),
        "{metrics}"
    );
    daemon.stop_within(Duration::from_secs(15)).await;
}

/// A `[[chain]]` naming demo targets: refused without `--demo` (naming the key), accepted by
/// `check-config --demo`, `thresholds --demo` and `run --demo`, where it replaces the demo's own
/// chain and has content in every router format.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_may_name_demo_targets_under_demo() {
    let dir = tempfile::tempdir().expect("tempdir");
    let anthropic = format!("demo-anthropic/{}", vigil::run::demo::profiles::ANTHROPIC_MODEL);
    let together = format!("demo-llama/{}@Together", vigil::run::demo::profiles::LLAMA);
    std::fs::write(
        dir.path().join("vigil.toml"),
        format!("[http]\nlisten = \"127.0.0.1:0\"\n[[chain]]\nname = \"mine\"\ntargets = [\"{anthropic}\", \"{together}\"]\n"),
    )
    .expect("config");

    let mut cmd = vigil_in(dir.path());
    cmd.args(["check-config"]);
    let refused = output(cmd).await;
    assert_eq!(refused.status.code(), Some(2), "{}", String::from_utf8_lossy(&refused.stderr));
    let why = format!("{}{}", String::from_utf8_lossy(&refused.stdout), String::from_utf8_lossy(&refused.stderr));
    assert!(why.contains(&format!("chain[0].targets[0]: unknown target \"{anthropic}\"")), "{why}");

    let mut cmd = vigil_in(dir.path());
    cmd.args(["check-config", "--demo"]);
    let accepted = output(cmd).await;
    assert_eq!(accepted.status.code(), Some(0), "{}", String::from_utf8_lossy(&accepted.stderr));
    let shown = String::from_utf8_lossy(&accepted.stdout);
    assert!(shown.contains("# --demo adds providers demo-llama,"), "{shown}");
    assert!(shown.contains("no demo chain added"), "{shown}");

    let mut cmd = vigil_in(dir.path());
    cmd.args(["thresholds", "--demo"]);
    let doc = json(&output(cmd).await);
    let names: Vec<&str> =
        doc["chains"].as_array().expect("chains").iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(names, ["mine"], "the configured chain, and no demo chain beside it");
    let order: Vec<&str> =
        doc["chains"][0]["order"].as_array().expect("order").iter().filter_map(|e| e["target"].as_str()).collect();
    assert_eq!(order.len(), 2, "{doc}");

    let (daemon, addr, _log) = run_demo(dir.path());
    let http = reqwest::Client::new();
    let shown = || async { every_format_shows(&http, &addr, "mine").await };
    let formats = crate::support::settle(Duration::from_secs(30), shown, |r| r.is_ok()).await;
    assert_eq!(formats, Ok(()));
    drop(daemon);
}
