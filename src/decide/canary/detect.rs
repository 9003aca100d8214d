//! The model-change statistic, pure and with time taken from the runs themselves: each target
//! keeps its own recent canary runs, split into a reference window and a recent window, and a
//! change is called when the recent window differs from the reference beyond run-to-run noise:
//!
//! - **score**: Fisher's exact test (two-sided) on the exact-match counts of the two windows,
//!   below `alpha`, *and* a difference in score of at least `min_delta`, both also without the
//!   recent window's most extreme run (one odd run never calls a change);
//! - **answers**: the target was stable (one answer fingerprint in at least `stable_share` of
//!   the reference runs) and every recent run gave one and the same fingerprint the reference
//!   never saw;
//! - **identity**: the echoed `model` field or OpenRouter's upstream `provider` held one value
//!   through the reference and every recent run reports one new value.
//!
//! After a change the reference restarts from the first run of the new behaviour, so one change
//! fires once; no
//! test runs until the new reference holds `min_reference` runs again. docs/CANARY.md gives
//! the false-alarm reasoning.

use crate::config::DetectorConfig;
use crate::vocab::canary::CanaryRun;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

/// What one successful canary run contributes to the statistic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    /// When the run started.
    pub at: DateTime<Utc>,
    /// Exactly matching answers.
    pub correct: u32,
    /// Questions asked.
    pub total: u32,
    /// Fingerprint of the normalised answers.
    pub answers: String,
    /// The `model` field the provider echoed back.
    pub model: Option<String>,
    /// OpenRouter's upstream `provider`.
    pub upstream: Option<String>,
    /// OpenAI's `system_fingerprint` (reported with a change, never a change on its own:
    /// providers rotate it across their fleet).
    pub system_fingerprint: Option<String>,
}

/// A detected change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Change {
    /// First run of the new behaviour.
    pub since: DateTime<Utc>,
    /// Last run of the old behaviour.
    pub last_before: DateTime<Utc>,
    /// When the change was called (the run that completed the recent window).
    pub detected_at: DateTime<Utc>,
    /// What changed, one phrase per signal (`exact-match score 100% → 33% (p=2e-9)`).
    pub what: Vec<String>,
}

impl Change {
    /// One line for humans.
    pub fn describe(&self) -> String {
        format!(
            "{} (since {}, last old answer {})",
            self.what.join("; "),
            self.since.format("%Y-%m-%d %H:%M UTC"),
            self.last_before.format("%Y-%m-%d %H:%M UTC")
        )
    }
}

/// The detector's answer for one run.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Too few runs yet, or nothing changed.
    Quiet,
    /// A change was called with this run.
    Changed(Change),
    /// A change was called earlier and the new reference is still being learned.
    Learning(Change),
}

/// One target's canary history.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Detector {
    runs: VecDeque<Observation>,
    /// The last change, while its new reference is being learned.
    #[serde(default)]
    change: Option<Change>,
}

impl Detector {
    /// Adds one run (runs arrive in time order) and judges the windows.
    pub fn observe(&mut self, obs: Observation, cfg: &DetectorConfig) -> Verdict {
        let recent = cfg.recent.max(1);
        self.runs.push_back(obs);
        while self.runs.len() > cfg.reference.max(1) + recent {
            self.runs.pop_front();
        }
        if self.runs.len() < cfg.min_reference.max(1) + recent {
            return match &self.change {
                Some(c) => Verdict::Learning(c.clone()),
                None => Verdict::Quiet,
            };
        }
        self.change = None;
        let split = self.runs.len() - recent;
        let (reference, window): (Vec<&Observation>, Vec<&Observation>) = {
            let all: Vec<&Observation> = self.runs.iter().collect();
            (all[..split].to_vec(), all[split..].to_vec())
        };
        let mut what = Vec::new();
        // The first run of the new behaviour, as an index into the window.
        let mut first = 0;
        if let Some((s, from)) = score_shift(&reference, &window, cfg) {
            what.push(s);
            first = from;
        }
        if let Some(s) = answers_shift(&reference, &window, cfg) {
            what.push(s);
        }
        for (name, get) in [("model field", field_model as Field), ("upstream provider", field_upstream as Field)] {
            if let Some(s) = identity_shift(&reference, &window, name, get) {
                what.push(s);
            }
        }
        if what.is_empty() {
            return Verdict::Quiet;
        }
        if what.len() > 1 {
            // An answer or identity change is new through the whole window.
            first = 0;
        }
        let fp = |o: &&Observation| o.system_fingerprint.clone();
        let (old_fp, new_fp) = (reference.last().and_then(fp), window.last().and_then(fp));
        if let (Some(a), Some(b)) = (old_fp, new_fp) {
            if a != b {
                what.push(format!("system_fingerprint {a} → {b}"));
            }
        }
        let last_old = if first == 0 { reference.last() } else { window.get(first - 1) };
        let (Some(first_new), Some(last_old)) = (window.get(first), last_old) else { return Verdict::Quiet };
        let change = Change {
            since: first_new.at,
            last_before: last_old.at,
            detected_at: window.last().map_or(first_new.at, |o| o.at),
            what,
        };
        // The new behaviour is the reference from now on: the same change never fires twice.
        self.runs.drain(..split + first);
        self.change = Some(change.clone());
        Verdict::Changed(change)
    }
}

type Field = fn(&Observation) -> Option<&str>;

fn field_model(o: &Observation) -> Option<&str> {
    o.model.as_deref()
}

fn field_upstream(o: &Observation) -> Option<&str> {
    o.upstream.as_deref()
}

fn pct(k: u64, n: u64) -> f64 {
    if n == 0 {
        0.0
    } else {
        k as f64 / n as f64
    }
}

fn sum(runs: &[&Observation]) -> (u64, u64) {
    runs.iter().fold((0u64, 0u64), |(k, n), o| (k + u64::from(o.correct.min(o.total)), n + u64::from(o.total)))
}

fn score(o: &Observation) -> f64 {
    pct(u64::from(o.correct.min(o.total)), u64::from(o.total))
}

/// The score test of one window: Fisher's p below alpha and a shift of at least `min_delta`.
fn shifted(reference: (u64, u64), window: (u64, u64), cfg: &DetectorConfig) -> Option<f64> {
    let ((k1, n1), (k2, n2)) = (reference, window);
    if n1 == 0 || n2 == 0 || (pct(k1, n1) - pct(k2, n2)).abs() < cfg.min_delta {
        return None;
    }
    let p = fisher_two_sided(k1, n1 - k1, k2, n2 - k2);
    (p < cfg.alpha).then_some(p)
}

/// The score change, if any, with the index of the window's first run on the new side. The
/// window must pass the test also without its most extreme run, so one odd run (a truncated
/// or garbled answer) never calls a change on its own.
fn score_shift(reference: &[&Observation], window: &[&Observation], cfg: &DetectorConfig) -> Option<(String, usize)> {
    let (r, w) = (sum(reference), sum(window));
    let p = shifted(r, w, cfg)?;
    let (p1, p2) = (pct(r.0, r.1), pct(w.0, w.1));
    let drop = p2 < p1;
    let extreme = window.iter().min_by(|a, b| {
        let (a, b) = (score(a), score(b));
        if drop {
            a.total_cmp(&b)
        } else {
            b.total_cmp(&a)
        }
    })?;
    let rest = (w.0 - u64::from(extreme.correct.min(extreme.total)), w.1 - u64::from(extreme.total));
    shifted(r, rest, cfg)?;
    // The new behaviour starts at the first run past the midpoint between the two scores.
    let mid = (p1 + p2) / 2.0;
    let first = window.iter().position(|o| if drop { score(o) < mid } else { score(o) > mid }).unwrap_or(0);
    Some((format!("exact-match score {:.0}% → {:.0}% (p={p:.1e})", p1 * 100.0, p2 * 100.0), first))
}

fn answers_shift(reference: &[&Observation], window: &[&Observation], cfg: &DetectorConfig) -> Option<String> {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for o in reference {
        *counts.entry(o.answers.as_str()).or_default() += 1;
    }
    let (mode, n) = counts.iter().max_by_key(|(_, n)| **n)?;
    if (*n as f64) < cfg.stable_share * reference.len() as f64 {
        return None;
    }
    // A new answer, and a settled one: every recent run gives the same text the reference never
    // saw. A sampling model's occasional odd answer differs run to run and never qualifies.
    let now = window.first()?.answers.as_str();
    if counts.contains_key(now) || window.iter().any(|o| o.answers != now) {
        return None;
    }
    Some(format!("answers fingerprint {mode} → {now}"))
}

fn identity_shift(reference: &[&Observation], window: &[&Observation], name: &str, get: Field) -> Option<String> {
    let old: Vec<&str> = reference.iter().filter_map(|o| get(o)).collect();
    let first = *old.first()?;
    if old.len() != reference.len() || old.iter().any(|v| *v != first) {
        return None;
    }
    let new: Vec<&str> = window.iter().filter_map(|o| get(o)).collect();
    let now = *new.first()?;
    (new.len() == window.len() && now != first && new.iter().all(|v| *v == now))
        .then(|| format!("{name} {first} → {now}"))
}

/// ln(n!) for the small counts the canary produces.
fn ln_factorial(n: u64) -> f64 {
    (2..=n).map(|i| (i as f64).ln()).sum()
}

/// Two-sided p-value of Fisher's exact test on the 2×2 table `[[a, b], [c, d]]` (rows: windows,
/// columns: right, wrong): the probability, with the margins fixed, of a table at most as likely
/// as the one observed.
pub fn fisher_two_sided(a: u64, b: u64, c: u64, d: u64) -> f64 {
    let (row1, col1, n) = (a + b, a + c, a + b + c + d);
    let fixed = ln_factorial(row1) + ln_factorial(c + d) + ln_factorial(col1) + ln_factorial(b + d) - ln_factorial(n);
    let prob = |x: u64| {
        // x right answers in the first row; the rest of the table follows from the margins.
        let (xb, xc) = (row1 - x, col1 - x);
        let xd = n + x - row1 - col1;
        (fixed - ln_factorial(x) - ln_factorial(xb) - ln_factorial(xc) - ln_factorial(xd)).exp()
    };
    let lo = (row1 + col1).saturating_sub(n);
    let hi = row1.min(col1);
    let observed = prob(a);
    let p: f64 = (lo..=hi).map(prob).filter(|p| *p <= observed * (1.0 + 1e-7)).sum();
    p.min(1.0)
}

/// What the statistic sees of `run`; `None` for a failed run (availability is the regular
/// probe's business, and a failure says nothing about which model answers).
pub fn observation(run: &CanaryRun) -> Option<Observation> {
    (!run.sample.outcome.is_failure()).then(|| Observation {
        at: run.sample.started_at,
        correct: run.correct,
        total: run.total,
        answers: run.answers_fingerprint.clone(),
        model: run.identity.model.clone(),
        upstream: run.identity.upstream.clone(),
        system_fingerprint: run.identity.system_fingerprint.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(run: i64) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).single().expect("valid time") + chrono::Duration::minutes(15 * run)
    }

    fn obs(run: i64, correct: u32, answers: &str) -> Observation {
        Observation {
            at: at(run),
            correct,
            total: 6,
            answers: answers.into(),
            model: Some("m-2025".into()),
            upstream: None,
            system_fingerprint: Some("fp_a".into()),
        }
    }

    fn feed(d: &mut Detector, runs: impl IntoIterator<Item = Observation>) -> Vec<(usize, Change)> {
        let cfg = DetectorConfig::default();
        runs.into_iter()
            .enumerate()
            .filter_map(|(i, o)| match d.observe(o, &cfg) {
                Verdict::Changed(c) => Some((i, c)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn fisher_matches_known_values() {
        // R: fisher.test(matrix(c(3,1,1,3), 2))$p.value = 0.4857
        assert!((fisher_two_sided(3, 1, 1, 3) - 0.485_714).abs() < 1e-5);
        // R: fisher.test(matrix(c(10,0,0,10), 2))$p.value = 1.083e-05
        assert!((fisher_two_sided(10, 0, 0, 10) - 1.082_509e-5).abs() < 1e-9);
        assert!((fisher_two_sided(5, 5, 5, 5) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn a_score_drop_fires_once_and_says_since_when() {
        let mut d = Detector::default();
        let before = (0..20).map(|i| obs(i, 6, "aaaa"));
        let after = (20..80).map(|i| obs(i, 3, "bbbb"));
        let fired = feed(&mut d, before.chain(after));
        assert_eq!(fired.len(), 1, "one change, one call: {fired:?}");
        let (i, c) = &fired[0];
        assert_eq!(*i, 22, "called on the third new run: one or two odd runs are not enough");
        assert_eq!(c.since, at(20), "since the first run of the new behaviour");
        assert_eq!(c.last_before, at(19));
        assert!(c.what.iter().any(|w| w.starts_with("exact-match score 100% → 62%")), "{c:?}");
        assert!(matches!(d.observe(obs(80, 3, "bbbb"), &DetectorConfig::default()), Verdict::Quiet));
    }

    #[test]
    fn nothing_is_called_before_the_reference_is_learned() {
        let mut d = Detector::default();
        let runs = (0..4).map(|i| obs(i, 6, "aaaa")).chain((4..11).map(|i| obs(i, 0, "zzzz")));
        assert!(feed(&mut d, runs).is_empty(), "11 runs < 8 reference + 4 recent");
    }

    #[test]
    fn run_to_run_noise_never_fires() {
        // A sampling model: scores 4..=6 and a fresh fingerprint most runs, for a simulated month.
        let mut d = Detector::default();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let runs = (0..2880).map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let correct = 4 + (x % 3) as u32;
            obs(i, correct, &format!("{:04x}", (x >> 8) % 7))
        });
        assert!(feed(&mut d, runs).is_empty());
    }

    #[test]
    fn a_single_bad_run_is_not_a_change() {
        let mut d = Detector::default();
        let runs = (0..40).map(|i| if i == 25 { obs(i, 0, "zzzz") } else { obs(i, 6, "aaaa") });
        assert!(feed(&mut d, runs).is_empty());
    }

    #[test]
    fn a_new_settled_answer_fires_with_the_same_score() {
        let mut d = Detector::default();
        let runs = (0..30).map(|i| obs(i, 6, if i < 20 { "aaaa" } else { "cccc" }));
        let fired = feed(&mut d, runs);
        assert_eq!(fired.len(), 1);
        assert_eq!(fired[0].0, 23, "all four recent runs agree on the new text");
        assert_eq!(fired[0].1.what, vec!["answers fingerprint aaaa → cccc"]);
        assert_eq!(fired[0].1.since, at(20));
    }

    #[test]
    fn an_upgrade_is_a_change_too() {
        let mut d = Detector::default();
        let mut x = 0u64;
        let runs = (0..40).map(|i| {
            x += 1;
            if i < 20 {
                obs(i, 2 + (x % 2) as u32, &format!("{x}"))
            } else {
                obs(i, 6, "best")
            }
        });
        let fired = feed(&mut d, runs);
        assert_eq!(fired.len(), 1, "{fired:?}");
        assert!(fired[0].1.what[0].starts_with("exact-match score 42% → 100%"), "{:?}", fired[0].1);
    }

    #[test]
    fn a_new_model_name_alone_fires() {
        let mut d = Detector::default();
        let runs = (0..30).map(|i| {
            let mut o = obs(i, 6, "aaaa");
            if i >= 16 {
                o.model = Some("m-2026".into());
                o.system_fingerprint = Some("fp_b".into());
            }
            o
        });
        let fired = feed(&mut d, runs);
        assert_eq!(fired.len(), 1);
        assert_eq!(fired[0].1.what, vec!["model field m-2025 → m-2026", "system_fingerprint fp_a → fp_b"]);
    }

    #[test]
    fn a_rotating_system_fingerprint_alone_never_fires() {
        let mut d = Detector::default();
        let runs = (0..200).map(|i| {
            let mut o = obs(i, 6, "aaaa");
            o.system_fingerprint = Some(format!("fp_{}", i % 5));
            o
        });
        assert!(feed(&mut d, runs).is_empty());
    }

    #[test]
    fn learning_after_a_change_then_a_second_change_fires_again() {
        let mut d = Detector::default();
        let cfg = DetectorConfig::default();
        let runs = (0..20).map(|i| obs(i, 6, "aaaa")).chain((20..44).map(|i| obs(i, 2, "bbbb")));
        let fired = feed(&mut d, runs);
        assert_eq!(fired.len(), 1);
        assert!(matches!(d.observe(obs(44, 2, "bbbb"), &cfg), Verdict::Quiet), "new reference learned");
        let back = feed(&mut d, (45..60).map(|i| obs(i, 6, "aaaa")));
        assert_eq!(back.len(), 1, "a change back is a new change");
    }

    #[test]
    fn state_survives_serialisation() {
        let mut d = Detector::default();
        feed(&mut d, (0..10).map(|i| obs(i, 6, "aaaa")));
        let json = serde_json::to_value(&d).expect("serialises");
        let back: Detector = serde_json::from_value(json).expect("deserialises");
        assert_eq!(back, d);
    }
}
