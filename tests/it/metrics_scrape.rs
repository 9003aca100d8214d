//! What one scrape costs Prometheus at 1,000 targets: size and series per target of each
//! `metrics.detail` (`compact`, the default `standard`, `histograms`, `full`), and promtool's
//! verdict; and the series counts docs/METRICS.md states, equal to a live daemon's scrape.

use crate::support::daemon::{adherent_stream, spawn_app_with, DaemonConfig, Provider};
use crate::support::promtool;

use chrono::{DateTime, Duration, Utc};
use std::collections::BTreeMap;
use vigil::config::Detail;
use vigil::io::metrics::Metrics;
use vigil::run::demo::{Script, StandIn};
use vigil::vocab::sample::Outcome;
use vigil::vocab::sample::Sample;
use vigil::vocab::target::Target;

const TARGETS: usize = 1000;

/// Half plain HTTP targets, half streaming models, with label values of 4–16 bytes (longer
/// provider, model and route names cost proportionally more bytes per series; docs/METRICS.md).
fn targets() -> Vec<Target> {
    (0..TARGETS)
        .map(|i| {
            if i % 2 == 0 {
                Target::new(format!("status-{i}").into(), Default::default(), None, "eu-west-1".into())
            } else {
                Target::new("groq".into(), format!("llama-3.1-8b-{i}").into(), None, "eu-west-1".into())
            }
        })
        .collect()
}

fn sample(t: &Target, at: DateTime<Utc>, outcome: Outcome) -> Sample {
    let streaming = !t.model.is_empty();
    let mut s = Sample::new(t.clone(), at, at);
    s.outcome = outcome;
    s.status = Some(if outcome == Outcome::Ok { 200 } else { 503 });
    s.dns_ms = Some(1.2);
    s.connect_ms = Some(0.4);
    s.tls_ms = Some(12.0);
    s.ttfb_ms = Some(180.0);
    if outcome == Outcome::Ok {
        s.total_ms = Some(if streaming { 900.0 } else { 190.0 });
        if streaming {
            s.ttft_ms = Some(420.0);
            s.tokens_per_s = Some(55.0);
            s.cost_usd = Some(0.000_02);
        }
    }
    s
}

/// Series per target (by the `provider`,`model`,`route` labels) and the instance-level rest.
fn series_per_target(text: &str) -> (BTreeMap<String, usize>, usize) {
    let mut per = BTreeMap::new();
    let mut instance = 0;
    for line in text.lines().filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let Some(labels) = line.split_once('{').map(|(_, rest)| rest) else {
            instance += 1;
            continue;
        };
        let get = |name: &str| {
            let key = format!("{name}=\"");
            labels.find(&key).map(|i| {
                let rest = &labels[i + key.len()..];
                rest[..rest.find('"').unwrap_or(0)].to_string()
            })
        };
        match (get("provider"), get("model")) {
            (Some(p), Some(m)) => *per.entry(format!("{p}/{m}")).or_insert(0) += 1,
            _ => instance += 1,
        }
    }
    (per, instance)
}

/// A day in the life of 1,000 targets: every target probed, baselines and breakers published,
/// one in ten streaming targets failed once before recovering.
fn exposition(detail: Detail) -> String {
    let m = Metrics::with_detail("eu-west-1", detail).expect("registry");
    m.register_alert_channels(&["slack".to_string(), "pagerduty".to_string()]);
    let t0 = Utc::now() - Duration::minutes(10);
    let all = targets();
    for t in &all {
        m.register_target(t);
    }
    for (i, t) in all.iter().enumerate() {
        if i % 20 == 1 {
            m.observe(&sample(t, t0, Outcome::Timeout));
        }
        m.observe(&sample(t, t0 + Duration::minutes(1), Outcome::Ok));
        for metric in ["ttfb", "ttft"] {
            if metric == "ttft" && t.model.is_empty() {
                continue;
            }
            for (q, v) in [("0.5", 0.2), ("0.95", 0.4), ("0.99", 0.7)] {
                m.set_baseline(t, metric, q, Some(v));
            }
        }
        m.set_circuit(t, 0);
    }
    m.set_stored(2 * TARGETS as u64);
    m.render()
}

/// Checks the series count of every target: at most `streaming` for a streaming target that never
/// failed (one more per failure outcome seen), and the average; returns (series, worst).
fn check_per_target(text: &str, streaming_max: usize) -> (usize, usize) {
    let (per, instance) = series_per_target(text);
    assert_eq!(per.len(), TARGETS, "every target exported");
    let total: usize = per.values().sum();
    let worst = per.values().copied().max().unwrap_or(0);
    for (target, n) in &per {
        let model = target.split_once('/').map_or("", |(_, m)| m);
        let ever_failed = !model.is_empty() && text.contains(&format!("model=\"{model}\",outcome=\"timeout\""));
        let allowed = streaming_max + usize::from(ever_failed);
        assert!(*n <= allowed, "{target}: {n} series, at most {allowed} expected");
    }
    println!(
        "{} bytes, {} series ({:.1} per target, worst {worst}), {instance} instance-level",
        text.len(),
        total + instance,
        total as f64 / TARGETS as f64
    );
    (total, worst)
}

#[test]
fn compact_scrape_at_1000_targets_is_under_1_mb_and_10_series_per_target() {
    let text = exposition(Detail::Compact);
    let (total, _) = check_per_target(&text, 10);
    assert!(text.len() <= 1_000_000, "one scrape is {} bytes", text.len());
    assert!(total <= 10 * TARGETS, "{total} series over {TARGETS} targets");
    for absent in [
        "vigil_probe_ttft_seconds_bucket",
        "vigil_probe_duration_seconds",
        "vigil_probe_last_status",
        "q=\"0.5\"",
        "phase=\"dns\"",
    ] {
        assert!(!text.contains(absent), "{absent} is not in the compact exposition");
    }
    for present in [
        "vigil_probe_success{",
        "vigil_probe_last_success_timestamp_seconds{",
        "q=\"0.95\"",
        "phase=\"ttft\"",
        "phase=\"ttfb\"",
        "vigil_samples_stored_total{region=\"eu-west-1\"} 2000",
        "vigil_alerts_total{channel=\"pagerduty\",kind=\"breaker_open\",region=\"eu-west-1\"} 0",
        "vigil_alert_delivery_failures_total{channel=\"slack\",region=\"eu-west-1\"} 0",
        "vigil_alerts_abandoned_total{channel=\"slack\",region=\"eu-west-1\"} 0",
    ] {
        assert!(text.contains(present), "{present} missing");
    }
    promtool::check_metrics(&text);
}

#[test]
fn standard_scrape_at_1000_targets_has_what_the_dashboards_show() {
    let text = exposition(Detail::Standard);
    let (total, _) = check_per_target(&text, 17);
    assert!(total <= 17 * TARGETS, "{total} series over {TARGETS} targets");
    assert!(text.len() <= 1_600_000, "one scrape is {} bytes", text.len());
    for present in
        ["phase=\"dns\"", "phase=\"tls\"", "vigil_probe_tokens_per_second{", "vigil_probe_last_status{", "q=\"0.5\""]
    {
        assert!(text.contains(present), "{present} missing");
    }
    for absent in ["vigil_probe_ttft_seconds_bucket", "q=\"0.99\"", "vigil_probes_skipped_total"] {
        assert!(!text.contains(absent), "{absent} is not in the standard exposition");
    }
    promtool::check_metrics(&text);
}

#[test]
fn histogram_detail_adds_5_bucket_histograms_to_standard() {
    let text = exposition(Detail::Histograms);
    let (total, _) = check_per_target(&text, 33);
    assert!(total <= 33 * TARGETS, "{total} series over {TARGETS} targets");
    assert!(text.contains("vigil_probe_ttft_seconds_bucket{") && text.contains("le=\"0.2\""), "LLM buckets");
    // The per-target latency buckets (instance histograms have finer ones of their own).
    let full = text.lines().any(|l| l.starts_with("vigil_probe_ttft_seconds_bucket{") && l.contains("le=\"0.025\""));
    assert!(!full, "not the full 22 buckets");
    assert!(text.contains("phase=\"ttfb\"") && text.contains("phase=\"dns\""), "every level keeps the one below");
    promtool::check_metrics(&text);
}

#[test]
fn full_detail_keeps_every_series_and_passes_promtool() {
    let text = exposition(Detail::Full);
    let (per, _) = series_per_target(&text);
    let total: usize = per.values().sum();
    println!("full: {} bytes, {:.1} series per target", text.len(), total as f64 / TARGETS as f64);
    for present in [
        "vigil_probe_duration_seconds_bucket{",
        "vigil_probe_last_status{",
        "vigil_probe_tokens_per_second{",
        "q=\"0.99\"",
        "phase=\"dns\"",
        "le=\"0.025\"",
        "vigil_probes_skipped_total{",
    ] {
        assert!(text.contains(present), "{present} missing");
    }
    assert!(total > 50 * TARGETS, "full detail is the heavy one: {total} series");
    promtool::check_metrics(&text);
}

/// The series counts docs/METRICS.md states per `metrics.detail`: (per streaming target, per
/// plain `http` target), read from its table.
fn documented_counts() -> BTreeMap<&'static str, (usize, usize)> {
    let doc = std::fs::read_to_string(format!("{}/docs/METRICS.md", env!("CARGO_MANIFEST_DIR"))).expect("METRICS.md");
    let mut out = BTreeMap::new();
    for level in ["compact", "standard", "histograms", "full"] {
        let row = doc
            .lines()
            .find(|l| l.starts_with(&format!("| `{level}`")))
            .unwrap_or_else(|| panic!("METRICS.md has no table row for `{level}`"));
        let cells: Vec<usize> = row.split('|').filter_map(|c| c.trim().parse().ok()).collect();
        assert!(cells.len() >= 2, "the `{level}` row states two counts: {row}");
        out.insert(level, (cells[0], cells[1]));
    }
    out
}

/// A running daemon with `detail`, probing a streaming and a plain target over TLS on
/// `localhost` (so every phase happens: DNS, connect, TLS), priced, with baselines from the
/// first sample: its scrape once every series a healthy target can have exists.
async fn live_scrape(detail: &str) -> String {
    let body = adherent_stream();
    let (standin, cert) = StandIn::start_tls(move |r| {
        if r.path.ends_with("/chat/completions") {
            // Events 5 ms apart: the stream outlasts its first token, so tokens/s exists.
            Script::sse(&body, std::time::Duration::from_millis(5))
        } else {
            Script::json(200, b"{\"status\":\"ok\"}")
        }
    })
    .await
    .expect("TLS stand-in");
    let dir = tempfile::tempdir().expect("tempdir");
    let price = toml::Value::Table(
        [
            ("input_per_mtok".to_string(), toml::Value::from(1.0)),
            ("output_per_mtok".to_string(), toml::Value::from(1.0)),
        ]
        .into_iter()
        .collect(),
    );
    let config = DaemonConfig::sqlite(dir.path())
        .region("eu-west-1")
        .key("sk-test-series")
        .set("metrics.detail", detail)
        .set("baseline.min_samples_p50", 1)
        .set("baseline.min_samples_p95", 1)
        .set("baseline.min_samples_p99", 1)
        .provider(Provider::openai("llm", &format!("{}/v1", standin.base_url())).set("price", price))
        .provider(Provider::http("status", &format!("{}/health", standin.base_url())))
        .build();
    let options = vigil::run::app::AppOptions { extra_roots: vec![cert], ..Default::default() };
    let daemon = spawn_app_with(config, options).await;
    let complete = |text: &String| {
        let (per, _) = series_per_target(text);
        let of = |target: &str, needle: &str| {
            text.lines().any(|l| l.starts_with(needle) && l.contains(&format!("provider=\"{target}\"")))
        };
        per.len() == 2
            && ["llm", "status"].iter().all(|t| {
                of(t, "vigil_probe_interval_seconds{")
                    && of(t, "vigil_circuit_state{")
                    && text.lines().any(|l| {
                        l.starts_with("vigil_probes_total{")
                            && l.contains(&format!("provider=\"{t}\""))
                            && l.contains("outcome=\"ok\"")
                            && l.rsplit(' ').next().and_then(|v| v.parse::<u64>().ok()).is_some_and(|n| n >= 2)
                    })
                    && text.lines().any(|l| {
                        l.starts_with("vigil_baseline_seconds{metric=\"ttfb\"")
                            && l.contains(&format!("provider=\"{t}\""))
                    })
            })
            && of("llm", "vigil_probe_cost_usd_total{")
            && text.lines().any(|l| l.starts_with("vigil_baseline_seconds{metric=\"ttft\""))
    };
    let text = crate::support::settle(std::time::Duration::from_secs(30), || daemon.scrape(), &complete).await;
    daemon.stop().await;
    assert!(complete(&text), "the targets never had every series ({detail}):\n{text}");
    let failed: Vec<&str> =
        text.lines().filter(|l| l.starts_with("vigil_probes_total{") && !l.contains("outcome=\"ok\"")).collect();
    assert!(failed.is_empty(), "a probe failed, the counts would include its outcome: {failed:?}");
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_series_counts_are_a_live_daemons() {
    let documented = documented_counts();
    for (level, (streaming, plain)) in documented {
        let text = live_scrape(level).await;
        let (per, _) = series_per_target(&text);
        let live = (per.get("llm/m").copied().unwrap_or(0), per.get("status/").copied().unwrap_or(0));
        assert_eq!(live, (streaming, plain), "`{level}`: docs/METRICS.md says {streaming} per streaming and {plain} per plain target, a live scrape has {live:?}:\n{text}");
        promtool::check_metrics(&text);
    }
}
