//! Reload keeps the daemon or changes it, never loses it, and no signal is lost: the real
//! `vigil` binary gets SIGTERM while a reload builds and while it drains (it stops within its
//! bound, exit 0), SIGHUPs while a reload drains (applied once after it), configurations that
//! validate but cannot start or that would empty it (refused, the old daemon untouched and still
//! probing), and `POST /-/reload` with and without its bearer token.

use crate::support::daemon::header_toml;
use crate::support::process::{free_port, Daemon};
use crate::support::{fixture, settle};

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use vigil::run::demo::standin::{Script, StandIn};

/// The stop bound a stop must keep, with the process's own start-up and exit around it.
const STOP_BOUND: Duration = Duration::from_secs(15);
/// The token `POST /-/reload` and `/v1/*` require in these tests.
const TOKEN: &str = "test-reload-token";

/// A config probing `models` at `base` every `timeout` (at least a second); `extra` is appended.
fn config(data: &Path, port: u16, base: &str, models: &[&str], timeout: &str, extra: &str) -> String {
    let interval = if timeout.ends_with("ms") { "1s" } else { timeout };
    let models: Vec<String> = models.iter().map(|m| format!("\"{m}\"")).collect();
    let db = format!("sqlite://{}/vigil.db", data.display());
    header_toml("reload-1", &db, data, port)
        + &format!(
            r#"api_token_env = "VIGIL_TEST_RELOAD_TOKEN"
[probe]
interval = "{interval}"
timeout = "{timeout}"
ttft_timeout = "{timeout}"
[[provider]]
name = "steady"
kind = "openai"
base_url = "{base}/v1"
api_key_env = "VIGIL_TEST_KEY"
models = [{models}]
{extra}"#,
            models = models.join(", ")
        )
}

async fn steady_provider(head_delay: Duration) -> StandIn {
    let body = fixture("openai-chat-stream-usage.sse");
    StandIn::start(move |_| Script::sse(&body, Duration::from_millis(1)).with_head_delay(head_delay))
        .await
        .expect("stand-in")
}

async fn start(data: &Path, text: &str, port: u16) -> Daemon {
    Daemon::start_in(data, text, port, &[("VIGIL_TEST_RELOAD_TOKEN", TOKEN)]).await
}

/// `GET /v1/targets` with the token.
async fn targets(base: &str) -> String {
    let client = reqwest::Client::new();
    let r = client.get(format!("{base}/v1/targets")).bearer_auth(TOKEN).send().await;
    match r {
        Ok(r) => r.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    }
}

/// `POST /-/reload` with `token`: status and JSON answer.
async fn post_reload(base: &str, token: Option<&str>) -> (u16, serde_json::Value) {
    let mut req = reqwest::Client::new().post(format!("{base}/-/reload"));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let r = req.send().await.expect("reload answered");
    let status = r.status().as_u16();
    let text = r.text().await.unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)))
}

/// Returns as a probe reaches the provider: it is then in flight for the provider's head delay.
async fn probe_just_started(provider: &StandIn) {
    let seen = provider.requests().len();
    settle(Duration::from_secs(15), || async { provider.requests().len() }, |n| *n > seen).await;
    assert!(provider.requests().len() > seen, "a probe started");
}

/// A TCP port that accepts connections and never answers: a database host gone dark.
async fn silent_host() -> (u16, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    (port, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_while_a_reload_builds_stops_the_daemon_within_its_bound() {
    let provider = steady_provider(Duration::ZERO).await;
    let data = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let text = config(data.path(), port, &provider.base_url(), &["m1"], "900ms", "");
    let mut vigil = start(data.path(), &text, port).await;
    vigil.eventually("probing", |r| r.is_some_and(|(s, _)| *s == 200), "/readyz").await;

    // The new configuration's database never answers: its build waits on the connection.
    let (dark, _host) = silent_host().await;
    let slow = text.replace(
        &format!("url = \"sqlite://{}/vigil.db\"", data.path().display()),
        &format!("url = \"postgres://vigil@127.0.0.1:{dark}/vigil\""),
    );
    std::fs::write(data.path().join("vigil.toml"), slow).expect("config");
    vigil.signal("-HUP");
    vigil.log_until(Duration::from_secs(5), "reloading the configuration").await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    vigil.signal("-TERM");
    let (took, clean) = vigil.exited_within(STOP_BOUND).await;
    let log = vigil.log();
    assert!(clean, "exit 0 within {STOP_BOUND:?} (took {took:?}); log:\n{log}");
    assert!(!log.contains("configuration reloaded"), "the reload was abandoned; log:\n{log}");
    assert!(log.contains("stopped cleanly"), "the running daemon drained; log:\n{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_while_a_reload_drains_stops_the_daemon_and_never_starts_the_new_one() {
    // Every probe answers after 4 s: the old daemon's drain waits for the one in flight.
    let provider = steady_provider(Duration::from_secs(4)).await;
    let data = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let text = config(data.path(), port, &provider.base_url(), &["m1"], "5s", "");
    let mut vigil = start(data.path(), &text, port).await;
    let next = config(data.path(), port, &provider.base_url(), &["m1", "m2"], "5s", "");
    std::fs::write(data.path().join("vigil.toml"), next).expect("config");
    probe_just_started(&provider).await;
    // As the issue's reviewer did: `kill -HUP; sleep 0.05; kill -TERM`.
    vigil.signal("-HUP");
    tokio::time::sleep(Duration::from_millis(50)).await;
    vigil.signal("-TERM");
    let (took, clean) = vigil.exited_within(STOP_BOUND).await;
    let log = vigil.log();
    assert!(clean, "exit 0 within {STOP_BOUND:?} (took {took:?}); log:\n{log}");
    assert!(!log.contains("configuration reloaded"), "nothing started after the stop; log:\n{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighups_during_a_reload_are_applied_once_after_it() {
    let provider = steady_provider(Duration::from_secs(4)).await;
    let data = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let text = config(data.path(), port, &provider.base_url(), &["m1"], "5s", "");
    let vigil = start(data.path(), &text, port).await;
    let file = data.path().join("vigil.toml");
    std::fs::write(&file, config(data.path(), port, &provider.base_url(), &["m1", "m2"], "5s", "")).expect("config");
    probe_just_started(&provider).await;
    vigil.signal("-HUP");
    vigil.log_until(Duration::from_secs(10), "draining the running daemon to apply it").await;
    // While the old daemon drains (its probe takes 4 s): another config, and two SIGHUPs.
    std::fs::write(&file, config(data.path(), port, &provider.base_url(), &["m1", "m3"], "5s", "")).expect("config");
    vigil.signal("-HUP");
    vigil.signal("-HUP");
    let base = vigil.base.clone();
    let probed = settle(Duration::from_secs(40), || targets(&base), |t| t.contains("\"steady/m3\"")).await;
    assert!(probed.contains("\"steady/m3\""), "the queued reload applied; log:\n{}", vigil.log());
    // Nothing further may come of the two SIGHUPs: a third reload would show within this wait.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (_, clean, log) = vigil.stop().await;
    assert!(clean, "{log}");
    assert_eq!(
        log.matches("reloading the configuration").count(),
        2,
        "one reload, then the queued one once; log:\n{log}"
    );
    assert_eq!(log.matches("configuration reloaded").count(), 2, "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_that_cannot_start_or_would_empty_the_daemon_is_refused_and_the_daemon_carries_on() {
    let provider = steady_provider(Duration::ZERO).await;
    let data = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let text = config(data.path(), port, &provider.base_url(), &["m1"], "900ms", "");
    let vigil = start(data.path(), &text, port).await;
    vigil.eventually("ready", |r| r.is_some_and(|(s, _)| *s == 200), "/readyz").await;

    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let taken_port = taken.local_addr().expect("addr").port();
    let not_a_dir = data.path().join("a-file");
    std::fs::write(&not_a_dir, "not a directory").expect("file");
    let no_provider = text.split("[[provider]]").next().expect("head").to_string();
    let cases = [
        ("an empty file", String::new(), "config"),
        ("a truncated file, comments only", "# vigil\n\n".to_string(), "config"),
        ("every provider dropped", no_provider, "provider"),
        ("http.listen in use", text.replace(&format!(":{port}\""), &format!(":{taken_port}\"")), "http.listen"),
        (
            "storage.data_dir a regular file",
            text.replace(
                &format!("data_dir = \"{}\"", data.path().display()),
                &format!("data_dir = \"{}\"", not_a_dir.display()),
            ),
            "storage.data_dir",
        ),
        ("an invalid value", text.replace("interval = \"1s\"", "interval = \"soon\""), "probe.interval"),
    ];
    let file = data.path().join("vigil.toml");
    for (i, (what, bad, key)) in cases.iter().enumerate() {
        std::fs::write(&file, bad).expect("config");
        let said = format!("new configuration refused: {key}: ");
        if i % 2 == 0 {
            vigil.signal("-HUP");
            let log = settle(Duration::from_secs(10), || async { vigil.log() }, |l| l.matches(&said).count() > 0).await;
            assert!(log.contains(&said), "{what}: refused naming {key}; log:\n{log}");
        } else {
            let (status, answer) = post_reload(&vigil.base, Some(TOKEN)).await;
            assert_eq!(status, 422, "{what}: {answer}");
            assert_eq!(answer["outcome"], "refused", "{what}: {answer}");
            assert_eq!(answer["key"], *key, "{what}: {answer}");
            assert!(answer["reason"].as_str().is_some_and(|r| !r.is_empty()), "{what}: {answer}");
        }
        // The old daemon is untouched: same address, still probing, still ready. Two probes
        // are due in 2 s; the wait is longer because the suite's other daemons and builds share
        // the machine (one CI run under clippy and a fuzz build saw fewer within 5 s).
        let before = provider.requests().len();
        settle(Duration::from_secs(15), || async { provider.requests().len() }, |n| *n > before + 1).await;
        assert!(provider.requests().len() > before + 1, "{what}: probing goes on; log:\n{}", vigil.log());
        let (status, why) = vigil.get("/readyz").await.expect("the old daemon answers");
        assert_eq!(status, 200, "{what}: {why}");
    }
    drop(taken);
    let (_, clean, log) = vigil.stop().await;
    assert!(clean, "{log}");
    assert!(!log.contains("configuration reloaded"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_reload_needs_the_token_and_applies_a_new_address_without_losing_the_daemon() {
    let provider = steady_provider(Duration::ZERO).await;
    let data = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let text = config(data.path(), port, &provider.base_url(), &["m1"], "900ms", "");
    let vigil = start(data.path(), &text, port).await;
    vigil.eventually("ready", |r| r.is_some_and(|(s, _)| *s == 200), "/readyz").await;

    assert_eq!(post_reload(&vigil.base, None).await.0, 401, "no token");
    assert_eq!(post_reload(&vigil.base, Some("wrong")).await.0, 401, "wrong token");
    assert!(!vigil.log().contains("reloading the configuration"), "nothing reloaded without the token");

    // Same address: the listening socket is kept.
    let next = config(data.path(), port, &provider.base_url(), &["m1", "m2"], "900ms", "");
    std::fs::write(data.path().join("vigil.toml"), next).expect("config");
    let (status, answer) = post_reload(&vigil.base, Some(TOKEN)).await;
    assert_eq!((status, answer.clone()), (200, serde_json::json!({"outcome": "applied"})));
    let base = vigil.base.clone();
    let shown = settle(Duration::from_secs(15), || targets(&base), |t| t.contains("\"steady/m2\"")).await;
    assert!(shown.contains("\"steady/m2\""), "log:\n{}", vigil.log());

    // Another address: bound before the old one is let go.
    let moved = free_port();
    let next = config(data.path(), moved, &provider.base_url(), &["m1", "m2"], "900ms", "");
    std::fs::write(data.path().join("vigil.toml"), next).expect("config");
    let (status, _) = post_reload(&vigil.base, Some(TOKEN)).await;
    assert_eq!(status, 200);
    let new_base = format!("http://127.0.0.1:{moved}");
    let ready = crate::support::poll_until(Duration::from_secs(15), || async {
        let r = reqwest::get(format!("{new_base}/readyz")).await.ok()?;
        (r.status().as_u16() == 200).then_some(())
    })
    .await;
    assert!(ready.is_some(), "the new address serves; log:\n{}", vigil.log());
    assert!(reqwest::get(format!("{}/healthz", vigil.base)).await.is_err(), "the old address is let go");
    let (_, clean, log) = vigil.stop().await;
    assert!(clean, "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_daemon_failing_its_last_step_after_the_drain_gives_way_to_the_previous_one() {
    // The one step that runs only after the old daemon has drained is opening the new data
    // directory's spools. The new directory passes the build's check; while the old daemon
    // drains, its `spool` directory is replaced by a regular file. The old daemon's probe hangs
    // (20 s timeout) until the test has done so, so the drain lasts its whole 6 s budget however
    // long the build took: the replacement never races the new daemon's start.
    let hang = Arc::new(AtomicBool::new(true));
    let body = fixture("openai-chat-stream-usage.sse");
    let held = hang.clone();
    let provider = StandIn::start(move |_| {
        let head = if held.load(Ordering::SeqCst) { Duration::from_secs(60) } else { Duration::ZERO };
        Script::sse(&body, Duration::from_millis(1)).with_head_delay(head)
    })
    .await
    .expect("stand-in");
    let data = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let text = config(data.path(), port, &provider.base_url(), &["m1"], "20s", "");
    let vigil = start(data.path(), &text, port).await;
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let next = config(data.path(), port, &provider.base_url(), &["m1", "m2"], "20s", "").replace(
        &format!("data_dir = \"{}\"", data.path().display()),
        &format!("data_dir = \"{}\"", elsewhere.path().display()),
    );
    std::fs::write(data.path().join("vigil.toml"), next).expect("config");
    // The first probe comes at the target's offset inside the 20 s interval.
    settle(Duration::from_secs(30), || async { provider.requests().len() }, |n| *n > 0).await;
    assert!(!provider.requests().is_empty(), "a probe started; log:\n{}", vigil.log());
    vigil.signal("-HUP");
    vigil.log_until(Duration::from_secs(10), "draining the running daemon to apply it").await;
    let spool = elsewhere.path().join("spool");
    std::fs::remove_dir_all(&spool).expect("the build made the spool directory");
    std::fs::write(&spool, "not a directory").expect("a file in its place");
    hang.store(false, Ordering::SeqCst);

    let log = vigil.log_until(Duration::from_secs(20), "starting the previous one again").await;
    assert!(log.contains("new configuration refused: storage.data_dir: "), "the failed step is named; log:\n{log}");
    let base = vigil.base.clone();
    let ready =
        settle(Duration::from_secs(20), || async { vigil.get("/readyz").await.map(|(s, _)| s) }, |s| *s == Some(200))
            .await;
    assert_eq!(ready, Some(200), "the previous configuration runs again on the same address; log:\n{}", vigil.log());
    // Ready comes before the first snapshot is published; the targets show once it is.
    let shown = settle(Duration::from_secs(20), || targets(&base), |t| t.contains("\"steady/")).await;
    assert!(shown.contains("\"steady/m1\"") && !shown.contains("\"steady/m2\""), "the previous targets: {shown}");
    let before = provider.requests().len();
    settle(Duration::from_secs(30), || async { provider.requests().len() }, |n| *n > before).await;
    assert!(provider.requests().len() > before, "probing goes on; log:\n{}", vigil.log());
    let (_, clean, log) = vigil.stop().await;
    assert!(clean, "{log}");
    assert!(!log.contains("configuration reloaded"), "the new configuration never ran; log:\n{log}");
}
