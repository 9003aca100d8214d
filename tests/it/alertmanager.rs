//! The Alertmanager channel against a real Alertmanager process (Debian `prometheus-alertmanager`)
//! on loopback: an incident fires with the documented labels, is silenced with `amtool`, is
//! re-posted before it would time out, and resolves.

use crate::support::{eventually, settle};

use chrono::{DateTime, Utc};
use secrecy::SecretString;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use uuid::Uuid;
use vigil::config::AlertmanagerConfig;
use vigil::decide::alert::rules::{AlertEngine, BaselineP95, Elsewhere, Round, RoundProbe};
use vigil::decide::alert::settings::RuleConfig;
use vigil::decide::alert::Notification;
use vigil::io::notify::alertmanager::AlertmanagerNotifier;
use vigil::io::notify::notifier::Notifier;
use vigil::vocab::sample::{Outcome, Sample};
use vigil::vocab::target::Target;

struct Alertmanager {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Drop for Alertmanager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const INSTALL: &str = "apt-get install -y prometheus-alertmanager";

/// The Alertmanager binary (Debian names it `prometheus-alertmanager`), or `None` after the
/// suite's skip-or-fail rule for a missing tool.
fn binary() -> Option<String> {
    let found = ["prometheus-alertmanager", "alertmanager"]
        .into_iter()
        .find(|b| Command::new(b).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok());
    if found.is_none() {
        crate::support::tool_missing("alertmanager", INSTALL);
    }
    found.map(String::from)
}

/// A ready Alertmanager, or `None` (skipped with the reason printed) when it or amtool is missing.
async fn start() -> Option<Alertmanager> {
    let binary = binary()?;
    if !crate::support::tool_available("amtool", &[], INSTALL) {
        return None;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("free port").local_addr().expect("addr").port();
    let config = dir.path().join("alertmanager.yml");
    std::fs::write(
        &config,
        "route:\n  receiver: blackhole\n  group_by: [incident]\n  group_wait: 1s\nreceivers:\n  - name: blackhole\n",
    )
    .expect("config");
    let child = Command::new(binary)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.path={}", dir.path().join("data").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .arg("--cluster.listen-address=")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("alertmanager starts");
    // Owned at once, so its Drop stops the process on every path (a failed wait included).
    let am = Alertmanager { child, url: format!("http://127.0.0.1:{port}"), _dir: dir };
    let client = reqwest::Client::new();
    let ready = format!("{}/-/ready", am.url);
    eventually(Duration::from_secs(10), "alertmanager to become ready", || async {
        client.get(&ready).send().await.is_ok_and(|r| r.status().is_success()).then_some(())
    })
    .await;
    Some(am)
}

async fn alerts(url: &str) -> Vec<serde_json::Value> {
    reqwest::get(format!("{url}/api/v2/alerts"))
        .await
        .expect("GET alerts")
        .json::<Vec<serde_json::Value>>()
        .await
        .expect("alerts JSON")
}

fn at(secs: i64) -> DateTime<Utc> {
    Utc::now() + chrono::Duration::seconds(secs)
}

/// The engine's own notifications for a target failing twice, then recovering.
fn incident() -> (Notification, Notification) {
    let t = Target { provider: "groq".into(), model: "llama".into(), route: None, region: "eu-test-1".into() };
    let mut e = AlertEngine::new(RuleConfig {
        status_url: Some("http://127.0.0.1:9470/".into()),
        ..RuleConfig::with_defaults("eu-test-1")
    });
    let mut out = Vec::new();
    for (i, outcome) in
        [Outcome::ServerError, Outcome::ServerError, Outcome::Ok, Outcome::Ok, Outcome::Ok].iter().enumerate()
    {
        let mut s = Sample::new(t.clone(), at(i as i64), at(i as i64));
        s.outcome = *outcome;
        let p = RoundProbe { sample: &s, baseline: BaselineP95::default(), elsewhere: Elsewhere::default() };
        out.extend(e.evaluate(&Round { probes: vec![p], ..Round::default() }, at(i as i64)));
    }
    assert_eq!(out.len(), 2, "{out:?}");
    (out[0].clone(), out[1].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incident_fires_is_silenced_with_amtool_stays_open_by_reposting_and_resolves() {
    let Some(am) = start().await else { return };
    let cfg = AlertmanagerConfig {
        name: "alertmanager".into(),
        url: SecretString::from(am.url.clone()),
        repost_every: Duration::from_secs(60),
        ends_after: Duration::from_secs(300),
    };
    let ch = AlertmanagerNotifier::new(&cfg, Duration::from_secs(5)).expect("channel");
    let (firing, resolved) = incident();
    ch.send(&firing, Uuid::new_v4()).await.expect("fired");

    let got = alerts(&am.url).await;
    assert_eq!(got.len(), 1, "{got:?}");
    let a = &got[0];
    let labels = &a["labels"];
    for (k, v) in [
        ("alertname", "vigil_errors"),
        ("severity", "error"),
        ("region", "eu-test-1"),
        ("provider", "groq"),
        ("model", "llama"),
        ("kind", "errors"),
        ("scope", "regional"),
        ("incident", "vigil:groq:llama:"),
    ] {
        assert_eq!(labels[k], v, "label {k}: {a}");
    }
    assert_eq!(labels.get("route"), None, "an empty label is no label in Alertmanager: {a}");
    assert_eq!(a["generatorURL"], "http://127.0.0.1:9470/");
    assert_eq!(a["status"]["state"], "active");
    assert!(a["annotations"]["summary"].as_str().unwrap_or("").starts_with("2 consecutive failed probes"), "{a}");
    let first_end = DateTime::parse_from_rfc3339(a["endsAt"].as_str().expect("endsAt")).expect("time");

    // Silence it the way an operator would.
    let out = Command::new("amtool")
        .args(["silence", "add", "--alertmanager.url", &am.url, "--author", "vigil-test", "--comment", "maintenance"])
        .args(["--duration", "10m", "incident=vigil:groq:llama:"])
        .output()
        .expect("amtool runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let got = alerts(&am.url).await;
    assert_eq!(got[0]["status"]["state"], "suppressed", "{got:?}");
    assert_eq!(got[0]["status"]["silencedBy"].as_array().map(Vec::len), Some(1));

    // Still firing a minute later: re-posted with a later endsAt, so it never times out.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    ch.tick(Utc::now() + chrono::Duration::seconds(61)).await.expect("re-posted");
    let got = alerts(&am.url).await;
    let later = DateTime::parse_from_rfc3339(got[0]["endsAt"].as_str().expect("endsAt")).expect("time");
    assert!(later > first_end, "{later} after {first_end}");
    ch.tick(Utc::now()).await.expect("nothing due");

    // Resolve: endsAt now, and Alertmanager no longer lists it as active.
    ch.send(&resolved, Uuid::new_v4()).await.expect("resolved");
    let inactive = |left: &Vec<serde_json::Value>| {
        left.iter().all(|a| a["status"]["state"] != "active" && a["status"]["state"] != "suppressed")
    };
    let left = settle(Duration::from_secs(3), || alerts(&am.url), inactive).await;
    assert!(
        left.is_empty()
            || left.iter().all(|a| {
                let end = a["endsAt"].as_str().and_then(|e| DateTime::parse_from_rfc3339(e).ok());
                end.is_some_and(|e| e <= Utc::now())
            }),
        "{left:?}"
    );
    let out = Command::new("amtool")
        .args(["alert", "query", "--alertmanager.url", &am.url, "incident=vigil:groq:llama:"])
        .output()
        .expect("amtool runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("vigil_errors"), "{}", String::from_utf8_lossy(&out.stdout));
}
