//! The rule engine: pure, with `now` injected. Each round it is fed the round's samples (with
//! their baselines and what other regions see), breaker transitions and credit readings, and
//! returns the notifications to enqueue, grouped per provider. Its state is plain serde data so
//! it survives a restart through `Store::save_alert_state`.

use super::{Alert, AlertKind, AlertStatus, Notification, Scope, Severity};
use crate::balance::burn_rate;
use crate::config::{Config, MaintenanceWindow};
use crate::probe::outcome::Outcome;
use crate::sample::Sample;
use crate::target::Target;
use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// Rule thresholds, taken from the validated config.
#[derive(Debug, Clone)]
pub struct RuleConfig {
    /// Region label of this instance.
    pub region: String,
    /// latency_degraded fires above this × baseline P95.
    pub failover_factor: f64,
    /// Recent ok probes whose P95 is compared (10).
    pub latency_window: usize,
    /// Fewer recent ok probes than this: no verdict (5).
    pub latency_min_samples: usize,
    /// Failed probes in a row for `errors` (and replies in a row for `adherence_failed`).
    pub error_probes: u32,
    /// …all within this span (`breaker.failure_window`, 120 s by default).
    pub error_window: Duration,
    /// Evaluations a rule must stay clear before its alert resolves.
    pub resolve_after: u32,
    /// Re-send a firing alert no more often than this.
    pub renotify: Duration,
    /// Daily probe spend guard.
    pub daily_budget_usd: f64,
    /// region_unhealthy: at least this share of the round's targets failed with network-ish outcomes…
    pub unhealthy_fraction: f64,
    /// …out of at least this many targets.
    pub unhealthy_min_targets: usize,
    /// Per-provider windows during which notifications are held back.
    pub maintenance: Vec<MaintenanceWindow>,
    /// Link put in messages.
    pub status_url: Option<String>,
}

impl RuleConfig {
    /// Rule thresholds from the config, with the fixed defaults for the rest.
    pub fn from_config(c: &Config) -> Self {
        RuleConfig {
            region: c.region.clone(),
            failover_factor: c.baseline.failover_factor,
            latency_window: 10,
            latency_min_samples: 5,
            error_probes: c.alerts.error_probes.max(1),
            error_window: c.breaker.failure_window,
            resolve_after: c.alerts.resolve_after.max(1),
            renotify: c.alerts.renotify,
            daily_budget_usd: c.probe.daily_budget_usd,
            unhealthy_fraction: 0.6,
            unhealthy_min_targets: 3,
            maintenance: c.alerts.maintenance.clone(),
            status_url: c.alerts.status_url.clone(),
        }
    }
}

/// Baseline P95s of one target in this region (`None` while too few samples).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Baseline {
    /// TTFB P95, ms.
    pub ttfb_p95_ms: Option<f64>,
    /// TTFT P95, ms.
    pub ttft_p95_ms: Option<f64>,
}

/// What the other regions see for the same target (from shared storage).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Elsewhere {
    /// Other regions probing the target.
    pub regions: u32,
    /// Of those, how many currently see it degraded or failing.
    pub degraded: u32,
}

/// One sample of this round with its context.
#[derive(Debug, Clone)]
pub struct Probe<'a> {
    /// The sample.
    pub sample: &'a Sample,
    /// The target's baseline in this region.
    pub baseline: Baseline,
    /// Other regions' view of the same target.
    pub elsewhere: Elsewhere,
}

/// A breaker transition as the breaker reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct BreakerChange {
    /// Target (with region).
    pub target: Target,
    /// `closed`, `half_open` or `open`.
    pub from: String,
    /// New state.
    pub to: String,
    /// Why, for humans.
    pub reason: String,
}

/// Recent credit readings of one provider, oldest first, with its thresholds.
#[derive(Debug, Clone, PartialEq)]
pub struct CreditCheck {
    /// Provider name.
    pub provider: String,
    /// (time, USD left), oldest first; the last is the current balance.
    pub readings: Vec<(DateTime<Utc>, f64)>,
    /// `balance.min_usd`.
    pub min_usd: f64,
    /// `balance.warn_hours`.
    pub warn_hours: f64,
}

/// Everything one evaluation looks at.
#[derive(Debug, Clone, Default)]
pub struct Round<'a> {
    /// This round's samples (one per target).
    pub probes: Vec<Probe<'a>>,
    /// Breaker transitions since the last round.
    pub breaker: Vec<BreakerChange>,
    /// Credit readings taken since the last round.
    pub credits: Vec<CreditCheck>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct History {
    /// Last outcomes with their start times and error text, newest last.
    recent: VecDeque<(DateTime<Utc>, Outcome, Option<String>)>,
    /// (TTFB, TTFT) of the last ok probes.
    ok_latency: VecDeque<(Option<f64>, Option<f64>)>,
    /// Last adherence verdicts.
    adherence: VecDeque<bool>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Tracked {
    alert: Alert,
    clear_streak: u32,
    last_notified: Option<DateTime<Utc>>,
}

/// The engine's memory; serialized as one JSON document per region.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct EngineState {
    histories: BTreeMap<String, History>,
    alerts: BTreeMap<String, Tracked>,
    budget_day: Option<NaiveDate>,
    spent_usd: f64,
    /// Last reading-based credit verdict per provider.
    credit_reading_low: BTreeMap<String, bool>,
}

/// A rule's answer for one alert key this round.
struct Verdict {
    alert: Alert,
    holds: bool,
}

/// A lifecycle change worth telling people about.
struct Event {
    alert: Alert,
    reminder: bool,
}

/// The alert rule engine.
#[derive(Debug, Clone)]
pub struct AlertEngine {
    cfg: RuleConfig,
    state: EngineState,
}

fn is_network(o: Outcome) -> bool {
    matches!(o, Outcome::Timeout | Outcome::DnsError | Outcome::ConnectError | Outcome::TlsError)
}

/// Failures that count for `errors`; auth, model and payment failures have their own kinds.
fn is_generic_failure(o: Outcome) -> bool {
    o.is_failure() && !matches!(o, Outcome::AuthError | Outcome::ModelUnavailable | Outcome::PaymentRequired)
}

/// Nearest-rank P95.
fn p95(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let rank = ((values.len() as f64) * 0.95).ceil() as usize;
    values.get(rank.saturating_sub(1)).copied()
}

fn push_capped<T>(q: &mut VecDeque<T>, v: T, cap: usize) {
    q.push_back(v);
    while q.len() > cap.max(1) {
        q.pop_front();
    }
}

fn scope_of(e: Elsewhere, degraded_here: bool) -> Scope {
    if e.degraded > 0 && degraded_here {
        Scope::Global { affected: e.degraded + 1, regions: e.regions + 1 }
    } else {
        Scope::Regional
    }
}

impl AlertEngine {
    /// A fresh engine.
    pub fn new(cfg: RuleConfig) -> Self {
        AlertEngine { cfg, state: EngineState::default() }
    }

    /// An engine resuming from saved state; unreadable state starts fresh (and says why).
    pub fn restore(cfg: RuleConfig, saved: Option<&serde_json::Value>) -> Self {
        let state = match saved.map(|v| serde_json::from_value::<EngineState>(v.clone())) {
            Some(Ok(s)) => s,
            Some(Err(e)) => {
                tracing::warn!(region = %cfg.region, error = %e, "saved alert state unreadable; starting fresh");
                EngineState::default()
            }
            None => EngineState::default(),
        };
        AlertEngine { cfg, state }
    }

    /// State to persist with `Store::save_alert_state`.
    pub fn state_json(&self) -> serde_json::Value {
        serde_json::to_value(&self.state).unwrap_or(serde_json::Value::Null)
    }

    /// Alerts currently firing (silenced ones included), most severe first.
    pub fn firing(&self) -> Vec<Alert> {
        let mut v: Vec<Alert> = self.state.alerts.values().map(|t| t.alert.clone()).collect();
        v.sort_by(|a, b| (a.severity, a.kind, &a.dedup_key).cmp(&(b.severity, b.kind, &b.dedup_key)));
        v
    }

    /// True when `provider` is inside a maintenance window at `now`.
    pub fn in_maintenance(&self, provider: &str, now: DateTime<Utc>) -> bool {
        self.cfg.maintenance.iter().any(|w| w.provider == provider && w.start <= now && now < w.end)
    }

    /// Feeds one round and returns the notifications to enqueue, grouped per provider.
    pub fn evaluate(&mut self, round: &Round<'_>, now: DateTime<Utc>) -> Vec<Notification> {
        let mut verdicts = Vec::new();
        let mut events = Vec::new();
        self.track_budget(round, now, &mut verdicts);
        for p in &round.probes {
            self.record(p.sample);
        }
        let unhealthy = self.region_verdict(round, now, &mut verdicts);
        if !unhealthy {
            self.target_verdicts(round, now, &mut verdicts);
        }
        self.credit_verdicts(round, now, unhealthy, &mut verdicts);
        for v in verdicts {
            if let Some(e) = self.apply(v, now) {
                events.push(e);
            }
        }
        self.breaker_events(round, now, unhealthy, &mut events);
        self.group(events, now)
    }

    fn history_key(t: &Target) -> String {
        format!("{}|{}", t.region, t.id())
    }

    fn record(&mut self, s: &Sample) {
        let n = self.cfg.error_probes as usize;
        let window = self.cfg.latency_window;
        let h = self.state.histories.entry(Self::history_key(&s.target)).or_default();
        push_capped(&mut h.recent, (s.started_at, s.outcome, s.error.clone()), n);
        if s.outcome == Outcome::Ok {
            push_capped(&mut h.ok_latency, (s.ttfb_ms, s.ttft_ms), window);
        }
        if let Some(ok) = s.adherence_ok {
            push_capped(&mut h.adherence, ok, n);
        }
    }

    fn track_budget(&mut self, round: &Round<'_>, now: DateTime<Utc>, out: &mut Vec<Verdict>) {
        let today = now.date_naive();
        if self.state.budget_day != Some(today) {
            self.state.budget_day = Some(today);
            self.state.spent_usd = 0.0;
        }
        if round.probes.is_empty() {
            return;
        }
        self.state.spent_usd += round.probes.iter().filter_map(|p| p.sample.cost_usd).sum::<f64>();
        let spent = self.state.spent_usd;
        let budget = self.cfg.daily_budget_usd;
        let mut a = Alert::new(
            AlertKind::ProbeBudgetExceeded,
            &self.cfg.region,
            "",
            None,
            format!("probes spent ${spent:.4} today (UTC), over probe.daily_budget_usd ${budget:.2}"),
        );
        a.current = Some(spent);
        a.baseline = Some(budget);
        out.push(Verdict { alert: a, holds: spent > budget });
    }

    /// Returns whether the round looks like this instance's own network failing.
    fn region_verdict(&mut self, round: &Round<'_>, _now: DateTime<Utc>, out: &mut Vec<Verdict>) -> bool {
        let total = round.probes.len();
        if total == 0 {
            return false;
        }
        let outcomes: Vec<Outcome> = round.probes.iter().map(|p| p.sample.outcome).collect();
        let network = outcomes.iter().filter(|o| is_network(**o)).count();
        let failing = outcomes.iter().filter(|o| o.is_failure()).count();
        let holds = total >= self.cfg.unhealthy_min_targets
            && ((network as f64) / (total as f64) >= self.cfg.unhealthy_fraction || failing == total);
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for o in outcomes.iter().filter(|o| o.is_failure()) {
            *counts.entry(o.as_str()).or_default() += 1;
        }
        let detail: Vec<String> = counts.iter().map(|(k, v)| format!("{k} ×{v}")).collect();
        let mut a = Alert::new(
            AlertKind::RegionUnhealthy,
            &self.cfg.region,
            "",
            None,
            format!(
                "{failing} of {total} targets failed in the same round from this instance ({}): likely this instance's own network, per-provider alerts held back",
                detail.join(", ")
            ),
        );
        a.current = Some(failing as f64);
        a.baseline = Some(total as f64);
        out.push(Verdict { alert: a, holds });
        holds
    }

    fn target_verdicts(&mut self, round: &Round<'_>, _now: DateTime<Utc>, out: &mut Vec<Verdict>) {
        let region = self.cfg.region.clone();
        let n = self.cfg.error_probes as usize;
        // auth is per provider (one credential): any refused probe of the provider this round.
        let mut auth: BTreeMap<String, Option<&Sample>> = BTreeMap::new();
        for p in &round.probes {
            let s = p.sample;
            let t = &s.target;
            let entry = auth.entry(t.provider.clone()).or_insert(None);
            if s.outcome == Outcome::AuthError && entry.is_none() {
                *entry = Some(s);
            }
            let Some(h) = self.state.histories.get(&Self::history_key(t)) else { continue };

            // errors: N consecutive generic failures within the window.
            let last: Vec<_> = h.recent.iter().rev().take(n).collect();
            let span_ok = match (last.last(), last.first()) {
                (Some(first), Some(newest)) => {
                    (newest.0 - first.0).to_std().unwrap_or(Duration::ZERO) <= self.cfg.error_window
                }
                _ => false,
            };
            let errors_hold = last.len() >= n && last.iter().all(|(_, o, _)| is_generic_failure(*o)) && span_ok;
            let outcomes: Vec<&str> = last.iter().rev().map(|(_, o, _)| o.as_str()).collect();
            let mut a = Alert::new(
                AlertKind::Errors,
                &region,
                &t.provider,
                Some(t),
                format!(
                    "{} consecutive failed probes ({}){}",
                    last.len(),
                    outcomes.join(", "),
                    s.error.as_deref().map(|e| format!(": {}", truncate(e, 200))).unwrap_or_default()
                ),
            );
            a.current = Some(last.len() as f64);
            a.scope = scope_of(p.elsewhere, errors_hold);
            out.push(Verdict { alert: a, holds: errors_hold });

            // model_unavailable: the latest probe says the model is gone.
            let gone = s.outcome == Outcome::ModelUnavailable;
            let mut a = Alert::new(
                AlertKind::ModelUnavailable,
                &region,
                &t.provider,
                Some(t),
                format!(
                    "model {} is not served{}",
                    t.model,
                    s.error.as_deref().map(|e| format!(": {}", truncate(e, 200))).unwrap_or_default()
                ),
            );
            a.scope = scope_of(p.elsewhere, gone);
            out.push(Verdict { alert: a, holds: gone });

            // adherence_failed: the last N replies that were judged all disobeyed the prompt.
            if s.adherence_ok.is_some() {
                let judged: Vec<bool> = h.adherence.iter().rev().take(n).copied().collect();
                let holds = judged.len() >= n && judged.iter().all(|ok| !ok);
                let mut a = Alert::new(
                    AlertKind::AdherenceFailed,
                    &region,
                    &t.provider,
                    Some(t),
                    format!("the last {} replies did not follow the probe's system prompt (JSON shape)", judged.len()),
                );
                a.scope = scope_of(p.elsewhere, holds);
                out.push(Verdict { alert: a, holds });
            }

            // latency_degraded: recent P95 of TTFB or TTFT above factor × baseline P95.
            if s.outcome == Outcome::Ok && h.ok_latency.len() >= self.cfg.latency_min_samples {
                if let Some(v) = self.latency_verdict(h, p, &region) {
                    out.push(v);
                }
            }
        }
        for (provider, refused) in auth {
            let detail = refused.and_then(|s| s.error.as_deref()).map(|e| format!(": {}", truncate(e, 200)));
            let a = Alert::new(
                AlertKind::AuthError,
                &region,
                &provider,
                None,
                format!("the API key was refused{}", detail.unwrap_or_default()),
            );
            out.push(Verdict { alert: a, holds: refused.is_some() });
        }
    }

    fn latency_verdict(&self, h: &History, p: &Probe<'_>, region: &str) -> Option<Verdict> {
        let factor = self.cfg.failover_factor;
        let t = &p.sample.target;
        let mut ttfb: Vec<f64> = h.ok_latency.iter().filter_map(|(b, _)| *b).collect();
        let mut ttft: Vec<f64> = h.ok_latency.iter().filter_map(|(_, t)| *t).collect();
        let min = self.cfg.latency_min_samples;
        let cands = [
            ("TTFB", (ttfb.len() >= min).then(|| p95(&mut ttfb)).flatten(), p.baseline.ttfb_p95_ms, ttfb.len()),
            ("TTFT", (ttft.len() >= min).then(|| p95(&mut ttft)).flatten(), p.baseline.ttft_p95_ms, ttft.len()),
        ];
        let mut judged = false;
        let mut worst: Option<(&str, f64, f64, usize)> = None;
        for (name, recent, base, n) in cands {
            let (Some(recent), Some(base)) = (recent, base) else { continue };
            judged = true;
            let ratio = recent / base.max(f64::MIN_POSITIVE);
            if recent > factor * base && worst.is_none_or(|(_, r, b, _)| ratio > r / b.max(f64::MIN_POSITIVE)) {
                worst = Some((name, recent, base, n));
            }
        }
        if !judged {
            return None;
        }
        let holds = worst.is_some();
        let mut a = match worst {
            Some((name, recent, base, n)) => {
                let mut a = Alert::new(
                    AlertKind::LatencyDegraded,
                    region,
                    &t.provider,
                    Some(t),
                    format!(
                        "{name} P95 {recent:.0} ms over the last {n} ok probes is above {factor} × baseline P95 {base:.0} ms"
                    ),
                );
                a.current = Some(recent);
                a.baseline = Some(base);
                a
            }
            None => Alert::new(
                AlertKind::LatencyDegraded,
                region,
                &t.provider,
                Some(t),
                "latency back within baseline".into(),
            ),
        };
        a.scope = scope_of(p.elsewhere, holds);
        Some(Verdict { alert: a, holds })
    }

    fn credit_verdicts(&mut self, round: &Round<'_>, now: DateTime<Utc>, unhealthy: bool, out: &mut Vec<Verdict>) {
        let region = self.cfg.region.clone();
        let mut per_provider: BTreeMap<String, Option<Alert>> = BTreeMap::new();
        for c in &round.credits {
            let Some(&(_, balance)) = c.readings.last() else { continue };
            let rate = burn_rate(&c.readings);
            let low = balance < c.min_usd;
            let runs_out = rate.as_ref().and_then(|r| r.hours_to_zero).is_some_and(|h| h <= c.warn_hours);
            self.state.credit_reading_low.insert(c.provider.clone(), low || runs_out);
            let burn = rate
                .as_ref()
                .filter(|r| r.usd_per_hour > 0.0)
                .map(|r| {
                    let when = r
                        .zero_at
                        .map(|z| {
                            format!(
                                "; projected to run out at {} (in {:.1} h)",
                                z.format("%Y-%m-%d %H:%M UTC"),
                                r.hours_to_zero.unwrap_or(0.0)
                            )
                        })
                        .unwrap_or_default();
                    format!(", burning ${:.2}/h{when}", r.usd_per_hour)
                })
                .unwrap_or_default();
            let mut a = Alert::new(
                AlertKind::CreditLow,
                &region,
                &c.provider,
                None,
                if low {
                    format!("credit ${balance:.2} is under balance.min_usd ${:.2}{burn}", c.min_usd)
                } else {
                    format!("credit ${balance:.2}{burn} (within balance.warn_hours {} h)", c.warn_hours)
                },
            );
            if low {
                a.severity = Severity::Error;
            }
            a.current = Some(balance);
            a.baseline = Some(c.min_usd);
            per_provider.insert(c.provider.clone(), Some(a));
        }
        if !unhealthy {
            for p in &round.probes {
                let s = p.sample;
                let slot = per_provider.entry(s.target.provider.clone()).or_insert(None);
                if s.outcome == Outcome::PaymentRequired {
                    let mut a = Alert::new(
                        AlertKind::CreditLow,
                        &region,
                        &s.target.provider,
                        None,
                        format!(
                            "a probe of {} was refused for lack of credit (402){}",
                            s.target.id(),
                            s.error.as_deref().map(|e| format!(": {}", truncate(e, 200))).unwrap_or_default()
                        ),
                    );
                    a.severity = Severity::Critical;
                    *slot = Some(a);
                }
            }
        }
        let _ = now;
        for (provider, alert) in per_provider {
            let reading_low = self.state.credit_reading_low.get(&provider).copied().unwrap_or(false);
            let holds = alert.as_ref().is_some_and(|a| a.severity == Severity::Critical) || reading_low;
            let alert = alert.unwrap_or_else(|| {
                Alert::new(AlertKind::CreditLow, &region, &provider, None, "credit back above the thresholds".into())
            });
            out.push(Verdict { alert, holds });
        }
    }

    fn breaker_events(&mut self, round: &Round<'_>, now: DateTime<Utc>, unhealthy: bool, events: &mut Vec<Event>) {
        let region = self.cfg.region.clone();
        for c in &round.breaker {
            let t = &c.target;
            if c.to == "open" && !unhealthy {
                let a = Alert::new(
                    AlertKind::BreakerOpen,
                    &region,
                    &t.provider,
                    Some(t),
                    format!("circuit breaker opened ({} → open): {}", c.from, c.reason),
                );
                if let Some(e) = self.apply(Verdict { alert: a, holds: true }, now) {
                    events.push(e);
                }
            } else if c.to == "closed" {
                let key = super::dedup_key(
                    &region,
                    &t.provider,
                    Some(t.model.as_str()).filter(|m| !m.is_empty()),
                    t.route.as_deref(),
                    AlertKind::BreakerOpen,
                );
                // breaker_closed resolves breaker_open's incident, so it carries that key.
                if let Some(tracked) = self.state.alerts.remove(&key) {
                    if tracked.last_notified.is_some() {
                        let mut a = Alert::new(
                            AlertKind::BreakerClosed,
                            &region,
                            &t.provider,
                            Some(t),
                            format!("circuit breaker closed ({} → closed): {}", c.from, c.reason),
                        );
                        a.status = AlertStatus::Resolved;
                        a.since = tracked.alert.since;
                        a.dedup_key = key;
                        events.push(Event { alert: a, reminder: false });
                    }
                }
            }
        }
    }

    /// Lifecycle: fire once, re-notify after `renotify`, resolve after `resolve_after` clear evaluations.
    fn apply(&mut self, v: Verdict, now: DateTime<Utc>) -> Option<Event> {
        let silenced = !v.alert.provider.is_empty() && self.in_maintenance(&v.alert.provider, now);
        let key = v.alert.dedup_key.clone();
        let renotify = chrono::Duration::from_std(self.cfg.renotify).unwrap_or(chrono::Duration::hours(1));
        match (self.state.alerts.get_mut(&key), v.holds) {
            (None, true) => {
                let mut alert = v.alert;
                alert.since = now;
                let notify = !silenced;
                self.state.alerts.insert(
                    key,
                    Tracked { alert: alert.clone(), clear_streak: 0, last_notified: notify.then_some(now) },
                );
                if silenced {
                    tracing::info!(provider = %alert.provider, kind = %alert.kind, "alert fired inside a maintenance window; not notified");
                }
                notify.then_some(Event { alert, reminder: false })
            }
            (Some(t), true) => {
                t.clear_streak = 0;
                let since = t.alert.since;
                t.alert = v.alert;
                t.alert.since = since;
                let due = t.last_notified.is_none_or(|last| now - last >= renotify);
                if silenced || !due {
                    return None;
                }
                let reminder = t.last_notified.is_some();
                t.last_notified = Some(now);
                Some(Event { alert: t.alert.clone(), reminder })
            }
            (Some(t), false) => {
                t.clear_streak += 1;
                if t.clear_streak < self.cfg.resolve_after {
                    return None;
                }
                let notified = t.last_notified.is_some();
                let mut alert = t.alert.clone();
                self.state.alerts.remove(&key);
                // A resolve is sent whenever its firing was: it closes the incident and wakes nobody.
                alert.status = AlertStatus::Resolved;
                alert.summary = format!("resolved: {}", alert.summary);
                notified.then_some(Event { alert, reminder: false })
            }
            (None, false) => None,
        }
    }

    /// One notification per (provider, status) of this evaluation.
    fn group(&self, events: Vec<Event>, now: DateTime<Utc>) -> Vec<Notification> {
        let mut groups: BTreeMap<(String, AlertStatus), Vec<Event>> = BTreeMap::new();
        for e in events {
            groups.entry((e.alert.provider.clone(), e.alert.status)).or_default().push(e);
        }
        groups
            .into_iter()
            .map(|((provider, status), mut evs)| {
                evs.sort_by_key(|e| (e.alert.severity, e.alert.kind));
                let reminder = evs.iter().all(|e| e.reminder);
                let alerts: Vec<Alert> = evs.into_iter().map(|e| e.alert).collect();
                let mut h = Sha256::new();
                h.update(format!("{}|{provider}|{}|{}", self.cfg.region, status.as_str(), now.to_rfc3339()));
                for a in &alerts {
                    h.update(format!("|{}@{}", a.dedup_key, a.since.to_rfc3339()));
                }
                Notification {
                    key: hex::encode(h.finalize()),
                    region: self.cfg.region.clone(),
                    provider,
                    status,
                    reminder,
                    test: false,
                    created_at: now,
                    status_url: self.cfg.status_url.clone(),
                    alerts,
                }
            })
            .collect()
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(max).collect();
        t.push('…');
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t0() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-30T10:00:00Z").expect("time").with_timezone(&Utc)
    }

    fn at(minutes: i64) -> DateTime<Utc> {
        t0() + chrono::Duration::minutes(minutes)
    }

    fn cfg() -> RuleConfig {
        RuleConfig {
            region: "eu-west-1".into(),
            failover_factor: 2.0,
            latency_window: 10,
            latency_min_samples: 5,
            error_probes: 2,
            error_window: Duration::from_secs(120),
            resolve_after: 3,
            renotify: Duration::from_secs(3600),
            daily_budget_usd: 5.0,
            unhealthy_fraction: 0.6,
            unhealthy_min_targets: 3,
            maintenance: vec![],
            status_url: None,
        }
    }

    fn target(provider: &str, model: &str) -> Target {
        Target { provider: provider.into(), model: model.into(), route: None, region: "eu-west-1".into() }
    }

    fn sample(t: &Target, outcome: Outcome, when: DateTime<Utc>) -> Sample {
        let mut s = Sample::new(t.clone(), when, when);
        s.outcome = outcome;
        if outcome == Outcome::Ok {
            s.ttfb_ms = Some(150.0);
            s.ttft_ms = Some(300.0);
        } else {
            s.error = Some(format!("{outcome} from upstream"));
        }
        s
    }

    /// Runs one round of the given samples with default context.
    fn round(engine: &mut AlertEngine, samples: &[Sample], now: DateTime<Utc>) -> Vec<Notification> {
        let probes = samples
            .iter()
            .map(|s| Probe { sample: s, baseline: Baseline::default(), elsewhere: Elsewhere::default() })
            .collect();
        engine.evaluate(&Round { probes, ..Round::default() }, now)
    }

    fn kinds(ns: &[Notification]) -> Vec<(String, AlertStatus, Vec<AlertKind>)> {
        ns.iter().map(|n| (n.provider.clone(), n.status, n.alerts.iter().map(|a| a.kind).collect())).collect()
    }

    /// Four healthy targets of four providers plus `bad` with the given outcome.
    fn fleet(bad: Outcome, when: DateTime<Utc>) -> Vec<Sample> {
        let mut v: Vec<Sample> = ["openai", "anthropic", "groq", "gemini"]
            .iter()
            .map(|p| sample(&target(p, "m"), Outcome::Ok, when))
            .collect();
        v.push(sample(&target("openrouter", "m"), bad, when));
        v
    }

    #[test]
    fn errors_fire_once_renotify_after_the_interval_and_resolve_after_clear_probes() {
        let mut e = AlertEngine::new(cfg());
        assert!(round(&mut e, &fleet(Outcome::ServerError, at(0)), at(0)).is_empty(), "one failure is not enough");
        let fired = round(&mut e, &fleet(Outcome::Timeout, at(1)), at(1));
        assert_eq!(kinds(&fired), vec![("openrouter".into(), AlertStatus::Firing, vec![AlertKind::Errors])]);
        assert!(fired[0].alerts[0].summary.contains("server_error, timeout"), "{}", fired[0].alerts[0].summary);
        for m in 2..60 {
            assert!(round(&mut e, &fleet(Outcome::ServerError, at(m)), at(m)).is_empty(), "minute {m}: no repeat");
        }
        let again = round(&mut e, &fleet(Outcome::ServerError, at(61)), at(61));
        assert_eq!(again.len(), 1);
        assert!(again[0].reminder);
        assert_eq!(again[0].alerts[0].since, at(1), "since stays the first firing time");
        assert!(round(&mut e, &fleet(Outcome::Ok, at(62)), at(62)).is_empty());
        assert!(round(&mut e, &fleet(Outcome::Ok, at(63)), at(63)).is_empty(), "hysteresis holds the alert");
        let resolved = round(&mut e, &fleet(Outcome::Ok, at(64)), at(64));
        assert_eq!(kinds(&resolved), vec![("openrouter".into(), AlertStatus::Resolved, vec![AlertKind::Errors])]);
        assert_eq!(resolved[0].alerts[0].dedup_key, fired[0].alerts[0].dedup_key);
        assert!(e.firing().is_empty());
    }

    #[test]
    fn a_flap_inside_the_hysteresis_keeps_the_alert_without_new_messages() {
        let mut e = AlertEngine::new(cfg());
        round(&mut e, &fleet(Outcome::ServerError, at(0)), at(0));
        assert_eq!(round(&mut e, &fleet(Outcome::ServerError, at(1)), at(1)).len(), 1);
        assert!(round(&mut e, &fleet(Outcome::Ok, at(2)), at(2)).is_empty());
        assert!(round(&mut e, &fleet(Outcome::ServerError, at(3)), at(3)).is_empty());
        assert!(round(&mut e, &fleet(Outcome::ServerError, at(4)), at(4)).is_empty(), "still the same incident");
        assert_eq!(e.firing().len(), 1);
    }

    #[test]
    fn failures_further_apart_than_the_window_do_not_fire() {
        let mut e = AlertEngine::new(cfg());
        round(&mut e, &fleet(Outcome::ServerError, at(0)), at(0));
        assert!(round(&mut e, &fleet(Outcome::ServerError, at(5)), at(5)).is_empty());
    }

    #[test]
    fn alerts_of_one_provider_in_one_evaluation_form_one_message() {
        let mut e = AlertEngine::new(cfg());
        let a = target("openrouter", "llama");
        let b = target("openrouter", "mixtral");
        let ok = target("openai", "gpt");
        let ok2 = target("groq", "llama");
        let ok3 = target("gemini", "flash");
        let mk = |when| {
            vec![
                sample(&a, Outcome::Ok, when),
                sample(&b, Outcome::ModelUnavailable, when),
                sample(&ok, Outcome::Ok, when),
                sample(&ok2, Outcome::Ok, when),
                sample(&ok3, Outcome::Ok, when),
            ]
        };
        let first = round(&mut e, &mk(at(0)), at(0));
        assert_eq!(kinds(&first), vec![("openrouter".into(), AlertStatus::Firing, vec![AlertKind::ModelUnavailable])]);
        let second = round(&mut e, &mk(at(1)), at(1));
        assert!(second.is_empty(), "model_unavailable is not repeated: {second:?}");
        let mut c = mk(at(2));
        c[2] = sample(&ok, Outcome::AuthError, at(2));
        let third = round(&mut e, &c, at(2));
        assert_eq!(kinds(&third), vec![("openai".into(), AlertStatus::Firing, vec![AlertKind::AuthError])]);
        // Two targets of one provider failing together arrive in one notification.
        let mut e = AlertEngine::new(cfg());
        let both = |when| {
            vec![
                sample(&a, Outcome::ServerError, when),
                sample(&b, Outcome::StreamError, when),
                sample(&ok, Outcome::Ok, when),
                sample(&ok2, Outcome::Ok, when),
                sample(&ok3, Outcome::Ok, when),
            ]
        };
        round(&mut e, &both(at(0)), at(0));
        let grouped = round(&mut e, &both(at(1)), at(1));
        assert_eq!(grouped.len(), 1);
        assert_eq!(grouped[0].alerts.len(), 2);
        assert!(grouped[0].title().contains("openrouter"));
    }

    #[test]
    fn most_targets_failing_at_once_raise_one_region_alert_instead_of_per_provider_ones() {
        let mut e = AlertEngine::new(cfg());
        let providers = ["openrouter", "openai", "anthropic", "groq", "gemini"];
        let down = |when| -> Vec<Sample> {
            providers
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    let o = if i < 4 { Outcome::ConnectError } else { Outcome::Ok };
                    sample(&target(p, "m"), o, when)
                })
                .collect()
        };
        let mut all = Vec::new();
        for m in 0..5 {
            all.extend(round(&mut e, &down(at(m)), at(m)));
        }
        assert_eq!(kinds(&all), vec![(String::new(), AlertStatus::Firing, vec![AlertKind::RegionUnhealthy])]);
        assert!(all[0].alerts[0].summary.starts_with("4 of 5 targets failed"), "{}", all[0].alerts[0].summary);
        assert!(e.firing().iter().all(|a| a.kind == AlertKind::RegionUnhealthy));
    }

    #[test]
    fn one_provider_failing_is_not_a_region_problem() {
        let mut e = AlertEngine::new(cfg());
        round(&mut e, &fleet(Outcome::ConnectError, at(0)), at(0));
        let n = round(&mut e, &fleet(Outcome::ConnectError, at(1)), at(1));
        assert_eq!(kinds(&n), vec![("openrouter".into(), AlertStatus::Firing, vec![AlertKind::Errors])]);
    }

    fn credit(readings: &[(i64, f64)]) -> CreditCheck {
        CreditCheck {
            provider: "openrouter".into(),
            readings: readings.iter().map(|(m, v)| (at(*m), *v)).collect(),
            min_usd: 20.0,
            warn_hours: 24.0,
        }
    }

    #[test]
    fn a_five_dollar_reading_fires_credit_low_exactly_once() {
        let mut e = AlertEngine::new(cfg());
        let mut sent = Vec::new();
        for i in 0..10 {
            let now = at(i * 5);
            let r = Round { credits: vec![credit(&[(i * 5, 5.0)])], ..Round::default() };
            sent.extend(e.evaluate(&r, now));
        }
        assert_eq!(kinds(&sent), vec![("openrouter".into(), AlertStatus::Firing, vec![AlertKind::CreditLow])]);
        let a = &sent[0].alerts[0];
        assert_eq!((a.current, a.baseline), (Some(5.0), Some(20.0)));
        assert!(a.summary.contains("$5.00 is under balance.min_usd $20.00"), "{}", a.summary);
    }

    #[test]
    fn a_burn_rate_reaching_zero_within_warn_hours_fires_and_says_when() {
        let mut e = AlertEngine::new(cfg());
        // $100 falling $5 per hour: $80 at 14:00, zero 16 h later, inside 24 h.
        let readings: Vec<(i64, f64)> = (0..=4).map(|h| (h * 60, 100.0 - 5.0 * h as f64)).collect();
        let n = e.evaluate(&Round { credits: vec![credit(&readings)], ..Round::default() }, at(240));
        assert_eq!(n.len(), 1);
        let s = &n[0].alerts[0].summary;
        assert!(s.contains("burning $5.00/h"), "{s}");
        assert!(s.contains("run out at 2026-12-01 06:00 UTC (in 16.0 h)"), "{s}");
    }

    #[test]
    fn a_slow_burn_with_plenty_left_stays_quiet() {
        let mut e = AlertEngine::new(cfg());
        let readings: Vec<(i64, f64)> = (0..=4).map(|h| (h * 60, 100.0 - 0.5 * h as f64)).collect();
        assert!(e.evaluate(&Round { credits: vec![credit(&readings)], ..Round::default() }, at(240)).is_empty());
    }

    #[test]
    fn a_402_from_a_probe_raises_credit_low_at_once() {
        let mut e = AlertEngine::new(cfg());
        let n = round(&mut e, &fleet(Outcome::PaymentRequired, at(0)), at(0));
        assert_eq!(kinds(&n), vec![("openrouter".into(), AlertStatus::Firing, vec![AlertKind::CreditLow])]);
        assert_eq!(n[0].alerts[0].severity, Severity::Critical);
    }

    fn latency_probe(s: &Sample) -> Probe<'_> {
        Probe {
            sample: s,
            baseline: Baseline { ttfb_p95_ms: Some(200.0), ttft_p95_ms: Some(400.0) },
            elsewhere: Elsewhere { regions: 3, degraded: 2 },
        }
    }

    #[test]
    fn latency_degraded_needs_enough_recent_samples_and_says_how_global_it_is() {
        let mut e = AlertEngine::new(cfg());
        let t = target("openrouter", "llama");
        let mut out = Vec::new();
        for m in 0..10 {
            let mut s = sample(&t, Outcome::Ok, at(m));
            s.ttft_ms = Some(1000.0 + m as f64);
            let n = e.evaluate(&Round { probes: vec![latency_probe(&s)], ..Round::default() }, at(m));
            if m < 4 {
                assert!(n.is_empty(), "minute {m}: too few samples to judge");
            }
            out.extend(n);
        }
        assert_eq!(out.len(), 1, "{out:?}");
        let a = &out[0].alerts[0];
        assert_eq!(a.kind, AlertKind::LatencyDegraded);
        assert_eq!(a.baseline, Some(400.0));
        assert_eq!(a.current, Some(1004.0), "P95 of the five samples so far");
        assert_eq!(a.scope, Scope::Global { affected: 3, regions: 4 });
        assert!(a.summary.starts_with("TTFT P95 1004 ms"), "{}", a.summary);
    }

    #[test]
    fn latency_within_factor_does_not_fire() {
        let mut e = AlertEngine::new(cfg());
        let t = target("openrouter", "llama");
        for m in 0..12 {
            let s = sample(&t, Outcome::Ok, at(m));
            assert!(e.evaluate(&Round { probes: vec![latency_probe(&s)], ..Round::default() }, at(m)).is_empty());
        }
    }

    #[test]
    fn maintenance_silences_notifications_but_records_the_alert() {
        let mut c = cfg();
        c.maintenance = vec![MaintenanceWindow { provider: "openrouter".into(), start: at(0), end: at(30) }];
        let mut e = AlertEngine::new(c);
        for m in 0..30 {
            assert!(round(&mut e, &fleet(Outcome::ServerError, at(m)), at(m)).is_empty(), "minute {m}");
        }
        assert_eq!(e.firing().len(), 1, "recorded while silenced");
        let after = round(&mut e, &fleet(Outcome::ServerError, at(30)), at(30));
        assert_eq!(kinds(&after), vec![("openrouter".into(), AlertStatus::Firing, vec![AlertKind::Errors])]);
        assert!(!after[0].reminder);
    }

    #[test]
    fn state_survives_a_restart_without_repeating_or_losing_the_alert() {
        let mut e = AlertEngine::new(cfg());
        round(&mut e, &fleet(Outcome::ServerError, at(0)), at(0));
        assert_eq!(round(&mut e, &fleet(Outcome::ServerError, at(1)), at(1)).len(), 1);
        let saved = serde_json::to_string(&e.state_json()).expect("state serializes");
        let parsed: serde_json::Value = serde_json::from_str(&saved).expect("state is JSON");
        let mut e = AlertEngine::restore(cfg(), Some(&parsed));
        assert!(round(&mut e, &fleet(Outcome::ServerError, at(2)), at(2)).is_empty());
        for m in 3..5 {
            round(&mut e, &fleet(Outcome::Ok, at(m)), at(m));
        }
        let resolved = round(&mut e, &fleet(Outcome::Ok, at(5)), at(5));
        assert_eq!(kinds(&resolved), vec![("openrouter".into(), AlertStatus::Resolved, vec![AlertKind::Errors])]);
    }

    #[test]
    fn breaker_open_then_closed_resolves_the_same_incident() {
        let mut e = AlertEngine::new(cfg());
        let t = target("groq", "llama");
        let change = |from: &str, to: &str| BreakerChange {
            target: t.clone(),
            from: from.into(),
            to: to.into(),
            reason: "3 failed probes in 120s".into(),
        };
        let open = e.evaluate(&Round { breaker: vec![change("closed", "open")], ..Round::default() }, at(0));
        assert_eq!(kinds(&open), vec![("groq".into(), AlertStatus::Firing, vec![AlertKind::BreakerOpen])]);
        let half = e.evaluate(&Round { breaker: vec![change("open", "half_open")], ..Round::default() }, at(5));
        assert!(half.is_empty());
        let closed = e.evaluate(&Round { breaker: vec![change("half_open", "closed")], ..Round::default() }, at(6));
        assert_eq!(kinds(&closed), vec![("groq".into(), AlertStatus::Resolved, vec![AlertKind::BreakerClosed])]);
        assert_eq!(closed[0].alerts[0].dedup_key, open[0].alerts[0].dedup_key);
        assert_eq!(closed[0].alerts[0].severity, Severity::Info);
    }

    #[test]
    fn spending_over_the_daily_budget_fires_once_and_clears_next_day() {
        let mut e = AlertEngine::new(cfg());
        let t = target("openai", "gpt");
        let mut sent = Vec::new();
        for m in 0..12 {
            let mut s = sample(&t, Outcome::Ok, at(m));
            s.cost_usd = Some(0.5);
            sent.extend(round(&mut e, &[s], at(m)));
        }
        assert_eq!(kinds(&sent), vec![(String::new(), AlertStatus::Firing, vec![AlertKind::ProbeBudgetExceeded])]);
        assert_eq!(sent[0].alerts[0].current, Some(5.5));
        let tomorrow = at(24 * 60);
        let mut later = Vec::new();
        for i in 0..3 {
            let when = tomorrow + chrono::Duration::minutes(i);
            let mut s = sample(&t, Outcome::Ok, when);
            s.cost_usd = Some(0.01);
            later.extend(round(&mut e, &[s], when));
        }
        assert_eq!(kinds(&later), vec![(String::new(), AlertStatus::Resolved, vec![AlertKind::ProbeBudgetExceeded])]);
    }

    #[test]
    fn repeated_adherence_failures_fire() {
        let mut e = AlertEngine::new(cfg());
        let t = target("openai", "gpt");
        let mut sent = Vec::new();
        for m in 0..3 {
            let mut s = sample(&t, Outcome::Ok, at(m));
            s.adherence_ok = Some(false);
            sent.extend(round(&mut e, &[s], at(m)));
        }
        assert_eq!(kinds(&sent), vec![("openai".into(), AlertStatus::Firing, vec![AlertKind::AdherenceFailed])]);
    }
}
