//! `vigil alerts backtest`: replays stored samples (and breaker transitions) through the same
//! [`AlertEngine`] the daemon runs, with time injected, one round per probe interval, baselines
//! grown by the daemon's own [`Baselines`] from the rollups before the window (read once per
//! target and hour: one sample barely moves a week's P95), with the daemon's baseline guard
//! (samples in trouble held out, shifts adopted after `baseline.adopt_after`); and reports the
//! incidents that would have opened, how long each lasted and how long after the first bad
//! probe it opened (time to detect). Pure: the caller reads storage.
//!
//! Breaker transitions are the stored ones, as they happened; with `--set breaker.…` (k of n:
//! `breaker.failure_k`, `breaker.failure_n`) the breaker itself is replayed from the samples, one
//! [`Breaker`] per target judged against the replayed baselines, and the stored ones are set aside.

use super::rules::AlertEngine;
use super::rules::BaselineP95;
use super::rules::BreakerChange;
use super::rules::Round;
use super::rules::RoundProbe;
use super::settings::RuleConfig;
use super::AlertStatus;
use super::Notification;
use crate::config::BaselineConfig;
use crate::decide::baseline::{exceeds_failover, Baselines, LatencyP95, Metric};
use crate::decide::breaker::{Breaker, BreakerSettings, Probe};
use crate::vocab::breaker::State;
use crate::vocab::records::{BreakerTransition, Rollup};
use crate::vocab::sample::Sample;
use crate::vocab::target::Target;
use chrono::{DateTime, Utc};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// Sets every `--set` in order (`alerts.*` onto `cfg`, `breaker.*` onto `breaker`), then checks
/// what only holds between keys (`error_k <= error_n`, `failure_k <= failure_n`, whichever was
/// set first). True when a `breaker.*` key was set: the breaker is then replayed from the samples.
pub fn set_all(cfg: &mut RuleConfig, breaker: &mut BreakerSettings, assignments: &[String]) -> Result<bool, String> {
    let mut replay_breaker = false;
    for a in assignments {
        match a.trim().strip_prefix("breaker.") {
            Some(b) => {
                set_breaker(breaker, b)?;
                replay_breaker = true;
            }
            None => set(cfg, a)?,
        }
    }
    if cfg.error_n < cfg.error_k {
        return Err(format!(
            "--set: needs alerts.error_k <= alerts.error_n (k = {}, n = {})",
            cfg.error_k, cfg.error_n
        ));
    }
    if breaker.failure_n < breaker.consecutive_failures {
        return Err(format!(
            "--set: needs breaker.failure_k <= breaker.failure_n (k = {}, n = {})",
            breaker.consecutive_failures, breaker.failure_n
        ));
    }
    Ok(replay_breaker)
}

/// Sets one breaker rule by its `[breaker]` key (`failure_k=3`, after `breaker.`), within the
/// config's bounds; `consecutive_failures = N` sets k = n = N, as in the config.
fn set_breaker(b: &mut BreakerSettings, assignment: &str) -> Result<(), String> {
    let (key, value) =
        assignment.split_once('=').ok_or_else(|| format!("--set breaker.{assignment}: expected KEY=VALUE"))?;
    let (key, value) = (key.trim(), value.trim());
    let bad = |what: &str| format!("--set breaker.{key}={value}: {what}");
    let int = |lo: u32, hi: u32| {
        value.parse::<u32>().ok().filter(|v| (lo..=hi).contains(v)).ok_or_else(|| bad(&format!("must be {lo} to {hi}")))
    };
    match key {
        "consecutive_failures" => (b.consecutive_failures, b.failure_n) = (int(1, 1000)?, int(1, 1000)?),
        "failure_k" => b.consecutive_failures = int(2, 100)?,
        "failure_n" => b.failure_n = int(2, 100)?,
        "latency_trips" => b.latency_trips = int(1, 1000)?,
        "open_for" => {
            let d = crate::config::parse_duration("--set breaker.open_for", value).map_err(|e| e.to_string())?;
            b.open_for = chrono::Duration::from_std(d).map_err(|_| bad("out of range"))?;
        }
        _ => return Err(bad("unknown key (consecutive_failures, failure_k, failure_n, latency_trips, open_for)")),
    }
    Ok(())
}

/// Sets one rule threshold by its `[alerts]` key (`--set alerts.latency_k=2`); `error_probes = N`
/// sets `error_k` = `error_n` = N, as in the config.
pub fn set(cfg: &mut RuleConfig, assignment: &str) -> Result<(), String> {
    let (key, value) = assignment.split_once('=').ok_or_else(|| format!("--set {assignment}: expected KEY=VALUE"))?;
    let key = key.trim().strip_prefix("alerts.").unwrap_or(key.trim());
    let value = value.trim();
    let bad = |what: &str| format!("--set alerts.{key}={value}: {what}");
    let int = || value.parse::<usize>().map_err(|_| bad("expected a whole number"));
    let num =
        || value.parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0).ok_or_else(|| bad("expected a number"));
    match key {
        "latency_factor" => cfg.latency_factor = num()?,
        "latency_k" => cfg.latency_k = int()?.max(1),
        "latency_n" => cfg.latency_n = int()?.max(1),
        "error_probes" => {
            let n = int()?.clamp(1, 1000) as u32;
            (cfg.error_probes, cfg.error_k, cfg.error_n) = (n, n, n);
        }
        "error_k" => match int()? {
            k @ 2..=100 => cfg.error_k = k as u32,
            _ => return Err(bad("must be 2 to 100: a single failure never counts as trouble")),
        },
        "error_n" => match int()? {
            n @ 2..=100 => cfg.error_n = n as u32,
            _ => return Err(bad("must be 2 to 100")),
        },
        "resolve_after" => cfg.resolve_after = int()?.max(1) as u32,
        "flap_window" => cfg.flap_window = int()?.max(2),
        "flap_high" => cfg.flap_high = num()?,
        "flap_low" => cfg.flap_low = num()?,
        "renotify" => cfg.renotify = crate::config::parse_duration("--set alerts.renotify", value).map_err(|e| e.to_string())?,
        _ => return Err(bad("unknown key (latency_factor, latency_k, latency_n, error_probes, error_k, error_n, resolve_after, flap_window, flap_high, flap_low, renotify)")),
    }
    if cfg.latency_n < cfg.latency_k {
        return Err(bad("needs alerts.latency_k <= alerts.latency_n"));
    }
    if cfg.flap_low >= cfg.flap_high {
        return Err(bad("needs alerts.flap_low < alerts.flap_high"));
    }
    Ok(())
}

/// One incident the replay opened.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Incident {
    /// Incident key (the PagerDuty dedup key).
    pub incident: String,
    /// What it is about (target id, provider, or `region R`).
    pub subject: String,
    /// Every kind it carried while open, sorted.
    pub kinds: Vec<String>,
    /// When it would have paged.
    pub opened_at: DateTime<Utc>,
    /// When it would have resolved; `None` if still open at the end of the window.
    pub resolved_at: Option<DateTime<Utc>>,
    /// Open for this long (to the end of the window when still open).
    pub duration_s: i64,
    /// Opened this long after the first bad probe (failure or over the latency threshold) of its targets.
    pub time_to_detect_s: Option<i64>,
    /// Messages it sent: the page, updates, reminders and the resolve.
    pub notifications: u32,
}

/// Per subject × kind: how many incidents carried the kind, and for how long in total.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KindSummary {
    /// Target id, provider, or `region R`.
    pub subject: String,
    /// Alert kind.
    pub kind: String,
    /// Incidents that carried it.
    pub incidents: u32,
    /// Their summed duration.
    pub total_s: i64,
    /// Mean time to detect, where known.
    pub mean_time_to_detect_s: Option<f64>,
}

/// What a replay found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BacktestReport {
    /// First round's start.
    pub from: Option<DateTime<Utc>>,
    /// Last round's end.
    pub until: Option<DateTime<Utc>>,
    /// Samples replayed.
    pub samples: usize,
    /// Rounds evaluated.
    pub rounds: usize,
    /// Pages: incidents opened.
    pub pages: usize,
    /// Every message (pages, updates, reminders, resolves).
    pub notifications: usize,
    /// The incidents, in opening order.
    pub incidents: Vec<Incident>,
    /// Per subject × kind.
    pub by_kind: Vec<KindSummary>,
}

impl BacktestReport {
    /// The report as a table for people.
    pub fn render_table(&self) -> String {
        let mut out = format!(
            "{} samples, {} rounds: {} pages ({} messages)\n\n",
            self.samples, self.rounds, self.pages, self.notifications
        );
        out.push_str(&format!(
            "{:<56} {:<20} {:>9} {:>11} {:>9}\n",
            "SUBJECT", "KIND", "INCIDENTS", "TOTAL", "MEAN TTD"
        ));
        for k in &self.by_kind {
            out.push_str(&format!(
                "{:<56} {:<20} {:>9} {:>10}s {:>9}\n",
                k.subject,
                k.kind,
                k.incidents,
                k.total_s,
                k.mean_time_to_detect_s.map(|v| format!("{v:.0}s")).unwrap_or_else(|| "-".into())
            ));
        }
        out.push_str(&format!("\n{:<56} {:<25} {:>9} {:>6}  KINDS\n", "INCIDENT", "OPENED", "DURATION", "TTD"));
        for i in &self.incidents {
            out.push_str(&format!(
                "{:<56} {:<25} {:>8}s {:>6}  {}{}\n",
                i.subject,
                i.opened_at.format("%Y-%m-%d %H:%M:%SZ"),
                i.duration_s,
                i.time_to_detect_s.map(|v| format!("{v}s")).unwrap_or_else(|| "-".into()),
                i.kinds.join(","),
                if i.resolved_at.is_none() { " (still open)" } else { "" }
            ));
        }
        out
    }
}

/// Replays `samples` (any order) with `transitions` through an engine built from `rules`, one
/// round per `interval`, baselines seeded from `prior` rollups (the hours before the window);
/// with `breaker` set, the breaker is replayed from the samples instead of `transitions`.
pub fn replay(
    rules: RuleConfig,
    baseline: &BaselineConfig,
    interval: Duration,
    prior: &[Rollup],
    samples: &[Sample],
    transitions: &[BreakerTransition],
    breaker: Option<BreakerSettings>,
) -> BacktestReport {
    let transitions: &[BreakerTransition] = if breaker.is_some() { &[] } else { transitions };
    let mut replayed = breaker.map(BreakerReplay::new);
    let mut order: Vec<&Sample> = samples.iter().collect();
    order.sort_by_key(|s| s.started_at);
    let factor = rules.latency_factor;
    let mut engine = AlertEngine::new(rules);
    let mut report = BacktestReport {
        from: None,
        until: None,
        samples: samples.len(),
        rounds: 0,
        pages: 0,
        notifications: 0,
        incidents: Vec::new(),
        by_kind: Vec::new(),
    };
    let Some(first) = order.first().map(|s| s.started_at) else { return report };
    let step =
        chrono::Duration::from_std(interval.max(Duration::from_secs(1))).unwrap_or(chrono::Duration::seconds(60));
    let mut b = Baselines::new(baseline);
    b.load(prior, first);
    let mut trans: Vec<&BreakerTransition> = transitions.iter().collect();
    trans.sort_by_key(|t| t.at);
    let mut trans = trans.into_iter().peekable();
    let mut tracker = Tracker::default();
    // The daemon's baseline guard, replayed: samples taken with the breaker open or half-open, or
    // inside an open latency or error incident, are held out of the baseline.
    let mut breaker: HashMap<&Target, State> = HashMap::new();
    let mut in_trouble: std::collections::HashSet<String> = Default::default();
    let mut shifts = Vec::new();
    let mut changes = Vec::new();
    // A baseline moves by one sample in thousands: recompute it once per target and hour.
    let mut cached: HashMap<crate::vocab::target::Target, (i64, BaselineP95)> = HashMap::new();
    let mut i = 0;
    let mut round_start = first;
    report.from = Some(first);
    while i < order.len() {
        let round_end = round_start + step;
        let mut batch: Vec<(&Sample, BaselineP95)> = Vec::new();
        while i < order.len() && order[i].started_at < round_end {
            let s = order[i];
            while let Some(t) = trans.next_if(|t| t.at <= s.started_at) {
                breaker.insert(&t.target, t.to_state);
                changes.push(change(t));
            }
            let troubled = breaker.get(&s.target).is_some_and(|st| *st != State::Closed)
                || (!in_trouble.is_empty() && in_trouble.contains(&s.target.id()));
            if let Some(adopted) = b.record_guarded(s, 1, troubled) {
                cached.remove(&adopted.target);
                shifts.push(adopted);
            }
            let hour = s.started_at.timestamp().div_euclid(3600);
            let base = match cached.get(&s.target) {
                Some((h, base)) if *h == hour => *base,
                _ => {
                    let base = BaselineP95 {
                        ttfb_p95_ms: b.get(&s.target, Metric::Ttfb, s.started_at).p95,
                        ttft_p95_ms: b.get(&s.target, Metric::Ttft, s.started_at).p95,
                    };
                    cached.insert(s.target.clone(), (hour, base));
                    base
                }
            };
            for t in replayed.as_mut().map(|r| r.step(s, base)).unwrap_or_default() {
                breaker.insert(&s.target, t.to_state);
                changes.push(change(&t));
            }
            tracker.observe(s, base, factor);
            batch.push((s, base));
            i += 1;
        }
        while let Some(t) = trans.next_if(|t| t.at < round_end) {
            breaker.insert(&t.target, t.to_state);
            changes.push(change(t));
        }
        let changes = std::mem::take(&mut changes);
        if !batch.is_empty() || !changes.is_empty() {
            let probes = batch
                .iter()
                .map(|(s, base)| RoundProbe { sample: s, baseline: *base, elsewhere: Default::default() })
                .collect();
            let notes = engine.evaluate(
                &Round { probes, breaker: changes, shifts: std::mem::take(&mut shifts), ..Round::default() },
                round_end,
            );
            report.rounds += 1;
            tracker.take(&notes, round_end, &mut report);
            in_trouble = engine.in_trouble().into_iter().collect();
        }
        report.until = Some(round_end);
        // Jump over gaps (the daemon was down) instead of evaluating empty rounds one by one.
        round_start = match order.get(i) {
            Some(next) if next.started_at >= round_end + step => {
                let skipped = (next.started_at - round_end).num_milliseconds() / step.num_milliseconds().max(1);
                round_end + step * skipped as i32
            }
            _ => round_end,
        };
    }
    let until = report.until.unwrap_or(first);
    for idx in tracker.open.values() {
        if let Some(inc) = report.incidents.get_mut(*idx) {
            inc.duration_s = (until - inc.opened_at).num_seconds();
        }
    }
    report.by_kind = summarize(&report.incidents);
    report
}

/// The breaker replayed from the samples: one [`Breaker`] per target, as the daemon keeps them.
struct BreakerReplay {
    settings: BreakerSettings,
    breakers: HashMap<Target, Breaker>,
}

impl BreakerReplay {
    fn new(settings: BreakerSettings) -> Self {
        BreakerReplay { settings, breakers: HashMap::new() }
    }

    /// Feeds one sample (judged against the baseline it was replayed with): the transitions it
    /// caused, an open breaker's half-open step first.
    fn step(&mut self, s: &Sample, base: BaselineP95) -> Vec<BreakerTransition> {
        let b = self.breakers.entry(s.target.clone()).or_insert_with(|| Breaker::new(self.settings, s.started_at));
        let p95 = LatencyP95 { ttfb: base.ttfb_p95_ms, ttft: base.ttft_p95_ms };
        let half_open = b.tick(s.started_at);
        let decided = b.observe(Probe::from(s), p95, s.started_at);
        half_open.into_iter().chain(decided).map(|t| t.to_record(&s.target)).collect()
    }
}

fn change(t: &BreakerTransition) -> BreakerChange {
    BreakerChange { target: t.target.clone(), from: t.from_state, to: t.to_state, reason: t.reason.clone() }
}

/// Follows incidents through the notifications and bad streaks through the samples.
#[derive(Default)]
struct Tracker {
    /// Incident key → index in `report.incidents`.
    open: HashMap<String, usize>,
    /// Target id → start of its current run of bad probes.
    bad_since: HashMap<String, DateTime<Utc>>,
    /// Provider → target ids seen.
    targets: HashMap<String, Vec<String>>,
}

impl Tracker {
    fn observe(&mut self, s: &Sample, base: BaselineP95, factor: f64) {
        // The engine's own predicate, at the latency factor the rules use.
        let p95 = LatencyP95 { ttfb: base.ttfb_p95_ms, ttft: base.ttft_p95_ms };
        let bad = s.outcome.is_failure() || exceeds_failover(s.ttfb_ms, s.ttft_ms, p95, factor);
        let id = s.target.id();
        let known = self.targets.entry(s.target.provider.to_string()).or_default();
        if !known.contains(&id) {
            known.push(id.clone());
        }
        if bad {
            self.bad_since.entry(id).or_insert(s.started_at);
        } else {
            self.bad_since.remove(&id);
        }
    }

    fn detect(&self, n: &Notification, opened: DateTime<Utc>) -> Option<i64> {
        let mut ids: Vec<String> = n.alerts.iter().filter_map(|a| a.target.clone()).collect();
        if ids.is_empty() && !n.provider.is_empty() {
            ids = self.targets.get(&n.provider).cloned().unwrap_or_default();
        }
        ids.iter().filter_map(|id| self.bad_since.get(id)).min().map(|since| (opened - *since).num_seconds())
    }

    fn take(&mut self, notes: &[Notification], now: DateTime<Utc>, report: &mut BacktestReport) {
        for n in notes {
            report.notifications += 1;
            let key = n.incident_key();
            let kinds = n.alerts.iter().map(|a| a.kind.as_str().to_string());
            match (n.status, self.open.get(&key).copied()) {
                (AlertStatus::Firing, None) => {
                    report.pages += 1;
                    let mut k: Vec<String> = kinds.collect();
                    k.sort();
                    k.dedup();
                    report.incidents.push(Incident {
                        incident: key.clone(),
                        subject: n.subject.clone(),
                        kinds: k,
                        opened_at: now,
                        resolved_at: None,
                        duration_s: 0,
                        time_to_detect_s: self.detect(n, now),
                        notifications: 1,
                    });
                    self.open.insert(key, report.incidents.len() - 1);
                }
                (AlertStatus::Firing, Some(idx)) => {
                    if let Some(inc) = report.incidents.get_mut(idx) {
                        inc.notifications += 1;
                        inc.kinds.extend(kinds);
                        inc.kinds.sort();
                        inc.kinds.dedup();
                    }
                }
                (AlertStatus::Resolved, Some(idx)) => {
                    self.open.remove(&key);
                    if let Some(inc) = report.incidents.get_mut(idx) {
                        inc.notifications += 1;
                        inc.resolved_at = Some(now);
                        inc.duration_s = (now - inc.opened_at).num_seconds();
                    }
                }
                (AlertStatus::Resolved, None) => {}
            }
        }
    }
}

fn summarize(incidents: &[Incident]) -> Vec<KindSummary> {
    let mut m: BTreeMap<(String, String), (u32, i64, Vec<i64>)> = BTreeMap::new();
    for i in incidents {
        for k in &i.kinds {
            let e = m.entry((i.subject.clone(), k.clone())).or_default();
            e.0 += 1;
            e.1 += i.duration_s;
            e.2.extend(i.time_to_detect_s);
        }
    }
    m.into_iter()
        .map(|((subject, kind), (n, total, ttd))| KindSummary {
            subject,
            kind,
            incidents: n,
            total_s: total,
            mean_time_to_detect_s: (!ttd.is_empty()).then(|| ttd.iter().sum::<i64>() as f64 / ttd.len() as f64),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::vocab::sample::Outcome;

    /// A day at a 60 s interval of one target failing one probe in three, beside a healthy one.
    fn hidden_trouble() -> Vec<Sample> {
        let start = DateTime::parse_from_rfc3339("2026-11-30T00:00:00Z").expect("time").with_timezone(&Utc);
        let mut out = Vec::new();
        for i in 0..1440i64 {
            let at = start + chrono::Duration::seconds(60 * i);
            for (name, failing) in [("lb", i % 3 == 1), ("fine", false)] {
                let t = Target::new(name.into(), "m".into(), None, "eu".into());
                let mut s = Sample::new(t, at, at);
                if failing {
                    s.outcome = Outcome::ServerError;
                    s.error = Some("503 from one host behind the balancer".into());
                } else {
                    (s.ttfb_ms, s.ttft_ms) = (Some(120.0), Some(240.0));
                }
                out.push(s);
            }
        }
        out
    }

    fn replayed(sets: &[&str]) -> BacktestReport {
        let config = Config::from_toml("region = \"eu\"", &std::collections::BTreeMap::new()).expect("config");
        let mut rules = RuleConfig::from_config(&config);
        let mut b =
            BreakerSettings::from_config(&config.breaker, crate::decide::health::Failover::of(&config.baseline));
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        let breaker = set_all(&mut rules, &mut b, &sets).expect("sets").then_some(b);
        replay(rules, &config.baseline, Duration::from_secs(60), &[], &hidden_trouble(), &[], breaker)
    }

    #[test]
    fn the_breaker_replayed_with_k_of_n_opens_on_one_failure_in_three() {
        let opened = |r: &BacktestReport| {
            r.incidents.iter().filter(|i| i.kinds.iter().any(|k| k == "breaker_open")).cloned().collect::<Vec<_>>()
        };
        // Stored transitions (none here) as they happened; in a row the breaker never opens either.
        assert!(opened(&replayed(&[])).is_empty());
        assert!(opened(&replayed(&["breaker.consecutive_failures=3"])).is_empty(), "3 in a row never holds");
        let k_of_n = opened(&replayed(&["breaker.failure_k=3", "breaker.failure_n=7"]));
        assert!(!k_of_n.is_empty(), "3 of the last 7 opens it");
        assert!(k_of_n.iter().all(|i| i.subject == "lb/m"), "only the failing target: {k_of_n:?}");
        let first = k_of_n[0].time_to_detect_s.expect("time to detect");
        assert!(first <= 7 * 60, "opened within 7 probes of the first failure: {first} s");
    }

    #[test]
    fn breaker_sets_are_checked_like_the_config() {
        let mut rules = RuleConfig::with_defaults("eu");
        let config = Config::from_toml("", &std::collections::BTreeMap::new()).expect("config");
        let fresh =
            || BreakerSettings::from_config(&config.breaker, crate::decide::health::Failover::of(&config.baseline));
        let mut b = fresh();
        assert_eq!(set_all(&mut rules, &mut b, &[]), Ok(false), "nothing set: the stored transitions");
        let sets = ["breaker.failure_n=10".to_string(), "breaker.failure_k=4".to_string()];
        assert_eq!(set_all(&mut rules, &mut b, &sets), Ok(true));
        assert_eq!((b.consecutive_failures, b.failure_n), (4, 10));
        let mut b = fresh();
        let e = set_all(&mut rules, &mut b, &["breaker.failure_k=5".to_string()]).expect_err("k above n");
        assert!(e.contains("breaker.failure_k <= breaker.failure_n"), "{e}");
        for (set, why) in [
            ("breaker.failure_k=1", "2 to 100"),
            ("breaker.nope=1", "unknown key"),
            ("breaker.open_for=soon", "open_for"),
        ] {
            let e = set_all(&mut rules, &mut fresh(), &[set.to_string()]).expect_err(set);
            assert!(e.contains(why), "{set}: {e}");
        }
    }

    #[test]
    fn one_failure_in_three_never_pages_in_a_row_and_pages_once_at_the_recommended_k_of_n() {
        let errors = |r: &BacktestReport| {
            r.incidents.iter().filter(|i| i.kinds.iter().any(|k| k == "errors")).cloned().collect::<Vec<_>>()
        };
        assert!(errors(&replayed(&[])).is_empty(), "2 in a row never holds");
        let k_of_n = replayed(&["alerts.error_k=3", "alerts.error_n=10"]);
        let found = errors(&k_of_n);
        assert_eq!(found.len(), 1, "one incident for the whole day: {found:?}");
        assert_eq!(found[0].subject, "lb/m");
        let detect = found[0].time_to_detect_s.expect("time to detect");
        assert!(detect <= 10 * 60, "paged within 10 probes of the first failure: {detect} s");
        assert!(found[0].resolved_at.is_none(), "it holds while the trouble lasts");
    }

    #[test]
    fn set_all_checks_the_pair_whichever_comes_first() {
        let config = Config::from_toml("", &std::collections::BTreeMap::new()).expect("config");
        let mut b =
            BreakerSettings::from_config(&config.breaker, crate::decide::health::Failover::of(&config.baseline));
        let mut rules = RuleConfig::with_defaults("eu");
        let both = ["alerts.error_k=3".to_string(), "alerts.error_n=10".to_string()];
        assert_eq!(set_all(&mut rules, &mut b, &both), Ok(false), "k then n");
        assert_eq!((rules.error_k, rules.error_n), (3, 10));
        let mut rules = RuleConfig::with_defaults("eu");
        let e = set_all(&mut rules, &mut b, &["alerts.error_k=3".to_string()]).expect_err("k above the default n");
        assert!(e.contains("error_k <= alerts.error_n"), "{e}");
        let e = set(&mut rules, "alerts.error_k=1").expect_err("k of 1");
        assert!(e.contains("single failure"), "{e}");
        set(&mut rules, "alerts.error_probes=4").expect("shorthand");
        assert_eq!((rules.error_k, rules.error_n, rules.error_probes), (4, 4, 4));
    }
}
