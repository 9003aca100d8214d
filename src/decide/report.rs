//! The provider comparison matrix (`vigil report`): per target and region, exact TTFT P50/P95,
//! tokens/s P50, prices, error rate and sample count, ordered the way a buyer reads it.
//!
//! A pure function over samples the caller already selected (window, region). Rows for the same
//! target in several regions (`--region all`) sit next to each other so regions compare side by side.

use crate::config::Price;
use crate::vocab::sample::Sample;
use crate::vocab::target::{Name, Target, TargetKey};
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::collections::BTreeMap;

/// One target in one region.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MatrixRow {
    /// Which target: `target`, `provider`, `model`, `route`.
    #[serde(flatten)]
    pub key: TargetKey,
    /// Region measured from.
    pub region: Name,
    /// Probes, every outcome.
    pub samples: u64,
    /// Failed probes.
    pub errors: u64,
    /// errors / samples.
    pub error_rate: f64,
    /// Successful probes with a TTFT: what the TTFT percentiles are taken over.
    #[serde(default)]
    pub ttft_samples: u64,
    /// Exact median TTFT of successful probes, ms (null below [`MIN_SAMPLES_P50`] of them).
    pub ttft_p50_ms: Option<f64>,
    /// Exact 95th percentile TTFT, ms (null below [`MIN_SAMPLES_P95`] of them).
    pub ttft_p95_ms: Option<f64>,
    /// Successful probes with a generation speed.
    #[serde(default)]
    pub tokens_per_s_samples: u64,
    /// Exact median generation speed (null below [`MIN_SAMPLES_P50`] of them).
    pub tokens_per_s_p50: Option<f64>,
    /// USD per million input tokens.
    pub input_per_mtok: Option<f64>,
    /// USD per million output tokens.
    pub output_per_mtok: Option<f64>,
}

/// The matrix: rows in reading order and the regions they cover.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Matrix {
    /// Regions present, sorted.
    pub regions: Vec<String>,
    /// Rows by model, then TTFT P95 ascending (unknown last), a target's regions together.
    pub rows: Vec<MatrixRow>,
}

/// Fewest values a reported median is taken from.
pub const MIN_SAMPLES_P50: usize = 3;
/// Fewest values a reported P95 is taken from: with fewer, the "95th percentile" is simply the
/// slowest probe or one of the two slowest.
pub const MIN_SAMPLES_P95: usize = 20;

/// Nearest-rank percentile of sorted values, when there are at least `min` of them.
pub fn percentile_of_at_least(sorted: &[f64], q: f64, min: usize) -> Option<f64> {
    (sorted.len() >= min.max(1)).then(|| nearest_rank(sorted, q)).flatten()
}

/// Nearest-rank percentile of sorted values.
pub fn nearest_rank(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

/// The TTFT a sample contributes to percentiles: successful probes with a finite value only.
pub fn ttft_of(s: &Sample) -> Option<f64> {
    if s.outcome.is_failure() {
        return None;
    }
    s.ttft_ms.filter(|v| v.is_finite())
}

#[derive(Default)]
struct Acc {
    samples: u64,
    errors: u64,
    ttft: Vec<f64>,
    tps: Vec<f64>,
}

fn cmp_known_first(a: Option<f64>, b: Option<f64>) -> Ordering {
    match (a, b) {
        (Some(x), Some(y)) => x.total_cmp(&y),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

/// Builds the matrix from samples; `price` gives each target's configured or published price.
pub fn matrix(samples: &[Sample], price: &dyn Fn(&Target) -> Option<Price>) -> Matrix {
    let mut accs: BTreeMap<&Target, Acc> = BTreeMap::new();
    for s in samples {
        let acc = accs.entry(&s.target).or_default();
        acc.samples += 1;
        if s.outcome.is_failure() {
            acc.errors += 1;
            continue;
        }
        acc.ttft.extend(ttft_of(s));
        acc.tps.extend(s.tokens_per_s.filter(|v| v.is_finite()));
    }
    let mut rows: Vec<MatrixRow> = accs
        .into_iter()
        .map(|(t, mut acc)| {
            acc.ttft.sort_by(f64::total_cmp);
            acc.tps.sort_by(f64::total_cmp);
            let p = price(t);
            MatrixRow {
                key: TargetKey::from(t),
                region: t.region.clone(),
                samples: acc.samples,
                errors: acc.errors,
                error_rate: acc.errors as f64 / acc.samples as f64,
                ttft_samples: acc.ttft.len() as u64,
                ttft_p50_ms: percentile_of_at_least(&acc.ttft, 0.5, MIN_SAMPLES_P50),
                ttft_p95_ms: percentile_of_at_least(&acc.ttft, 0.95, MIN_SAMPLES_P95),
                tokens_per_s_samples: acc.tps.len() as u64,
                tokens_per_s_p50: percentile_of_at_least(&acc.tps, 0.5, MIN_SAMPLES_P50),
                input_per_mtok: p.map(|p| p.input_per_mtok),
                output_per_mtok: p.map(|p| p.output_per_mtok),
            }
        })
        .collect();
    // A target's place is set by its best region, so its rows stay together.
    let mut best: BTreeMap<Name, Option<f64>> = BTreeMap::new();
    for r in &rows {
        let e = best.entry(r.key.target.clone()).or_insert(None);
        if cmp_known_first(r.ttft_p95_ms, *e) == Ordering::Less {
            *e = r.ttft_p95_ms;
        }
    }
    rows.sort_by(|a, b| {
        let (ka, kb) = (&a.key, &b.key);
        ka.model
            .cmp(&kb.model)
            .then_with(|| cmp_known_first(best[&ka.target], best[&kb.target]))
            .then_with(|| ka.target.cmp(&kb.target))
            .then_with(|| cmp_known_first(a.ttft_p95_ms, b.ttft_p95_ms))
            .then_with(|| a.region.cmp(&b.region))
    });
    let mut regions: Vec<String> = rows.iter().map(|r| r.region.to_string()).collect();
    regions.sort();
    regions.dedup();
    Matrix { regions, rows }
}

fn num(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(|| "— (no price)".into(), |v| format!("{v:.decimals$}"))
}

/// A percentile cell, or why it is empty: no values at all, or too few of them.
fn pct(v: Option<f64>, decimals: usize, n: u64, min: usize, none: &str) -> String {
    match v {
        Some(v) => format!("{v:.decimals$}"),
        None if n == 0 => format!("— ({none})"),
        None => format!("— ({n} of {min})"),
    }
}

impl Matrix {
    /// Fixed-width table for a terminal.
    pub fn render_table(&self) -> String {
        let header =
            ["MODEL", "HOST", "REGION", "TTFT P50", "TTFT P95", "TOK/S", "$IN/1M", "$OUT/1M", "ERRORS", "SAMPLES"];
        let cells: Vec<[String; 10]> = self
            .rows
            .iter()
            .map(|r| {
                let k = &r.key;
                [
                    k.model.to_string(),
                    k.route.as_ref().map_or_else(|| k.provider.to_string(), |route| format!("{}@{route}", k.provider)),
                    r.region.to_string(),
                    pct(r.ttft_p50_ms, 0, r.ttft_samples, MIN_SAMPLES_P50, "no token"),
                    pct(r.ttft_p95_ms, 0, r.ttft_samples, MIN_SAMPLES_P95, "no token"),
                    pct(r.tokens_per_s_p50, 1, r.tokens_per_s_samples, MIN_SAMPLES_P50, "no token"),
                    num(r.input_per_mtok, 2),
                    num(r.output_per_mtok, 2),
                    format!("{:.2}%", r.error_rate * 100.0),
                    r.samples.to_string(),
                ]
            })
            .collect();
        let mut width = header.map(str::len);
        for row in &cells {
            for (w, c) in width.iter_mut().zip(row) {
                *w = (*w).max(c.chars().count());
            }
        }
        let mut out = String::new();
        let mut line = |row: &[String]| {
            let mut text = String::new();
            for (i, c) in row.iter().enumerate() {
                // Text columns align left, numbers right.
                if i < 3 {
                    text.push_str(&format!("{c:<w$}  ", w = width[i]));
                } else {
                    text.push_str(&format!("{c:>w$}  ", w = width[i]));
                }
            }
            out.push_str(text.trim_end());
            out.push('\n');
        };
        line(&header.map(String::from));
        for row in &cells {
            line(row);
        }
        out
    }

    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::sample::Outcome;
    use chrono::{TimeZone, Utc};

    fn target(model: &str, route: &str, region: &str) -> Target {
        Target::new("openrouter".into(), model.into(), Some(route.into()), region.into())
    }

    fn samples(t: &Target, ttfts: &[f64], tps: f64, failures: usize) -> Vec<Sample> {
        let at = Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).single().expect("valid time");
        let mut out: Vec<Sample> = ttfts
            .iter()
            .map(|&v| {
                let mut s = Sample::new(t.clone(), at, at);
                s.ttft_ms = Some(v);
                s.tokens_per_s = Some(tps);
                s
            })
            .collect();
        for _ in 0..failures {
            let mut s = Sample::new(t.clone(), at, at);
            s.outcome = Outcome::ServerError;
            s.ttft_ms = Some(99_999.0);
            out.push(s);
        }
        out
    }

    fn prices(t: &Target) -> Option<Price> {
        match t.route.as_deref() {
            Some("DeepInfra") => Some(Price { input_per_mtok: 0.59, output_per_mtok: 0.79 }),
            Some("Together") => Some(Price { input_per_mtok: 0.70, output_per_mtok: 0.90 }),
            _ => None,
        }
    }

    const LLAMA: &str = "meta-llama/llama-3-70b-instruct";
    const MIXTRAL: &str = "mistralai/mixtral-8x22b-instruct";

    #[test]
    fn percentiles_are_exact_nearest_rank_over_successful_probes() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        let few = matrix(&samples(&target(LLAMA, "DeepInfra", "eu"), &values[..19], 65.0, 0), &prices);
        assert_eq!((few.rows[0].ttft_p95_ms, few.rows[0].ttft_samples), (None, 19), "no P95 from 19 values");
        assert_eq!(few.rows[0].ttft_p50_ms, Some(10.0));
        let m = matrix(&samples(&target(LLAMA, "DeepInfra", "eu"), &values, 65.0, 1), &prices);
        let r = &m.rows[0];
        assert_eq!((r.ttft_p50_ms, r.ttft_p95_ms, r.tokens_per_s_p50), (Some(50.0), Some(95.0), Some(65.0)));
        assert_eq!((r.samples, r.errors), (101, 1));
        assert!((r.error_rate - 1.0 / 101.0).abs() < 1e-12);
        assert_eq!((r.input_per_mtok, r.output_per_mtok), (Some(0.59), Some(0.79)));
        assert_eq!(nearest_rank(&[], 0.5), None);
        assert_eq!(nearest_rank(&[7.0], 0.99), Some(7.0));
    }

    #[test]
    fn rows_go_by_model_then_ttft_p95_with_unknown_last() {
        let mut all = samples(&target(MIXTRAL, "Together", "eu"), &[310.0; 20], 48.0, 0);
        all.extend(samples(&target(LLAMA, "Together", "eu"), &[220.0; 20], 58.0, 0));
        all.extend(samples(&target(LLAMA, "Broken", "eu"), &[], 0.0, 3));
        all.extend(samples(&target(LLAMA, "DeepInfra", "eu"), &[180.0; 20], 65.0, 0));
        let m = matrix(&all, &prices);
        let order: Vec<(&str, &str)> =
            m.rows.iter().map(|r| (r.key.model.as_str(), r.key.route.as_deref().unwrap_or(""))).collect();
        assert_eq!(order, [(LLAMA, "DeepInfra"), (LLAMA, "Together"), (LLAMA, "Broken"), (MIXTRAL, "Together")]);
        assert_eq!(m.rows[2].error_rate, 1.0);
        assert_eq!(m.rows[2].input_per_mtok, None);
    }

    #[test]
    fn all_regions_keep_a_targets_rows_together() {
        let mut all = samples(&target(LLAMA, "Together", "us-east-1"), &[150.0; 20], 58.0, 0);
        all.extend(samples(&target(LLAMA, "Together", "eu-west-1"), &[400.0; 20], 58.0, 0));
        all.extend(samples(&target(LLAMA, "DeepInfra", "eu-west-1"), &[200.0; 20], 65.0, 0));
        all.extend(samples(&target(LLAMA, "DeepInfra", "us-east-1"), &[210.0; 20], 65.0, 0));
        let m = matrix(&all, &prices);
        assert_eq!(m.regions, ["eu-west-1", "us-east-1"]);
        let order: Vec<(&str, &str)> =
            m.rows.iter().map(|r| (r.key.route.as_deref().unwrap_or(""), r.region.as_str())).collect();
        assert_eq!(
            order,
            [
                ("Together", "us-east-1"),
                ("Together", "eu-west-1"),
                ("DeepInfra", "eu-west-1"),
                ("DeepInfra", "us-east-1")
            ]
        );
    }

    #[test]
    fn table_and_json_render_every_column() {
        let many: Vec<f64> = (0..20).map(|i| 180.0 + f64::from(i)).collect();
        let mut all = samples(&target(LLAMA, "DeepInfra", "eu-west-1"), &many, 65.0, 0);
        all.extend(samples(&target(LLAMA, "Lepton", "eu-west-1"), &[195.0], 71.0, 1));
        let m = matrix(&all, &prices);
        let table = m.render_table();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(
            lines[0].split_whitespace().collect::<Vec<_>>(),
            [
                "MODEL", "HOST", "REGION", "TTFT", "P50", "TTFT", "P95", "TOK/S", "$IN/1M", "$OUT/1M", "ERRORS",
                "SAMPLES"
            ]
        );
        assert_eq!(
            lines[2].split_whitespace().collect::<Vec<_>>(),
            [
                LLAMA,
                "openrouter@Lepton",
                "eu-west-1",
                "—",
                "(1",
                "of",
                "3)",
                "—",
                "(1",
                "of",
                "20)",
                "—",
                "(1",
                "of",
                "3)",
                "—",
                "(no",
                "price)",
                "—",
                "(no",
                "price)",
                "50.00%",
                "2"
            ]
        );
        assert_eq!(
            lines[1].split_whitespace().collect::<Vec<_>>(),
            [LLAMA, "openrouter@DeepInfra", "eu-west-1", "189", "198", "65.0", "0.59", "0.79", "0.00%", "20"]
        );
        assert!(lines[1..].iter().all(|l| l.find("eu-west-1") == lines[1].find("eu-west-1")), "columns line up");
        let json: serde_json::Value = serde_json::from_str(&m.to_json()).expect("json");
        assert_eq!(json["rows"][0]["ttft_p95_ms"], 198.0, "a known P95 first");
        assert!(json["rows"][1]["ttft_p95_ms"].is_null());
        assert_eq!(json["rows"][1]["ttft_samples"], 1, "says why it is null");
        assert!(json["rows"][1]["input_per_mtok"].is_null());
    }
}
