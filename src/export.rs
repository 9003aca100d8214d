//! The router export (`GET /v1/thresholds`, `vigil thresholds`): thresholds and failover rank per target.
//!
//! A pure function of its inputs: baselines, error counts, breaker states and probe costs go in,
//! the SPEC document comes out. `rank` orders the targets serving the same model in this region,
//! best first: closed before half-open before open, then lower error rate, then lower P95 TTFT
//! (unknown last), then lower cost (unknown last).

use crate::baseline::Baseline;
use crate::breaker::State;
use crate::target::Target;
use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize, Serializer};
use std::cmp::Ordering;
use std::time::Duration;

/// Schema version of the document.
pub const SCHEMA_VERSION: u32 = 1;
/// The document expires after this many probe intervals.
pub const EXPIRES_AFTER_INTERVALS: u32 = 3;

/// Document-wide inputs.
#[derive(Debug, Clone)]
pub struct ExportParams {
    /// Region of this instance.
    pub region: String,
    /// When the document is generated.
    pub generated_at: DateTime<Utc>,
    /// Probe interval (`expires_at` = `generated_at` + 3 × interval).
    pub probe_interval: Duration,
    /// Baseline window.
    pub window: Duration,
    /// Router threshold = factor × P95.
    pub failover_factor: f64,
}

/// Everything known about one target over the window.
#[derive(Debug, Clone)]
pub struct TargetStats {
    /// The target (its region is reported).
    pub target: Target,
    /// TTFB baseline.
    pub ttfb: Baseline,
    /// TTFT baseline.
    pub ttft: Baseline,
    /// Tokens/s baseline.
    pub tokens_per_s: Baseline,
    /// Probes in the window, every outcome.
    pub probes: u64,
    /// Failed probes in the window.
    pub errors: u64,
    /// Breaker state now.
    pub breaker: State,
    /// What one probe costs, when known.
    pub cost_per_probe_usd: Option<f64>,
}

/// P50/P95/P99 in the document.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    /// Median.
    pub p50: Option<f64>,
    /// 95th percentile.
    pub p95: Option<f64>,
    /// 99th percentile.
    pub p99: Option<f64>,
}

/// Median only (tokens/s).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Median {
    /// Median.
    pub p50: Option<f64>,
}

/// One target in the document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TargetThresholds {
    /// Stable id `provider/model@route`.
    pub target: String,
    /// Provider name.
    pub provider: String,
    /// Model id.
    pub model: String,
    /// Pinned upstream host, if any.
    pub route: Option<String>,
    /// Region measured from.
    pub region: String,
    /// Probes in the window (every outcome).
    pub samples: u64,
    /// TTFB percentiles, ms.
    pub ttfb_ms: Percentiles,
    /// TTFT percentiles, ms.
    pub ttft_ms: Percentiles,
    /// Generation speed.
    pub tokens_per_s: Median,
    /// Failed probes / probes over the window (null with no probes).
    pub error_rate: Option<f64>,
    /// factor × TTFB P95 (null when the P95 is).
    pub failover_ttfb_ms: Option<f64>,
    /// factor × TTFT P95 (null when the P95 is).
    pub failover_ttft_ms: Option<f64>,
    /// Breaker state.
    pub breaker: State,
    /// Failover order among targets serving the same model here, 1 = best.
    pub rank: u32,
}

/// The thresholds document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Thresholds {
    /// Always 1 for this shape.
    pub schema_version: u32,
    /// When generated.
    #[serde(serialize_with = "rfc3339_secs")]
    pub generated_at: DateTime<Utc>,
    /// When a router should stop trusting it.
    #[serde(serialize_with = "rfc3339_secs")]
    pub expires_at: DateTime<Utc>,
    /// Region of this instance.
    pub region: String,
    /// Baseline window, `7d` style.
    pub window: String,
    /// Router threshold = factor × P95.
    pub failover_factor: f64,
    /// Targets, by model then rank.
    pub targets: Vec<TargetThresholds>,
}

fn rfc3339_secs<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&t.to_rfc3339_opts(SecondsFormat::Secs, true))
}

/// A duration as the config writes it: `7d`, `12h`, `30m` or `45s`.
pub fn format_window(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0 => "0s".into(),
        _ if s % 86_400 == 0 => format!("{}d", s / 86_400),
        _ if s % 3_600 == 0 => format!("{}h", s / 3_600),
        _ if s % 60 == 0 => format!("{}m", s / 60),
        _ => format!("{s}s"),
    }
}

fn error_rate(t: &TargetStats) -> Option<f64> {
    (t.probes > 0).then(|| t.errors.min(t.probes) as f64 / t.probes as f64)
}

/// Ascending with `None` last.
fn cmp_known_first(a: Option<f64>, b: Option<f64>) -> Ordering {
    match (a, b) {
        (Some(x), Some(y)) => x.total_cmp(&y),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

/// Failover order of two targets serving the same model (less = better).
pub fn failover_order(a: &TargetStats, b: &TargetStats) -> Ordering {
    a.breaker
        .cmp(&b.breaker)
        .then_with(|| cmp_known_first(error_rate(a), error_rate(b)))
        .then_with(|| cmp_known_first(a.ttft.p95, b.ttft.p95))
        .then_with(|| cmp_known_first(a.cost_per_probe_usd, b.cost_per_probe_usd))
        .then_with(|| a.target.cmp(&b.target))
}

/// Builds the document; targets from other regions than `params.region` are left out.
pub fn build(params: &ExportParams, targets: &[TargetStats]) -> Thresholds {
    let mut here: Vec<&TargetStats> = targets.iter().filter(|t| t.target.region == params.region).collect();
    here.sort_by(|a, b| a.target.model.cmp(&b.target.model).then_with(|| failover_order(a, b)));
    let factor = params.failover_factor;
    let mut rank = 0;
    let mut out = Vec::with_capacity(here.len());
    for (i, t) in here.iter().enumerate() {
        rank = if i > 0 && here[i - 1].target.model == t.target.model { rank + 1 } else { 1 };
        let pct = |b: &Baseline| Percentiles { p50: b.p50, p95: b.p95, p99: b.p99 };
        out.push(TargetThresholds {
            target: t.target.id(),
            provider: t.target.provider.clone(),
            model: t.target.model.clone(),
            route: t.target.route.clone(),
            region: t.target.region.clone(),
            samples: t.probes,
            ttfb_ms: pct(&t.ttfb),
            ttft_ms: pct(&t.ttft),
            tokens_per_s: Median { p50: t.tokens_per_s.p50 },
            error_rate: error_rate(t),
            failover_ttfb_ms: t.ttfb.p95.map(|p| factor * p),
            failover_ttft_ms: t.ttft.p95.map(|p| factor * p),
            breaker: t.breaker,
            rank,
        });
    }
    let interval = chrono::Duration::from_std(params.probe_interval).unwrap_or(chrono::Duration::zero());
    Thresholds {
        schema_version: SCHEMA_VERSION,
        generated_at: params.generated_at,
        expires_at: params.generated_at + interval * EXPIRES_AFTER_INTERVALS as i32,
        region: params.region.clone(),
        window: format_window(params.window),
        failover_factor: factor,
        targets: out,
    }
}

impl Thresholds {
    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// YAML.
    pub fn to_yaml(&self) -> Result<String, serde_yaml::Error> {
        serde_yaml::to_string(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use serde_json::Value;

    const SPEC_EXAMPLE: &str = r#"{
      "schema_version": 1,
      "generated_at": "2026-11-30T12:00:00Z",
      "expires_at": "2026-11-30T12:03:00Z",
      "region": "eu-west-1",
      "window": "7d",
      "failover_factor": 2.0,
      "targets": [
        {
          "target": "openrouter/meta-llama/llama-3-70b-instruct@DeepInfra",
          "provider": "openrouter", "model": "meta-llama/llama-3-70b-instruct", "route": "DeepInfra",
          "region": "eu-west-1",
          "samples": 10080,
          "ttfb_ms": {"p50": 180.0, "p95": 310.0, "p99": 520.0},
          "ttft_ms": {"p50": 240.0, "p95": 400.0, "p99": 800.0},
          "tokens_per_s": {"p50": 65.0},
          "error_rate": 0.0004,
          "failover_ttfb_ms": 620.0,
          "failover_ttft_ms": 800.0,
          "breaker": "closed",
          "rank": 1
        }
      ]
    }"#;

    const LLAMA: &str = "meta-llama/llama-3-70b-instruct";

    fn params() -> ExportParams {
        ExportParams {
            region: "eu-west-1".into(),
            generated_at: Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).single().expect("valid time"),
            probe_interval: Duration::from_secs(60),
            window: Duration::from_secs(7 * 86_400),
            failover_factor: 2.0,
        }
    }

    fn baseline(count: u64, p50: f64, p95: f64, p99: f64) -> Baseline {
        Baseline { count, p50: Some(p50), p95: Some(p95), p99: Some(p99) }
    }

    fn stats(route: &str, model: &str) -> TargetStats {
        TargetStats {
            target: Target {
                provider: "openrouter".into(),
                model: model.into(),
                route: Some(route.into()),
                region: "eu-west-1".into(),
            },
            ttfb: baseline(10_000, 180.0, 310.0, 520.0),
            ttft: baseline(10_000, 240.0, 400.0, 800.0),
            tokens_per_s: baseline(10_000, 65.0, 80.0, 90.0),
            probes: 10_000,
            errors: 4,
            breaker: State::Closed,
            cost_per_probe_usd: Some(0.00002),
        }
    }

    fn keys(v: &Value) -> Value {
        match v {
            Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), keys(v))).collect()),
            Value::Array(a) => Value::Array(a.iter().map(keys).collect()),
            _ => Value::Null,
        }
    }

    fn ranks(doc: &Thresholds) -> Vec<(String, u32)> {
        doc.targets.iter().map(|t| (t.route.clone().unwrap_or_default(), t.rank)).collect()
    }

    #[test]
    fn the_document_has_the_spec_shape_and_values() {
        let doc = build(&params(), &[stats("DeepInfra", LLAMA)]);
        let got: Value = serde_json::from_str(&doc.to_json()).expect("valid JSON");
        let mut want: Value = serde_json::from_str(SPEC_EXAMPLE).expect("SPEC example parses");
        assert_eq!(keys(&got), keys(&want), "same field names, nesting and order-free structure");
        want["targets"][0]["samples"] = Value::from(10_000);
        assert_eq!(got, want);
        assert!(doc.to_json().contains("\"generated_at\": \"2026-11-30T12:00:00Z\""));
    }

    #[test]
    fn too_few_samples_give_null_percentiles_and_null_thresholds() {
        let mut young = stats("Lepton", LLAMA);
        young.probes = 12;
        young.errors = 0;
        young.ttfb = Baseline { count: 12, p50: None, p95: None, p99: None };
        young.ttft = Baseline { count: 12, p50: None, p95: None, p99: None };
        young.tokens_per_s = Baseline { count: 12, ..Baseline::default() };
        let doc = build(&params(), &[young]);
        let t: Value = serde_json::to_value(&doc.targets[0]).expect("json");
        assert_eq!(t["samples"], 12);
        assert_eq!(t["error_rate"], 0.0);
        for key in ["failover_ttfb_ms", "failover_ttft_ms"] {
            assert!(t[key].is_null(), "{key}");
        }
        assert!(t["ttft_ms"]["p95"].is_null() && t["tokens_per_s"]["p50"].is_null());
    }

    #[test]
    fn breaker_state_ranks_before_error_rate() {
        let mut open = stats("A", LLAMA);
        open.breaker = State::Open;
        open.errors = 0;
        let mut half = stats("B", LLAMA);
        half.breaker = State::HalfOpen;
        half.errors = 0;
        let mut closed = stats("C", LLAMA);
        closed.errors = 900;
        let doc = build(&params(), &[open, half, closed]);
        assert_eq!(ranks(&doc), [("C".into(), 1), ("B".into(), 2), ("A".into(), 3)]);
    }

    #[test]
    fn error_rate_ranks_before_ttft_p95() {
        let mut fast_flaky = stats("A", LLAMA);
        fast_flaky.errors = 50;
        fast_flaky.ttft.p95 = Some(100.0);
        let mut slow_steady = stats("B", LLAMA);
        slow_steady.errors = 1;
        slow_steady.ttft.p95 = Some(900.0);
        let doc = build(&params(), &[fast_flaky, slow_steady]);
        assert_eq!(ranks(&doc), [("B".into(), 1), ("A".into(), 2)]);
    }

    #[test]
    fn ttft_p95_ranks_before_cost_and_unknown_p95_goes_last() {
        let mut unknown = stats("A", LLAMA);
        unknown.ttft.p95 = None;
        unknown.cost_per_probe_usd = Some(0.0);
        let mut slow_cheap = stats("B", LLAMA);
        slow_cheap.ttft.p95 = Some(500.0);
        slow_cheap.cost_per_probe_usd = Some(0.00001);
        let mut fast_dear = stats("C", LLAMA);
        fast_dear.ttft.p95 = Some(300.0);
        fast_dear.cost_per_probe_usd = Some(0.001);
        let doc = build(&params(), &[unknown, slow_cheap, fast_dear]);
        assert_eq!(ranks(&doc), [("C".into(), 1), ("B".into(), 2), ("A".into(), 3)]);
    }

    #[test]
    fn cost_breaks_ties_with_unknown_cost_last() {
        let mut dear = stats("A", LLAMA);
        dear.cost_per_probe_usd = Some(0.002);
        let mut cheap = stats("B", LLAMA);
        cheap.cost_per_probe_usd = Some(0.001);
        let mut unknown = stats("C", LLAMA);
        unknown.cost_per_probe_usd = None;
        let doc = build(&params(), &[dear, unknown, cheap]);
        assert_eq!(ranks(&doc), [("B".into(), 1), ("A".into(), 2), ("C".into(), 3)]);
    }

    #[test]
    fn each_model_is_ranked_on_its_own_and_other_regions_are_left_out() {
        let mixtral = "mistralai/mixtral-8x22b-instruct";
        let mut worse = stats("Together", LLAMA);
        worse.errors = 9;
        let mut elsewhere = stats("Lepton", LLAMA);
        elsewhere.target.region = "us-east-1".into();
        elsewhere.errors = 0;
        let doc = build(&params(), &[worse, stats("Anyscale", mixtral), elsewhere, stats("DeepInfra", LLAMA)]);
        let got: Vec<(String, String, u32)> =
            doc.targets.iter().map(|t| (t.model.clone(), t.route.clone().unwrap_or_default(), t.rank)).collect();
        assert_eq!(
            got,
            [
                (LLAMA.into(), "DeepInfra".into(), 1),
                (LLAMA.into(), "Together".into(), 2),
                (mixtral.into(), "Anyscale".into(), 1)
            ]
        );
    }

    #[test]
    fn expiry_window_and_yaml_follow_the_params() {
        let p = ExportParams {
            probe_interval: Duration::from_secs(30),
            window: Duration::from_secs(36 * 3600),
            ..params()
        };
        let doc = build(&p, &[stats("DeepInfra", LLAMA)]);
        assert_eq!(doc.expires_at, p.generated_at + chrono::Duration::seconds(90));
        assert_eq!(doc.window, "36h");
        assert_eq!(format_window(Duration::from_secs(90)), "90s");
        assert_eq!(format_window(Duration::from_secs(300)), "5m");
        let yaml = doc.to_yaml().expect("yaml");
        let back: Value = serde_yaml::from_str(&yaml).expect("yaml parses");
        assert_eq!(back["expires_at"], "2026-11-30T12:01:30Z");
        assert_eq!(back["targets"][0]["failover_ttft_ms"], 800.0);
    }
}
