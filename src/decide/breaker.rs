//! Circuit breaker per target: a pure state machine fed probes, a baseline P95 and an injected `now`.
//!
//! `closed` → `open` after `consecutive_failures` failed probes in a row whose first and last lie
//! within `failure_window` (or, with `failure_k` < `failure_n`, once `failure_k` of the last
//! `failure_n` judged probes failed, however far apart), or after `latency_trips` probes in a row
//! over the failover threshold
//! ([`crate::decide::baseline::exceeds_failover`]: TTFB or TTFT above `failover_factor` × that metric's
//! P95, only where the P95 is known). `open` → `half_open` once `open_for` has
//! passed (on [`Breaker::tick`] or the next [`Breaker::observe`]); in `half_open` the next probe
//! decides: good → `closed`, failed or slow → `open` again.
//!
//! Rate limits: the first `rate_limited` probe of an episode starts a grace period of the rate-limit
//! backoff (`breaker.rate_limit_backoff`, or the `Retry-After` it carried when longer: the one rule
//! of [`RateLimitRule`]); 429s of the episode are *excused* — they neither count as failures nor
//! break a streak — while the grace period runs and until `rate_limit_trips` of them came in a row,
//! because a provider asking us to back off is not down. Later 429s of the episode count as failures
//! (the refusal persists). Any other probe ends the episode.
//! Any good probe resets the failure streak, so alternating good/bad probes never open a breaker
//! that needs two or more failures in a row.

use crate::config::BreakerConfig;
use crate::decide::baseline::{worst_excess, Excess, LatencyP95};
use crate::decide::health::{Failover, RateLimitRule};
use crate::vocab::breaker::State;
use crate::vocab::records::{BreakerRecord, BreakerTransition, JsonText};
use crate::vocab::sample::{Outcome, Sample};
use crate::vocab::target::Target;
use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use thiserror::Error;
use uuid::Uuid;

/// A stored breaker record this version cannot read.
#[derive(Debug, Error)]
pub enum BreakerError {
    /// The detail JSON does not have the expected shape.
    #[error("breaker {target}: bad detail: {message}")]
    BadDetail {
        /// Target id.
        target: String,
        /// What was wrong.
        message: String,
    },
}

/// Breaker rules, taken from `[breaker]` and the failover rule (`decide::health::Failover`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BreakerSettings {
    /// Failed probes in a row that open it (0 disables); with `failure_n` above it, failed probes
    /// among the last `failure_n` (k of n).
    pub consecutive_failures: u32,
    /// The window of k-of-n counting, in judged probes (equal to `consecutive_failures`: in a row).
    pub failure_n: u32,
    /// The first and last of those lie within this span.
    pub failure_window: Duration,
    /// Slow probes in a row that open it (0 disables).
    pub latency_trips: u32,
    /// A probe is slow when its TTFB exceeds this × baseline P95.
    pub failover_factor: f64,
    /// Time open before the half-open probe.
    pub open_for: Duration,
    /// How 429s are waited out (`breaker.rate_limit_backoff`, `breaker.rate_limit_trips`).
    pub rate_limit: RateLimitRule,
}

impl BreakerSettings {
    /// Settings from the validated config.
    pub fn from_config(breaker: &BreakerConfig, failover: Failover) -> Self {
        let dur = |d: std::time::Duration| Duration::from_std(d).unwrap_or(Duration::MAX);
        BreakerSettings {
            consecutive_failures: breaker.failure_k,
            failure_n: breaker.failure_n.max(breaker.failure_k),
            failure_window: dur(breaker.failure_window),
            latency_trips: breaker.latency_trips,
            failover_factor: failover.factor,
            open_for: dur(breaker.open_for),
            rate_limit: RateLimitRule::of(breaker),
        }
    }

    /// Whether failures are counted k of n (not in a row).
    fn k_of_n(&self) -> bool {
        self.failure_n > self.consecutive_failures
    }
}

pub use crate::decide::health::MAX_RETRY_AFTER_S;

/// `at + d`, saturating at the latest representable time instead of panicking on overflow.
fn later(at: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    at.checked_add_signed(d).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// What the breaker needs of a sample.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Probe {
    /// Sample id.
    pub id: Uuid,
    /// When the probe started.
    pub at: DateTime<Utc>,
    /// How it ended.
    pub outcome: Outcome,
    /// Its TTFB, when a response arrived.
    pub ttfb_ms: Option<f64>,
    /// Its TTFT, when content arrived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<f64>,
    /// Seconds the provider asked us to wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_s: Option<f64>,
}

impl From<&Sample> for Probe {
    fn from(s: &Sample) -> Self {
        Probe {
            id: s.id,
            at: s.started_at,
            outcome: s.outcome,
            ttfb_ms: s.ttfb_ms,
            ttft_ms: s.ttft_ms,
            retry_after_s: s.retry_after_s,
        }
    }
}

/// One state change and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Transition {
    /// State before.
    pub from: State,
    /// State after.
    pub to: State,
    /// When.
    pub at: DateTime<Utc>,
    /// Why, for humans.
    pub reason: String,
    /// The probes that decided it.
    pub probes: Vec<Probe>,
}

impl Transition {
    /// The history record for the store.
    pub fn to_record(&self, target: &Target) -> BreakerTransition {
        BreakerTransition {
            target: target.clone(),
            from_state: self.from,
            to_state: self.to,
            at: self.at,
            reason: self.reason.clone(),
        }
    }
}

/// Why the breaker is in its state: for `/v1/targets`, the status page and the stored record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Explanation {
    /// Current state.
    pub state: State,
    /// Since when.
    pub since: DateTime<Utc>,
    /// Why it entered it (`None` for a breaker that never moved).
    pub reason: Option<String>,
    /// The probes that tripped (or last decided) it.
    pub tripped_by: Vec<Probe>,
    /// When the next half-open probe is due (open breakers only).
    pub next_half_open: Option<DateTime<Utc>>,
}

/// Counters kept in the record's detail so a restart resumes mid-streak.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Detail {
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    tripped_by: Vec<Probe>,
    #[serde(default)]
    next_half_open: Option<DateTime<Utc>>,
    #[serde(default)]
    failures: Vec<Probe>,
    #[serde(default)]
    slow: Vec<Probe>,
    #[serde(default)]
    rate_limited_until: Option<DateTime<Utc>>,
    /// 429s in a row of the current episode.
    #[serde(default, skip_serializing_if = "is_zero")]
    rate_limited: u32,
    /// k of n: the last judged probes from the oldest failure among the last `failure_n` on
    /// (answered probes before it judge nothing, so a healthy breaker's record never changes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    recent: Vec<Probe>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// How one probe is judged.
enum Verdict {
    Good,
    Failed,
    Slow(Excess),
    Excused,
}

/// The breaker of one target.
#[derive(Debug, Clone, PartialEq)]
pub struct Breaker {
    /// Shared by every breaker of a monitor: a copy in each was 1.3 MB at 10,000 targets.
    settings: Arc<BreakerSettings>,
    state: State,
    since: DateTime<Utc>,
    detail: Detail,
}

/// The probe's value of the metric that made a probe slow.
fn latency(p: &Probe, e: Excess) -> Option<f64> {
    match e.metric {
        crate::decide::baseline::Metric::Ttft => p.ttft_ms,
        _ => p.ttfb_ms,
    }
}

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.0} ms"))
}

fn secs(d: Duration) -> String {
    format!("{}s", d.num_seconds())
}

impl Breaker {
    /// A closed breaker.
    pub fn new(settings: impl Into<Arc<BreakerSettings>>, now: DateTime<Utc>) -> Self {
        Breaker { settings: settings.into(), state: State::Closed, since: now, detail: Detail::default() }
    }

    /// Current state.
    pub fn state(&self) -> State {
        self.state
    }

    /// When it entered the current state.
    pub fn since(&self) -> DateTime<Utc> {
        self.since
    }

    /// Why it moved to its state, when it moved.
    pub fn reason(&self) -> Option<&str> {
        self.detail.reason.as_deref()
    }

    /// Why it is in its state, what tripped it and when it will next probe half-open.
    pub fn explain(&self) -> Explanation {
        Explanation {
            state: self.state,
            since: self.since,
            reason: self.detail.reason.clone(),
            tripped_by: self.detail.tripped_by.clone(),
            next_half_open: self.detail.next_half_open,
        }
    }

    /// Moves an open breaker to half-open once `open_for` has passed.
    pub fn tick(&mut self, now: DateTime<Utc>) -> Option<Transition> {
        let due = self.detail.next_half_open?;
        if self.state != State::Open || now < due {
            return None;
        }
        let reason = format!("open for {}; the next probe decides", secs(self.settings.open_for));
        Some(self.enter(State::HalfOpen, now, reason, Vec::new()))
    }

    /// Feeds one probe; returns the state change it caused, if any.
    ///
    /// When an open breaker's wait has passed and no [`tick`](Self::tick) moved it yet, this probe is the
    /// half-open probe: the returned transition then goes from `open` straight to its verdict, and its
    /// reason says so (call `tick` first to record the `half_open` step on its own).
    pub fn observe(&mut self, probe: Probe, p95: LatencyP95, now: DateTime<Utc>) -> Option<Transition> {
        let implicit = self.tick(now);
        let verdict = self.judge(&probe, p95);
        let decided = match self.state {
            State::Closed => self.observe_closed(probe, verdict, now),
            State::HalfOpen => self.observe_half_open(probe, verdict, now),
            State::Open => None,
        };
        match (implicit, decided) {
            (Some(first), Some(mut second)) => {
                second.from = first.from;
                second.reason = format!("open for {}, then {}", secs(self.settings.open_for), second.reason);
                Some(second)
            }
            (first, second) => second.or(first),
        }
    }

    fn judge(&mut self, probe: &Probe, p95: LatencyP95) -> Verdict {
        if probe.outcome == Outcome::RateLimited {
            // One grace period per episode: later 429s neither extend nor renew it, or a limiter that
            // always says "retry in 5 min" to a probe every minute could never open the breaker.
            let until = match self.detail.rate_limited_until {
                Some(u) => u,
                None => {
                    let u = self.settings.rate_limit.until(probe.at, probe.retry_after_s);
                    self.detail.rate_limited_until = Some(u);
                    self.detail.rate_limited = 0;
                    u
                }
            };
            self.detail.rate_limited = self.detail.rate_limited.saturating_add(1);
            let persists = self.detail.rate_limited >= self.settings.rate_limit.trips;
            return if probe.at >= until && persists { Verdict::Failed } else { Verdict::Excused };
        }
        self.detail.rate_limited_until = None;
        self.detail.rate_limited = 0;
        if probe.outcome.is_failure() {
            return Verdict::Failed;
        }
        match worst_excess(probe.ttfb_ms, probe.ttft_ms, p95, self.settings.failover_factor) {
            Some(e) if e.exceeded() => Verdict::Slow(e),
            _ => Verdict::Good,
        }
    }

    fn observe_closed(&mut self, probe: Probe, verdict: Verdict, now: DateTime<Utc>) -> Option<Transition> {
        if self.settings.k_of_n() {
            return self.observe_k_of_n(probe, verdict, now);
        }
        match verdict {
            Verdict::Excused => None,
            Verdict::Good => {
                self.detail.failures.clear();
                self.detail.slow.clear();
                None
            }
            Verdict::Failed => {
                self.detail.slow.clear();
                let window_start = probe.at - self.settings.failure_window;
                self.detail.failures.retain(|p| p.at >= window_start);
                self.detail.failures.push(probe);
                let n = self.settings.consecutive_failures as usize;
                if n == 0 || self.detail.failures.len() < n {
                    return None;
                }
                let probes = std::mem::take(&mut self.detail.failures);
                let outcomes: Vec<&str> = probes.iter().map(|p| p.outcome.as_str()).collect();
                let reason = format!(
                    "{} failed probes within {}: {}",
                    probes.len(),
                    secs(self.settings.failure_window),
                    outcomes.join(", ")
                );
                Some(self.trip(now, reason, probes))
            }
            Verdict::Slow(e) => {
                self.detail.failures.clear();
                self.observe_closed_slow(probe, e, now)
            }
        }
    }

    /// A slow probe while closed: `latency_trips` in a row open it.
    fn observe_closed_slow(&mut self, probe: Probe, e: Excess, now: DateTime<Utc>) -> Option<Transition> {
        self.detail.slow.push(probe);
        let n = self.settings.latency_trips as usize;
        if n == 0 || self.detail.slow.len() < n {
            return None;
        }
        let probes = std::mem::take(&mut self.detail.slow);
        let values: Vec<String> = probes.iter().map(|p| ms(latency(p, e))).collect();
        let reason = format!(
            "{} consecutive probes with {} above {}×P95 ({}): {}",
            probes.len(),
            e.metric.label(),
            self.settings.failover_factor,
            ms(Some(e.threshold)),
            values.join(", ")
        );
        Some(self.trip(now, reason, probes))
    }

    /// Closed, counting k of n: every judged probe joins the window, answered ones (slow ones too)
    /// as not failed; slow ones still count their own trips.
    fn observe_k_of_n(&mut self, probe: Probe, verdict: Verdict, now: DateTime<Utc>) -> Option<Transition> {
        if matches!(verdict, Verdict::Excused) {
            return None;
        }
        let (k, n) = (self.settings.consecutive_failures as usize, self.settings.failure_n as usize);
        self.detail.recent.push(probe.clone());
        let excess = self.detail.recent.len().saturating_sub(n);
        self.detail.recent.drain(..excess);
        let lead = self.detail.recent.iter().take_while(|p| !p.outcome.is_failure()).count();
        self.detail.recent.drain(..lead);
        match verdict {
            Verdict::Slow(e) => self.observe_closed_slow(probe, e, now),
            Verdict::Good => {
                self.detail.slow.clear();
                None
            }
            _ => {
                self.detail.slow.clear();
                let failed: Vec<Probe> =
                    self.detail.recent.iter().filter(|p| p.outcome.is_failure()).cloned().collect();
                if k == 0 || failed.len() < k {
                    return None;
                }
                let outcomes: Vec<&str> = failed.iter().map(|p| p.outcome.as_str()).collect();
                let reason = format!("{} of the last {n} probes failed: {}", failed.len(), outcomes.join(", "));
                Some(self.trip(now, reason, failed))
            }
        }
    }

    fn observe_half_open(&mut self, probe: Probe, verdict: Verdict, now: DateTime<Utc>) -> Option<Transition> {
        match verdict {
            Verdict::Excused => None,
            Verdict::Good => {
                let reason = format!("half-open probe succeeded (ttfb {})", ms(probe.ttfb_ms));
                Some(self.enter(State::Closed, now, reason, vec![probe]))
            }
            Verdict::Failed => {
                let reason = format!("half-open probe failed: {}", probe.outcome);
                Some(self.trip(now, reason, vec![probe]))
            }
            Verdict::Slow(e) => {
                let reason = format!(
                    "half-open probe slow: {} {} > {}",
                    e.metric.label().to_lowercase(),
                    ms(Some(e.value)),
                    ms(Some(e.threshold))
                );
                Some(self.trip(now, reason, vec![probe]))
            }
        }
    }

    fn trip(&mut self, now: DateTime<Utc>, reason: String, probes: Vec<Probe>) -> Transition {
        let t = self.enter(State::Open, now, reason, probes);
        self.detail.next_half_open = Some(later(now, self.settings.open_for));
        t
    }

    fn enter(&mut self, to: State, now: DateTime<Utc>, reason: String, probes: Vec<Probe>) -> Transition {
        let from = self.state;
        self.state = to;
        self.since = now;
        self.detail.failures.clear();
        self.detail.slow.clear();
        self.detail.recent.clear();
        self.detail.next_half_open = None;
        self.detail.reason = Some(reason.clone());
        if !probes.is_empty() {
            self.detail.tripped_by = probes.clone();
        }
        if to == State::Closed {
            self.detail.tripped_by.clear();
        }
        Transition { from, to, at: now, reason, probes }
    }

    /// The record to persist for `target`.
    pub fn to_record(&self, target: &Target) -> BreakerRecord {
        BreakerRecord {
            target: target.clone(),
            state: self.state,
            since: self.since,
            detail: JsonText::of(&self.detail).unwrap_or_else(|_| JsonText::null()),
        }
    }

    /// A fingerprint of what [`Breaker::to_record`] stores: its state, since when, and the
    /// detail, whose probes count by sample id (a sample's id fixes every value taken from it).
    /// Equal records give equal fingerprints, so a persist finds the breakers that changed
    /// without keeping a copy of each (5 MB in a heap profile at 10,000 targets); two different
    /// records share one with a chance of 2⁻⁶⁴.
    pub fn fingerprint(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::hash::DefaultHasher::new();
        self.state.hash(&mut h);
        self.since.hash(&mut h);
        let d = &self.detail;
        d.reason.hash(&mut h);
        for probes in [&d.tripped_by, &d.failures, &d.slow, &d.recent] {
            probes.len().hash(&mut h);
            probes.iter().for_each(|p| p.id.hash(&mut h));
        }
        d.next_half_open.hash(&mut h);
        d.rate_limited_until.hash(&mut h);
        d.rate_limited.hash(&mut h);
        h.finish()
    }

    /// Rebuilds a breaker from its stored record (after a restart it resumes where it was).
    pub fn from_record(
        settings: impl Into<Arc<BreakerSettings>>,
        record: &BreakerRecord,
    ) -> Result<Self, BreakerError> {
        let state = record.state;
        let detail = if record.detail.is_null() {
            Detail::default()
        } else {
            record
                .detail
                .parse()
                .map_err(|e| BreakerError::BadDetail { target: record.target.id(), message: e.to_string() })?
        };
        Ok(Breaker { settings: settings.into(), state, since: record.since, detail })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn settings() -> BreakerSettings {
        BreakerSettings {
            consecutive_failures: 3,
            failure_n: 3,
            failure_window: Duration::seconds(120),
            latency_trips: 2,
            failover_factor: 2.0,
            open_for: Duration::minutes(5),
            rate_limit: RateLimitRule { backoff: Duration::seconds(1), trips: 1 },
        }
    }

    fn t(secs: i64) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).single().expect("valid time") + Duration::seconds(secs)
    }

    fn probe(at: i64, outcome: Outcome, ttfb: f64) -> Probe {
        Probe { id: Uuid::now_v7(), at: t(at), outcome, ttfb_ms: Some(ttfb), ttft_ms: None, retry_after_s: None }
    }

    fn p95(ttfb: f64) -> LatencyP95 {
        LatencyP95 { ttfb: Some(ttfb), ttft: None }
    }

    #[test]
    fn a_slow_first_token_trips_like_a_slow_first_byte() {
        let mut b = Breaker::new(settings(), t(0));
        let base = LatencyP95 { ttfb: Some(100.0), ttft: Some(400.0) };
        let queued = |at: i64| Probe { ttft_ms: Some(1_500.0), ..probe(at, Outcome::Ok, 90.0) };
        assert_eq!(b.observe(queued(0), base, t(0)), None);
        let tr = b.observe(queued(60), base, t(60)).expect("two probes over 2×P95 of TTFT trip");
        assert_eq!(tr.to, State::Open);
        assert!(tr.reason.contains("TTFT above 2×P95 (800 ms)"), "{}", tr.reason);
        let mut fine = Breaker::new(settings(), t(0));
        let quick = |at: i64| Probe { ttft_ms: Some(700.0), ..probe(at, Outcome::Ok, 90.0) };
        for at in [0, 60, 120] {
            assert_eq!(fine.observe(quick(at), base, t(at)), None, "under both thresholds");
        }
    }

    fn ok(at: i64) -> Probe {
        probe(at, Outcome::Ok, 200.0)
    }

    #[test]
    fn the_fingerprint_moves_with_the_stored_record_and_only_with_it() {
        let target = Target::new("groq".into(), "llama".into(), None, "eu".into());
        let mut b = Breaker::new(settings(), t(0));
        let mut seen = vec![(b.fingerprint(), b.to_record(&target))];
        // A healthy breaker's record does not change between probes: neither does its print.
        b.observe(ok(0), LatencyP95::default(), t(0));
        assert_eq!(b.fingerprint(), seen[0].0);
        assert_eq!(b.to_record(&target), seen[0].1);
        // Each failure below changes the record (counted in its detail), and so does the trip
        // of `opened()`; each gives a print not seen before.
        for (at, p) in [(60, fail(60, Outcome::ServerError)), (120, fail(120, Outcome::Timeout))] {
            b.observe(p, LatencyP95::default(), t(at));
            let (print, record) = (b.fingerprint(), b.to_record(&target));
            assert!(seen.iter().all(|(p, r)| *p != print && *r != record), "at {at}: a new record, a new print");
            seen.push((print, record));
        }
        let open = opened();
        assert!(seen.iter().all(|(p, _)| *p != open.fingerprint()));
        // Rebuilt from its record, a breaker has the same print.
        let back = Breaker::from_record(settings(), &open.to_record(&target)).expect("rebuilt");
        assert_eq!(back.fingerprint(), open.fingerprint());
    }

    fn fail(at: i64, outcome: Outcome) -> Probe {
        probe(at, outcome, 50.0)
    }

    fn opened() -> Breaker {
        let mut b = Breaker::new(settings(), t(0));
        for (i, o) in [Outcome::ServerError, Outcome::ServerError, Outcome::Timeout].into_iter().enumerate() {
            b.observe(fail(60 * i as i64, o), LatencyP95::default(), t(60 * i as i64));
        }
        assert_eq!(b.state(), State::Open);
        b
    }

    #[test]
    fn closed_opens_after_consecutive_failures_within_the_window() {
        let mut b = Breaker::new(settings(), t(0));
        assert_eq!(b.observe(fail(0, Outcome::ServerError), LatencyP95::default(), t(0)), None);
        assert_eq!(b.observe(fail(60, Outcome::ServerError), LatencyP95::default(), t(60)), None);
        let tr = b.observe(fail(120, Outcome::Timeout), LatencyP95::default(), t(120)).expect("third failure opens it");
        assert_eq!((tr.from, tr.to, tr.at), (State::Closed, State::Open, t(120)));
        assert_eq!(tr.reason, "3 failed probes within 120s: server_error, server_error, timeout");
        let why = b.explain();
        assert_eq!(why.state, State::Open);
        assert_eq!(why.since, t(120));
        assert_eq!(why.next_half_open, Some(t(420)));
        assert_eq!(why.tripped_by.iter().map(|p| p.at).collect::<Vec<_>>(), vec![t(0), t(60), t(120)]);
        assert_eq!(why.tripped_by[2].outcome, Outcome::Timeout);
    }

    #[test]
    fn failures_spread_wider_than_the_window_do_not_open_it() {
        let mut b = Breaker::new(settings(), t(0));
        for at in [0, 70, 140, 210, 280] {
            assert_eq!(b.observe(fail(at, Outcome::ServerError), LatencyP95::default(), t(at)), None, "at {at}s");
        }
        assert_eq!(b.state(), State::Closed);
    }

    #[test]
    fn a_good_probe_resets_the_failure_streak() {
        let mut b = Breaker::new(settings(), t(0));
        b.observe(fail(0, Outcome::ServerError), LatencyP95::default(), t(0));
        b.observe(fail(10, Outcome::ServerError), LatencyP95::default(), t(10));
        b.observe(ok(20), p95(250.0), t(20));
        b.observe(fail(30, Outcome::ServerError), LatencyP95::default(), t(30));
        assert_eq!(b.observe(fail(40, Outcome::ServerError), LatencyP95::default(), t(40)), None);
        assert!(b.observe(fail(50, Outcome::ServerError), LatencyP95::default(), t(50)).is_some());
    }

    #[test]
    fn consecutive_slow_probes_open_it_only_when_p95_is_known() {
        let mut b = Breaker::new(settings(), t(0));
        assert_eq!(b.observe(probe(0, Outcome::Ok, 900.0), LatencyP95::default(), t(0)), None);
        assert_eq!(
            b.observe(probe(60, Outcome::Ok, 900.0), LatencyP95::default(), t(60)),
            None,
            "no P95, no latency trip"
        );
        assert_eq!(b.observe(probe(120, Outcome::Ok, 700.0), p95(310.0), t(120)), None);
        let tr = b.observe(probe(180, Outcome::Ok, 810.0), p95(310.0), t(180)).expect("second slow probe trips");
        assert_eq!(tr.to, State::Open);
        assert_eq!(tr.reason, "2 consecutive probes with TTFB above 2×P95 (620 ms): 700 ms, 810 ms");
    }

    #[test]
    fn a_fast_probe_between_slow_ones_keeps_it_closed() {
        let mut b = Breaker::new(settings(), t(0));
        for (i, ttfb) in [700.0, 300.0, 700.0, 300.0, 700.0].into_iter().enumerate() {
            let at = 60 * i as i64;
            assert_eq!(b.observe(probe(at, Outcome::Ok, ttfb), p95(310.0), t(at)), None);
        }
    }

    #[test]
    fn open_turns_half_open_after_open_for_on_tick() {
        let mut b = opened();
        assert_eq!(b.tick(t(419)), None, "not before open_for has passed");
        assert_eq!(
            b.observe(fail(400, Outcome::ServerError), LatencyP95::default(), t(400)),
            None,
            "probes while open change nothing"
        );
        let tr = b.tick(t(420)).expect("half-open at since + open_for");
        assert_eq!((tr.from, tr.to), (State::Open, State::HalfOpen));
        assert_eq!(tr.reason, "open for 300s; the next probe decides");
        assert_eq!(b.explain().next_half_open, None);
        assert_eq!(b.tick(t(500)), None);
    }

    #[test]
    fn half_open_closes_on_a_good_probe() {
        let mut b = opened();
        b.tick(t(420));
        let tr = b.observe(ok(430), p95(310.0), t(430)).expect("good probe closes it");
        assert_eq!((tr.from, tr.to), (State::HalfOpen, State::Closed));
        assert_eq!(tr.reason, "half-open probe succeeded (ttfb 200 ms)");
        assert!(b.explain().tripped_by.is_empty());
    }

    #[test]
    fn half_open_reopens_on_a_failed_or_slow_probe() {
        let mut b = opened();
        b.tick(t(420));
        let tr = b.observe(fail(430, Outcome::ConnectError), LatencyP95::default(), t(430)).expect("failure reopens");
        assert_eq!((tr.from, tr.to), (State::HalfOpen, State::Open));
        assert_eq!(tr.reason, "half-open probe failed: connect_error");
        assert_eq!(b.explain().next_half_open, Some(t(730)));

        b.tick(t(730));
        let tr = b.observe(probe(740, Outcome::Ok, 999.0), p95(310.0), t(740)).expect("slow reopens");
        assert_eq!(tr.to, State::Open);
        assert_eq!(tr.reason, "half-open probe slow: ttfb 999 ms > 620 ms");
    }

    #[test]
    fn a_probe_after_open_for_without_tick_is_the_half_open_probe() {
        let mut b = opened();
        let tr = b.observe(ok(425), LatencyP95::default(), t(425)).expect("decides");
        assert_eq!((tr.from, tr.to), (State::Open, State::Closed));
        assert_eq!(tr.reason, "open for 300s, then half-open probe succeeded (ttfb 200 ms)");
    }

    #[test]
    fn flapping_never_opens_it() {
        for needed in [2, 3, 5] {
            let mut b =
                Breaker::new(BreakerSettings { consecutive_failures: needed, failure_n: needed, ..settings() }, t(0));
            for i in 0..200 {
                let at = 10 * i;
                let p = if i % 2 == 0 { fail(at, Outcome::ServerError) } else { ok(at) };
                assert_eq!(b.observe(p, p95(300.0), t(at)), None, "probe {i} with {needed} needed");
            }
            assert_eq!(b.state(), State::Closed);
        }
    }

    #[test]
    fn rate_limits_count_only_after_the_advertised_wait() {
        let mut b = Breaker::new(settings(), t(0));
        let limited = |at: i64, wait: Option<f64>| Probe { retry_after_s: wait, ..fail(at, Outcome::RateLimited) };
        // A 429 asking for 300 s, then probes every 60 s inside that wait: none counts.
        for at in [0, 60, 120, 180, 240] {
            assert_eq!(
                b.observe(limited(at, Some(300.0)), LatencyP95::default(), t(at)),
                None,
                "429 at {at}s is within the wait"
            );
        }
        assert_eq!(b.state(), State::Closed);
        // Still refused after the wait ran out: these count.
        assert_eq!(b.observe(limited(300, Some(30.0)), LatencyP95::default(), t(300)), None);
        assert_eq!(b.observe(limited(360, Some(30.0)), LatencyP95::default(), t(360)), None);
        let tr =
            b.observe(limited(420, Some(30.0)), LatencyP95::default(), t(420)).expect("third counted 429 opens it");
        assert_eq!(tr.reason, "3 failed probes within 120s: rate_limited, rate_limited, rate_limited");
    }

    #[test]
    fn an_absurd_retry_after_is_capped_and_never_overflows() {
        for wait in [9_999_999_999_999.0, 1e300, f64::MAX, 4e15] {
            let mut b = Breaker::new(settings(), t(0));
            let limited = |at: i64| Probe { retry_after_s: Some(wait), ..fail(at, Outcome::RateLimited) };
            assert_eq!(b.observe(limited(0), LatencyP95::default(), t(0)), None, "{wait}: the first 429 is excused");
            // The grace ends after MAX_RETRY_AFTER_S, not in a million years: 429s then count.
            let after = MAX_RETRY_AFTER_S as i64;
            b.observe(limited(after), LatencyP95::default(), t(after));
            b.observe(limited(after + 30), LatencyP95::default(), t(after + 30));
            assert!(
                b.observe(limited(after + 60), LatencyP95::default(), t(after + 60)).is_some(),
                "{wait}: opens after the cap"
            );
        }
    }

    #[test]
    fn an_open_time_beyond_the_calendar_saturates_instead_of_panicking() {
        let s = BreakerSettings { open_for: Duration::MAX, ..settings() };
        let mut b = Breaker::new(s, t(0));
        for at in [0, 30] {
            b.observe(fail(at, Outcome::ServerError), LatencyP95::default(), t(at));
        }
        assert!(b.observe(fail(60, Outcome::ServerError), LatencyP95::default(), t(60)).is_some());
        assert_eq!(b.tick(t(120)), None, "still open: the wait saturated at the end of time");
    }

    #[test]
    fn a_rate_limit_without_retry_after_counts_once_the_backoff_is_over() {
        let mut b = Breaker::new(settings(), t(0));
        for at in [0, 30] {
            b.observe(fail(at, Outcome::RateLimited), LatencyP95::default(), t(at));
        }
        assert_eq!(b.state(), State::Closed, "the first 429 is inside its 1 s backoff");
        b.observe(fail(60, Outcome::RateLimited), LatencyP95::default(), t(60));
        assert!(b.observe(fail(90, Outcome::RateLimited), LatencyP95::default(), t(90)).is_some());
    }

    #[test]
    fn a_steady_429_opens_the_breaker_only_once_it_persists_and_a_5xx_at_once() {
        // The defaults at a 60 s interval: backoff 2 min, 3 429s in a row, 3 failures in a row.
        let s = BreakerSettings {
            rate_limit: RateLimitRule { backoff: Duration::minutes(2), trips: 3 },
            failure_window: Duration::minutes(5),
            ..settings()
        };
        let mut limited = Breaker::new(s, t(0));
        let mut opened_at = None;
        for i in 0..10 {
            let at = 60 * i;
            if limited.observe(fail(at, Outcome::RateLimited), LatencyP95::default(), t(at)).is_some() {
                opened_at = Some(at);
                break;
            }
        }
        assert_eq!(opened_at, Some(240), "the 5th 429 (0, 60 excused; 120, 180, 240 counted)");
        let mut down = Breaker::new(s, t(0));
        let mut opened_at = None;
        for i in 0..10 {
            let at = 60 * i;
            if down.observe(fail(at, Outcome::ServerError), LatencyP95::default(), t(at)).is_some() {
                opened_at = Some(at);
                break;
            }
        }
        assert_eq!(opened_at, Some(120), "the 3rd 5xx");
        // A Retry-After longer than the backoff stretches the excused time.
        let mut told = Breaker::new(s, t(0));
        let asked = |at: i64| Probe { retry_after_s: Some(300.0), ..fail(at, Outcome::RateLimited) };
        for at in [0, 60, 120, 180, 240, 300, 360] {
            assert_eq!(told.observe(asked(at), LatencyP95::default(), t(at)), None, "{at}");
        }
        assert!(told.observe(asked(420), LatencyP95::default(), t(420)).is_some(), "300, 360, 420 counted");
    }

    #[test]
    fn k_of_n_opens_on_k_failures_among_the_last_n_and_never_on_one() {
        let s = BreakerSettings { consecutive_failures: 3, failure_n: 7, ..settings() };
        // One request in three failing: never 3 in a row, but 3 of the last 7 by the 7th probe.
        let mut hidden = Breaker::new(s, t(0));
        let mut in_a_row = Breaker::new(settings(), t(0));
        let mut opened = None;
        for i in 0..30 {
            let at = 60 * i;
            let p = if i % 3 == 0 { fail(at, Outcome::ServerError) } else { ok(at) };
            assert_eq!(in_a_row.observe(p.clone(), p95(300.0), t(at)), None, "in a row never trips");
            if let Some(tr) = hidden.observe(p, p95(300.0), t(at)) {
                opened = Some((i, tr.reason));
                break;
            }
        }
        let (i, reason) = opened.expect("k of n trips");
        assert_eq!(i, 6, "the third failure, six probes after the first");
        assert_eq!(reason, "3 of the last 7 probes failed: server_error, server_error, server_error");
        assert_eq!(hidden.explain().tripped_by.len(), 3);
        // A single failure, and two far apart, never do.
        let mut single = Breaker::new(s, t(0));
        for i in 0..50 {
            let at = 60 * i;
            let p = if i % 7 == 0 { fail(at, Outcome::Timeout) } else { ok(at) };
            assert_eq!(single.observe(p, p95(300.0), t(at)), None, "probe {i}");
        }
    }

    #[test]
    fn a_healthy_k_of_n_breaker_never_changes_its_record_and_a_restart_keeps_the_window() {
        let target = Target::new("groq".into(), "llama".into(), None, "eu".into());
        let s = BreakerSettings { consecutive_failures: 2, failure_n: 4, ..settings() };
        let mut b = Breaker::new(s, t(0));
        b.observe(ok(0), p95(300.0), t(0));
        let before = b.to_record(&target);
        for at in [60, 120, 180] {
            b.observe(ok(at), p95(300.0), t(at));
        }
        assert_eq!(b.to_record(&target), before, "nothing to write while healthy");
        b.observe(fail(240, Outcome::ServerError), p95(300.0), t(240));
        b.observe(ok(300), p95(300.0), t(300));
        let mut restored = Breaker::from_record(s, &b.to_record(&target)).expect("readable");
        assert!(
            restored.observe(fail(360, Outcome::Timeout), p95(300.0), t(360)).is_some(),
            "2 failures among the last 4"
        );
        // Four answered probes after a failure push it out of the window.
        let mut aged = Breaker::new(s, t(0));
        aged.observe(fail(0, Outcome::ServerError), p95(300.0), t(0));
        for at in [60, 120, 180, 240] {
            aged.observe(ok(at), p95(300.0), t(at));
        }
        assert_eq!(aged.to_record(&target).detail, before.detail, "the failure aged out");
        assert_eq!(aged.observe(fail(300, Outcome::ServerError), p95(300.0), t(300)), None);
    }

    #[test]
    fn a_good_probe_ends_a_rate_limit_episode() {
        let mut b = Breaker::new(settings(), t(0));
        let limited = |at: i64| Probe { retry_after_s: Some(20.0), ..fail(at, Outcome::RateLimited) };
        assert_eq!(b.observe(limited(0), LatencyP95::default(), t(0)), None);
        b.observe(ok(60), LatencyP95::default(), t(60));
        // A fresh episode: its announcing 429 is excused again, later ones count.
        for at in [120, 180, 240] {
            b.observe(limited(at), LatencyP95::default(), t(at));
        }
        assert_eq!(b.state(), State::Closed, "one excused, two counted");
        assert!(b.observe(limited(300), LatencyP95::default(), t(300)).is_some());
    }

    #[test]
    fn a_restart_resumes_the_same_state() {
        let target = Target::new("groq".into(), "llama".into(), None, "eu".into());
        let mut mid_streak = Breaker::new(settings(), t(0));
        mid_streak.observe(fail(0, Outcome::ServerError), LatencyP95::default(), t(0));
        mid_streak.observe(fail(60, Outcome::ServerError), LatencyP95::default(), t(60));
        let record = mid_streak.to_record(&target);
        assert_eq!(record.state, State::Closed);
        let mut restored = Breaker::from_record(settings(), &record).expect("readable record");
        assert_eq!(restored, mid_streak);
        assert!(
            restored.observe(fail(90, Outcome::Timeout), LatencyP95::default(), t(90)).is_some(),
            "the streak survived"
        );

        let open = opened();
        let record = open.to_record(&target);
        assert_eq!((record.state.as_str(), record.since), ("open", t(120)));
        let restored = Breaker::from_record(settings(), &record).expect("readable record");
        assert_eq!(restored.explain(), open.explain());
        assert_eq!(restored.explain().next_half_open, Some(t(420)));

        // An unknown state name never reaches a record: the stored row fails to decode.
        assert_eq!("ajar".parse::<State>(), Err("unknown breaker state \"ajar\"".to_string()));
        let bad = BreakerRecord { detail: serde_json::json!({"failures": "three"}).into(), ..record };
        let err = Breaker::from_record(settings(), &bad).expect_err("bad detail");
        assert!(err.to_string().starts_with("breaker groq/llama: bad detail"), "{err}");
    }

    #[test]
    fn transitions_become_history_records() {
        let target = Target::new("groq".into(), "llama".into(), None, "eu".into());
        let mut b = Breaker::new(settings(), t(0));
        b.observe(fail(0, Outcome::ServerError), LatencyP95::default(), t(0));
        b.observe(fail(1, Outcome::ServerError), LatencyP95::default(), t(1));
        let tr = b.observe(fail(2, Outcome::ServerError), LatencyP95::default(), t(2)).expect("opens");
        let rec = tr.to_record(&target);
        assert_eq!((rec.from_state.as_str(), rec.to_state.as_str(), rec.at), ("closed", "open", t(2)));
        assert_eq!(rec.reason, "3 failed probes within 120s: server_error, server_error, server_error");
    }

    #[test]
    fn state_names_and_gauge_values_follow_the_spec() {
        let all = [State::Closed, State::HalfOpen, State::Open];
        assert_eq!(all.map(State::as_str), ["closed", "half_open", "open"]);
        assert_eq!(all.map(State::gauge), [0, 1, 2]);
        assert_eq!(all.map(|s| s.as_str().parse::<State>()), all.map(Ok));
        assert_eq!(serde_json::to_string(&State::HalfOpen).expect("json"), "\"half_open\"");
    }
}
