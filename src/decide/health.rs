//! The one health rule: how a target is doing now, judged once per sample by the monitor and only
//! read everywhere else (status page, `GET /v1/targets`, the `target_status` rows other regions
//! read, chain demotion, the router export). docs/ARCHITECTURE.md ("Health") states the rule:
//!
//! 1. breaker open → `down`; 2. breaker half-open → `half_open`; 3. never probed → `waiting`;
//! 4. last probe failed (other than a 429) → `down`; 5. a rate-limit backoff runs (the latest 429
//!    came less than `breaker.rate_limit_backoff`, or the `Retry-After` it carried when longer,
//!    ago) → `degraded`, "rate limited (429), backing off until …" (a 429 whose backoff is over
//!    judges nothing more); 6. last probe over its failover deadline → `degraded`; 7. its last N
//!    judged replies all failed a capability the probe checks (they ignore the system prompt) →
//!    `degraded`; 8. otherwise `ok`.
//!
//! The flapping mark (from the alert stage's flap detection) is carried beside the state and
//! demotes in chains as any other reason does. A capability failure is named in the reason
//! (`replies ignore the system prompt (last 3 of 3)`) and in [`Health::failing`], which the
//! router export ranks on; the breaker does not count it (the target answers). N is
//! `alerts.error_probes`, the same count that fires `adherence_failed` ([`CapabilityRule`]).
//!
//! The failover deadline of a metric is `baseline.failover_factor` × its P95 — the same test the
//! breaker counts latency trips with ([`crate::decide::baseline::worst_excess`]), against the
//! baseline as it was before the probe joined it. Before a P95 has its minimum sample count, the
//! deadline rests on a provisional P95: the order statistic that bounds the true P95 from above
//! with 95 % confidence (distribution-free: the k-th smallest of n values exceeds the P95 with
//! probability P[Binomial(n, 0.95) < k]), or the largest value seen while n is too small for that
//! bound (n < 59). No deadline exists below the P50 minimum count (30 by default).

use crate::config::{AlertsConfig, BaselineConfig, BreakerConfig};
use crate::decide::baseline::{failover_threshold, Baseline, Metric};
use crate::vocab::breaker::State;
use crate::vocab::health::{Health, HealthState};
use crate::vocab::sample::{Outcome, Sample};
use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// Confidence that a provisional P95 is at or above the true P95.
pub const PROVISIONAL_CONFIDENCE: f64 = 0.95;

/// The failover rule's parameters, read from `[baseline]` once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Failover {
    /// `baseline.failover_factor`: a deadline is this × the P95.
    pub factor: f64,
    /// `baseline.min_samples_p50`: fewest samples a provisional deadline rests on.
    pub provisional_min_samples: u64,
}

impl Failover {
    /// The rule of `[baseline]`.
    pub fn of(baseline: &BaselineConfig) -> Self {
        Failover { factor: baseline.failover_factor, provisional_min_samples: baseline.min_samples_p50 }
    }

    /// A metric's deadline: factor × P95 when published, else factor × its bound once enough
    /// samples exist, else none.
    pub fn deadline(&self, base: &Baseline, bound: Option<P95Bound>) -> Deadline {
        match (base.p95, bound) {
            (Some(p), _) => Deadline { ms: Some(failover_threshold(p, self.factor)), p95: Some(p), bound: None },
            (None, Some(b)) if b.samples >= self.provisional_min_samples => {
                Deadline { ms: Some(failover_threshold(b.value, self.factor)), p95: Some(b.value), bound: Some(b) }
            }
            _ => Deadline::default(),
        }
    }
}

/// One metric's failover deadline.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Deadline {
    /// The deadline, ms (`None`: too few samples to judge against).
    pub ms: Option<f64>,
    /// The P95 (or provisional bound) it rests on.
    pub p95: Option<f64>,
    /// The provisional bound, when the P95 is not yet published.
    pub bound: Option<P95Bound>,
}

impl Deadline {
    /// The published P95 it rests on, `None` while provisional: the breaker counts latency trips
    /// only against a published P95.
    pub fn published(&self) -> Option<f64> {
        self.p95.filter(|_| self.bound.is_none())
    }
}

/// The TTFB and TTFT deadlines a probe is judged against.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Deadlines {
    /// Time to first byte.
    pub ttfb: Deadline,
    /// Time to first token.
    pub ttft: Deadline,
}

/// What the latest probe says of its target, judged once when it arrives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeVerdict {
    /// Answered within its deadlines (or there was nothing to judge against yet).
    Within,
    /// Failed, with its outcome name (`server_error`, …).
    Failed(String),
    /// Answered over its deadline: the metrics over (`ttft`, `ttfb`) and the reason, naming each
    /// and by how much.
    Slow {
        /// Metric names over their deadline.
        over: Vec<String>,
        /// `ttft p95 2.4x baseline` (the probe's value over the P95 it was judged against).
        reason: String,
    },
}

/// Judges one probe against its deadlines: failed, over (TTFT or TTFB above its deadline), or within.
pub fn verdict(sample: &Sample, deadlines: &Deadlines) -> ProbeVerdict {
    if sample.outcome.is_failure() {
        return ProbeVerdict::Failed(sample.outcome.as_str().to_string());
    }
    let (mut over, mut why) = (Vec::new(), Vec::new());
    for (metric, d) in [(Metric::Ttft, &deadlines.ttft), (Metric::Ttfb, &deadlines.ttfb)] {
        if let (Some(v), Some(p), Some(limit)) = (metric.value(sample), d.p95, d.ms) {
            if v > limit && p > 0.0 {
                over.push(metric.as_str().to_string());
                why.push(format!("{} p95 {:.1}x baseline", metric.as_str(), v / p));
            }
        }
    }
    if over.is_empty() {
        ProbeVerdict::Within
    } else {
        ProbeVerdict::Slow { over, reason: why.join("; ") }
    }
}

/// A capability the probe checks in each reply. One variant today; a tool-call or
/// structured-output check joins as another variant with its sample field in [`Capability::of`],
/// and the rule, the reason and the rank follow without change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Capability {
    /// The reply follows the probe's system prompt (the sample's `adherence_ok`).
    SystemPrompt,
}

impl Capability {
    /// Every capability checked, in the order reasons name them.
    pub const ALL: [Capability; 1] = [Capability::SystemPrompt];

    /// The name in [`Health::failing`]: `system_prompt`.
    pub fn as_str(self) -> &'static str {
        match self {
            Capability::SystemPrompt => "system_prompt",
        }
    }

    /// What the reason says when the replies fail it.
    fn failed(self) -> &'static str {
        match self {
            Capability::SystemPrompt => "replies ignore the system prompt",
        }
    }

    /// The sample's verdict on it; `None` when the reply was not judged (a failed probe, an HTTP target).
    pub fn of(self, sample: &Sample) -> Option<bool> {
        match self {
            Capability::SystemPrompt => sample.adherence_ok,
        }
    }
}

/// How many judged replies in a row must fail a capability before the target is demoted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapabilityRule {
    /// `alerts.error_probes` (at least 1): the same N as the `adherence_failed` alert.
    pub replies: u32,
}

impl CapabilityRule {
    /// The rule of `[alerts]`.
    pub fn of(alerts: &AlertsConfig) -> Self {
        CapabilityRule { replies: alerts.error_probes.max(1) }
    }

    fn n(self) -> usize {
        self.replies.max(1) as usize
    }
}

/// One capability the last judged replies all failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapabilityFailure {
    /// Which.
    pub capability: Capability,
    /// How many replies in a row failed it (the rule's N).
    pub replies: u32,
}

impl CapabilityFailure {
    /// `replies ignore the system prompt (last 3 of 3)`.
    pub fn reason(&self) -> String {
        format!("{} (last {} of {})", self.capability.failed(), self.replies, self.replies)
    }
}

/// One target's last judged replies per capability (at most the rule's N each), kept by the monitor.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Replies {
    /// Per capability in [`Capability::ALL`] order, oldest first.
    judged: [VecDeque<bool>; Capability::ALL.len()],
}

impl Replies {
    /// Adds the verdicts `sample` carries; a reply not judged leaves the history as it was.
    pub fn record(&mut self, sample: &Sample, rule: CapabilityRule) {
        for (cap, judged) in Capability::ALL.iter().zip(self.judged.iter_mut()) {
            if let Some(ok) = cap.of(sample) {
                judged.push_back(ok);
                while judged.len() > rule.n() {
                    judged.pop_front();
                }
            }
        }
    }

    /// The capabilities whose last N judged replies all failed (none while fewer than N were judged).
    pub fn failures(&self, rule: CapabilityRule) -> Vec<CapabilityFailure> {
        let n = rule.n();
        Capability::ALL
            .iter()
            .zip(&self.judged)
            .filter(|(_, judged)| judged.len() >= n && judged.iter().rev().take(n).all(|ok| !ok))
            .map(|(cap, _)| CapabilityFailure { capability: *cap, replies: n as u32 })
            .collect()
    }
}

/// Longest `Retry-After` honoured: a provider (or anything in between) may advertise any number,
/// and one absurd header must neither overflow time arithmetic nor hold a target back for years.
pub const MAX_RETRY_AFTER_S: f64 = 3600.0;

/// How a 429 is waited out, from `[breaker]`: the backoff that demotes the target (and excuses
/// the episode's 429s from the breaker's count), and how many 429s in a row it takes before
/// they count as failures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimitRule {
    /// `breaker.rate_limit_backoff`: the least a 429 demotes for.
    pub backoff: chrono::Duration,
    /// `breaker.rate_limit_trips`: 429s in a row before the breaker counts them.
    pub trips: u32,
}

impl RateLimitRule {
    /// The rule of `[breaker]`.
    pub fn of(breaker: &BreakerConfig) -> Self {
        RateLimitRule {
            backoff: chrono::Duration::from_std(breaker.rate_limit_backoff).unwrap_or(chrono::Duration::MAX),
            trips: breaker.rate_limit_trips.max(1),
        }
    }

    /// When the backoff after a 429 at `at` ends: max(the configured backoff, its `Retry-After`,
    /// capped at [`MAX_RETRY_AFTER_S`]).
    pub fn until(&self, at: DateTime<Utc>, retry_after_s: Option<f64>) -> DateTime<Utc> {
        let advertised = retry_after_s.filter(|s| s.is_finite() && *s > 0.0).unwrap_or(0.0);
        let advertised = chrono::Duration::milliseconds((advertised.min(MAX_RETRY_AFTER_S) * 1000.0) as i64);
        at.checked_add_signed(self.backoff.max(advertised)).unwrap_or(DateTime::<Utc>::MAX_UTC)
    }

    /// The backoff `sample` starts, when it was rate limited.
    pub fn backoff(&self, sample: &Sample) -> Option<Backoff> {
        (sample.outcome == Outcome::RateLimited).then(|| Backoff {
            since: sample.started_at,
            until: self.until(sample.started_at, sample.retry_after_s),
            retry_after_s: sample.retry_after_s,
        })
    }
}

/// The backoff after a target's latest 429.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// When the 429 came (its probe's start).
    pub since: DateTime<Utc>,
    /// When the backoff ends.
    pub until: DateTime<Utc>,
    /// The `Retry-After` the 429 carried, seconds.
    pub retry_after_s: Option<f64>,
}

impl Backoff {
    /// `rate limited (429), backing off until 2026-12-03T12:02:00Z`.
    pub fn reason(&self) -> String {
        format!("rate limited (429), backing off until {}", self.until.to_rfc3339_opts(SecondsFormat::Secs, true))
    }
}

/// The breaker's part of the judgement.
#[derive(Debug, Clone, Copy)]
pub struct BreakerView<'a> {
    /// Its state.
    pub state: State,
    /// Why it moved there, when it moved.
    pub reason: Option<&'a str>,
}

/// The rule (module docs): one target's health from its breaker, its latest probe's verdict, the
/// capabilities its last replies all failed, the flapping mark and its latest 429's backoff, as of `now`.
pub fn judge(
    breaker: BreakerView<'_>,
    last: Option<&ProbeVerdict>,
    failing: &[CapabilityFailure],
    flapping: bool,
    backoff: Option<&Backoff>,
    now: DateTime<Utc>,
) -> Health {
    let mut why: Vec<String> = Vec::new();
    let backoff = backoff.filter(|b| now < b.until);
    let rate_limited = matches!(last, Some(ProbeVerdict::Failed(o)) if o == Outcome::RateLimited.as_str());
    let state = match (breaker.state, last) {
        (State::Open, _) => {
            why.push(format!("breaker open: {}", breaker.reason.unwrap_or("tripped")));
            HealthState::Down
        }
        (State::HalfOpen, _) => {
            why.push("breaker half_open: the next probe decides".to_string());
            HealthState::HalfOpen
        }
        (State::Closed, None) => {
            why.push("not probed yet".to_string());
            HealthState::Waiting
        }
        (State::Closed, Some(ProbeVerdict::Failed(_))) if !rate_limited => HealthState::Down,
        // A provider asking us to back off is not down: demoted while the backoff runs, and a
        // 429 whose backoff is over judges nothing more.
        (State::Closed, Some(_)) if backoff.is_some() => HealthState::Degraded,
        (State::Closed, Some(ProbeVerdict::Slow { .. })) => HealthState::Degraded,
        // It answers, but not as asked: usable, behind every target that does.
        (State::Closed, Some(_)) if !failing.is_empty() => HealthState::Degraded,
        (State::Closed, Some(_)) => HealthState::Ok,
    };
    if flapping {
        why.push("flapping".to_string());
    }
    if breaker.state != State::Open {
        if let Some(b) = backoff {
            why.push(b.reason());
        }
        match last {
            Some(ProbeVerdict::Failed(_)) if rate_limited => {}
            Some(ProbeVerdict::Failed(outcome)) => why.push(format!("last probe failed: {outcome}")),
            Some(ProbeVerdict::Slow { reason, .. }) => why.push(reason.clone()),
            _ => {}
        }
        why.extend(failing.iter().map(CapabilityFailure::reason));
    }
    let over = match last {
        Some(ProbeVerdict::Slow { over, .. }) => over.clone(),
        _ => Vec::new(),
    };
    let last_failure_class = match last {
        Some(ProbeVerdict::Failed(outcome)) => Some(outcome.clone()),
        _ => backoff.map(|_| Outcome::RateLimited.as_str().to_string()),
    };
    Health {
        state,
        flapping,
        reason: (!why.is_empty()).then(|| why.join("; ")),
        over,
        failing: failing.iter().map(|f| f.capability.as_str().to_string()).collect(),
        backoff_until: backoff.map(|b| b.until),
        last_failure_class,
    }
}

/// An upper confidence bound on a P95 from fewer samples than a stable P95 needs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct P95Bound {
    /// The bound, in the metric's unit (ms).
    pub value: f64,
    /// Samples it rests on.
    pub samples: u64,
    /// Probability that the true P95 is at or below `value`.
    pub confidence: f64,
}

/// The order statistic (1-based rank `k` of `n` values) bounding the P95 from above with
/// [`PROVISIONAL_CONFIDENCE`], and the confidence reached; the largest value (`k = n`) when no
/// rank reaches it. `None` for `n = 0`.
pub fn p95_upper_rank(n: u64) -> Option<(u64, f64)> {
    if n == 0 {
        return None;
    }
    // Remembered per `n`: every publish asks again for each young target, and the sum below is
    // O(n) logarithms and exponentials.
    static KNOWN: std::sync::OnceLock<std::sync::Mutex<std::collections::HashMap<u64, (u64, f64)>>> =
        std::sync::OnceLock::new();
    let known = KNOWN.get_or_init(Default::default);
    if let Some(r) = known.lock().ok().and_then(|m| m.get(&n).copied()) {
        return Some(r);
    }
    let r = upper_rank(n);
    if let Ok(mut m) = known.lock() {
        // Bounded: `n` is a window's sample count, a few thousand values at most in practice.
        if m.len() < 65_536 {
            m.insert(n, r);
        }
    }
    Some(r)
}

/// [`p95_upper_rank`] computed, for `n > 0`.
fn upper_rank(n: u64) -> (u64, f64) {
    // P[Binomial(n, 0.95) <= j], summed upwards in log space (n is at most a few thousand).
    let (p, q) = (0.95f64, 0.05f64);
    let nf = n as f64;
    let mut log_pmf = nf * q.ln(); // j = 0
    let mut cdf = log_pmf.exp();
    for j in 0..n {
        // P[Bin <= j] >= target: the (j+1)-th smallest bounds the P95.
        if cdf >= PROVISIONAL_CONFIDENCE {
            return (j + 1, cdf.min(1.0));
        }
        let jf = j as f64;
        log_pmf += ((nf - jf) / (jf + 1.0)).ln() + (p / q).ln();
        cdf += log_pmf.exp();
    }
    (n, 1.0 - p.powf(nf))
}

/// The provisional P95 bound from `n` values, reading the k-th smallest through `quantile`
/// (nearest-rank quantile over the same values).
pub fn p95_upper_bound(n: u64, quantile: impl FnOnce(f64) -> Option<f64>) -> Option<P95Bound> {
    let (k, confidence) = p95_upper_rank(n)?;
    // Nearest rank ceil(q·n) = k for q just under k/n.
    let q = (k as f64 - 0.5) / n as f64;
    quantile(q).map(|value| P95Bound { value, samples: n, confidence })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::sample::Outcome;
    use crate::vocab::target::Target;
    use chrono::Utc;

    fn probe(outcome: Outcome, ttfb: f64, ttft: f64) -> Sample {
        let t = Target::new("p".into(), "m".into(), None, "eu".into());
        let mut s = Sample::new(t, Utc::now(), Utc::now());
        s.outcome = outcome;
        (s.ttfb_ms, s.ttft_ms) = (Some(ttfb), Some(ttft));
        s
    }

    fn rule() -> Failover {
        Failover { factor: 2.0, provisional_min_samples: 30 }
    }

    fn published(p95: f64) -> Baseline {
        Baseline { count: 500, p50: Some(p95 / 2.0), p95: Some(p95), p99: None }
    }

    fn closed() -> BreakerView<'static> {
        BreakerView { state: State::Closed, reason: None }
    }

    #[test]
    fn a_deadline_is_the_factor_times_the_p95_or_its_bound_once_enough_samples_exist() {
        let f = rule();
        assert_eq!(f.deadline(&published(300.0), None).ms, Some(600.0));
        let young = Baseline { count: 40, ..Baseline::default() };
        let bound = P95Bound { value: 350.0, samples: 40, confidence: 0.87 };
        let d = f.deadline(&young, Some(bound));
        assert_eq!((d.ms, d.p95, d.bound), (Some(700.0), Some(350.0), Some(bound)));
        let too_young = P95Bound { samples: 12, ..bound };
        assert_eq!(f.deadline(&young, Some(too_young)), Deadline::default(), "below min_samples_p50: no deadline");
    }

    #[test]
    fn the_rule_orders_breaker_probe_and_flapping_as_documented() {
        let d = Deadlines {
            ttfb: rule().deadline(&published(100.0), None),
            ttft: rule().deadline(&published(300.0), None),
        };
        let within = verdict(&probe(Outcome::Ok, 150.0, 600.0), &d);
        assert_eq!(within, ProbeVerdict::Within, "at the deadline is not over it");
        let slow = verdict(&probe(Outcome::Ok, 90.0, 720.0), &d);
        assert_eq!(slow, ProbeVerdict::Slow { over: vec!["ttft".into()], reason: "ttft p95 2.4x baseline".into() });
        let both = verdict(&probe(Outcome::Ok, 250.0, 900.0), &d);
        let want = "ttft p95 3.0x baseline; ttfb p95 2.5x baseline";
        assert_eq!(both, ProbeVerdict::Slow { over: vec!["ttft".into(), "ttfb".into()], reason: want.into() });
        let failed = verdict(&probe(Outcome::ServerError, 90.0, 900.0), &d);
        assert_eq!(failed, ProbeVerdict::Failed("server_error".into()), "a failure is a failure, however slow");
        assert_eq!(verdict(&probe(Outcome::Ok, 5_000.0, 9_000.0), &Deadlines::default()), ProbeVerdict::Within);

        let h = |b: BreakerView<'_>, v: Option<&ProbeVerdict>, f: bool| judge(b, v, &[], f, None, Utc::now());
        assert_eq!(h(closed(), Some(&within), false), Health { state: HealthState::Ok, ..Health::default() });
        let deg = h(closed(), Some(&slow), false);
        assert_eq!((deg.state, deg.reason.as_deref()), (HealthState::Degraded, Some("ttft p95 2.4x baseline")));
        assert_eq!(deg.over, ["ttft"], "the page marks the metric that was over");
        let down = h(closed(), Some(&failed), true);
        assert_eq!((down.state, down.flapping), (HealthState::Down, true));
        assert_eq!(down.reason.as_deref(), Some("flapping; last probe failed: server_error"));
        let open = BreakerView { state: State::Open, reason: Some("2 failures in a row") };
        let d_open = h(open, Some(&within), false);
        assert_eq!(
            (d_open.state, d_open.reason.as_deref()),
            (HealthState::Down, Some("breaker open: 2 failures in a row"))
        );
        let half = h(BreakerView { state: State::HalfOpen, reason: None }, Some(&slow), false);
        assert_eq!(half.state, HealthState::HalfOpen);
        assert_eq!(half.reason.as_deref(), Some("breaker half_open: the next probe decides; ttft p95 2.4x baseline"));
        let waiting = h(closed(), None, false);
        assert_eq!((waiting.state, waiting.reason.as_deref()), (HealthState::Waiting, Some("not probed yet")));
        assert!(h(closed(), Some(&within), false).is_clean() && !h(closed(), Some(&within), true).is_clean());
    }

    fn reply(ok: Option<bool>) -> Sample {
        let mut s = probe(if ok.is_some() { Outcome::Ok } else { Outcome::ServerError }, 90.0, 200.0);
        s.adherence_ok = ok;
        s
    }

    #[test]
    fn replies_that_ignore_the_system_prompt_n_in_a_row_demote_and_one_obeying_reply_clears_it() {
        let rule = CapabilityRule { replies: 3 };
        let mut r = Replies::default();
        for ok in [Some(true), Some(false), Some(false)] {
            r.record(&reply(ok), rule);
        }
        assert!(r.failures(rule).is_empty(), "two of the last three disobeyed: not yet");
        r.record(&reply(None), rule);
        assert!(r.failures(rule).is_empty(), "a reply not judged (failed probe) changes nothing");
        r.record(&reply(Some(false)), rule);
        let failing = r.failures(rule);
        assert_eq!(failing, [CapabilityFailure { capability: Capability::SystemPrompt, replies: 3 }]);
        assert_eq!(failing[0].reason(), "replies ignore the system prompt (last 3 of 3)");
        let mut fresh = Replies::default();
        fresh.record(&reply(Some(false)), rule);
        fresh.record(&reply(Some(false)), rule);
        assert!(fresh.failures(rule).is_empty(), "fewer than N judged replies judge nothing");
        let one = CapabilityRule { replies: 0 };
        assert_eq!(fresh.failures(one).len(), 1, "N is at least 1");

        // Through the rule: degraded, with the reason, the breaker's state kept.
        let within = ProbeVerdict::Within;
        let h = judge(closed(), Some(&within), &failing, false, None, Utc::now());
        assert_eq!(h.state, HealthState::Degraded);
        assert_eq!(h.reason.as_deref(), Some("replies ignore the system prompt (last 3 of 3)"));
        assert_eq!(h.failing, ["system_prompt"]);
        assert!(h.over.is_empty() && !h.is_clean(), "demoted in chains");
        let slow = ProbeVerdict::Slow { over: vec!["ttft".into()], reason: "ttft p95 2.4x baseline".into() };
        let both = judge(closed(), Some(&slow), &failing, true, None, Utc::now());
        assert_eq!(
            (both.state, both.reason.as_deref()),
            (
                HealthState::Degraded,
                Some("flapping; ttft p95 2.4x baseline; replies ignore the system prompt (last 3 of 3)")
            )
        );
        let failed = ProbeVerdict::Failed("server_error".into());
        let down = judge(closed(), Some(&failed), &failing, false, None, Utc::now());
        assert_eq!(down.state, HealthState::Down, "a failure outranks a capability failure");
        assert_eq!(
            down.reason.as_deref(),
            Some("last probe failed: server_error; replies ignore the system prompt (last 3 of 3)")
        );
        let open = judge(
            BreakerView { state: State::Open, reason: Some("tripped") },
            Some(&within),
            &failing,
            false,
            None,
            Utc::now(),
        );
        assert_eq!((open.state, open.reason.as_deref()), (HealthState::Down, Some("breaker open: tripped")));
        assert_eq!(open.failing, ["system_prompt"], "still named, so the rank keeps it behind");
        r.record(&reply(Some(true)), rule);
        assert!(r.failures(rule).is_empty(), "one obeying reply clears it");
        assert_eq!(judge(closed(), Some(&within), &r.failures(rule), false, None, Utc::now()).state, HealthState::Ok);
    }

    #[test]
    fn a_429_demotes_for_the_backoff_or_its_retry_after_and_names_its_class() {
        let rule = RateLimitRule { backoff: chrono::Duration::minutes(2), trips: 3 };
        let at = DateTime::parse_from_rfc3339("2026-12-03T12:00:00Z").expect("time").with_timezone(&Utc);
        let secs = |s: i64| at + chrono::Duration::seconds(s);
        let mut limited = probe(Outcome::RateLimited, 40.0, 0.0);
        limited.started_at = at;
        let b = rule.backoff(&limited).expect("a 429 starts a backoff");
        assert_eq!(b.until, secs(120), "no Retry-After: the configured backoff");
        limited.retry_after_s = Some(300.0);
        assert_eq!(rule.backoff(&limited).map(|b| b.until), Some(secs(300)), "a longer Retry-After wins");
        limited.retry_after_s = Some(5.0);
        assert_eq!(rule.backoff(&limited).map(|b| b.until), Some(secs(120)), "a shorter one does not");
        limited.retry_after_s = Some(1e300);
        assert_eq!(rule.backoff(&limited).map(|b| b.until), Some(secs(3600)), "capped at an hour");
        assert_eq!(rule.backoff(&probe(Outcome::ServerError, 1.0, 1.0)), None, "only a 429 backs off");

        let failed = ProbeVerdict::Failed("rate_limited".into());
        let h = judge(closed(), Some(&failed), &[], false, Some(&b), secs(30));
        assert_eq!(h.state, HealthState::Degraded, "a 429 is not down");
        assert_eq!(h.reason.as_deref(), Some("rate limited (429), backing off until 2026-12-03T12:02:00Z"));
        assert_eq!((h.backoff_until, h.last_failure_class.as_deref()), (Some(secs(120)), Some("rate_limited")));
        // A good probe inside the backoff keeps it demoted; past the backoff it is clean again.
        let within = ProbeVerdict::Within;
        let h = judge(closed(), Some(&within), &[], false, Some(&b), secs(90));
        assert_eq!((h.state, h.last_failure_class.as_deref()), (HealthState::Degraded, Some("rate_limited")));
        let h = judge(closed(), Some(&within), &[], false, Some(&b), secs(120));
        assert!(h.is_clean() && h.backoff_until.is_none() && h.last_failure_class.is_none(), "{h:?}");
        let h = judge(closed(), Some(&failed), &[], false, Some(&b), secs(121));
        assert_eq!(h.state, HealthState::Ok, "a 429 whose backoff is over judges nothing more");
        // A 5xx is down at once, backoff or not, and says its class.
        let down = judge(closed(), Some(&ProbeVerdict::Failed("server_error".into())), &[], false, Some(&b), secs(60));
        assert_eq!((down.state, down.last_failure_class.as_deref()), (HealthState::Down, Some("server_error")));
        assert_eq!(
            down.reason.as_deref(),
            Some("rate limited (429), backing off until 2026-12-03T12:02:00Z; last probe failed: server_error")
        );
    }

    #[test]
    fn the_p95_upper_rank_is_the_smallest_order_statistic_with_95_percent_confidence() {
        assert_eq!(p95_upper_rank(0), None);
        // Below 59 values even the largest bounds the P95 with less than 95 % confidence.
        let (k, c) = p95_upper_rank(30).expect("some");
        assert_eq!(k, 30);
        assert!((c - (1.0 - 0.95f64.powi(30))).abs() < 1e-9, "{c}");
        let (k, c) = p95_upper_rank(59).expect("some");
        assert_eq!(k, 59);
        assert!(c >= 0.95, "{c}");
        // With 100 values the 99th smallest is the bound: P[Bin(100, .95) <= 98] ≈ 0.963.
        let (k, c) = p95_upper_rank(100).expect("some");
        assert_eq!(k, 99);
        assert!((0.95..0.97).contains(&c), "{c}");
        let (k, c) = p95_upper_rank(299).expect("some");
        assert!(c >= 0.95 && k < 299 && k > 290, "{k} {c}");
        // The quantile asked for lands on rank k by nearest rank.
        let mut asked = 0.0;
        p95_upper_bound(100, |q| {
            asked = q;
            Some(1.0)
        });
        assert_eq!((asked * 100.0_f64).ceil() as u64, 99);
    }
}
