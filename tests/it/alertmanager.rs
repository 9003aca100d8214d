//! The Alertmanager channel against a real Alertmanager process (Debian `prometheus-alertmanager`)
//! on loopback: an incident fires with the documented labels, is silenced with `amtool`, is
//! re-posted before it would time out, and resolves. Then the shipped
//! `deploy/alertmanager/alertmanager.yml` with vigil's own alerts and the Prometheus rules'
//! together: `amtool config routes test` for every kind and severity vigil can send and every
//! rule, one notification per incident, the rules that duplicate a vigil facet inhibited, and the
//! Slack and PagerDuty templates rendering both paths' annotations.

use crate::support::alert_receiver::{Receiver, Reply};
use crate::support::{eventually, settle};

use chrono::{DateTime, Utc};
use secrecy::SecretString;
use serde_norway::Value as Yaml;
use std::collections::{BTreeMap, BTreeSet};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use uuid::Uuid;
use vigil::config::{AlertmanagerConfig, DEFAULT_RUNBOOK_URL};
use vigil::decide::alert::rules::{AlertEngine, BaselineP95, Elsewhere, Round, RoundProbe};
use vigil::decide::alert::settings::RuleConfig;
use vigil::decide::alert::{Alert, AlertKind, Notification, Severity};
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
    let dir = tempfile::tempdir().expect("tempdir");
    let config =
        "route:\n  receiver: blackhole\n  group_by: [incident]\n  group_wait: 1s\nreceivers:\n  - name: blackhole\n";
    start_with(dir, config).await
}

/// A ready Alertmanager running `config`, its files kept in `dir`; `None` as [`start`].
async fn start_with(dir: tempfile::TempDir, config_text: &str) -> Option<Alertmanager> {
    let binary = binary()?;
    if !crate::support::tool_available("amtool", &[], INSTALL) {
        return None;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("free port").local_addr().expect("addr").port();
    let config = dir.path().join("alertmanager.yml");
    std::fs::write(&config, config_text).expect("config");
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
    let t = Target::new("groq".into(), "llama".into(), None, "eu-test-1".into());
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
    let cfg = channel_config(&am.url);
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
        ("facet_severity", "error"),
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
    assert_eq!(a["annotations"]["runbook_url"], format!("{DEFAULT_RUNBOOK_URL}#vigil_errors"), "{a}");
    let description = a["annotations"]["description"].as_str().unwrap_or("");
    assert!(description.starts_with(AlertKind::Errors.meaning()) && description.contains("groq/llama"), "{a}");
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

/// The channel's settings for an Alertmanager at `url`, linking the shipped runbook page.
fn channel_config(url: &str) -> AlertmanagerConfig {
    AlertmanagerConfig {
        name: "alertmanager".into(),
        url: SecretString::from(url.to_string()),
        repost_every: Duration::from_secs(60),
        ends_after: Duration::from_secs(300),
        runbook_url: DEFAULT_RUNBOOK_URL.into(),
    }
}

// ---------------------------------------------------------------- the shipped config

fn repo_file(rel: &str) -> String {
    let path = format!("{}/{rel}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

const SHIPPED: &str = "deploy/alertmanager/alertmanager.yml";
/// Alerts that page whoever runs vigil whatever their severity (the config's first route).
const PLATFORM: [&str; 4] = ["VigilInstanceDown", "VigilAbsent", "VigilNotProbing", "VigilAlertDeliveryFailing"];

/// Where the shipped config must send an alert: the platform pager for a broken vigil, else the
/// region's pager for `critical`/`error` and its Slack channel for `warning`/`info`, the
/// platform pager and `#llm-ops` for a region without routes of its own.
fn expected_receiver(alertname: &str, severity: &str, region: Option<&str>) -> String {
    if PLATFORM.contains(&alertname) {
        return "pagerduty-platform".into();
    }
    let suffix = match region {
        Some("eu-west-1") => Some("eu"),
        Some("us-east-1") => Some("us"),
        Some("ap-southeast-1") => Some("apac"),
        _ => None,
    };
    match (severity, suffix) {
        ("critical" | "error", Some(s)) => format!("pagerduty-{s}"),
        ("critical" | "error", None) => "pagerduty-platform".into(),
        ("warning" | "info", Some(s)) => format!("slack-llm-ops-{s}"),
        ("warning" | "info", None) => "slack-llm-ops".into(),
        (other, _) => panic!("{alertname}: severity {other:?} is not one of PagerDuty's four"),
    }
}

/// `amtool config routes test` on the shipped config: the receiver these labels reach.
fn route_of(labels: &BTreeMap<String, String>) -> String {
    let mut args = vec!["config".to_string(), "routes".into(), "test".into(), format!("--config.file={SHIPPED}")];
    args.extend(labels.iter().filter(|(_, v)| !v.is_empty()).map(|(k, v)| format!("{k}={v}")));
    let out = Command::new("amtool").args(&args).current_dir(env!("CARGO_MANIFEST_DIR")).output().expect("amtool runs");
    assert!(out.status.success(), "amtool {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The labels vigil's channel posts for one facet (through the channel's own `labels`; a
/// chain-level kind carries `chain`).
fn vigil_labels(kind: AlertKind, severity: Severity, region: &str) -> BTreeMap<String, String> {
    let t = Target::new(
        "openrouter".into(),
        "meta-llama/llama-3-70b-instruct".into(),
        Some("DeepInfra".into()),
        region.into(),
    );
    let mut a = match kind {
        // A chain-level facet is about its chain: labelled `chain`, no provider or target.
        AlertKind::ChainSloAtRisk => Alert::for_chain(kind, region, "chat", "x".into()),
        _ => Alert::new(kind, region, "openrouter", Some(&t), "x".into()),
    };
    a.severity = severity;
    let n = Notification::firing("k", region, "openrouter", vec![a.clone()], Utc::now());
    let v = vigil::io::notify::alertmanager::labels(&n, &a);
    v.as_object().expect("labels").iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string())).collect()
}

/// Every alert rule of deploy/prometheus/rules.yml.
fn rules() -> Vec<Yaml> {
    let doc: Yaml = serde_norway::from_str(&repo_file("deploy/prometheus/rules.yml")).expect("rules.yml");
    doc["groups"]
        .as_sequence()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_sequence().cloned().unwrap_or_default())
        .filter(|r| r.get("alert").is_some())
        .collect()
}

/// `{{ $labels.NAME }}` filled from `series`; any other template action (`$value`, queries) dropped.
fn fill(template: &str, series: &BTreeMap<String, String>) -> String {
    let mut out = template.to_string();
    for (k, v) in series {
        out = out.replace(&format!("{{{{ $labels.{k} }}}}"), v);
    }
    while let (Some(a), Some(b)) = (out.find("{{"), out.find("}}")) {
        if b < a {
            break;
        }
        out.replace_range(a..b + 2, "");
    }
    out
}

/// The alert Prometheus raises from rule `name` for a series with `series` labels, as the v2 API
/// takes it: the series' labels, the rule's own labels and annotations filled in.
fn rule_alert(name: &str, series: &[(&str, &str)]) -> serde_json::Value {
    let rule = rules().into_iter().find(|r| r["alert"].as_str() == Some(name)).unwrap_or_else(|| panic!("no {name}"));
    let series: BTreeMap<String, String> = series.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let mut labels = series.clone();
    labels.insert("alertname".into(), name.into());
    for (k, v) in rule["labels"].as_mapping().expect("labels") {
        labels.insert(k.as_str().expect("key").into(), fill(v.as_str().expect("label"), &series));
    }
    labels.retain(|_, v| !v.is_empty());
    let annotations: BTreeMap<String, String> = rule["annotations"]
        .as_mapping()
        .expect("annotations")
        .iter()
        .map(|(k, v)| (k.as_str().expect("key").into(), fill(v.as_str().expect("annotation"), &series)))
        .collect();
    serde_json::json!({"labels": labels, "annotations": annotations, "startsAt": Utc::now().to_rfc3339(),
        "endsAt": (Utc::now() + chrono::Duration::minutes(10)).to_rfc3339()})
}

#[test]
fn every_alert_vigil_and_the_rules_raise_reaches_the_receiver_its_severity_and_region_choose() {
    if !crate::support::tool_available("amtool", &[], INSTALL) {
        return;
    }
    // vigil: every kind the code defines, with every severity (a rule may raise a kind's).
    for kind in AlertKind::ALL {
        for severity in Severity::ALL {
            for region in ["eu-west-1", "sa-east-1"] {
                let labels = vigil_labels(kind, severity, region);
                let want = expected_receiver(&kind.alertname(), severity.as_str(), Some(region));
                assert_eq!(route_of(&labels), want, "{kind} {} in {region}: {labels:?}", severity.as_str());
            }
        }
    }
    // The Prometheus rules: every alert in rules.yml, with the labels it carries.
    let rules = rules();
    assert!(rules.len() >= 14, "{} rules", rules.len());
    for rule in rules {
        let name = rule["alert"].as_str().expect("alert");
        let severity = rule["labels"]["severity"].as_str().expect("severity");
        let regions: &[Option<&str>] =
            if name == "VigilAbsent" { &[None] } else { &[Some("us-east-1"), Some("sa-east-1")] };
        for region in regions {
            let mut series = vec![("provider", "openrouter"), ("model", "m"), ("route", "DeepInfra"), ("job", "vigil")];
            if let Some(r) = *region {
                series.push(("region", r));
            }
            let alert = rule_alert(name, &series);
            let labels: BTreeMap<String, String> = serde_json::from_value(alert["labels"].clone()).expect("labels");
            assert!(labels["incident"].starts_with("vigil:"), "{name}: {labels:?}");
            assert_eq!(route_of(&labels), expected_receiver(name, severity, *region), "{name}: {labels:?}");
        }
    }
}

/// The shipped config with its receivers pointed at `hooks` (Slack's URL file and PagerDuty's
/// events URL) and `group_wait` cut from 30 s to 1 s; nothing else changes.
fn shipped_for_test(hooks: &Receiver, dir: &std::path::Path) -> String {
    let shipped = repo_file(SHIPPED);
    let secrets = dir.join("secrets");
    std::fs::create_dir_all(&secrets).expect("secrets dir");
    std::fs::write(secrets.join("slack-llm-ops.url"), hooks.url("/slack")).expect("slack url");
    for region in ["eu", "us", "apac", "platform"] {
        std::fs::write(secrets.join(format!("pagerduty-{region}.key")), format!("key-{region}")).expect("key");
    }
    let text = shipped
        .replace("/etc/alertmanager/secrets/", &format!("{}/", secrets.display()))
        .replace("group_wait: 30s", "group_wait: 1s")
        .replace("      - &pagerduty\n", &format!("      - &pagerduty\n        url: {}\n", hooks.url("/pagerduty")));
    for (what, changed) in [
        ("secret paths", !text.contains("/etc/alertmanager/")),
        ("group_wait", text.contains("group_wait: 1s")),
        ("PagerDuty URL", text.contains("/pagerduty\n")),
    ] {
        assert!(changed, "{SHIPPED} no longer has the {what} this test rewrites");
    }
    text
}

async fn post_alerts(url: &str, alerts: &[serde_json::Value]) {
    let resp =
        reqwest::Client::new().post(format!("{url}/api/v2/alerts")).json(&alerts).send().await.expect("POST alerts");
    assert!(resp.status().is_success(), "{}", resp.text().await.unwrap_or_default());
}

/// A firing vigil notification about one target with these facets (kind, facet severity).
fn vigil_incident(model: &str, facets: &[(AlertKind, Severity)]) -> Notification {
    let region = "eu-west-1";
    let t = Target::new("openrouter".into(), model.into(), Some("DeepInfra".into()), region.into());
    let alerts: Vec<Alert> = facets
        .iter()
        .map(|(kind, severity)| {
            let mut a = Alert::new(*kind, region, "openrouter", Some(&t), format!("{kind} on {model}"));
            a.severity = *severity;
            a.since = Utc::now();
            a
        })
        .collect();
    let mut n = Notification::firing(format!("n-{model}"), region, "openrouter", alerts, Utc::now());
    n.incident = format!("vigil:openrouter:{model}:DeepInfra");
    n.subject = t.id();
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_config_pages_an_incident_once_with_every_facet_and_renders_both_paths() {
    let hooks = Receiver::start(Reply::new(200, "ok")).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = shipped_for_test(&hooks, dir.path());
    let Some(am) = start_with(dir, &config).await else { return };
    let model = "meta-llama/llama-3-70b-instruct";
    // vigil's incident: two error facets and a warning one, as the engine groups them.
    let n = vigil_incident(
        model,
        &[
            (AlertKind::Errors, Severity::Error),
            (AlertKind::BreakerOpen, Severity::Error),
            (AlertKind::AdherenceFailed, Severity::Warning),
        ],
    );
    let ch = AlertmanagerNotifier::new(&channel_config(&am.url), Duration::from_secs(5)).expect("channel");
    ch.send(&n, Uuid::new_v4()).await.expect("posted");
    // The Prometheus rules about the same target, as Prometheus posts them in one batch: two
    // duplicate vigil's facets, the drift alert has no vigil twin in this incident.
    let series = [
        ("provider", "openrouter"),
        ("model", model),
        ("route", "DeepInfra"),
        ("region", "eu-west-1"),
        ("job", "vigil"),
        ("instance", "vigil-eu:9470"),
    ];
    let batch: Vec<serde_json::Value> = ["VigilCircuitOpen", "VigilProbeFailures", "VigilProviderDrift"]
        .iter()
        .map(|r| rule_alert(r, &series))
        .collect();
    post_alerts(&am.url, &batch).await;

    let incident = format!("vigil:openrouter:{model}:DeepInfra");
    let pages = eventually(Duration::from_secs(30), "PagerDuty and Slack notifications", || async {
        let got = hooks.requests();
        let pd: Vec<_> = got.iter().filter(|r| r.path == "/pagerduty").map(|r| r.json()).collect();
        let slack: Vec<_> = got.iter().filter(|r| r.path == "/slack").map(|r| r.json()).collect();
        (!pd.is_empty() && !slack.is_empty()).then_some((pd, slack))
    })
    .await;
    let (pd, slack) = pages;
    // One page for the incident, on the region's pager, with all three facets.
    assert_eq!(pd.len(), 1, "{pd:?}");
    let event = &pd[0];
    assert_eq!(event["routing_key"], "key-eu", "{event}");
    assert_eq!(event["payload"]["severity"], "error", "{event}");
    let summary = event["payload"]["summary"].as_str().expect("summary");
    assert!(
        summary.starts_with("[FIRING:3]") && summary.contains(&n.subject) && summary.ends_with("(eu-west-1)"),
        "{summary}"
    );
    assert_eq!(event["payload"]["custom_details"]["incident"], incident.as_str(), "{event}");
    let details = event["payload"]["custom_details"]["alerts"].as_str().expect("alerts detail");
    for (kind, severity) in [("errors", "error"), ("breaker_open", "error"), ("adherence_failed", "warning")] {
        assert!(details.contains(&format!("vigil_{kind} ({severity}): {kind} on {model}")), "{kind}: {details}");
        assert!(details.contains(&format!("Runbook: {DEFAULT_RUNBOOK_URL}#vigil_{kind}")), "{kind}: {details}");
    }
    assert!(details.contains(AlertKind::BreakerOpen.meaning()), "vigil's description: {details}");
    // Slack: the same incident's rule alerts, the two duplicates inhibited by vigil's facets.
    assert_eq!(slack.len(), 1, "{slack:?}");
    let attachment = &slack[0]["attachments"][0];
    assert_eq!(slack[0]["channel"], "#llm-ops-eu", "{slack:?}");
    let text = attachment["text"].as_str().expect("text");
    assert!(text.contains("*VigilProviderDrift* (warning)"), "{text}");
    assert!(!text.contains("VigilCircuitOpen") && !text.contains("VigilProbeFailures"), "inhibited: {text}");
    let drift = rule_alert("VigilProviderDrift", &series);
    for annotation in ["description", "runbook_url"] {
        let want = drift["annotations"][annotation].as_str().expect("annotation");
        assert!(!want.is_empty() && text.contains(want), "{annotation} {want:?} not rendered: {text}");
    }
    assert!(attachment["title"].as_str().is_some_and(|t| t.starts_with("[FIRING:1]")), "{attachment}");
}

/// Which Prometheus rule says the same as which vigil facet, about the same target or provider.
const DUPLICATES: [(AlertKind, &str); 7] = [
    (AlertKind::BreakerOpen, "VigilCircuitOpen"),
    (AlertKind::Errors, "VigilProbeFailures"),
    (AlertKind::BreakerOpen, "VigilProbeFailures"),
    (AlertKind::ModelUnavailable, "VigilProbeFailures"),
    (AlertKind::LatencyDegraded, "VigilProviderDrift"),
    (AlertKind::CreditLow, "VigilCreditLow"),
    (AlertKind::CreditLow, "VigilCreditExhausted"),
];

/// (source, target) alert names of every inhibit rule in the shipped config whose source is one
/// of vigil's own alerts (`vigil_*`), read from its `alertname` matchers.
fn vigil_inhibitions() -> BTreeSet<(String, String)> {
    let doc: Yaml = serde_norway::from_str(&repo_file(SHIPPED)).expect("alertmanager.yml");
    let names = |matchers: &Yaml| -> Vec<String> {
        matchers
            .as_sequence()
            .into_iter()
            .flatten()
            .filter_map(|m| m.as_str())
            .filter_map(|m| m.strip_prefix("alertname=~").or_else(|| m.strip_prefix("alertname=")))
            .flat_map(|v| v.trim_matches('"').split('|').map(str::to_string).collect::<Vec<_>>())
            .collect()
    };
    let mut out = BTreeSet::new();
    for rule in doc["inhibit_rules"].as_sequence().expect("inhibit_rules") {
        for source in names(&rule["source_matchers"]).into_iter().filter(|s| s.starts_with("vigil_")) {
            for target in names(&rule["target_matchers"]).into_iter().filter(|t| t.starts_with("Vigil")) {
                out.insert((source.clone(), target));
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rule_that_duplicates_a_vigil_facet_is_inhibited_by_it_and_only_for_its_target() {
    // The table below is the config's: a pair added to one must be added to the other.
    let table: BTreeSet<(String, String)> = DUPLICATES.iter().map(|(k, r)| (k.alertname(), r.to_string())).collect();
    let configured: BTreeSet<_> =
        vigil_inhibitions().into_iter().filter(|(s, _)| s != "vigil_region_unhealthy").collect();
    assert_eq!(configured, table, "inhibit rules with a vigil source in {SHIPPED}");
    let hooks = Receiver::start(Reply::new(200, "ok")).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = shipped_for_test(&hooks, dir.path());
    let Some(am) = start_with(dir, &config).await else { return };
    let ch = AlertmanagerNotifier::new(&channel_config(&am.url), Duration::from_secs(5)).expect("channel");
    let mut expected = Vec::new();
    for (i, (kind, rule)) in DUPLICATES.iter().enumerate() {
        // Each pair about a target (and a provider) of its own, so the pairs cannot mix.
        let model = format!("model-{i}");
        let provider = format!("provider-{i}");
        let mut n = vigil_incident(&model, &[(*kind, kind.default_severity())]);
        for a in &mut n.alerts {
            a.provider = provider.clone();
            if *kind == AlertKind::CreditLow {
                // credit_low is about the provider: no model, no route.
                (a.model, a.route, a.target) = (None, None, None);
            }
        }
        ch.send(&n, Uuid::new_v4()).await.expect("vigil's facet posted");
        let twin = [
            ("provider", provider.as_str()),
            ("model", model.as_str()),
            ("route", "DeepInfra"),
            ("region", "eu-west-1"),
        ];
        let elsewhere = [
            ("provider", provider.as_str()),
            ("model", model.as_str()),
            ("route", "Together"),
            ("region", "eu-west-1"),
        ];
        let other_region = [
            ("provider", provider.as_str()),
            ("model", model.as_str()),
            ("route", "DeepInfra"),
            ("region", "us-east-1"),
        ];
        let provider_only = [("provider", provider.as_str()), ("region", "eu-west-1")];
        let credit = *kind == AlertKind::CreditLow;
        post_alerts(&am.url, &[rule_alert(rule, if credit { &provider_only[..] } else { &twin[..] })]).await;
        expected.push((
            provider.clone(),
            rule.to_string(),
            if credit { None } else { Some("DeepInfra") },
            "eu-west-1",
            true,
        ));
        if !credit {
            post_alerts(&am.url, &[rule_alert(rule, &elsewhere)]).await;
            expected.push((provider.clone(), rule.to_string(), Some("Together"), "eu-west-1", false));
        }
        let foreign =
            if credit { vec![("provider", provider.as_str()), ("region", "us-east-1")] } else { other_region.to_vec() };
        post_alerts(&am.url, &[rule_alert(rule, &foreign)]).await;
        expected.push((provider, rule.to_string(), if credit { None } else { Some("DeepInfra") }, "us-east-1", false));
    }
    let got = alerts(&am.url).await;
    for (provider, rule, route, region, inhibited) in expected {
        let a = got
            .iter()
            .find(|a| {
                let l = &a["labels"];
                l["alertname"] == rule.as_str()
                    && l["provider"] == provider.as_str()
                    && l["region"] == region
                    && l["route"].as_str() == route
            })
            .unwrap_or_else(|| panic!("{rule} {provider} {route:?} {region} not in Alertmanager: {got:?}"));
        let by = a["status"]["inhibitedBy"].as_array().map_or(0, Vec::len);
        if inhibited {
            assert_eq!(
                a["status"]["state"], "suppressed",
                "{rule} for {provider} must be inhibited by vigil's facet: {a}"
            );
            assert_eq!(by, 1, "{a}");
        } else {
            assert_eq!(a["status"]["state"], "active", "{rule} {provider} {route:?} {region}: no vigil twin: {a}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incident_that_grows_louder_moves_every_facet_to_its_new_severity_and_ends_the_old_ones() {
    let Some(am) = start().await else { return };
    let ch = AlertmanagerNotifier::new(&channel_config(&am.url), Duration::from_secs(5)).expect("channel");
    let model = "meta-llama/llama-3-70b-instruct";
    ch.send(&vigil_incident(model, &[(AlertKind::LatencyDegraded, Severity::Warning)]), Uuid::new_v4())
        .await
        .expect("first page");
    let mut update =
        vigil_incident(model, &[(AlertKind::Errors, Severity::Error), (AlertKind::LatencyDegraded, Severity::Warning)]);
    update.update = true;
    ch.send(&update, Uuid::new_v4()).await.expect("update");
    let active = |all: &Vec<serde_json::Value>| -> Vec<(String, String, String)> {
        let mut v: Vec<_> = all
            .iter()
            .filter(|a| a["status"]["state"] == "active")
            .map(|a| {
                let l = &a["labels"];
                let s = |k: &str| l[k].as_str().unwrap_or("").to_string();
                (s("alertname"), s("severity"), s("facet_severity"))
            })
            .collect();
        v.sort();
        v
    };
    let want = vec![
        ("vigil_errors".to_string(), "error".to_string(), "error".to_string()),
        ("vigil_latency_degraded".to_string(), "error".to_string(), "warning".to_string()),
    ];
    let got = settle(Duration::from_secs(3), || alerts(&am.url), |all| active(all) == want).await;
    assert_eq!(
        active(&got),
        want,
        "the warning-labelled post is ended, both facets carry the incident's error: {got:?}"
    );
}
