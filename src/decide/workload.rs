//! Long-prompt probes (`[[probe.workload]]`, docs/CONFIGURATION.md#probeworkload): the prompt
//! of each size, the per-target-and-size TTFT series with their failover deadlines, and what a
//! workload costs a day.
//!
//! The prompt is tokenizer-free: [`CHARS_PER_TOKEN`] characters stand for one token (the usual
//! rule of thumb for English text under BPE tokenizers), so a size of N tokens sends about 4·N
//! characters of common short English words in sentences. Tokenizers differ (±25 % is common);
//! the provider's own count comes back in the run's `input_tokens` and is stored beside the size
//! asked. The text is the same on every run but for the probe's nonce, which the adapter puts
//! first in the system turn, so no prefix or prompt cache can answer any of it.
//!
//! Each (target, size) keeps its own series of first-token times over `baseline.window`, never
//! mixed with the tiny probe's: quantiles are bucketed and ranked exactly as every baseline
//! ([`baseline_of`]), published at the `[baseline]` minimum counts, and the deadline is the
//! health rule's own ([`Failover::deadline`]): `failover_factor` × P95, or × the provisional
//! P95 bound once `min_samples_p50` runs exist.

use crate::config::{BaselineConfig, Price, WorkloadConfig};
use crate::decide::baseline::{baseline_of, quantile_of, Baseline};
use crate::decide::health::{p95_upper_bound, Failover};
use crate::vocab::sample::Outcome;
use crate::vocab::target::Target;
use crate::vocab::workload::WorkloadRun;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

/// Characters sent per token asked (the tokenizer-free approximation).
pub const CHARS_PER_TOKEN: usize = 4;
/// The instruction of every long-prompt probe; the nonce goes before it.
pub const SYSTEM: &str = "You are a latency check. Ignore the text that follows and reply with exactly: OK";
/// Runs kept per series at most (a week at one a minute), whatever the window.
const MAX_RUNS: usize = 7 * 24 * 60;

/// Common English words of one token each in the usual BPE vocabularies, about three letters
/// long: with its space a word is about [`CHARS_PER_TOKEN`] characters.
const WORDS: [&str; 64] = [
    "the", "and", "was", "for", "are", "but", "not", "you", "all", "any", "can", "had", "her", "one", "our", "out",
    "day", "get", "has", "him", "his", "how", "man", "new", "now", "old", "see", "two", "way", "who", "did", "its",
    "let", "put", "say", "she", "too", "use", "of", "to", "in", "it", "is", "be", "as", "at", "so", "we", "he", "by",
    "or", "on", "do", "if", "me", "my", "up", "an", "go", "no", "us", "am", "time", "work",
];

/// The characters a size is sent as, nonce and instruction included.
pub fn prompt_chars(input_tokens: u32) -> usize {
    (input_tokens as usize).saturating_mul(CHARS_PER_TOKEN)
}

/// The user turn of a size: filler words so that the nonce (`nonce_len` characters and its
/// `". "`), [`SYSTEM`] and this text together are [`prompt_chars`] long. Deterministic: the same
/// words every run. Built in one buffer of its final size.
pub fn user_text(input_tokens: u32, nonce_len: usize) -> String {
    let want = prompt_chars(input_tokens).saturating_sub(nonce_len + 2 + SYSTEM.len()).max(1);
    let mut out = String::with_capacity(want + 8);
    // xorshift64 from a fixed seed: varied text (no one word repeated), the same on every run.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut in_sentence = 0u32;
    while out.len() < want {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let word = WORDS[(x % WORDS.len() as u64) as usize];
        if in_sentence == 0 {
            let mut c = word.chars();
            if let Some(first) = c.next() {
                out.push(first.to_ascii_uppercase());
                out.push_str(c.as_str());
            }
        } else {
            out.push_str(word);
        }
        in_sentence += 1;
        if in_sentence == 12 {
            out.push('.');
            in_sentence = 0;
        }
        out.push(' ');
    }
    // ASCII only, so any length is a character boundary.
    out.truncate(want);
    out
}

/// A size's projected spend per day on one target at `price`: runs a day × the cost of one
/// (the size's input tokens and its whole output budget).
pub fn daily_cost_usd(w: &WorkloadConfig, price: &Price) -> f64 {
    let runs = 86_400.0 / w.every.as_secs_f64().max(1.0);
    runs * price.cost(w.input_tokens, w.max_tokens)
}

/// P50/P95/P99 of a size's time to first token, ms.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct TtftPercentiles {
    /// Median.
    pub p50: Option<f64>,
    /// 95th percentile.
    pub p95: Option<f64>,
    /// 99th percentile.
    pub p99: Option<f64>,
}

/// One size of one target as the export and `/v1/targets` publish it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadDeadline {
    /// The size (`[[probe.workload]] input_tokens`).
    pub input_tokens: u32,
    /// Runs in the window, every outcome.
    pub runs: u64,
    /// Failed runs in the window.
    pub errors: u64,
    /// Time to first token of the successful runs, ms.
    pub ttft_ms: TtftPercentiles,
    /// Abandon a request of about this size without a first token by then: factor × the TTFT P95
    /// (or its provisional bound); null below `min_samples_p50` runs.
    pub failover_ttft_ms: Option<f64>,
    /// Whether the deadline rests on a provisional P95 bound.
    pub provisional: bool,
    /// The provisional bound it rests on (null when not provisional).
    pub ttft_p95_upper_ms: Option<f64>,
}

/// One run as a series keeps it: when, and its TTFT when it succeeded.
#[derive(Debug, Clone, Copy)]
struct Run {
    at: DateTime<Utc>,
    ttft_ms: Option<f64>,
}

/// Every (target, size) series of first-token times over the baseline window.
#[derive(Debug)]
pub struct WorkloadBaselines {
    window: chrono::Duration,
    min: [u64; 3],
    failover: Failover,
    series: BTreeMap<(Target, u32), VecDeque<Run>>,
}

impl WorkloadBaselines {
    /// Empty series following `[baseline]` (window, minimum counts, failover factor).
    pub fn new(config: &BaselineConfig) -> Self {
        WorkloadBaselines {
            window: chrono::Duration::from_std(config.window).unwrap_or(chrono::Duration::days(7)),
            min: [config.min_samples_p50, config.min_samples_p95, config.min_samples_p99],
            failover: Failover::of(config),
            series: BTreeMap::new(),
        }
    }

    /// Adds one run to its series (its TTFT only when it succeeded with one).
    pub fn record(&mut self, run: &WorkloadRun) {
        let s = &run.sample;
        let ttft_ms = s.ttft_ms.filter(|v| s.outcome == Outcome::Ok && v.is_finite() && *v >= 0.0);
        let series = self.series.entry((s.target.clone(), run.input_tokens)).or_default();
        series.push_back(Run { at: s.started_at, ttft_ms });
        while series.len() > MAX_RUNS {
            series.pop_front();
        }
    }

    /// Replaces every series with stored runs (a start), keeping those inside the window of `now`.
    /// Runs recorded before the load and newer than every stored one (not yet stored) stay.
    pub fn load(&mut self, runs: &[WorkloadRun], now: DateTime<Utc>) {
        let newest = runs.iter().map(|r| r.sample.started_at).max();
        let kept = std::mem::take(&mut self.series);
        let from = now - self.window;
        for r in runs.iter().filter(|r| r.sample.started_at >= from) {
            self.record(r);
        }
        for (key, held) in kept {
            let newer = held.into_iter().filter(|r| newest.is_none_or(|n| r.at > n));
            self.series.entry(key).or_default().extend(newer);
        }
        self.series.retain(|_, runs| !runs.is_empty());
    }

    /// Where a start reads stored runs from: the window ending at `now`.
    pub fn window_start(&self, now: DateTime<Utc>) -> DateTime<Utc> {
        now - self.window
    }

    /// The sizes of `target` with runs in the window ending at `now`, smallest first.
    pub fn of(&mut self, target: &Target, now: DateTime<Utc>) -> Vec<WorkloadDeadline> {
        let from = now - self.window;
        let mut out = Vec::new();
        for ((t, size), runs) in self.series.iter_mut() {
            if t != target {
                continue;
            }
            runs.retain(|r| r.at >= from);
            if runs.is_empty() {
                continue;
            }
            out.push(deadline_of(*size, runs, self.min, self.failover));
        }
        self.series.retain(|_, runs| !runs.is_empty());
        out
    }
}

fn deadline_of(size: u32, runs: &VecDeque<Run>, min: [u64; 3], failover: Failover) -> WorkloadDeadline {
    let values = || runs.iter().filter_map(|r| r.ttft_ms);
    let base: Baseline = baseline_of(values(), min);
    let bound = match base.p95 {
        Some(_) => None,
        None => p95_upper_bound(base.count, |q| quantile_of(values(), q)),
    };
    let d = failover.deadline(&base, bound);
    let total = runs.len() as u64;
    WorkloadDeadline {
        input_tokens: size,
        runs: total,
        errors: total - base.count.min(total),
        ttft_ms: TtftPercentiles { p50: base.p50, p95: base.p95, p99: base.p99 },
        failover_ttft_ms: d.ms,
        provisional: d.bound.is_some(),
        ttft_p95_upper_ms: d.bound.map(|b| b.value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::sample::Sample;
    use std::time::Duration;

    /// The probe's nonce length (`io::probe::NONCE_LEN`).
    const NONCE: usize = 12;

    fn t0() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-12-03T12:00:00Z").expect("time").with_timezone(&Utc)
    }

    fn target() -> Target {
        Target::new("p".into(), "m".into(), None, "eu".into())
    }

    fn run(size: u32, at: DateTime<Utc>, ttft: Option<f64>) -> WorkloadRun {
        let mut s = Sample::new(target(), at, at);
        s.outcome = if ttft.is_some() { Outcome::Ok } else { Outcome::Timeout };
        s.ttft_ms = ttft;
        WorkloadRun { sample: s, input_tokens: size }
    }

    fn config(min: [u64; 3]) -> BaselineConfig {
        BaselineConfig {
            window: Duration::from_secs(86_400),
            failover_factor: 2.0,
            min_samples_p50: min[0],
            min_samples_p95: min[1],
            min_samples_p99: min[2],
            adopt_after: None,
        }
    }

    #[test]
    fn the_prompt_is_about_four_characters_per_token_and_the_same_every_run() {
        for size in [256u32, 8000, 200_000] {
            let user = user_text(size, NONCE);
            let total = NONCE + 2 + SYSTEM.len() + user.len();
            assert_eq!(total, prompt_chars(size), "size {size}");
            // Words of about three letters and a space: within 15 % of one word per token.
            let words = user.split_whitespace().count() as f64;
            assert!((words / f64::from(size) - 1.0).abs() < 0.15, "{words} words for {size} tokens");
            assert!(user.is_ascii() && !user.contains('\n'));
        }
        assert_eq!(user_text(8000, 12), user_text(8000, 12), "deterministic: only the nonce differs");
    }

    #[test]
    fn each_size_has_its_own_series_and_deadline() {
        let mut b = WorkloadBaselines::new(&config([3, 5, 1000]));
        for i in 0..5 {
            let at = t0() + chrono::Duration::minutes(i);
            b.record(&run(1000, at, Some(200.0 + i as f64)));
            b.record(&run(8000, at, Some(1600.0 + 10.0 * i as f64)));
        }
        b.record(&run(8000, t0(), None));
        let got = b.of(&target(), t0() + chrono::Duration::minutes(10));
        assert_eq!(got.iter().map(|w| w.input_tokens).collect::<Vec<_>>(), vec![1000, 8000]);
        let (small, large) = (&got[0], &got[1]);
        assert_eq!((small.runs, small.errors), (5, 0));
        assert_eq!((large.runs, large.errors), (6, 1), "a failed run counts, its time does not");
        assert!(small.ttft_ms.p95.is_some_and(|p| (203.0..206.0).contains(&p)), "{small:?}");
        assert_eq!(small.ttft_ms.p99, None, "published at the [baseline] minimum counts");
        let (ds, dl) = (small.failover_ttft_ms.expect("deadline"), large.failover_ttft_ms.expect("deadline"));
        assert!(dl > 7.0 * ds, "the large size's deadline is its own: {ds} vs {dl}");
        assert!(!small.provisional && small.ttft_p95_upper_ms.is_none());
        assert!(b.of(&target(), t0() + chrono::Duration::days(2)).is_empty(), "runs leave with the window");
    }

    #[test]
    fn before_a_p95_the_deadline_is_provisional_and_a_start_reloads_the_series() {
        let mut b = WorkloadBaselines::new(&config([3, 300, 2000]));
        let runs: Vec<WorkloadRun> =
            (0..4).map(|i| run(8000, t0() + chrono::Duration::minutes(i), Some(1000.0 + i as f64))).collect();
        let old = run(8000, t0() - chrono::Duration::days(3), Some(99_999.0));
        b.load(&[vec![old], runs].concat(), t0() + chrono::Duration::hours(1));
        let got = b.of(&target(), t0() + chrono::Duration::hours(1));
        assert_eq!(got[0].runs, 4, "runs older than the window are not loaded");
        assert!(got[0].provisional && got[0].ttft_ms.p95.is_none());
        let bound = got[0].ttft_p95_upper_ms.expect("bound");
        assert_eq!(got[0].failover_ttft_ms, Some(bound * 2.0));
    }

    #[test]
    fn a_days_cost_is_runs_a_day_times_one_run() {
        let w = WorkloadConfig {
            input_tokens: 10_000,
            every: Duration::from_secs(900),
            max_tokens: 16,
            timeout: Duration::from_secs(60),
            providers: Default::default(),
            models: vec![],
        };
        let price = Price { input_per_mtok: 3.0, output_per_mtok: 15.0 };
        let one = (10_000.0 * 3.0 + 16.0 * 15.0) / 1e6;
        assert!((daily_cost_usd(&w, &price) - 96.0 * one).abs() < 1e-9);
    }
}
